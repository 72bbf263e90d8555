/* units.h: sizes as people write them on command lines ("10G", "512MiB").
 *
 * Pure functions, thread-safe. Suffixes K, M, G, T (any case) are powers of
 * 1024, optionally followed by "i", "iB" or "B"; no suffix means bytes.
 */
#ifndef TIERFS_UNITS_H
#define TIERFS_UNITS_H

#include <stdint.h>

/* 0, -EINVAL for text that is not a size, -ERANGE past 2^64-1. */
int units_parse_size(const char *s, uint64_t *out);

#endif
