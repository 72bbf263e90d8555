/* fs.h: the FUSE edge of tierfs: low-level handlers over meta, data and S3.
 *
 * The flusher thread also evicts clean, closed data from the cache each
 * tick (FS_FLUSH_TICK_MS), under --cache-size and the free-space floor.
 * Threading: the handlers run on libfuse's worker threads; shared state
 * lives in the modules below (each thread-safe) plus the fs's own locks
 * (fs_int.h): fs->lock guards the dirty set and is never held across a
 * call into S3; s3_lock and the upload claims order the S3 changes.
 * Each handler sends exactly one reply on every path.
 * Ownership: fs_create() copies the config's strings and opens the data
 * cache itself (its fetch callback needs the fs); the S3 client and the
 * meta store are the caller's and must outlive the fs.
 *
 * What S3 is owed lives in the meta store, so it survives a crash: dirty
 * flags on inodes (data, attributes, names) and an outbox of deletions.
 * Changes mark the inode dirty there and in an in-memory dirty set; the
 * flusher uploads each inode upload_delay_ms after its first change since
 * its last upload (up to FS_BURST_WAIT times that during a burst of new
 * files: take_due()), with FS_UPLOAD_THREADS at once; fsync uploads at
 * once. unlink and rmdir
 * queue their deletions in the outbox with the change; rename copies an
 * object that exists first, then queues the old keys.
 */
#ifndef TIERFS_FS_H
#define TIERFS_FS_H

#define FUSE_USE_VERSION 35
#include <fuse3/fuse_lowlevel.h>
#include <stdint.h>

#include "../s3/s3.h"
#include "data.h"
#include "layout.h"
#include "lease.h"
#include "meta.h"

#define FS_DEFAULT_UPLOAD_DELAY_MS 2000u
#define FS_DEFAULT_TIMEOUT_S 3600.0 /* RWO: this node is the only writer */
#define FS_MAX_WRITE (1u << 20)
/* asynchronous requests the kernel keeps in flight: the JupyterHub fio job's
 * 4 x 256 */
#define FS_MAX_BACKGROUND 1024u
#define FS_FLUSH_TICK_MS 100u
/* room kept on the cache disk above data.c's reserve before writes in
 * passthrough stop (at most a sixteenth of the disk): what a fast writer
 * puts there in a few guard ticks */
#define FS_PT_MARGIN (512ull << 20)
/* how often the free room on the cache disk is checked while files are
 * open for writing in passthrough */
#define FS_PT_GUARD_TICK_MS 20u
#define FS_LAZY_COMMIT_MS                                                      \
	50u /* a write's mtime, at most this late in the store */
#define FS_DEFAULT_SNAPSHOT_INTERVAL_MS (300u * 1000u)
#define FS_DEFAULT_RECONCILE_INTERVAL_MS (600u * 1000u)

struct fs_config {
	const char *bucket;
	const char *prefix; /* no leading or trailing '/'; "" for the bucket */
	struct layout_defaults defaults;
	uint64_t capacity; /* bytes; 0: unlimited; CACHE_DIR/capacity changes
			      it live (health.c), so read it atomically */
	int read_only;
	unsigned upload_delay_ms; /* a dirty inode waits this long */
	int durability_local;	  /* fsync: durable on the cache disk only */
	double entry_timeout;
	double attr_timeout;
	const char *cache_dir; /* scratch space for snapshots; NULL: none */
	unsigned snapshot_interval_ms;	/* 0: only at unmount */
	unsigned reconcile_interval_ms; /* 0: never after the first */
	struct lease *lease;		/* the write lease to renew; borrowed */
	unsigned lease_interval_ms;	/* renewal period */
	/* FUSE passthrough for files the cache holds whole, on a volume
	 * without a capacity (1, the default; needs cache_dir, a kernel
	 * that offers it, and CAP_SYS_ADMIN) */
	int passthrough;
	/* a worker taking over a live mount from one that died (else the
	 * mount's first): it answers the requests the kernel sends again */
	int takeover;
};

struct fs;

void fs_config_init(struct fs_config *cfg);
/* Builds the fs over an S3 client and meta store, opens the data cache
 * from data_cfg (its fetch fields are set here), starts the flusher. */
int fs_create(const struct fs_config *cfg, s3_client *s3, struct meta *meta,
	      const struct data_config *data_cfg, struct fs **out);
/* Uploads everything dirty, stops the flusher, closes the data cache,
 * frees. 0 when all of it reached S3, else the first -errno (the data
 * stays dirty in the cache dir for the next mount). */
int fs_destroy(struct fs *fs);
/* Tells the fs its session, once mounted: changes found in S3 are then
 * pushed out of the kernel's caches. Starts the background thread, which
 * writes index snapshots every snapshot_interval_ms (when something
 * changed) and reconciles with S3 every reconcile_interval_ms, and at once
 * with FS_START_RECONCILE (what changed in S3 while unmounted, or since the
 * snapshot the store came from). FS_START_FROM_SNAPSHOT: the store is the
 * volume's snapshot, so none is owed until something changes. */
#define FS_START_RECONCILE 0x1
#define FS_START_FROM_SNAPSHOT 0x2
void fs_set_session(struct fs *fs, struct fuse_session *se);
int fs_start(struct fs *fs, unsigned flags);

/* The index snapshot: PREFIX/.tierfs/index.db, a copy of the meta store
 * (meta_snapshot()). fs_snapshot() uploads one when the store changed
 * since the last; fs_destroy() writes one after its final flush. */
int fs_snapshot(struct fs *fs);
/* Downloads the volume's snapshot into db_path, ready for meta_open():
 * the first mount on an empty cache dir. -ENOENT when there is none.
 * meta_snapshot_check() is left to the caller, who may run it beside
 * meta_open(). Not yet durable: its write-back has started, and the
 * caller fsyncs db_path before anything counts on it. */
int fs_fetch_snapshot(s3_client *s3, const char *bucket, const char *prefix,
		      const char *db_path);
/* Removes a SQLite file and the WAL, index and journal SQLite keeps beside
 * it: a WAL left by another file of that name would be read into the
 * next. */
void fs_remove_store(const char *path);
/* What a killed process left half-sent: the multipart uploads in progress
 * under the prefix (their inodes are still dirty and upload again).
 * fs_find_stale_uploads() only lists them, so it runs beside the load,
 * before the lease is confirmed and before this process starts uploads of
 * its own; fs_abort_stale_uploads() aborts what it found (nothing with a
 * read-only or NULL fs) and frees it. */
struct fs_stale_uploads {
	struct s3_upload_list *pages; /* owned */
	size_t npages;
};
int fs_find_stale_uploads(s3_client *s3, const char *bucket, const char *prefix,
			  struct fs_stale_uploads *out);
void fs_abort_stale_uploads(struct fs *fs, struct fs_stale_uploads *stale);
/* Reads the prefix with LIST (+ HEAD for attributes) into a meta store
 * that holds only the root: the first mount of a volume on a cache dir
 * when it has no snapshot. */
int fs_load_tree(struct fs *fs);
/* Compares the store with a LIST of the prefix and takes in what other
 * tools changed: new objects appear, changed ones are re-read, deleted
 * ones go. Local changes not yet in S3 always win. */
int fs_reconcile(struct fs *fs);
/* Uploads every dirty inode now (syncfs, unmount). */
int fs_flush_all(struct fs *fs);

/* CACHE_DIR/capacity, the live quota (health.c): `tierfs resize` writes
 * it (atomically, 0600) and the running worker applies it within
 * FS_BG_TICK_MS; a new worker starts from it. CACHE_DIR/health is what
 * the worker reports (see health.c). Both return 0 or -errno; read gives
 * -ENOENT when there is no file. */
#define FS_CAPACITY_FILE "capacity"
#define FS_HEALTH_FILE "health"
int fs_capacity_read(const char *cache_dir, uint64_t *bytes);
int fs_capacity_write(const char *cache_dir, uint64_t bytes);

/* Fault injection for tests: sleeps the milliseconds the environment
 * variable env names (TIERFS_DEBUG_*_PAUSE_MS), if it is set, to widen a
 * race window a test must see handled. */
void fs_debug_pause(const char *env);
/* The milliseconds the environment variable env names, or dflt when it is
 * not set (TIERFS_DEBUG_LAZY_COMMIT_MS: a test holds lazy changes back) */
unsigned fs_debug_ms(const char *env, unsigned dflt);

extern const struct fuse_lowlevel_ops fs_ops;

#endif
