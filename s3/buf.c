/* buf.c: a growable byte buffer that stays NUL-terminated. */
#include "buf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t extra)
{
	if (extra > ((size_t)-1) / 2 - b->len)
		return -ENOMEM; /* also keeps len + extra + 1 from wrapping */
	if (b->len + extra + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 64;
	while (cap < b->len + extra + 1)
		cap *= 2;
	char *p = realloc(b->data, cap);
	if (!p)
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
	int rc = buf_reserve(b, len);
	if (rc)
		return rc;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int buf_puts(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_putc(struct buf *b, char c)
{
	return buf_append(b, &c, 1);
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	int rc = buf_reserve(b, (size_t)n);
	if (rc)
		return rc;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}

char *buf_steal(struct buf *b)
{
	char *s = b->data ? b->data : strdup("");
	b->data = NULL;
	b->len = b->cap = 0;
	return s;
}
