/* walbuf.c: a SQLite VFS that writes each WAL commit with one system call.
 *
 * A WAL file (opened with SQLITE_OPEN_WAL) gets a struct wal_file in
 * front of the base VFS's file; any other file is the base VFS's file
 * itself, opened in place, with no layer between.
 *
 * States of a wal_file's buffer:
 *   EMPTY --xWrite--> GATHERING (buf holds [off, off + len) of the file)
 *   GATHERING --xWrite right after the end--> GATHERING
 *   GATHERING --the page after a commit frame's header, a write elsewhere,
 *      a write that would pass WALBUF_MAX, xRead, xSync, xTruncate,
 *      xFileSize, xFileControl, xClose--> written --> EMPTY
 * A write elsewhere flushes first, so the file sees the writes in the
 * order SQLite made them. A failed flush keeps nothing: SQLite gets the
 * error from the call that caused it and rolls the transaction back, as
 * it would for its own failed write.
 *
 * Frames: SQLite writes a frame as its 24-byte header and then its page,
 * at the next offset. A header's bytes 4..7 (big-endian) are the
 * database's size in pages after the commit for a commit frame, else 0.
 * The WAL's own header is 32 bytes at offset 0, so a 24-byte write is
 * always a frame header.
 *
 * A full disk: a write to a WAL file that fails with SQLITE_FULL asks the
 * hook walbuf_on_full() set for room, and is made again when it made
 * some. SQLite would roll the whole transaction back.
 */
#include "walbuf.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAL_FRAME_HEADER 24

struct walbuf {
	sqlite3_vfs vfs; /* first: SQLite hands back this pointer */
	sqlite3_vfs *base;
	char name[48];
	_Atomic unsigned long writes, calls;
	int (*on_full)(void *ctx);
	void *on_full_ctx;
};

struct wal_file {
	sqlite3_file file; /* first: pMethods is wal_methods */
	struct walbuf *wb;
	sqlite3_file *real; /* the base VFS's file, right after this */
	unsigned char *buf; /* owned; freed by wal_close() */
	size_t len;
	sqlite3_int64 off; /* where buf[0] goes */
	int commit;	   /* the last header gathered is a commit frame's */
};

#define WF(f) ((struct wal_file *)(f))
#define REAL(f) (WF(f)->real)

/* One write to the file, made again while a full disk's hook makes room
 * for it. SQLite's code, or SQLITE_OK. */
static int write_real(struct wal_file *w, const void *p, int n,
		      sqlite3_int64 off)
{
	struct walbuf *wb = w->wb;
	int rc;
	do {
		rc = w->real->pMethods->xWrite(w->real, p, n, off);
		atomic_fetch_add(&wb->calls, 1);
	} while ((rc & 0xff) == SQLITE_FULL && wb->on_full &&
		 wb->on_full(wb->on_full_ctx));
	return rc;
}

/* Writes what is gathered. SQLite's code, or SQLITE_OK. */
static int flush(struct wal_file *w)
{
	if (w->len == 0)
		return SQLITE_OK;
	int rc = write_real(w, w->buf, (int)w->len, w->off);
	w->len = 0;
	w->commit = 0;
	return rc;
}

/* Room for n more bytes in buf: 0, or -1 when they would pass
 * WALBUF_MAX (or memory is short), and the write goes on its own. The
 * buffer is allocated at the first write. */
static int room(struct wal_file *w, size_t n)
{
	if (w->len + n > WALBUF_MAX)
		return -1;
	if (!w->buf)
		w->buf = malloc(WALBUF_MAX);
	return w->buf ? 0 : -1;
}

static int wal_write(sqlite3_file *f, const void *p, int n, sqlite3_int64 off)
{
	struct wal_file *w = WF(f);
	atomic_fetch_add(&w->wb->writes, 1);
	/* elsewhere (what came first lands first), or past the buffer */
	if (w->len && (off != w->off + (sqlite3_int64)w->len ||
		       w->len + (size_t)n > WALBUF_MAX)) {
		int rc = flush(w);
		if (rc != SQLITE_OK)
			return rc;
	}
	if (room(w, (size_t)n) != 0) /* bigger than a buffer: on its own */
		return write_real(w, p, n, off);
	if (w->len == 0)
		w->off = off;
	memcpy(w->buf + w->len, p, (size_t)n);
	w->len += (size_t)n;
	if (n == WAL_FRAME_HEADER) {
		const unsigned char *h = p;
		w->commit = (h[4] | h[5] | h[6] | h[7]) != 0;
		return SQLITE_OK;
	}
	return w->commit ? flush(w) : SQLITE_OK; /* a commit frame's page */
}

static int wal_close(sqlite3_file *f)
{
	struct wal_file *w = WF(f);
	int rc = flush(w);
	int crc = w->real->pMethods->xClose(w->real);
	free(w->buf);
	w->buf = NULL;
	return rc != SQLITE_OK ? rc : crc;
}

static int wal_read(sqlite3_file *f, void *p, int n, sqlite3_int64 off)
{
	int rc = flush(WF(f));
	return rc != SQLITE_OK ? rc
			       : REAL(f)->pMethods->xRead(REAL(f), p, n, off);
}

static int wal_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	int rc = flush(WF(f));
	return rc != SQLITE_OK ? rc
			       : REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int wal_sync(sqlite3_file *f, int flags)
{
	int rc = flush(WF(f));
	return rc != SQLITE_OK ? rc : REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int wal_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	int rc = flush(WF(f));
	return rc != SQLITE_OK ? rc
			       : REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int wal_lock(sqlite3_file *f, int level)
{
	return REAL(f)->pMethods->xLock(REAL(f), level);
}

static int wal_unlock(sqlite3_file *f, int level)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), level);
}

static int wal_check_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int wal_file_control(sqlite3_file *f, int op, void *arg)
{
	int rc = flush(WF(f));
	return rc != SQLITE_OK
		       ? rc
		       : REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int wal_sector_size(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int wal_device_chars(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

/* version 1: SQLite neither maps a WAL file's shared memory (that is the
 * database file's) nor memory-maps the WAL, so nothing past xDevice-
 * Characteristics is ever asked of it */
static const sqlite3_io_methods wal_methods = {
	1,
	wal_close,
	wal_read,
	wal_write,
	wal_truncate,
	wal_sync,
	wal_file_size,
	wal_lock,
	wal_unlock,
	wal_check_reserved,
	wal_file_control,
	wal_sector_size,
	wal_device_chars,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
	NULL,
};

static int wb_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f,
		   int flags, int *out_flags)
{
	struct walbuf *wb = (struct walbuf *)vfs;
	if (!(flags & SQLITE_OPEN_WAL)) /* in place: no layer at all */
		return wb->base->xOpen(wb->base, name, f, flags, out_flags);
	struct wal_file *w = WF(f);
	memset(w, 0, sizeof(*w));
	w->wb = wb;
	w->real = (sqlite3_file *)(w + 1);
	int rc = wb->base->xOpen(wb->base, name, w->real, flags, out_flags);
	f->pMethods =
		rc == SQLITE_OK && w->real->pMethods ? &wal_methods : NULL;
	if (rc == SQLITE_OK && !f->pMethods)
		rc = SQLITE_CANTOPEN;
	return rc;
}

/* The rest is the base VFS's own. */
static int wb_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xDelete(b, name, sync_dir);
}

static int wb_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xAccess(b, name, flags, out);
}

static int wb_full_pathname(sqlite3_vfs *vfs, const char *name, int n,
			    char *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xFullPathname(b, name, n, out);
}

static int wb_randomness(sqlite3_vfs *vfs, int n, char *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xRandomness(b, n, out);
}

static int wb_sleep(sqlite3_vfs *vfs, int us)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xSleep(b, us);
}

static int wb_current_time(sqlite3_vfs *vfs, double *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xCurrentTime(b, out);
}

static int wb_last_error(sqlite3_vfs *vfs, int n, char *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xGetLastError(b, n, out);
}

static int wb_current_time64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
	sqlite3_vfs *b = ((struct walbuf *)vfs)->base;
	return b->xCurrentTimeInt64(b, out);
}

int walbuf_new(const char *base, struct walbuf **out)
{
	*out = NULL;
	sqlite3_vfs *b = sqlite3_vfs_find(base);
	if (!b)
		return -ENOENT;
	struct walbuf *wb = calloc(1, sizeof(*wb));
	if (!wb)
		return -ENOMEM;
	wb->base = b;
	snprintf(wb->name, sizeof(wb->name), "tierfs-walbuf-%p", (void *)wb);
	wb->vfs = (sqlite3_vfs){
		.iVersion = 2, /* no xSetSystemCall: those are the base's */
		/* a WAL file's wal_file and the base's file after it; any
		 * other file is the base's alone, in the same room */
		.szOsFile = (int)sizeof(struct wal_file) + b->szOsFile,
		.mxPathname = b->mxPathname,
		.zName = wb->name,
		.pAppData = NULL,
		.xOpen = wb_open,
		.xDelete = wb_delete,
		.xAccess = wb_access,
		.xFullPathname = wb_full_pathname,
		.xDlOpen = NULL,
		.xDlError = NULL,
		.xDlSym = NULL,
		.xDlClose = NULL,
		.xRandomness = wb_randomness,
		.xSleep = wb_sleep,
		.xCurrentTime = wb_current_time,
		.xGetLastError = wb_last_error,
	};
	if (b->iVersion >= 2 && b->xCurrentTimeInt64)
		wb->vfs.xCurrentTimeInt64 = wb_current_time64;
	else
		wb->vfs.iVersion = 1;
	if (sqlite3_vfs_register(&wb->vfs, 0) != SQLITE_OK) {
		free(wb);
		return -EIO;
	}
	*out = wb;
	return 0;
}

const char *walbuf_name(const struct walbuf *wb)
{
	return wb->name;
}

void walbuf_on_full(struct walbuf *wb, int (*fn)(void *ctx), void *ctx)
{
	wb->on_full = fn;
	wb->on_full_ctx = ctx;
}

void walbuf_counts(const struct walbuf *wb, unsigned long *writes,
		   unsigned long *calls)
{
	*writes = atomic_load(&wb->writes);
	*calls = atomic_load(&wb->calls);
}

void walbuf_free(struct walbuf *wb)
{
	if (!wb)
		return;
	(void)sqlite3_vfs_unregister(&wb->vfs);
	free(wb);
}
