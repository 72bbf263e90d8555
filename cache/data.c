/* data.c: the data cache: one sparse file per inode, and which bytes it holds.
 *
 * Per-file state machine (the sets are byte ranges, so a file is in several
 * of these at once, range by range):
 *
 *   ABSENT --fetch starts--> FETCHING --fetch ok--> PRESENT (clean)
 *      ^                        |  fetch error        |  data_write /
 *      |                        +--> ABSENT            |  truncate grow
 *      |                                               v
 *      +---- truncate shrink / evict / remove ---- PRESENT+DIRTY
 *                                                      |  data_mark_clean
 *                                                      v  (not rewritten)
 *                                                  PRESENT (clean)
 *
 *   A whole file is ABSENT (nothing present), PARTIAL or FULL. It is
 *   evictable when it has no reference (closed) and no dirty byte; eviction
 *   drops the whole file. Open or dirty files are never evicted.
 *
 * Files in DIR: "<ino>" is the sparse cache file (bytes at their file
 * offsets); "<ino>.log" is its range log; "<ino>.log.tmp" is a compaction
 * in progress and ".fetch.*" a fetch buffer of older versions (both
 * deleted by data_open()).
 * "<ino>.new" is the cache file of a file created here and not uploaded
 * yet (data_create()): no object is behind it, so all its bytes are
 * present and dirty, its size is the file's, and it needs no log. Its
 * first upload gives it one ("adoption"; see below).
 * ".spare.<n>" is a spare: an emptied file of one that went (removed or
 * evicted while no one held it), kept for a new cache file, log or
 * compaction to take by rename instead of allocating an inode (at most
 * data_config.spares; data_open() keeps them). A file still held open
 * is unlinked instead: its readers keep its bytes.
 *
 * Range log format: text lines, each ending in '\n', decimal numbers:
 *   "P+ a b"  bytes [a, b) were fetched from S3: present; size >= b
 *   "D+ a b"  bytes [a, b) were written here: present AND dirty; size >= b
 *   "D- a b"  bytes [a, b) are in S3 now: no longer dirty (still present)
 *   "S n"     the size is n; bytes at and past n leave both sets
 *   "O+"      the kernel writes the cache file itself from here (FUSE
 *             passthrough; data_outside()): after a crash the file's
 *             size on disk counts, and all of it is dirty ("D+ 0 n"
 *             lines come with each change seen)
 *   "O-"      those writes ended and are accounted for
 * A change appends its lines with one write(2) on an O_APPEND descriptor
 * before the call that made it returns. Replay applies complete lines in
 * order, skips a complete line that does not parse, and ignores (and cuts
 * off) a last line with no '\n': a write torn by the crash.
 *
 * Crash ordering (kill -9 at any point leaves a log that claims no more
 * than the cache file holds, and every acknowledged write recorded):
 *   write:        pwrite the data, then append "D+" (D+ alone marks both
 *                 sets, so no torn P+/D+ pair can leave a write clean).
 *   fetch:        write the fetched bytes into the file (absent bytes,
 *                 which nothing reads), then append "P+".
 *   truncate:     shrink appends "S n" first, then ftruncates; grow
 *                 ftruncates (zeros), then appends "D+ old new".
 *   evict/remove: unlink the log first, then the file. A file without a
 *                 log is deleted by data_open(); a log without its file is
 *                 dropped. "<ino>.new" goes on its own. A name becomes a
 *                 spare in place of its unlink: truncated to 0, then
 *                 renamed (a crash between leaves an empty file under
 *                 the name, as good as gone by the same rules).
 *   create:       a spare (empty) is renamed to the new name, then opened:
 *                 a crash between leaves the empty file that a crash
 *                 after an O_CREAT leaves.
 *   adoption:     a compaction's snapshot becomes "<ino>.log" first
 *                 (fsynced, and the directory), then "<ino>.new" is
 *                 renamed "<ino>". data_open() finishes a rename a crash
 *                 cut short: "<ino>.new" beside "<ino>.log" is renamed.
 *   compaction:   the snapshot ("S", "P+"s, "D+"s) goes to <ino>.log.tmp,
 *                 is fsynced, then renamed over <ino>.log and the directory
 *                 fsynced. Before the rename the old log is whole (the tmp
 *                 is garbage); after it the new one is. It runs when the
 *                 log passes DATA_LOG_COMPACT_MIN and is DATA_LOG_COMPACT_
 *                 RATIO times an upper bound of its compact form's size.
 * These orderings hold against a killed process. Against power loss only
 * data_sync() orders things: it fsyncs the file, then the log (a ".new"
 * file has none to wait for: its size on disk says what it holds).
 * So a power loss can leave a "P+" or "D-" line on the disk without the
 * bytes it speaks of, and the next open must not serve them, nor upload
 * them beside a later write. "boot" holds the boot id of the last open,
 * and "synced" says the last close flushed everything (syncfs) and no
 * open came since. An open that finds neither its own boot's id nor
 * "synced" keeps only each file's dirty bytes: a file with none goes,
 * and the rest is fetched again. It removes "synced" and records its
 * boot's id (after the drops are durable) before it serves.
 *
 * Fetching: data_read() marks the range in flight (a record in the file's
 * in-flight list), drops the file lock and lets the fetch callback write
 * the object's bytes straight into the cache file, at their offsets. Back
 * under the lock it zeros what a short fetch (the object's end) left,
 * logs the range "P+", marks it present and wakes the threads waiting on
 * it. Readers that need an in-flight range wait on the file's condition
 * variable instead of fetching it twice; so do writes to it, and
 * truncates that cut into it, since the fetch would write over them. The
 * bytes are written once, where they stay (no buffer file to copy from).
 * The callback tells data_fetch_landed() as the bytes land; a reader
 * reads the landed prefix of a fetch under way (wake_at: the callback
 * wakes it once its own bytes are there), so a large fetch costs a
 * reader no more latency than a small one. A fetch that fails or is
 * stopped logs what landed as present.
 * Invariants: in-flight records are pairwise disjoint, disjoint from the
 * present set, and within the size.
 *
 * Read-ahead: per open file, up to DATA_RA_STREAMS_MAX sequential
 * streams, so that readers of disjoint parts of one file (a data loader's
 * workers, fio with offset_increment) each get their own. The table is
 * allocated at the first read, doubles while all its streams are in use,
 * and goes with the file's last reference. A stream remembers where its
 * previous read ended (next). A read starting at a stream's next, or
 * within its window of it (the kernel's requests for one large read come
 * in any order), is sequential: the fetch of the gap that reaches the end
 * of the request is widened to the stream's window (readahead_min first,
 * then doubling after each widened fetch, up to readahead_max). Any other
 * read fetches exactly the missing bytes and starts a stream of its own,
 * in place of the one read least recently.
 *
 * Leads: with prefetch threads, a sequential read's first missing byte
 * that no fetch covers starts a lead instead: data_config.lead bytes,
 * queued at the head of the prefetch queue, which the reader waits on
 * (never takes over) as its bytes land. Many readers of one file then
 * share a few large GETs, a few at a time, rather than each sending its
 * own small ones at once.
 *
 * Prefetch: a sequential read also looks at the twice its window that
 * follows it (its readahead_max, once the stream has read readahead_min
 * bytes in a row and the file has at most DATA_RA_EAGER_STREAMS streams:
 * settled_locked()). Once at least a piece of that (a window, at most
 * DATA_PREFETCH_PIECE) is neither present nor in flight, it marks up to
 * DATA_PREFETCH_BATCH pieces in flight and queues them for the prefetch
 * threads, each with a reference to the file, and the window doubles. The
 * reader then finds its next bytes present, or waits on their fetch as on
 * any other, while the following ones are fetched: one stream keeps
 * several GETs going instead of waiting for one at a time. A piece still
 * in the queue is no one's yet: a read that needs it fetches it itself
 * (64 readers of one file must not wait behind each other's read-ahead),
 * and a write or truncate over it drops it. A piece that fails leaves
 * the bytes that did not land absent; the read that needs them fetches
 * them itself and reports the error. When a file's last open goes
 * (data_opens_left()), its queued pieces are dropped and those being
 * fetched stop at their next landed bytes. data_close() drops the queue
 * and waits for the pieces being fetched.
 *
 * Upload snapshots: data_dirty() takes a snapshot and counts it (nsnap);
 * while nsnap > 0 every write and truncate-grow also adds its range to
 * `rewritten`. data_mark_clean(snap) clears dirty & (snap - rewritten),
 * then drops the count; at zero `rewritten` is emptied. With several
 * snapshots outstanding, `rewritten` covers writes since the oldest, which
 * is conservative (bytes stay dirty longer, never lost). A snapshot never
 * handed back only keeps later writes dirty until the last reference is
 * dropped, which resets the count (an uploader holds a reference).
 *
 * LRU: an in-memory list of files with no reference, oldest first; the last
 * data_put() appends there and stamps the log's mtime (futimens), and
 * data_open() orders the list by log mtime, so the order survives restart.
 *
 * Totals (cached/dirty bytes) are kept per file (pbytes/dbytes, updated
 * incrementally, recounted by the debug checker) and summed in atomics
 * updated under the file lock, so no file-lock holder ever needs the
 * handle lock (lock order: d->lock, then f->lock; never the other way).
 */
#include "data.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../s3/buf.h"

#define DATA_LOG_COMPACT_MIN (64u << 10)
#define DATA_LOG_COMPACT_RATIO 4
#define DATA_LOG_LINE_MAX 46 /* "P+ " + two 20-digit numbers, ' ', '\n' */
#define DATA_NAME_MAX 32     /* "<20 digits>.log.tmp" and a NUL */
#define DATA_COPY_CHUNK (256u << 10)
#define DATA_FETCH_TMP_PREFIX ".fetch."
#define DATA_SPARE_PREFIX ".spare."
#define DATA_NEW_SUFFIX ".new"
#define DATA_BOOT_NAME "boot"	  /* the boot id of the last open */
#define DATA_SYNCED_NAME "synced" /* the last close synced everything */
#define DATA_FROZEN_NAME "frozen" /* a cache file may be immutable */
#define DATA_FREEZE_PROBE_NAME "freeze-probe"
#define DATA_BOOT_ID_MAX 64
#define DATA_PREFETCH_BATCH 4 /* pieces a read may queue */
/* a file with at most this many streams lets a settled one plan
 * readahead_max ahead at once (see Prefetch) */
#define DATA_RA_EAGER_STREAMS 8
/* No byte limit by default: only the free-space floor bounds the cache. */
#define DATA_DEFAULT_SIZE_LIMIT UINT64_MAX

struct prefetch;

struct fetch_rec {
	uint64_t start;
	uint64_t end;
	/* set while queued for a prefetch thread and not started: a reader
	 * that needs it fetches it itself (unless it is a lead: see below),
	 * a write drops it */
	struct prefetch *job;
	/* [start, landed) is in the cache file (data_fetch_landed()):
	 * readers read it before the fetch ends */
	uint64_t landed;
	/* a reader waits for landed to reach this; UINT64_MAX: none does */
	uint64_t wake_at;
	/* a prefetch thread fetches it for no reader in particular, so it
	 * stops once the file's last open is gone (cancel) */
	int ahead;
	int cancel;
	/* room on the disk it holds (room_take()): [landed, end) once
	 * started, none while queued */
	uint64_t claim;
};

/* a fetch queued for the prefetch threads: f is referenced, and the
 * in-flight record whose job it is holds the range (none once a reader
 * or a write took it over) */
struct prefetch {
	struct data_file *f;
	struct prefetch *next;
	/* a lead (data_config.lead), queued at the head: a reader waits
	 * for its bytes to land rather than take it over */
	int lead;
};

/* the fetch callback's handle on its in-flight record */
struct data_fetch {
	struct data_file *f;
	uint64_t start, end;
};

struct ra_stream {
	uint64_t start;	 /* where its first read began */
	uint64_t next;	 /* where its previous read ended */
	uint64_t window; /* next read-ahead window; 0: start over */
	uint64_t used;	 /* ra_tick of its last read; 0: free */
};

struct data_file {
	struct data *d; /* immutable */
	uint64_t ino;	/* immutable */

	/* protected by d->lock */
	unsigned refs;
	int removed; /* set with d->lock and lock held; read under either */
	/* data_get() makes or opens its files without d->lock: every other
	 * user of the record waits on d->opened until it is clear */
	int opening;
	struct data_file *hnext;
	struct data_file *lru_prev, *lru_next; /* in the LRU iff refs == 0 */
	struct timespec lru_time;	       /* log mtime, for data_open */

	pthread_mutex_t lock;
	/* broadcast when an in-flight fetch, or a write with the lock
	 * dropped, ends */
	pthread_cond_t fetched;
	/* protected by lock (or by d->lock alone while refs == 0) */
	int fd;	   /* cache file; -1 while refs == 0 */
	int logfd; /* O_APPEND range log; -1 while refs == 0 */
	uint64_t size;
	struct ranges present;
	struct ranges dirty;	    /* subset of present */
	uint64_t pbytes, dbytes;    /* bytes in present and dirty */
	struct fetch_rec *inflight; /* owned array, ninflight used */
	size_t ninflight, capinflight;
	unsigned nwriting;	 /* rewrites writing the cache file unlocked */
	struct ranges rewritten; /* written while nsnap > 0 */
	unsigned nsnap;		 /* data_dirty() snapshots outstanding */
	uint64_t log_bytes;	 /* length of the log file */
	int log_broken;		 /* a torn append could not be cut off */
	int sync_dir;		 /* created since the last data_sync() */
	int log_unsynced; /* appended to since its last fsync (or opened) */
	int nolog;   /* "<ino>.new", no log: present == dirty == [0, size) */
	int outside; /* written outside this process (data_outside()) */
	struct ra_stream *ra; /* nra of them; NULL until read while open */
	unsigned nra;
	uint64_t ra_tick;
	unsigned ra_fresh; /* opens with read access that have not read */
	int uncached; /* data_uncache() since the last data_uncache_all() */
};

struct data {
	struct data_config cfg; /* cfg.dir points at path */
	char *path;		/* owned */
	int dirfd;		/* owned */
	/* the disk may not hold what the logs say (see data_open()): the
	 * load keeps only dirty bytes; counts what it dropped */
	int distrust;
	int unrecorded; /* a trimmed log could not be rewritten */
	size_t dropped_files, trimmed_files;
	pthread_mutex_t lock;
	/* protected by lock */
	struct data_file **buckets; /* owned hash table, chained by hnext */
	size_t nbuckets, nfiles;
	struct data_file *lru_head, *lru_tail; /* refs == 0, oldest first */
	pthread_cond_t opened; /* broadcast when a record's opening clears */
	/* atomics (updated under a file lock, read anywhere) */
	uint64_t cached;
	uint64_t dirty;
	uint64_t reserve;  /* free bytes writes leave (for the meta store) */
	int frozen_marked; /* DATA_FROZEN_NAME is on the disk */
	/* room_take()'s last fstatvfs: when (CLOCK_MONOTONIC ms), and how
	 * many bytes writes may still take before it is asked again */
	uint64_t room_at_ms;
	int64_t room_budget;
	/* bytes room_take() granted and room_give() has not had back: writes
	 * and fetches under way, which fstatvfs may not show yet */
	int64_t room_claimed;
	/* the prefetch queue and its threads */
	pthread_mutex_t pf_lock; /* taken alone: no other lock inside it */
	pthread_cond_t pf_wake;
	struct prefetch *pf_head, **pf_tail; /* protected by pf_lock */
	int pf_stop;			     /* protected by pf_lock */
	pthread_t *pf_threads;
	unsigned npf;
	/* spare files, ".spare.<n>" (see above): their numbers, a stack of
	 * at most cfg.spares, and the next number; spare_lock is a leaf,
	 * taken under any other lock and never around another */
	pthread_mutex_t spare_lock;
	uint64_t *spares;
	size_t nspares;
	uint64_t spare_next;
};

/* ---- small helpers ---- */

static int room_take(struct data *d, uint64_t len, int urgent);
static void room_give(struct data *d, uint64_t len);
static int room_check(struct data *d, uint64_t len, int urgent);
static int room_counted(const struct data *d, uint64_t len);
static int prefetch_start(struct data *d);
static void prefetch_stop(struct data *d);

static void die(const char *what, int rc)
{
	fprintf(stderr, "tierfs data: %s: %s\n", what, strerror(rc));
	abort();
}

static void lock_mutex(pthread_mutex_t *m)
{
	int rc = pthread_mutex_lock(m);
	if (rc)
		die("pthread_mutex_lock", rc);
}

static void unlock_mutex(pthread_mutex_t *m)
{
	int rc = pthread_mutex_unlock(m);
	if (rc)
		die("pthread_mutex_unlock", rc);
}

static void wait_cond(pthread_cond_t *c, pthread_mutex_t *m)
{
	int rc = pthread_cond_wait(c, m);
	if (rc)
		die("pthread_cond_wait", rc);
}

static void broadcast(pthread_cond_t *c)
{
	int rc = pthread_cond_broadcast(c);
	if (rc)
		die("pthread_cond_broadcast", rc);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

static uint64_t max_u64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static void file_name(char out[DATA_NAME_MAX], uint64_t ino, const char *suffix)
{
	snprintf(out, DATA_NAME_MAX, "%" PRIu64 "%s", ino, suffix);
}

/* ---- spare files (see above) ---- */

static void spare_name(char out[DATA_NAME_MAX], uint64_t n)
{
	snprintf(out, DATA_NAME_MAX, DATA_SPARE_PREFIX "%" PRIu64, n);
}

/* name's file, emptied, becomes a spare. 0 when it did; -ENOENT when
 * there is no such file; else -errno, or -ENOSPC when the stack is full
 * (name is then as it was, or emptied). */
static int spare_keep(struct data *d, const char *name)
{
	char sp[DATA_NAME_MAX];
	int rc = 0;
	lock_mutex(&d->spare_lock);
	if (d->nspares >= d->cfg.spares) {
		rc = -ENOSPC;
		goto out;
	}
	/* emptied first: a spare never holds bytes, so what the cache
	 * frees is free (eviction) and a crash leaves no stale data.
	 * Through a descriptor closed at once: ext4 marks a file truncated
	 * to 0 (auto_da_alloc) so that the close after its next writes
	 * allocates and writes them out, and a close clears the mark. Left
	 * on, it made the first close of the next file to take the spare
	 * (the user's close(2), which releases the kernel's passthrough
	 * file) start the writeback of what the user had just written:
	 * 24-30 us of every create here, and blocks that the file's unlink
	 * freed again. */
	int fd = openat(d->dirfd, name, O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0) {
		rc = -errno;
		goto out;
	}
	if (ftruncate(fd, 0)) {
		rc = -errno;
		(void)close(fd);
		goto out;
	}
	if (close(fd)) {
		rc = -errno;
		goto out;
	}
	spare_name(sp, d->spare_next);
	if (renameat(d->dirfd, name, d->dirfd, sp)) {
		rc = -errno;
		goto out;
	}
	d->spares[d->nspares++] = d->spare_next++;
out:
	unlock_mutex(&d->spare_lock);
	return rc;
}

/* Drops name's file: with keep, kept as a spare when there is room;
 * else unlinked. A file that is not there is fine. */
static int drop_name(struct data *d, uint64_t ino, const char *suffix, int keep)
{
	char name[DATA_NAME_MAX];
	file_name(name, ino, suffix);
	if (keep) {
		int rc = spare_keep(d, name);
		if (rc == 0 || rc == -ENOENT)
			return 0;
	}
	return unlinkat(d->dirfd, name, 0) && errno != ENOENT ? -errno : 0;
}

/* Drops a ".new" file, or the log, then the cache file (see the crash
 * ordering above); keep: as spares (for a file no one holds open). */
static int drop_pair(struct data *d, uint64_t ino, int keep)
{
	int rc = drop_name(d, ino, DATA_NEW_SUFFIX, keep);
	int lrc = drop_name(d, ino, ".log", keep);
	int frc = drop_name(d, ino, "", keep);
	return rc ? rc : lrc ? lrc : frc;
}

/* An empty file named name, opened with flags (which write): a spare
 * renamed name when there is one, else openat(O_CREAT | O_TRUNC). A
 * spare is empty already (spare_keep()), and is not truncated again,
 * which would mark it for auto_da_alloc (see spare_keep()); one holding
 * bytes, which only a crash of the machine can leave, is emptied. The
 * descriptor, or -1 with errno. */
static int open_fresh(struct data *d, const char *name, int flags)
{
	char sp[DATA_NAME_MAX];
	int renamed = 0;
	lock_mutex(&d->spare_lock);
	while (d->nspares > 0) {
		spare_name(sp, d->spares[--d->nspares]);
		if (renameat(d->dirfd, sp, d->dirfd, name) == 0) {
			renamed = 1;
			break;
		}
		/* gone (ENOENT): the next one; else a new file. What is left
		 * stays a spare on disk, found again by data_open() */
		if (errno != ENOENT)
			break;
	}
	unlock_mutex(&d->spare_lock);
	int fd = openat(d->dirfd, name,
			flags | O_CREAT | (renamed ? 0 : O_TRUNC), 0600);
	struct stat st;
	if (renamed && fd >= 0 &&
	    (fstat(fd, &st) || (st.st_size && ftruncate(fd, 0)))) {
		int err = errno;
		(void)close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

/* Writes of at most this much, aligned to it: the page cache gives a write
 * folios of up to its length, and ext4 walks every block of a folio on
 * each later write into it. A 4 KiB rewrite of a file that came in 1 MiB
 * writes walked 256 buffer heads (13% of the daemon's CPU under fio
 * randrw); with 64 KiB folios it walks 16. */
#define DATA_WRITE_CHUNK (64u << 10)

static int pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const char *p = buf;
	while (len) {
		size_t room =
			DATA_WRITE_CHUNK - (size_t)(off % DATA_WRITE_CHUNK);
		ssize_t n = pwrite(fd, p, len < room ? len : room, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Reads len bytes at off; past the file's end the rest is zeros. */
static int pread_zeros(int fd, void *buf, size_t len, uint64_t off)
{
	char *p = buf;
	while (len) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0) {
			memset(p, 0, len);
			return 0;
		}
		p += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Copies len bytes by pread/pwrite; past the source's end it writes zeros. */
static int copy_slow(int in, uint64_t in_off, int out, uint64_t out_off,
		     uint64_t len)
{
	char *chunk = malloc(DATA_COPY_CHUNK);
	int rc = 0;
	if (!chunk)
		return -ENOMEM;
	while (len && rc == 0) {
		size_t want = (size_t)min_u64(len, DATA_COPY_CHUNK);
		rc = pread_zeros(in, chunk, want, in_off);
		if (rc == 0)
			rc = pwrite_full(out, chunk, want, out_off);
		in_off += want;
		out_off += want;
		len -= want;
	}
	free(chunk);
	return rc;
}

/* Copies [in_off, in_off+len) of in to out_off in out, in the kernel when
 * it can (copy_file_range), else through a buffer. */
static int copy_range(int in, uint64_t in_off, int out, uint64_t out_off,
		      uint64_t len)
{
	while (len) {
		loff_t io = (loff_t)in_off, oo = (loff_t)out_off;
		ssize_t n = copy_file_range(in, &io, out, &oo,
					    (size_t)min_u64(len, 1u << 30), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) /* EXDEV, ENOSYS, EOPNOTSUPP, a hole at EOF... */
			return copy_slow(in, in_off, out, out_off, len);
		in_off += (uint64_t)n;
		out_off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

static int copy_ranges(const struct ranges *from, struct ranges *to)
{
	to->v = NULL;
	to->n = to->cap = 0;
	if (!from->n)
		return 0;
	to->v = malloc(from->n * sizeof(*to->v));
	if (!to->v)
		return -ENOMEM;
	memcpy(to->v, from->v, from->n * sizeof(*to->v));
	to->n = to->cap = from->n;
	return 0;
}

/* ---- invariants ---- */

#ifndef NDEBUG
static void check_file(const struct data_file *f)
{
	for (size_t i = 0; i < f->dirty.n; i++)
		assert(ranges_contains(&f->present, f->dirty.v[i].start,
				       f->dirty.v[i].end));
	assert(!f->present.n || f->present.v[f->present.n - 1].end <= f->size);
	for (size_t i = 0; i < f->ninflight; i++) {
		uint64_t gs, ge;
		assert(f->inflight[i].start < f->inflight[i].end &&
		       f->inflight[i].end <= f->size);
		/* nothing present in it (a fetch writes it unlocked) */
		assert(ranges_first_gap(&f->present, f->inflight[i].start,
					f->inflight[i].end, &gs, &ge) &&
		       gs == f->inflight[i].start && ge == f->inflight[i].end);
		for (size_t j = i + 1; j < f->ninflight; j++)
			assert(f->inflight[i].end <= f->inflight[j].start ||
			       f->inflight[j].end <= f->inflight[i].start);
	}
	assert(f->nsnap > 0 || f->rewritten.n == 0);
	assert(f->pbytes == ranges_bytes(&f->present));
	assert(f->dbytes == ranges_bytes(&f->dirty));
	if (f->nolog)
		assert(f->logfd < 0 && f->pbytes == f->size &&
		       f->dbytes == f->size);
	else
		assert((f->fd < 0) == (f->logfd < 0));
}
#else
#define check_file(f) ((void)0)
#endif

/* Bytes of [a, b) that r holds: O(log n + ranges inside). */
static uint64_t covered(const struct ranges *r, uint64_t a, uint64_t b)
{
	uint64_t gaps = 0, pos = a, gs, ge;
	if (a >= b)
		return 0;
	while (pos < b && ranges_first_gap(r, pos, b, &gs, &ge)) {
		gaps += ge - gs;
		pos = ge;
	}
	return b - a - gaps;
}

/* ranges_add()/ranges_remove() that keep *bytes equal to the set's size
 * without an O(n) recount on every write. */
static int set_add(struct ranges *r, uint64_t *bytes, uint64_t a, uint64_t b)
{
	uint64_t had = covered(r, a, b);
	int rc = ranges_add(r, a, b);
	if (!rc && a < b)
		*bytes += (b - a) - had;
	return rc;
}

static int set_remove(struct ranges *r, uint64_t *bytes, uint64_t a, uint64_t b)
{
	uint64_t had = covered(r, a, b);
	int rc = ranges_remove(r, a, b);
	if (!rc)
		*bytes -= had;
	return rc;
}

/* Adds the change in f's set sizes since (p0, d0) to the handle's totals. */
static void account(struct data_file *f, uint64_t p0, uint64_t d0)
{
	if (f->removed)
		return;
	/* unsigned wrap-around makes a shrink a subtraction */
	__atomic_add_fetch(&f->d->cached, f->pbytes - p0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&f->d->dirty, f->dbytes - d0, __ATOMIC_RELAXED);
}

/* ---- the range log ---- */

/* Appends b with one write(2). A short write is cut off again, so the log
 * never holds a torn line in its middle. */
static int log_append(struct data_file *f, const struct buf *b)
{
	if (f->nolog) /* "everything is dirty" says it all */
		return 0;
	if (f->log_broken)
		return -EIO;
	if (!b->len)
		return 0;
	ssize_t n;
	do {
		n = write(f->logfd, b->data, b->len);
	} while (n < 0 && errno == EINTR);
	if (n == (ssize_t)b->len) {
		f->log_bytes += b->len;
		f->log_unsynced = 1;
		return 0;
	}
	int rc = n < 0 ? -errno : -ENOSPC;
	f->log_unsynced = 1;
	if (n > 0 && ftruncate(f->logfd, (off_t)f->log_bytes) != 0)
		f->log_broken = 1; /* until a compaction rewrites it */
	return rc;
}

/* Replaces the log with a snapshot of f's size, its present set and
 * dirty: "<ino>.log.tmp", fsynced, renamed over "<ino>.log", and the
 * directory fsynced. f->logfd then is the new log (an old one is closed). */
static int write_log_locked(struct data_file *f, const struct ranges *dirty)
{
	struct data *d = f->d;
	char name[DATA_NAME_MAX], tmp[DATA_NAME_MAX];
	struct buf b = BUF_INIT;
	int rc = buf_printf(&b, "S %" PRIu64 "\n", f->size);
	for (size_t i = 0; i < f->present.n && rc == 0; i++)
		rc = buf_printf(&b, "P+ %" PRIu64 " %" PRIu64 "\n",
				f->present.v[i].start, f->present.v[i].end);
	for (size_t i = 0; i < dirty->n && rc == 0; i++)
		rc = buf_printf(&b, "D+ %" PRIu64 " %" PRIu64 "\n",
				dirty->v[i].start, dirty->v[i].end);
	if (rc == 0 && f->outside)
		rc = buf_printf(&b, "O+\n");
	if (rc)
		goto fail_0;
	file_name(name, f->ino, ".log");
	file_name(tmp, f->ino, ".log.tmp");
	int tfd = open_fresh(d, tmp, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (tfd < 0) {
		rc = -errno;
		goto fail_0;
	}
	rc = write_full(tfd, b.data, b.len);
	if (rc)
		goto fail_1;
	if (fsync(tfd)) {
		rc = -errno;
		goto fail_1;
	}
	if (renameat(d->dirfd, tmp, d->dirfd, name)) {
		rc = -errno;
		goto fail_1;
	}
	/* The new log is in place: from here on, use it whatever happens. */
	if (f->logfd >= 0 && close(f->logfd))
		rc = -errno; /* the old log is gone; nothing to lose */
	f->logfd = tfd;
	f->log_bytes = b.len;
	f->log_broken = 0;
	f->log_unsynced = 0; /* fsynced above */
	if (fsync(d->dirfd) && rc == 0)
		rc = -errno;
	buf_free(&b);
	return rc;

fail_1:
	if (close(tfd) == 0 && unlinkat(d->dirfd, tmp, 0) != 0)
		rc = rc ? rc : -errno;
fail_0:
	buf_free(&b);
	return rc;
}

static int compact_locked(struct data_file *f)
{
	return write_log_locked(f, &f->dirty);
}

/* A ".new" file's first upload made the bytes of clean clean: it gets a
 * log that says so, then its usual name. On failure it stays as it was
 * (all dirty), unless only the rename failed and the log could not be
 * taken back either: data_open() then finishes the rename, and the log
 * it finds is true. */
static int adopt_locked(struct data_file *f, const struct ranges *clean)
{
	struct data *d = f->d;
	char name[DATA_NAME_MAX], neu[DATA_NAME_MAX];
	struct ranges left;
	int rc = copy_ranges(&f->dirty, &left);
	for (size_t i = 0; i < clean->n && rc == 0; i++)
		rc = ranges_remove(&left, clean->v[i].start, clean->v[i].end);
	if (!rc)
		rc = write_log_locked(f, &left);
	ranges_free(&left);
	if (rc)
		return rc;
	file_name(neu, f->ino, DATA_NEW_SUFFIX);
	file_name(name, f->ino, "");
	if (renameat(d->dirfd, neu, d->dirfd, name) != 0) {
		rc = -errno;
		(void)close(f->logfd); /* fsynced: nothing to lose */
		f->logfd = -1;
		file_name(name, f->ino, ".log");
		(void)unlinkat(d->dirfd, name, 0);
		return rc;
	}
	f->nolog = 0;
	if (fsync(d->dirfd)) /* the log is in place: a crash finishes this */
		f->sync_dir = 1;
	return 0;
}

/* Compacts when the log has grown well past its compact form. A failure
 * leaves the old log, which is still whole, so it is not reported. */
static void maybe_compact_locked(struct data_file *f)
{
	if (f->removed || f->nolog) /* removed: the name may belong to a new
					file by now */
		return;
	uint64_t bound =
		DATA_LOG_LINE_MAX * (2 + (uint64_t)f->present.n + f->dirty.n);
	if (f->log_broken || (f->log_bytes > DATA_LOG_COMPACT_MIN &&
			      f->log_bytes > DATA_LOG_COMPACT_RATIO * bound))
		(void)compact_locked(f);
}

static int parse_num(const char **p, const char *end, uint64_t *out)
{
	const char *s = *p;
	uint64_t v = 0;
	if (s == end || *s < '0' || *s > '9')
		return -EINVAL;
	for (; s < end && *s >= '0' && *s <= '9'; s++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -EINVAL;
		v = v * 10 + (uint64_t)(*s - '0');
	}
	*p = s;
	*out = v;
	return 0;
}

/* Applies one complete line (without its '\n'); -EINVAL if malformed. */
static int replay_line(struct data_file *f, const char *s, const char *end)
{
	uint64_t a, b;
	const char *p = s + 2;
	if (end - s == 2 && s[0] == 'O' && (s[1] == '+' || s[1] == '-')) {
		f->outside = s[1] == '+';
		return 0;
	}
	if (end - s >= 2 && s[0] == 'S' && s[1] == ' ') {
		if (parse_num(&p, end, &a) || p != end)
			return -EINVAL;
		f->size = a;
		if (ranges_remove(&f->present, a, UINT64_MAX) ||
		    ranges_remove(&f->dirty, a, UINT64_MAX))
			return -ENOMEM;
		return 0;
	}
	if (end - s < 3 || (s[0] != 'P' && s[0] != 'D') ||
	    (s[1] != '+' && s[1] != '-') || s[2] != ' ')
		return -EINVAL;
	p = s + 3;
	if (parse_num(&p, end, &a) || p == end || *p++ != ' ' ||
	    parse_num(&p, end, &b) || p != end || a > b)
		return -EINVAL;
	if (s[0] == 'P' && s[1] == '-') /* not written by this version */
		return -EINVAL;
	if (s[1] == '-') /* D- */
		return ranges_remove(&f->dirty, a, b);
	if (ranges_add(&f->present, a, b))
		return -ENOMEM;
	if (s[0] == 'D' && ranges_add(&f->dirty, a, b))
		return -ENOMEM;
	f->size = max_u64(f->size, b);
	return 0;
}

/* ---- file records, hash table, LRU (all under d->lock) ---- */

static struct data_file *file_new(struct data *d, uint64_t ino)
{
	struct data_file *f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	f->d = d;
	f->ino = ino;
	f->fd = f->logfd = -1;
	if (pthread_mutex_init(&f->lock, NULL))
		goto fail_1;
	if (pthread_cond_init(&f->fetched, NULL))
		goto fail_2;
	return f;

fail_2:
	pthread_mutex_destroy(&f->lock);
fail_1:
	free(f);
	return NULL;
}

static void file_close_fds(struct data_file *f)
{
	/* Nothing is pending on either: every change was written before the
	 * call that made it returned, so a close error loses nothing. */
	if (f->fd >= 0)
		(void)close(f->fd);
	if (f->logfd >= 0)
		(void)close(f->logfd);
	f->fd = f->logfd = -1;
}

static void file_free(struct data_file *f)
{
	assert(f->ninflight == 0 && f->nwriting == 0);
	file_close_fds(f);
	ranges_free(&f->present);
	ranges_free(&f->dirty);
	ranges_free(&f->rewritten);
	free(f->inflight);
	free(f->ra);
	pthread_cond_destroy(&f->fetched);
	pthread_mutex_destroy(&f->lock);
	free(f);
}

static size_t bucket_of(const struct data *d, uint64_t ino)
{
	uint64_t h = ino * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 32) & (d->nbuckets - 1);
}

static struct data_file *hash_find(const struct data *d, uint64_t ino)
{
	struct data_file *f = d->buckets[bucket_of(d, ino)];
	while (f && f->ino != ino)
		f = f->hnext;
	return f;
}

static int hash_insert(struct data *d, struct data_file *f)
{
	if (d->nfiles >= d->nbuckets) {
		size_t old = d->nbuckets;
		struct data_file **ob = d->buckets;
		struct data_file **nb = calloc(old * 2, sizeof(*nb));
		if (!nb)
			return -ENOMEM;
		d->buckets = nb;
		d->nbuckets = old * 2;
		for (size_t i = 0; i < old; i++) {
			struct data_file *g = ob[i], *next;
			for (; g; g = next) {
				next = g->hnext;
				size_t b = bucket_of(d, g->ino);
				g->hnext = nb[b];
				nb[b] = g;
			}
		}
		free(ob);
	}
	size_t b = bucket_of(d, f->ino);
	f->hnext = d->buckets[b];
	d->buckets[b] = f;
	d->nfiles++;
	return 0;
}

static void hash_remove(struct data *d, struct data_file *f)
{
	struct data_file **pp = &d->buckets[bucket_of(d, f->ino)];
	while (*pp != f)
		pp = &(*pp)->hnext;
	*pp = f->hnext;
	f->hnext = NULL;
	d->nfiles--;
}

static void lru_append(struct data *d, struct data_file *f)
{
	f->lru_next = NULL;
	f->lru_prev = d->lru_tail;
	if (d->lru_tail)
		d->lru_tail->lru_next = f;
	else
		d->lru_head = f;
	d->lru_tail = f;
}

static void lru_unlink(struct data *d, struct data_file *f)
{
	if (f->lru_prev)
		f->lru_prev->lru_next = f->lru_next;
	else
		d->lru_head = f->lru_next;
	if (f->lru_next)
		f->lru_next->lru_prev = f->lru_prev;
	else
		d->lru_tail = f->lru_prev;
	f->lru_prev = f->lru_next = NULL;
}

static int unlink_name(struct data *d, uint64_t ino, const char *suffix)
{
	return drop_name(d, ino, suffix, 0);
}

static int open_or_create(struct data *d, const char *name, int flags,
			  int create)
{
	return create ? open_fresh(d, name, flags)
		      : openat(d->dirfd, name, flags);
}

/* Opens f's file and log (refs going 0 -> 1); create makes them empty. */
static int file_open_fds(struct data_file *f, int create)
{
	struct data *d = f->d;
	char name[DATA_NAME_MAX];
	struct stat st;
	int rc;

	if (f->nolog) {
		file_name(name, f->ino, DATA_NEW_SUFFIX);
		f->fd = open_or_create(d, name, O_RDWR | O_CLOEXEC, create);
		if (f->fd < 0)
			return -errno;
		f->log_unsynced = 0;
		f->sync_dir = create;
		return 0;
	}
	/* log first: a crash between the two leaves a log with no file,
	 * which data_open() drops */
	file_name(name, f->ino, ".log");
	f->logfd = open_or_create(d, name, O_WRONLY | O_APPEND | O_CLOEXEC,
				  create);
	if (f->logfd < 0)
		return -errno;
	file_name(name, f->ino, "");
	f->fd = open_or_create(d, name, O_RDWR | O_CLOEXEC, create);
	if (f->fd < 0) {
		rc = -errno;
		goto fail_1;
	}
	if (fstat(f->logfd, &st)) {
		rc = -errno;
		goto fail_2;
	}
	f->log_bytes = (uint64_t)st.st_size;
	f->log_unsynced = 1; /* not known */
	if (create)
		f->sync_dir = 1;
	return 0;

fail_2:
	(void)close(f->fd); /* opened read-write, nothing written */
	f->fd = -1;
fail_1:
	(void)close(f->logfd);
	f->logfd = -1;
	return rc;
}

/* ---- size changes ---- */

/* Shrinks to size: logs "S size" first, then cuts the file. */
static int shrink_locked(struct data_file *f, uint64_t size)
{
	struct buf b = BUF_INIT;
	uint64_t p0 = f->pbytes, d0 = f->dbytes;
	int rc = buf_printf(&b, "S %" PRIu64 "\n", size);
	if (!rc)
		rc = log_append(f, &b);
	buf_free(&b);
	if (rc)
		return rc;
	/* trimming a set's tail never allocates, so this cannot fail */
	(void)set_remove(&f->present, &f->pbytes, size, UINT64_MAX);
	(void)set_remove(&f->dirty, &f->dbytes, size, UINT64_MAX);
	(void)ranges_remove(&f->rewritten, size, UINT64_MAX);
	f->size = size;
	account(f, p0, d0);
	if (ftruncate(f->fd, (off_t)size))
		return -errno; /* stale bytes past size are never read */
	return 0;
}

/* ---- in-flight fetches ---- */

static const struct fetch_rec *inflight_at(const struct data_file *f,
					   uint64_t pos)
{
	for (size_t i = 0; i < f->ninflight; i++)
		if (f->inflight[i].start <= pos && pos < f->inflight[i].end)
			return &f->inflight[i];
	return NULL;
}

/* The end of [start, end) cut at the first in-flight record inside it. */
static uint64_t inflight_clip(const struct data_file *f, uint64_t start,
			      uint64_t end)
{
	for (size_t i = 0; i < f->ninflight; i++)
		if (f->inflight[i].start > start && f->inflight[i].start < end)
			end = f->inflight[i].start;
	return end;
}

static int inflight_add(struct data_file *f, uint64_t start, uint64_t end)
{
	if (f->ninflight == f->capinflight) {
		size_t cap = f->capinflight ? f->capinflight * 2 : 4;
		struct fetch_rec *v = realloc(f->inflight, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		f->inflight = v;
		f->capinflight = cap;
	}
	f->inflight[f->ninflight++] = (struct fetch_rec){
		.start = start,
		.end = end,
		.landed = start,
		.wake_at = UINT64_MAX,
	};
	return 0;
}

static struct fetch_rec *inflight_find(struct data_file *f, uint64_t start,
				       uint64_t end)
{
	for (size_t i = 0; i < f->ninflight; i++)
		if (f->inflight[i].start == start && f->inflight[i].end == end)
			return &f->inflight[i];
	return NULL;
}

/* Ends the record of [start, end), and with it the room it holds. */
static void inflight_del(struct data_file *f, uint64_t start, uint64_t end)
{
	struct fetch_rec *r = inflight_find(f, start, end);
	assert(r);
	room_give(f->d, r->claim);
	*r = f->inflight[--f->ninflight];
}

/* Takes room on the cache disk for r's fetch, about to start; it is given
 * back as the bytes land (data_fetch_landed()). */
static int claim_locked(struct data_file *f, struct fetch_rec *r, int urgent)
{
	uint64_t len = r->end - r->landed;
	int rc = room_take(f->d, len, urgent);
	if (!rc)
		r->claim = room_counted(f->d, len) ? len : 0;
	return rc;
}

/* Marks [s, e) in flight for a fetch: one that starts now takes its room,
 * a queued one (job) only checks that there is room for it now. */
static int mark_locked(struct data_file *f, uint64_t s, uint64_t e, int urgent,
		       struct prefetch *job)
{
	int rc = job ? room_check(f->d, e - s, urgent) : 0;
	if (!rc)
		rc = inflight_add(f, s, e);
	if (rc)
		return rc;
	struct fetch_rec *r = &f->inflight[f->ninflight - 1];
	r->job = job;
	if (!job && (rc = claim_locked(f, r, urgent)) != 0)
		inflight_del(f, s, e);
	return rc;
}

/* A queued job's range about to be fetched (by its thread, or a reader
 * that needs it first): started, with room taken for it; -ENOSPC, and
 * the record gone (its waiters woken), when there is none now. */
static int start_job_locked(struct data_file *f, struct fetch_rec *r)
{
	r->job = NULL;
	int rc = claim_locked(f, r, 0);
	if (rc) {
		inflight_del(f, r->start, r->end);
		broadcast(&f->fetched);
	}
	return rc;
}

/* The record of a queued prefetch, or NULL once a reader or a write took
 * it (see struct fetch_rec). */
static struct fetch_rec *inflight_of_job(struct data_file *f,
					 const struct prefetch *p)
{
	for (size_t i = 0; i < f->ninflight; i++)
		if (f->inflight[i].job == p)
			return &f->inflight[i];
	return NULL;
}

/* Makes [off, off + len) of fd read as zeros. */
static int zero_range(int fd, uint64_t off, uint64_t len)
{
	static const unsigned char zeros[64 << 10];
	if (!len || fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
			      (off_t)off, (off_t)len) == 0)
		return 0;
	if (errno != EOPNOTSUPP)
		return -errno;
	int rc = 0;
	for (uint64_t at = off; !rc && at < off + len; at += sizeof(zeros))
		rc = pwrite_full(fd, zeros,
				 (size_t)min_u64(sizeof(zeros), off + len - at),
				 at);
	return rc;
}

/* After a fetch of n bytes into [s, e) of the cache file: zeros past a
 * short one, then the parts within the size logged and marked present
 * (all of them: writes and truncates waited for the fetch). Called with
 * f->lock held. */
static int install_locked(struct data_file *f, uint64_t s, uint64_t e,
			  uint64_t n)
{
	struct ranges add = RANGES_INIT;
	struct buf b = BUF_INIT;
	uint64_t stop = min_u64(e, f->size), pos = s, gs, ge;
	int rc = s + n < stop ? zero_range(f->fd, s + n, stop - (s + n)) : 0;

	while (!rc && pos < stop &&
	       ranges_first_gap(&f->present, pos, stop, &gs, &ge)) {
		rc = ranges_add(&add, gs, ge);
		if (!rc)
			rc = buf_printf(&b, "P+ %" PRIu64 " %" PRIu64 "\n", gs,
					ge);
		pos = ge;
	}
	if (rc || !add.n)
		goto out;
	rc = log_append(f, &b);
	if (rc)
		goto out;
	uint64_t p0 = f->pbytes, d0 = f->dbytes;
	for (size_t i = 0; i < add.n && rc == 0; i++)
		rc = set_add(&f->present, &f->pbytes, add.v[i].start,
			     add.v[i].end);
	account(f, p0, d0);
	maybe_compact_locked(f);
out:
	ranges_free(&add);
	buf_free(&b);
	return rc;
}

/* Fetches [s, e), which its caller marked in flight, straight into the
 * cache file. Drops f->lock while the callback runs; returns with it held,
 * the record gone and its waiters woken. A fetch that failed or was
 * stopped keeps the bytes it told of (data_fetch_landed()); a stopped
 * one is no failure. */
static int fetch_marked_locked(struct data_file *f, uint64_t s, uint64_t e)
{
	struct data *d = f->d;
	struct data_fetch token = {f, s, e};
	unlock_mutex(&f->lock);
	ssize_t n = d->cfg.fetch(d->cfg.fetch_ctx, f->ino, s, e - s, f->fd,
				 (off_t)s, &token);
	if (n > (ssize_t)(e - s))
		n = -EIO; /* the callback broke its contract */
	lock_mutex(&f->lock);
	uint64_t landed = inflight_find(f, s, e)->landed;
	uint64_t end = min_u64(e, f->size);
	/* past the object's end the bytes are zeros: the cache file holds
	 * them too (no write lands in a fetch's range), so a reply spliced
	 * from it (data_place()) is never cut short */
	if (n >= 0 && end > s + (uint64_t)n &&
	    pwrite(f->fd, "", 1, (off_t)end - 1) != 1)
		n = errno ? -errno : -EIO;
	inflight_del(f, s, e);
	int rc;
	if (n >= 0) {
		rc = install_locked(f, s, e, (uint64_t)n);
	} else {
		rc = landed > s ? install_locked(f, s, landed, landed - s) : 0;
		if (n != -ECANCELED && !rc)
			rc = (int)n;
	}
	broadcast(&f->fetched);
	return rc;
}

int data_fetch_landed(struct data_fetch *t, uint64_t n)
{
	struct data_file *f = t->f;
	int rc = 0;
	lock_mutex(&f->lock);
	struct fetch_rec *r = inflight_find(f, t->start, t->end);
	if (r) {
		uint64_t at = t->start + min_u64(n, t->end - t->start);
		if (at > r->landed) {
			/* written: fstatvfs shows them now */
			uint64_t shown = min_u64(at - r->landed, r->claim);
			room_give(f->d, shown);
			r->claim -= shown;
			r->landed = at;
		}
		if (r->landed >= r->wake_at) {
			r->wake_at = UINT64_MAX;
			broadcast(&f->fetched);
		}
		rc = r->cancel ? -ECANCELED : 0;
	}
	unlock_mutex(&f->lock);
	return rc;
}

/* Waits until no fetch in flight overlaps [s, e); a queued prefetch that
 * has not started is dropped instead. Called with f->lock held (dropped
 * while waiting). */
static void wait_fetches_locked(struct data_file *f, uint64_t s, uint64_t e)
{
	for (size_t i = 0; i < f->ninflight;) {
		struct fetch_rec *r = &f->inflight[i];
		if (r->start >= e || r->end <= s) {
			i++;
			continue;
		}
		if (r->job) { /* queued, not started: its thread skips it */
			inflight_del(f, r->start, r->end);
			/* a reader may wait on it (a lead) */
			broadcast(&f->fetched);
		} else {
			wait_cond(&f->fetched, &f->lock);
		}
		i = 0; /* the list changed */
	}
}

/* Waits until no rewrite writes the cache file unlocked (data_write()).
 * Called with f->lock held (dropped while waiting). */
static void wait_writes_locked(struct data_file *f)
{
	while (f->nwriting)
		wait_cond(&f->fetched, &f->lock);
}

/* Fetches [s, e), which is absent and not in flight. Drops f->lock while
 * the callback runs; returns with it held. */
static int fetch_locked(struct data_file *f, uint64_t s, uint64_t e, int urgent)
{
	uint64_t gs, ge;
	(void)gs;
	(void)ge;
	assert(ranges_first_gap(&f->present, s, e, &gs, &ge) && gs == s &&
	       ge == e);
	int rc = mark_locked(f, s, e, urgent, NULL);
	return rc ? rc : fetch_marked_locked(f, s, e);
}

static int all_present(const struct data_file *f, uint64_t s, uint64_t e)
{
	uint64_t gs, ge;
	return !ranges_first_gap(&f->present, s, e, &gs, &ge);
}

/* Makes [start, min(end, size)) present, or with landed_ok, present or
 * landed in a fetch still under way (a reader's pread sees those bytes:
 * no write or truncate runs over a fetch). ra > 0 widens the fetch of the
 * gap that reaches the request's end to ra bytes (*used is then set).
 * Called and returns with f->lock held. */
static int fill_locked(struct data_file *f, uint64_t start, uint64_t end,
		       uint64_t ra, int urgent, int *used, int landed_ok)
{
	for (;;) {
		uint64_t stop = min_u64(end, f->size), gs, ge;
		if (start >= stop ||
		    !ranges_first_gap(&f->present, start, stop, &gs, &ge))
			return 0;
		struct fetch_rec *r = (struct fetch_rec *)inflight_at(f, gs);
		if (r && r->job && !(landed_ok && r->job->lead)) {
			/* queued, not started: fetch it here (no room for
			 * it now: as a gap below, which then fails) */
			r->ahead = 0;
			if (start_job_locked(f, r))
				continue;
			int rc = fetch_marked_locked(f, r->start, r->end);
			if (rc && !all_present(f, gs, stop))
				return rc;
			continue;
		}
		if (r) {
			uint64_t need = min_u64(stop, r->end);
			if (landed_ok && r->landed > gs) {
				start = min_u64(r->landed, need);
				continue;
			}
			if (landed_ok && need < r->wake_at)
				r->wake_at = need;
			wait_cond(&f->fetched, &f->lock);
			continue; /* re-evaluate: it may have failed */
		}
		uint64_t fe = ge;
		if (ra && ge == stop) {
			uint64_t want = gs + min_u64(ra, UINT64_MAX - gs);
			uint64_t we = min_u64(f->size, max_u64(ge, want));
			uint64_t x;
			if (ranges_first_gap(&f->present, gs, we, &x, &fe))
				assert(x == gs);
			*used = 1;
		}
		fe = inflight_clip(f, gs, fe);
		int rc = fetch_locked(f, gs, fe, urgent);
		/* a fetch that failed after the bytes asked for landed is
		 * no failure of this read */
		if (rc && !all_present(f, gs, min_u64(stop, f->size)))
			return rc;
	}
}

/* The first byte at or past pos, before lim, that is neither present nor
 * in flight; lim if none. */
static uint64_t uncovered_from(const struct data_file *f, uint64_t pos,
			       uint64_t lim)
{
	uint64_t gs, ge;
	while (pos < lim && ranges_first_gap(&f->present, pos, lim, &gs, &ge)) {
		const struct fetch_rec *r = inflight_at(f, gs);
		if (!r)
			return gs;
		pos = r->end;
	}
	return lim;
}

/* Marks [s, e), absent and not in flight, in flight as a job for the
 * prefetch threads (a lead or a piece ahead), for the caller to queue
 * (prefetch_queue()); NULL when there is no memory or no room for it.
 * Called with f->lock held. */
static struct prefetch *mark_queued_locked(struct data_file *f, uint64_t s,
					   uint64_t e, int lead)
{
	struct prefetch *p = malloc(sizeof(*p));
	if (!p || mark_locked(f, s, e, 0, p)) {
		free(p);
		return NULL;
	}
	*p = (struct prefetch){f, NULL, lead};
	f->inflight[f->ninflight - 1].ahead = 1;
	return p;
}

/* What a sequential reader at end with window win has fetched ahead
 * (see Prefetch above): up to DATA_PREFETCH_BATCH pieces of
 * [end, end + 2 win), marked in flight as queued, their jobs in out.
 * Called with f->lock held. */
static unsigned plan_ahead_locked(struct data_file *f, uint64_t end,
				  uint64_t win, struct prefetch **out)
{
	uint64_t piece = min_u64(win, DATA_PREFETCH_PIECE);
	uint64_t lim = f->size - end > 2 * win ? end + 2 * win : f->size;
	unsigned n = 0;
	for (uint64_t pos = uncovered_from(f, end, lim);
	     n < DATA_PREFETCH_BATCH && pos < lim;
	     pos = uncovered_from(f, pos, lim)) {
		uint64_t gs, ge;
		if (lim - pos < piece && lim < f->size)
			break; /* less than a piece: at a later read */
		if (ranges_first_gap(&f->present, pos, lim, &gs, &ge))
			assert(gs == pos);
		uint64_t pe = inflight_clip(f, pos, min_u64(ge, pos + piece));
		struct prefetch *p = mark_queued_locked(f, pos, pe, 0);
		if (!p)
			break;
		out[n++] = p;
	}
	return n;
}

/* A lead for a sequential reader at off whose bytes [off, end) are not
 * all present (see data_config.lead): the first gap in them, widened to
 * max(ra, lead) bytes, marked in flight as queued; NULL when that gap is
 * in flight already. The caller queues it (prefetch_queue(), at the head)
 * and waits for its bytes to land, also when every thread is busy: 64
 * readers then share the threads' few large GETs in turn, which is
 * faster than 64 readers' small GETs at once against an S3 whose cost
 * is per request. Called with f->lock held. */
static struct prefetch *plan_lead_locked(struct data_file *f, uint64_t off,
					 uint64_t end, uint64_t ra)
{
	struct data *d = f->d;
	uint64_t gs, ge, x;
	if (!ranges_first_gap(&f->present, off, min_u64(end, f->size), &gs,
			      &ge) ||
	    inflight_at(f, gs))
		return NULL;
	uint64_t want = max_u64(ra, d->cfg.lead);
	uint64_t we = f->size - gs > want ? gs + want : f->size;
	if (ranges_first_gap(&f->present, gs, we, &x, &ge))
		assert(x == gs);
	return mark_queued_locked(f, gs, inflight_clip(f, gs, ge), 1);
}

/* ---- public API ---- */

void data_config_init(struct data_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->size_limit = DATA_DEFAULT_SIZE_LIMIT;
	cfg->free_floor = DATA_DEFAULT_FREE_FLOOR;
	cfg->reserve = DATA_DEFAULT_RESERVE;
	cfg->readahead_min = DATA_DEFAULT_READAHEAD_MIN;
	cfg->readahead_max = DATA_DEFAULT_READAHEAD_MAX;
	cfg->prefetch_threads = DATA_DEFAULT_PREFETCH_THREADS;
	cfg->lead = DATA_DEFAULT_LEAD;
	cfg->spares = DATA_DEFAULT_SPARES;
}

static int mkdir_p(const char *path)
{
	struct buf b = BUF_INIT;
	int rc = buf_puts(&b, path);
	if (rc)
		return rc;
	for (char *p = b.data + 1; rc == 0; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(b.data, 0700) && errno != EEXIST)
			rc = -errno;
		*p = c;
		if (c == '\0')
			break;
	}
	buf_free(&b);
	return rc;
}

/* "<digits><suffix>" -> ino; 0 when name has another form. */
static int parse_name(const char *name, const char *suffix, uint64_t *ino)
{
	const char *p = name;
	if (*p == '0' && p[1] >= '0' && p[1] <= '9')
		return 0; /* not a name we write */
	if (parse_num(&p, name + strlen(name), ino))
		return 0;
	return strcmp(p, suffix) == 0;
}

/* DIR/<ino>.new: renamed "<ino>" when its log is there (an adoption a
 * crash cut short; pass 1 reads the log), else a new record with all its
 * bytes dirty. 0 or -errno. */
static int load_new(struct data *d, uint64_t ino)
{
	char name[DATA_NAME_MAX], neu[DATA_NAME_MAX];
	struct stat st;
	file_name(neu, ino, DATA_NEW_SUFFIX);
	file_name(name, ino, ".log");
	if (fstatat(d->dirfd, name, &st, 0) == 0) {
		file_name(name, ino, "");
		return renameat(d->dirfd, neu, d->dirfd, name) ? -errno : 0;
	}
	if (errno != ENOENT)
		return -errno;
	if (fstatat(d->dirfd, neu, &st, 0))
		return errno == ENOENT ? 0 : -errno;
	struct data_file *f = file_new(d, ino);
	if (!f)
		return -ENOMEM;
	f->nolog = 1;
	f->size = f->pbytes = f->dbytes = (uint64_t)st.st_size;
	f->lru_time = st.st_mtim;
	int rc = 0;
	if (f->size && (ranges_add(&f->present, 0, f->size) ||
			ranges_add(&f->dirty, 0, f->size)))
		rc = -ENOMEM;
	if (!rc)
		rc = hash_insert(d, f);
	if (rc)
		file_free(f);
	else
		check_file(f);
	return rc;
}

/* Reads DIR/<ino>.log into a new record. 1 with *out set, 0 when the log
 * was dropped (no cache file), or -errno. */
static int load_one(struct data *d, uint64_t ino, struct data_file **out)
{
	char name[DATA_NAME_MAX];
	struct stat st, fst;
	char *text = NULL;
	int rc;

	file_name(name, ino, "");
	if (fstatat(d->dirfd, name, &fst, 0)) {
		if (errno != ENOENT)
			return -errno;
		file_name(name, ino, ".log");
		return unlinkat(d->dirfd, name, 0) ? -errno : 0;
	}
	struct data_file *f = file_new(d, ino);
	if (!f)
		return -ENOMEM;
	file_name(name, ino, ".log");
	int fd = openat(d->dirfd, name, O_RDWR | O_APPEND | O_CLOEXEC);
	if (fd < 0) {
		rc = -errno;
		goto fail_1;
	}
	if (fstat(fd, &st)) {
		rc = -errno;
		goto fail_2;
	}
	size_t len = (size_t)st.st_size, got = 0;
	text = malloc(len + 1);
	if (!text) {
		rc = -ENOMEM;
		goto fail_2;
	}
	while (got < len) {
		ssize_t n = pread(fd, text + got, len - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			goto fail_3;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	size_t pos = 0, valid = 0;
	int bad = 0;
	while (pos < got) {
		char *nl = memchr(text + pos, '\n', got - pos);
		if (!nl)
			break; /* torn last line */
		rc = replay_line(f, text + pos, nl);
		if (rc == -ENOMEM)
			goto fail_3;
		if (rc)
			bad = 1;
		pos = (size_t)(nl - text) + 1;
		valid = pos;
	}
	if (valid < len && ftruncate(fd, (off_t)valid)) {
		rc = -errno;
		goto fail_3;
	}
	/* the kernel was writing it (passthrough) when the last process
	 * stopped: what it wrote went anywhere, past the logged size too */
	if (f->outside) {
		f->size = max_u64(f->size, (uint64_t)fst.st_size);
		if (f->size && (ranges_add(&f->present, 0, f->size) ||
				ranges_add(&f->dirty, 0, f->size))) {
			rc = -ENOMEM;
			goto fail_3;
		}
	}
	f->log_bytes = valid;
	f->lru_time = st.st_mtim;
	f->pbytes = ranges_bytes(&f->present);
	f->dbytes = ranges_bytes(&f->dirty);
	if (bad) { /* rewrite it without the lines that did not parse */
		f->logfd = fd;
		rc = compact_locked(f);
		fd = f->logfd;
		f->logfd = -1;
		if (rc)
			goto fail_3;
	}
	free(text);
	if (close(fd)) {
		rc = -errno;
		goto fail_1;
	}
	check_file(f);
	*out = f;
	return 1;

fail_3:
	free(text);
fail_2:
	(void)close(fd);
fail_1:
	file_free(f);
	return rc;
}

/* The load after a power loss (d->distrust): bytes that f's log calls
 * present but not dirty were fetched or uploaded, and neither the cache
 * file nor the log was flushed after them, so the disk may hold the line
 * without the bytes (the kernel writes files back in no set order). They
 * are dropped, to be fetched again. Dirty bytes stay: data_sync() wrote
 * those it was asked to flush before their lines. A file left with
 * nothing goes. Until the boot is recorded (record_boot()) every open
 * does this again, so the steps need no order among themselves, and a
 * log that cannot be rewritten (a full disk) only keeps the boot from
 * being recorded. 1: f stays, trimmed; 0: f was freed and its files
 * removed; or -errno (f freed). */
static int keep_vouched(struct data *d, struct data_file *f)
{
	if (f->pbytes == f->dbytes) /* dirty is a subset of present */
		return 1;
	uint64_t ino = f->ino;
	if (f->dbytes == 0) {
		file_free(f);
		d->dropped_files++;
		return drop_pair(d, ino, 0);
	}
	struct ranges keep;
	int rc = copy_ranges(&f->dirty, &keep);
	if (rc) {
		file_free(f);
		return rc;
	}
	/* the blocks back to the disk first (room for the new log on a
	 * full one); best effort: nothing reads bytes that are not present */
	char name[DATA_NAME_MAX];
	file_name(name, ino, "");
	int fd = openat(d->dirfd, name, O_WRONLY | O_CLOEXEC);
	for (size_t i = 0; fd >= 0 && i < f->present.n; i++) {
		uint64_t s = f->present.v[i].start, e = f->present.v[i].end;
		uint64_t gs, ge;
		while (s < e && ranges_first_gap(&f->dirty, s, e, &gs, &ge)) {
			(void)fallocate(
				fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
				(off_t)gs, (off_t)(ge - gs));
			s = ge;
		}
	}
	if (fd >= 0)
		(void)close(fd);
	ranges_free(&f->present);
	f->present = keep;
	f->pbytes = f->dbytes;
	if (compact_locked(f) != 0)
		d->unrecorded = 1;
	/* the new log is fsynced; its descriptor opens again on first use */
	if (f->logfd >= 0)
		(void)close(f->logfd);
	f->logfd = -1;
	d->trimmed_files++;
	check_file(f);
	return 1;
}

/* DIR/.spare.<n>: back on the stack, or unlinked when it is full (or
 * the name is not one we write). Emptied before it got the name, and
 * emptied again when it is taken if a crash of the machine left bytes in
 * it (open_fresh()). */
static int load_spare(struct data *d, const char *name)
{
	uint64_t n;
	const char *p = name + strlen(DATA_SPARE_PREFIX);
	if (!parse_num(&p, name + strlen(name), &n) && *p == '\0' &&
	    d->nspares < d->cfg.spares) {
		d->spares[d->nspares++] = n;
		if (n >= d->spare_next)
			d->spare_next = n + 1;
		return 0;
	}
	return unlinkat(d->dirfd, name, 0) && errno != ENOENT ? -errno : 0;
}

static int cmp_lru_time(const void *a, const void *b)
{
	const struct data_file *x = *(struct data_file *const *)a;
	const struct data_file *y = *(struct data_file *const *)b;
	if (x->lru_time.tv_sec != y->lru_time.tv_sec)
		return x->lru_time.tv_sec < y->lru_time.tv_sec ? -1 : 1;
	if (x->lru_time.tv_nsec != y->lru_time.tv_nsec)
		return x->lru_time.tv_nsec < y->lru_time.tv_nsec ? -1 : 1;
	return x->ino < y->ino ? -1 : x->ino > y->ino;
}

/* Replays every log in DIR, deletes strays, and builds the LRU. */
static int load_all(struct data *d)
{
	int dfd = dup(d->dirfd);
	if (dfd < 0)
		return -errno;
	DIR *dir = fdopendir(dfd);
	if (!dir) {
		int rc = -errno;
		(void)close(dfd);
		return rc;
	}
	int rc = 0;
	struct dirent *de;
	rewinddir(dir); /* dirfd's offset, which its dup shares */
	/* pass 0: ".new" files (before the logs: one may be adopted) */
	while (rc == 0 && (errno = 0, de = readdir(dir)) != NULL) {
		uint64_t ino;
		if (parse_name(de->d_name, DATA_NEW_SUFFIX, &ino))
			rc = load_new(d, ino);
	}
	if (rc == 0 && errno)
		rc = -errno;
	rewinddir(dir);
	/* pass 1: logs (and leftovers of compaction and fetches) */
	while (rc == 0 && (errno = 0, de = readdir(dir)) != NULL) {
		uint64_t ino;
		struct data_file *f = NULL;
		if (strncmp(de->d_name, DATA_SPARE_PREFIX,
			    strlen(DATA_SPARE_PREFIX)) == 0) {
			rc = load_spare(d, de->d_name);
		} else if (parse_name(de->d_name, ".log.tmp", &ino) ||
			   strncmp(de->d_name, DATA_FETCH_TMP_PREFIX,
				   strlen(DATA_FETCH_TMP_PREFIX)) == 0) {
			if (unlinkat(d->dirfd, de->d_name, 0) &&
			    errno != ENOENT)
				rc = -errno;
		} else if (parse_name(de->d_name, ".log", &ino)) {
			rc = load_one(d, ino, &f);
			if (rc == 1 && d->distrust)
				rc = keep_vouched(d, f);
			if (rc == 1) {
				rc = hash_insert(d, f);
				if (rc)
					file_free(f);
			}
		}
	}
	if (rc == 0 && errno)
		rc = -errno;
	/* pass 2: cache files with no log hold nothing we can vouch for */
	rewinddir(dir);
	while (rc == 0 && (errno = 0, de = readdir(dir)) != NULL) {
		uint64_t ino;
		if (parse_name(de->d_name, "", &ino) && !hash_find(d, ino) &&
		    unlinkat(d->dirfd, de->d_name, 0) && errno != ENOENT)
			rc = -errno;
	}
	if (rc == 0 && errno)
		rc = -errno;
	if (closedir(dir) && rc == 0)
		rc = -errno;
	if (rc)
		return rc;

	/* the LRU, oldest log first; and the totals */
	struct data_file **all =
		calloc(d->nfiles ? d->nfiles : 1, sizeof(*all));
	if (!all)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < d->nbuckets; i++)
		for (struct data_file *f = d->buckets[i]; f; f = f->hnext)
			all[n++] = f;
	qsort(all, n, sizeof(*all), cmp_lru_time);
	for (size_t i = 0; i < n; i++) {
		lru_append(d, all[i]);
		d->cached += all[i]->pbytes;
		d->dirty += all[i]->dbytes;
	}
	free(all);
	return 0;
}

/* This boot's id into id (cfg.boot_id, else the kernel's); "" when
 * unknown, which no recorded one matches. */
static void boot_id_now(const struct data *d, char id[DATA_BOOT_ID_MAX])
{
	id[0] = '\0';
	if (d->cfg.boot_id) {
		snprintf(id, DATA_BOOT_ID_MAX, "%s", d->cfg.boot_id);
		return;
	}
	FILE *fp = fopen("/proc/sys/kernel/random/boot_id", "re");
	if (!fp)
		return;
	if (!fgets(id, DATA_BOOT_ID_MAX, fp))
		id[0] = '\0';
	id[strcspn(id, "\n")] = '\0';
	fclose(fp);
}

/* Whether the logs can be taken at their word: written in this boot (a
 * killed process leaves its writes in the page cache, which the disk and
 * every reader share), or flushed by a clean close since (DIR/synced).
 * Otherwise the machine went down since the last open, and the load
 * keeps only dirty bytes (keep_vouched()). */
static int logs_trusted(struct data *d, const char *now, int *same_boot,
			int *synced)
{
	char was[DATA_BOOT_ID_MAX] = "";
	int fd = openat(d->dirfd, DATA_BOOT_NAME, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, was, sizeof(was) - 1);
		was[n > 0 ? n : 0] = '\0';
		was[strcspn(was, "\n")] = '\0';
		(void)close(fd);
	}
	*same_boot = now[0] && strcmp(was, now) == 0;
	*synced = faccessat(d->dirfd, DATA_SYNCED_NAME, F_OK, 0) == 0;
	return *same_boot || *synced;
}

/* After the load: the "synced" marker goes, durably, before anything in
 * this open can change a file (a power loss from here on must not find
 * it). On a new boot, the files the load dropped are made gone, then the
 * boot's id is recorded, so that a later open in this boot trusts the
 * logs. Only the marker's removal must succeed: without the id, the next
 * open checks again, which costs fetches, not bytes. */
static int record_boot(struct data *d, const char *now, int same_boot,
		       int synced)
{
	if (synced && unlinkat(d->dirfd, DATA_SYNCED_NAME, 0) &&
	    errno != ENOENT)
		return -errno;
	if (same_boot || !now[0] || d->unrecorded)
		return synced && fsync(d->dirfd) ? -errno : 0;
	if (fsync(d->dirfd))
		return synced ? -errno : 0;
	char tmp[sizeof(DATA_BOOT_NAME) + 4];
	snprintf(tmp, sizeof(tmp), "%s.tmp", DATA_BOOT_NAME);
	int fd = openat(d->dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			0600);
	if (fd < 0)
		return 0;
	char line[DATA_BOOT_ID_MAX + 1];
	int len = snprintf(line, sizeof(line), "%s\n", now);
	int ok = write_full(fd, line, (size_t)len) == 0 && fsync(fd) == 0;
	ok = close(fd) == 0 && ok;
	if (ok && renameat(d->dirfd, tmp, d->dirfd, DATA_BOOT_NAME) == 0)
		(void)fsync(d->dirfd);
	else
		(void)unlinkat(d->dirfd, tmp, 0);
	return 0;
}

/* Frees every file, referenced or not: a FUSE session can end with
 * RELEASE requests never delivered, and their references die here. */
static void free_all_files(struct data *d)
{
	size_t held = 0;
	for (size_t i = 0; i < d->nbuckets; i++) {
		struct data_file *f = d->buckets[i], *next;
		for (; f; f = next) {
			next = f->hnext;
			held += f->refs > 0;
			file_free(f);
		}
	}
	if (held)
		fprintf(stderr,
			"tierfs: data: %zu cache files were still open "
			"at close\n",
			held);
	free(d->buckets);
}

/* ---- frozen files ----
 * Writes in passthrough reach a cache file through the kernel, not this
 * process; when the cache disk is nearly full the only way to stop them
 * is to make the file immutable (data_freeze(), from fs.c's pt_guard()).
 * A process killed meanwhile leaves it so, and an immutable file cannot
 * be opened for writing, renamed or unlinked: the next open of the cache
 * could not take it, and its bytes would never be uploaded. So the first
 * freeze leaves a marker, DATA_FROZEN_NAME, and data_open() thaws every
 * cache file while the marker is there. */

static int set_immutable(int fd, int on)
{
	int fl;
	if (ioctl(fd, FS_IOC_GETFLAGS, &fl) != 0)
		return -errno;
	int want = on ? fl | FS_IMMUTABLE_FL : fl & ~FS_IMMUTABLE_FL;
	if (want != fl && ioctl(fd, FS_IOC_SETFLAGS, &want) != 0)
		return -errno;
	return 0;
}

/* Clears the immutable flag of the file name in the cache directory;
 * 0 also when there is no such file, or the disk has no such flag. */
static int thaw_name(struct data *d, const char *name)
{
	int fd = openat(d->dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	int rc = set_immutable(fd, 0);
	(void)close(fd);
	return rc == -ENOTTY || rc == -ENOTSUP ? 0 : rc;
}

/* Every regular file of the directory thawed, when the marker says one
 * may be frozen; the marker goes once all of them are. A file left
 * frozen is told of, and refuses the calls that need it writable. */
static int thaw_all(struct data *d)
{
	if (faccessat(d->dirfd, DATA_FROZEN_NAME, F_OK, 0) != 0)
		return errno == ENOENT ? 0 : -errno;
	/* a description of its own: a dup() of dirfd would share its
	 * offset, and leave load_all() at the end of the directory */
	int dfd = openat(d->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = dfd < 0 ? NULL : fdopendir(dfd);
	if (!dir) {
		int rc = -errno;
		if (dfd >= 0)
			(void)close(dfd);
		return rc;
	}
	int rc = 0;
	size_t failed = 0;
	struct dirent *de;
	while ((errno = 0, de = readdir(dir)) != NULL) {
		if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
			continue;
		int one = thaw_name(d, de->d_name);
		if (one && !failed++)
			rc = one;
	}
	if (!rc && errno)
		rc = -errno;
	(void)closedir(dir);
	if (rc) {
		fprintf(stderr,
			"tierfs: data: %zu cache files may still be "
			"immutable: %s\n",
			failed ? failed : 1, strerror(-rc));
		d->frozen_marked = 1; /* tried again at the next open */
		return rc;
	}
	if (unlinkat(d->dirfd, DATA_FROZEN_NAME, 0) && errno != ENOENT)
		d->frozen_marked = 1;
	return 0;
}

/* The marker, on the disk before the first freeze. */
static int mark_frozen(struct data *d)
{
	if (__atomic_load_n(&d->frozen_marked, __ATOMIC_ACQUIRE))
		return 0;
	int fd = openat(d->dirfd, DATA_FROZEN_NAME,
			O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) ? -errno : 0;
	if (close(fd) && !rc)
		rc = -errno;
	if (!rc && fsync(d->dirfd))
		rc = -errno;
	if (!rc)
		__atomic_store_n(&d->frozen_marked, 1, __ATOMIC_RELEASE);
	return rc;
}

int data_freeze(struct data_file *f, int on)
{
	if (on) {
		int rc = mark_frozen(f->d);
		if (rc)
			return rc;
	}
	return set_immutable(f->fd, on);
}

int data_freeze_works(struct data *d)
{
	int rc = thaw_name(d, DATA_FREEZE_PROBE_NAME); /* a killed probe's */
	if (rc)
		return rc;
	int fd = openat(d->dirfd, DATA_FREEZE_PROBE_NAME,
			O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
			0600);
	if (fd < 0)
		return -errno;
	rc = set_immutable(fd, 1);
	if (!rc)
		rc = write(fd, "x", 1) < 0 && errno == EPERM ? 0 : -ENOTSUP;
	(void)set_immutable(fd, 0);
	(void)close(fd);
	(void)unlinkat(d->dirfd, DATA_FREEZE_PROBE_NAME, 0);
	return rc;
}

uint64_t data_reserve(const struct data *d)
{
	return d->reserve;
}

int data_open(const struct data_config *cfg, struct data **out)
{
	int rc;
	if (!cfg->dir || !*cfg->dir || !cfg->fetch || !cfg->readahead_min ||
	    cfg->readahead_min > cfg->readahead_max)
		return -EINVAL;
	struct data *d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->cfg = *cfg;
	if (!d->cfg.lead)
		d->cfg.lead = DATA_DEFAULT_LEAD;
	d->path = strdup(cfg->dir);
	if (!d->path) {
		rc = -ENOMEM;
		goto fail_1;
	}
	d->cfg.dir = d->path;
	rc = mkdir_p(d->path);
	if (rc)
		goto fail_2;
	d->dirfd = open(d->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->dirfd < 0) {
		rc = -errno;
		goto fail_2;
	}
	rc = -pthread_mutex_init(&d->lock, NULL);
	if (rc)
		goto fail_3;
	rc = -pthread_mutex_init(&d->pf_lock, NULL);
	if (rc)
		goto fail_3b;
	rc = -pthread_cond_init(&d->pf_wake, NULL);
	if (rc)
		goto fail_3c;
	rc = -pthread_mutex_init(&d->spare_lock, NULL);
	if (rc)
		goto fail_3d;
	rc = -pthread_cond_init(&d->opened, NULL);
	if (rc)
		goto fail_3e;
	/* the metadata store shares this filesystem and must never find it
	 * full: writes stop short of an eighth of it, at most the reserve */
	struct statvfs sv;
	if (cfg->reserve && fstatvfs(d->dirfd, &sv) == 0) {
		uint64_t eighth = (uint64_t)sv.f_blocks * sv.f_frsize / 8;
		d->reserve = min_u64(cfg->reserve, eighth);
	}
	d->nbuckets = 64;
	d->buckets = calloc(d->nbuckets, sizeof(*d->buckets));
	d->spares =
		calloc(d->cfg.spares ? d->cfg.spares : 1, sizeof(*d->spares));
	if (!d->buckets || !d->spares) {
		rc = -ENOMEM;
		goto fail_4;
	}
	char boot[DATA_BOOT_ID_MAX];
	int same_boot, synced;
	(void)thaw_all(d); /* what it could not thaw, it told */
	boot_id_now(d, boot);
	d->distrust = !logs_trusted(d, boot, &same_boot, &synced);
	rc = load_all(d);
	if (!rc && (d->dropped_files || d->trimmed_files))
		fprintf(stderr,
			"tierfs: data: the machine went down since the cache "
			"was last open: %zu cached files dropped, %zu kept "
			"with only their unsent bytes\n",
			d->dropped_files, d->trimmed_files);
	if (!rc)
		rc = record_boot(d, boot, same_boot, synced);
	if (!rc)
		rc = prefetch_start(d);
	if (rc)
		goto fail_5;
	*out = d;
	return 0;

fail_5:
	free_all_files(d); /* and the table */
	d->buckets = NULL;
fail_4:
	free(d->buckets); /* empty, when the spares' stack was not made */
	free(d->spares);
	pthread_cond_destroy(&d->opened);
fail_3e:
	pthread_mutex_destroy(&d->spare_lock);
fail_3d:
	pthread_cond_destroy(&d->pf_wake);
fail_3c:
	pthread_mutex_destroy(&d->pf_lock);
fail_3b:
	pthread_mutex_destroy(&d->lock);
fail_3:
	(void)close(d->dirfd);
fail_2:
	free(d->path);
fail_1:
	free(d);
	return rc;
}

void data_close(struct data *d)
{
	if (!d)
		return;
	prefetch_stop(d);
	free_all_files(d);
	/* no write or fetch is under way: all the room taken is back */
	assert(__atomic_load_n(&d->room_claimed, __ATOMIC_ACQUIRE) == 0);
	/* every byte and line on the disk: an open after a reboot may take
	 * the logs at their word (logs_trusted()); not while one that a
	 * power loss made untrue could not be rewritten */
	if (!d->unrecorded && syncfs(d->dirfd) == 0) {
		int fd = openat(d->dirfd, DATA_SYNCED_NAME,
				O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
		if (fd >= 0 && close(fd) == 0)
			(void)fsync(d->dirfd);
	}
	free(d->spares);
	pthread_cond_destroy(&d->opened);
	pthread_mutex_destroy(&d->spare_lock);
	pthread_cond_destroy(&d->pf_wake);
	pthread_mutex_destroy(&d->pf_lock);
	pthread_mutex_destroy(&d->lock);
	(void)close(d->dirfd); /* a directory: nothing to flush */
	free(d->path);
	free(d);
}

/* A new record for ino, its files created empty (a ".new" one for nolog),
 * not in the table yet: the file system's work, which needs no lock. */
static int file_make(struct data *d, uint64_t ino, int nolog,
		     struct data_file **out)
{
	struct data_file *f = file_new(d, ino);
	if (!f)
		return -ENOMEM;
	f->nolog = nolog;
	int rc = file_open_fds(f, 1);
	if (rc) {
		file_free(f);
		return rc;
	}
	*out = f;
	return 0;
}

/* Puts f, just made, in the table; under d->lock. On failure its files
 * are dropped and f is freed. */
static int file_enter(struct data *d, struct data_file *f)
{
	int rc = hash_insert(d, f);
	if (rc) {
		(void)drop_pair(d, f->ino, 0);
		file_free(f);
	}
	return rc;
}

/* The record for ino once no data_get() is making or opening its files;
 * under d->lock, which the wait drops. */
static struct data_file *find_settled(struct data *d, uint64_t ino)
{
	struct data_file *f;
	while ((f = hash_find(d, ino)) && f->opening)
		wait_cond(&d->opened, &d->lock);
	return f;
}

/* Drops ino's file and log, under d->lock; busy_ok 0: only if nobody
 * holds it and nothing in it is dirty (-EBUSY otherwise). */
static int remove_locked(struct data *d, uint64_t ino, int busy_ok)
{
	struct data_file *f = find_settled(d, ino);
	if (f) {
		lock_mutex(&f->lock);
		if (!busy_ok && (f->refs || f->dbytes)) {
			unlock_mutex(&f->lock);
			return -EBUSY;
		}
		__atomic_sub_fetch(&d->cached, f->pbytes, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&d->dirty, f->dbytes, __ATOMIC_RELAXED);
		f->removed = 1; /* totals and compaction leave it alone now */
		unlock_mutex(&f->lock);
		hash_remove(d, f);
		if (f->refs == 0)
			lru_unlink(d, f);
	}
	/* a file still open keeps its bytes for its readers */
	int rc = drop_pair(d, ino, f && f->refs == 0);
	if (f && f->refs == 0)
		file_free(f); /* else the last data_put() frees it */
	return rc;
}

/* Opens a closed record's files again (refs going 0 -> 1), without
 * d->lock. The caller's size (the metadata's) wins for a clean file; a
 * dirty one keeps its own, since it saw the writes. */
static int file_reopen(struct data_file *f, uint64_t size)
{
	int rc = file_open_fds(f, 0);
	if (rc)
		return rc;
	lock_mutex(&f->lock);
	if (f->size != size && f->dirty.n == 0 && !f->nolog) {
		if (size < f->size) {
			rc = shrink_locked(f, size);
		} else {
			struct buf b = BUF_INIT;
			rc = buf_printf(&b, "S %" PRIu64 "\n", size);
			if (!rc)
				rc = log_append(f, &b);
			buf_free(&b);
			if (!rc)
				f->size = size;
		}
	}
	check_file(f);
	unlock_mutex(&f->lock);
	if (rc)
		file_close_fds(f);
	return rc;
}

int data_get(struct data *d, uint64_t ino, uint64_t size,
	     struct data_file **out)
{
	int rc = 0;
	lock_mutex(&d->lock);
	struct data_file *f = find_settled(d, ino);
	if (f && f->refs) { /* open already */
		f->refs++;
		*out = f;
		unlock_mutex(&d->lock);
		return 0;
	}
	int made = f == NULL;
	if (made) {
		f = file_new(d, ino);
		rc = f ? hash_insert(d, f) : -ENOMEM;
		if (rc) {
			if (f)
				file_free(f);
			unlock_mutex(&d->lock);
			return rc;
		}
		f->size = size;
	} else {
		lru_unlink(d, f);
	}
	f->refs = 1;
	f->opening = 1;
	unlock_mutex(&d->lock);
	/* The files are made or opened without d->lock, which every read
	 * and write takes: a new inode can take ext4 a millisecond (see
	 * data_config.spares). Until opening clears, the record is ours. */
	if (made) {
		/* none left by an earlier file of this number (a failed
		 * unlink): a ".new" beside the log would replace the file */
		rc = unlink_name(d, ino, DATA_NEW_SUFFIX);
		if (!rc)
			rc = file_open_fds(f, 1);
	} else {
		rc = file_reopen(f, size);
	}
	lock_mutex(&d->lock);
	f->opening = 0;
	broadcast(&d->opened);
	if (!rc) {
		*out = f;
	} else if (made) {
		f->refs = 0;
		hash_remove(d, f);
		file_free(f);
	} else {
		f->refs = 0;
		lru_append(d, f);
	}
	unlock_mutex(&d->lock);
	return rc;
}

int data_create(struct data *d, uint64_t ino, struct data_file **out)
{
	int tries = 0;
again:
	lock_mutex(&d->lock);
	struct data_file *f = hash_find(d, ino);
	int earlier = f != NULL; /* an earlier file's (freed once removed) */
	int rc = f && f->refs ? -EBUSY : f ? remove_locked(d, ino, 1) : 0;
	unlock_mutex(&d->lock);
	/* The files are made without the lock: a new inode can take ext4 a
	 * millisecond (see data_config.spares), and every other file's
	 * reads and writes would wait for it. None is left by a failed
	 * unlink either: a log beside the new file would read as an
	 * adoption a crash cut short. */
	if (!rc && !earlier)
		rc = unlink_name(d, ino, ".log");
	struct data_file *made = NULL;
	if (!rc)
		rc = file_make(d, ino, 1, &made);
	if (rc)
		return rc;
	lock_mutex(&d->lock);
	if (hash_find(d, ino)) {
		/* made meanwhile (the uploader asked for a file it found
		 * dirty): as if it had come first */
		unlock_mutex(&d->lock);
		file_free(made);
		(void)drop_name(d, ino, DATA_NEW_SUFFIX, 0);
		if (++tries < 2)
			goto again;
		return -EBUSY;
	}
	rc = file_enter(d, made);
	if (!rc) {
		made->refs++;
		*out = made;
	}
	unlock_mutex(&d->lock);
	return rc;
}

struct data_file *data_ref(struct data_file *f)
{
	lock_mutex(&f->d->lock);
	assert(f->refs > 0);
	f->refs++;
	unlock_mutex(&f->d->lock);
	return f;
}

void data_put(struct data_file *f)
{
	struct data *d = f->d;
	lock_mutex(&d->lock);
	assert(f->refs > 0);
	if (--f->refs) {
		unlock_mutex(&d->lock);
		return;
	}
	if (f->removed) {
		unlock_mutex(&d->lock);
		file_free(f);
		return;
	}
	lock_mutex(&f->lock);
	assert(f->ninflight == 0);
	/* the log's mtime is the LRU position after a restart; a failure
	 * only costs that hint */
	(void)futimens(f->nolog ? f->fd : f->logfd, NULL);
	file_close_fds(f);
	f->nsnap = 0;
	ranges_free(&f->rewritten);
	free(f->ra); /* the readers are gone */
	f->ra = NULL;
	f->nra = 0;
	f->ra_fresh = 0;
	check_file(f);
	unlock_mutex(&f->lock);
	lru_append(d, f);
	unlock_mutex(&d->lock);
}

/* ---- prefetch ---- */

/* Ends a queued job: fetches its range (run) or drops its record, unless
 * a reader or a write took the range; then frees it and drops its
 * reference. */
static void prefetch_end(struct prefetch *p, int run)
{
	struct data_file *f = p->f;
	lock_mutex(&f->lock);
	struct fetch_rec *r = inflight_of_job(f, p);
	if (r && run) {
		/* a failure leaves the bytes that did not land absent:
		 * the read that needs them fetches them and reports it */
		if (!start_job_locked(f, r))
			(void)fetch_marked_locked(f, r->start, r->end);
	} else if (r) {
		inflight_del(f, r->start, r->end);
		broadcast(&f->fetched);
	}
	unlock_mutex(&f->lock);
	free(p);
	data_put(f);
}

/* Queues the n jobs plan_ahead_locked() or plan_lead_locked() made: a
 * lead at the head, the others at the tail. */
static void prefetch_queue(struct data_file *f, struct prefetch **v, unsigned n)
{
	struct data *d = f->d;
	lock_mutex(&d->lock);
	f->refs += n; /* the caller holds one: f is not in the LRU */
	unlock_mutex(&d->lock);
	for (unsigned i = 0; i < n; i++) {
		lock_mutex(&d->pf_lock);
		int stop = d->pf_stop;
		if (!stop && v[i]->lead) {
			v[i]->next = d->pf_head;
			if (!d->pf_head)
				d->pf_tail = &v[i]->next;
			d->pf_head = v[i];
		} else if (!stop) {
			*d->pf_tail = v[i];
			d->pf_tail = &v[i]->next;
		}
		if (!stop) {
			int rc = pthread_cond_signal(&d->pf_wake);
			if (rc)
				die("pthread_cond_signal", rc);
		}
		unlock_mutex(&d->pf_lock);
		if (stop)
			prefetch_end(v[i], 0);
	}
}

static void *prefetch_main(void *arg)
{
	struct data *d = arg;
	lock_mutex(&d->pf_lock);
	for (;;) {
		struct prefetch *p = d->pf_head;
		if (!p) {
			if (d->pf_stop)
				break;
			wait_cond(&d->pf_wake, &d->pf_lock);
			continue;
		}
		d->pf_head = p->next;
		if (!d->pf_head)
			d->pf_tail = &d->pf_head;
		int stop = d->pf_stop;
		unlock_mutex(&d->pf_lock);
		prefetch_end(p, !stop);
		lock_mutex(&d->pf_lock);
	}
	unlock_mutex(&d->pf_lock);
	return NULL;
}

/* Drops what is queued and joins the prefetch threads. */
static void prefetch_stop(struct data *d)
{
	lock_mutex(&d->pf_lock);
	d->pf_stop = 1;
	int rc = pthread_cond_broadcast(&d->pf_wake);
	if (rc)
		die("pthread_cond_broadcast", rc);
	unlock_mutex(&d->pf_lock);
	for (unsigned i = 0; i < d->npf; i++) {
		rc = pthread_join(d->pf_threads[i], NULL);
		if (rc)
			die("pthread_join", rc);
	}
	free(d->pf_threads);
	d->pf_threads = NULL;
	d->npf = 0;
}

static int prefetch_start(struct data *d)
{
	d->pf_tail = &d->pf_head;
	if (!d->cfg.prefetch_threads)
		return 0;
	d->pf_threads = calloc(d->cfg.prefetch_threads, sizeof(pthread_t));
	if (!d->pf_threads)
		return -ENOMEM;
	for (; d->npf < d->cfg.prefetch_threads; d->npf++) {
		int rc = pthread_create(&d->pf_threads[d->npf], NULL,
					prefetch_main, d);
		if (rc) {
			prefetch_stop(d);
			return -rc;
		}
	}
	return 0;
}

/* The read-ahead stream a read at off continues (*seq set), or one for
 * it to start: a free one, a new one while every stream is in use and the
 * table can still double, or else the one read least recently. NULL: no
 * memory. A read continues a stream that ended at off, or, once the
 * stream has a window, one that ended within a window of off: the kernel
 * sends the parts of one large read (and its read-ahead) as requests at
 * once, and they reach the threads here in any order. */
static struct ra_stream *ra_stream_for(struct data_file *f, uint64_t off,
				       int *seq)
{
	struct ra_stream *old = NULL, *near = NULL;
	uint64_t near_by = UINT64_MAX;
	*seq = 1;
	for (unsigned i = 0; i < f->nra; i++) {
		struct ra_stream *st = &f->ra[i];
		if (st->used && st->next == off)
			return st;
		uint64_t by = off > st->next ? off - st->next : st->next - off;
		if (st->used && by <= st->window && by < near_by) {
			near = st;
			near_by = by;
		}
		if (!old || st->used < old->used)
			old = st;
	}
	if (near)
		return near;
	*seq = 0;
	if ((!old || old->used) && f->nra < DATA_RA_STREAMS_MAX) {
		unsigned n = f->nra ? 2 * f->nra : DATA_RA_STREAMS_MIN;
		struct ra_stream *v = realloc(f->ra, n * sizeof(*v));
		if (v) {
			memset(v + f->nra, 0, (n - f->nra) * sizeof(*v));
			old = &v[f->nra];
			f->ra = v;
			f->nra = n;
		} /* else: f->ra as it was, and old still points into it */
	}
	if (old)
		old->used = 0; /* a new stream */
	return old;
}

/* Whether st, continued by a read, plans readahead_max ahead rather than
 * its window (see Prefetch): once it has read readahead_min bytes in a
 * row, and while the file has few streams, counting the opens that have
 * not read yet (64 readers that open a file at once start their streams
 * a few at a time). Growing the window from readahead_min kept one GET
 * in flight for the first tens of MiB of each cold read; 64 readers of
 * one file that each planned that far ahead queued GETs of bytes no one
 * read yet before the ones they waited for. Called with f->lock held. */
static int settled_locked(const struct data_file *f, const struct ra_stream *st)
{
	if (st->next - st->start < f->d->cfg.readahead_min)
		return 0;
	unsigned live = f->ra_fresh; /* opens not read yet: streams soon */
	for (unsigned i = 0; i < f->nra; i++)
		live += f->ra[i].used != 0;
	return live <= DATA_RA_EAGER_STREAMS;
}

/* A read the cache disk has no room for: put together in memory (a memfd
 * as sparse as the file) from the cache and the object, so a full cache
 * disk slows reads down but never fails them. */
static ssize_t read_through(struct data_file *f, void *buf, size_t len,
			    uint64_t off)
{
	int mfd = memfd_create("tierfs-read", MFD_CLOEXEC);
	if (mfd < 0)
		return -errno;
	int rc = ftruncate(mfd, (off_t)(off + len)) ? -errno : 0;
	if (!rc)
		rc = data_compose(f, mfd, off, len);
	if (!rc)
		rc = pread_zeros(mfd, buf, len, off);
	(void)close(mfd);
	return rc ? rc : (ssize_t)len;
}

void data_open_read(struct data_file *f)
{
	lock_mutex(&f->lock);
	f->ra_fresh++;
	for (size_t i = 0; i < f->ninflight; i++)
		f->inflight[i].cancel = 0; /* wanted again */
	unlock_mutex(&f->lock);
}

void data_opens_left(struct data_file *f, unsigned n)
{
	lock_mutex(&f->lock);
	if (f->ra_fresh > n)
		f->ra_fresh = n;
	/* no reader is left to want the pieces fetched ahead: their threads
	 * skip those queued (prefetch_end()) and stop those under way
	 * (data_fetch_landed()) */
	for (size_t i = 0; n == 0 && i < f->ninflight;) {
		struct fetch_rec *r = &f->inflight[i];
		if (r->job) {
			inflight_del(f, r->start, r->end);
			continue;
		}
		r->cancel = r->ahead;
		i++;
	}
	if (n == 0)
		broadcast(&f->fetched); /* for a reader of a dropped lead */
	unlock_mutex(&f->lock);
}

/* Drops the cache file's clean pages of [off, off + len) from memory (all:
 * of the whole file, if data_uncache() was called since the last such
 * call) unless the range has dirty bytes, which an upload reads soon. Dirty
 * pages are written, never dropped (posix_fadvise()), so a write that
 * lands meanwhile loses nothing. f is held, so its fd is open. */
static void uncache(struct data_file *f, uint64_t off, uint64_t len, int all)
{
	lock_mutex(&f->lock);
	int fd = f->fd, wanted = !all || f->uncached;
	uint64_t end = all ? f->size : off + len;
	f->uncached = !all;
	int dirty = covered(&f->dirty, off, end) > 0;
	unlock_mutex(&f->lock);
	if (wanted && !dirty && end > off)
		(void)posix_fadvise(fd, (off_t)off, (off_t)(end - off),
				    POSIX_FADV_DONTNEED);
}

void data_uncache(struct data_file *f, uint64_t off, uint64_t len)
{
	uncache(f, off, len, 0);
}

void data_uncache_all(struct data_file *f)
{
	uncache(f, 0, 0, 1);
}

int data_place(struct data_file *f, size_t len, uint64_t off, size_t *n)
{
	struct data *d = f->d;
	int used = 0;
	*n = 0;
	if (len > SSIZE_MAX)
		len = SSIZE_MAX;
	lock_mutex(&f->lock);
	if (len == 0 || off >= f->size) {
		unlock_mutex(&f->lock);
		return 0;
	}
	uint64_t end = off + min_u64(len, f->size - off);
	int seq;
	struct ra_stream none = {0}, *st = ra_stream_for(f, off, &seq);
	if (!st)
		st = &none; /* no memory for a stream: no read-ahead */
	uint64_t ra = 0;
	if (seq) {
		ra = st->window ? st->window : d->cfg.readahead_min;
		st->next = max_u64(st->next, end); /* an earlier part late */
	} else {
		st->window = 0;
		if (f->ra_fresh) { /* an open's first read */
			f->ra_fresh--;
			ra = d->cfg.readahead_min;
		}
		st->start = off;
		st->next = end;
	}
	uint64_t tick = st->used = ++f->ra_tick;
	/* fill_locked() may drop the lock: other readers can grow (move)
	 * the table meanwhile, or take this stream over */
	size_t si = st == &none ? 0 : (size_t)(st - f->ra);
	struct prefetch *lead =
		ra && d->npf ? plan_lead_locked(f, off, end, ra) : NULL;
	if (lead) {
		used = 1;
		unlock_mutex(&f->lock);
		prefetch_queue(f, &lead, 1);
		lock_mutex(&f->lock);
	}
	int rc = fill_locked(f, off, end, ra, 0, &used, 1);
	if (st != &none)
		st = f->ra[si].used == tick ? &f->ra[si] : &none;
	if (used)
		st->window = min_u64(2 * ra, d->cfg.readahead_max);
	end = min_u64(end, f->size); /* a truncate may have run meanwhile */
	struct prefetch *ahead[DATA_PREFETCH_BATCH];
	unsigned nahead = 0;
	if (ra && rc == 0 && d->npf) {
		uint64_t win = st->window ? st->window : ra;
		if (seq && settled_locked(f, st))
			win = d->cfg.readahead_max;
		nahead = plan_ahead_locked(f, end, win, ahead);
		if (nahead && !used)
			st->window = min_u64(2 * win, d->cfg.readahead_max);
	}
	check_file(f);
	unlock_mutex(&f->lock);
	if (nahead)
		prefetch_queue(f, ahead, nahead);
	*n = off < end ? (size_t)(end - off) : 0;
	return rc;
}

ssize_t data_read_through(struct data_file *f, void *buf, size_t len,
			  uint64_t off)
{
	return len ? read_through(f, buf, len, off) : 0;
}

ssize_t data_read(struct data_file *f, void *buf, size_t len, uint64_t off)
{
	size_t n;
	int rc = data_place(f, len, off, &n);
	if (rc == -ENOSPC && n) /* a full cache disk: past it */
		return read_through(f, buf, n, off);
	if (rc)
		return rc;
	/* [off, off + n) is present; no fetch writes there any more, and a
	 * racing write or truncate may show through as POSIX allows. A
	 * truncate that cuts the file meanwhile reads as zeros. */
	rc = pread_zeros(f->fd, buf, n, off);
	return rc ? rc : (ssize_t)n;
}

/* fstatvfs costs a system call per write, so room_take() reuses its
 * answer: for DATA_ROOM_RECHECK_MS, and for writes of at most half the
 * room it showed above the reserve (at most an eighth of the reserve).
 * The half left and the short time cover other writers of the disk. */
#define DATA_ROOM_RECHECK_MS 50

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether room_take() counts len bytes (so room_give() must too). */
static int room_counted(const struct data *d, uint64_t len)
{
	return d->reserve && len <= INT64_MAX;
}

/* Takes room for len bytes about to be written, or -ENOSPC when they
 * would eat into the reserve; urgent ones (an upload's fetch) may take
 * three quarters of it. The room stays taken until room_give(), after
 * the bytes are written: fstatvfs shows no write under way, and the
 * kernel's writeback sends a FUSE mount's writes on many threads at
 * once, each of which saw the same free space. The flusher's eviction
 * frees clean data as uploads finish; until then writes fail cleanly
 * and the store keeps working. */
static int room_take(struct data *d, uint64_t len, int urgent)
{
	struct statvfs sv;
	if (!room_counted(d, len))
		return 0;
	/* what others took before this is counted below: taken after the
	 * fstatvfs, their bytes may not show in it; given back before it,
	 * they may show twice, which errs on the safe side */
	uint64_t taken = (uint64_t)__atomic_add_fetch(
		&d->room_claimed, (int64_t)len, __ATOMIC_ACQ_REL);
	uint64_t now = mono_ms();
	if (!urgent &&
	    now - __atomic_load_n(&d->room_at_ms, __ATOMIC_RELAXED) <
		    DATA_ROOM_RECHECK_MS &&
	    __atomic_sub_fetch(&d->room_budget, (int64_t)len,
			       __ATOMIC_RELAXED) >= 0)
		return 0;
	if (fstatvfs(d->dirfd, &sv) != 0)
		return 0;
	uint64_t avail = (uint64_t)sv.f_bavail * sv.f_frsize;
	uint64_t keep = urgent ? d->reserve / 4 : d->reserve;
	if (avail < keep || avail - keep < taken) {
		__atomic_store_n(&d->room_budget, 0, __ATOMIC_RELAXED);
		room_give(d, len);
		return -ENOSPC;
	}
	if (!urgent) {
		uint64_t budget =
			min_u64((avail - keep - taken) / 2, d->reserve / 8);
		__atomic_store_n(&d->room_budget, (int64_t)budget,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&d->room_at_ms, now, __ATOMIC_RELAXED);
	}
	return 0;
}

/* Gives back room_take()'s len bytes, once written (or not at all). */
static void room_give(struct data *d, uint64_t len)
{
	if (room_counted(d, len))
		__atomic_sub_fetch(&d->room_claimed, (int64_t)len,
				   __ATOMIC_ACQ_REL);
}

/* Whether there is room for len bytes now, taking none. */
static int room_check(struct data *d, uint64_t len, int urgent)
{
	int rc = room_take(d, len, urgent);
	if (!rc)
		room_give(d, len);
	return rc;
}

ssize_t data_write(struct data_file *f, const void *buf, size_t len,
		   uint64_t off)
{
	struct buf b = BUF_INIT;
	if (len == 0)
		return 0;
	if (len > SSIZE_MAX || off > (uint64_t)INT64_MAX - len)
		return -EFBIG;
	uint64_t end = off + len;
	int rc = room_take(f->d, len, 0);
	if (rc)
		return rc;
	lock_mutex(&f->lock);
	/* the log already says so of bytes that are dirty (so present)
	 * within the size: a rewrite of them needs no line */
	int logged = end <= f->size && !f->log_broken &&
		     ranges_contains(&f->dirty, off, end);
	uint64_t from = off; /* where the bytes it marks start */
	if (logged) {
		/* A rewrite (a database's pages, fio) writes with the lock
		 * dropped, so that writes to one file do not queue: no fetch
		 * is in flight on present bytes, and a truncate waits for it
		 * (wait_writes_locked()). An upload may clean the range
		 * meanwhile: it is then logged again below. */
		f->nwriting++;
		unlock_mutex(&f->lock);
		rc = pwrite_full(f->fd, buf, len, off);
		lock_mutex(&f->lock);
		if (--f->nwriting == 0)
			broadcast(&f->fetched);
		logged = !f->log_broken && ranges_contains(&f->dirty, off, end);
	} else {
		/* a fetch writes its range of the cache file unlocked */
		wait_fetches_locked(f, off, end);
		/* A gap the write leaves past the end is zeros, present and
		 * dirty (the object may hold other bytes there: the file was
		 * cut since). A ".new" file's size on disk is its own;
		 * another one is cut at its size first, as a truncate that
		 * grows it is. */
		from = min_u64(off, f->size);
		if (off > f->size && !f->nolog &&
		    ftruncate(f->fd, (off_t)f->size))
			rc = -errno;
		if (!rc)
			rc = pwrite_full(f->fd, buf, len, off);
	}
	logged = logged || f->nolog;
	if (!rc && !logged)
		rc = buf_printf(&b, "D+ %" PRIu64 " %" PRIu64 "\n", from, end);
	if (!rc && !logged)
		rc = log_append(f, &b);
	if (rc)
		goto out;
	uint64_t p0 = f->pbytes, d0 = f->dbytes;
	f->size = max_u64(f->size, end);
	rc = set_add(&f->present, &f->pbytes, from, end);
	if (!rc)
		rc = set_add(&f->dirty, &f->dbytes, from, end);
	if (!rc && f->nsnap)
		rc = ranges_add(&f->rewritten, from, end);
	account(f, p0, d0);
	maybe_compact_locked(f);
out:
	check_file(f);
	unlock_mutex(&f->lock);
	room_give(f->d, len);
	buf_free(&b);
	return rc ? rc : (ssize_t)len;
}

int data_truncate(struct data_file *f, uint64_t size)
{
	int rc = 0;
	if (size > (uint64_t)INT64_MAX)
		return -EFBIG;
	lock_mutex(&f->lock);
	wait_writes_locked(f);
	uint64_t old = f->size;
	if (size < old) {
		/* a fetch past the cut would write there after it */
		wait_fetches_locked(f, size, UINT64_MAX);
		rc = shrink_locked(f, size);
	} else if (size > old && (rc = room_check(f->d, size - old, 0)) == 0) {
		/* a hole: it takes no room until written */
		struct buf b = BUF_INIT;
		/* cut first: stale bytes past the old size (a crash between a
		 * shrink's log line and its ftruncate) must read as zeros */
		if (ftruncate(f->fd, (off_t)old) ||
		    ftruncate(f->fd, (off_t)size))
			rc = -errno;
		if (!rc)
			rc = buf_printf(&b, "D+ %" PRIu64 " %" PRIu64 "\n", old,
					size);
		if (!rc)
			rc = log_append(f, &b);
		buf_free(&b);
		if (!rc) {
			uint64_t p0 = f->pbytes, d0 = f->dbytes;
			f->size = size;
			rc = set_add(&f->present, &f->pbytes, old, size);
			if (!rc)
				rc = set_add(&f->dirty, &f->dbytes, old, size);
			if (!rc && f->nsnap)
				rc = ranges_add(&f->rewritten, old, size);
			account(f, p0, d0);
		}
	}
	if (!rc)
		maybe_compact_locked(f);
	check_file(f);
	unlock_mutex(&f->lock);
	return rc;
}

int data_hydrate_all(struct data_file *f)
{
	return data_hydrate(f, 0, UINT64_MAX);
}

/* Whether the cache holds all of f. */
static int whole_locked(const struct data_file *f)
{
	return covered(&f->present, 0, f->size) == f->size;
}

int data_outside(struct data_file *f, int how, uint64_t size)
{
	struct buf b = BUF_INIT;
	lock_mutex(&f->lock);
	size = max_u64(size, f->size);
	int seen = (how & DATA_OUTSIDE_SEEN) && size;
	int rc = whole_locked(f) ? 0 : -EAGAIN;
	/* a file all dirty already needs no line (a database's every
	 * commit rewrites it: no line, no flush of the log in its fsync) */
	int line =
		seen && (size > f->size || covered(&f->dirty, 0, size) != size);
	if (!rc && (how & DATA_OUTSIDE_BEGIN) && !f->outside)
		rc = buf_printf(&b, "O+\n");
	if (!rc && line)
		rc = buf_printf(&b, "D+ 0 %" PRIu64 "\n", size);
	/* the end records the size: a load while outside took the size on
	 * disk, which no line may say yet */
	if (!rc && (how & DATA_OUTSIDE_END) && f->outside)
		rc = buf_printf(&b, "S %" PRIu64 "\nO-\n", size);
	if (!rc)
		rc = log_append(f, &b);
	if (!rc && seen) {
		uint64_t p0 = f->pbytes, d0 = f->dbytes;
		f->size = size;
		rc = set_add(&f->present, &f->pbytes, 0, size);
		if (!rc)
			rc = set_add(&f->dirty, &f->dbytes, 0, size);
		if (!rc && f->nsnap)
			rc = ranges_add(&f->rewritten, 0, size);
		account(f, p0, d0);
	}
	if (!rc && (how & DATA_OUTSIDE_BEGIN))
		f->outside = 1;
	if (!rc && (how & DATA_OUTSIDE_END))
		f->outside = 0;
	if (!rc)
		maybe_compact_locked(f);
	buf_free(&b);
	check_file(f);
	unlock_mutex(&f->lock);
	return rc;
}

int data_whole(struct data_file *f)
{
	lock_mutex(&f->lock);
	int whole = whole_locked(f);
	unlock_mutex(&f->lock);
	return whole;
}

int data_mark_dirty_all(struct data_file *f)
{
	return data_outside(f, DATA_OUTSIDE_SEEN, 0);
}

int data_hydrate(struct data_file *f, uint64_t off, uint64_t len)
{
	int used = 0;
	lock_mutex(&f->lock);
	uint64_t end = len > UINT64_MAX - off ? UINT64_MAX : off + len;
	/* for an upload: it may use most of the reserve, or a full cache
	 * disk whose dirty file needs a few bytes fetched could never free
	 * itself */
	int rc = fill_locked(f, off, end, 0, 1, &used, 0);
	check_file(f);
	unlock_mutex(&f->lock);
	return rc;
}

/* Fetches [s, e) of the object straight into fd at the same offsets;
 * past a short fetch fd keeps what it has (a new memfd: zeros). */
static int fetch_into(struct data_file *f, int fd, uint64_t s, uint64_t e)
{
	struct data *d = f->d;
	ssize_t n = d->cfg.fetch(d->cfg.fetch_ctx, f->ino, s, e - s, fd,
				 (off_t)s, NULL);
	if (n > (ssize_t)(e - s))
		n = -EIO; /* the callback broke its contract */
	return n < 0 ? (int)n : 0;
}

int data_compose(struct data_file *f, int fd, uint64_t off, uint64_t len)
{
	struct ranges have = RANGES_INIT;
	lock_mutex(&f->lock);
	uint64_t end =
		len > f->size - min_u64(off, f->size) ? f->size : off + len;
	int rc = copy_ranges(&f->present, &have);
	unlock_mutex(&f->lock);
	/* the present ranges stay: eviction leaves referenced files alone,
	 * and a write meanwhile stays dirty for the next upload */
	uint64_t at = off;
	for (size_t i = 0; !rc && at < end; i++) {
		uint64_t ps = i < have.n ? min_u64(have.v[i].start, end) : end;
		uint64_t pe = i < have.n ? min_u64(have.v[i].end, end) : end;
		if (pe <= at)
			continue;
		if (ps > at) {
			rc = fetch_into(f, fd, at, ps);
			at = ps;
		}
		if (!rc && pe > at) {
			rc = copy_range(f->fd, at, fd, at, pe - at);
			at = pe;
		}
	}
	ranges_free(&have);
	return rc;
}

int data_fd(struct data_file *f)
{
	return f->fd; /* set while a reference is held */
}

uint64_t data_size(struct data_file *f)
{
	lock_mutex(&f->lock);
	uint64_t size = f->size;
	unlock_mutex(&f->lock);
	return size;
}

int data_present(struct data_file *f, struct ranges *out)
{
	lock_mutex(&f->lock);
	int rc = copy_ranges(&f->present, out);
	unlock_mutex(&f->lock);
	return rc;
}

int data_dirty(struct data_file *f, struct ranges *out)
{
	lock_mutex(&f->lock);
	int rc = copy_ranges(&f->dirty, out);
	if (!rc)
		f->nsnap++; /* writes from now on are tracked in rewritten */
	unlock_mutex(&f->lock);
	return rc;
}

/* Appends to out (and logs to b) the dirty parts of [s, e). */
static int dirty_parts(const struct data_file *f, uint64_t s, uint64_t e,
		       struct ranges *out, struct buf *b)
{
	uint64_t pos = s, gs, ge;
	int rc = 0;
	while (pos < e && rc == 0) {
		if (!ranges_first_gap(&f->dirty, pos, e, &gs, &ge))
			gs = ge = e; /* dirty up to e */
		if (gs > pos) {
			rc = ranges_add(out, pos, gs);
			if (!rc)
				rc = buf_printf(b,
						"D- %" PRIu64 " %" PRIu64 "\n",
						pos, gs);
		}
		pos = ge;
	}
	return rc;
}

int data_mark_clean(struct data_file *f, const struct ranges *dirty_snapshot)
{
	struct ranges clr, rm = RANGES_INIT;
	struct buf b = BUF_INIT;
	lock_mutex(&f->lock);
	/* clear what the snapshot held, less what was written since */
	int rc = copy_ranges(dirty_snapshot, &clr);
	for (size_t i = 0; i < f->rewritten.n && rc == 0; i++)
		rc = ranges_remove(&clr, f->rewritten.v[i].start,
				   f->rewritten.v[i].end);
	for (size_t i = 0; i < clr.n && rc == 0; i++)
		rc = dirty_parts(f, clr.v[i].start, clr.v[i].end, &rm, &b);
	if (!rc && f->nolog && rm.n)
		rc = adopt_locked(f, &rm); /* its log says so already */
	else if (!rc)
		rc = log_append(f, &b);
	if (!rc) {
		uint64_t p0 = f->pbytes, d0 = f->dbytes;
		for (size_t i = 0; i < rm.n && rc == 0; i++)
			rc = set_remove(&f->dirty, &f->dbytes, rm.v[i].start,
					rm.v[i].end);
		account(f, p0, d0);
		maybe_compact_locked(f);
	}
	if (f->nsnap && --f->nsnap == 0)
		ranges_free(&f->rewritten);
	check_file(f);
	unlock_mutex(&f->lock);
	ranges_free(&clr);
	ranges_free(&rm);
	buf_free(&b);
	return rc;
}

int data_sync(struct data_file *f)
{
	int rc = 0;
	lock_mutex(&f->lock);
	if (fdatasync(f->fd))
		rc = -errno;
	/* a log with no line since its last fsync needs none (a rewrite of
	 * dirty bytes adds no line) */
	if (rc == 0 && f->log_unsynced) {
		if (fdatasync(f->logfd))
			rc = -errno;
		else
			f->log_unsynced = 0;
	}
	if (rc == 0 && f->sync_dir) {
		if (fsync(f->d->dirfd))
			rc = -errno;
		else
			f->sync_dir = 0;
	}
	unlock_mutex(&f->lock);
	return rc;
}

static int remove_file(struct data *d, uint64_t ino, int busy_ok)
{
	lock_mutex(&d->lock);
	int rc = remove_locked(d, ino, busy_ok);
	unlock_mutex(&d->lock);
	return rc;
}

int data_remove(struct data *d, uint64_t ino)
{
	return remove_file(d, ino, 1);
}

int data_drop_clean(struct data *d, uint64_t ino)
{
	return remove_file(d, ino, 0);
}

/* Whether the cache is over its byte limit or under its free floor. */
static int over_limits(const struct data *d)
{
	struct statvfs sv;
	if (__atomic_load_n(&d->cached, __ATOMIC_RELAXED) > d->cfg.size_limit)
		return 1;
	if (!d->cfg.free_floor || fstatvfs(d->dirfd, &sv))
		return 0; /* no floor, or no way to tell: the limit alone */
	return (uint64_t)sv.f_bavail * sv.f_frsize < d->cfg.free_floor;
}

int64_t data_evict(struct data *d)
{
	int64_t freed = 0;
	lock_mutex(&d->lock);
	struct data_file *f = d->lru_head, *next;
	for (; f && over_limits(d); f = next) {
		next = f->lru_next;
		assert(f->refs == 0);
		lock_mutex(&f->lock);
		if (f->dirty.n) { /* not in S3 yet: never evicted */
			unlock_mutex(&f->lock);
			continue;
		}
		if (drop_pair(d, f->ino, 1)) {
			unlock_mutex(&f->lock);
			continue; /* still there; try the next one */
		}
		uint64_t bytes = f->pbytes;
		__atomic_sub_fetch(&d->cached, bytes, __ATOMIC_RELAXED);
		f->removed = 1;
		unlock_mutex(&f->lock);
		lru_unlink(d, f);
		hash_remove(d, f);
		file_free(f);
		freed += (int64_t)bytes;
	}
	unlock_mutex(&d->lock);
	return freed;
}

int data_inos(struct data *d, uint64_t **inos, size_t *n)
{
	lock_mutex(&d->lock);
	uint64_t *v = malloc((d->nfiles ? d->nfiles : 1) * sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < d->nbuckets; i++)
		for (struct data_file *f = d->buckets[i]; f; f = f->hnext)
			v[k++] = f->ino;
	unlock_mutex(&d->lock);
	*inos = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

int data_dirty_files(struct data *d, struct data_dirty_file **out, size_t *n)
{
	lock_mutex(&d->lock);
	struct data_dirty_file *v =
		malloc((d->nfiles ? d->nfiles : 1) * sizeof(*v));
	size_t k = 0;
	for (size_t i = 0; v && i < d->nbuckets; i++)
		for (struct data_file *f = d->buckets[i]; f; f = f->hnext) {
			lock_mutex(&f->lock);
			if (f->dbytes)
				v[k++] = (struct data_dirty_file){
					f->ino, f->size, f->outside};
			unlock_mutex(&f->lock);
		}
	unlock_mutex(&d->lock);
	*out = v;
	*n = k;
	return v ? 0 : -ENOMEM;
}

void data_usage(struct data *d, uint64_t *cached, uint64_t *dirty)
{
	*cached = __atomic_load_n(&d->cached, __ATOMIC_RELAXED);
	*dirty = __atomic_load_n(&d->dirty, __ATOMIC_RELAXED);
}
