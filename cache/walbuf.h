/* walbuf.h: a SQLite VFS that writes each WAL commit with one system call.
 *
 * SQLite writes a WAL frame as two writes (its 24-byte header, then the
 * page), so a commit of three pages is six pwrite()s. Through a walbuf
 * VFS the writes to a WAL file are gathered in memory and written
 * together when the commit frame's page arrives, or before anything
 * reads, syncs, sizes or truncates the file. What is gathered is never
 * committed: a crash before the write loses only a transaction SQLite
 * would not have counted anyway (no commit frame), and every other
 * connection reads only committed frames. Other files pass straight
 * through to the base VFS.
 *
 * Threading: a walbuf file is used by one connection at a time, as every
 * sqlite3_file is. Ownership: walbuf_new() registers the VFS and the
 * handle owns it; walbuf_free() unregisters it, after every connection
 * opened through it is closed.
 */
#ifndef TIERFS_WALBUF_H
#define TIERFS_WALBUF_H

#include <stddef.h>

/* gathered bytes, past which they go: SQLite's unix VFS writes at most
 * 128 KiB - 1 bytes in one call (it masks the length with 0x1ffff) */
#define WALBUF_MAX (64 * 1024)

struct walbuf;

/* Registers a VFS over the one named base (NULL: SQLite's default), under
 * a name of its own (walbuf_name()). 0, -ENOENT (no VFS base), -ENOMEM,
 * -EIO (SQLite refused it). */
int walbuf_new(const char *base, struct walbuf **out);

/* The name to pass to sqlite3_open_v2(). */
const char *walbuf_name(const struct walbuf *wb);

/* The writes made to WAL files through it, and the system calls that
 * carried them: for tests and counters. */
void walbuf_counts(const struct walbuf *wb, unsigned long *writes,
		   unsigned long *calls);

/* fn(ctx) is called when a write to a WAL file finds the disk full
 * (SQLITE_FULL), on the thread of the connection that writes: nonzero
 * when it made room, and the write is made again. Set before the first
 * connection opens. */
void walbuf_on_full(struct walbuf *wb, int (*fn)(void *ctx), void *ctx);

/* Unregisters and frees; NULL is fine. */
void walbuf_free(struct walbuf *wb);

#endif
