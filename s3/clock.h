/* clock.h: CLOCK_MONOTONIC in milliseconds, for deadlines and intervals.
 *
 * Thread-safe. (data.c keeps a CLOCK_MONOTONIC_COARSE one of its own: it
 * asks on every write.)
 */
#ifndef TIERFS_CLOCK_H
#define TIERFS_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t clock_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

#endif
