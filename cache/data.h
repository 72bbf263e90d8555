/* data.h: the data cache: one sparse file per inode, and which bytes it holds.
 *
 * CACHE_DIR/data/<ino> holds the inode's bytes at their file offsets;
 * CACHE_DIR/data/<ino>.log is an append-only record of two range sets
 * (ranges.h): "present" (bytes in the cache file that are the file's true
 * content) and "dirty" (bytes written here and not yet in S3). A change is
 * appended to the log before the call that made it returns, so a crash of
 * the daemon (kill -9) never loses track of a written byte; data_sync()
 * fsyncs file and log for power-loss durability. The log is compacted
 * (rewritten via a temporary file and rename) when it grows.
 *
 * Per-file states: ABSENT -> PARTIAL (some ranges present) -> FULL, with
 * DIRTY ranges on top until data_mark_clean(). Evictable: files that are
 * closed (no data_file reference) and have no dirty range. Open or dirty
 * data is never evicted.
 *
 * Threading: all functions are thread-safe. Each data_file has its own
 * lock; the data handle's lock guards the file table and LRU and is taken
 * before a file's lock, never after. data_read() may block on the fetch
 * callback (the network); nothing else does.
 * Ownership: data_get() returns a reference that data_put() drops.
 */
#ifndef TIERFS_DATA_H
#define TIERFS_DATA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ranges.h"

/* An open's first read, and a stream's first widened fetch, get 1 MiB:
 * against a local Swift a cold 4 KiB read took as long with 1 MiB as with
 * 128 KiB (medians 16-22 ms), while 64 readers of a cold file sent half
 * the GETs and read faster. 4 MiB cut GETs further but made that first
 * read slower (medians 28 and 56 ms). */
#define DATA_DEFAULT_READAHEAD_MIN (1u << 20)
/* and a stream's window doubles up to MAX: 32 MiB, with pieces as large
 * (below), read cold files alone 15-45% faster here than 16 and 8 */
#define DATA_DEFAULT_READAHEAD_MAX (32u << 20)
/* sequential readers of one open file tracked: the table starts at MIN
 * streams and doubles while every stream in it is in use, up to MAX */
#define DATA_RA_STREAMS_MIN 4
#define DATA_RA_STREAMS_MAX 256
/* threads that fetch ahead of sequential readers, in pieces of at most
 * DATA_PREFETCH_PIECE bytes; 0: a read fetches only what it waits for.
 * Each request costs Swift a fixed share of the CPU it shares with us
 * here: a 512 MiB GET in 64 MiB ranges took 1.6-1.8 s, in 8 MiB ones
 * 2.0-2.3 s (a piece is sent as ranges of the S3 part size, 16 MiB) */
#define DATA_DEFAULT_PREFETCH_THREADS 8
#define DATA_PREFETCH_PIECE (32u << 20)
/* see data_config.lead */
#define DATA_DEFAULT_LEAD (8u << 20)
#define DATA_DEFAULT_FREE_FLOOR (1ull << 30)
#define DATA_DEFAULT_RESERVE (64ull << 20)
/* see data_config.spares */
#define DATA_DEFAULT_SPARES 8192

/* A fetch under way, for data_fetch_landed(). */
struct data_fetch;

/* Fills bytes [off, off+len) of the object behind ino into fd at fd_off
 * (pwrite). Returns the bytes written (fewer only at the object's end),
 * or -errno. Called without any data lock held. fetch (NULL for fetches
 * nobody reads while they run) is for data_fetch_landed(). */
typedef ssize_t (*data_fetch_fn)(void *ctx, uint64_t ino, uint64_t off,
				 uint64_t len, int fd, off_t fd_off,
				 struct data_fetch *fetch);

/* The fetch callback tells this as the bytes land: the first n bytes of
 * its range are in fd. Readers of them go on before the fetch ends, so a
 * large fetch costs a reader no more than its own bytes. Returns
 * -ECANCELED when no one wants the rest (a prefetch whose file's last
 * open is gone): the callback then stops and returns -ECANCELED, and the
 * bytes told of are kept. */
int data_fetch_landed(struct data_fetch *fetch, uint64_t n);

struct data_config {
	const char *dir;     /* CACHE_DIR/data; created if absent */
	uint64_t size_limit; /* bytes of cached data to keep (LRU) */
	uint64_t free_floor; /* keep this much free on the filesystem */
	/* writes fail with ENOSPC rather than leave less than this free
	 * (capped at an eighth of the filesystem): room for the metadata
	 * store, which must not find the disk full. 0: none */
	uint64_t reserve;
	uint32_t readahead_min; /* first read-ahead window */
	uint32_t readahead_max; /* sequential reads double it up to this */
	/* background fetches keep up to twice the window ahead of a
	 * sequential reader (data_read()), twice readahead_max once it has
	 * read readahead_min in a row from a file of few readers; 0
	 * threads: none */
	unsigned prefetch_threads;
	/* with prefetch threads, a sequential reader's miss is fetched by
	 * one of them (first in the queue) in one GET of this many bytes,
	 * and the reader goes on as its own bytes land (data_fetch_landed()):
	 * few large GETs, with the latency of small ones. 0: the default */
	uint32_t lead;
	/* emptied cache files kept for new ones (cache files, range logs)
	 * to take: a file created after one was deleted then costs a
	 * rename, not a new inode. ext4 without a journal skips inodes
	 * freed in the last minutes when it allocates one, reading each:
	 * half the worker's CPU in a burst of creates after deletes. 0:
	 * none kept */
	unsigned spares;
	/* this boot's id (tests); NULL: the kernel's. A cache last open in
	 * another boot, and not closed cleanly since, keeps only its dirty
	 * bytes (data_open()) */
	const char *boot_id;
	data_fetch_fn fetch;
	void *fetch_ctx;
};

struct data;
struct data_file;

void data_config_init(struct data_config *cfg);
/* Opens the cache; reloads the range logs of files already there. When
 * the machine went down since the last open (another boot, and no clean
 * data_close() since), only dirty bytes are kept: the disk may hold a
 * log's line without the fetched bytes it speaks of. */
int data_open(const struct data_config *cfg, struct data **out);
/* Closes the cache. References still held (a session that ended with
 * RELEASEs undelivered) are dropped; their data is already on disk. */
void data_close(struct data *d);

/* A reference to ino's cache file, creating it (ABSENT) if needed. size is
 * the file's current size (for read-ahead bounds and truncation). It is
 * adopted when the file is not open and has no dirty byte (bytes past it
 * are dropped); otherwise the cache keeps its own size (data_size()).
 * Other files' calls do not wait while it makes or opens the files. */
int data_get(struct data *d, uint64_t ino, uint64_t size,
	     struct data_file **out);
/* data_get() for a file just created, with no object behind it: its cache
 * file starts empty, every byte written is dirty, and it keeps no range
 * log until an upload makes some of it clean (data_mark_clean()). An
 * earlier file's record and files by this number are dropped; -EBUSY if
 * that one is still referenced. */
int data_create(struct data *d, uint64_t ino, struct data_file **out);
/* One more reference to f, which the caller holds one of; returns f. */
struct data_file *data_ref(struct data_file *f);
void data_put(struct data_file *f);

/* Tells f that an open with read access began: the first read of f that
 * is not sequential to another is then taken as the start of a sequential
 * one, and its fetch widened to the first read-ahead window. Readers of
 * disjoint parts of a file (data loaders, fio with offset_increment) each
 * open it and read on from where they start; a random reader pays for
 * this once per open. */
void data_open_read(struct data_file *f);
/* n opens of f are left (data_open_read() credits above n are dropped);
 * at 0, so are the prefetch pieces queued and not started, and those
 * under way stop at their next bytes (data_fetch_landed()). */
void data_opens_left(struct data_file *f, unsigned n);
/* A buffered reader's page cache holds [off, off + len) now (the reply to
 * its read): the cache file's own pages of clean bytes there need not be
 * in memory too. Those on disk leave it; writeback of the others starts,
 * and data_uncache_all() drops them once the file's last open is gone.
 * Direct I/O has no page cache of its own, so it must not call this. */
void data_uncache(struct data_file *f, uint64_t off, uint64_t len);
/* The last open of f is gone: if a buffered reader read it (above) and
 * none of it is dirty, the cache file's pages leave memory (those still
 * being written to disk stay until the kernel reclaims them). Does disk
 * work: not under the caller's locks. */
void data_uncache_all(struct data_file *f);

/* Reads [off, off+len), first fetching the missing ranges (one fetch per
 * gap, widened by the read-ahead window on sequential access and on an
 * open's first read (data_open_read()); no read-ahead on random access).
 * A sequential read also has the prefetch threads fetch what follows, so
 * the reader finds it present or in flight. Returns bytes read (short at
 * EOF). */
ssize_t data_read(struct data_file *f, void *buf, size_t len, uint64_t off);
/* data_read() without the copy: makes the bytes present in the cache file
 * and *n says how many there are from off (0 at EOF), for a reply that
 * takes them from data_fd() at off (a splice). A truncate meanwhile may
 * leave the cache file shorter. 0, or -ENOSPC when the cache disk had no
 * room for them: data_read_through() then puts the *n bytes in memory. */
int data_place(struct data_file *f, size_t len, uint64_t off, size_t *n);
ssize_t data_read_through(struct data_file *f, void *buf, size_t len,
			  uint64_t off);
/* Writes and marks [off, off+len) present and dirty; extends the size. */
ssize_t data_write(struct data_file *f, const void *buf, size_t len,
		   uint64_t off);
/* Sets the size: bytes past it are dropped from both sets (and the file);
 * growth adds a present, dirty hole of zeros. */
int data_truncate(struct data_file *f, uint64_t size);
/* Fetches every missing range, so that the cache file is FULL (before a
 * whole-object upload). Uploads use it, so it may dip into the cache
 * disk's reserve: a full disk must not keep its own dirty data from
 * uploading. */
int data_hydrate_all(struct data_file *f);
/* The same for [off, off+len) only (clipped to the size): the parts of a
 * file a partial re-upload sends. */
int data_hydrate(struct data_file *f, uint64_t off, uint64_t len);
/* 1 when the file is FULL: every byte up to its size present. */
int data_whole(struct data_file *f);
/* Marks every byte dirty (the file must be FULL: -EAGAIN otherwise), so
 * it is uploaded whole from here and never evicted or fetched before. */
int data_mark_dirty_all(struct data_file *f);
/* The cache file is written by another than this process: the kernel,
 * for a file open in FUSE passthrough, whose writes are never seen here.
 * how: DATA_OUTSIDE_BEGIN before the first such open; DATA_OUTSIDE_SEEN
 * when the file changed since (size: its size on disk now): the size
 * grows to size and every byte becomes present and dirty (where the
 * writes went is not known), also for an upload under way
 * (data_mark_clean() keeps them); DATA_OUTSIDE_END once the last such
 * open is gone (with SEEN if it changed). The file must be FULL: -EAGAIN
 * otherwise. The log records BEGIN and END: a process that opens the
 * cache in between (the last one was killed) takes all of the file, to
 * its size on disk, as dirty. */
#define DATA_OUTSIDE_BEGIN 1
#define DATA_OUTSIDE_SEEN 2
#define DATA_OUTSIDE_END 4
int data_outside(struct data_file *f, int how, uint64_t size);
/* Puts bytes [off, off+len) of the file together in fd at the same
 * offsets: what the cache holds, copied, and the rest fetched straight
 * into fd, taking no room in the cache: for an upload that a full cache
 * disk cannot hydrate. fd starts as zeros (a new memfd or sparse file). */
int data_compose(struct data_file *f, int fd, uint64_t off, uint64_t len);
/* Makes the cache file immutable (on) or not: writes through any open
 * descriptor of it fail with EPERM, also the kernel's in FUSE
 * passthrough. The first freeze leaves a marker in the cache directory,
 * and while it is there data_open() thaws every cache file, so that
 * one a killed process left frozen can be written, renamed and
 * uploaded again. -ENOTTY or -ENOTSUP where the disk has no such flag. */
int data_freeze(struct data_file *f, int on);
/* 0 when data_freeze() stops writes on the cache disk (ext4's does): a
 * probe file is made, frozen and written to. */
int data_freeze_works(struct data *d);
/* The free bytes writes through this process leave on the cache disk
 * for the metadata store (data_config.reserve, at most an eighth of the
 * disk). */
uint64_t data_reserve(const struct data *d);
/* The cache file's descriptor, for s3_put_fd()/s3_upload_fd() and
 * data_place(). Valid while the reference is held. */
int data_fd(struct data_file *f);
uint64_t data_size(struct data_file *f);
/* Copies of the range sets (caller frees with ranges_free()). */
int data_present(struct data_file *f, struct ranges *out);
/* data_dirty() also takes an upload snapshot: hand every one back to
 * data_mark_clean() (an empty set after a failed upload). An unreturned
 * snapshot keeps later writes dirty until the last reference is dropped. */
int data_dirty(struct data_file *f, struct ranges *out);
/* Clears the dirty ranges that were dirty when the uploader copied them
 * (dirty_snapshot); ranges written since stay dirty. */
int data_mark_clean(struct data_file *f, const struct ranges *dirty_snapshot);
/* fdatasyncs the cache file and its log (their bytes and sizes; the
 * log's lines are the record of what is present and dirty, so an mtime
 * need not reach the disk), and the cache dir once after a create. */
int data_sync(struct data_file *f);

/* Drops ino's cache file and log (the inode is gone). */
int data_remove(struct data *d, uint64_t ino);
/* The inodes that have a record here (a cache file), malloc'ed. */
int data_inos(struct data *d, uint64_t **inos, size_t *n);
/* A file holding dirty bytes and the size the cache keeps for it. */
struct data_dirty_file {
	uint64_t ino, size;
	int outside; /* between DATA_OUTSIDE_BEGIN and END */
};
/* The files holding dirty bytes (malloc'ed). Right after data_open(),
 * each size is what its range log, or its ".new" file's size on disk,
 * says: a write's end reaches them before the write returns, and the
 * disk once data_sync() returns. */
int data_dirty_files(struct data *d, struct data_dirty_file **out, size_t *n);
/* data_remove() for a file the object behind it replaced: only when no
 * reference is held and no byte is dirty, else -EBUSY (nothing changes). */
int data_drop_clean(struct data *d, uint64_t ino);
/* Evicts least-recently-used evictable files until cached bytes are under
 * the limit and the free floor is met. Returns bytes freed. */
int64_t data_evict(struct data *d);
/* Cached bytes (present ranges) and dirty bytes in all files. */
void data_usage(struct data *d, uint64_t *cached, uint64_t *dirty);

#endif
