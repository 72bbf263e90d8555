/* index.c: the volume as S3 lists it: the first load of a volume on a cache
 * dir, the index snapshot under PREFIX/.tierfs/, and the reconciliation
 * that takes in what other tools changed under the prefix.
 *
 * First mount on an empty cache dir:
 *   PREFIX/.tierfs/index.db exists --> downloaded, adopted (meta.h), opened
 *       as the store while a thread checks it (quick_check; a store that
 *       fails is dropped for the listing): the whole tree at once (inode
 *       numbers, hard links, xattrs), then reconciled in the background
 *       after the mount, since the snapshot may be older than the objects;
 *   no snapshot --> fs_load_tree(): LIST, then HEAD per object (LIST does
 *       not return user metadata), before the mount.
 *
 * Reconciliation (fs_reconcile(), also every reconcile_interval_ms):
 *   1. LIST the prefix into a sorted array, with the set of directories
 *      the keys imply;
 *   2. every listed object: missing here -> HEAD, create; here but with
 *      another ETag or size -> HEAD, update in place (data cache dropped)
 *      or, for hard links and symlinks, replace the name;
 *   3. every local name (children first): not listed and not implied ->
 *      HEAD confirms 404 (listings may lag) -> remove the name here.
 * Local changes win: an inode with a dirty flag, a key with a queued
 * deletion, and any key tierfs itself changed since the LIST began (the
 * touched log, fs_int.h) are left alone. Each change is made holding
 * s3_lock alone, after those checks, so no upload, deletion or rename of
 * ours interleaves with it; updates use meta_setattr_if(), so a
 * local write that lands meanwhile wins too. The kernel's caches are
 * invalidated for what changed once s3_lock is released.
 */
#include "fs_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define INDEX_OBJECT LAYOUT_PRIVATE_DIR "/index.db"
#define FLUSH_OBJECT LAYOUT_PRIVATE_DIR "/flush"
#define FLUSHED_OBJECT LAYOUT_PRIVATE_DIR "/flushed"
#define FLUSH_BODY_MAX 256
#define INDEX_CONTENT_TYPE "application/vnd.sqlite3"

/* ---- the listing ----------------------------------------------------------
 */

struct robj {
	char *key;  /* owned */
	char *path; /* owned; relative to the volume root */
	uint64_t size;
	char etag[S3_ETAG_MAX];
	int is_dir; /* a directory marker */
};

struct listing {
	struct robj *v;
	size_t n, cap;
	char **dirs; /* every directory a key implies; sorted, unique */
	size_t ndirs, capdirs;
	/* fs->stop for a reconciliation, which an unmount need not wait for
	 * (a LIST of 100k objects is 100 requests); NULL for a first load */
	const int *stop;
};

static int robj_cmp(const void *a, const void *b)
{
	const struct robj *x = a, *y = b;
	int c = strcmp(x->path, y->path);
	return c ? c : y->is_dir - x->is_dir;
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int push_dir(struct listing *l, const char *path, size_t len)
{
	if (l->ndirs == l->capdirs) {
		size_t cap = l->capdirs ? l->capdirs * 2 : 256;
		char **v = realloc(l->dirs, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->dirs = v;
		l->capdirs = cap;
	}
	if (!(l->dirs[l->ndirs] = strndup(path, len)))
		return -ENOMEM;
	l->ndirs++;
	return 0;
}

static int list_page(void *ctx, const struct s3_list_page *p)
{
	struct listing *l = ctx;
	if (l->stop && __atomic_load_n(l->stop, __ATOMIC_RELAXED))
		return -ECANCELED;
	for (size_t i = 0; i < p->nentries; i++) {
		if (l->n == l->cap) {
			size_t cap = l->cap ? l->cap * 2 : 1024;
			struct robj *v = realloc(l->v, cap * sizeof(*v));
			if (!v)
				return -ENOMEM;
			l->v = v;
			l->cap = cap;
		}
		struct robj *o = &l->v[l->n];
		memset(o, 0, sizeof(*o));
		if (!(o->key = strdup(p->entries[i].key)))
			return -ENOMEM;
		o->size = p->entries[i].size;
		memcpy(o->etag, p->entries[i].etag, sizeof(o->etag));
		l->n++;
	}
	return 0;
}

static void listing_free(struct listing *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].key);
		free(l->v[i].path);
	}
	for (size_t i = 0; i < l->ndirs; i++)
		free(l->dirs[i]);
	free(l->v);
	free(l->dirs);
	memset(l, 0, sizeof(*l));
}

/* LISTs the prefix, keeps the keys that name paths, sorts them, and
 * derives the implied directories. */
static int listing_load(struct fs *fs, struct listing *l, int stoppable)
{
	struct s3_error e;
	char *prefix = NULL;
	memset(l, 0, sizeof(*l));
	l->stop = stoppable ? &fs->stop : NULL;
	if (*fs->prefix && asprintf(&prefix, "%s/", fs->prefix) < 0)
		return -ENOMEM;
	int rc = s3_list_all(fs->s3, fs->bucket, prefix ? prefix : "", NULL,
			     list_page, l, &e);
	if (rc == -ECANCELED)
		fs_log("reconciliation stopped: the mount is ending");
	else if (rc)
		fs_log("listing s3://%s/%s failed: %s: %s", fs->bucket,
		       prefix ? prefix : "", e.code, e.message);
	free(prefix);
	size_t kept = 0;
	for (size_t i = 0; !rc && i < l->n; i++) {
		struct robj *o = &l->v[i];
		int r = layout_path_of_key(fs->prefix, o->key, &o->path,
					   &o->is_dir);
		if (r == -EINVAL)
			fs_log("key '%s' names no path; not shown", o->key);
		if (r == -ENOMEM)
			rc = r;
		if (r) {
			free(o->key);
			continue;
		}
		l->v[kept++] = *o;
	}
	if (rc) {
		for (size_t i = kept; i < l->n; i++) /* not yet sifted */
			free(l->v[i].key);
		l->n = kept;
		listing_free(l);
		return rc;
	}
	l->n = kept;
	if (l->n) /* UBSan: no NULL base, even for zero elements */
		qsort(l->v, l->n, sizeof(*l->v), robj_cmp);
	for (size_t i = 0; !rc && i < l->n; i++) {
		const char *p = l->v[i].path;
		for (const char *s = strchr(p, '/'); s && !rc;
		     s = strchr(s + 1, '/'))
			rc = push_dir(l, p, (size_t)(s - p));
	}
	if (!rc && l->ndirs) {
		qsort(l->dirs, l->ndirs, sizeof(*l->dirs), str_cmp);
		size_t u = 1;
		for (size_t i = 1; i < l->ndirs; i++) {
			if (strcmp(l->dirs[i], l->dirs[u - 1]) == 0)
				free(l->dirs[i]);
			else
				l->dirs[u++] = l->dirs[i];
		}
		l->ndirs = u;
	}
	if (rc)
		listing_free(l);
	return rc;
}

static const struct robj *listing_find(const struct listing *l,
				       const char *path, int is_dir)
{
	struct robj k = {.path = (char *)path, .is_dir = is_dir};
	if (!l->n)
		return NULL;
	return bsearch(&k, l->v, l->n, sizeof(*l->v), robj_cmp);
}

static int listing_implies(const struct listing *l, const char *path)
{
	return l->ndirs && bsearch(&path, l->dirs, l->ndirs, sizeof(*l->dirs),
				   str_cmp) != NULL;
}

/* ---- one pass ----------------------------------------------------------- */

/* A directory's times from its marker, put back after its children
 * (whose creation bumps them) have been loaded. */
struct dir_times {
	uint64_t ino;
	struct timespec mtime, ctime;
};

/* What the kernel must forget once s3_lock is released. */
struct note {
	uint64_t parent; /* with name: the dentry */
	uint64_t ino;	 /* non-zero: the inode's attributes and pages */
	char *name;	 /* owned; may be NULL */
};

struct rec {
	struct fs *fs;
	int initial; /* the first load: nothing local, nobody mounted */
	struct listing l;
	struct dir_times *dirs;
	size_t ndirs, capdirs;
	struct note *notes;
	size_t nnotes, capnotes;
	unsigned added, updated, removed, busy;
};

static void remember_dir(struct rec *r, uint64_t ino,
			 const struct meta_attr *in)
{
	if (r->ndirs == r->capdirs) {
		size_t cap = r->capdirs ? r->capdirs * 2 : 64;
		struct dir_times *v = realloc(r->dirs, cap * sizeof(*v));
		if (!v)
			return; /* the directory keeps its load time */
		r->dirs = v;
		r->capdirs = cap;
	}
	r->dirs[r->ndirs++] = (struct dir_times){ino, in->mtime, in->ctime};
}

static void note(struct rec *r, uint64_t parent, const char *name, uint64_t ino)
{
	if (r->initial || !r->fs->se)
		return;
	if (r->nnotes == r->capnotes) {
		size_t cap = r->capnotes ? r->capnotes * 2 : 64;
		struct note *v = realloc(r->notes, cap * sizeof(*v));
		if (!v)
			return; /* the kernel's entry times out by itself */
		r->notes = v;
		r->capnotes = cap;
	}
	char *copy = name ? strdup(name) : NULL;
	if (name && !copy)
		return;
	r->notes[r->nnotes++] = (struct note){parent, ino, copy};
}

static void send_notes(struct rec *r)
{
	uint64_t dir = 0;
	for (size_t i = 0; i < r->nnotes; i++) {
		struct note *n = &r->notes[i];
		if (n->ino)
			fuse_lowlevel_notify_inval_inode(r->fs->se, n->ino, 0,
							 0);
		/* a name came or went: the directory's times, and the listing
		 * the kernel keeps of it (fs.c, op_opendir()), which the
		 * dentry's invalidation below leaves alone when the kernel
		 * never looked the name up */
		if (n->name && n->parent != dir) {
			dir = n->parent;
			fuse_lowlevel_notify_inval_inode(r->fs->se, dir, 0, 0);
		}
		/* with writeback caching the kernel keeps its own idea of a
		 * file's size while it has the inode: dropping the dentry
		 * lets an unused inode go, so the next lookup reads ours */
		if (n->name)
			fuse_lowlevel_notify_inval_entry(
				r->fs->se, n->parent, n->name, strlen(n->name));
		free(n->name);
	}
	r->nnotes = 0;
}

static void lock_sync(struct rec *r)
{
	if (!r->initial)
		pthread_rwlock_wrlock(&r->fs->s3_lock);
}

static void unlock_sync(struct rec *r)
{
	if (!r->initial)
		pthread_rwlock_unlock(&r->fs->s3_lock);
}

/* Whether tierfs itself owes S3 a change to key: leave it alone. */
static int ours(struct rec *r, const char *key)
{
	if (r->initial)
		return 0;
	return fs_touched(r->fs, key) || meta_outbox_has(r->fs->meta, key);
}

/* What a HEAD (and, for a symlink, a GET) says of one object. */
struct remote {
	struct meta_attr in; /* mode, uid, gid, size, times */
	char *target;	     /* a symlink's; owned */
	struct layout_xattr *x;
	size_t nx;
	char etag[S3_ETAG_MAX];
};

/* The ETag to keep for an object: the one HEAD (and so a pinned GET)
 * gives. Swift lists a server-side copy of a multipart object under
 * another one ("md5" against HEAD's "md5-N"), and a GET pinned to the
 * listed one fails with 412. */
static const char *object_etag(const struct robj *o, const struct remote *rm)
{
	/* none at all (a server that sends none): "unknown" still says that
	 * there is an object, and an unlink deletes it */
	return rm->etag[0] ? rm->etag : o->etag[0] ? o->etag : FS_ETAG_UNKNOWN;
}

static void remote_free(struct remote *rm)
{
	free(rm->target);
	layout_xattrs_free(rm->x, rm->nx);
	memset(rm, 0, sizeof(*rm));
}

/* -ENOENT when the object is gone. */
static int remote_read(struct fs *fs, const struct robj *o, struct remote *rm)
{
	struct s3_object_info info;
	struct s3_error e;
	struct layout_attrs la;
	memset(rm, 0, sizeof(*rm));
	int rc = s3_head_object(fs->s3, fs->bucket, o->key, &info, &e);
	if (rc)
		return rc;
	layout_attrs_from_info(&info, o->is_dir, &fs->cfg.defaults, &la);
	rm->in = (struct meta_attr){.mode = la.mode,
				    .uid = la.uid,
				    .gid = la.gid,
				    .size = o->is_dir ? 0 : info.size,
				    .atime = la.mtime,
				    .mtime = la.mtime,
				    .ctime = la.ctime};
	memcpy(rm->etag, info.etag, sizeof(rm->etag));
	const char *xv = s3_object_info_meta(&info, "xattr");
	if (xv && layout_xattr_decode(xv, &rm->x, &rm->nx) != 0) {
		fs_log("'%s': unreadable xattr header; xattrs not shown",
		       o->key);
		rm->x = NULL;
		rm->nx = 0;
	}
	if (S_ISLNK(la.mode)) {
		uint64_t len = info.size;
		rm->target = calloc(1, len + 1);
		ssize_t n = rm->target ? s3_get_buf(fs->s3, fs->bucket, o->key,
						    0, S3_TO_END, rm->target,
						    len, NULL, NULL, &e)
				       : -ENOMEM;
		rc = n < 0 ? (int)n : 0;
		rm->in.size = n > 0 ? (uint64_t)n : 0;
		if (n >= 0)
			rm->target[n] = '\0';
	}
	s3_object_info_free(&info);
	if (rc)
		remote_free(rm);
	return rc;
}

/* The directory inode for path, creating implicit directories on the
 * way (clean: S3 has them as key prefixes). */
static int ensure_dir(struct rec *r, const char *path, uint64_t *ino)
{
	struct fs *fs = r->fs;
	uint64_t cur = META_ROOT_INO;
	char *copy = strdup(path), *save = NULL;
	int rc = copy ? 0 : -ENOMEM;
	for (char *c = copy ? strtok_r(copy, "/", &save) : NULL; c && !rc;
	     c = strtok_r(NULL, "/", &save)) {
		struct meta_attr a;
		rc = meta_lookup(fs->meta, cur, c, &a);
		if (rc == -ENOENT) {
			struct timespec t = fs_now_real();
			struct meta_attr in = {
				.mode = S_IFDIR |
					(fs->cfg.defaults.dir_mode & 07777),
				.uid = fs->cfg.defaults.uid,
				.gid = fs->cfg.defaults.gid,
				.atime = t,
				.mtime = t,
				.ctime = t};
			rc = meta_create(fs->meta, cur, c, &in, NULL, &a);
			/* a new inode's counter is 1: nobody else changed it
			 * if it still is */
			if (!rc)
				meta_clear_dirty(fs->meta, a.ino, ~0u, 1);
			if (!rc)
				note(r, cur, c, 0);
		}
		if (!rc && !S_ISDIR(a.mode))
			rc = -ENOTDIR;
		if (!rc)
			cur = a.ino;
	}
	free(copy);
	if (!rc)
		*ino = cur;
	return rc;
}

/* Sets the xattrs of a new inode; returns how many changes that made. */
static unsigned set_xattrs(struct fs *fs, uint64_t ino, const struct remote *rm)
{
	unsigned n = 0;
	for (size_t i = 0; i < rm->nx; i++)
		if (meta_setxattr(fs->meta, ino, rm->x[i].name, rm->x[i].value,
				  rm->x[i].size, 0) == 0)
			n++;
	return n;
}

/* Creates name in parent from the remote object, clean. */
static int create_entry(struct rec *r, uint64_t parent, const char *name,
			const struct robj *o, const struct remote *rm)
{
	struct fs *fs = r->fs;
	struct meta_attr a, out;
	int rc = meta_create(fs->meta, parent, name, &rm->in, rm->target, &a);
	if (rc)
		return rc;
	/* counter 1 after the create; each change below adds one */
	uint64_t seq = 1;
	if (S_ISREG(rm->in.mode)) {
		rc = meta_setattr(fs->meta, a.ino,
				  META_SET_SIZE | META_SET_MTIME |
					  META_SET_CTIME,
				  &rm->in, &out);
		seq += rc == 0;
	}
	seq += set_xattrs(fs, a.ino, rm);
	meta_set_etag(fs->meta, a.ino, object_etag(o, rm));
	if (S_ISDIR(rm->in.mode))
		remember_dir(r, a.ino, &rm->in);
	/* -EAGAIN: the user changed it already; it uploads as theirs */
	meta_clear_dirty(fs->meta, a.ino, ~0u, seq);
	note(r, parent, name, 0);
	r->added++;
	return 0;
}

/* Splits path into its parent directory's inode (created if implied) and
 * its last component (a pointer into path). */
static int parent_of(struct rec *r, char *path, uint64_t *parent,
		     const char **name)
{
	char *slash = strrchr(path, '/');
	*parent = META_ROOT_INO;
	*name = slash ? slash + 1 : path;
	if (!slash)
		return 0;
	*slash = '\0';
	int rc = ensure_dir(r, path, parent);
	*slash = '/';
	return rc;
}

/* A listed object with no local name, or a marker over an implicit
 * directory: take it in. */
static int take_object(struct rec *r, const struct robj *o)
{
	struct fs *fs = r->fs;
	struct remote rm;
	uint64_t parent;
	const char *name;
	int rc = remote_read(fs, o, &rm);
	if (rc == -ENOENT) /* deleted since the listing */
		return 0;
	if (rc)
		return rc;
	char *path = strdup(o->path);
	if (!path) {
		remote_free(&rm);
		return -ENOMEM;
	}
	lock_sync(r);
	if (ours(r, o->key))
		goto out;
	rc = parent_of(r, path, &parent, &name);
	struct meta_attr a = {0};
	if (!rc)
		rc = meta_lookup(fs->meta, parent, name, &a);
	if (rc == -ENOENT) {
		rc = create_entry(r, parent, name, o, &rm);
	} else if (rc == 0 && S_ISDIR(a.mode) && S_ISDIR(rm.in.mode)) {
		/* the marker of a directory we have: its attributes */
		uint64_t seq;
		rc = meta_change_seq(fs->meta, a.ino, &seq);
		if (!rc)
			rc = meta_setattr_if(
				fs->meta, a.ino, seq,
				META_SET_MODE | META_SET_UID | META_SET_GID |
					META_SET_MTIME | META_SET_CTIME,
				&rm.in, &a);
		if (!rc) {
			meta_set_etag(fs->meta, a.ino, object_etag(o, &rm));
			remember_dir(r, a.ino, &rm.in);
			note(r, 0, NULL, a.ino);
		}
		rc = rc == -EAGAIN ? 0 : rc;
	} else if (rc == 0) {
		rc = 0; /* made here meanwhile, or a type clash: ours wins */
	}
out:
	unlock_sync(r);
	if (rc)
		fs_log("loading '%s': %s", o->key, strerror(-rc));
	remote_free(&rm);
	free(path);
	return rc == -ENOMEM ? rc : 0; /* one bad object does not stop it */
}

/* A listed object whose local name holds other content: re-read it. */
static int refresh_object(struct rec *r, const struct robj *o, uint64_t parent,
			  const char *name, const struct meta_attr *was)
{
	struct fs *fs = r->fs;
	struct remote rm;
	int rc = remote_read(fs, o, &rm);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	lock_sync(r);
	struct meta_attr a;
	uint64_t seq, ino;
	rc = meta_lookup(fs->meta, parent, name, &a);
	if (rc || a.ino != was->ino || a.dirty || ours(r, o->key)) {
		rc = 0; /* changed here meanwhile: ours wins */
		goto out;
	}
	char known[S3_ETAG_MAX];
	meta_get_etag(fs->meta, a.ino, known, sizeof(known));
	if (S_ISREG(a.mode) && rm.etag[0] && strcmp(rm.etag, known) == 0 &&
	    rm.in.size == a.size) {
		rc = 0; /* the object we have, listed under another ETag */
		goto out;
	}
	rc = meta_change_seq(fs->meta, a.ino, &seq);
	if (rc)
		goto out;
	if (S_ISREG(a.mode) && S_ISREG(rm.in.mode) && a.nlink == 1) {
		/* in place: the inode number stays, the cached bytes go */
		rc = data_drop_clean(fs->data, a.ino);
		if (!rc)
			rc = meta_setattr_if(
				fs->meta, a.ino, seq,
				META_SET_MODE | META_SET_UID | META_SET_GID |
					META_SET_SIZE | META_SET_MTIME |
					META_SET_CTIME,
				&rm.in, &a);
		if (!rc) {
			meta_set_etag(fs->meta, a.ino, object_etag(o, &rm));
			note(r, parent, name, a.ino);
			r->updated++;
		} else if (rc == -EBUSY || rc == -EAGAIN) {
			r->busy++; /* open or written: next time */
			rc = 0;
		}
		goto out;
	}
	/* a symlink, a hard link or a new type: a new inode for the name */
	rc = meta_unlink(fs->meta, parent, name, 0, &ino);
	if (!rc) {
		note(r, parent, name, 0);
		if (meta_getattr(fs->meta, ino, &a) == -ENOENT)
			data_remove(fs->data, ino);
		rc = create_entry(r, parent, name, o, &rm);
	}
out:
	unlock_sync(r);
	if (rc)
		fs_log("refreshing '%s': %s", o->key, strerror(-rc));
	remote_free(&rm);
	return rc == -ENOMEM ? rc : 0;
}

/* Walks path's components from the root. */
static int lookup_path(struct fs *fs, const char *path, struct meta_attr *a,
		       uint64_t *parent)
{
	char *copy = strdup(path), *save = NULL;
	uint64_t cur = META_ROOT_INO, par = 0;
	int rc = copy ? 0 : -ENOMEM;
	for (char *c = copy ? strtok_r(copy, "/", &save) : NULL; c && !rc;
	     c = strtok_r(NULL, "/", &save)) {
		rc = meta_lookup(fs->meta, cur, c, a);
		par = cur;
		cur = a->ino;
	}
	free(copy);
	if (!rc)
		*parent = par;
	return rc;
}

/* Step 2: every listed object. */
static int take_listing(struct rec *r)
{
	struct fs *fs = r->fs;
	int rc = 0;
	for (size_t i = 0; i < r->l.n && rc != -ENOMEM; i++) {
		const struct robj *o = &r->l.v[i];
		struct meta_attr a;
		uint64_t parent;
		int lr = r->initial ? -ENOENT
				    : lookup_path(fs, o->path, &a, &parent);
		if (lr == -ENOENT || lr == -ENOTDIR) {
			rc = take_object(r, o);
			continue;
		}
		if (lr) {
			rc = lr;
			continue;
		}
		if (a.dirty || (S_ISDIR(a.mode) ? 1 : 0) != o->is_dir)
			continue; /* ours wins; a type clash stays ours */
		char etag[S3_ETAG_MAX];
		meta_get_etag(fs->meta, a.ino, etag, sizeof(etag));
		/* hard links' other names are copies, whose ETag may differ
		 * (a copied multipart object): compare their sizes only */
		int same = o->is_dir || a.nlink > 1
				   ? (o->is_dir ? strcmp(etag, o->etag) == 0
						: a.size == o->size)
				   : strcmp(etag, o->etag) == 0 &&
					     a.size == o->size;
		if (same)
			continue;
		if (o->is_dir) {
			rc = take_object(r, o);
			continue;
		}
		const char *slash = strrchr(o->path, '/');
		rc = refresh_object(r, o, parent, slash ? slash + 1 : o->path,
				    &a);
	}
	return rc;
}

/* One local name under a directory, for step 3. */
struct child {
	char *name;
	struct meta_attr a;
};

struct children {
	struct child *v;
	size_t n, cap;
	int rc;
};

static int collect_child(void *ctx, const char *name, const struct meta_attr *a,
			 uint64_t next_off)
{
	struct children *c = ctx;
	(void)next_off;
	if (c->n == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 32;
		struct child *v = realloc(c->v, cap * sizeof(*v));
		if (!v) {
			c->rc = -ENOMEM;
			return 1;
		}
		c->v = v;
		c->cap = cap;
	}
	if (!(c->v[c->n].name = strdup(name))) {
		c->rc = -ENOMEM;
		return 1;
	}
	c->v[c->n++].a = *a;
	return 0;
}

/* Removes the local name at path, which S3 does not list, once a HEAD has
 * confirmed the object is gone. */
static int drop_name(struct rec *r, uint64_t parent, const struct child *ch,
		     const char *path)
{
	struct fs *fs = r->fs;
	int is_dir = S_ISDIR(ch->a.mode);
	char *key = NULL;
	struct s3_object_info info;
	struct s3_error e;
	int rc = layout_key(fs->prefix, path, is_dir, &key);
	if (rc)
		return rc;
	rc = s3_head_object(fs->s3, fs->bucket, key, &info, &e);
	if (rc == 0) { /* the listing lagged behind */
		s3_object_info_free(&info);
		free(key);
		return 0;
	}
	if (rc != -ENOENT) {
		free(key);
		return rc;
	}
	lock_sync(r);
	struct meta_attr a;
	uint64_t ino;
	rc = meta_lookup(fs->meta, parent, ch->name, &a);
	if (rc || a.ino != ch->a.ino || a.dirty || ours(r, key)) {
		rc = 0;
	} else {
		rc = meta_unlink(fs->meta, parent, ch->name, is_dir, &ino);
		if (rc == -ENOTEMPTY) {
			rc = 0; /* something of ours is in it */
		} else if (rc == 0) {
			note(r, parent, ch->name, 0);
			if (meta_getattr(fs->meta, ino, &a) == -ENOENT)
				data_remove(fs->data, ino);
			r->removed++;
		}
	}
	unlock_sync(r);
	free(key);
	return rc;
}

/* Step 3, below one directory: children first. */
static int drop_unlisted(struct rec *r, uint64_t dir, const char *dir_path)
{
	struct fs *fs = r->fs;
	struct children c = {0};
	int rc = meta_readdir(fs->meta, dir, 0, collect_child, &c);
	if (!rc)
		rc = c.rc;
	for (size_t i = 0; !rc && i < c.n; i++) {
		const struct child *ch = &c.v[i];
		char *path = NULL;
		if (*dir_path ? asprintf(&path, "%s/%s", dir_path, ch->name) < 0
			      : !(path = strdup(ch->name))) {
			rc = -ENOMEM;
			break;
		}
		int is_dir = S_ISDIR(ch->a.mode);
		if (is_dir)
			rc = drop_unlisted(r, ch->a.ino, path);
		int listed = listing_find(&r->l, path, is_dir) ||
			     (is_dir && listing_implies(&r->l, path));
		if (!rc && !listed && !ch->a.dirty) {
			rc = drop_name(r, dir, ch, path);
			if (rc && rc != -ENOMEM) {
				fs_log("checking '%s': %s", path,
				       strerror(-rc));
				rc = 0;
			}
		}
		free(path);
	}
	for (size_t i = 0; i < c.n; i++)
		free(c.v[i].name);
	free(c.v);
	return rc;
}

static int run_pass(struct rec *r)
{
	struct fs *fs = r->fs;
	uint64_t t0 = clock_now_ms();
	if (!r->initial)
		fs_touch_begin(fs);
	int rc = listing_load(fs, &r->l, !r->initial);
	/* a listing that ages before it is used */
	if (!rc && !r->initial)
		fs_debug_pause("TIERFS_DEBUG_RECONCILE_PAUSE_MS");
	if (!rc)
		rc = take_listing(r);
	if (!rc && !r->initial)
		rc = drop_unlisted(r, META_ROOT_INO, "");
	/* children bumped their directories' times: put the markers' back */
	for (size_t i = 0; !rc && r->initial && i < r->ndirs; i++) {
		struct meta_attr in = {.mtime = r->dirs[i].mtime,
				       .ctime = r->dirs[i].ctime},
				 out;
		rc = meta_setattr(fs->meta, r->dirs[i].ino,
				  META_SET_MTIME | META_SET_CTIME, &in, &out);
		uint64_t seq;
		if (!rc && !meta_change_seq(fs->meta, r->dirs[i].ino, &seq))
			meta_clear_dirty(fs->meta, r->dirs[i].ino, ~0u, seq);
	}
	if (!r->initial)
		fs_touch_end(fs);
	send_notes(r);
	if (!rc)
		rc = meta_commit(fs->meta);
	if (rc != -ECANCELED)
		fs_log("reconciled with %zu objects in %llu ms: %u added, %u "
		       "updated, %u removed, %u busy (next time)",
		       r->l.n, (unsigned long long)(clock_now_ms() - t0),
		       r->added, r->updated, r->removed, r->busy);
	listing_free(&r->l);
	free(r->dirs);
	free(r->notes);
	return rc;
}

int fs_load_tree(struct fs *fs)
{
	struct rec r = {.fs = fs, .initial = 1};
	return run_pass(&r);
}

int fs_reconcile(struct fs *fs)
{
	struct rec r = {.fs = fs};
	return run_pass(&r);
}

/* ---- the index snapshot -------------------------------------------------- */

/* The key of a private object (".tierfs/NAME") under prefix. */
static int private_key(const char *prefix, const char *rel, char **key)
{
	int n = *prefix ? asprintf(key, "%s/%s", prefix, rel)
			: asprintf(key, "%s", rel);
	return n < 0 ? -ENOMEM : 0;
}

static int index_key(const char *prefix, char **key)
{
	return private_key(prefix, INDEX_OBJECT, key);
}

int fs_snapshot(struct fs *fs)
{
	char tmp[PATH_MAX], *key = NULL, etag[S3_ETAG_MAX];
	struct s3_error e;
	struct stat st;
	if (fs->cfg.read_only || !fs->cache_dir)
		return 0;
	uint64_t changes = meta_changes(fs->meta);
	if (fs->snap_known && changes == fs->snap_changes)
		return 0;
	uint64_t t0 = clock_now_ms();
	snprintf(tmp, sizeof(tmp), "%s/index.db.tmp", fs->cache_dir);
	int rc = meta_snapshot(fs->meta, tmp);
	int fd = rc ? -1 : open(tmp, O_RDONLY | O_CLOEXEC);
	if (!rc && (fd < 0 || fstat(fd, &st) != 0))
		rc = -errno;
	if (!rc)
		rc = index_key(fs->prefix, &key);
	if (!rc) {
		/* no other writer of this key: no lock */
		struct s3_put_opts o = {INDEX_CONTENT_TYPE, NULL, 0};
		rc = s3_upload_fd(fs->s3, fs->bucket, key, fd, 0,
				  (uint64_t)st.st_size, &o, etag, &e);
		if (rc)
			fs_log("index snapshot upload failed: %s: %s", e.code,
			       e.message);
	}
	if (fd >= 0)
		close(fd);
	unlink(tmp);
	if (!rc) {
		fs->snap_changes = changes;
		fs->snap_known = 1;
		fs_log("index snapshot: %lld bytes in %llu ms",
		       (long long)st.st_size,
		       (unsigned long long)(clock_now_ms() - t0));
	}
	free(key);
	return rc;
}

void fs_remove_store(const char *path)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal"};
	char p[PATH_MAX + 16];
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", path, sfx[i]);
		unlink(p);
	}
}

/* Whether the last close of path's connection took its WAL back into it:
 * only then is path alone the whole store, and may be renamed. */
static int wal_gone(const char *path)
{
	char p[PATH_MAX + 8];
	snprintf(p, sizeof(p), "%s-wal", path);
	return access(p, F_OK) != 0 && errno == ENOENT;
}

int fs_fetch_snapshot(s3_client *s3, const char *bucket, const char *prefix,
		      const char *db_path)
{
	char tmp[PATH_MAX], *key = NULL;
	struct s3_error e;
	if (snprintf(tmp, sizeof(tmp), "%s.fetch", db_path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	int rc = index_key(prefix, &key);
	if (rc)
		return rc;
	fs_remove_store(tmp);
	int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(key);
		return -errno;
	}
	rc = s3_download_fd(s3, bucket, key, fd, NULL, &e);
	if (rc && rc != -ENOENT)
		fs_log("reading the index snapshot '%s': %s: %s", key, e.code,
		       e.message);
	/* the disk writes it while it is checked and loaded; the caller's
	 * fsync before the store counts waits for what is left (an fsync here
	 * cost 8 ms of a 0.29 s first mount of 100k files) */
	if (!rc)
		sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
	close(fd);
	if (!rc)
		rc = meta_snapshot_adopt(tmp);
	if (!rc && !wal_gone(tmp))
		rc = -EIO;
	if (!rc && rename(tmp, db_path) != 0)
		rc = -errno;
	if (rc)
		fs_remove_store(tmp);
	free(key);
	return rc;
}

/* ---- recovery ------------------------------------------------------------ */

int fs_find_stale_uploads(s3_client *s3, const char *bucket, const char *prefix,
			  struct fs_stale_uploads *out)
{
	struct s3_error e;
	char *pfx = NULL;
	const char *key_marker = NULL, *id_marker = NULL;
	int rc = 0;
	out->pages = NULL;
	out->npages = 0;
	if (*prefix && asprintf(&pfx, "%s/", prefix) < 0)
		return -ENOMEM;
	for (;;) {
		struct s3_upload_list l;
		rc = s3_mpu_list(s3, bucket, pfx ? pfx : "", key_marker,
				 id_marker, &l, &e);
		if (rc) {
			fs_log("listing multipart uploads failed: %s: %s",
			       e.code, e.message);
			break;
		}
		struct s3_upload_list *v = realloc(
			out->pages, (out->npages + 1) * sizeof(*out->pages));
		if (!v) {
			s3_upload_list_free(&l);
			rc = -ENOMEM;
			break;
		}
		out->pages = v;
		out->pages[out->npages++] = l;
		if (!l.truncated || !l.next_key_marker)
			break;
		key_marker = l.next_key_marker;
		id_marker = l.next_upload_id_marker;
	}
	free(pfx);
	return rc;
}

void fs_abort_stale_uploads(struct fs *fs, struct fs_stale_uploads *stale)
{
	struct s3_error e;
	unsigned aborted = 0;
	for (size_t p = 0; p < stale->npages; p++) {
		struct s3_upload_list *l = &stale->pages[p];
		/* one writer per volume: an upload in progress here is one a
		 * dead process of ours left; its inode is still dirty */
		for (size_t i = 0; fs && !fs->cfg.read_only && i < l->nuploads;
		     i++)
			if (s3_mpu_abort(fs->s3, fs->bucket, l->uploads[i].key,
					 l->uploads[i].upload_id, &e) == 0)
				aborted++;
		s3_upload_list_free(l);
	}
	free(stale->pages);
	stale->pages = NULL;
	stale->npages = 0;
	if (aborted)
		fs_log("aborted %u multipart uploads left by an earlier run",
		       aborted);
}

/* ---- the background thread ----------------------------------------------- */

/* Renews the write lease; another holder fences this mount for good. */
static void renew_lease(struct fs *fs)
{
	char why[256];
	if (__atomic_load_n(&fs->fenced, __ATOMIC_RELAXED))
		return;
	int rc = lease_renew(fs->cfg.lease, why, sizeof(why));
	if (rc != -EBUSY) {
		char what[96];
		snprintf(what, sizeof(what), "lease renewal: %s",
			 strerror(-rc));
		fs_health_note(fs, rc, what);
	}
	if (rc == -EBUSY) {
		__atomic_store_n(&fs->fenced, 1, __ATOMIC_RELAXED);
		fs_log("the write lease was taken over (%s): this mount is "
		       "read-only from now, and what it had not uploaded "
		       "stays in its cache dir",
		       why);
	} else if (rc) {
		fs_log("renewing the write lease failed: %s; will retry",
		       strerror(-rc));
	}
}

/* A snapshot of a live volume (the CSI controller's CreateSnapshot) asks
 * the lease holder to send everything first: it puts PREFIX/.tierfs/flush
 * ("token=T") and copies the prefix once PREFIX/.tierfs/flushed carries
 * the same token, which is written here after fs_flush_all() succeeded.
 * Looked for at each lease renewal, so a request waits at most
 * --lease-interval. */
static void answer_flush_request(struct fs *fs)
{
	char *key = NULL, *done_key = NULL, body[FLUSH_BODY_MAX + 1];
	char token[FLUSH_TOKEN_MAX];
	struct s3_error e;
	if (private_key(fs->prefix, FLUSH_OBJECT, &key) ||
	    private_key(fs->prefix, FLUSHED_OBJECT, &done_key))
		goto out;
	ssize_t n = s3_get_buf(fs->s3, fs->bucket, key, 0, S3_TO_END, body,
			       FLUSH_BODY_MAX, NULL, NULL, &e);
	if (n < 0) /* -ENOENT: nobody asks */
		goto out;
	body[n] = '\0';
	const char *t = strstr(body, "token=");
	size_t tl = t ? strcspn(t + 6, "\n") : 0;
	if (!t || tl == 0 || tl >= sizeof(token))
		goto out;
	memcpy(token, t + 6, tl);
	token[tl] = '\0';
	if (strcmp(token, fs->flushed_token) == 0)
		goto out; /* answered already */
	int rc = fs_flush_all(fs);
	if (rc) {
		fs_log("a snapshot asked for a flush, which failed (%s); will "
		       "retry",
		       strerror(-rc));
		goto out;
	}
	int bl = snprintf(body, sizeof(body), "token=%s\nflushed=%lld\n", token,
			  (long long)time(NULL));
	struct s3_put_opts o = {"text/plain", NULL, 0};
	if (s3_put_buf(fs->s3, fs->bucket, done_key, body, (size_t)bl, &o, NULL,
		       &e) == 0) {
		snprintf(fs->flushed_token, sizeof(fs->flushed_token), "%s",
			 token);
		fs_log("flushed for a snapshot (token %s)", token);
	}
out:
	free(key);
	free(done_key);
}

static void *bg_main(void *arg)
{
	struct fs *fs = arg;
	uint64_t now = clock_now_ms();
	uint64_t snap_every = fs->cfg.snapshot_interval_ms;
	uint64_t rec_every = fs->cfg.reconcile_interval_ms;
	uint64_t next_snap = snap_every ? now + snap_every : UINT64_MAX;
	uint64_t next_rec = rec_every ? now + rec_every : UINT64_MAX;
	uint64_t snap_check = next_snap; /* when to look next */
	uint64_t next_lease = fs->cfg.lease && !fs->cfg.read_only
				      ? now + fs->cfg.lease_interval_ms
				      : UINT64_MAX;
	pthread_mutex_lock(&fs->lock);
	while (!fs->stop) {
		now = clock_now_ms();
		if (fs->reconcile_soon)
			next_rec = now;
		uint64_t due = snap_check < next_rec ? snap_check : next_rec;
		if (next_lease < due)
			due = next_lease;
		if (due > now) {
			uint64_t wait = due - now;
			/* the health file and the live quota, every tick */
			pthread_mutex_unlock(&fs->lock);
			fs_health_tick(fs);
			pthread_mutex_lock(&fs->lock);
			if (fs->stop)
				break;
			if (wait > FS_BG_TICK_MS)
				wait = FS_BG_TICK_MS;
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += (time_t)(wait / 1000);
			ts.tv_nsec += (long)(wait % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&fs->bg_wake, &fs->lock, &ts);
			continue;
		}
		int rec = next_rec <= now;
		fs->reconcile_soon = 0;
		size_t ndirty = fs->ndirty;
		pthread_mutex_unlock(&fs->lock);
		if (next_lease <= now) {
			renew_lease(fs);
			if (!__atomic_load_n(&fs->fenced, __ATOMIC_RELAXED))
				answer_flush_request(fs);
			next_lease = clock_now_ms() + fs->cfg.lease_interval_ms;
		} else if (rec) {
			int rc = fs_reconcile(fs);
			if (rc && rc != -ECANCELED)
				fs_log("reconciliation failed; will retry");
			next_rec = rec_every ? clock_now_ms() + rec_every
					     : UINT64_MAX;
		} else if (ndirty == 0 ||
			   now - next_snap >= 3 * (uint64_t)snap_every) {
			/* a quiet moment gives the best snapshot; a busy
			 * volume gets one anyway three intervals late */
			fs_snapshot(fs);
			next_snap = clock_now_ms() + snap_every;
			snap_check = next_snap;
		} else {
			/* look again in a second, still counting from
			 * when it fell due */
			snap_check = now + 1000;
		}
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
	return NULL;
}

int fs_start(struct fs *fs, unsigned flags)
{
	if (flags & FS_START_FROM_SNAPSHOT) {
		/* S3 has this very index: none is owed until it changes */
		fs->snap_changes = meta_changes(fs->meta);
		fs->snap_known = 1;
	}
	pthread_mutex_lock(&fs->lock);
	fs->reconcile_soon = (flags & FS_START_RECONCILE) != 0;
	pthread_mutex_unlock(&fs->lock);
	int rc = -pthread_create(&fs->bg, NULL, bg_main, fs);
	if (!rc)
		fs->has_bg = 1;
	return rc;
}

void fs_bg_stop(struct fs *fs)
{
	if (!fs->has_bg)
		return;
	pthread_mutex_lock(&fs->lock);
	/* atomic: a reconciliation's listing reads it without the lock */
	__atomic_store_n(&fs->stop, 1, __ATOMIC_RELAXED);
	pthread_cond_signal(&fs->bg_wake);
	pthread_mutex_unlock(&fs->lock);
	pthread_join(fs->bg, NULL);
	fs->has_bg = 0;
}
