/* fs_int.h: what fs.c (the FUSE handlers and the uploader) and index.c (the
 * volume's listing: first load, index snapshot, reconciliation) share.
 * Not a public header: the rest of tierfs uses fs.h.
 *
 * Locks, in the order they are taken: s3_lock, then a claim (claim_lock
 * while waiting), then touch_lock or lock; the meta store's and the data
 * cache's locks come after all of them (see meta.h, data.h).
 * Every change tierfs makes to S3 runs under s3_lock: uploads share it
 * (FS_UPLOAD_THREADS at once), each holding a claim on its inode and its
 * key, so one inode or key is never written by two at once; deletions,
 * renames that copy objects, and a reconciliation's changes take it
 * alone. That is what lets a reconciliation tell its own changes from
 * other tools', and a deletion never overtake an upload of the same key.
 */
#ifndef TIERFS_FS_INT_H
#define TIERFS_FS_INT_H

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include "../s3/clock.h"
#include "fs.h"

#define FS_UPLOAD_THREADS 8	    /* inodes uploaded at once */
#define FS_SETTLE_MS 2000u	    /* after an unclean end: see load_dirty() */
#define FS_HANDLE_BUCKETS 1024	    /* open-file table */
#define FS_HEALTH_INTERVAL_MS 2000u /* CACHE_DIR/health is rewritten */
#define FS_HEALTH_PROBE_MS 30000u   /* S3 idle this long: HEAD the bucket */
#define FS_BG_TICK_MS 1000u	    /* the background thread looks around */
/* A burst of changes: this many new inodes dirty within one upload delay
 * (tar x, pip install, git checkout). Uploads then wait for it to pass,
 * up to FS_BURST_WAIT upload delays (see take_due()). */
#define FS_BURST_FILES 64u
#define FS_BURST_WAIT 5u
/* A large file still being written waits for its writes to stop, up to
 * FS_BUSY_WAIT upload delays after its first change (see busy_locked()). */
#define FS_BUSY_WAIT 15u
/* The ETag recorded before an inode's first upload starts: an object may
 * exist at its key (the upload may finish after the process dies), so a
 * rename must copy and delete, not just rename in the store. */
#define FS_ETAG_UNKNOWN "?"
/* The ETag of an inode a snapshot showed dirty: an object exists, of a
 * version not known (meta_snapshot_adopt()). */
#define FS_ETAG_STALE "!"
/* An ETag that names a version S3 has (If-Match, partial re-uploads). */
static inline int fs_etag_known(const char *etag)
{
	return etag[0] && strcmp(etag, FS_ETAG_UNKNOWN) != 0 &&
	       strcmp(etag, FS_ETAG_STALE) != 0;
}

struct dirty {
	uint64_t ino;
	uint64_t since_ms; /* monotonic time of the first unsynced change */
	uint64_t last_ms;  /* and of the last change a handler made */
	uint32_t flags;	   /* META_DIRTY_* already set in the meta store */
};

/* An S3 key tierfs changed while a reconciliation was running: the listing
 * it works from may predate the change, so the key is left alone. */
struct touched {
	char *key;  /* owned */
	int prefix; /* every key under it (a directory rename) */
};

#define FLUSH_TOKEN_MAX 80

struct fs {
	struct fs_config cfg;	 /* strings point at the copies below */
	char *bucket;		 /* owned */
	char *prefix;		 /* owned */
	char *cache_dir;	 /* owned; NULL: no snapshots */
	s3_client *s3;		 /* borrowed */
	struct meta *meta;	 /* borrowed */
	struct data *data;	 /* owned; closed by fs_destroy() */
	struct fuse_session *se; /* set once mounted; kernel notifications */
	/* TIERFS_DEBUG_STOP_AT (debug_stop_at()); NULL: not set */
	const char *debug_stop_at;
	/* the exchanges (RENAME_EXCHANGE) the mount's earlier workers
	 * committed, by request id (see recall_exchanges()); sorted */
	uint64_t *exchanged;
	size_t nexchanged;
	/* the kernel keeps files' times (writeback cache) and sends them with
	 * SETATTR on close, fsync and inode writeback; set by INIT, before
	 * any other request */
	int kernel_times;
	/* the kernel opens and releases directories itself (INIT offered
	 * FUSE_NO_OPENDIR_SUPPORT) and keeps their listings in its page
	 * cache: a change it did not make must invalidate the directory */
	int kernel_opendir;
	/* the kernel enforces and caches POSIX ACLs (FUSE_POSIX_ACL) and
	 * leaves the umask to us (FUSE_DONT_MASK): the mode follows the
	 * access ACL, and new nodes take their directory's default ACL
	 * (acl.h); set by INIT */
	int posix_acl;
	/* the largest read reply sent by splice, set by INIT; 0: none */
	size_t splice_max;
	/* FUSE passthrough: fs->opens records the kernel's opens (NULL:
	 * no passthrough); pt_off: the kernel refused a backing file
	 * (no CAP_SYS_ADMIN); pt_lock orders the opens, releases and
	 * settlements of passthrough files, outside every other lock;
	 * pt_writers: handles with writers (atomic) */
	struct opens *opens;
	int pt_off;
	pthread_mutex_t pt_lock;
	unsigned pt_writers;
	/* free bytes on the cache disk below which writes in passthrough
	 * are stopped (pt_guard()); an open may write in passthrough only
	 * with twice that free */
	uint64_t pt_stop;

	pthread_mutex_t lock;	/* guards the dirty set, stop and bg state */
	pthread_cond_t wake;	/* the flusher's */
	pthread_cond_t pt_wake; /* the guard's (pt_guard_main()), with lock */
	struct dirty *dirty;	/* protected by lock */
	size_t ndirty, capdirty;
	/* protected by lock: dirty[]'s positions + 1 by inode (open
	 * addressing, 0 empty, capacity a power of 2 >= 2 * ndirty); NULL
	 * when memory ran out: then dirty[] is searched */
	uint32_t *dirty_idx;
	size_t dirty_idx_cap;
	/* new inodes in the dirty set from the handlers, in windows of one
	 * upload delay: the current one's start and count, and the count of
	 * the one before (take_due()'s burst rule); protected by lock */
	uint64_t burst_start_ms;
	unsigned burst_now, burst_prev;
	int stop; /* protected by lock */
	pthread_t flusher;
	pthread_t pt_guarder; /* with fs->opens */
	int has_pt_guard;

	pthread_rwlock_t s3_lock; /* see above; writers first */

	/* uploads in flight: the inodes and keys they hold */
	pthread_mutex_t claim_lock;
	pthread_cond_t claim_free;
	uint64_t *claimed_inos; /* protected by claim_lock */
	char **claimed_keys;	/* protected by claim_lock */
	size_t nclaimed_inos, nclaimed_keys, capclaims;

	/* keys changed while a reconciliation runs */
	pthread_mutex_t touch_lock;
	int recording; /* protected by touch_lock; -1: one was lost */
	struct touched *touched;
	size_t ntouched, captouched;

	/* the background thread: snapshots and reconciliations (index.c) */
	pthread_cond_t bg_wake; /* with lock */
	pthread_t bg;
	int has_bg;
	int reconcile_soon; /* protected by lock */
	int fenced; /* atomic: another node took the lease; no more writes */
	uint64_t settle_until_ms; /* set before any thread starts (fs.c) */
	/* the last snapshot flush request answered (index.c); bg thread */
	char flushed_token[FLUSH_TOKEN_MAX];
	uint64_t snap_changes; /* meta_changes() at the last snapshot */
	int snap_known;	       /* snap_changes is valid */

	/* one upload at a time puts bytes together in memory (fs.c) */
	pthread_mutex_t compose_lock;

	/* growth in flight against the quota (fs.c space_take) */
	pthread_mutex_t space_lock;
	pthread_cond_t space_given;
	uint64_t space_held; /* protected by space_lock */

	/* health.c: what S3 said last, for CACHE_DIR/health */
	pthread_mutex_t health_lock;
	uint64_t s3_ok_ms, s3_err_ms; /* protected by health_lock */
	uint64_t s3_fail_since_ms;    /* protected by health_lock; 0: ok */
	char s3_err[128];	      /* protected by health_lock */
	uint64_t next_health_ms;      /* background thread only */
	struct timespec cap_mtime;    /* background thread only */
	ino_t cap_ino;		      /* background thread only */

	/* open files by inode (fs.c); a session can end with RELEASEs never
	 * delivered, and fs_destroy() closes what is left */
	struct handle *handles[FS_HANDLE_BUCKETS]; /* protected by lock */
};

/* A cache file as passthrough writes may have left it: what the fs last
 * accounted for (pt_settle()). */
struct pt_seen {
	uint64_t size;
	struct timespec mtime;
	int valid; /* 0: never looked at; the next look counts as a change */
};

struct handle {
	uint64_t ino;
	uint64_t opens;	      /* OPENs not yet RELEASEd (1: adopted) */
	struct data_file *df; /* a data cache reference */
	struct handle *next;  /* in its bucket; protected by fs->lock */
	/* FUSE passthrough (fs.c's "passthrough" section): the backing id
	 * of df's cache file while opens in passthrough remain (pt), and
	 * how many of those may write; slot: the record in fs->opens */
	int backing;
	uint32_t pt, writers;
	int slot;
	struct pt_seen seen;
	int frozen; /* its cache file is immutable (pt_guard()) */
	int owed;   /* an upload could not vouch for it: see pt_owe() */
};

struct timespec fs_now_real(void);
void fs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Records key (or every key under it) as changed by us, before the change
 * is made. A no-op unless a reconciliation is running. */
void fs_touch(struct fs *fs, const char *key, int prefix);
/* Whether key was recorded by fs_touch() since fs_touch_begin(). */
int fs_touched(struct fs *fs, const char *key);
/* A reconciliation's window: from before its LIST to after its changes. */
void fs_touch_begin(struct fs *fs);
void fs_touch_end(struct fs *fs);

/* health.c: records the outcome of an S3 call (rc 0 or -errno; what says
 * what failed, without secrets). Any thread. */
void fs_health_note(struct fs *fs, int rc, const char *what);
/* health.c: whether the last S3 call noted failed; any thread. */
int fs_s3_failing(struct fs *fs);
/* health.c: applies a changed CACHE_DIR/capacity and rewrites
 * CACHE_DIR/health when due. The background thread, every tick. */
void fs_health_tick(struct fs *fs);
/* The quota now (bytes; 0: none); any thread. */
uint64_t fs_capacity(struct fs *fs);

/* index.c: stops the background thread fs_start() started (if any). */
void fs_bg_stop(struct fs *fs);

#endif
