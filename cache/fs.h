/* fs.h: the FUSE edge of tierfs: low-level handlers over meta, data and S3.
 *
 * The flusher thread also evicts clean, closed data from the cache each
 * tick (FS_FLUSH_TICK_MS), under --cache-size and the free-space floor.
 * Threading: the handlers run on libfuse's worker threads; shared state
 * lives in the modules below (each thread-safe) plus fs->lock, which
 * guards the dirty set and is never held across a call into S3. One
 * sync at a time per inode (fs->sync_lock serialises uploads for now).
 * Each handler sends exactly one reply on every path.
 * Ownership: fs_create() copies the config's strings and opens the data
 * cache itself (its fetch callback needs the fs); the S3 client and the
 * meta store are the caller's and must outlive the fs.
 *
 * S3 synchronisation, step 1 (DESIGN §5's durable outbox is still to
 * come): data and attribute changes mark the inode dirty in the meta
 * store and in an in-memory dirty set that a flusher thread uploads
 * upload_delay_ms after the last change; fsync uploads at once; mkdir,
 * symlink and create are uploaded by the same path. unlink, rmdir and
 * rename change S3 synchronously (copies first, deletes last).
 */
#ifndef TIERFS_FS_H
#define TIERFS_FS_H

#define FUSE_USE_VERSION 35
#include <fuse3/fuse_lowlevel.h>
#include <stdint.h>

#include "../s3/s3.h"
#include "data.h"
#include "layout.h"
#include "meta.h"

#define FS_DEFAULT_UPLOAD_DELAY_MS 2000u
#define FS_DEFAULT_TIMEOUT_S 3600.0 /* RWO: this node is the only writer */
#define FS_MAX_WRITE (1u << 20)
#define FS_FLUSH_TICK_MS 100u

struct fs_config {
	const char *bucket;
	const char *prefix; /* no leading or trailing '/'; "" for the bucket */
	struct layout_defaults defaults;
	uint64_t capacity; /* bytes; 0: unlimited */
	int read_only;
	unsigned upload_delay_ms; /* a dirty inode waits this long */
	int durability_local;	  /* fsync: durable on the cache disk only */
	double entry_timeout;
	double attr_timeout;
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
/* Reads the prefix with LIST (+ HEAD for attributes) into a meta store
 * that holds only the root: the first mount of a volume on a cache dir. */
int fs_load_tree(struct fs *fs);
/* Uploads every dirty inode now (syncfs, unmount). */
int fs_flush_all(struct fs *fs);

extern const struct fuse_lowlevel_ops fs_ops;

#endif
