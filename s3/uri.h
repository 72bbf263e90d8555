/* uri.h: S3's URI encoding and canonical query strings (SigV4 rules).
 *
 * Pure functions, thread-safe. Output goes into a caller-owned struct buf.
 * Encoding keeps only A-Z a-z 0-9 - _ . ~ (and '/' in paths) and writes
 * every other byte as %XX with upper-case hex, so keys holding spaces, '+',
 * '%', '=', '//' or UTF-8 round-trip exactly.
 */
#ifndef TIERFS_URI_H
#define TIERFS_URI_H

#include <stddef.h>

#include "buf.h"

struct uri_param {
	const char *name;
	const char *value; /* NULL or "": "name=" */
};

/* Appends s[0..len) encoded; keep_slash leaves '/' as is (object paths). */
int uri_encode(struct buf *out, const char *s, size_t len, int keep_slash);
/* Appends the canonical query: each name and value encoded, sorted by
 * encoded name then value, joined as "a=1&b=". */
int uri_canonical_query(struct buf *out, const struct uri_param *params,
			size_t n);
/* Decodes %XX (and, when plus_is_space, '+') in place; -EINVAL on a bad
 * escape. Used for keys S3 returns with encoding-type=url. */
int uri_decode(char *s, int plus_is_space);

#endif
