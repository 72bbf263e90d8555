/* meta.h: the metadata store: inodes, dentries, hard links, xattrs, dirty
 * flags.
 *
 * Authoritative while a volume is mounted. Kept in SQLite (WAL mode) in the
 * cache dir, so it survives a crash of the daemon, and mirrored in memory,
 * so lookup and getattr never touch SQLite.
 * Threading: every function is thread-safe; one mutex (meta->lock) guards
 * the in-memory tables and the database handle. Nothing here blocks on the
 * network. Functions that change state write through to SQLite inside a
 * transaction that meta_commit() (or the group-commit timer, see
 * meta_open()) closes; until then a crash may lose the change, never tear it.
 * Ownership: out-structs are filled by value; strings handed out are copies
 * the caller frees. The inode table knows nothing of FUSE: lookup counts are
 * plain counters kept by the caller through meta_ref()/meta_forget().
 */
#ifndef TIERFS_META_H
#define TIERFS_META_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#define META_ROOT_INO 1
#define META_NAME_MAX 255
#define META_DEFAULT_COMMIT_INTERVAL_MS 20

/* Dirty flags: what S3 does not have yet for an inode. */
#define META_DIRTY_DATA 0x1 /* the content differs from the object */
#define META_DIRTY_ATTR 0x2 /* mode/uid/gid/times/xattrs differ */
#define META_DIRTY_NAME 0x4 /* created, renamed or linked, not in S3 */

struct meta_attr {
	uint64_t ino;
	uint32_t mode; /* full st_mode, type bits included */
	uint32_t uid;
	uint32_t gid;
	uint32_t nlink;
	uint64_t size;
	struct timespec atime;
	struct timespec mtime;
	struct timespec ctime;
	uint32_t rdev;
	uint32_t dirty;	     /* META_DIRTY_* */
	uint64_t generation; /* bumped when an inode number is reused */
};

/* Which fields meta_setattr() changes. */
#define META_SET_MODE 0x01
#define META_SET_UID 0x02
#define META_SET_GID 0x04
#define META_SET_SIZE 0x08
#define META_SET_ATIME 0x10
#define META_SET_MTIME 0x20
#define META_SET_CTIME 0x40
/* attr->size if larger than the current size (a write's end): writes
 * answered out of order never shrink a file */
#define META_SET_GROW 0x80
/* the change may wait up to lazy_commit_ms for its commit, when it moves
 * neither the size nor a dirty flag (a write's mtime: with the kernel's
 * writeback cache, the kernel holds the mtime and sends it again) */
#define META_SET_LAZY 0x100
/* a regular file loses set-user-ID, and set-group-ID when the group may
 * execute (what a write, a truncate or a chown by a caller without
 * CAP_FSETID leaves), unless META_SET_MODE sets the mode; such a change is
 * never lazy */
#define META_SET_KILL_SUIDGID 0x200
/* with META_SET_GROW | META_SET_LAZY: a size that grows may wait for the
 * commit too. Only for a caller whose cache file records the size (a
 * settlement of writes made in passthrough: the range log's line, or a
 * ".new" file's size on disk), which the next start takes back after a
 * crash (fs.c's recover_dirty_files()) */
#define META_SET_LAZY_GROW 0x400

struct meta_config {
	const char *path; /* the SQLite file, e.g. CACHE_DIR/meta.db */
	unsigned commit_interval_ms; /* group commit; 0: commit every change */
	/* with commit_interval_ms 0: how long META_SET_LAZY changes may
	 * wait for a commit (0: they do not wait) */
	unsigned lazy_commit_ms;
	uint32_t root_mode; /* for a new store: S_IFDIR | 0755 */
	uint32_t root_uid, root_gid;
	/* A worker taking over a live mount (after its predecessor died):
	 * the kernel still holds references the store never saw, so inodes
	 * with no name are kept, and every inode counts as referenced until
	 * the next mount (META_NLOOKUP_UNKNOWN). */
	int adopt_kernel_refs;
	/* the SQLite VFS of every connection to the store, a name that
	 * outlives it (tests wrap META_VFS); NULL: META_VFS */
	const char *vfs;
};

/* One process's store: an exclusive lock on the file while the store is
 * open, and the WAL index in its memory (see "Locking" in meta.c). */
#define META_VFS "unix-excl"

#define META_NLOOKUP_UNKNOWN (1ull << 62)

struct meta;

void meta_config_init(struct meta_config *cfg);
/* Opens (creating if absent) the store and loads it into memory. A new
 * store gets a root directory inode META_ROOT_INO from cfg. -errno, with
 * the reason logged, on a corrupt or foreign file. */
int meta_open(const struct meta_config *cfg, struct meta **out);
/* Commits, stops the group-commit thread, closes. */
void meta_close(struct meta *m);
/* Closes the open transaction now (fsync, syncfs, unmount). */
int meta_commit(struct meta *m);
/* The WAL checkpoints run so far: by the checkpointer thread, and by
 * commits themselves (no checkpointer, or it fell behind). */
void meta_checkpoints(struct meta *m, uint64_t *background,
		      uint64_t *in_commits);
/* What fsync (datasync 0) or fdatasync (1) of ino needs of the store:
 * meta_commit(), unless every change to ino it covers is durable already
 * (for fdatasync: the inode's existence, a size that shrank, links and
 * dirty flags; an mtime alone needs no commit, and neither does a size
 * that grew: the cache file's range log records that, and fs.c takes it
 * back from there after a power loss). */
int meta_sync(struct meta *m, uint64_t ino, int datasync);
/* meta_sync() in two halves, so that the caller's own flushes run while
 * the store's syncer thread fsyncs the write-ahead log (outside the
 * store's lock; concurrent callers share one fsync). begin: *ticket 0 when
 * nothing is owed, else what to pass to meta_sync_wait(), which returns
 * once those changes are durable (0), or -errno. */
int meta_sync_begin(struct meta *m, uint64_t ino, int datasync,
		    uint64_t *ticket);
int meta_sync_wait(struct meta *m, uint64_t ticket);

/* Changes this thread makes between meta_batch_begin() and
 * meta_batch_end() share one commit, made by meta_batch_end() (when
 * commit_interval_ms is 0; otherwise the timer commits as usual). Other
 * threads' commits in between may include them: a batch is not atomic.
 * Pairs nest; the outermost end commits. */
void meta_batch_begin(void);
int meta_batch_end(struct meta *m);

/* A counter that moves with every change the store writes (bookkeeping
 * such as ETags and dirty flags included): "has anything changed since". */
uint64_t meta_changes(struct meta *m);
/* Writes a consistent copy of the committed store to path (a new SQLite
 * file, via VACUUM INTO on a read-only connection of its own, so changes
 * go on meanwhile): the index snapshot a new node loads. */
int meta_snapshot(struct meta *m, const char *path);
/* Prepares a downloaded snapshot at path to be opened as this node's
 * store: checks its application id, forgets the writer's dirty flags and
 * queued deletions, and sets the ETag of what was dirty to "!" (an object
 * of unknown version) so that a reconciliation compares it with S3; leaves
 * it in WAL mode, not synced. -EINVAL when unusable. */
int meta_snapshot_adopt(const char *path);
/* SQLite's quick_check of an adopted snapshot, on a connection of its own:
 * it may run beside meta_open() of the same file (a thread of the worker
 * does, on a second core), and a store that fails it is not used. 0 when
 * sound, else -EINVAL. */
int meta_snapshot_check(const char *path);

/* -ENOENT when parent has no such name. */
int meta_lookup(struct meta *m, uint64_t parent, const char *name,
		struct meta_attr *out);
/* meta_lookup() that also takes one lookup reference, atomically, so the
 * inode cannot be deleted between the two (the FUSE lookup reply). */
int meta_lookup_ref(struct meta *m, uint64_t parent, const char *name,
		    struct meta_attr *out);
int meta_getattr(struct meta *m, uint64_t ino, struct meta_attr *out);

/* Creates name in parent (a file, directory, symlink or node, by
 * attr->mode) with a new inode number; attr gives mode, uid, gid, times and
 * rdev (a zero time means now). target is the symlink target (NULL
 * otherwise). out gets the new
 * inode's attributes. -EEXIST, -ENOENT (no parent), -ENOTDIR,
 * -ENAMETOOLONG. The new name and inode are marked META_DIRTY_NAME. */
int meta_create(struct meta *m, uint64_t parent, const char *name,
		const struct meta_attr *attr, const char *target,
		struct meta_attr *out);
/* A new name for an existing non-directory inode (hard link). */
int meta_link(struct meta *m, uint64_t ino, uint64_t parent, const char *name,
	      struct meta_attr *out);
/* Removes a name. -EISDIR/-ENOTDIR checked with want_dir; -ENOTEMPTY for a
 * directory with entries. *ino_out gets the inode; its nlink drops, and
 * an inode left with nlink 0 lives on until meta_forget() drops its last
 * reference (unlink while open). */
int meta_unlink(struct meta *m, uint64_t parent, const char *name, int want_dir,
		uint64_t *ino_out);
/* meta_unlink() that, in the same transaction, queues key (the name's S3
 * object) in the outbox of deletions S3 is still owed, so a crash can
 * neither lose the deletion nor keep it without the unlink. Only for an
 * inode with an ETag: one without has no object anywhere (see
 * meta_outbox_cancel_for()), and its deletion would be a request for
 * nothing. key NULL: plain meta_unlink(). */
int meta_unlink_queue(struct meta *m, uint64_t parent, const char *name,
		      int want_dir, const char *key, uint64_t *ino_out);
/* Queues deletions of keys (a rename's old names), in one transaction. */
int meta_outbox_add(struct meta *m, const char *const *keys, size_t n);
/* Up to max queued deletions, oldest first, into ids[] and keys[] (keys
 * malloc'ed, the caller frees). Returns how many, or -errno. */
ssize_t meta_outbox_peek(struct meta *m, size_t max, uint64_t *ids,
			 char **keys);
/* Drops the entries with these ids: S3 has done them. */
int meta_outbox_done(struct meta *m, const uint64_t *ids, size_t n);
/* 1 when a deletion of key is queued, 0 when not, or -errno. */
int meta_outbox_has(struct meta *m, const char *key);
/* Drops every queued deletion of key: a new object is about to be
 * written there, and a late deletion would destroy it. */
int meta_outbox_cancel(struct meta *m, const char *key);
/* meta_outbox_cancel() for an upload of ino's n-th name, path, to key:
 * in one step with the check that ino still has that name, so an unlink
 * or rename queued meanwhile keeps its deletion. -ESTALE when the name is
 * gone (the upload must not write there). In the same step an inode with
 * no ETag gets mark (when not NULL): from then on it may have an object,
 * and an unlink queues the deletion. */
int meta_outbox_cancel_for(struct meta *m, const char *key, uint64_t ino,
			   unsigned n, const char *path, const char *mark);
/* rename(2) semantics: replaces a compatible destination (file over file,
 * empty directory over directory), -EINVAL when moving a directory into
 * itself or a descendant; flags are RENAME_NOREPLACE / RENAME_EXCHANGE.
 * *replaced_ino (optional) gets the inode that lost its name, or 0. */
int meta_rename(struct meta *m, uint64_t parent, const char *name,
		uint64_t newparent, const char *newname, unsigned flags,
		uint64_t *replaced_ino);
/* What a rename changes in the outbox of deletions, in its transaction. */
struct meta_rename_keys {
	const char *const *gone; /* the old names' objects: queued */
	size_t ngone;
	/* the rename's copies at the new names, queued before they were made
	 * (so that a crash before the rename undoes them): dropped */
	const char *const *made;
	size_t nmade;
};
/* meta_rename() that, in the same transaction, changes the outbox as keys
 * says: a crash can neither lose the old objects' deletions nor keep them
 * (or the new copies) without the rename. Not with RENAME_EXCHANGE. */
int meta_rename_queue(struct meta *m, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, unsigned flags,
		      const struct meta_rename_keys *keys,
		      uint64_t *replaced_ino);
/* Changes the fields in mask (META_SET_*); ctime follows the rules of
 * chmod/chown/truncate unless META_SET_CTIME is given. */
int meta_setattr(struct meta *m, uint64_t ino, unsigned mask,
		 const struct meta_attr *attr, struct meta_attr *out);
/* meta_setattr() only while the inode is clean and its change counter is
 * still seq (nothing changed it since the caller looked): -EAGAIN
 * otherwise. For changes that come from S3, which must never overwrite a
 * local one. */
int meta_setattr_if(struct meta *m, uint64_t ino, uint64_t seq, unsigned mask,
		    const struct meta_attr *attr, struct meta_attr *out);
/* The symlink's target, malloc'ed. -EINVAL when not a symlink. */
int meta_readlink(struct meta *m, uint64_t ino, char **target);

/* Lists a directory from position off (0 = start; "." and ".." are the
 * caller's). fn gets each entry and the position after it, and returns
 * non-zero to stop (a full reply buffer). Positions stay valid while
 * entries are added and removed. fn runs under meta->lock: it must not
 * call back into meta. */
typedef int (*meta_dir_fn)(void *ctx, const char *name,
			   const struct meta_attr *attr, uint64_t next_off);
int meta_readdir(struct meta *m, uint64_t dir, uint64_t off, meta_dir_fn fn,
		 void *ctx);

/* Extended attributes; XATTR_CREATE / XATTR_REPLACE as in setxattr(2).
 * getxattr returns the value's size, copying it when size allows
 * (-ERANGE when too small, size 0 asks for the size); -ENODATA. */
int meta_setxattr(struct meta *m, uint64_t ino, const char *name,
		  const void *value, size_t size, int flags);
ssize_t meta_getxattr(struct meta *m, uint64_t ino, const char *name,
		      void *value, size_t size);
ssize_t meta_listxattr(struct meta *m, uint64_t ino, char *list, size_t size);
int meta_removexattr(struct meta *m, uint64_t ino, const char *name);

/* Lookup counts (the kernel's references): +n on every entry reply,
 * -n on forget. An inode with nlink 0 and no references is deleted and
 * meta_forget() returns 1 (the caller then drops its cached data). */
void meta_ref(struct meta *m, uint64_t ino, uint64_t n);
int meta_forget(struct meta *m, uint64_t ino, uint64_t n);

/* Dirty tracking for the uploader. */
int meta_set_dirty(struct meta *m, uint64_t ino, uint32_t flags);
/* Every inode with a dirty flag (after a restart: what S3 still lacks).
 * *inos is malloc'ed (NULL when n is 0). */
int meta_dirty_list(struct meta *m, uint64_t **inos, size_t *n);
/* Clears flags only if the inode's change counter still equals seq (what
 * the uploader saw when it started), so a write during the upload keeps
 * the inode dirty: -EAGAIN then, with the flags kept. */
int meta_clear_dirty(struct meta *m, uint64_t ino, uint32_t flags,
		     uint64_t seq);
/* The inode's change counter, bumped by every change to it. */
int meta_change_seq(struct meta *m, uint64_t ino, uint64_t *seq);

/* The full path of ino relative to the volume root ("a/b/c"; "" for the
 * root), through its first name; malloc'ed. -ENOENT for an inode with no
 * name left. */
int meta_path(struct meta *m, uint64_t ino, char **path);
/* The path through the inode's n-th name (0 = the first, in creation
 * order; hard links have several); -ENOENT past the last. */
int meta_path_nth(struct meta *m, uint64_t ino, unsigned n, char **path);
/* The object's ETag as last seen in S3 ("" when none). */
int meta_set_etag(struct meta *m, uint64_t ino, const char *etag);
int meta_get_etag(struct meta *m, uint64_t ino, char *etag, size_t len);

/* Notes: numbers the caller keeps in the store under names of its own
 * (at most META_NOTE_MAX bytes), committed with the other changes of a
 * batch made in (meta_batch_begin()); fs.c's are the requests a worker
 * carried out, for the next one to recognise. meta_notes() gives the
 * values of the notes whose names start with prefix (*values: free()),
 * meta_notes_clear() deletes them. */
#define META_NOTE_MAX 64
int meta_note_put(struct meta *m, const char *name, uint64_t value);
int meta_notes(struct meta *m, const char *prefix, uint64_t **values,
	       size_t *n);
int meta_notes_clear(struct meta *m, const char *prefix);

/* Totals for statfs: bytes in regular files, and inode count. */
void meta_usage(struct meta *m, uint64_t *bytes, uint64_t *inodes);

/* Verifies the in-memory invariants (see meta.c): 0, or -EIO with the
 * first violation logged. O(inodes); for tests and debug builds, which
 * also run it after changes. */
int meta_check(struct meta *m);

#endif
