/* ranges.c: a set of byte ranges, e.g. which parts of a cache file are present.
 *
 * Invariant (checked by ranges_check() in debug builds): for every i,
 * v[i].start < v[i].end, and v[i].end < v[i+1].start.
 */
#include "ranges.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#ifndef NDEBUG
static void ranges_check(const struct ranges *r)
{
	for (size_t i = 0; i < r->n; i++) {
		assert(r->v[i].start < r->v[i].end);
		assert(i + 1 == r->n || r->v[i].end < r->v[i + 1].start);
	}
}
#else
#define ranges_check(r) ((void)0)
#endif

void ranges_free(struct ranges *r)
{
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
}

/* Index of the first range whose end is >= pos (it may touch pos). */
static size_t first_reaching(const struct ranges *r, uint64_t pos)
{
	size_t lo = 0, hi = r->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (r->v[mid].end < pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Moves n ranges from v[from] to v[to] (n may be 0 while v is NULL). */
static void shift(struct ranges *r, size_t to, size_t from, size_t n)
{
	if (n)
		memmove(&r->v[to], &r->v[from], n * sizeof(*r->v));
}

static int reserve(struct ranges *r, size_t n)
{
	if (n <= r->cap)
		return 0;
	size_t cap = r->cap ? r->cap * 2 : 4;
	while (cap < n)
		cap *= 2;
	struct range *v = realloc(r->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	r->v = v;
	r->cap = cap;
	return 0;
}

int ranges_add(struct ranges *r, uint64_t start, uint64_t end)
{
	if (start >= end)
		return 0;
	/* ranges i..j-1 touch or overlap [start, end) and merge into one */
	size_t i = first_reaching(r, start);
	size_t j = i;
	while (j < r->n && r->v[j].start <= end)
		j++;
	if (i == j) {
		if (reserve(r, r->n + 1))
			return -ENOMEM;
		shift(r, i + 1, i, r->n - i);
		r->v[i] = (struct range){start, end};
		r->n++;
	} else {
		if (r->v[i].start < start)
			start = r->v[i].start;
		if (r->v[j - 1].end > end)
			end = r->v[j - 1].end;
		r->v[i] = (struct range){start, end};
		shift(r, i + 1, j, r->n - j);
		r->n -= j - i - 1;
	}
	ranges_check(r);
	return 0;
}

int ranges_remove(struct ranges *r, uint64_t start, uint64_t end)
{
	if (start >= end)
		return 0;
	size_t i = first_reaching(r, start + 1); /* first with end > start */
	if (i < r->n && r->v[i].start < start && r->v[i].end > end) {
		/* strictly inside one range: split it in two */
		if (reserve(r, r->n + 1))
			return -ENOMEM;
		shift(r, i + 1, i, r->n - i);
		r->v[i].end = start;
		r->v[i + 1].start = end;
		r->n++;
		ranges_check(r);
		return 0;
	}
	if (i < r->n && r->v[i].start < start) { /* keep its head */
		r->v[i].end = start;
		i++;
	}
	size_t j = i;
	while (j < r->n && r->v[j].end <= end)
		j++; /* wholly covered: dropped */
	if (j < r->n && r->v[j].start < end)
		r->v[j].start = end; /* keep its tail */
	shift(r, i, j, r->n - j);
	r->n -= j - i;
	ranges_check(r);
	return 0;
}

int ranges_first_gap(const struct ranges *r, uint64_t start, uint64_t end,
		     uint64_t *gs, uint64_t *ge)
{
	if (start >= end)
		return 0;
	size_t i = first_reaching(r, start + 1); /* first with end > start */
	if (i < r->n && r->v[i].start <= start)
		start = r->v[i++].end; /* start is covered: skip that range */
	if (start >= end)
		return 0;
	*gs = start;
	*ge = i < r->n && r->v[i].start < end ? r->v[i].start : end;
	return 1;
}

int ranges_contains(const struct ranges *r, uint64_t start, uint64_t end)
{
	uint64_t gs, ge;
	return !ranges_first_gap(r, start, end, &gs, &ge);
}

uint64_t ranges_bytes(const struct ranges *r)
{
	uint64_t total = 0;
	for (size_t i = 0; i < r->n; i++)
		total += r->v[i].end - r->v[i].start;
	return total;
}

int ranges_encode(const struct ranges *r, struct buf *out)
{
	int rc = 0;
	for (size_t i = 0; i < r->n && rc == 0; i++)
		rc = buf_printf(out, "%s%" PRIu64 "-%" PRIu64, i ? "," : "",
				r->v[i].start, r->v[i].end);
	return rc;
}

static int parse_u64(const char **p, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (*s < '0' || *s > '9')
		return -EINVAL;
	for (; *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*out = v;
	return 0;
}

int ranges_decode(const char *s, struct ranges *r)
{
	const char *p = s;
	int rc = 0;
	if (r->n)
		return -EINVAL;
	while (*p && rc == 0) {
		uint64_t a, b;
		if (r->n && *p++ != ',') {
			rc = -EINVAL;
			break;
		}
		if (parse_u64(&p, &a) || *p++ != '-' || parse_u64(&p, &b) ||
		    a >= b || (r->n && a <= r->v[r->n - 1].end)) {
			rc = -EINVAL;
			break;
		}
		rc = reserve(r, r->n + 1);
		if (!rc)
			r->v[r->n++] = (struct range){a, b};
	}
	if (rc)
		ranges_free(r);
	else
		ranges_check(r);
	return rc;
}
