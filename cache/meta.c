/* meta.c: the metadata store: a SQLite file mirrored by in-memory tables.
 *
 * Threading: one mutex, meta->lock, guards everything here (the hash
 * tables, the counters, the SQLite handle and its statements). It is the
 * root of the lock order: it is taken by every entry point and nothing else
 * is ever taken while it is held. The group-commit thread takes it too,
 * and so does the syncer thread, which drops it around the WAL's fsync.
 * Ownership: struct meta owns every inode, dentry and xattr record, the
 * SQLite connection and its prepared statements; meta_close() frees them.
 *
 * Design notes
 * ------------
 * Write-through, memory second. Every change runs the same four steps:
 *   1. validate against the in-memory tables (no side effects);
 *   2. allocate what the change needs (names, records);
 *   3. write the rows inside SAVEPOINT op, nested in the open transaction;
 *      attribute edits made for this are recorded in a small undo log;
 *   4. on success RELEASE op and apply the structural change in memory,
 *      which cannot fail; on failure ROLLBACK TO op and replay the undo log.
 * So at every unlock the mirror equals the database (committed rows plus
 * the open transaction).
 *
 * Store states:
 *   IDLE --first change: BEGIN IMMEDIATE--> IN_TXN
 *   IN_TXN --timer (commit_interval_ms) / meta_commit() / every change when
 *            commit_interval_ms is 0 (the end of a meta_batch_begin()/end()
 *            pair inside one; a META_SET_LAZY change waits for the timer,
 *            lazy_commit_ms, or the next other change; so do the deletion
 *            of a forgotten orphan and a change of an orphan's times,
 *            which nothing reads after a crash)--> IDLE
 *   any --SQLite rolled the whole transaction back (I/O error, disk full)
 *         --> FAILED: reads go on from memory, changes return -EIO.
 * Commits use synchronous=NORMAL: durable against a crash of the daemon,
 * not of the machine. meta_commit() then fsyncs the WAL (every earlier
 * frame included), so what it acknowledges survives a power loss; each
 * such fsync ends a sync epoch. An inode remembers the epoch of its last
 * change (and of its last change fdatasync needs), so meta_sync() skips
 * the fsync when that epoch is over.
 *
 * Checkpoints: SQLite's automatic one ran inside the commit that passed
 * 1,000 WAL frames, so one request in a few hundred waited for 4 MB of
 * copying and two fsyncs, and every other request for the lock. A
 * checkpointer thread does it instead, on its own connection (WAL lets
 * it copy while commits go on): the WAL hook wakes it each time commits
 * add META_CKPT_FRAMES. Commits go on while it copies, so it rarely
 * copies every frame and the WAL rarely starts over; past
 * META_CKPT_INLINE_FRAMES a commit checkpoints itself, as before, which
 * the lock makes complete, and the WAL starts over. That commit first
 * waits for a background run in flight: on a loaded disk a run's fsyncs
 * take seconds, its checkpoint lock would make the commit's BUSY, and
 * the WAL would grow by all that commits add meanwhile.
 *
 * Locking: every connection (the store's, the checkpointer's, the
 * dentry reader's, the snapshot's) is in this process, so they are all
 * opened with SQLite's "unix-excl" VFS (META_VFS; meta_config.vfs for
 * tests): the first takes an exclusive lock on the file for the life of
 * the process, and the WAL index lives in the heap, shared by the
 * connections, not in a -shm file. A commit then makes no fcntl() call
 * (it made six: a quarter of the worker's system calls in a run of
 * creates and unlinks), and another process that opens the store while
 * a worker has it is told "database is locked" rather than let in beside
 * it. A worker that dies drops the lock with its descriptors; the next
 * one rebuilds the index from the WAL. The store's own connection, the
 * only one that writes the WAL, goes through a walbuf VFS over that one
 * (walbuf.h): a commit of three pages was six pwrite()s, and is one.
 *
 * A full disk: SQLite rolls the whole transaction back when a WAL write
 * finds no room, and the store then takes no more changes (FAILED). The
 * data cache leaves room on the disk for the store (data.h's reserve),
 * but other writers of the disk may not, so PATH-ballast holds
 * META_BALLAST bytes (at most a sixteenth of the disk) for the store
 * alone. A WAL write that finds the disk full gives them up
 * (walbuf_on_full()) and is made again; a commit takes them back, at most
 * once every META_BALLAST_RETRY_MS, once the disk has room for them
 * twice over.
 *   HELD --a WAL write finds the disk full: emptied--> GIVEN
 *   GIVEN --a commit, room for twice its size: filled--> HELD
 *
 * Sync rounds (meta_sync_begin()/_wait()): a round commits, starts a new
 * epoch, drops the lock, fdatasyncs the WAL through a descriptor of our
 * own, and retakes the lock; then every change stamped before its epoch
 * is durable (durable_epoch). A change made during the fsync belongs to
 * the new epoch and waits for the next round. The syncer thread starts a
 * round as soon as meta_sync_begin() asks; a waiter starts one itself when
 * none is in flight. One round serves every waiter it covers.
 *   IDLE --a ticket above durable_epoch--> SYNCING --fsync ok-->
 *   IDLE (durable_epoch advanced) | --fsync failed--> IDLE (the waiters it
 *   covered get the error; the next ticket tries again)
 *
 * Inode lifecycle:
 *   LINKED (nlink > 0) --last name removed, nlookup > 0--> ORPHAN
 *   ORPHAN --meta_forget() drops nlookup to 0--> deleted (returns 1)
 *   LINKED --last name removed, nlookup == 0--> deleted by that unlink
 * Orphans found by meta_open() are deleted: lookup counts are not persisted,
 * so after a restart nothing can reference them. Issue 4 (worker restart
 * with FUSE_NOTIFY_RESEND) may need to keep them, since the kernel still
 * holds its references across a worker crash.
 *
 * Numbers: inode numbers come from meta.next_ino and are never reused within
 * a store, so generation stays 0. Directory positions are dentry cookies
 * from meta.next_cookie, strictly increasing, so a directory's entries,
 * kept in cookie order, only ever grow at the tail; a renamed entry gets a
 * new cookie. Both are stored ahead of what was handed out, by
 * META_COUNTER_CHUNK (counters_take()): storing them is two pages of the
 * meta table, a quarter of a create's WAL frames, so a commit stores them
 * once a chunk, and a reopen skips what was left of the chunk.
 *
 * change_seq counts the changes to an inode (every mutation that touches it,
 * meta_set_dirty() included); bookkeeping by the uploader
 * (meta_clear_dirty(), meta_set_etag()) does not bump it.
 *
 * Invariants (meta_check(); run after each change in debug builds):
 *   I1 every dentry's parent and inode are in the inode table; the parent
 *      is a directory; the dentry is found by (parent, name) and by cookie.
 *   I2 a non-directory's nlink equals its number of names.
 *   I3 a directory has at most one name; with one (or being the root) its
 *      nlink is 2 + its subdirectories; with none it is an empty orphan of
 *      nlink 0.
 *   I4 every named directory's chain of parents reaches the root without a
 *      cycle; the root has no name.
 *   I5 entry and name lists are in cookie order and match the dentry table;
 *      the usage counters match the table.
 */
#include "meta.h"
#include "walbuf.h"
#include "../s3/clock.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <sqlite3.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

#define META_FORMAT_VERSION 1
#define META_APP_ID 0x74696572 /* "tier" in PRAGMA application_id */
#define META_BUSY_TIMEOUT_MS 5000
/* WAL frames that commits add before the checkpointer is woken (SQLite's
 * automatic checkpoint is at 1,000), and the WAL's length past which a
 * commit checkpoints itself (the checkpointer cannot keep up) */
#define META_CKPT_FRAMES 1000
#define META_CKPT_INLINE_FRAMES 8000
/* numbers reserved at a time (see Numbers) */
#define META_COUNTER_CHUNK 1024
#define META_XATTR_NAME_MAX 255
#define META_XATTR_SIZE_MAX 65536
#define META_SYMLINK_MAX 4095
#define META_ETAG_MAX 1024
#define META_LINK_MAX 65000
#define META_HTAB_MIN 1024
/* Debug builds check every invariant after each change while the store has
 * at most this many inodes, and every this many changes above it, so large
 * tests stay linear. */
#define META_CHECK_FULL_MAX 1024
#define META_OP_MAX 4		  /* inodes one change may touch (rename: 4) */
#define META_BALLAST (4ull << 20) /* see "A full disk" */
#define META_BALLAST_RETRY_MS 1000

#define container_of(p, type, member)                                          \
	((type *)(void *)((char *)(p)-offsetof(type, member)))

/* ---- records ------------------------------------------------------------ */

struct hnode {
	struct hnode *next;
	uint64_t hash;
};

/* Chained hash table; buckets double when the load passes 1. */
struct htab {
	struct hnode **b; /* owned */
	size_t mask;
	size_t n;
};

struct xattr {
	struct xattr *next; /* in the inode's list, insertion order */
	char *name;	    /* owned */
	size_t size;
	unsigned char value[];
};

struct dentry;

struct inode {
	struct hnode h;	    /* in meta->inodes, by a.ino */
	struct meta_attr a; /* a.dirty and a.generation live here too */
	uint64_t seq;	    /* change counter (change_seq column) */
	uint64_t nlookup;   /* the kernel's references; memory only */
	char *target;	    /* symlink target or NULL; owned */
	char *etag;	    /* owned; NULL when none */
	/* meta->sync_epoch at its last change, and at its last change that
	 * fdatasync must make durable (existence, size, links, dirty flags):
	 * durable once that epoch is over (meta_sync()) */
	uint64_t sync_all, sync_data;
	struct xattr *xattrs; /* owned list */
	struct dentry *names; /* dentries naming this inode, cookie order */
	/* directories: entries in cookie order */
	struct dentry *first, *last;
	size_t nentries;
	/* scratch for check_locked(); before it, load() keeps in ck_names
	 * the inode's place in its load order */
	size_t ck_names, ck_entries, ck_subdirs;
};

struct dentry {
	struct hnode hname;   /* in meta->dnames, by (parent, name) */
	struct hnode hcookie; /* in meta->dcookies, by cookie */
	uint64_t cookie;
	struct inode *dir;	    /* the parent */
	struct inode *ino;	    /* what the name points at */
	struct dentry *prev, *next; /* in dir's entry list */
	struct dentry *nnext;	    /* in ino's name list */
	size_t namelen;
	char name[];
};

enum stmt {
	ST_BEGIN,
	ST_COMMIT,
	ST_SAVEPOINT,
	ST_RELEASE,
	ST_ROLLBACK_TO,
	ST_INODE_PUT,
	ST_INODE_DEL,
	ST_XATTR_DEL_INO,
	ST_DENTRY_INS,
	ST_DENTRY_DEL,
	ST_DENTRY_SET_INO,
	ST_XATTR_INS,
	ST_XATTR_UPD,
	ST_XATTR_DEL,
	ST_KV_PUT,
	ST_OUTBOX_INS,
	ST_OUTBOX_DEL_ID,
	ST_OUTBOX_DEL_KEY,
	ST_OUTBOX_PEEK,
	ST_OUTBOX_HAS,
	ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_COMMIT] = "COMMIT",
	[ST_SAVEPOINT] = "SAVEPOINT op",
	[ST_RELEASE] = "RELEASE op",
	[ST_ROLLBACK_TO] = "ROLLBACK TO op",
	[ST_INODE_PUT] =
		"INSERT OR REPLACE INTO inodes(ino, mode, uid, gid, nlink, "
		"size, atime_s, atime_ns, mtime_s, mtime_ns, ctime_s, "
		"ctime_ns, rdev, target, etag, dirty, change_seq, generation) "
		"VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, "
		"?13, ?14, ?15, ?16, ?17, ?18)",
	[ST_INODE_DEL] = "DELETE FROM inodes WHERE ino = ?1",
	[ST_XATTR_DEL_INO] = "DELETE FROM xattrs WHERE ino = ?1",
	[ST_DENTRY_INS] = "INSERT INTO dentries(parent, name, ino, cookie) "
			  "VALUES(?1, ?2, ?3, ?4)",
	[ST_DENTRY_DEL] =
		"DELETE FROM dentries WHERE parent = ?1 AND name = ?2",
	[ST_DENTRY_SET_INO] =
		"UPDATE dentries SET ino = ?3 WHERE parent = ?1 AND name = ?2",
	[ST_XATTR_INS] = "INSERT INTO xattrs(ino, name, value) "
			 "VALUES(?1, ?2, ?3)",
	[ST_XATTR_UPD] =
		"UPDATE xattrs SET value = ?3 WHERE ino = ?1 AND name = ?2",
	[ST_XATTR_DEL] = "DELETE FROM xattrs WHERE ino = ?1 AND name = ?2",
	[ST_KV_PUT] = "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
	[ST_OUTBOX_INS] = "INSERT INTO outbox(key) VALUES(?1)",
	[ST_OUTBOX_DEL_ID] = "DELETE FROM outbox WHERE id = ?1",
	[ST_OUTBOX_DEL_KEY] = "DELETE FROM outbox WHERE key = ?1",
	[ST_OUTBOX_PEEK] = "SELECT id, key FROM outbox ORDER BY id LIMIT ?1",
	[ST_OUTBOX_HAS] = "SELECT 1 FROM outbox WHERE key = ?1 LIMIT 1",
};

/* Keyed by cookie: a new entry is appended, and the load reads them in
 * cookie order without an index; the one index finds (parent, name). A
 * change of a name writes a page of each: two of its WAL frames. */
#define DENTRIES_COLUMNS                                                       \
	"(parent INTEGER NOT NULL, name TEXT NOT NULL, ino INTEGER NOT NULL,"  \
	" cookie INTEGER PRIMARY KEY, UNIQUE(parent, name));"

/* Stores made by earlier builds keep dentries by rowid, with an index by
 * name, one by cookie and one by inode that nothing reads: three more
 * pages of WAL per change of a name. Opening one rebuilds the table, in
 * one transaction; the format stays 1, since older builds read either. */
static const char dentries_rebuild_sql[] =
	"BEGIN IMMEDIATE;"
	"CREATE TABLE dentries_new" DENTRIES_COLUMNS
	"INSERT INTO dentries_new(parent, name, ino, cookie)"
	" SELECT parent, name, ino, cookie FROM dentries ORDER BY cookie;"
	"DROP TABLE dentries;"
	"ALTER TABLE dentries_new RENAME TO dentries;"
	"COMMIT;";

static const char schema_sql[] =
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
	"CREATE TABLE inodes(ino INTEGER PRIMARY KEY, mode INTEGER NOT NULL,"
	" uid INTEGER NOT NULL, gid INTEGER NOT NULL, nlink INTEGER NOT NULL,"
	" size INTEGER NOT NULL, atime_s INTEGER NOT NULL,"
	" atime_ns INTEGER NOT NULL, mtime_s INTEGER NOT NULL,"
	" mtime_ns INTEGER NOT NULL, ctime_s INTEGER NOT NULL,"
	" ctime_ns INTEGER NOT NULL, rdev INTEGER NOT NULL, target TEXT,"
	" etag TEXT, dirty INTEGER NOT NULL, change_seq INTEGER NOT NULL,"
	" generation INTEGER NOT NULL);"
	"CREATE TABLE dentries" DENTRIES_COLUMNS
	"CREATE TABLE xattrs(ino INTEGER NOT NULL, name TEXT NOT NULL,"
	" value BLOB NOT NULL, PRIMARY KEY(ino, name));"
	/* S3 deletions owed, written with the unlink that made them */
	"CREATE TABLE outbox(id INTEGER PRIMARY KEY AUTOINCREMENT,"
	" key TEXT NOT NULL);"
	"CREATE INDEX outbox_key ON outbox(key);";

struct meta {
	pthread_mutex_t lock; /* lock order root; guards everything below */
	pthread_cond_t cond;  /* wakes the committer: txn opened, or stop */
	pthread_t committer;  /* joined by meta_close() */
	int has_committer;
	int stop; /* meta_close() asks the committer and the syncer to exit */
	/* the syncer: fsyncs the WAL outside the lock for meta_sync_wait() */
	pthread_cond_t sync_cond; /* wakes the syncer: sync_want, or stop */
	pthread_cond_t synced;	  /* broadcast when a sync round ends */
	pthread_t syncer;	  /* joined by meta_close() */
	int has_syncer;
	int walfd; /* PATH-wal, our own descriptor; -1: none */
	/* the VFS db is opened through; owned, freed by db_close() */
	struct walbuf *walbuf;
	int syncing;	    /* a round's fsync is in flight */
	uint64_t sync_want; /* a waiter's ticket: durable_epoch must reach it */
	/* the last round that failed: covered tickets up to fail_upto, and
	 * fail_seq counts failed rounds */
	uint64_t fail_upto, fail_seq;
	int fail_rc;
	/* the checkpointer: copies the WAL into the database on a
	 * connection of its own (ckpt_db, which only it uses), outside
	 * the lock, each time commits add META_CKPT_FRAMES to the WAL */
	pthread_cond_t ckpt_cond; /* wakes it: ckpt_wanted, or stop */
	pthread_t ckpter;	  /* joined by meta_close() */
	int has_ckpter;
	int ckpt_wanted;
	int ckpt_mark; /* WAL frames when it was last woken */
	sqlite3 *ckpt_db;
	/* a commit past META_CKPT_INLINE_FRAMES waits, with the lock held,
	 * for the checkpoint in flight (which holds SQLite's checkpoint
	 * lock, so its own would be BUSY and the WAL would go on growing) */
	pthread_mutex_t ckpt_run_lock;	 /* taken after lock, never before */
	pthread_cond_t ckpt_idle;	 /* ckpt_running went to 0 */
	int ckpt_running;		 /* protected by ckpt_run_lock */
	uint64_t ckpts_bg, ckpts_inline; /* run so far: meta_checkpoints() */

	struct meta_config cfg; /* cfg.path points at path */
	char *path;		/* owned */
	uint64_t hash_seed;

	sqlite3 *db;		    /* owned */
	sqlite3_stmt *st[ST_COUNT]; /* owned; prepared once, reused */
	int txn_open;		    /* BEGIN done, COMMIT not yet */
	/* the committer waits for a transaction to open, not for a timer:
	 * only then does a lazy change need to wake it */
	int committer_idle;
	struct timespec txn_start; /* CLOCK_MONOTONIC, when BEGIN ran */
	int counters_dirty;	   /* *_stored to write */
	int unsynced;		   /* commits since the last fsync'ed one */
	/* a change is stamped with sync_epoch (struct inode's sync_all,
	 * sync_data); each fsync of the WAL starts a new epoch, and once it
	 * is done, changes stamped below durable_epoch are durable */
	uint64_t sync_epoch;
	uint64_t durable_epoch;
	int failed; /* 0, or -errno once a txn was lost */
	/* PATH-ballast (see "A full disk"): its descriptor (-1: none), the
	 * bytes it holds when HELD, whether they are GIVEN, and when it was
	 * last emptied or tried (CLOCK_MONOTONIC ms) */
	int ballast_fd;
	uint64_t ballast_size;
	int ballast_given;
	uint64_t ballast_at_ms;

	struct htab inodes;   /* struct inode, by ino */
	struct htab dnames;   /* struct dentry, by (parent, name) */
	struct htab dcookies; /* struct dentry, by cookie */
	uint64_t next_ino, next_cookie;
	/* what the meta table holds, or will at the next commit
	 * (counters_dirty): never below next_ino, next_cookie */
	uint64_t ino_stored, cookie_stored;
	uint64_t bytes;	  /* sum of regular files' sizes */
	uint64_t ninodes; /* inodes in the table, orphans included */
	unsigned long check_tick;
};

/* ---- small helpers ------------------------------------------------------ */

__attribute__((format(printf, 1, 2))) static void meta_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("tierfs meta: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

static void mutex_lock(pthread_mutex_t *mu)
{
	int rc = pthread_mutex_lock(mu);
	if (rc) {
		meta_log("pthread_mutex_lock: %s", strerror(rc));
		abort();
	}
}

static void mutex_unlock(pthread_mutex_t *mu)
{
	int rc = pthread_mutex_unlock(mu);
	if (rc) {
		meta_log("pthread_mutex_unlock: %s", strerror(rc));
		abort();
	}
}

static void lock(struct meta *m)
{
	mutex_lock(&m->lock);
}

static void unlock(struct meta *m)
{
	mutex_unlock(&m->lock);
}

static struct timespec now_realtime(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		ts = (struct timespec){0};
	return ts;
}

static struct timespec now_monotonic(void)
{
	struct timespec ts;
	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		ts = (struct timespec){0};
	return ts;
}

static int ts_before(struct timespec a, struct timespec b)
{
	return a.tv_sec < b.tv_sec ||
	       (a.tv_sec == b.tv_sec && a.tv_nsec < b.tv_nsec);
}

static int ts_valid(struct timespec t)
{
	return t.tv_nsec >= 0 && t.tv_nsec < 1000000000L;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static uint64_t name_hash(const struct meta *m, uint64_t parent,
			  const char *name, size_t len)
{
	uint64_t h = m->hash_seed ^ mix64(parent);
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)name[i];
		h *= 0x100000001b3ULL;
	}
	return mix64(h);
}

/* A name for a new entry: 1..255 bytes, no '/', not "." or "..". */
static int name_check(const char *name, size_t *len)
{
	if (!name)
		return -EINVAL;
	size_t n = strnlen(name, META_NAME_MAX + 1);
	if (n > META_NAME_MAX)
		return -ENAMETOOLONG;
	if (n == 0 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 ||
	    memchr(name, '/', n))
		return -EINVAL;
	*len = n;
	return 0;
}

/* ---- hash tables -------------------------------------------------------- */

static int htab_init(struct htab *t)
{
	t->b = calloc(META_HTAB_MIN, sizeof(*t->b));
	if (!t->b)
		return -ENOMEM;
	t->mask = META_HTAB_MIN - 1;
	t->n = 0;
	return 0;
}

static void htab_free(struct htab *t)
{
	free(t->b);
	t->b = NULL;
}

static void htab_grow(struct htab *t)
{
	size_t nb = (t->mask + 1) * 2;
	struct hnode **b = calloc(nb, sizeof(*b));
	if (!b)
		return; /* longer chains; still correct */
	for (size_t i = 0; i <= t->mask; i++) {
		struct hnode *h = t->b[i], *next;
		for (; h; h = next) {
			next = h->next;
			h->next = b[h->hash & (nb - 1)];
			b[h->hash & (nb - 1)] = h;
		}
	}
	free(t->b);
	t->b = b;
	t->mask = nb - 1;
}

/* Room for n nodes at once: a load of 100k inodes otherwise moves every
 * node it has at each of 7 doublings. */
static void htab_reserve(struct htab *t, uint64_t n)
{
	while (t->mask < n && t->mask < SIZE_MAX / 2) {
		size_t mask = t->mask;
		htab_grow(t);
		if (t->mask == mask)
			return; /* no memory: it grows as it fills */
	}
}

static void htab_add(struct htab *t, struct hnode *h, uint64_t hash)
{
	if (t->n > t->mask)
		htab_grow(t);
	h->hash = hash;
	h->next = t->b[hash & t->mask];
	t->b[hash & t->mask] = h;
	t->n++;
}

static void htab_del(struct htab *t, struct hnode *h)
{
	struct hnode **p = &t->b[h->hash & t->mask];
	while (*p != h) {
		assert(*p);
		p = &(*p)->next;
	}
	*p = h->next;
	t->n--;
}

/* Calls fn on every node; fn may free the node it gets. */
static void htab_each(struct htab *t, void (*fn)(struct hnode *, void *),
		      void *arg)
{
	if (!t->b)
		return;
	for (size_t i = 0; i <= t->mask; i++) {
		struct hnode *h = t->b[i], *next;
		for (; h; h = next) {
			next = h->next;
			fn(h, arg);
		}
	}
}

/* ---- the mirror --------------------------------------------------------- */

static struct inode *inode_find(const struct meta *m, uint64_t ino)
{
	uint64_t hash = mix64(ino);
	for (struct hnode *h = m->inodes.b[hash & m->inodes.mask]; h;
	     h = h->next) {
		struct inode *in = container_of(h, struct inode, h);
		if (h->hash == hash && in->a.ino == ino)
			return in;
	}
	return NULL;
}

static struct dentry *dentry_find(const struct meta *m, uint64_t parent,
				  const char *name, size_t len)
{
	uint64_t hash = name_hash(m, parent, name, len);
	for (struct hnode *h = m->dnames.b[hash & m->dnames.mask]; h;
	     h = h->next) {
		struct dentry *d = container_of(h, struct dentry, hname);
		if (h->hash == hash && d->dir->a.ino == parent &&
		    d->namelen == len && memcmp(d->name, name, len) == 0)
			return d;
	}
	return NULL;
}

static struct dentry *dentry_by_cookie(const struct meta *m, uint64_t cookie)
{
	uint64_t hash = mix64(cookie);
	for (struct hnode *h = m->dcookies.b[hash & m->dcookies.mask]; h;
	     h = h->next) {
		struct dentry *d = container_of(h, struct dentry, hcookie);
		if (h->hash == hash && d->cookie == cookie)
			return d;
	}
	return NULL;
}

static int is_dir(const struct inode *in)
{
	return S_ISDIR(in->a.mode);
}

/* Unlinked (the root has no name, but is no orphan): never uploaded. */
static int is_orphan(const struct inode *in)
{
	return in->a.nlink == 0 && in->a.ino != META_ROOT_INO;
}

static void xattrs_free(struct xattr *x)
{
	while (x) {
		struct xattr *next = x->next;
		free(x->name);
		free(x);
		x = next;
	}
}

static void inode_free(struct inode *in)
{
	if (!in)
		return;
	xattrs_free(in->xattrs);
	free(in->target);
	free(in->etag);
	free(in);
}

static void inode_attach(struct meta *m, struct inode *in)
{
	htab_add(&m->inodes, &in->h, mix64(in->a.ino));
	m->ninodes++;
	if (S_ISREG(in->a.mode))
		m->bytes += in->a.size;
}

static void inode_destroy(struct meta *m, struct inode *in)
{
	assert(!in->names && !in->first && in->a.ino != META_ROOT_INO);
	htab_del(&m->inodes, &in->h);
	m->ninodes--;
	if (S_ISREG(in->a.mode))
		m->bytes -= in->a.size;
	inode_free(in);
}

static struct dentry *dentry_alloc(const char *name, size_t len)
{
	struct dentry *d = calloc(1, sizeof(*d) + len + 1);
	if (!d)
		return NULL;
	memcpy(d->name, name, len);
	d->namelen = len;
	return d;
}

/* Keeps in->names in cookie order (a handful of hard links at most). */
static void names_add(struct inode *in, struct dentry *d)
{
	struct dentry **p = &in->names;
	while (*p && (*p)->cookie < d->cookie)
		p = &(*p)->nnext;
	d->nnext = *p;
	*p = d;
}

static void names_del(struct inode *in, struct dentry *d)
{
	struct dentry **p = &in->names;
	while (*p != d) {
		assert(*p);
		p = &(*p)->nnext;
	}
	*p = d->nnext;
	d->nnext = NULL;
}

/* Links d (dir, ino, cookie and name set) into every table. Cookies only
 * grow, so the new entry goes at the tail of its directory. */
static void dentry_attach(struct meta *m, struct dentry *d)
{
	struct inode *dir = d->dir;
	assert(!dir->last || dir->last->cookie < d->cookie);
	htab_add(&m->dnames, &d->hname,
		 name_hash(m, dir->a.ino, d->name, d->namelen));
	htab_add(&m->dcookies, &d->hcookie, mix64(d->cookie));
	d->prev = dir->last;
	d->next = NULL;
	if (dir->last)
		dir->last->next = d;
	else
		dir->first = d;
	dir->last = d;
	dir->nentries++;
	names_add(d->ino, d);
}

static void dentry_detach(struct meta *m, struct dentry *d)
{
	struct inode *dir = d->dir;
	htab_del(&m->dnames, &d->hname);
	htab_del(&m->dcookies, &d->hcookie);
	if (d->prev)
		d->prev->next = d->next;
	else
		dir->first = d->next;
	if (d->next)
		d->next->prev = d->prev;
	else
		dir->last = d->prev;
	dir->nentries--;
	names_del(d->ino, d);
}

/* A directory that can take new entries. */
static int dir_get(struct meta *m, uint64_t ino, struct inode **out)
{
	struct inode *dir = inode_find(m, ino);
	if (!dir)
		return -ENOENT;
	if (!is_dir(dir))
		return -ENOTDIR;
	if (dir->a.nlink == 0)
		return -ENOENT; /* removed while still referenced */
	*out = dir;
	return 0;
}

/* 1 when x is a or lies below a (walking x's first names up). */
static int dir_contains(const struct meta *m, const struct inode *a,
			const struct inode *x)
{
	for (uint64_t steps = 0; x; steps++) {
		if (x == a)
			return 1;
		if (x->a.ino == META_ROOT_INO || !x->names ||
		    steps > m->ninodes)
			return 0;
		x = x->names->dir;
	}
	return 0;
}

static void free_dentry_node(struct hnode *h, void *arg)
{
	(void)arg;
	free(container_of(h, struct dentry, hname));
}

static void free_inode_node(struct hnode *h, void *arg)
{
	(void)arg;
	inode_free(container_of(h, struct inode, h));
}

static void mirror_free(struct meta *m)
{
	htab_each(&m->dnames, free_dentry_node, NULL);
	htab_each(&m->inodes, free_inode_node, NULL);
	htab_free(&m->dnames);
	htab_free(&m->dcookies);
	htab_free(&m->inodes);
}

/* ---- invariant checker -------------------------------------------------- */

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		if (!(cond)) {                                                 \
			meta_log("invariant broken: " __VA_ARGS__);            \
			return -EIO;                                           \
		}                                                              \
	} while (0)

struct check_ctx {
	struct meta *m;
	uint64_t inodes, bytes, dentries;
	int full; /* also that every table finds what it holds */
	int rc;
};

static void check_reset(struct hnode *h, void *arg)
{
	struct check_ctx *c = arg;
	struct inode *in = container_of(h, struct inode, h);
	in->ck_names = in->ck_entries = in->ck_subdirs = 0;
	c->inodes++;
	if (S_ISREG(in->a.mode))
		c->bytes += in->a.size;
}

static int check_dentry(struct meta *m, struct dentry *d, int full)
{
	if (full) {
		CHECK(inode_find(m, d->ino->a.ino) == d->ino,
		      "dentry cookie %" PRIu64 " names a missing inode",
		      d->cookie);
		CHECK(inode_find(m, d->dir->a.ino) == d->dir && is_dir(d->dir),
		      "dentry cookie %" PRIu64 " has no parent directory",
		      d->cookie);
		CHECK(dentry_find(m, d->dir->a.ino, d->name, d->namelen) == d,
		      "dentry cookie %" PRIu64 " not found by name", d->cookie);
		CHECK(dentry_by_cookie(m, d->cookie) == d,
		      "dentry cookie %" PRIu64 " not found by cookie",
		      d->cookie);
	}
	CHECK(d->cookie < m->next_cookie,
	      "dentry cookie %" PRIu64 " >= next_cookie", d->cookie);
	d->ino->ck_names++;
	d->dir->ck_entries++;
	if (is_dir(d->ino))
		d->dir->ck_subdirs++;
	return 0;
}

static void check_dentry_node(struct hnode *h, void *arg)
{
	struct check_ctx *c = arg;
	c->dentries++;
	if (c->rc == 0)
		c->rc = check_dentry(
			c->m, container_of(h, struct dentry, hname), c->full);
}

static int check_inode(struct meta *m, struct inode *in)
{
	uint64_t ino = in->a.ino;
	size_t n = 0;
	for (struct dentry *d = in->names; d; d = d->nnext, n++) {
		CHECK(d->ino == in, "inode %" PRIu64 ": foreign name", ino);
		CHECK(!d->nnext || d->cookie < d->nnext->cookie,
		      "inode %" PRIu64 ": names out of order", ino);
	}
	CHECK(n == in->ck_names, "inode %" PRIu64 ": %zu names listed, %zu",
	      ino, n, in->ck_names);
	n = 0;
	for (struct dentry *d = in->first; d; d = d->next, n++) {
		CHECK(d->dir == in, "inode %" PRIu64 ": foreign entry", ino);
		CHECK(!d->next || (d->cookie < d->next->cookie &&
				   d->next->prev == d),
		      "inode %" PRIu64 ": entries out of order", ino);
	}
	CHECK(n == in->ck_entries && n == in->nentries,
	      "inode %" PRIu64 ": entry count %zu/%zu/%zu", ino, n,
	      in->ck_entries, in->nentries);
	CHECK(ino < m->next_ino, "inode %" PRIu64 " >= next_ino", ino);
	if (!is_dir(in)) {
		CHECK(in->nentries == 0, "inode %" PRIu64 ": file with entries",
		      ino);
		CHECK(in->a.nlink == in->ck_names,
		      "inode %" PRIu64 ": nlink %" PRIu32 ", %zu names", ino,
		      in->a.nlink, in->ck_names);
		return 0;
	}
	if (ino == META_ROOT_INO) {
		CHECK(in->ck_names == 0, "the root has a name");
	} else if (in->ck_names == 0) {
		CHECK(in->a.nlink == 0 && in->nentries == 0,
		      "directory %" PRIu64 ": nameless but nlink %" PRIu32, ino,
		      in->a.nlink);
		return 0;
	} else {
		CHECK(in->ck_names == 1, "directory %" PRIu64 " has %zu names",
		      ino, in->ck_names);
	}
	CHECK(in->a.nlink == 2 + in->ck_subdirs,
	      "directory %" PRIu64 ": nlink %" PRIu32 ", %zu subdirectories",
	      ino, in->a.nlink, in->ck_subdirs);
	const struct inode *x = in;
	for (uint64_t steps = 0; x->a.ino != META_ROOT_INO; steps++) {
		CHECK(steps <= m->ninodes && x->names,
		      "directory %" PRIu64 " does not reach the root", ino);
		x = x->names->dir;
	}
	return 0;
}

static void check_inode_node(struct hnode *h, void *arg)
{
	struct check_ctx *c = arg;
	if (c->rc == 0)
		c->rc = check_inode(c->m, container_of(h, struct inode, h));
}

/* full 0 checks the tree as stored (links, counts, order, reachability)
 * but not the lookups of a mirror just built from it: a load finds every
 * parent and name as it links them, and 4 lookups more per entry were half
 * the CPU of a 100k-file volume's cold mount. */
static int check_locked(struct meta *m, int full)
{
	struct check_ctx c = {.m = m, .full = full};
	struct inode *root = inode_find(m, META_ROOT_INO);
	CHECK(root && is_dir(root), "no root directory");
	htab_each(&m->inodes, check_reset, &c);
	CHECK(c.inodes == m->ninodes && c.inodes == m->inodes.n,
	      "inode count %" PRIu64 " != %" PRIu64, c.inodes, m->ninodes);
	CHECK(c.bytes == m->bytes, "bytes %" PRIu64 " != %" PRIu64, c.bytes,
	      m->bytes);
	htab_each(&m->dnames, check_dentry_node, &c);
	if (c.rc)
		return c.rc;
	CHECK(c.dentries == m->dcookies.n, "dentry tables disagree");
	htab_each(&m->inodes, check_inode_node, &c);
	return c.rc;
}

static void debug_check(struct meta *m)
{
#ifndef NDEBUG
	if (m->ninodes <= META_CHECK_FULL_MAX ||
	    ++m->check_tick % META_CHECK_FULL_MAX == 0) {
		int rc = check_locked(m, 1);
		assert(rc == 0);
		(void)rc;
	}
#else
	(void)m;
#endif
}

int meta_check(struct meta *m)
{
	lock(m);
	int rc = check_locked(m, 1);
	unlock(m);
	return rc;
}

/* ---- SQLite ------------------------------------------------------------- */

static int errno_of(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_NOTADB:
		return -EINVAL;
	default:
		return -EIO;
	}
}

/* Runs a statement to completion (binds already made) and resets it. */
static int db_run(struct meta *m, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		meta_log("%s: '%s': %s", m->path, sqlite3_sql(st),
			 sqlite3_errmsg(m->db));
	int rrc = sqlite3_reset(st);
	if (rc == SQLITE_DONE || rc == SQLITE_ROW)
		return errno_of(rrc);
	return errno_of(rc);
}

static int db_bind_failed(struct meta *m, sqlite3_stmt *st)
{
	meta_log("%s: binding '%s': %s", m->path, sqlite3_sql(st),
		 sqlite3_errmsg(m->db));
	if (sqlite3_reset(st) != SQLITE_OK)
		meta_log("%s: reset after a failed bind", m->path);
	return -EIO;
}

static int db_exec(struct meta *m, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(m->db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK) {
		meta_log("%s: '%.60s': %s", m->path, sql,
			 err ? err : sqlite3_errstr(rc));
		sqlite3_free(err);
		return errno_of(rc);
	}
	return 0;
}

/* One integer from a one-row query; *found = 0 when it has no row. */
static int db_query_int(struct meta *m, const char *sql, int64_t *out,
			int *found)
{
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(m->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK) {
		meta_log("%s: '%s': %s", m->path, sql, sqlite3_errmsg(m->db));
		sqlite3_finalize(st);
		return errno_of(rc);
	}
	rc = sqlite3_step(st);
	*found = rc == SQLITE_ROW;
	if (rc == SQLITE_ROW)
		*out = sqlite3_column_int64(st, 0);
	else if (rc != SQLITE_DONE)
		meta_log("%s: '%s': %s", m->path, sql, sqlite3_errmsg(m->db));
	sqlite3_finalize(st);
	return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : errno_of(rc);
}

static int bind_text(sqlite3_stmt *st, int i, const char *s, size_t len)
{
	return sqlite3_bind_text(st, i, s, (int)len, SQLITE_STATIC);
}

static int bind_u64(sqlite3_stmt *st, int i, uint64_t v)
{
	return sqlite3_bind_int64(st, i, (sqlite3_int64)v);
}

static int db_inode_put(struct meta *m, const struct inode *in)
{
	sqlite3_stmt *st = m->st[ST_INODE_PUT];
	const struct meta_attr *a = &in->a;
	int b = bind_u64(st, 1, a->ino);
	b |= bind_u64(st, 2, a->mode);
	b |= bind_u64(st, 3, a->uid);
	b |= bind_u64(st, 4, a->gid);
	b |= bind_u64(st, 5, a->nlink);
	b |= bind_u64(st, 6, a->size);
	b |= sqlite3_bind_int64(st, 7, a->atime.tv_sec);
	b |= sqlite3_bind_int64(st, 8, a->atime.tv_nsec);
	b |= sqlite3_bind_int64(st, 9, a->mtime.tv_sec);
	b |= sqlite3_bind_int64(st, 10, a->mtime.tv_nsec);
	b |= sqlite3_bind_int64(st, 11, a->ctime.tv_sec);
	b |= sqlite3_bind_int64(st, 12, a->ctime.tv_nsec);
	b |= bind_u64(st, 13, a->rdev);
	if (in->target)
		b |= bind_text(st, 14, in->target, strlen(in->target));
	else
		b |= sqlite3_bind_null(st, 14);
	if (in->etag)
		b |= bind_text(st, 15, in->etag, strlen(in->etag));
	else
		b |= sqlite3_bind_null(st, 15);
	b |= bind_u64(st, 16, a->dirty);
	b |= bind_u64(st, 17, in->seq);
	b |= bind_u64(st, 18, a->generation);
	if (b != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

static int db_by_ino(struct meta *m, enum stmt which, uint64_t ino)
{
	sqlite3_stmt *st = m->st[which];
	if (bind_u64(st, 1, ino) != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

static int db_inode_del(struct meta *m, uint64_t ino)
{
	int rc = db_by_ino(m, ST_XATTR_DEL_INO, ino);
	return rc ? rc : db_by_ino(m, ST_INODE_DEL, ino);
}

/* ST_DENTRY_INS (ino, cookie), ST_DENTRY_DEL, ST_DENTRY_SET_INO (ino). */
static int db_dentry(struct meta *m, enum stmt which, uint64_t parent,
		     const char *name, size_t len, uint64_t ino,
		     uint64_t cookie)
{
	sqlite3_stmt *st = m->st[which];
	int b = bind_u64(st, 1, parent);
	b |= bind_text(st, 2, name, len);
	if (which != ST_DENTRY_DEL)
		b |= bind_u64(st, 3, ino);
	if (which == ST_DENTRY_INS)
		b |= bind_u64(st, 4, cookie);
	if (b != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

/* ST_XATTR_INS, ST_XATTR_UPD (value), ST_XATTR_DEL. */
static int db_xattr(struct meta *m, enum stmt which, uint64_t ino,
		    const char *name, const void *value, size_t size)
{
	sqlite3_stmt *st = m->st[which];
	int b = bind_u64(st, 1, ino);
	b |= bind_text(st, 2, name, strlen(name));
	if (which != ST_XATTR_DEL)
		b |= sqlite3_bind_blob(st, 3, size ? value : "", (int)size,
				       SQLITE_STATIC);
	if (b != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

static int db_kv_put(struct meta *m, const char *key, uint64_t value)
{
	sqlite3_stmt *st = m->st[ST_KV_PUT];
	int b = bind_text(st, 1, key, strlen(key));
	b |= bind_u64(st, 2, value);
	if (b != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

/* ---- the ballast (see "A full disk") ---------------------------------- */

/* Allocates the ballast's bytes; 0, or -errno with the file left empty. */
static int ballast_fill(struct meta *m)
{
	int rc = posix_fallocate(m->ballast_fd, 0, (off_t)m->ballast_size);
	if (rc && ftruncate(m->ballast_fd, 0) != 0)
		meta_log("%s-ballast: %s", m->path, strerror(errno));
	return -rc;
}

/* Opens PATH-ballast, HELD, or GIVEN when the disk has no room for it. */
static void ballast_open(struct meta *m)
{
	char path[PATH_MAX];
	struct statvfs sv;
	struct stat st;
	if (snprintf(path, sizeof(path), "%s-ballast", m->path) >=
	    (int)sizeof(path))
		return;
	int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || fstatvfs(fd, &sv) != 0 || fstat(fd, &st) != 0) {
		meta_log("%s: no ballast: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	uint64_t disk = (uint64_t)sv.f_blocks * sv.f_frsize;
	m->ballast_fd = fd;
	m->ballast_size =
		(disk / 16 < META_BALLAST ? disk / 16 : META_BALLAST) &
		~(uint64_t)4095;
	m->ballast_at_ms = clock_now_ms();
	m->ballast_given = 0;
	if ((uint64_t)st.st_blocks * 512 >= m->ballast_size)
		return; /* held since an earlier open */
	int rc = ballast_fill(m);
	if (rc) {
		m->ballast_given = 1;
		meta_log("%s: not held yet: %s", path, strerror(-rc));
	}
}

/* walbuf's hook for a WAL write that found the disk full (under the lock,
 * on the store's connection): the ballast's bytes are given up for it. */
static int ballast_give(void *ctx)
{
	struct meta *m = ctx;
	if (m->ballast_fd < 0 || m->ballast_given ||
	    ftruncate(m->ballast_fd, 0) != 0)
		return 0;
	m->ballast_given = 1;
	m->ballast_at_ms = clock_now_ms();
	meta_log("%s: no room left on the cache disk: the %" PRIu64
		 " KiB of ballast kept for the store are given up to it",
		 m->path, m->ballast_size >> 10);
	return 1;
}

/* After a commit: a ballast given up is taken back once the disk has room
 * for it twice over (tried at most once every META_BALLAST_RETRY_MS). */
static void ballast_retake(struct meta *m)
{
	struct statvfs sv;
	uint64_t now = clock_now_ms();
	if (!m->ballast_given || m->ballast_fd < 0 ||
	    now - m->ballast_at_ms < META_BALLAST_RETRY_MS)
		return;
	m->ballast_at_ms = now;
	if (fstatvfs(m->ballast_fd, &sv) != 0 ||
	    (uint64_t)sv.f_bavail * sv.f_frsize < 2 * m->ballast_size ||
	    ballast_fill(m) != 0)
		return;
	m->ballast_given = 0;
	meta_log("%s: the store's ballast is held again", m->path);
}

/* ---- transactions ------------------------------------------------------- */

/* After a failure: if SQLite rolled the whole transaction back, the mirror
 * holds changes the file lost, so the store stops taking changes. */
static void txn_check_lost(struct meta *m)
{
	if (m->txn_open && sqlite3_get_autocommit(m->db)) {
		meta_log("%s: transaction rolled back by SQLite; "
			 "uncommitted changes lost, store is now read-only",
			 m->path);
		m->txn_open = 0;
		m->failed = -EIO;
	}
}

/* Tells the committer a transaction waits for its timer. */
static void wake_committer(struct meta *m)
{
	if (!m->has_committer)
		return;
	int rc = pthread_cond_signal(&m->cond);
	if (rc)
		meta_log("pthread_cond_signal: %s", strerror(rc));
}

static int txn_begin(struct meta *m)
{
	if (m->txn_open)
		return 0;
	int rc = db_run(m, m->st[ST_BEGIN]);
	if (rc)
		return rc;
	m->txn_open = 1;
	m->txn_start = now_monotonic();
	/* with commit_interval_ms 0 the change commits at once: only a
	 * lazy one left open wakes the committer (op_done_lazy()) */
	if (m->cfg.commit_interval_ms)
		wake_committer(m);
	return 0;
}

static int txn_write_counters(struct meta *m)
{
	int rc = db_kv_put(m, "next_ino", m->ino_stored);
	return rc ? rc : db_kv_put(m, "next_cookie", m->cookie_stored);
}

/* After a change that took the next cookie (and inode number: ino), in
 * the transaction that commits it: reserves the next chunk once the
 * stored counters no longer cover what was handed out. */
static void counters_take(struct meta *m, int ino)
{
	m->next_ino += ino != 0;
	m->next_cookie++;
	if (m->next_ino <= m->ino_stored && m->next_cookie <= m->cookie_stored)
		return;
	m->ino_stored = m->next_ino + META_COUNTER_CHUNK;
	m->cookie_stored = m->next_cookie + META_COUNTER_CHUNK;
	m->counters_dirty = 1;
}

/* fsyncs the WAL, which holds every commit made so far (each one's frames
 * were written by its COMMIT; synchronous=NORMAL only leaves out the
 * fsync). SQLite's own xSync of the file does it, so the directory is
 * fsync'ed too the first time, as a synchronous=FULL commit would. */
static int wal_sync(struct meta *m)
{
	sqlite3_file *wal = NULL;
	int rc = sqlite3_file_control(m->db, "main",
				      SQLITE_FCNTL_JOURNAL_POINTER, &wal);
	if (rc != SQLITE_OK || !wal || !wal->pMethods) {
		meta_log("%s: no write-ahead log to sync", m->path);
		return -EIO;
	}
	rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
	if (rc != SQLITE_OK) {
		meta_log("%s: fsync of the write-ahead log: %s", m->path,
			 sqlite3_errstr(rc));
		return -EIO;
	}
	return 0;
}

/* Changes stamped below epoch are durable now. */
static void durable_reached(struct meta *m, uint64_t epoch)
{
	if (epoch > m->durable_epoch)
		m->durable_epoch = epoch;
	int rc = pthread_cond_broadcast(&m->synced);
	if (rc)
		meta_log("pthread_cond_broadcast: %s", strerror(rc));
}

/* Commits the open transaction (synchronous=NORMAL: no fsync). durable:
 * then, if any commit is not yet fsync'ed, fsyncs the WAL, and a new
 * sync epoch begins. A failed COMMIT that leaves the transaction open
 * (SQLITE_BUSY) is retried by the next commit. */
static int txn_commit(struct meta *m, int durable)
{
	int rc = 0;
	if (m->failed)
		return m->failed;
	if (m->txn_open) {
		if (m->counters_dirty)
			rc = txn_write_counters(m);
		if (!rc)
			rc = db_run(m, m->st[ST_COMMIT]);
		if (rc) {
			txn_check_lost(m);
			return m->failed ? m->failed : rc;
		}
		m->txn_open = 0;
		m->counters_dirty = 0;
		m->unsynced = 1;
		ballast_retake(m);
	}
	if (!durable || !m->unsynced)
		return 0;
	uint64_t upto = m->sync_epoch;
	rc = wal_sync(m);
	if (!rc) {
		m->unsynced = 0;
		m->sync_epoch++;
		durable_reached(m, upto + 1);
	}
	return rc;
}

/* The undo log of one change: the inodes it touched, as they were. */
struct op {
	struct timespec now;
	int n;
	struct {
		struct inode *in;
		struct meta_attr a;
		uint64_t seq;
		int gone; /* deleted by this change */
	} r[META_OP_MAX];
};

static int op_begin(struct meta *m, struct op *op)
{
	op->n = 0;
	op->now = now_realtime();
	if (m->failed)
		return m->failed;
	int rc = txn_begin(m);
	return rc ? rc : db_run(m, m->st[ST_SAVEPOINT]);
}

/* Records in's state and bumps its change counter (once per change). */
static int op_touch(struct op *op, struct inode *in)
{
	for (int i = 0; i < op->n; i++)
		if (op->r[i].in == in)
			return i;
	assert(op->n < META_OP_MAX);
	int i = op->n++;
	op->r[i].in = in;
	op->r[i].a = in->a;
	op->r[i].seq = in->seq;
	op->r[i].gone = 0;
	in->seq++;
	return i;
}

/* Writes every touched inode's row (or deletes it). */
static int op_write(struct meta *m, struct op *op)
{
	for (int i = 0; i < op->n; i++) {
		int rc = op->r[i].gone ? db_inode_del(m, op->r[i].in->a.ino)
				       : db_inode_put(m, op->r[i].in);
		if (rc)
			return rc;
	}
	return 0;
}

/* Ends the savepoint: keeps the rows on rc == 0, else rolls them back and
 * restores the touched inodes. Returns the outcome. */
static int op_end(struct meta *m, struct op *op, int rc)
{
	if (rc == 0) {
		rc = db_run(m, m->st[ST_RELEASE]);
		if (rc == 0)
			return 0;
	}
	if (db_run(m, m->st[ST_ROLLBACK_TO]) != 0 ||
	    db_run(m, m->st[ST_RELEASE]) != 0)
		meta_log("%s: could not roll back a failed change", m->path);
	txn_check_lost(m);
	for (int i = op->n - 1; i >= 0; i--) {
		op->r[i].in->a = op->r[i].a;
		op->r[i].in->seq = op->r[i].seq;
	}
	return rc;
}

/* Changes made by this thread inside meta_batch_begin()/end(): they are
 * committed together by the end, not one by one; batch_eager: one of them
 * is not lazy (see op_done_lazy()). */
static __thread int batch_depth, batch_eager;

/* With commit_interval_ms 0, what ends a change or a batch of changes:
 * a commit now, or, when all of it is lazy and the committer runs, a
 * wake-up of the committer. Logs a failed commit; 0 or -errno. */
static int commit_or_wake(struct meta *m, int lazy)
{
	if (m->cfg.commit_interval_ms != 0)
		return 0;
	if (lazy && m->has_committer) {
		if (m->committer_idle)
			wake_committer(m);
		return 0;
	}
	int rc = txn_commit(m, 0);
	if (rc)
		meta_log("%s: commit: %s", m->path, strerror(-rc));
	return rc;
}

/* After a change is applied in memory. lazy: the change may wait for the
 * committer (lazy_commit_ms) when commits are otherwise immediate. */
static void op_done_lazy(struct meta *m, struct op *op, int lazy)
{
	for (int i = 0; i < op->n; i++) {
		struct inode *in = op->r[i].in;
		const struct meta_attr *was = &op->r[i].a;
		if (op->r[i].gone) {
			inode_destroy(m, in);
			continue;
		}
		in->sync_all = m->sync_epoch;
		/* growth is left to the cache file's own record (meta.h) */
		if (in->a.size < was->size || in->a.nlink != was->nlink ||
		    in->a.dirty != was->dirty)
			in->sync_data = m->sync_epoch;
	}
	if (!lazy && batch_depth > 0)
		batch_eager = 1;
	if (batch_depth == 0)
		commit_or_wake(m, lazy);
	debug_check(m);
}

static void op_done(struct meta *m, struct op *op)
{
	op_done_lazy(m, op, 0);
}

static void *committer_main(void *arg)
{
	struct meta *m = arg;
	lock(m);
	while (!m->stop) {
		if (!m->txn_open) {
			m->committer_idle = 1;
			int rc = pthread_cond_wait(&m->cond, &m->lock);
			m->committer_idle = 0;
			if (rc)
				meta_log("pthread_cond_wait: %s", strerror(rc));
			continue;
		}
		unsigned wait = m->cfg.commit_interval_ms
					? m->cfg.commit_interval_ms
					: m->cfg.lazy_commit_ms;
		struct timespec due = m->txn_start;
		due.tv_sec += wait / 1000;
		due.tv_nsec += (long)(wait % 1000) * 1000000L;
		if (due.tv_nsec >= 1000000000L) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000L;
		}
		if (ts_before(now_monotonic(), due)) {
			int rc = pthread_cond_timedwait(&m->cond, &m->lock,
							&due);
			if (rc && rc != ETIMEDOUT)
				meta_log("pthread_cond_timedwait: %s",
					 strerror(rc));
			continue;
		}
		if (txn_commit(m, 0) != 0 && m->txn_open)
			m->txn_start = now_monotonic(); /* retry later */
	}
	unlock(m);
	return NULL;
}

/* ---- durability: meta_sync() ------------------------------------------- */

/* fdatasync of our own descriptor of the WAL: -ESTALE when it no longer
 * names the WAL (SQLite deletes it only when the last connection closes,
 * and ours stays open; this is a check, not a path taken). Unlocked. */
static int walfd_sync(struct meta *m, int fd)
{
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || st.st_nlink == 0)
		return -ESTALE;
	if (fdatasync(fd) != 0) {
		int rc = -errno;
		meta_log("%s-wal: fdatasync: %s", m->path, strerror(-rc));
		return rc;
	}
	return 0;
}

/* One sync round: commits, then fsyncs the WAL with the lock released.
 * Called and returns with the lock held; 0 or -errno (also recorded for
 * the waiters the round covered). */
static int sync_round(struct meta *m)
{
	int rc = txn_commit(m, 0);
	uint64_t upto = m->sync_epoch;
	if (!rc && !m->unsynced) { /* every commit is fsync'ed already */
		durable_reached(m, upto);
		return 0;
	}
	if (!rc) {
		m->sync_epoch++;
		m->unsynced = 0;
		m->syncing = 1;
		int fd = m->walfd;
		unlock(m);
		rc = walfd_sync(m, fd);
		lock(m);
		m->syncing = 0;
		if (rc == -ESTALE) { /* through SQLite, under the lock */
			rc = wal_sync(m);
			if (rc == 0 && m->walfd >= 0) {
				close(m->walfd);
				m->walfd = -1;
			}
		}
	}
	if (rc) {
		m->unsynced = 1;
		m->fail_upto = upto + 1;
		m->fail_seq++;
		m->fail_rc = rc;
		durable_reached(m, 0); /* wakes the waiters */
	} else {
		durable_reached(m, upto + 1);
	}
	return rc;
}

int meta_sync_begin(struct meta *m, uint64_t ino, int datasync,
		    uint64_t *ticket)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	/* a gone inode: everything so far */
	uint64_t stamp = !in	    ? m->sync_epoch
			 : datasync ? in->sync_data
				    : in->sync_all;
	*ticket = stamp >= m->durable_epoch ? stamp + 1 : 0;
	int rc = m->failed;
	if (!rc && *ticket && *ticket > m->sync_want) {
		m->sync_want = *ticket;
		if (m->has_syncer && !m->syncing &&
		    (rc = pthread_cond_signal(&m->sync_cond)) != 0) {
			meta_log("pthread_cond_signal: %s", strerror(rc));
			rc = 0; /* the waiter syncs itself */
		}
	}
	unlock(m);
	return rc;
}

int meta_sync_wait(struct meta *m, uint64_t ticket)
{
	if (!ticket)
		return 0;
	lock(m);
	uint64_t seen = m->fail_seq;
	int rc = 0;
	while (m->durable_epoch < ticket && !rc) {
		if (m->failed)
			rc = m->failed;
		else if (m->fail_seq != seen && ticket <= m->fail_upto)
			rc = m->fail_rc;
		else if (!m->syncing)
			rc = sync_round(m);
		else if ((rc = pthread_cond_wait(&m->synced, &m->lock)) != 0)
			meta_log("pthread_cond_wait: %s", strerror(rc));
	}
	unlock(m);
	return rc;
}

int meta_sync(struct meta *m, uint64_t ino, int datasync)
{
	uint64_t ticket;
	int rc = meta_sync_begin(m, ino, datasync, &ticket);
	return rc ? rc : meta_sync_wait(m, ticket);
}

/* Starts sync rounds as soon as meta_sync_begin() asks, so that the WAL's
 * fsync overlaps the caller's own. */
static void *syncer_main(void *arg)
{
	struct meta *m = arg;
	lock(m);
	while (!m->stop) {
		if (m->durable_epoch < m->sync_want && !m->syncing) {
			if (sync_round(m) != 0)
				m->sync_want = 0; /* its waiters are told */
			continue;
		}
		int rc = pthread_cond_wait(&m->sync_cond, &m->lock);
		if (rc)
			meta_log("pthread_cond_wait: %s", strerror(rc));
	}
	unlock(m);
	return NULL;
}

/* Sets ckpt_running; 0 wakes the commits waiting for it. */
static void ckpter_set_running(struct meta *m, int running)
{
	mutex_lock(&m->ckpt_run_lock);
	m->ckpt_running = running;
	if (!running && pthread_cond_broadcast(&m->ckpt_idle) != 0)
		meta_log("pthread_cond_broadcast failed");
	mutex_unlock(&m->ckpt_run_lock);
}

/* With the lock held: returns once no background checkpoint runs, and
 * none starts before the lock is dropped (the checkpointer takes the
 * lock to start one). */
static void ckpter_wait_idle(struct meta *m)
{
	mutex_lock(&m->ckpt_run_lock);
	while (m->ckpt_running) {
		int rc = pthread_cond_wait(&m->ckpt_idle, &m->ckpt_run_lock);
		if (rc)
			meta_log("pthread_cond_wait: %s", strerror(rc));
	}
	mutex_unlock(&m->ckpt_run_lock);
}

/* The WAL hook (on the main connection, so with the lock held): after a
 * commit that leaves frames in the WAL. Replaces SQLite's automatic
 * checkpoint. */
static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int frames)
{
	struct meta *m = arg;
	if (frames < m->ckpt_mark) /* the WAL started over */
		m->ckpt_mark = 0;
	if (frames < m->ckpt_mark + META_CKPT_FRAMES)
		return SQLITE_OK;
	if (m->has_ckpter && frames < META_CKPT_INLINE_FRAMES) {
		/* every 1,000 new frames, as SQLite would (each checkpoint
		 * fsyncs twice) */
		m->ckpt_mark = frames;
		m->ckpt_wanted = 1;
		if (pthread_cond_signal(&m->ckpt_cond) != 0)
			meta_log("pthread_cond_signal failed");
		return SQLITE_OK;
	}
	m->ckpt_mark = 0;
	if (m->has_ckpter)
		ckpter_wait_idle(m);
	int rc = sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE,
					   NULL, NULL);
	if (rc == SQLITE_OK)
		m->ckpts_inline++;
	else if (rc != SQLITE_BUSY)
		meta_log("%s: checkpoint: %s", m->path, sqlite3_errstr(rc));
	return SQLITE_OK;
}

static void *ckpter_main(void *arg)
{
	struct meta *m = arg;
	lock(m);
	while (!m->stop) {
		if (!m->ckpt_wanted) {
			int rc = pthread_cond_wait(&m->ckpt_cond, &m->lock);
			if (rc)
				meta_log("pthread_cond_wait: %s", strerror(rc));
			continue;
		}
		m->ckpt_wanted = 0;
		ckpter_set_running(m, 1);
		unlock(m);
		int rc = sqlite3_wal_checkpoint_v2(m->ckpt_db, NULL,
						   SQLITE_CHECKPOINT_PASSIVE,
						   NULL, NULL);
		if (rc != SQLITE_OK && rc != SQLITE_BUSY)
			meta_log("%s: checkpoint: %s", m->path,
				 sqlite3_errmsg(m->ckpt_db));
		ckpter_set_running(m, 0);
		lock(m);
		if (rc == SQLITE_OK)
			m->ckpts_bg++;
	}
	unlock(m);
	return NULL;
}

/* Starts the checkpointer and hands it the WAL hook; without it (no
 * connection or no thread) SQLite's automatic checkpoint stays. */
static void start_ckpter(struct meta *m)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(m->path, &db,
				 SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
				 m->cfg.vfs);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "PRAGMA synchronous=NORMAL", NULL, NULL,
				  NULL);
	if (rc != SQLITE_OK) {
		meta_log("%s: no checkpointer (%s): commits checkpoint",
			 m->path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		return;
	}
	m->ckpt_db = db;
	rc = pthread_create(&m->ckpter, NULL, ckpter_main, m);
	if (rc != 0) {
		meta_log("%s: no checkpointer (%s): commits checkpoint",
			 m->path, strerror(rc));
		sqlite3_close(db);
		m->ckpt_db = NULL;
		return;
	}
	lock(m);
	m->has_ckpter = 1;
	sqlite3_wal_hook(m->db, on_wal_commit, m);
	unlock(m);
}

void meta_checkpoints(struct meta *m, uint64_t *background,
		      uint64_t *in_commits)
{
	lock(m);
	*background = m->ckpts_bg;
	*in_commits = m->ckpts_inline;
	unlock(m);
}

/* ---- open / close ------------------------------------------------------- */

void meta_config_init(struct meta_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->commit_interval_ms = META_DEFAULT_COMMIT_INTERVAL_MS;
	cfg->root_mode = S_IFDIR | 0755;
}

static void db_close(struct meta *m)
{
	for (int i = 0; i < ST_COUNT; i++) {
		sqlite3_finalize(m->st[i]);
		m->st[i] = NULL;
	}
	int rc = sqlite3_close(m->db);
	if (rc != SQLITE_OK)
		meta_log("%s: close: %s", m->path, sqlite3_errstr(rc));
	m->db = NULL;
	walbuf_free(m->walbuf);
	m->walbuf = NULL;
	if (m->ballast_fd >= 0)
		close(m->ballast_fd); /* the file stays, for the next open */
	m->ballast_fd = -1;
}

/* A new file: the schema, the counters and the root, in one transaction. */
static int db_create(struct meta *m)
{
	char sql[256];
	int rc = db_exec(m, "BEGIN IMMEDIATE");
	if (rc)
		return rc;
	rc = db_exec(m, schema_sql);
	snprintf(sql, sizeof(sql),
		 "PRAGMA application_id=%d;"
		 "INSERT INTO meta VALUES('format_version', %d);"
		 "INSERT INTO meta VALUES('next_ino', %d);"
		 "INSERT INTO meta VALUES('next_cookie', 1);",
		 META_APP_ID, META_FORMAT_VERSION, META_ROOT_INO + 1);
	if (!rc)
		rc = db_exec(m, sql);
	for (int i = 0; !rc && i < ST_COUNT; i++)
		if (sqlite3_prepare_v2(m->db, stmt_sql[i], -1, &m->st[i],
				       NULL) != SQLITE_OK) {
			meta_log("%s: preparing '%s': %s", m->path, stmt_sql[i],
				 sqlite3_errmsg(m->db));
			rc = -EIO;
		}
	if (!rc) {
		struct inode root = {0};
		struct timespec now = now_realtime();
		root.a.ino = META_ROOT_INO;
		root.a.mode = S_IFDIR | (m->cfg.root_mode & 07777);
		root.a.uid = m->cfg.root_uid;
		root.a.gid = m->cfg.root_gid;
		root.a.nlink = 2;
		root.a.atime = root.a.mtime = root.a.ctime = now;
		/* the root is the prefix itself: no object to write */
		root.seq = 1;
		rc = db_inode_put(m, &root);
	}
	if (!rc)
		rc = db_exec(m, "COMMIT");
	if (rc && db_exec(m, "ROLLBACK") != 0)
		meta_log("%s: rollback of the new schema failed", m->path);
	return rc;
}

static int db_open(struct meta *m)
{
	int64_t v = 0;
	int found = 0;
	/* the writer's WAL commits go out in one write each (walbuf.h);
	 * without it, as SQLite writes them */
	int rc = walbuf_new(m->cfg.vfs, &m->walbuf);
	if (rc)
		meta_log("%s: WAL writes not gathered, no ballast: %s", m->path,
			 strerror(-rc));
	if (m->walbuf) /* the ballast is opened once the store is known */
		walbuf_on_full(m->walbuf, ballast_give, m);
	rc = sqlite3_open_v2(m->path, &m->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				     SQLITE_OPEN_NOMUTEX,
			     m->walbuf ? walbuf_name(m->walbuf) : m->cfg.vfs);
	if (rc != SQLITE_OK) {
		meta_log("%s: open: %s", m->path,
			 m->db ? sqlite3_errmsg(m->db) : sqlite3_errstr(rc));
		rc = errno_of(rc);
		goto fail;
	}
	if (sqlite3_busy_timeout(m->db, META_BUSY_TIMEOUT_MS) != SQLITE_OK ||
	    sqlite3_extended_result_codes(m->db, 0) != SQLITE_OK) {
		rc = -EIO;
		goto fail;
	}
	rc = db_query_int(m, "PRAGMA application_id", &v, &found);
	if (rc) {
		meta_log("%s: not a usable SQLite database", m->path);
		goto fail;
	}
	int64_t app_id = v, tables = 0;
	rc = db_query_int(m, "SELECT count(*) FROM sqlite_master", &tables,
			  &found);
	if (rc)
		goto fail;
	if (app_id == 0 && tables == 0) {
		/* WAL first: it cannot be switched inside a transaction */
		rc = db_exec(m, "PRAGMA journal_mode=WAL");
		if (!rc)
			rc = db_exec(m, "PRAGMA synchronous=NORMAL;"
					"PRAGMA foreign_keys=OFF");
		if (!rc)
			rc = db_create(m);
		if (rc)
			goto fail;
		return 0;
	}
	if (app_id != META_APP_ID) {
		meta_log("%s: not a tierfs metadata store (application_id "
			 "%#" PRIx64 ", %" PRId64 " tables)",
			 m->path, (uint64_t)app_id, tables);
		rc = -EINVAL;
		goto fail;
	}
	rc = db_query_int(m,
			  "SELECT value FROM meta WHERE key='format_version'",
			  &v, &found);
	if (rc || !found || v != META_FORMAT_VERSION) {
		meta_log("%s: format version %" PRId64 ", this build reads %d",
			 m->path, found ? v : -1, META_FORMAT_VERSION);
		rc = -EINVAL;
		goto fail;
	}
	rc = db_exec(m, "PRAGMA journal_mode=WAL;PRAGMA synchronous=NORMAL;"
			"PRAGMA foreign_keys=OFF");
	int64_t keyed = 0;
	if (!rc)
		rc = db_query_int(
			m,
			"SELECT pk FROM pragma_table_info('dentries') "
			"WHERE name = 'cookie'",
			&keyed, &found);
	if (!rc && !keyed) {
		/* every statement works on either shape: a rebuild that
		 * fails (a full disk) leaves the store as it was, usable */
		meta_log("%s: rebuilding the table of names (once)", m->path);
		if (db_exec(m, dentries_rebuild_sql) != 0) {
			if (sqlite3_get_autocommit(m->db) == 0)
				rc = db_exec(m, "ROLLBACK");
			meta_log(
				"%s: kept the earlier table of names; the next "
				"open tries again",
				m->path);
		}
	}
	if (rc)
		goto fail;
	for (int i = 0; i < ST_COUNT; i++)
		if (sqlite3_prepare_v2(m->db, stmt_sql[i], -1, &m->st[i],
				       NULL) != SQLITE_OK) {
			meta_log("%s: preparing '%s': %s", m->path, stmt_sql[i],
				 sqlite3_errmsg(m->db));
			rc = -EIO;
			goto fail;
		}
	return 0;
fail:
	db_close(m);
	return rc < 0 ? rc : -EIO;
}

/* The inodes in the order loaded (by number), for load_dentries(): entries
 * made one after another name inodes made one after another, so the one
 * after the last found is asked before the table, whose lookups missed
 * the CPU's caches twice per entry. */
struct load_order {
	struct inode **v;
	size_t n, cap, next;
};

static struct inode *loaded_inode(struct meta *m, struct load_order *o,
				  uint64_t ino)
{
	struct inode *in = o->next < o->n ? o->v[o->next] : NULL;
	if (!in || in->a.ino != ino)
		in = inode_find(m, ino);
	if (in)
		o->next = in->ck_names + 1;
	return in;
}

/* The rows come in ino order (the query's ORDER BY is the table's own), so
 * a number not above the last one is a duplicate: no lookup finds it.
 * Orphans are counted into *orphans and left out, unless the kernel may
 * still hold them (adopt_kernel_refs). */
static int load_inodes(struct meta *m, sqlite3_stmt *st, struct load_order *o,
		       unsigned *orphans)
{
	int rc;
	uint64_t last = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (o->n == o->cap) {
			size_t cap = o->cap ? o->cap * 2 : 1024;
			struct inode **v = realloc(o->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			o->v = v;
			o->cap = cap;
		}
		struct inode *in = calloc(1, sizeof(*in));
		if (!in)
			return -ENOMEM;
		struct meta_attr *a = &in->a;
		a->ino = (uint64_t)sqlite3_column_int64(st, 0);
		a->mode = (uint32_t)sqlite3_column_int64(st, 1);
		a->uid = (uint32_t)sqlite3_column_int64(st, 2);
		a->gid = (uint32_t)sqlite3_column_int64(st, 3);
		a->nlink = (uint32_t)sqlite3_column_int64(st, 4);
		a->size = (uint64_t)sqlite3_column_int64(st, 5);
		a->atime.tv_sec = sqlite3_column_int64(st, 6);
		a->atime.tv_nsec = sqlite3_column_int64(st, 7);
		a->mtime.tv_sec = sqlite3_column_int64(st, 8);
		a->mtime.tv_nsec = sqlite3_column_int64(st, 9);
		a->ctime.tv_sec = sqlite3_column_int64(st, 10);
		a->ctime.tv_nsec = sqlite3_column_int64(st, 11);
		a->rdev = (uint32_t)sqlite3_column_int64(st, 12);
		a->dirty = (uint32_t)sqlite3_column_int64(st, 15);
		in->seq = (uint64_t)sqlite3_column_int64(st, 16);
		a->generation = (uint64_t)sqlite3_column_int64(st, 17);
		for (int col = 13; col <= 14; col++) {
			const unsigned char *s = sqlite3_column_text(st, col);
			if (!s)
				continue;
			char *copy = strdup((const char *)s);
			if (!copy) {
				inode_free(in);
				return -ENOMEM;
			}
			*(col == 13 ? &in->target : &in->etag) = copy;
		}
		if (a->ino <= last) {
			meta_log("%s: bad inode number %" PRIu64, m->path,
				 a->ino);
			inode_free(in);
			return -EIO;
		}
		last = a->ino;
		if (a->ino >= m->next_ino)
			m->next_ino = a->ino + 1;
		if (is_orphan(in) && !m->cfg.adopt_kernel_refs) {
			(*orphans)++;
			inode_free(in);
			continue;
		}
		in->ck_names = o->n;
		o->v[o->n++] = in;
		inode_attach(m, in);
	}
	return rc == SQLITE_DONE ? 0 : errno_of(rc);
}

/* The entries are read on a second core while the inodes load (a
 * quarter of the load of 100k files): each row made into its dentry, with
 * the numbers it names kept beside it until link_dentries() finds them. */
struct dentry_row {
	struct dentry *d;
	uint64_t parent, ino;
};

struct dentry_reader {
	const char *path, *vfs;
	struct dentry_row *v;
	size_t n, cap;
	int rc;
};

static void bad_dentry(const char *path, uint64_t parent, uint64_t cookie,
		       uint64_t ino)
{
	meta_log("%s: bad dentry (parent %" PRIu64 ", cookie %" PRIu64
		 ", inode %" PRIu64 ")",
		 path, parent, cookie, ino);
}

/* A connection of its own (WAL: it reads beside the load's writes, which
 * never touch the entries); r->rc says how it went. */
static void *read_dentries(void *arg)
{
	struct dentry_reader *r = arg;
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int rc = sqlite3_open_v2(r->path, &db,
				 SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
				 r->vfs);
	if (rc == SQLITE_OK)
		rc = sqlite3_busy_timeout(db, META_BUSY_TIMEOUT_MS);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(db,
					"SELECT parent, name, ino, cookie "
					"FROM dentries ORDER BY cookie",
					-1, &st, NULL);
	if (rc != SQLITE_OK) {
		meta_log("%s: reading the entries: %s", r->path,
			 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		r->rc = rc == SQLITE_OK ? -EIO : errno_of(rc);
		goto out;
	}
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t parent = (uint64_t)sqlite3_column_int64(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		size_t len = (size_t)sqlite3_column_bytes(st, 1);
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 2);
		uint64_t cookie = (uint64_t)sqlite3_column_int64(st, 3);
		size_t chk = 0;
		if (!name || name_check(name, &chk) != 0 || chk != len) {
			bad_dentry(r->path, parent, cookie, ino);
			r->rc = -EIO;
			goto out;
		}
		if (r->n == r->cap) {
			size_t cap = r->cap ? r->cap * 2 : 1024;
			struct dentry_row *v = realloc(r->v, cap * sizeof(*v));
			if (!v) {
				r->rc = -ENOMEM;
				goto out;
			}
			r->v = v;
			r->cap = cap;
		}
		struct dentry *d = dentry_alloc(name, len);
		if (!d) {
			r->rc = -ENOMEM;
			goto out;
		}
		d->cookie = cookie;
		r->v[r->n].d = d;
		r->v[r->n].parent = parent;
		r->v[r->n].ino = ino;
		r->n++;
	}
	r->rc = rc == SQLITE_DONE ? 0 : errno_of(rc);
out:
	sqlite3_finalize(st);
	sqlite3_close(db);
	return NULL;
}

/* Frees the rows, and the entries from the row from on (not linked). */
static void dentry_rows_free(struct dentry_reader *r, size_t from)
{
	for (size_t i = from; i < r->n; i++)
		free(r->v[i].d);
	free(r->v);
	r->v = NULL;
	r->n = r->cap = 0;
}

/* Links what read_dentries() made, frees what it could not link. Entries
 * made one after another mostly share their directory: the last one found
 * is asked first. */
static int link_dentries(struct meta *m, struct dentry_reader *r,
			 struct load_order *o)
{
	struct inode *dir = NULL;
	int rc = r->rc;
	size_t i = 0;
	for (; !rc && i < r->n; i++) {
		struct dentry *d = r->v[i].d;
		uint64_t parent = r->v[i].parent;
		if (!dir || dir->a.ino != parent)
			dir = inode_find(m, parent);
		struct inode *in = loaded_inode(m, o, r->v[i].ino);
		if (!dir || !is_dir(dir) || !in ||
		    dentry_find(m, parent, d->name, d->namelen) ||
		    (dir->last && dir->last->cookie >= d->cookie)) {
			bad_dentry(m->path, parent, d->cookie, r->v[i].ino);
			rc = -EIO;
			break;
		}
		d->dir = dir;
		d->ino = in;
		dentry_attach(m, d);
		if (d->cookie >= m->next_cookie)
			m->next_cookie = d->cookie + 1;
	}
	dentry_rows_free(r, i);
	return rc;
}

static int load_xattrs(struct meta *m, sqlite3_stmt *st)
{
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		uint64_t ino = (uint64_t)sqlite3_column_int64(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		const void *value = sqlite3_column_blob(st, 2);
		size_t size = (size_t)sqlite3_column_bytes(st, 2);
		struct inode *in = inode_find(m, ino);
		if (!in || !name) {
			meta_log("%s: xattr of a missing inode %" PRIu64,
				 m->path, ino);
			return -EIO;
		}
		struct xattr *x = malloc(sizeof(*x) + size);
		if (!x)
			return -ENOMEM;
		x->name = strdup(name);
		if (!x->name) {
			free(x);
			return -ENOMEM;
		}
		x->size = size;
		if (size)
			memcpy(x->value, value, size);
		struct xattr **p = &in->xattrs;
		while (*p)
			p = &(*p)->next;
		x->next = NULL;
		*p = x;
	}
	return rc == SQLITE_DONE ? 0 : errno_of(rc);
}

/* Deletes the orphans load_inodes() found: files unlinked while open,
 * whose last close the last run did not see. */
static int delete_orphans(struct meta *m, unsigned found)
{
	int before = sqlite3_total_changes(m->db);
	int rc = db_exec(m, "BEGIN IMMEDIATE;"
			    "DELETE FROM xattrs WHERE ino IN (SELECT ino FROM "
			    "inodes WHERE nlink = 0 AND ino <> 1);"
			    "DELETE FROM inodes WHERE nlink = 0 AND ino <> 1;"
			    "COMMIT");
	if (rc) {
		if (!sqlite3_get_autocommit(m->db) &&
		    db_exec(m, "ROLLBACK") != 0)
			meta_log("%s: rollback failed", m->path);
		return rc;
	}
	meta_log("%s: deleted %u orphaned inodes (%d rows)", m->path, found,
		 sqlite3_total_changes(m->db) - before);
	return 0;
}

/* One of load()'s queries; NULL (said in the log) when it does not
 * prepare. */
static sqlite3_stmt *load_query(struct meta *m, const char *sql)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(m->db, sql, -1, &st, NULL) != SQLITE_OK) {
		meta_log("%s: '%s': %s", m->path, sql, sqlite3_errmsg(m->db));
		sqlite3_finalize(st);
		return NULL;
	}
	return st;
}

/* Reads every table, deleting the orphans of the last run on the way. */
static int load(struct meta *m)
{
	int64_t v = 0;
	int found = 0, rc;
	unsigned orphans = 0;

	m->next_ino = META_ROOT_INO + 1;
	m->next_cookie = 1;
	rc = db_query_int(m, "SELECT value FROM meta WHERE key='next_ino'", &v,
			  &found);
	if (!rc && found && v > 0 && (uint64_t)v > m->next_ino)
		m->next_ino = (uint64_t)v;
	if (!rc)
		rc = db_query_int(
			m, "SELECT value FROM meta WHERE key='next_cookie'", &v,
			&found);
	if (!rc && found && v > 0 && (uint64_t)v > m->next_cookie)
		m->next_cookie = (uint64_t)v;
	if (!rc)
		rc = db_query_int(m, "SELECT count(*) FROM inodes", &v, &found);
	if (!rc && found && v > 0)
		htab_reserve(&m->inodes, (uint64_t)v);
	if (!rc)
		rc = db_query_int(m, "SELECT count(*) FROM dentries", &v,
				  &found);
	if (!rc && found && v > 0) {
		htab_reserve(&m->dnames, (uint64_t)v);
		htab_reserve(&m->dcookies, (uint64_t)v);
	}
	struct load_order order = {0};
	struct dentry_reader dr = {m->path, m->cfg.vfs, NULL, 0, 0, 0};
	pthread_t reader;
	int reading =
		!rc && pthread_create(&reader, NULL, read_dentries, &dr) == 0;
	sqlite3_stmt *st =
		rc ? NULL
		   : load_query(m, "SELECT ino, mode, uid, gid, nlink, size, "
				   "atime_s, atime_ns, mtime_s, mtime_ns, "
				   "ctime_s, ctime_ns, rdev, target, etag, "
				   "dirty, change_seq, generation FROM inodes "
				   "ORDER BY ino");
	if (!rc)
		rc = st ? load_inodes(m, st, &order, &orphans) : -EIO;
	sqlite3_finalize(st);
	/* before the xattrs are read: theirs go with them */
	if (!rc && orphans)
		rc = delete_orphans(m, orphans);
	if (reading)
		pthread_join(reader, NULL);
	else if (!rc)
		read_dentries(&dr);
	if (!rc)
		rc = link_dentries(m, &dr, &order);
	dentry_rows_free(&dr, 0); /* none left, unless the load failed first */
	st = rc ? NULL
		: load_query(m, "SELECT ino, name, value FROM xattrs ORDER BY "
				"rowid");
	if (!rc)
		rc = st ? load_xattrs(m, st) : -EIO;
	sqlite3_finalize(st);
	free(order.v);
	if (rc)
		return rc;
	if (check_locked(m, 0) != 0) {
		meta_log("%s: the stored tree is inconsistent", m->path);
		return -EIO;
	}
	m->ino_stored = m->next_ino; /* the table covers every number below */
	m->cookie_stored = m->next_cookie;
	if (m->cfg.adopt_kernel_refs)
		for (size_t b = 0; b <= m->inodes.mask; b++)
			for (struct hnode *h = m->inodes.b[b]; h; h = h->next)
				container_of(h, struct inode, h)->nlookup =
					META_NLOOKUP_UNKNOWN;
	return 0;
}

/* Stops and joins the committer, the syncer and the checkpointer. */
static void stop_threads(struct meta *m)
{
	lock(m);
	m->stop = 1;
	if (pthread_cond_broadcast(&m->cond) != 0 ||
	    pthread_cond_broadcast(&m->sync_cond) != 0 ||
	    pthread_cond_broadcast(&m->ckpt_cond) != 0)
		meta_log("pthread_cond_broadcast failed");
	int ckpter = m->has_ckpter;
	m->has_ckpter = 0; /* commits checkpoint again */
	m->ckpt_mark = 0;
	unlock(m);
	if (ckpter && pthread_join(m->ckpter, NULL) != 0)
		meta_log("pthread_join of the checkpointer failed");
	if (ckpter && sqlite3_close(m->ckpt_db) != SQLITE_OK)
		meta_log("%s: closing the checkpointer's connection failed",
			 m->path);
	m->ckpt_db = NULL;
	if (m->has_committer && pthread_join(m->committer, NULL) != 0)
		meta_log("pthread_join of the committer failed");
	if (m->has_syncer && pthread_join(m->syncer, NULL) != 0)
		meta_log("pthread_join of the syncer failed");
	m->has_committer = m->has_syncer = 0;
}

int meta_open(const struct meta_config *cfg, struct meta **out)
{
	int rc;
	*out = NULL;
	if (!cfg || !cfg->path || !*cfg->path)
		return -EINVAL;
	struct meta *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->cfg = *cfg;
	m->path = strdup(cfg->path);
	if (!m->path) {
		rc = -ENOMEM;
		goto fail_1;
	}
	m->cfg.path = m->path;
	if (!m->cfg.vfs)
		m->cfg.vfs = META_VFS;
	rc = -pthread_mutex_init(&m->lock, NULL);
	if (rc)
		goto fail_2;
	pthread_condattr_t ca;
	rc = -pthread_condattr_init(&ca);
	if (rc)
		goto fail_3;
	rc = -pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	if (!rc)
		rc = -pthread_cond_init(&m->cond, &ca);
	if (pthread_condattr_destroy(&ca) != 0)
		meta_log("pthread_condattr_destroy failed");
	if (rc)
		goto fail_3;
	m->walfd = -1;
	m->ballast_fd = -1;
	if (pthread_cond_init(&m->sync_cond, NULL) != 0 ||
	    pthread_cond_init(&m->synced, NULL) != 0 ||
	    pthread_cond_init(&m->ckpt_cond, NULL) != 0 ||
	    pthread_cond_init(&m->ckpt_idle, NULL) != 0 ||
	    pthread_mutex_init(&m->ckpt_run_lock, NULL) != 0) {
		/* (without attributes: never fails) */
		rc = -ENOMEM;
		goto fail_4;
	}
	if (htab_init(&m->inodes) || htab_init(&m->dnames) ||
	    htab_init(&m->dcookies)) {
		rc = -ENOMEM;
		goto fail_4;
	}
	if (getrandom(&m->hash_seed, sizeof(m->hash_seed), GRND_NONBLOCK) !=
	    (ssize_t)sizeof(m->hash_seed))
		m->hash_seed = mix64((uint64_t)now_realtime().tv_nsec ^
				     (uint64_t)(uintptr_t)m);
	rc = db_open(m);
	if (rc)
		goto fail_4;
	rc = load(m);
	if (rc)
		goto fail_5;
	if (m->walbuf)
		ballast_open(m);
	/* what an earlier run committed may not be fsync'ed yet: once it
	 * is, every loaded inode counts as durable (meta_sync()) */
	m->sync_epoch = 1;
	m->unsynced = 1;
	rc = txn_commit(m, 1);
	if (rc)
		goto fail_5;
	/* the WAL exists now; without this descriptor, syncs go through
	 * SQLite under the lock */
	char wal[PATH_MAX];
	if (snprintf(wal, sizeof(wal), "%s-wal", m->path) < (int)sizeof(wal))
		m->walfd = open(wal, O_RDONLY | O_CLOEXEC);
	rc = -pthread_create(&m->syncer, NULL, syncer_main, m);
	if (rc)
		goto fail_5;
	m->has_syncer = 1;
	if (m->cfg.commit_interval_ms || m->cfg.lazy_commit_ms) {
		rc = -pthread_create(&m->committer, NULL, committer_main, m);
		if (rc)
			goto fail_6;
		m->has_committer = 1;
	}
	start_ckpter(m);
	*out = m;
	return 0;
fail_6:
	stop_threads(m);
fail_5:
	if (m->walfd >= 0)
		close(m->walfd);
	db_close(m);
fail_4:
	mirror_free(m); /* also frees the half-made tables */
	if (pthread_cond_destroy(&m->cond) != 0 ||
	    pthread_cond_destroy(&m->sync_cond) != 0 ||
	    pthread_cond_destroy(&m->synced) != 0 ||
	    pthread_cond_destroy(&m->ckpt_cond) != 0 ||
	    pthread_cond_destroy(&m->ckpt_idle) != 0 ||
	    pthread_mutex_destroy(&m->ckpt_run_lock) != 0)
		meta_log("pthread_cond_destroy failed");
fail_3:
	if (pthread_mutex_destroy(&m->lock) != 0)
		meta_log("pthread_mutex_destroy failed");
fail_2:
	free(m->path);
fail_1:
	free(m);
	return rc;
}

void meta_close(struct meta *m)
{
	if (!m)
		return;
	stop_threads(m);
	lock(m);
	int rc = txn_commit(m, 1);
	if (rc)
		meta_log("%s: final commit failed: %s; uncommitted changes "
			 "are lost",
			 m->path, strerror(-rc));
	db_close(m);
	if (m->walfd >= 0)
		close(m->walfd);
	mirror_free(m);
	unlock(m);
	if (pthread_cond_destroy(&m->cond) != 0 ||
	    pthread_cond_destroy(&m->sync_cond) != 0 ||
	    pthread_cond_destroy(&m->synced) != 0 ||
	    pthread_cond_destroy(&m->ckpt_cond) != 0 ||
	    pthread_cond_destroy(&m->ckpt_idle) != 0 ||
	    pthread_mutex_destroy(&m->ckpt_run_lock) != 0 ||
	    pthread_mutex_destroy(&m->lock) != 0)
		meta_log("destroying the lock failed");
	free(m->path);
	free(m);
}

void meta_batch_begin(void)
{
	batch_depth++;
}

int meta_batch_end(struct meta *m)
{
	int rc = 0;
	if (batch_depth > 0 && --batch_depth > 0)
		return 0;
	int lazy = !batch_eager; /* lazy changes only */
	batch_eager = 0;
	lock(m);
	if (m->txn_open)
		rc = commit_or_wake(m, lazy);
	unlock(m);
	return rc;
}

int meta_commit(struct meta *m)
{
	lock(m);
	int rc = txn_commit(m, 1);
	unlock(m);
	return rc;
}

/* ---- snapshots ------------------------------------------------------------
 */

uint64_t meta_changes(struct meta *m)
{
	lock(m);
	uint64_t n = (uint64_t)sqlite3_total_changes64(m->db);
	unlock(m);
	return n;
}

/* Runs sql on a connection of its own: one statement with one text
 * parameter, or (arg NULL) any number of statements. */
static int side_exec(sqlite3 *db, const char *sql, const char *arg)
{
	sqlite3_stmt *st = NULL;
	if (!arg) {
		int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
		if (rc != SQLITE_OK)
			meta_log("'%s': %s", sql, sqlite3_errmsg(db));
		return rc == SQLITE_OK ? 0 : errno_of(rc);
	}
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
	if (rc == SQLITE_OK) {
		while ((rc = sqlite3_step(st)) == SQLITE_ROW)
			;
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
	}
	if (rc != SQLITE_OK)
		meta_log("'%s': %s", sql, sqlite3_errmsg(db));
	sqlite3_finalize(st);
	return rc == SQLITE_OK ? 0 : errno_of(rc);
}

int meta_snapshot(struct meta *m, const char *path)
{
	sqlite3 *db = NULL;
	lock(m);
	int rc = txn_commit(m, 0);
	unlock(m);
	if (rc)
		return rc;
	/* a reader of its own sees the last commit and never blocks the
	 * writer (WAL), so the mount goes on while the copy is made */
	if (unlink(path) != 0 && errno != ENOENT)
		return -errno;
	int src = sqlite3_open_v2(m->path, &db,
				  SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
				  m->cfg.vfs);
	if (src != SQLITE_OK) {
		meta_log("%s: snapshot: %s", m->path,
			 db ? sqlite3_errmsg(db) : sqlite3_errstr(src));
		rc = errno_of(src);
	} else {
		sqlite3_busy_timeout(db, META_BUSY_TIMEOUT_MS);
		rc = side_exec(db, "VACUUM INTO ?1", path);
	}
	sqlite3_close(db);
	if (rc)
		unlink(path);
	return rc;
}

/* A connection of its own to a snapshot that came from the bucket: nothing
 * in it runs as code. NULL when it does not open. */
static sqlite3 *snapshot_open(const char *path)
{
	sqlite3 *db = NULL;
	int rc = sqlite3_open_v2(
		path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc == SQLITE_OK &&
	    (sqlite3_busy_timeout(db, META_BUSY_TIMEOUT_MS) != SQLITE_OK ||
	     side_exec(db, "PRAGMA trusted_schema=OFF", NULL)))
		rc = SQLITE_ERROR;
	if (rc != SQLITE_OK) {
		meta_log("%s: %s", path,
			 db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

int meta_snapshot_check(const char *path)
{
	sqlite3 *db = snapshot_open(path);
	if (!db)
		return -EINVAL;
	sqlite3_stmt *st = NULL;
	int rc = -EINVAL;
	if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st, NULL) ==
		    SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW) {
		const unsigned char *ok = sqlite3_column_text(st, 0);
		if (ok && strcmp((const char *)ok, "ok") == 0)
			rc = 0;
		else
			meta_log("%s: quick_check: %s", path,
				 ok ? (const char *)ok : "no answer");
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	return rc;
}

int meta_snapshot_adopt(const char *path)
{
	sqlite3 *db = snapshot_open(path);
	int64_t v = 0;
	if (!db)
		return -EINVAL;
	int rc = 0;
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "PRAGMA application_id", -1, &st, NULL) !=
		    SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW ||
	    (v = sqlite3_column_int64(st, 0)) != META_APP_ID)
		rc = -EINVAL;
	sqlite3_finalize(st);
	/* no fsync of a file nothing counts on yet (the caller's fsync makes
	 * it durable); in WAL mode already, as the store opens it: a
	 * meta_snapshot_check() may then read it beside the store's first
	 * writes */
	if (!rc)
		rc = side_exec(db,
			       "PRAGMA synchronous=OFF;PRAGMA journal_mode=WAL",
			       NULL);
	/* What the writer had not uploaded is not in S3: its dirty flags
	 * mean nothing here, and the ETag "!" (an object whose version is
	 * not known) makes the reconciliation compare such an inode with S3
	 * instead of trusting it. Deletions it
	 * owed are forgotten: the objects are still listed, so they show. */
	if (!rc)
		rc = side_exec(db,
			       "BEGIN;"
			       /* only the dirty rows: rewriting all (100k)
				* took twice as long, journal and all */
			       "UPDATE inodes SET etag = '!', dirty = 0 "
			       "WHERE dirty <> 0;"
			       "DELETE FROM outbox;"
			       "COMMIT",
			       NULL);
	if (rc)
		meta_log("%s: not a usable tierfs index snapshot", path);
	sqlite3_close(db);
	return rc ? -EINVAL : 0;
}

/* ---- reads -------------------------------------------------------------- */

static int lookup(struct meta *m, uint64_t parent, const char *name,
		  struct meta_attr *out, uint64_t ref)
{
	if (!name)
		return -EINVAL;
	size_t len = strnlen(name, META_NAME_MAX + 1);
	if (len > META_NAME_MAX)
		return -ENAMETOOLONG;
	lock(m);
	int rc = -ENOENT;
	struct inode *dir = inode_find(m, parent);
	if (dir && !is_dir(dir)) {
		rc = -ENOTDIR;
	} else if (dir) {
		struct dentry *d = dentry_find(m, parent, name, len);
		if (d) {
			*out = d->ino->a;
			d->ino->nlookup += ref;
			rc = 0;
		}
	}
	unlock(m);
	return rc;
}

int meta_lookup(struct meta *m, uint64_t parent, const char *name,
		struct meta_attr *out)
{
	return lookup(m, parent, name, out, 0);
}

int meta_lookup_ref(struct meta *m, uint64_t parent, const char *name,
		    struct meta_attr *out)
{
	return lookup(m, parent, name, out, 1);
}

int meta_getattr(struct meta *m, uint64_t ino, struct meta_attr *out)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (in)
		*out = in->a;
	unlock(m);
	return in ? 0 : -ENOENT;
}

int meta_readlink(struct meta *m, uint64_t ino, char **target)
{
	int rc = 0;
	*target = NULL;
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (!in)
		rc = -ENOENT;
	else if (!S_ISLNK(in->a.mode) || !in->target)
		rc = -EINVAL;
	else if (!(*target = strdup(in->target)))
		rc = -ENOMEM;
	unlock(m);
	return rc;
}

/* Entries with a cookie above off, in cookie order. The entry at off is
 * found through the cookie table; if it was removed since, the directory
 * is scanned for the first larger cookie (cheap when, as with rm -r, the
 * entries before it are gone too). fn runs under meta->lock and must not
 * call back into meta. */
int meta_readdir(struct meta *m, uint64_t dir, uint64_t off, meta_dir_fn fn,
		 void *ctx)
{
	lock(m);
	struct inode *in = inode_find(m, dir);
	int rc = !in ? -ENOENT : !is_dir(in) ? -ENOTDIR : 0;
	if (rc) {
		unlock(m);
		return rc;
	}
	struct dentry *d = in->first;
	if (off) {
		struct dentry *at = dentry_by_cookie(m, off);
		if (at && at->dir == in) {
			d = at->next;
		} else {
			while (d && d->cookie <= off)
				d = d->next;
		}
	}
	for (; d; d = d->next)
		if (fn(ctx, d->name, &d->ino->a, d->cookie))
			break;
	unlock(m);
	return 0;
}

/* The path through dentry d (d's own name, then first names upward);
 * under the lock. */
static int path_through(struct meta *m, const struct dentry *d, char **path)
{
	size_t len = 0, depth = 0;
	/* first pass: length (and that every step has a name); second: fill
	 * from the end */
	const struct dentry *x = d;
	while (x) {
		if (depth > m->ninodes)
			return -ENOENT; /* a cycle: the checker catches it */
		len += x->namelen + (depth++ ? 1 : 0);
		if (x->dir->a.ino == META_ROOT_INO)
			break;
		x = x->dir->names;
		if (!x)
			return -ENOENT;
	}
	char *p = malloc(len + 1);
	if (!p)
		return -ENOMEM;
	size_t end = len;
	p[end] = '\0';
	for (x = d;; x = x->dir->names) {
		end -= x->namelen;
		memcpy(p + end, x->name, x->namelen);
		if (x->dir->a.ino == META_ROOT_INO)
			break;
		p[--end] = '/';
	}
	assert(end == 0);
	*path = p;
	return 0;
}

static int path_nth_locked(struct meta *m, uint64_t ino, unsigned n,
			   char **path)
{
	*path = NULL;
	struct inode *in = inode_find(m, ino);
	if (!in)
		return -ENOENT;
	if (ino == META_ROOT_INO)
		return n == 0 ? ((*path = strdup("")) ? 0 : -ENOMEM) : -ENOENT;
	const struct dentry *d = in->names;
	for (unsigned i = 0; d && i < n; i++)
		d = d->nnext;
	return d ? path_through(m, d, path) : -ENOENT;
}

int meta_path_nth(struct meta *m, uint64_t ino, unsigned n, char **path)
{
	lock(m);
	int rc = path_nth_locked(m, ino, n, path);
	unlock(m);
	return rc;
}

/* Runs one outbox statement with a text or integer argument. */
static int outbox_run(struct meta *m, enum stmt which, const char *key,
		      uint64_t id)
{
	sqlite3_stmt *st = m->st[which];
	int b = key ? bind_text(st, 1, key, strlen(key)) : bind_u64(st, 1, id);
	if (b != SQLITE_OK)
		return db_bind_failed(m, st);
	return db_run(m, st);
}

int meta_outbox_has(struct meta *m, const char *key)
{
	lock(m);
	sqlite3_stmt *st = m->st[ST_OUTBOX_HAS];
	int rc = bind_text(st, 1, key, strlen(key));
	if (rc != SQLITE_OK) {
		rc = db_bind_failed(m, st);
	} else {
		rc = sqlite3_step(st);
		rc = rc == SQLITE_ROW	 ? 1
		     : rc == SQLITE_DONE ? 0
					 : errno_of(rc);
		sqlite3_reset(st);
	}
	unlock(m);
	return rc;
}

ssize_t meta_outbox_peek(struct meta *m, size_t max, uint64_t *ids, char **keys)
{
	size_t n = 0;
	int rc = 0;
	lock(m);
	sqlite3_stmt *st = m->st[ST_OUTBOX_PEEK];
	if (bind_u64(st, 1, max) != SQLITE_OK) {
		rc = db_bind_failed(m, st);
		unlock(m);
		return rc;
	}
	while (n < max) {
		int step = sqlite3_step(st);
		if (step == SQLITE_DONE)
			break;
		if (step != SQLITE_ROW) {
			rc = errno_of(step);
			break;
		}
		const unsigned char *k = sqlite3_column_text(st, 1);
		ids[n] = (uint64_t)sqlite3_column_int64(st, 0);
		keys[n] = strdup(k ? (const char *)k : "");
		if (!keys[n]) {
			rc = -ENOMEM;
			break;
		}
		n++;
	}
	sqlite3_reset(st);
	unlock(m);
	if (rc) {
		for (size_t i = 0; i < n; i++)
			free(keys[i]);
		return rc;
	}
	return (ssize_t)n;
}

/* One outbox change in its own savepoint, like every other change: rows
 * by keys (insert, or delete by key) and by ids (delete). */
static int outbox_change(struct meta *m, enum stmt which,
			 const char *const *keys, size_t nkeys,
			 const uint64_t *ids, size_t n)
{
	struct op op;
	lock(m);
	int rc = op_begin(m, &op);
	if (rc) {
		unlock(m);
		return rc;
	}
	for (size_t i = 0; !rc && i < nkeys; i++)
		rc = outbox_run(m, which, keys[i], 0);
	for (size_t i = 0; !rc && i < n; i++)
		rc = outbox_run(m, which, NULL, ids[i]);
	rc = op_end(m, &op, rc);
	if (!rc)
		op_done(m, &op);
	unlock(m);
	return rc;
}

int meta_outbox_add(struct meta *m, const char *const *keys, size_t n)
{
	return outbox_change(m, ST_OUTBOX_INS, keys, n, NULL, 0);
}

int meta_outbox_done(struct meta *m, const uint64_t *ids, size_t n)
{
	return outbox_change(m, ST_OUTBOX_DEL_ID, NULL, 0, ids, n);
}

int meta_outbox_cancel(struct meta *m, const char *key)
{
	return outbox_change(m, ST_OUTBOX_DEL_KEY, &key, 1, NULL, 0);
}

int meta_outbox_cancel_for(struct meta *m, const char *key, uint64_t ino,
			   unsigned n, const char *path, const char *mark)
{
	struct op op;
	char *now = NULL, *copy = NULL;
	if (mark && !(copy = strndup(mark, META_ETAG_MAX)))
		return -ENOMEM;
	lock(m);
	int rc = path_nth_locked(m, ino, n, &now);
	if (rc == -ENOENT || (!rc && strcmp(now, path) != 0))
		rc = -ESTALE; /* the name went: its deletion stays queued */
	free(now);
	struct inode *in = rc ? NULL : inode_find(m, ino);
	if (!rc)
		rc = op_begin(m, &op);
	if (!rc) {
		int marks = copy && in && !in->etag;
		if (marks)
			in->etag = copy;
		rc = outbox_run(m, ST_OUTBOX_DEL_KEY, key, 0);
		if (!rc && marks)
			rc = db_inode_put(m, in);
		rc = op_end(m, &op, rc);
		if (marks && rc)
			in->etag = NULL; /* rolled back; copy is freed below */
		else if (marks)
			copy = NULL;
		if (!rc)
			op_done(m, &op);
	}
	unlock(m);
	free(copy);
	return rc;
}

struct dirty_scan {
	uint64_t *inos;
	size_t n, cap;
	int rc;
};

static void collect_dirty(struct hnode *h, void *arg)
{
	struct dirty_scan *s = arg;
	const struct inode *in = container_of(h, struct inode, h);
	if (!in->a.dirty || s->rc)
		return;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		uint64_t *v = realloc(s->inos, cap * sizeof(*v));
		if (!v) {
			s->rc = -ENOMEM;
			return;
		}
		s->inos = v;
		s->cap = cap;
	}
	s->inos[s->n++] = in->a.ino;
}

int meta_dirty_list(struct meta *m, uint64_t **inos, size_t *n)
{
	struct dirty_scan s = {NULL, 0, 0, 0};
	lock(m);
	htab_each(&m->inodes, collect_dirty, &s);
	unlock(m);
	if (s.rc) {
		free(s.inos);
		return s.rc;
	}
	*inos = s.inos;
	*n = s.n;
	return 0;
}

int meta_path(struct meta *m, uint64_t ino, char **path)
{
	return meta_path_nth(m, ino, 0, path);
}

/* Notes live in the meta table beside the counters, as "note." + name
 * (or + a prefix of names). */
static int note_key(const char *name, char *key)
{
	size_t n = strlen(name);
	if (n > META_NOTE_MAX)
		return -EINVAL;
	memcpy(key, "note.", 5);
	memcpy(key + 5, name, n + 1);
	return 0;
}

int meta_note_put(struct meta *m, const char *name, uint64_t value)
{
	char key[5 + META_NOTE_MAX + 1];
	int rc = name[0] ? note_key(name, key) : -EINVAL;
	if (rc)
		return rc;
	lock(m);
	struct op op;
	rc = op_begin(m, &op);
	if (!rc)
		rc = op_end(m, &op, db_kv_put(m, key, value));
	if (!rc)
		op_done(m, &op);
	unlock(m);
	return rc;
}

/* The statement over the notes under prefix, ready to step. */
static int notes_prepare(struct meta *m, const char *sql, const char *prefix,
			 sqlite3_stmt **st)
{
	char key[5 + META_NOTE_MAX + 1];
	int rc = note_key(prefix, key);
	if (rc)
		return rc;
	rc = sqlite3_prepare_v2(m->db, sql, -1, st, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_text(*st, 1, key, -1, SQLITE_TRANSIENT);
	if (rc != SQLITE_OK) {
		meta_log("%s: '%s': %s", m->path, sql, sqlite3_errmsg(m->db));
		sqlite3_finalize(*st);
		*st = NULL;
		return errno_of(rc);
	}
	return 0;
}

#define NOTES_WHERE " WHERE substr(key, 1, length(?1)) = ?1"

int meta_notes(struct meta *m, const char *prefix, uint64_t **values, size_t *n)
{
	sqlite3_stmt *st;
	uint64_t *v = NULL;
	size_t cap = 0;
	*n = 0;
	lock(m);
	int rc = notes_prepare(m, "SELECT value FROM meta" NOTES_WHERE, prefix,
			       &st);
	while (!rc && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		if (*n == cap) {
			uint64_t *nv = realloc(v, (cap = cap ? 2 * cap : 16) *
							  sizeof(*v));
			if (!nv) {
				rc = -ENOMEM;
				break;
			}
			v = nv;
		}
		v[(*n)++] = (uint64_t)sqlite3_column_int64(st, 0);
		rc = 0;
	}
	if (rc == SQLITE_DONE)
		rc = 0;
	else if (rc > 0)
		rc = errno_of(rc);
	sqlite3_finalize(st);
	unlock(m);
	if (rc) {
		free(v);
		v = NULL;
		*n = 0;
	}
	*values = v;
	return rc;
}

int meta_notes_clear(struct meta *m, const char *prefix)
{
	sqlite3_stmt *st;
	struct op op;
	lock(m);
	int rc = notes_prepare(m, "DELETE FROM meta" NOTES_WHERE, prefix, &st);
	if (!rc) {
		rc = op_begin(m, &op);
		if (!rc)
			rc = op_end(m, &op, db_run(m, st));
		if (!rc)
			op_done(m, &op);
		sqlite3_finalize(st);
	}
	unlock(m);
	return rc;
}

int meta_get_etag(struct meta *m, uint64_t ino, char *etag, size_t len)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	int rc = in ? 0 : -ENOENT;
	if (in) {
		const char *e = in->etag ? in->etag : "";
		size_t n = strlen(e);
		if (n + 1 > len)
			rc = -ERANGE;
		else
			memcpy(etag, e, n + 1);
	}
	unlock(m);
	return rc;
}

int meta_change_seq(struct meta *m, uint64_t ino, uint64_t *seq)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (in)
		*seq = in->seq;
	unlock(m);
	return in ? 0 : -ENOENT;
}

void meta_usage(struct meta *m, uint64_t *bytes, uint64_t *inodes)
{
	lock(m);
	*bytes = m->bytes;
	*inodes = m->ninodes;
	unlock(m);
}

/* ---- namespace changes -------------------------------------------------- */

static int valid_type(uint32_t type)
{
	switch (type) {
	case S_IFREG:
	case S_IFDIR:
	case S_IFLNK:
	case S_IFCHR:
	case S_IFBLK:
	case S_IFIFO:
	case S_IFSOCK:
		return 1;
	default:
		return 0;
	}
}

static struct timespec ts_or(struct timespec t, struct timespec dflt)
{
	return t.tv_sec == 0 && t.tv_nsec == 0 ? dflt : t;
}

/* Times in attr that are zero mean "now". */
int meta_create(struct meta *m, uint64_t parent, const char *name,
		const struct meta_attr *attr, const char *target,
		struct meta_attr *out)
{
	size_t len = 0, tlen = 0;
	int rc = name_check(name, &len);
	if (rc)
		return rc;
	if (!attr)
		return -EINVAL;
	uint32_t type = attr->mode & S_IFMT;
	if (type == 0)
		type = S_IFREG; /* as mknod(2) */
	if (!valid_type(type) || (type == S_IFLNK) != (target != NULL) ||
	    !ts_valid(attr->atime) || !ts_valid(attr->mtime) ||
	    !ts_valid(attr->ctime))
		return -EINVAL;
	if (target) {
		tlen = strnlen(target, META_SYMLINK_MAX + 1);
		if (tlen > META_SYMLINK_MAX)
			return -ENAMETOOLONG;
		if (tlen == 0)
			return -ENOENT; /* symlink(2) with "" */
	}

	lock(m);
	struct inode *dir = NULL;
	rc = dir_get(m, parent, &dir);
	if (!rc && dentry_find(m, parent, name, len))
		rc = -EEXIST;
	if (!rc && type == S_IFDIR && dir->a.nlink >= META_LINK_MAX)
		rc = -EMLINK;
	if (rc) {
		unlock(m);
		return rc;
	}
	struct inode *in = calloc(1, sizeof(*in));
	struct dentry *d = dentry_alloc(name, len);
	if (!in || !d || (target && !(in->target = strndup(target, tlen)))) {
		rc = -ENOMEM;
		goto fail;
	}
	struct op op;
	rc = op_begin(m, &op);
	if (rc)
		goto fail;
	in->a.ino = m->next_ino;
	in->a.mode = type | (attr->mode & 07777);
	in->a.uid = attr->uid;
	in->a.gid = attr->gid;
	in->a.nlink = type == S_IFDIR ? 2 : 1;
	in->a.size = tlen;
	in->a.atime = ts_or(attr->atime, op.now);
	in->a.mtime = ts_or(attr->mtime, op.now);
	in->a.ctime = ts_or(attr->ctime, op.now);
	in->a.rdev = attr->rdev;
	in->a.dirty = META_DIRTY_NAME;
	in->seq = 1;
	in->sync_all = in->sync_data = m->sync_epoch;
	d->cookie = m->next_cookie;
	d->dir = dir;
	d->ino = in;
	op_touch(&op, dir);
	dir->a.mtime = dir->a.ctime = op.now;
	if (type == S_IFDIR)
		dir->a.nlink++;
	rc = db_inode_put(m, in);
	if (!rc)
		rc = db_dentry(m, ST_DENTRY_INS, parent, name, len, in->a.ino,
			       d->cookie);
	if (!rc)
		rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (rc)
		goto fail;
	counters_take(m, 1);
	inode_attach(m, in);
	dentry_attach(m, d);
	if (out)
		*out = in->a;
	op_done(m, &op);
	unlock(m);
	return 0;
fail:
	unlock(m);
	inode_free(in);
	free(d);
	return rc;
}

int meta_link(struct meta *m, uint64_t ino, uint64_t parent, const char *name,
	      struct meta_attr *out)
{
	size_t len = 0;
	int rc = name_check(name, &len);
	if (rc)
		return rc;
	lock(m);
	struct inode *in = inode_find(m, ino), *dir = NULL;
	if (!in || in->a.nlink == 0)
		rc = -ENOENT;
	else if (is_dir(in))
		rc = -EPERM;
	else if (in->a.nlink >= META_LINK_MAX)
		rc = -EMLINK;
	if (!rc)
		rc = dir_get(m, parent, &dir);
	if (!rc && dentry_find(m, parent, name, len))
		rc = -EEXIST;
	struct dentry *d = NULL;
	if (!rc && !(d = dentry_alloc(name, len)))
		rc = -ENOMEM;
	struct op op;
	if (!rc)
		rc = op_begin(m, &op);
	if (rc) {
		unlock(m);
		free(d);
		return rc;
	}
	d->cookie = m->next_cookie;
	d->dir = dir;
	d->ino = in;
	op_touch(&op, in);
	in->a.nlink++;
	in->a.ctime = op.now;
	in->a.dirty |= META_DIRTY_NAME;
	op_touch(&op, dir);
	dir->a.mtime = dir->a.ctime = op.now;
	rc = db_dentry(m, ST_DENTRY_INS, parent, name, len, ino, d->cookie);
	if (!rc)
		rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (rc) {
		unlock(m);
		free(d);
		return rc;
	}
	counters_take(m, 0);
	dentry_attach(m, d);
	if (out)
		*out = in->a;
	op_done(m, &op);
	unlock(m);
	return 0;
}

/* Drops one name of in (in the undo log, rows not yet written): nlink,
 * ctime, and deletion when nothing references it any more. */
static void drop_name(struct op *op, struct inode *in, struct inode *dir)
{
	int i = op_touch(op, in);
	if (is_dir(in)) {
		in->a.nlink = 0;
		op_touch(op, dir);
		dir->a.nlink--;
	} else {
		in->a.nlink--;
		in->a.dirty |= META_DIRTY_NAME;
	}
	in->a.ctime = op->now;
	if (in->a.nlink == 0 && in->nlookup == 0)
		op->r[i].gone = 1;
}

int meta_unlink(struct meta *m, uint64_t parent, const char *name, int want_dir,
		uint64_t *ino_out)
{
	return meta_unlink_queue(m, parent, name, want_dir, NULL, ino_out);
}

int meta_unlink_queue(struct meta *m, uint64_t parent, const char *name,
		      int want_dir, const char *key, uint64_t *ino_out)
{
	size_t len = 0;
	int rc = name_check(name, &len);
	if (rc)
		return rc;
	lock(m);
	struct inode *dir = inode_find(m, parent);
	struct dentry *d = NULL;
	if (!dir)
		rc = -ENOENT;
	else if (!is_dir(dir))
		rc = -ENOTDIR;
	else if (!(d = dentry_find(m, parent, name, len)))
		rc = -ENOENT;
	else if (want_dir && !is_dir(d->ino))
		rc = -ENOTDIR;
	else if (!want_dir && is_dir(d->ino))
		rc = -EISDIR;
	else if (d->ino->nentries)
		rc = -ENOTEMPTY;
	struct op op;
	if (!rc)
		rc = op_begin(m, &op);
	if (rc) {
		unlock(m);
		return rc;
	}
	struct inode *in = d->ino;
	uint64_t ino = in->a.ino;
	drop_name(&op, in, dir);
	op_touch(&op, dir);
	dir->a.mtime = dir->a.ctime = op.now;
	rc = db_dentry(m, ST_DENTRY_DEL, parent, name, len, 0, 0);
	if (!rc && key && in->etag)
		rc = outbox_run(m, ST_OUTBOX_INS, key, 0);
	if (!rc)
		rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (rc) {
		unlock(m);
		return rc;
	}
	dentry_detach(m, d);
	free(d);
	op_done(m, &op);
	unlock(m);
	if (ino_out)
		*ino_out = ino;
	return 0;
}

static int rename_exchange(struct meta *m, struct op *op, struct dentry *s,
			   struct dentry *d)
{
	struct inode *si = s->ino, *di = d->ino;
	struct inode *dir = s->dir, *newdir = d->dir;
	if ((is_dir(si) && dir_contains(m, si, newdir)) ||
	    (is_dir(di) && dir_contains(m, di, dir)))
		return -EINVAL;
	int rc = op_begin(m, op);
	if (rc)
		return rc;
	struct inode *moved[2] = {si, di};
	for (int i = 0; i < 2; i++) {
		op_touch(op, moved[i]);
		moved[i]->a.ctime = op->now;
		moved[i]->a.dirty |= META_DIRTY_NAME;
	}
	op_touch(op, dir);
	op_touch(op, newdir);
	dir->a.mtime = dir->a.ctime = op->now;
	newdir->a.mtime = newdir->a.ctime = op->now;
	if (dir != newdir && is_dir(si) != is_dir(di)) {
		/* the directory of the two changes parents */
		struct inode *gains = is_dir(si) ? newdir : dir;
		struct inode *loses = is_dir(si) ? dir : newdir;
		gains->a.nlink++;
		loses->a.nlink--;
	}
	rc = db_dentry(m, ST_DENTRY_SET_INO, dir->a.ino, s->name, s->namelen,
		       di->a.ino, 0);
	if (!rc)
		rc = db_dentry(m, ST_DENTRY_SET_INO, newdir->a.ino, d->name,
			       d->namelen, si->a.ino, 0);
	if (!rc)
		rc = op_write(m, op);
	rc = op_end(m, op, rc);
	if (rc)
		return rc;
	names_del(si, s);
	names_del(di, d);
	s->ino = di;
	d->ino = si;
	names_add(di, s);
	names_add(si, d);
	return 0;
}

static int rename_move(struct meta *m, struct op *op, struct dentry *s,
		       struct dentry *d, struct inode *newdir,
		       const char *newname, size_t newlen, uint64_t *replaced,
		       const struct meta_rename_keys *k)
{
	struct inode *si = s->ino, *dir = s->dir;
	struct inode *di = d ? d->ino : NULL;
	if (is_dir(si) && dir_contains(m, si, newdir))
		return -EINVAL;
	if (di && is_dir(si) && !is_dir(di))
		return -ENOTDIR;
	if (di && !is_dir(si) && is_dir(di))
		return -EISDIR;
	if (di && di->nentries)
		return -ENOTEMPTY;
	struct dentry *nd = dentry_alloc(newname, newlen);
	if (!nd)
		return -ENOMEM;
	int rc = op_begin(m, op);
	if (rc) {
		free(nd);
		return rc;
	}
	nd->cookie = m->next_cookie;
	nd->dir = newdir;
	nd->ino = si;
	if (di)
		drop_name(op, di, newdir);
	op_touch(op, si);
	si->a.ctime = op->now;
	si->a.dirty |= META_DIRTY_NAME;
	op_touch(op, dir);
	op_touch(op, newdir);
	dir->a.mtime = dir->a.ctime = op->now;
	newdir->a.mtime = newdir->a.ctime = op->now;
	if (is_dir(si) && dir != newdir) {
		dir->a.nlink--;
		newdir->a.nlink++;
	}
	rc = 0;
	if (d)
		rc = db_dentry(m, ST_DENTRY_DEL, newdir->a.ino, d->name,
			       d->namelen, 0, 0);
	if (!rc)
		rc = db_dentry(m, ST_DENTRY_DEL, dir->a.ino, s->name,
			       s->namelen, 0, 0);
	if (!rc)
		rc = db_dentry(m, ST_DENTRY_INS, newdir->a.ino, newname, newlen,
			       si->a.ino, nd->cookie);
	for (size_t i = 0; k && !rc && i < k->ngone; i++)
		rc = outbox_run(m, ST_OUTBOX_INS, k->gone[i], 0);
	for (size_t i = 0; k && !rc && i < k->nmade; i++)
		rc = outbox_run(m, ST_OUTBOX_DEL_KEY, k->made[i], 0);
	if (!rc)
		rc = op_write(m, op);
	rc = op_end(m, op, rc);
	if (rc) {
		free(nd);
		return rc;
	}
	if (d) {
		dentry_detach(m, d);
		free(d);
		*replaced = di->a.ino;
	}
	dentry_detach(m, s);
	free(s);
	counters_take(m, 0);
	dentry_attach(m, nd);
	return 0;
}

int meta_rename(struct meta *m, uint64_t parent, const char *name,
		uint64_t newparent, const char *newname, unsigned flags,
		uint64_t *replaced_ino)
{
	return meta_rename_queue(m, parent, name, newparent, newname, flags,
				 NULL, replaced_ino);
}

int meta_rename_queue(struct meta *m, uint64_t parent, const char *name,
		      uint64_t newparent, const char *newname, unsigned flags,
		      const struct meta_rename_keys *keys,
		      uint64_t *replaced_ino)
{
	size_t len = 0, newlen = 0;
	uint64_t replaced = 0;
	int rc = name_check(name, &len);
	if (!rc)
		rc = name_check(newname, &newlen);
	if (!rc && ((flags & ~(unsigned)(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
		    (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE) ||
		    (keys && flags & RENAME_EXCHANGE)))
		rc = -EINVAL;
	if (rc)
		return rc;
	lock(m);
	struct inode *dir = NULL, *newdir = NULL;
	struct dentry *s = NULL, *d = NULL;
	rc = dir_get(m, parent, &dir);
	if (!rc)
		rc = dir_get(m, newparent, &newdir);
	if (!rc && !(s = dentry_find(m, parent, name, len)))
		rc = -ENOENT;
	if (!rc)
		d = dentry_find(m, newparent, newname, newlen);
	if (!rc && d && (flags & RENAME_NOREPLACE))
		rc = -EEXIST;
	if (!rc && !d && (flags & RENAME_EXCHANGE))
		rc = -ENOENT;
	if (rc || (d && d->ino == s->ino)) {
		/* rename(2) onto the same inode does nothing */
		unlock(m);
		if (replaced_ino)
			*replaced_ino = 0;
		return rc;
	}
	struct op op;
	if (flags & RENAME_EXCHANGE)
		rc = rename_exchange(m, &op, s, d);
	else
		rc = rename_move(m, &op, s, d, newdir, newname, newlen,
				 &replaced, keys);
	if (!rc)
		op_done(m, &op);
	unlock(m);
	if (replaced_ino)
		*replaced_ino = rc ? 0 : replaced;
	return rc;
}

/* ---- attributes --------------------------------------------------------- */

int meta_setattr(struct meta *m, uint64_t ino, unsigned mask,
		 const struct meta_attr *attr, struct meta_attr *out)
{
	return meta_setattr_if(m, ino, UINT64_MAX, mask, attr, out);
}

int meta_setattr_if(struct meta *m, uint64_t ino, uint64_t seq, unsigned mask,
		    const struct meta_attr *attr, struct meta_attr *out)
{
	const unsigned known = META_SET_MODE | META_SET_UID | META_SET_GID |
			       META_SET_SIZE | META_SET_GROW | META_SET_ATIME |
			       META_SET_MTIME | META_SET_CTIME | META_SET_LAZY |
			       META_SET_KILL_SUIDGID | META_SET_LAZY_GROW;
	if ((mask & ~known) || (mask && !attr) ||
	    (mask & META_SET_ATIME && !ts_valid(attr->atime)) ||
	    (mask & META_SET_MTIME && !ts_valid(attr->mtime)) ||
	    (mask & META_SET_CTIME && !ts_valid(attr->ctime)))
		return -EINVAL;
	unsigned lazy = mask & META_SET_LAZY;
	/* META_SET_GROW only ever grows the size */
	int lazy_grow = (mask & META_SET_GROW) && (mask & META_SET_LAZY_GROW);
	mask &= ~(unsigned)(META_SET_LAZY | META_SET_LAZY_GROW);
	lock(m);
	struct inode *in = inode_find(m, ino);
	int rc = 0;
	if (!in)
		rc = -ENOENT;
	else if (seq != UINT64_MAX && (in->seq != seq || in->a.dirty))
		rc = -EAGAIN;
	else if (mask & META_SET_SIZE && is_dir(in))
		rc = -EISDIR;
	else if (mask & META_SET_SIZE && !S_ISREG(in->a.mode))
		rc = -EINVAL;
	if (rc || mask == 0) {
		if (!rc && out)
			*out = in->a;
		unlock(m);
		return rc;
	}
	struct op op;
	rc = op_begin(m, &op);
	if (rc) {
		unlock(m);
		return rc;
	}
	uint64_t old_size = in->a.size;
	uint32_t old_dirty = in->a.dirty;
	op_touch(&op, in);
	struct meta_attr *a = &in->a;
	if (mask & META_SET_MODE) {
		a->mode = (a->mode & S_IFMT) | (attr->mode & 07777);
	} else if (mask & META_SET_KILL_SUIDGID && S_ISREG(a->mode)) {
		uint32_t mode = a->mode & ~(uint32_t)S_ISUID;
		if (mode & S_IXGRP)
			mode &= ~(uint32_t)S_ISGID;
		if (mode != a->mode) {
			a->mode = mode;
			mask |= META_SET_MODE;
			lazy = 0;
		}
	}
	mask &= ~(unsigned)META_SET_KILL_SUIDGID;
	if (mask & META_SET_UID)
		a->uid = attr->uid;
	if (mask & META_SET_GID)
		a->gid = attr->gid;
	if (mask & META_SET_GROW) { /* a write's end: sizes only grow */
		mask &= ~(unsigned)META_SET_GROW;
		if (attr->size > a->size) {
			mask |= META_SET_SIZE;
			a->size = attr->size;
		}
	} else if (mask & META_SET_SIZE) {
		a->size = attr->size;
		a->mtime = op.now; /* truncate(2) */
		a->dirty |= META_DIRTY_DATA;
	}
	if (mask & META_SET_ATIME)
		a->atime = attr->atime;
	if (mask & META_SET_MTIME)
		a->mtime = attr->mtime;
	/* every attribute change moves ctime, as notify_change() does */
	a->ctime = mask & META_SET_CTIME ? attr->ctime : op.now;
	/* atime alone is not kept in S3, and an unlinked inode is never
	 * uploaded: its attributes are its own until it is forgotten, and a
	 * change of its times may wait for the next commit (the kernel's
	 * flush of the times of a file being unlinked, say) */
	int orphan = is_orphan(in);
	if (orphan && !(mask & (META_SET_MODE | META_SET_UID | META_SET_GID)))
		lazy = 1;
	if (!orphan && (mask & ~(unsigned)(META_SET_ATIME | META_SET_SIZE)))
		a->dirty |= META_DIRTY_ATTR;
	rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (!rc) {
		if (S_ISREG(a->mode))
			m->bytes = m->bytes - old_size + a->size;
		if (out)
			*out = *a;
		int same_size = a->size == old_size || lazy_grow;
		/* META_DIRTY_ATTR beside DATA or NAME moves nothing: either
		 * one uploads the object with all of its headers */
		uint32_t added = a->dirty & ~old_dirty;
		int same_dirty =
			!added ||
			(added == META_DIRTY_ATTR &&
			 (old_dirty & (META_DIRTY_DATA | META_DIRTY_NAME)));
		op_done_lazy(m, &op, lazy && same_size && same_dirty);
	}
	unlock(m);
	return rc;
}

/* ---- extended attributes ------------------------------------------------ */

static struct xattr **xattr_find(struct inode *in, const char *name)
{
	struct xattr **p = &in->xattrs;
	while (*p && strcmp((*p)->name, name) != 0)
		p = &(*p)->next;
	return p;
}

static int xattr_name_check(const char *name)
{
	if (!name)
		return -EINVAL;
	size_t n = strnlen(name, META_XATTR_NAME_MAX + 1);
	return n == 0 || n > META_XATTR_NAME_MAX ? -ERANGE : 0;
}

int meta_setxattr(struct meta *m, uint64_t ino, const char *name,
		  const void *value, size_t size, int flags)
{
	int rc = xattr_name_check(name);
	if (rc)
		return rc;
	if (flags & ~(XATTR_CREATE | XATTR_REPLACE) || (size && !value))
		return -EINVAL;
	if (size > META_XATTR_SIZE_MAX)
		return -E2BIG;
	struct xattr *x = malloc(sizeof(*x) + size);
	if (!x || !(x->name = strdup(name))) {
		free(x);
		return -ENOMEM;
	}
	x->size = size;
	if (size)
		memcpy(x->value, value, size);
	x->next = NULL;
	lock(m);
	struct inode *in = inode_find(m, ino);
	struct xattr **p = NULL;
	if (!in) {
		rc = -ENOENT;
	} else {
		p = xattr_find(in, name);
		if (*p && (flags & XATTR_CREATE))
			rc = -EEXIST;
		else if (!*p && (flags & XATTR_REPLACE))
			rc = -ENODATA;
	}
	struct op op;
	if (!rc)
		rc = op_begin(m, &op);
	if (rc)
		goto out;
	op_touch(&op, in);
	in->a.ctime = op.now;
	in->a.dirty |= META_DIRTY_ATTR;
	rc = db_xattr(m, *p ? ST_XATTR_UPD : ST_XATTR_INS, ino, name, value,
		      size);
	if (!rc)
		rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (rc)
		goto out;
	if (*p) { /* replace in place: list order is creation order */
		struct xattr *old = *p;
		x->next = old->next;
		old->next = NULL;
		xattrs_free(old);
	}
	*p = x;
	x = NULL;
	op_done(m, &op);
out:
	unlock(m);
	xattrs_free(x);
	return rc;
}

ssize_t meta_getxattr(struct meta *m, uint64_t ino, const char *name,
		      void *value, size_t size)
{
	ssize_t rc = xattr_name_check(name);
	if (rc)
		return rc;
	lock(m);
	struct inode *in = inode_find(m, ino);
	struct xattr *x = in ? *xattr_find(in, name) : NULL;
	if (!in)
		rc = -ENOENT;
	else if (!x)
		rc = -ENODATA;
	else if (size && size < x->size)
		rc = -ERANGE;
	else
		rc = (ssize_t)x->size;
	if (rc > 0 && size)
		memcpy(value, x->value, x->size);
	unlock(m);
	return rc;
}

ssize_t meta_listxattr(struct meta *m, uint64_t ino, char *list, size_t size)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (!in) {
		unlock(m);
		return -ENOENT;
	}
	size_t total = 0;
	for (struct xattr *x = in->xattrs; x; x = x->next)
		total += strlen(x->name) + 1;
	ssize_t rc = (ssize_t)total;
	if (size && size < total) {
		rc = -ERANGE;
	} else if (size) {
		char *p = list;
		for (struct xattr *x = in->xattrs; x; x = x->next) {
			size_t n = strlen(x->name) + 1;
			memcpy(p, x->name, n);
			p += n;
		}
	}
	unlock(m);
	return rc;
}

int meta_removexattr(struct meta *m, uint64_t ino, const char *name)
{
	int rc = xattr_name_check(name);
	if (rc)
		return rc;
	lock(m);
	struct inode *in = inode_find(m, ino);
	struct xattr **p = in ? xattr_find(in, name) : NULL;
	if (!in)
		rc = -ENOENT;
	else if (!*p)
		rc = -ENODATA;
	struct op op;
	if (!rc)
		rc = op_begin(m, &op);
	if (rc) {
		unlock(m);
		return rc;
	}
	op_touch(&op, in);
	in->a.ctime = op.now;
	in->a.dirty |= META_DIRTY_ATTR;
	rc = db_xattr(m, ST_XATTR_DEL, ino, name, NULL, 0);
	if (!rc)
		rc = op_write(m, &op);
	rc = op_end(m, &op, rc);
	if (!rc) {
		struct xattr *old = *p;
		*p = old->next;
		old->next = NULL;
		xattrs_free(old);
		op_done(m, &op);
	}
	unlock(m);
	return rc;
}

/* ---- references, dirty flags, etags ------------------------------------- */

void meta_ref(struct meta *m, uint64_t ino, uint64_t n)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (in)
		in->nlookup += n;
	else
		meta_log("meta_ref: no inode %" PRIu64, ino);
	unlock(m);
}

int meta_forget(struct meta *m, uint64_t ino, uint64_t n)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	if (!in) {
		unlock(m);
		meta_log("meta_forget: no inode %" PRIu64, ino);
		return -ENOENT;
	}
	if (in->nlookup >= META_NLOOKUP_UNKNOWN) {
		n = 0; /* adopted: the kernel's count is not known */
	} else if (n > in->nlookup) {
		meta_log("meta_forget: inode %" PRIu64 ": forget %" PRIu64
			 " > lookup count %" PRIu64,
			 ino, n, in->nlookup);
		n = in->nlookup;
	}
	in->nlookup -= n;
	if (in->nlookup || in->a.nlink || ino == META_ROOT_INO) {
		unlock(m);
		return 0;
	}
	/* the last reference to an unlinked inode. Its deletion may wait
	 * for the next commit: lost in a crash, the row is an orphan that
	 * meta_open() deletes (or, adopting the kernel's references, keeps
	 * as it keeps every orphan) */
	struct op op;
	int rc = op_begin(m, &op);
	if (!rc) {
		op.r[op_touch(&op, in)].gone = 1;
		rc = op_write(m, &op);
		rc = op_end(m, &op, rc);
	}
	if (!rc)
		op_done_lazy(m, &op, 1);
	unlock(m);
	/* on failure the row stays; meta_open() deletes it as an orphan */
	return rc ? rc : 1;
}

int meta_set_dirty(struct meta *m, uint64_t ino, uint32_t flags)
{
	if (flags &
	    ~(uint32_t)(META_DIRTY_DATA | META_DIRTY_ATTR | META_DIRTY_NAME))
		return -EINVAL;
	lock(m);
	struct inode *in = inode_find(m, ino);
	struct op op;
	int rc = in ? 0 : -ENOENT;
	/* an unlinked inode is never uploaded: no flag to write */
	if (!rc && is_orphan(in)) {
		unlock(m);
		return 0;
	}
	if (!rc)
		rc = op_begin(m, &op);
	if (!rc) {
		op_touch(&op, in);
		in->a.dirty |= flags;
		rc = op_write(m, &op);
		rc = op_end(m, &op, rc);
		if (!rc)
			op_done(m, &op);
	}
	unlock(m);
	return rc;
}

int meta_clear_dirty(struct meta *m, uint64_t ino, uint32_t flags, uint64_t seq)
{
	lock(m);
	struct inode *in = inode_find(m, ino);
	int rc = !in ? -ENOENT : in->seq != seq ? -EAGAIN : 0;
	if (!rc && (in->a.dirty & flags)) {
		/* bookkeeping, not a change: the counter stays */
		struct op op;
		rc = op_begin(m, &op);
		if (!rc) {
			uint32_t old = in->a.dirty;
			in->a.dirty &= ~flags;
			rc = op_end(m, &op, db_inode_put(m, in));
			if (rc)
				in->a.dirty = old;
			else
				op_done(m, &op);
		}
	}
	unlock(m);
	return rc;
}

int meta_set_etag(struct meta *m, uint64_t ino, const char *etag)
{
	size_t n = etag ? strnlen(etag, META_ETAG_MAX + 1) : 0;
	if (n > META_ETAG_MAX)
		return -EINVAL;
	char *copy = NULL;
	if (n && !(copy = strndup(etag, n)))
		return -ENOMEM;
	lock(m);
	struct inode *in = inode_find(m, ino);
	struct op op;
	int rc = in ? op_begin(m, &op) : -ENOENT;
	if (!rc) {
		/* bookkeeping: the change counter stays */
		char *old = in->etag;
		in->etag = copy;
		rc = op_end(m, &op, db_inode_put(m, in));
		if (rc) {
			in->etag = old;
		} else {
			copy = old; /* freed below */
			op_done(m, &op);
		}
	}
	unlock(m);
	free(copy);
	return rc;
}
