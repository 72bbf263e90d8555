/* buf.h: a growable byte buffer that stays NUL-terminated.
 *
 * Not thread-safe; a buf belongs to one owner. Every append returns 0 or
 * -ENOMEM and leaves the buffer unchanged on failure. buf_free() releases
 * the memory; buf_steal() hands it to the caller.
 */
#ifndef TIERFS_BUF_H
#define TIERFS_BUF_H

#include <stddef.h>

struct buf {
	char *data; /* owned; NUL-terminated when non-NULL */
	size_t len;
	size_t cap;
};

#define BUF_INIT                                                               \
	{                                                                      \
		NULL, 0, 0                                                     \
	}

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_puts(struct buf *b, const char *s);
int buf_putc(struct buf *b, char c);
int buf_printf(struct buf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void buf_reset(struct buf *b);
void buf_free(struct buf *b);
/* Returns the string (never NULL: "" for an empty buffer) and empties b. */
char *buf_steal(struct buf *b);

#endif
