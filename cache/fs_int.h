/* fs_int.h: what fs.c (the FUSE handlers and the uploader) and index.c (the
 * volume's listing: first load, index snapshot, reconciliation) share.
 * Not a public header: the rest of tierfs uses fs.h.
 *
 * Locks, in the order they are taken: sync_lock, then lock; the meta
 * store's and the data cache's locks come after both (see meta.h, data.h).
 * Every change tierfs makes to S3 runs under sync_lock, which is what
 * lets a reconciliation tell its own changes from other tools'.
 */
#ifndef TIERFS_FS_INT_H
#define TIERFS_FS_INT_H

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "fs.h"

struct dirty {
	uint64_t ino;
	uint64_t since_ms; /* monotonic time of the first unsynced change */
	uint32_t flags;	   /* META_DIRTY_* already set in the meta store */
};

/* An S3 key tierfs changed while a reconciliation was running: the listing
 * it works from may predate the change, so the key is left alone. */
struct touched {
	char *key;  /* owned */
	int prefix; /* every key under it (a directory rename) */
};

struct fs {
	struct fs_config cfg;	 /* strings point at the copies below */
	char *bucket;		 /* owned */
	char *prefix;		 /* owned */
	char *cache_dir;	 /* owned; NULL: no snapshots */
	s3_client *s3;		 /* borrowed */
	struct meta *meta;	 /* borrowed */
	struct data *data;	 /* owned; closed by fs_destroy() */
	struct fuse_session *se; /* set once mounted; kernel notifications */

	pthread_mutex_t lock; /* guards the dirty set, stop and bg state */
	pthread_cond_t wake;  /* the flusher's */
	struct dirty *dirty;  /* protected by lock */
	size_t ndirty, capdirty;
	int stop; /* protected by lock */
	pthread_t flusher;

	pthread_mutex_t sync_lock; /* one S3 change at a time */
	/* protected by sync_lock: keys changed while reconciling */
	int recording;
	struct touched *touched;
	size_t ntouched, captouched;

	/* the background thread: snapshots and reconciliations (index.c) */
	pthread_cond_t bg_wake; /* with lock */
	pthread_t bg;
	int has_bg;
	int reconcile_soon;    /* protected by lock */
	uint64_t snap_changes; /* meta_changes() at the last snapshot */
	int snap_known;	       /* snap_changes is valid */

	/* open files; a session can end with RELEASEs never delivered, and
	 * fs_destroy() closes what is left */
	struct handle *handles; /* protected by lock */
};

struct handle {
	uint64_t ino;
	struct data_file *df;	    /* a data cache reference */
	struct handle *prev, *next; /* in fs->handles; protected by fs->lock */
};

uint64_t fs_now_ms(void);
struct timespec fs_now_real(void);
void fs_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Records key (or every key under it) as changed by us; the caller holds
 * sync_lock. A no-op unless a reconciliation is running. */
void fs_touch(struct fs *fs, const char *key, int prefix);
/* Whether key was recorded by fs_touch(); the caller holds sync_lock. */
int fs_touched(struct fs *fs, const char *key);

/* index.c: stops the background thread fs_start() started (if any). */
void fs_bg_stop(struct fs *fs);

#endif
