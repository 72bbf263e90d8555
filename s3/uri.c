/* uri.c: S3's URI encoding and canonical query strings (SigV4 rules). */
#include "uri.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int is_unreserved(unsigned char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
	       c == '~';
}

int uri_encode(struct buf *out, const char *s, size_t len, int keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	if (len > ((size_t)-1) / 3)
		return -ENOMEM;
	int rc = buf_reserve(out, len * 3);
	if (rc)
		return rc;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (is_unreserved(c) || (keep_slash && c == '/')) {
			out->data[out->len++] = (char)c;
		} else {
			out->data[out->len++] = '%';
			out->data[out->len++] = hex[c >> 4];
			out->data[out->len++] = hex[c & 15];
		}
	}
	out->data[out->len] = '\0';
	return 0;
}

struct encoded_param {
	char *name;
	char *value;
};

static int cmp_param(const void *a, const void *b)
{
	const struct encoded_param *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : strcmp(x->value, y->value);
}

static char *encode_dup(const char *s)
{
	struct buf b = BUF_INIT;
	if (!s)
		s = "";
	if (uri_encode(&b, s, strlen(s), 0)) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

int uri_canonical_query(struct buf *out, const struct uri_param *params,
			size_t n)
{
	if (n == 0)
		return 0;
	struct encoded_param *e = calloc(n, sizeof(*e));
	if (!e)
		return -ENOMEM;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		e[i].name = encode_dup(params[i].name);
		e[i].value = encode_dup(params[i].value);
		if (!e[i].name || !e[i].value) {
			rc = -ENOMEM;
			goto out;
		}
	}
	qsort(e, n, sizeof(*e), cmp_param);
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (i)
			rc = buf_putc(out, '&');
		if (!rc)
			rc = buf_printf(out, "%s=%s", e[i].name, e[i].value);
	}
out:
	for (size_t i = 0; i < n; i++) {
		free(e[i].name);
		free(e[i].value);
	}
	free(e);
	return rc;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int uri_decode(char *s, int plus_is_space)
{
	char *w = s;
	for (const char *r = s; *r; r++) {
		if (*r == '%') {
			int hi = hexval(r[1]);
			int lo = hi < 0 ? -1 : hexval(r[2]);
			if (hi < 0 || lo < 0)
				return -EINVAL;
			*w++ = (char)(hi << 4 | lo);
			r += 2;
		} else if (*r == '+' && plus_is_space) {
			*w++ = ' ';
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
	return 0;
}
