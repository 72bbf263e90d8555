/* retry.h: which S3 failures are retried, and how long to wait between tries.
 *
 * Pure functions, thread-safe; the random source is passed in so tests can
 * pin it. Backoff is exponential with full jitter: a try waits a uniform
 * random time in [0, min(max, base * 2^(attempt-1))].
 */
#ifndef TIERFS_RETRY_H
#define TIERFS_RETRY_H

#include <stdint.h>

/* What went wrong below HTTP, when no usable response arrived. */
enum retry_transport {
	RETRY_T_NONE = 0, /* a response arrived; look at its status */
	RETRY_T_CONNECT,  /* refused, unreachable, DNS, TLS handshake */
	RETRY_T_RESET,	  /* reset, closed early, partial body */
	RETRY_T_TIMEOUT,  /* connect, stall or attempt timeout */
	RETRY_T_FATAL,	  /* a local error no retry can fix */
};

/* 1 when the failure should be tried again. code is the S3 error code from
 * the body ("" or NULL when none). */
int retry_should_retry(enum retry_transport t, int http_status,
		       const char *code);
/* The wait before retry number attempt (1 = the first retry), in ms.
 * rnd is a uniformly random 64-bit value. */
unsigned retry_backoff_ms(unsigned attempt, unsigned base_ms, unsigned max_ms,
			  uint64_t rnd);

#endif
