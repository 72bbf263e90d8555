/* ranges.h: a set of byte ranges, e.g. which parts of a cache file are present.
 *
 * Half-open ranges [start, end), kept sorted, disjoint and merged (no two
 * touch), so the set has one canonical form. Not thread-safe: the owner
 * (the data cache entry) locks. Operations are O(log n) to find and O(n)
 * to insert or split; sets stay small because neighbours merge.
 * Ownership: the set owns its array; ranges_free() releases it.
 */
#ifndef TIERFS_RANGES_H
#define TIERFS_RANGES_H

#include <stddef.h>
#include <stdint.h>

#include "../s3/buf.h"

struct range {
	uint64_t start;
	uint64_t end; /* exclusive */
};

struct ranges {
	struct range *v; /* owned; sorted, disjoint, non-adjacent */
	size_t n;
	size_t cap;
};

#define RANGES_INIT                                                            \
	{                                                                      \
		NULL, 0, 0                                                     \
	}

void ranges_free(struct ranges *r);
/* Adds [start, end), merging with neighbours. -ENOMEM; empty is a no-op. */
int ranges_add(struct ranges *r, uint64_t start, uint64_t end);
/* Removes [start, end), splitting a range when needed. -ENOMEM. */
int ranges_remove(struct ranges *r, uint64_t start, uint64_t end);
/* 1 when every byte of [start, end) is in the set (an empty range is). */
int ranges_contains(const struct ranges *r, uint64_t start, uint64_t end);
/* The first gap inside [start, end): 1 and [*gs, *ge), or 0 when none. */
int ranges_first_gap(const struct ranges *r, uint64_t start, uint64_t end,
		     uint64_t *gs, uint64_t *ge);
/* Bytes in the set. */
uint64_t ranges_bytes(const struct ranges *r);
/* "0-4096,8192-12288" (decimal, start-end); "" for the empty set. */
int ranges_encode(const struct ranges *r, struct buf *out);
/* Parses ranges_encode() output into an empty set; -EINVAL for text that
 * is not sorted, disjoint, non-adjacent ranges. */
int ranges_decode(const char *s, struct ranges *r);

#endif
