/* fs.c: the FUSE edge of tierfs: low-level handlers over meta, data and S3.
 *
 * Lookup-count rule (STYLE 10): every entry or create reply adds one
 * reference with meta_ref(); forget drops nlookup with meta_forget(); the
 * root is pinned by the meta store. readdirplus refs each entry it adds.
 *
 * Dirty life of an inode (step 1, see fs.h):
 *   CLEAN --write/setattr/xattr/create--> DIRTY (meta flag + dirty set)
 *   DIRTY --upload_delay passes (a large file still being written: once
 *            its writes stop; see busy_locked()), or fsync--> SYNCING
 *   SYNCING --ok--> CLEAN
 *   SYNCING --write meanwhile--> stays DIRTY (change seq / dirty snapshot)
 *   SYNCING --S3 error--> DIRTY, requeued and retried upload_delay_ms later
 */
#include "fs_int.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "../s3/buf.h"
#include "acl.h"
#include "opens.h"
#include "serve.h"

#define XATTR_LIST_MAX_BYTES 65536

static void close_all_handles(struct fs *fs);
static struct handle **handle_slot(struct fs *fs, uint64_t ino);
static int pt_settle(struct fs *fs, uint64_t ino);
static void pt_settle_all(struct fs *fs);
static void pt_guard(struct fs *fs);
static void open_opens(struct fs *fs);
static void end_outside(struct fs *fs, uint64_t ino, uint64_t size);
static int uploading(struct fs *fs, uint64_t ino);
static uint32_t pt_writing(struct fs *fs, uint64_t ino);
static void pt_owe(struct fs *fs, uint64_t ino, int owe);

struct timespec fs_now_real(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ts;
}

unsigned fs_debug_ms(const char *env, unsigned dflt)
{
	const char *ms = getenv(env);
	return ms ? (unsigned)strtoul(ms, NULL, 10) : dflt;
}

void fs_debug_pause(const char *env)
{
	unsigned ms = fs_debug_ms(env, 0);
	if (ms)
		usleep((useconds_t)ms * 1000);
}

/* Fault injection for tests (TIERFS_DEBUG_STOP_AT=OP:NAME): the worker
 * stops itself (SIGSTOP) once it has made the change of an OP on an
 * entry NAME, before it replies, so that a test can kill it there and
 * see the next worker answer the request the kernel sends again. The
 * request sent again does not stop. */
static void debug_stop_at(struct fs *fs, const char *op, const char *name)
{
	const char *at = fs->debug_stop_at;
	if (!at) /* every create and unlink asks */
		return;
	size_t n = strlen(op);
	if (strncmp(at, op, n) == 0 && at[n] == ':' &&
	    strcmp(at + n + 1, name) == 0 && !serve_request_resent())
		raise(SIGSTOP);
}

void fs_log(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("tierfs: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

void fs_config_init(struct fs_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->prefix = "";
	cfg->defaults = (struct layout_defaults){0, 0, 0644, 0755};
	cfg->upload_delay_ms = FS_DEFAULT_UPLOAD_DELAY_MS;
	cfg->entry_timeout = FS_DEFAULT_TIMEOUT_S;
	cfg->attr_timeout = FS_DEFAULT_TIMEOUT_S;
	cfg->snapshot_interval_ms = FS_DEFAULT_SNAPSHOT_INTERVAL_MS;
	cfg->reconcile_interval_ms = FS_DEFAULT_RECONCILE_INTERVAL_MS;
	cfg->lease_interval_ms = LEASE_RENEW_S * 1000u;
	cfg->passthrough = 1;
}

/* Mounted read-only, or fenced: another node took the write lease. */
static int read_only(struct fs *fs)
{
	return fs->cfg.read_only ||
	       __atomic_load_n(&fs->fenced, __ATOMIC_RELAXED);
}

/* --- the dirty set ------------------------------------------------------ */

/* --- the dirty set's index (fs->lock held) --- */

static size_t dirty_home(const struct fs *fs, uint64_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 17) &
	       (fs->dirty_idx_cap - 1);
}

/* Where ino is in fs->dirty, or SIZE_MAX. */
static size_t dirty_pos(const struct fs *fs, uint64_t ino)
{
	if (!fs->dirty_idx) {
		for (size_t i = 0; i < fs->ndirty; i++)
			if (fs->dirty[i].ino == ino)
				return i;
		return SIZE_MAX;
	}
	for (size_t h = dirty_home(fs, ino);;
	     h = (h + 1) & (fs->dirty_idx_cap - 1)) {
		uint32_t v = fs->dirty_idx[h];
		if (v == 0)
			return SIZE_MAX;
		if (fs->dirty[v - 1].ino == ino)
			return v - 1;
	}
}

static void dirty_idx_put(struct fs *fs, size_t pos)
{
	size_t h = dirty_home(fs, fs->dirty[pos].ino);
	while (fs->dirty_idx[h])
		h = (h + 1) & (fs->dirty_idx_cap - 1);
	fs->dirty_idx[h] = (uint32_t)(pos + 1);
}

/* Rebuilds the index for fs->ndirty + room entries; without memory (or
 * past 2^31 entries) there is none and dirty_pos() searches. */
static void dirty_reindex(struct fs *fs, size_t room)
{
	size_t want = 64, n = fs->ndirty + room;
	while (want < 2 * n)
		want *= 2;
	free(fs->dirty_idx);
	fs->dirty_idx = NULL;
	fs->dirty_idx_cap = 0;
	if (n >= (1u << 31))
		return;
	fs->dirty_idx = calloc(want, sizeof(*fs->dirty_idx));
	if (!fs->dirty_idx)
		return;
	fs->dirty_idx_cap = want;
	for (size_t i = 0; i < fs->ndirty; i++)
		dirty_idx_put(fs, i);
}

/* A burst window's length: one upload delay (1 ms at least). */
static uint64_t burst_window(const struct fs *fs)
{
	return fs->cfg.upload_delay_ms ? fs->cfg.upload_delay_ms : 1;
}

/* Moves the burst windows up to now. */
static void burst_roll_locked(struct fs *fs, uint64_t now)
{
	uint64_t w = burst_window(fs);
	if (now >= fs->burst_start_ms + 2 * w) {
		fs->burst_prev = fs->burst_now = 0;
		fs->burst_start_ms = now;
	} else if (now >= fs->burst_start_ms + w) {
		fs->burst_prev = fs->burst_now;
		fs->burst_now = 0;
		fs->burst_start_ms += w;
	}
}

/* Whether new inodes came into the dirty set at FS_BURST_FILES or more
 * per upload delay lately: the current window's count plus the share of
 * the last one that still falls within one delay of now. */
static int burst_on_locked(struct fs *fs, uint64_t now)
{
	uint64_t w = burst_window(fs);
	burst_roll_locked(fs, now);
	/* now may be a little before a start another thread just set */
	uint64_t into = now > fs->burst_start_ms ? now - fs->burst_start_ms : 0;
	uint64_t n = fs->burst_now + fs->burst_prev * (w - into) / w;
	return n >= FS_BURST_FILES;
}

/* Puts ino in the dirty set, due since_ms + upload_delay_ms. If memory
 * runs out the meta store's flag still says dirty: the next mount (see
 * load_dirty()) uploads it. flags != 0: a handler's change, which counts
 * towards a burst (take_due()). */
static void dirty_add(struct fs *fs, uint64_t ino, uint64_t since_ms,
		      uint32_t flags)
{
	pthread_mutex_lock(&fs->lock);
	size_t i = dirty_pos(fs, ino);
	if (i != SIZE_MAX) {
		fs->dirty[i].flags |= flags;
		if (flags && since_ms > fs->dirty[i].last_ms)
			fs->dirty[i].last_ms = since_ms;
	} else {
		if (flags) {
			burst_roll_locked(fs, since_ms);
			fs->burst_now++;
		}
		if (fs->ndirty == fs->capdirty) {
			size_t cap = fs->capdirty ? fs->capdirty * 2 : 64;
			struct dirty *d = realloc(fs->dirty, cap * sizeof(*d));
			if (!d) {
				pthread_mutex_unlock(&fs->lock);
				return;
			}
			fs->dirty = d;
			fs->capdirty = cap;
		}
		fs->dirty[fs->ndirty++] =
			(struct dirty){ino, since_ms, since_ms, flags};
		if (fs->dirty_idx && 2 * fs->ndirty <= fs->dirty_idx_cap)
			dirty_idx_put(fs, fs->ndirty - 1);
		else
			dirty_reindex(fs, fs->ndirty);
	}
	pthread_mutex_unlock(&fs->lock);
}

/* 1 when ino is queued with all of flags already recorded; its last
 * change is then now_ms. */
static int already_dirty(struct fs *fs, uint64_t ino, uint32_t flags,
			 uint64_t now_ms)
{
	pthread_mutex_lock(&fs->lock);
	size_t i = dirty_pos(fs, ino);
	int yes = i != SIZE_MAX && (fs->dirty[i].flags & flags) == flags;
	if (yes && now_ms > fs->dirty[i].last_ms)
		fs->dirty[i].last_ms = now_ms;
	pthread_mutex_unlock(&fs->lock);
	return yes;
}

static void mark_dirty(struct fs *fs, uint64_t ino, uint32_t flags)
{
	uint64_t now = clock_now_ms();
	/* a write to a file already queued costs no metadata write; but not
	 * while the file uploads. That upload may have taken it off the
	 * queue before a write queued it again, and then read the change
	 * counter and the bytes: the change counter must move, or it calls
	 * the file clean and nothing sends what was written meanwhile.
	 * Checked first: a write seen before the claim was in the cache file
	 * before the upload read it */
	if (flags && !uploading(fs, ino) && already_dirty(fs, ino, flags, now))
		return;
	if (meta_set_dirty(fs->meta, ino, flags) == 0)
		dirty_add(fs, ino, now, flags);
}

/* Queues what an earlier run left dirty (a crash, or S3 down at unmount),
 * due at once. That run may have ended with requests in flight (a PUT, a
 * DELETE) that S3 applies after this one starts: Swift orders them by when
 * its proxy takes them up, which can be after our own, so a dead process's
 * PUT could bring back what we delete. Then our S3 changes wait
 * FS_SETTLE_MS (settle_wait()) to come last. */
static int load_dirty(struct fs *fs)
{
	uint64_t *inos = NULL, id;
	char *key = NULL;
	size_t n = 0;
	int rc = meta_dirty_list(fs->meta, &inos, &n);
	for (size_t i = 0; rc == 0 && i < n; i++)
		dirty_add(fs, inos[i], 0, 0);
	if (n)
		fs_log("%zu inodes left dirty by an earlier run are queued for "
		       "upload",
		       n);
	free(inos);
	ssize_t queued = meta_outbox_peek(fs->meta, 1, &id, &key);
	free(queued > 0 ? key : NULL);
	if (!rc && (n || queued > 0))
		fs->settle_until_ms = clock_now_ms() + FS_SETTLE_MS;
	return rc;
}

/* Drops the cache files of inodes the store no longer has. A crash can
 * leave them: between the store's deletion of an inode and the removal of
 * its files, or between a create's new cache file and the store's commit
 * of the inode. A dirty one would never be evicted, nor uploaded. */
static void drop_orphans(struct fs *fs)
{
	uint64_t *inos = NULL;
	size_t n = 0, dropped = 0;
	struct meta_attr a;
	if (data_inos(fs->data, &inos, &n))
		return; /* they wait for the next start */
	for (size_t i = 0; i < n; i++)
		if (meta_getattr(fs->meta, inos[i], &a) == -ENOENT &&
		    data_remove(fs->data, inos[i]) == 0)
			dropped++;
	free(inos);
	if (dropped)
		fs_log("dropped the cache files of %zu inodes that no longer "
		       "exist",
		       dropped);
}

/* Brings the store up to what the cache files hold. fdatasync leaves a
 * size that only grew out of the store's fsync (meta_sync_begin()): the
 * range log or ".new" file that data_sync() fsyncs records it, and a
 * power loss can roll the store back past it. A kill -9 between a write's
 * bytes and the store's commit of its size or dirty flag leaves the same
 * gap (a write not acknowledged, whose bytes readers of the cache already
 * saw). Either way the file takes the cache's size, and dirty bytes are
 * queued for upload; they would otherwise never be sent, nor evicted. */
static void recover_dirty_files(struct fs *fs)
{
	struct data_dirty_file *v = NULL;
	size_t n = 0, grown = 0, marked = 0;
	struct meta_attr a, out;
	if (read_only(fs) || data_dirty_files(fs->data, &v, &n))
		return; /* they wait for the next start */
	for (size_t i = 0; i < n; i++) {
		if (meta_getattr(fs->meta, v[i].ino, &a) || !S_ISREG(a.mode))
			continue;
		if (v[i].outside)
			end_outside(fs, v[i].ino, a.size);
		struct meta_attr in = {.size = v[i].size};
		if (v[i].size > a.size &&
		    meta_setattr(fs->meta, v[i].ino, META_SET_GROW, &in,
				 &out) == 0)
			grown++;
		/* an unlinked file is never uploaded */
		if (a.nlink && !(a.dirty & META_DIRTY_DATA) &&
		    meta_set_dirty(fs->meta, v[i].ino, META_DIRTY_DATA) == 0)
			marked++;
	}
	free(v);
	if (grown || marked)
		fs_log("recovered from the cache files: %zu sizes, %zu files "
		       "left out of the upload queue",
		       grown, marked);
}

/* See load_dirty(). */
static void settle_wait(struct fs *fs)
{
	uint64_t now = clock_now_ms();
	if (now < fs->settle_until_ms)
		usleep((useconds_t)(fs->settle_until_ms - now) * 1000);
}

/* Whether d is a large file still being written: open, larger than a
 * single PUT (the multipart threshold), changed within the last half
 * upload delay, and first changed fewer than FS_BUSY_WAIT upload delays
 * ago. An upload now would send a version that the next writes replace
 * at once, and each upload after it would copy every part sent before
 * (upload_delta()): writing 1 GiB at 100 MiB/s took 4 or 5 uploads that
 * copied 1.2 to 2 GiB in S3 besides sending the file, which was whole
 * there 6 to 12 s after the last write (4 s with one upload). So it
 * waits until the writes stop. fs->lock is held (then a data file's lock
 * may be taken). */
static int busy_locked(struct fs *fs, const struct dirty *d, uint64_t now)
{
	uint64_t delay = fs->cfg.upload_delay_ms;
	if (now >= d->since_ms + delay * FS_BUSY_WAIT ||
	    now >= d->last_ms + delay / 2)
		return 0;
	struct handle *h = *handle_slot(fs, d->ino);
	return h &&
	       data_size(h->df) > s3_client_config(fs->s3)->multipart_threshold;
}

/* Takes the inodes due at time now (all of them when now is UINT64_MAX)
 * out of the set into a malloc'ed array.
 * The burst rule: while new inodes become dirty at FS_BURST_FILES or more
 * per upload delay (tar x, pip install, a git checkout), an inode waits
 * FS_BURST_WAIT upload delays rather than one, or until the burst has
 * passed. Uploads then do not take the CPU, disk and network from the
 * burst itself (on 2 cores with the local Swift, 10,000 creates ran at
 * 400-900 a second beside their uploads and 1,100-1,800 without them),
 * files the burst deletes again are never sent, and every change still
 * reaches S3 within a bounded delay. fsync and unmount do not wait. */
static uint64_t *take_due(struct fs *fs, uint64_t now, size_t *n)
{
	uint64_t *out = NULL;
	*n = 0;
	pthread_mutex_lock(&fs->lock);
	uint64_t delay = fs->cfg.upload_delay_ms;
	if (now != UINT64_MAX && burst_on_locked(fs, now))
		delay *= FS_BURST_WAIT;
	if (fs->ndirty)
		out = malloc(fs->ndirty * sizeof(*out));
	for (size_t i = 0; out && i < fs->ndirty;) {
		if (now == UINT64_MAX ||
		    (fs->dirty[i].since_ms + delay <= now &&
		     !busy_locked(fs, &fs->dirty[i], now))) {
			out[(*n)++] = fs->dirty[i].ino;
			fs->dirty[i] = fs->dirty[--fs->ndirty];
		} else {
			i++;
		}
	}
	if (*n)
		dirty_reindex(fs, 0); /* positions moved */
	pthread_mutex_unlock(&fs->lock);
	return out;
}

/* --- keys changed while a reconciliation runs ------------------------------
 */

void fs_touch(struct fs *fs, const char *key, int prefix)
{
	pthread_mutex_lock(&fs->touch_lock);
	if (fs->recording <= 0)
		goto out;
	if (fs->ntouched == fs->captouched) {
		size_t cap = fs->captouched ? fs->captouched * 2 : 64;
		struct touched *v = realloc(fs->touched, cap * sizeof(*v));
		if (!v) {
			fs->recording = -1; /* lost track: the pass is void */
			goto out;
		}
		fs->touched = v;
		fs->captouched = cap;
	}
	struct touched *t = &fs->touched[fs->ntouched];
	t->prefix = prefix;
	if (!(t->key = strdup(key)))
		fs->recording = -1;
	else
		fs->ntouched++;
out:
	pthread_mutex_unlock(&fs->touch_lock);
}

int fs_touched(struct fs *fs, const char *key)
{
	pthread_mutex_lock(&fs->touch_lock);
	int yes = fs->recording < 0; /* one went unrecorded: trust nothing */
	for (size_t i = 0; !yes && i < fs->ntouched; i++) {
		const struct touched *t = &fs->touched[i];
		yes = t->prefix ? strncmp(key, t->key, strlen(t->key)) == 0
				: strcmp(key, t->key) == 0;
	}
	pthread_mutex_unlock(&fs->touch_lock);
	return yes;
}

void fs_touch_begin(struct fs *fs)
{
	pthread_mutex_lock(&fs->touch_lock);
	fs->recording = 1;
	pthread_mutex_unlock(&fs->touch_lock);
}

void fs_touch_end(struct fs *fs)
{
	pthread_mutex_lock(&fs->touch_lock);
	fs->recording = 0;
	for (size_t i = 0; i < fs->ntouched; i++)
		free(fs->touched[i].key);
	fs->ntouched = 0;
	pthread_mutex_unlock(&fs->touch_lock);
}

/* --- claims: one upload per inode and per key at a time ------------------ */

static int claimed(struct fs *fs, uint64_t ino, const char *key)
{
	for (size_t i = 0; ino && i < fs->nclaimed_inos; i++)
		if (fs->claimed_inos[i] == ino)
			return 1;
	for (size_t i = 0; key && i < fs->nclaimed_keys; i++)
		if (strcmp(fs->claimed_keys[i], key) == 0)
			return 1;
	return 0;
}

/* 1 while an upload of ino runs: from its claim, before it reads the
 * change counter, to its unclaim, after it cleared the dirty flags. */
static int uploading(struct fs *fs, uint64_t ino)
{
	pthread_mutex_lock(&fs->claim_lock);
	int yes = claimed(fs, ino, NULL);
	pthread_mutex_unlock(&fs->claim_lock);
	return yes;
}

/* Waits until neither ino (0: none) nor key (NULL: none) is claimed, then
 * claims them. */
static int claim(struct fs *fs, uint64_t ino, const char *key)
{
	char *copy = key ? strdup(key) : NULL;
	if (key && !copy)
		return -ENOMEM;
	pthread_mutex_lock(&fs->claim_lock);
	while (claimed(fs, ino, key))
		pthread_cond_wait(&fs->claim_free, &fs->claim_lock);
	size_t need = fs->nclaimed_inos > fs->nclaimed_keys ? fs->nclaimed_inos
							    : fs->nclaimed_keys;
	if (need == fs->capclaims) {
		size_t cap = fs->capclaims ? fs->capclaims * 2 : 16;
		uint64_t *vi = realloc(fs->claimed_inos, cap * sizeof(*vi));
		if (vi)
			fs->claimed_inos = vi;
		char **vk = vi ? realloc(fs->claimed_keys, cap * sizeof(*vk))
			       : NULL;
		if (vk)
			fs->claimed_keys = vk;
		if (!vi || !vk) {
			pthread_mutex_unlock(&fs->claim_lock);
			free(copy);
			return -ENOMEM;
		}
		fs->capclaims = cap;
	}
	if (ino)
		fs->claimed_inos[fs->nclaimed_inos++] = ino;
	if (copy)
		fs->claimed_keys[fs->nclaimed_keys++] = copy;
	pthread_mutex_unlock(&fs->claim_lock);
	return 0;
}

static void unclaim(struct fs *fs, uint64_t ino, const char *key)
{
	pthread_mutex_lock(&fs->claim_lock);
	for (size_t i = 0; ino && i < fs->nclaimed_inos; i++)
		if (fs->claimed_inos[i] == ino) {
			fs->claimed_inos[i] =
				fs->claimed_inos[--fs->nclaimed_inos];
			break;
		}
	for (size_t i = 0; key && i < fs->nclaimed_keys; i++)
		if (strcmp(fs->claimed_keys[i], key) == 0) {
			free(fs->claimed_keys[i]);
			fs->claimed_keys[i] =
				fs->claimed_keys[--fs->nclaimed_keys];
			break;
		}
	pthread_cond_broadcast(&fs->claim_free);
	pthread_mutex_unlock(&fs->claim_lock);
}

/* --- keys and headers ---------------------------------------------------- */

/* The object key of path ("" for the root) for an inode of mode. */
static int key_of_path(struct fs *fs, const char *path, uint32_t mode,
		       char **key)
{
	return layout_key(fs->prefix, path, S_ISDIR(mode), key);
}

/* path of parent joined with name. */
static int child_path(struct fs *fs, uint64_t parent, const char *name,
		      char **out)
{
	char *pp;
	int rc = meta_path(fs->meta, parent, &pp);
	if (rc)
		return rc;
	if (*pp)
		rc = asprintf(out, "%s/%s", pp, name) < 0 ? -ENOMEM : 0;
	else
		rc = (*out = strdup(name)) ? 0 : -ENOMEM;
	free(pp);
	return rc;
}

/* The inode's xattrs, for its headers. */
static int load_xattrs(struct fs *fs, uint64_t ino, struct layout_xattr **out,
		       size_t *n)
{
	char *list = malloc(XATTR_LIST_MAX_BYTES);
	struct layout_xattr *x = NULL;
	size_t count = 0;
	int rc = 0;
	*out = NULL;
	*n = 0;
	if (!list)
		return -ENOMEM;
	ssize_t len = meta_listxattr(fs->meta, ino, list, XATTR_LIST_MAX_BYTES);
	if (len < 0) {
		free(list);
		return (int)len;
	}
	for (ssize_t off = 0; off < len; off += (ssize_t)strlen(list + off) + 1)
		count++;
	if (count && !(x = calloc(count, sizeof(*x))))
		rc = -ENOMEM;
	size_t i = 0;
	for (ssize_t off = 0; rc == 0 && off < len;
	     off += (ssize_t)strlen(list + off) + 1, i++) {
		ssize_t sz = meta_getxattr(fs->meta, ino, list + off, NULL, 0);
		x[i].name = strdup(list + off);
		x[i].value = malloc(sz > 0 ? (size_t)sz : 1);
		if (sz < 0 || !x[i].name || !x[i].value) {
			rc = sz < 0 ? (int)sz : -ENOMEM;
			i++;
			break;
		}
		sz = meta_getxattr(fs->meta, ino, list + off, x[i].value,
				   (size_t)sz);
		if (sz < 0) {
			rc = (int)sz;
			i++;
			break;
		}
		x[i].size = (size_t)sz;
	}
	free(list);
	if (rc) {
		layout_xattrs_free(x, i);
		return rc;
	}
	*out = x;
	*n = count;
	return 0;
}

/* 0 when ino's xattrs, with name set to value, still fit in its
 * object's headers; -ENOSPC (as ext4 says when an inode's xattr space is
 * full) or -EINVAL (a name s3fs's format cannot carry) when not. Refused
 * here, an xattr cannot leave the file unable to upload. */
static int xattr_fits(struct fs *fs, uint64_t ino, const char *name,
		      const void *value, size_t size)
{
	struct layout_xattr *x = NULL, *v = NULL;
	size_t n = 0, k = 0;
	int rc = load_xattrs(fs, ino, &x, &n);
	if (!rc && !(v = calloc(n + 1, sizeof(*v))))
		rc = -ENOMEM;
	for (size_t i = 0; !rc && i < n; i++)
		if (strcmp(x[i].name, name) != 0)
			v[k++] = x[i];
	if (!rc) {
		v[k++] = (struct layout_xattr){(char *)name, (void *)value,
					       size};
		rc = layout_xattrs_fit(v, k);
	}
	free(v);
	layout_xattrs_free(x, n);
	return rc;
}

/* --- the outbox of deletions ---------------------------------------------- */

/* Sends every queued deletion to S3 in DeleteObjects batches. The caller
 * holds s3_lock alone, so no upload can land between a deletion's peek and
 * its request (uploads cancel pending deletions of their key first). */
static int drain_outbox(struct fs *fs)
{
	uint64_t ids[S3_MAX_DELETE_BATCH];
	char *keys[S3_MAX_DELETE_BATCH];
	if (read_only(fs))
		return fs->cfg.read_only ? 0 : -EROFS;
	settle_wait(fs);
	for (;;) {
		struct s3_error e;
		ssize_t n = meta_outbox_peek(fs->meta, S3_MAX_DELETE_BATCH, ids,
					     keys);
		if (n <= 0)
			return (int)n;
		for (ssize_t i = 0; i < n; i++)
			fs_touch(fs, keys[i], 0);
		int rc = s3_delete_objects(fs->s3, fs->bucket,
					   (const char *const *)keys, (size_t)n,
					   &e);
		if (rc)
			fs_log("deleting %zd objects failed: %s: %s; will "
			       "retry",
			       n, e.code, e.message);
		else
			rc = meta_outbox_done(fs->meta, ids, (size_t)n);
		for (ssize_t i = 0; i < n; i++)
			free(keys[i]);
		if (rc)
			return rc;
	}
}

/* --- uploading one inode -------------------------------------------------- */

/* Whether any of [s, e) is in the set. */
static int overlaps(const struct ranges *r, uint64_t s, uint64_t e)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].start < e && s < r->v[i].end)
			return 1;
	return 0;
}

/* An upload the cache disk has no room to hydrate: the bytes it lacks
 * are put together in memory (a memfd) with what the cache holds
 * (data_compose()), at most FS_COMPOSE_MAX at once, one upload at a time
 * (fs->compose_lock). Without it a full cache disk whose dirty file
 * lacks a few bytes could never upload that file, nor so free itself. */
#define FS_COMPOSE_MAX (256ull << 20)

struct composed {
	int fd;	       /* the memfd; -1 until the first range */
	uint64_t held; /* bytes put together */
	int locked;    /* holds fs->compose_lock */
};

/* Puts [s, e) of the file together in c's memfd (made at size bytes). */
static int compose(struct fs *fs, struct data_file *df, const char *key,
		   struct composed *c, uint64_t s, uint64_t e, uint64_t size)
{
	if (c->held + (e - s) > FS_COMPOSE_MAX) {
		fs_log("'%s': %llu bytes to put together in memory for its "
		       "upload, more than %llu; it waits for room in the cache",
		       key, (unsigned long long)(c->held + (e - s)),
		       (unsigned long long)FS_COMPOSE_MAX);
		return -ENOSPC;
	}
	if (c->fd < 0) {
		pthread_mutex_lock(&fs->compose_lock);
		c->locked = 1;
		c->fd = memfd_create("tierfs-upload", MFD_CLOEXEC);
		if (c->fd < 0 || ftruncate(c->fd, (off_t)size) != 0)
			return -errno;
	}
	c->held += e - s;
	return data_compose(df, c->fd, s, e - s);
}

static void composed_free(struct fs *fs, struct composed *c)
{
	if (c->fd >= 0)
		close(c->fd);
	if (c->locked)
		pthread_mutex_unlock(&fs->compose_lock);
	*c = (struct composed){.fd = -1};
}

/* Makes [s, e) of the file present for an upload: in the cache, or, with
 * no room there, in c. Returns the source the upload reads it from. */
static int hydrate_or_compose(struct fs *fs, struct data_file *df,
			      const char *key, struct composed *c, uint64_t s,
			      uint64_t e, unsigned char *source)
{
	int rc = data_hydrate(df, s, e - s);
	*source = S3_PART_FD;
	if (rc == -ENOSPC) {
		rc = compose(fs, df, key, c, s, e, data_size(df));
		*source = S3_PART_ALT;
	}
	return rc;
}

/* A big file of which S3 has an older version at key: rewrites it with
 * the untouched parts copied server-side, fetching and sending only the
 * parts with dirty bytes (DESIGN §5). -EAGAIN when that does not apply
 * (nothing to reuse, or the object is not the version we know). */
static int upload_delta(struct fs *fs, struct data_file *df, const char *key,
			const char *old_etag, const struct ranges *dirty,
			const struct s3_put_opts *o, char *etag)
{
	struct s3_object_info info;
	struct s3_error e = {0};
	struct composed c = {.fd = -1};
	uint64_t size = data_size(df);
	if (!fs_etag_known(old_etag) ||
	    size <= s3_client_config(fs->s3)->multipart_threshold)
		return -EAGAIN;
	if (s3_head_object(fs->s3, fs->bucket, key, &info, &e) != 0)
		return -EAGAIN;
	uint64_t have = info.size;
	int same = strcmp(info.etag, old_etag) == 0;
	s3_object_info_free(&info);
	if (!same)
		return -EAGAIN;
	uint64_t part = s3_upload_part_size(fs->s3, size);
	size_t nparts = (size_t)((size + part - 1) / part), kept = 0;
	unsigned char *source = calloc(nparts, 1);
	if (!source)
		return -ENOMEM;
	for (size_t i = 0; i < nparts; i++) {
		uint64_t s = (uint64_t)i * part;
		uint64_t end = size - s < part ? size : s + part;
		if (end <= have && !overlaps(dirty, s, end)) {
			source[i] = S3_PART_COPY;
			kept++;
		}
	}
	int rc = kept == 0 ? -EAGAIN : 0;
	for (size_t i = 0; i < nparts && !rc; i++) {
		uint64_t s = (uint64_t)i * part;
		uint64_t end = size - s < part ? size : s + part;
		if (source[i] != S3_PART_COPY)
			rc = hydrate_or_compose(fs, df, key, &c, s, end,
						&source[i]);
	}
	if (!rc) {
		rc = s3_upload_fd_reuse(fs->s3, fs->bucket, key, data_fd(df),
					c.fd, size, o, key, old_etag, source,
					etag, &e);
		/* Swift refuses If-Match on the copy of any multipart object:
		 * when a second look shows the object is still the version
		 * we know, copy unpinned (one writer per volume) */
		if (rc == -ESTALE &&
		    s3_head_object(fs->s3, fs->bucket, key, &info, &e) == 0) {
			same = strcmp(info.etag, old_etag) == 0;
			s3_object_info_free(&info);
			if (same)
				rc = s3_upload_fd_reuse(fs->s3, fs->bucket, key,
							data_fd(df), c.fd, size,
							o, key, NULL, source,
							etag, &e);
		}
		if (rc)
			fs_log("partial upload of '%s' failed: %s (%s: %s); "
			       "sending all of it",
			       key, strerror(-rc), e.code, e.message);
		else
			fs_log("'%s': sent %zu of %zu parts, copied %zu in "
			       "S3 (%llu bytes put together in memory)",
			       key, nparts - kept, nparts, kept,
			       (unsigned long long)c.held);
		rc = rc ? -EAGAIN : 0;
	}
	composed_free(fs, &c);
	free(source);
	return rc;
}

/* Sends the whole file; a version of it in S3 (in_s3) has the bytes the
 * cache lacks. */
static int upload_whole(struct fs *fs, struct data_file *df, const char *key,
			int in_s3, const struct s3_put_opts *o, char *etag,
			struct s3_error *e)
{
	struct composed c = {.fd = -1};
	unsigned char source = S3_PART_FD;
	uint64_t size = data_size(df);
	int rc = in_s3 ? hydrate_or_compose(fs, df, key, &c, 0, size, &source)
		       : 0;
	if (!rc)
		rc = s3_upload_fd(fs->s3, fs->bucket, key,
				  source == S3_PART_ALT ? c.fd : data_fd(df), 0,
				  size, o, etag, e);
	if (!rc && c.held)
		fs_log("'%s': sent with %llu bytes put together in memory", key,
		       (unsigned long long)c.held);
	composed_free(fs, &c);
	return rc;
}

/* Sends ino's cache file. quiet: no write in passthrough can be under way
 * (fsync: the kernel holds the inode's lock, which those writes take).
 * Otherwise a write the kernel has begun may land after the bytes are
 * read: its mtime moved before, so no later look sees it. Then, if the
 * file was open for writing in passthrough, *owed is set: the bytes stay
 * dirty and the upload may not call the file clean (pt_owe()). */
static int upload_file(struct fs *fs, uint64_t ino, const char *key,
		       const struct meta_attr *a, const struct s3_put_opts *o,
		       char *etag, int quiet, int *owed)
{
	struct data_file *df;
	struct ranges snap = RANGES_INIT;
	struct s3_error e = {0};
	char old[S3_ETAG_MAX] = "";
	int rc = data_get(fs->data, ino, a->size, &df);
	if (rc)
		return rc;
	*owed = !quiet && pt_writing(fs, ino);
	/* what is dirty now; writes from here on stay dirty */
	rc = data_dirty(df, &snap);
	int have_snap = rc == 0;
	meta_get_etag(fs->meta, ino, old, sizeof(old));
	if (!rc)
		rc = upload_delta(fs, df, key, old, &snap, o, etag);
	if (rc == -EAGAIN) {
		/* what the cache lacks comes from the object; with none in S3
		 * yet, what it lacks was never written: zeros, which the
		 * sparse cache file reads as */
		int in_s3 = old[0] && strcmp(old, FS_ETAG_UNKNOWN) != 0;
		/* "?": a first upload was tried from this very cache, so an
		 * object from it lacks the same bytes; "!" and real ETags:
		 * the object has bytes the cache may lack */
		rc = upload_whole(fs, df, key, in_s3, o, etag, &e);
	}
	if (rc) {
		fs_log("upload of '%s' failed: %s (%s: %s)", key, strerror(-rc),
		       e.code, e.message);
		ranges_free(&snap); /* hand back an empty snapshot */
	}
	/* passthrough writes meanwhile stay dirty */
	pt_settle(fs, ino);
	*owed = *owed || (!quiet && pt_writing(fs, ino));
	if (have_snap && !*owed) {
		int mc = data_mark_clean(df, &snap);
		if (!rc)
			rc = mc;
	}
	if (!rc)
		pt_owe(fs, ino, *owed);
	ranges_free(&snap);
	data_put(df);
	return rc;
}

/* Every further name of a hard-linked file is an object too: copies of
 * the first name's object, made server-side. */
static int copy_to_other_names(struct fs *fs, uint64_t ino, const char *key0)
{
	int rc = 0;
	for (unsigned n = 1; rc == 0; n++) {
		char *path = NULL, *key = NULL;
		struct s3_error e;
		rc = meta_path_nth(fs->meta, ino, n, &path);
		if (rc == -ENOENT)
			return 0; /* no more names */
		if (!rc)
			rc = layout_key(fs->prefix, path, 0, &key);
		if (!rc) {
			/* an unlink or rename of the name read must still win
			 */
			fs_debug_pause("TIERFS_DEBUG_UPLOAD_PAUSE_MS");
			rc = meta_outbox_cancel_for(fs->meta, key, ino, n, path,
						    FS_ETAG_UNKNOWN);
		}
		if (rc == -ESTALE) {
			/* that name went meanwhile, and the names after it
			 * moved up: start over (copies are idempotent) */
			n = 0;
			rc = 0;
		} else if (!rc) {
			fs_touch(fs, key, 0);
			rc = s3_copy_object(fs->s3, fs->bucket, key0,
					    fs->bucket, key, S3_METADATA_COPY,
					    NULL, NULL, &e);
		}
		free(path);
		free(key);
	}
	return rc;
}

/* Brings S3 up to date with one inode, under the name it has now;
 * -ESTALE when that name went before anything was written. quiet: see
 * upload_file(). */
static int sync_inode_once(struct fs *fs, uint64_t ino, int quiet)
{
	struct meta_attr a;
	struct layout_attrs la;
	struct layout_headers h;
	struct layout_xattr *x = NULL;
	size_t nx = 0;
	char *path = NULL, *key = NULL, *target = NULL;
	char etag[S3_ETAG_MAX] = "";
	uint64_t seq;
	struct s3_error e;

	int have_key = 0, owed = 0;
	/* between the queue and the claim (a test widens it) */
	fs_debug_pause("TIERFS_DEBUG_SYNC_PAUSE_MS");
	settle_wait(fs);
	pt_settle(fs, ino); /* meta's size and times, for the headers */
	pthread_rwlock_rdlock(&fs->s3_lock);
	int rc = claim(fs, ino, NULL);
	if (rc) {
		pthread_rwlock_unlock(&fs->s3_lock);
		return rc;
	}
	if (read_only(fs)) { /* fenced: S3 is another node's now */
		unclaim(fs, ino, NULL);
		pthread_rwlock_unlock(&fs->s3_lock);
		return -EROFS;
	}
	rc = meta_getattr(fs->meta, ino, &a);
	if (rc || a.nlink == 0 || a.dirty == 0) {
		rc = rc == -ENOENT ? 0 : rc; /* gone: nothing owed */
		goto out;
	}
	rc = meta_change_seq(fs->meta, ino, &seq);
	if (!rc)
		rc = meta_path(fs->meta, ino, &path);
	if (rc == -ENOENT) { /* no name left */
		rc = 0;
		goto out;
	}
	if (!rc)
		rc = key_of_path(fs, path, a.mode, &key);
	if (!rc) /* an upload of another inode to this key finishes first */
		rc = claim(fs, 0, key);
	have_key = rc == 0;
	if (!rc)
		rc = load_xattrs(fs, ino, &x, &nx);
	if (rc)
		goto out;
	la = (struct layout_attrs){a.mode, a.uid, a.gid, a.mtime, a.ctime, 0};
	rc = layout_headers_build(&la, x, nx, &h);
	if (rc)
		goto out;
	struct s3_put_opts o = {h.content_type, h.meta, h.nmeta};
	fs_touch(fs, key, 0);
	/* an unlink or rename of the name read must still win */
	fs_debug_pause("TIERFS_DEBUG_UPLOAD_PAUSE_MS");
	/* a deletion still queued for this key would destroy what we write;
	 * but if the name went since we read it, its deletion stands and
	 * nothing is written there (a new name uploads on its own). In the
	 * same step, and committed before the first PUT can land, an inode
	 * never uploaded gets the ETag "unknown": an unlink from then on
	 * queues its object's deletion */
	rc = meta_outbox_cancel_for(fs->meta, key, ino, 0, path,
				    FS_ETAG_UNKNOWN);
	if (rc) {
		layout_headers_free(&h);
		goto out;
	}
	if (S_ISREG(a.mode)) {
		char old[S3_ETAG_MAX];
		meta_get_etag(fs->meta, ino, old, sizeof(old));
		if (!(a.dirty & (META_DIRTY_DATA | META_DIRTY_NAME)) &&
		    old[0]) {
			/* attributes only: rewrite the headers in place */
			rc = s3_copy_object(fs->s3, fs->bucket, key, fs->bucket,
					    key, S3_METADATA_REPLACE, &o, etag,
					    &e);
			if (rc == -ENOENT)
				rc = upload_file(fs, ino, key, &a, &o, etag,
						 quiet, &owed);
		} else {
			rc = upload_file(fs, ino, key, &a, &o, etag, quiet,
					 &owed);
		}
		if (!rc && a.nlink > 1)
			rc = copy_to_other_names(fs, ino, key);
	} else if (S_ISLNK(a.mode)) {
		rc = meta_readlink(fs->meta, ino, &target);
		if (!rc)
			rc = s3_put_buf(fs->s3, fs->bucket, key, target,
					strlen(target), &o, etag, &e);
	} else if (ino != META_ROOT_INO || *fs->prefix) {
		/* directories, and fifos/sockets/devices as empty objects */
		rc = s3_put_buf(fs->s3, fs->bucket, key, NULL, 0, &o, etag, &e);
	}
	layout_headers_free(&h);
	if (rc) {
		fs_log("sync of inode %llu ('%s') failed: %s",
		       (unsigned long long)ino, key, strerror(-rc));
		char what[96];
		snprintf(what, sizeof(what), "upload: %s", strerror(-rc));
		fs_health_note(fs, rc, what);
		goto out;
	}
	fs_health_note(fs, 0, NULL);
	if (etag[0])
		meta_set_etag(fs->meta, ino, etag);
	/* renamed or unlinked while we uploaded? then nothing may stay at
	 * the old key (the new name is dirty and uploads on its own) */
	char *now_path = NULL;
	if (meta_path(fs->meta, ino, &now_path) != 0 ||
	    strcmp(now_path, path) != 0) {
		struct s3_error de;
		s3_delete_object(fs->s3, fs->bucket, key, &de);
	} else if (!owed) {
		meta_clear_dirty(fs->meta, ino,
				 META_DIRTY_DATA | META_DIRTY_ATTR |
					 META_DIRTY_NAME,
				 seq);
	}
	free(now_path);
out:
	if (have_key)
		unclaim(fs, 0, key);
	unclaim(fs, ino, NULL);
	pthread_rwlock_unlock(&fs->s3_lock);
	layout_xattrs_free(x, nx);
	free(path);
	free(key);
	free(target);
	return rc;
}

/* Brings S3 up to date with one inode; quiet: see upload_file(). */
static int sync_inode(struct fs *fs, uint64_t ino, int quiet)
{
	int rc;
	/* renamed or unlinked while it was read: again, under its new name
	 * (an inode renamed without end gives up, still dirty) */
	for (int tries = 0; tries < 100; tries++)
		if ((rc = sync_inode_once(fs, ino, quiet)) != -ESTALE)
			return rc;
	return -EAGAIN;
}

/* A list of inodes synced by up to FS_UPLOAD_THREADS threads. */
struct batch {
	struct fs *fs;
	const uint64_t *inos;
	size_t n;
	size_t next; /* protected by lock */
	int first;   /* protected by lock: the first failure */
	pthread_mutex_t lock;
};

static void *batch_worker(void *arg)
{
	struct batch *b = arg;
	for (;;) {
		pthread_mutex_lock(&b->lock);
		size_t i = b->next < b->n ? b->next++ : b->n;
		pthread_mutex_unlock(&b->lock);
		if (i == b->n)
			return NULL;
		int rc = sync_inode(b->fs, b->inos[i], 0);
		if (rc) {
			/* its flags are still set in meta: requeue only */
			dirty_add(b->fs, b->inos[i], clock_now_ms(), 0);
			pthread_mutex_lock(&b->lock);
			if (!b->first)
				b->first = rc;
			pthread_mutex_unlock(&b->lock);
		}
	}
}

/* Syncs a list of inodes, several at once; failures go back into the
 * dirty set. Returns the first failure. */
static int sync_list(struct fs *fs, const uint64_t *inos, size_t n)
{
	struct batch b = {fs, inos, n, 0, 0, PTHREAD_MUTEX_INITIALIZER};
	pthread_t tids[FS_UPLOAD_THREADS - 1];
	size_t started = 0,
	       want = n < FS_UPLOAD_THREADS ? n : FS_UPLOAD_THREADS;
	for (; started + 1 < want; started++)
		if (pthread_create(&tids[started], NULL, batch_worker, &b) != 0)
			break; /* fewer threads: still done, more slowly */
	batch_worker(&b);
	for (size_t i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	pthread_mutex_destroy(&b.lock);
	return b.first;
}

int fs_flush_all(struct fs *fs)
{
	size_t n;
	pthread_rwlock_wrlock(&fs->s3_lock);
	int rc = drain_outbox(fs);
	pthread_rwlock_unlock(&fs->s3_lock);
	/* everything dirty in the store, not only what the set holds: an
	 * inode the flusher is uploading right now is out of the set, and
	 * syncing it here waits for that upload (the claim), then sends
	 * whatever is still dirty */
	free(take_due(fs, UINT64_MAX, &n));
	uint64_t *inos = NULL;
	int rc2 = meta_dirty_list(fs->meta, &inos, &n);
	if (!rc2)
		rc2 = sync_list(fs, inos, n);
	free(inos);
	if (!rc)
		rc = rc2;
	if (rc == 0)
		rc = meta_commit(fs->meta);
	return rc;
}

/* One flusher tick: sends what is due and evicts. */
static void flush_tick(struct fs *fs)
{
	size_t n;
	pthread_rwlock_wrlock(&fs->s3_lock);
	drain_outbox(fs);
	pthread_rwlock_unlock(&fs->s3_lock);
	/* writes in passthrough become due like others */
	pt_settle_all(fs);
	uint64_t *inos = take_due(fs, clock_now_ms(), &n);
	sync_list(fs, inos, n);
	free(inos);
	/* clean, closed data beyond --cache-size or the free floor; not
	 * while S3 is out of reach: then it is the only copy this node can
	 * read, and writes get ENOSPC when the disk is full */
	if (!fs_s3_failing(fs))
		data_evict(fs->data);
}

/* A background thread's loop: tick(fs) every ms milliseconds, or when c
 * is signalled, until fs->stop (both with fs->lock). */
static void run_ticks(struct fs *fs, pthread_cond_t *c, unsigned ms,
		      void (*tick)(struct fs *))
{
	pthread_mutex_lock(&fs->lock);
	while (!fs->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (long)(ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(c, &fs->lock, &ts);
		if (fs->stop)
			break;
		pthread_mutex_unlock(&fs->lock);
		tick(fs);
		pthread_mutex_lock(&fs->lock);
	}
	pthread_mutex_unlock(&fs->lock);
}

static void *flusher_main(void *arg)
{
	struct fs *fs = arg;
	run_ticks(fs, &fs->wake, FS_FLUSH_TICK_MS, flush_tick);
	return NULL;
}

/* pt_guard() every FS_PT_GUARD_TICK_MS, on a thread of its own: the
 * flusher's tick waits for its uploads, and a writer in passthrough
 * would meanwhile fill the cache disk (ENOSPC instead of EPERM, and no
 * room for the metadata store). */
static void *pt_guard_main(void *arg)
{
	struct fs *fs = arg;
	run_ticks(fs, &fs->pt_wake, FS_PT_GUARD_TICK_MS, pt_guard);
	return NULL;
}

/* --- object fetches for the data cache ------------------------------------ */

static int fs_fetch_landed(void *arg, uint64_t bytes)
{
	return data_fetch_landed(arg, bytes);
}

static ssize_t fs_fetch(void *ctx, uint64_t ino, uint64_t off, uint64_t len,
			int fd, off_t fd_off, struct data_fetch *fetch)
{
	struct fs *fs = ctx;
	struct meta_attr a;
	struct s3_error e;
	char *path = NULL, *key = NULL, etag[S3_ETAG_MAX];
	int rc = meta_getattr(fs->meta, ino, &a);
	if (!rc)
		rc = meta_path(fs->meta, ino, &path);
	if (!rc)
		rc = key_of_path(fs, path, a.mode, &key);
	free(path);
	if (rc)
		return rc;
	meta_get_etag(fs->meta, ino, etag, sizeof(etag));
	int pinned = fs_etag_known(etag);
	struct s3_landed tell = {fs_fetch_landed, fetch};
	ssize_t n =
		s3_get_parallel(fs->s3, fs->bucket, key, off, len, fd, fd_off,
				pinned ? etag : NULL, fetch ? &tell : NULL, &e);
	if (n == -ERANGE || n == -ENOENT)
		n = 0; /* past the end, or never uploaded: zeros */
	else if (n < 0 && n != -ECANCELED)
		fs_log("read of '%s' at %llu failed: %s: %s", key,
		       (unsigned long long)off, e.code, e.message);
	free(key);
	/* a changed object, or a response that is not the range: EIO */
	return n == -ESTALE || n == -EPROTO ? -EIO : n;
}

/* --- lifecycle --------------------------------------------------------------
 */

static void destroy_locks(struct fs *fs)
{
	pthread_cond_destroy(&fs->bg_wake);
	pthread_cond_destroy(&fs->pt_wake);
	pthread_cond_destroy(&fs->wake);
	pthread_rwlock_destroy(&fs->s3_lock);
	pthread_mutex_destroy(&fs->claim_lock);
	pthread_cond_destroy(&fs->claim_free);
	pthread_mutex_destroy(&fs->touch_lock);
	pthread_mutex_destroy(&fs->health_lock);
	pthread_mutex_destroy(&fs->space_lock);
	pthread_mutex_destroy(&fs->compose_lock);
	pthread_cond_destroy(&fs->space_given);
	pthread_mutex_destroy(&fs->pt_lock);
	pthread_mutex_destroy(&fs->lock);
}

/* Stops and joins the flusher and the guard. */
static void stop_threads(struct fs *fs)
{
	pthread_mutex_lock(&fs->lock);
	fs->stop = 1;
	pthread_cond_signal(&fs->wake);
	pthread_cond_signal(&fs->pt_wake);
	pthread_mutex_unlock(&fs->lock);
	pthread_join(fs->flusher, NULL);
	if (fs->has_pt_guard)
		pthread_join(fs->pt_guarder, NULL);
	fs->has_pt_guard = 0;
}

static int recall_exchanges(struct fs *fs);

int fs_create(const struct fs_config *cfg, s3_client *s3, struct meta *meta,
	      const struct data_config *data_cfg, struct fs **out)
{
	struct fs *fs = calloc(1, sizeof(*fs));
	int rc = -ENOMEM;
	if (!fs)
		return rc;
	fs->cfg = *cfg;
	fs->bucket = strdup(cfg->bucket);
	fs->prefix = strdup(cfg->prefix);
	fs->cache_dir = cfg->cache_dir ? strdup(cfg->cache_dir) : NULL;
	if (!fs->bucket || !fs->prefix || (cfg->cache_dir && !fs->cache_dir))
		goto fail_strings;
	fs->cfg.bucket = fs->bucket;
	fs->cfg.prefix = fs->prefix;
	fs->cfg.cache_dir = fs->cache_dir;
	fs->debug_stop_at = getenv("TIERFS_DEBUG_STOP_AT");
	fs->s3 = s3;
	fs->meta = meta;
	struct data_config dc = *data_cfg;
	dc.fetch = fs_fetch;
	dc.fetch_ctx = fs;
	rc = data_open(&dc, &fs->data);
	if (rc)
		goto fail_strings;
	pthread_mutex_init(&fs->lock, NULL);
	pthread_mutex_init(&fs->health_lock, NULL);
	pthread_mutex_init(&fs->space_lock, NULL);
	pthread_mutex_init(&fs->compose_lock, NULL);
	pthread_cond_init(&fs->space_given, NULL);
	pthread_rwlockattr_t ra;
	pthread_rwlockattr_init(&ra);
	/* a deletion or rename must not wait behind a stream of uploads */
	pthread_rwlockattr_setkind_np(
		&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&fs->s3_lock, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&fs->claim_lock, NULL);
	pthread_cond_init(&fs->claim_free, NULL);
	pthread_mutex_init(&fs->touch_lock, NULL);
	pthread_cond_init(&fs->wake, NULL);
	pthread_cond_init(&fs->pt_wake, NULL);
	pthread_cond_init(&fs->bg_wake, NULL);
	pthread_mutex_init(&fs->pt_lock, NULL);
	rc = recall_exchanges(fs);
	if (rc)
		goto fail_thread;
	open_opens(fs);
	/* the kernel's writers adopted from a killed worker run on; the
	 * cache disk may already be short of room for them */
	pt_guard(fs);
	drop_orphans(fs);
	recover_dirty_files(fs);
	rc = load_dirty(fs);
	if (!rc)
		rc = -pthread_create(&fs->flusher, NULL, flusher_main, fs);
	if (rc)
		goto fail_thread;
	if (fs->opens) {
		rc = -pthread_create(&fs->pt_guarder, NULL, pt_guard_main, fs);
		if (rc)
			goto fail_flusher;
		fs->has_pt_guard = 1;
	}
	*out = fs;
	return 0;

fail_flusher:
	stop_threads(fs);
fail_thread:
	close_all_handles(fs);
	opens_unmap(fs->opens);
	free(fs->exchanged);
	free(fs->dirty);
	free(fs->dirty_idx);
	destroy_locks(fs);
	data_close(fs->data);
fail_strings:
	free(fs->bucket);
	free(fs->prefix);
	free(fs->cache_dir);
	free(fs);
	return rc;
}

int fs_destroy(struct fs *fs)
{
	fs_bg_stop(fs);
	stop_threads(fs);
	int rc = fs_flush_all(fs);
	/* everything is in S3: the index a new node starts from; then the
	 * volume is free for another node */
	if (rc == 0)
		rc = fs_snapshot(fs);
	if (rc == 0 && fs->cfg.lease && !read_only(fs))
		lease_release(fs->cfg.lease);
	close_all_handles(fs);
	opens_unmap(fs->opens);
	data_close(fs->data);
	destroy_locks(fs);
	free(fs->exchanged);
	free(fs->dirty);
	free(fs->dirty_idx);
	free(fs->touched);
	free(fs->claimed_inos);
	free(fs->claimed_keys);
	free(fs->bucket);
	free(fs->prefix);
	free(fs->cache_dir);
	free(fs);
	return rc;
}

void fs_set_session(struct fs *fs, struct fuse_session *se)
{
	fs->se = se;
}

/* --- replies ----------------------------------------------------------------
 */

static struct fs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static void to_stat(const struct meta_attr *a, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_size = (off_t)a->size;
	st->st_rdev = a->rdev;
	st->st_blksize = 4096;
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_atim = a->atime;
	st->st_mtim = a->mtime;
	st->st_ctim = a->ctime;
}

static void fill_entry(struct fs *fs, const struct meta_attr *a,
		       struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = a->ino;
	e->generation = a->generation;
	e->attr_timeout = fs->cfg.attr_timeout;
	e->entry_timeout = fs->cfg.entry_timeout;
	to_stat(a, &e->attr);
}

static void forget_one(struct fs *fs, uint64_t ino, uint64_t n)
{
	if (meta_forget(fs->meta, ino, n) == 1)
		data_remove(fs->data, ino);
}

/* Replies with an entry whose lookup reference is already taken (by
 * meta_lookup_ref() or take_ref()). */
static void reply_entry_ref(fuse_req_t req, const struct meta_attr *a)
{
	struct fs *fs = FS(req);
	struct fuse_entry_param e;
	fill_entry(fs, a, &e);
	if (fuse_reply_entry(req, &e) != 0)
		forget_one(fs, a->ino, 1); /* the kernel never saw it */
}

/* Replies with a new entry and takes its lookup reference. The kernel
 * holds the parent's lock, so the name cannot vanish in between. */
static void reply_entry(fuse_req_t req, const struct meta_attr *a)
{
	meta_ref(FS(req)->meta, a->ino, 1);
	reply_entry_ref(req, a);
}

static int check_name(const char *name)
{
	return strlen(name) > META_NAME_MAX ? -ENAMETOOLONG : 0;
}

/* Reserves grow bytes of usage against the quota; *held gets what to give
 * back with space_give() once meta counts the growth. The check and the
 * reservation are one step, so writes arriving at once cannot all pass the
 * last free byte. -ENOSPC when it does not fit. Writes past the same end
 * reserve overlapping growth, so one that does not fit while others are
 * in flight waits for them to be counted before it decides. */
static int space_take(struct fs *fs, uint64_t grow, uint64_t *held)
{
	uint64_t bytes, inodes;
	uint64_t cap = fs_capacity(fs);
	int rc = 0;
	*held = 0;
	if (!cap || grow == 0)
		return 0;
	pthread_mutex_lock(&fs->space_lock);
	for (;;) {
		meta_usage(fs->meta, &bytes, &inodes);
		if (bytes + fs->space_held + grow <= cap) {
			fs->space_held += grow;
			*held = grow;
			break;
		}
		if (fs->space_held == 0) {
			rc = -ENOSPC;
			break;
		}
		pthread_cond_wait(&fs->space_given, &fs->space_lock);
	}
	pthread_mutex_unlock(&fs->space_lock);
	return rc;
}

static void space_give(struct fs *fs, uint64_t held)
{
	if (held == 0)
		return;
	pthread_mutex_lock(&fs->space_lock);
	fs->space_held -= held;
	pthread_cond_broadcast(&fs->space_given);
	pthread_mutex_unlock(&fs->space_lock);
}

/* --- handlers
 * ----------------------------------------------------------------- */

/* libfuse splices a reply of at least two pages; below, it would copy
 * the bytes into a buffer of its own. */
#define FS_SPLICE_MIN (2u * 4096u)
/* and needs the reply and three pages more in one pipe */
#define FS_SPLICE_ROOM (4u * 4096u)

/* The largest read reply libfuse can splice. A pipe grows past
 * /proc/sys/fs/pipe-max-size (1 MiB by default) only with
 * CAP_SYS_RESOURCE; when libfuse fails to grow one it copies each reply
 * into a new buffer of its own instead, slower than no splice at all. */
static size_t splice_max(void)
{
	int p[2];
	long got = -1;
	if (pipe2(p, O_CLOEXEC))
		return 0;
	for (long sz = FS_MAX_WRITE + FS_SPLICE_ROOM; got < 0 && sz >= 65536;
	     sz /= 2)
		got = fcntl(p[0], F_SETPIPE_SZ, sz);
	(void)close(p[0]);
	(void)close(p[1]);
	if (got <= (long)(FS_SPLICE_MIN + FS_SPLICE_ROOM))
		return 0;
	return (size_t)got - FS_SPLICE_ROOM < FS_MAX_WRITE
		       ? (size_t)got - FS_SPLICE_ROOM
		       : FS_MAX_WRITE;
}

/* Backing files for passthrough need CAP_SYS_ADMIN (the kernel's rule). */
static int have_sys_admin(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) != 0)
		return 0;
	return (d[CAP_SYS_ADMIN / 32].effective >> (CAP_SYS_ADMIN % 32)) & 1;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs *fs = userdata;
	/* passthrough or the writeback cache: the kernel takes one of the
	 * two. Passthrough serves files the cache holds whole at the cache
	 * disk's speed; without a capacity only (see "passthrough") */
	int kept = serve_kept_passthrough();
	if (kept == 1 || (kept < 0 && fs->opens && fs_capacity(fs) == 0 &&
			  serve_offers_passthrough() && have_sys_admin()))
		serve_want_passthrough();
	else if (conn->capable & FUSE_CAP_WRITEBACK_CACHE)
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
	fs->kernel_times = (conn->want & FUSE_CAP_WRITEBACK_CACHE) != 0;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	/* requests must arrive in memory: serve.c reads their headers.
	 * Replies may go by splice (reply_placed()); their pages are copied,
	 * never moved, so the cache file keeps its own. */
	conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_MOVE);
	if (conn->capable & FUSE_CAP_SPLICE_WRITE)
		fs->splice_max = splice_max();
	if (fs->splice_max)
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	conn->max_write = FS_MAX_WRITE;
	conn->max_readahead = FS_MAX_WRITE;
	/* asynchronous requests (libaio's direct I/O, read-ahead) the kernel
	 * keeps in flight: its default of 12 is below one fio job's queue.
	 * A submitter past the limit sleeps in the kernel until one ends, and
	 * every end then wakes it: enough for every I/O a few deep queues
	 * hold, so that they wait in the queue instead */
	conn->max_background = FS_MAX_BACKGROUND;
	conn->congestion_threshold = FS_MAX_BACKGROUND * 3 / 4;
	fs->kernel_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) != 0;
	/* ACLs enforced by the kernel, as on a local disk; without
	 * DONT_MASK the kernel would apply the umask where a default ACL
	 * must replace it */
	if ((conn->capable & FUSE_CAP_POSIX_ACL) &&
	    (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_POSIX_ACL | FUSE_CAP_DONT_MASK;
		fs->posix_acl = 1;
	}
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs *fs = FS(req);
	struct meta_attr a = {0}, now;
	int rc = check_name(name);
	if (!rc)
		rc = meta_lookup_ref(fs->meta, parent, name, &a);
	if (!rc && pt_settle(fs, a.ino) &&
	    meta_getattr(fs->meta, a.ino, &now) == 0)
		a = now; /* its size and times after writes in passthrough */
	if (rc == -ENOENT) {
		/* negative entry: cached like a positive one (RWO) */
		struct fuse_entry_param e = {
			.ino = 0, .entry_timeout = fs->cfg.entry_timeout};
		fuse_reply_entry(req, &e);
		return;
	}
	if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_entry_ref(req, &a);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	forget_one(FS(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count,
			    struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		forget_one(FS(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct meta_attr a;
	struct stat st;
	(void)fi;
	pt_settle(fs, ino);
	int rc = meta_getattr(fs->meta, ino, &a);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	to_stat(&a, &st);
	fuse_reply_attr(req, &st, fs->cfg.attr_timeout);
}

/* Sets the cached data's size; *held: quota growth for space_give() once
 * meta has the new size. */
static int truncate_data(struct fs *fs, uint64_t ino, uint64_t old,
			 uint64_t size, uint64_t *held)
{
	struct data_file *df;
	int rc = space_take(fs, size > old ? size - old : 0, held);
	if (!rc)
		rc = data_get(fs->data, ino, old, &df);
	if (rc)
		return rc;
	rc = data_truncate(df, size);
	data_put(df);
	if (rc) {
		space_give(fs, *held);
		*held = 0;
	}
	return rc;
}

/* The kernel sends no ACL larger than a page (E2BIG). */
#define FS_ACL_MAX 4096

/* ino's ACL xattr name into buf (FS_ACL_MAX bytes): its size; 0 when it
 * has none, or one that is not a valid ACL (written by another tool: the
 * kernel refuses to use it too); else -errno. */
static ssize_t acl_load(struct fs *fs, uint64_t ino, const char *name,
			unsigned char *buf)
{
	ssize_t n = meta_getxattr(fs->meta, ino, name, buf, FS_ACL_MAX);
	if (n == -ENODATA || n == -ERANGE ||
	    (n > 0 && acl_check(buf, (size_t)n) != 0))
		return 0;
	return n;
}

/* chmod of an inode with an access ACL rewrites the ACL's owner, group
 * class and other entries to the new mode, as ext4 does. */
static int acl_follow_mode(struct fs *fs, uint64_t ino, mode_t mode)
{
	unsigned char buf[FS_ACL_MAX];
	ssize_t n = acl_load(fs, ino, ACL_XATTR_ACCESS, buf);
	if (n <= 0)
		return (int)n;
	acl_chmod(buf, (size_t)n, mode);
	return meta_setxattr(fs->meta, ino, ACL_XATTR_ACCESS, (char *)buf,
			     (size_t)n, 0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
		       int to_set, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct meta_attr cur, in, out;
	struct stat st;
	unsigned mask = 0;
	uint64_t held = 0;
	struct timespec now = fs_now_real();
	(void)fi;
	pt_settle(fs, ino);
	int rc = read_only(fs) ? -EROFS : meta_getattr(fs->meta, ino, &cur);
	if (rc)
		goto fail;
	memset(&in, 0, sizeof(in));
	if (to_set & FUSE_SET_ATTR_MODE) {
		mask |= META_SET_MODE;
		in.mode = (cur.mode & S_IFMT) | (attr->st_mode & 07777);
	} else if (serve_request_kill_suidgid())
		mask |= META_SET_KILL_SUIDGID;
	if (to_set & FUSE_SET_ATTR_UID) {
		mask |= META_SET_UID;
		in.uid = attr->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		mask |= META_SET_GID;
		in.gid = attr->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (!S_ISREG(cur.mode)) {
			rc = S_ISDIR(cur.mode) ? -EISDIR : -EINVAL;
			goto fail;
		}
		rc = truncate_data(fs, ino, cur.size, (uint64_t)attr->st_size,
				   &held);
		if (rc)
			goto fail;
		mask |= META_SET_SIZE | META_SET_MTIME;
		in.size = (uint64_t)attr->st_size;
		in.mtime = now;
	}
	if (to_set & FUSE_SET_ATTR_ATIME) {
		mask |= META_SET_ATIME;
		in.atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now
							      : attr->st_atim;
	}
	if (to_set & FUSE_SET_ATTR_MTIME) {
		mask |= META_SET_MTIME;
		in.mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now
							      : attr->st_mtim;
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		mask |= META_SET_CTIME;
		in.ctime = attr->st_ctim;
	}
	meta_batch_begin();
	rc = meta_setattr(fs->meta, ino, mask, &in, &out);
	/* a chmod the ACL did not follow still grants what the ACL says:
	 * the caller hears of it */
	int acl_rc = !rc && (mask & META_SET_MODE) && fs->posix_acl
			     ? acl_follow_mode(fs, ino, in.mode)
			     : 0;
	space_give(fs, held);
	if (!rc)
		mark_dirty(fs, ino,
			   (mask & META_SET_SIZE) ? META_DIRTY_DATA
						  : META_DIRTY_ATTR);
	meta_batch_end(fs->meta);
	if (!rc)
		rc = acl_rc;
	if (rc)
		goto fail;
	to_stat(&out, &st);
	fuse_reply_attr(req, &st, fs->cfg.attr_timeout);
	return;
fail:
	fuse_reply_err(req, -rc);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	char *target;
	int rc = meta_readlink(FS(req)->meta, ino, &target);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	fuse_reply_readlink(req, target);
	free(target);
}

/* Creates a name of the given mode for the caller; out gets its attrs.
 * *earlier (optional): 1 when the request was sent again after a worker
 * died, and out is the node that worker made. */
static int make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev, const char *target,
		     struct meta_attr *out, int *earlier)
{
	struct fs *fs = FS(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	struct timespec now = fs_now_real();
	int rc = check_name(name);
	if (rc)
		return rc;
	if (read_only(fs))
		return -EROFS;
	struct meta_attr in = {.mode = mode,
			       .uid = ctx->uid,
			       .gid = ctx->gid,
			       .rdev = (uint32_t)rdev,
			       .atime = now,
			       .mtime = now,
			       .ctime = now};
	if (target)
		in.size = strlen(target);
	/* with POSIX ACLs the kernel leaves the mode unmasked: the
	 * directory's default ACL cuts it, or else the umask does */
	unsigned char dacl[FS_ACL_MAX], aacl[FS_ACL_MAX];
	ssize_t dn = 0;
	int store_access = 0;
	if (fs->posix_acl && !S_ISLNK(mode)) {
		dn = acl_load(fs, parent, ACL_XATTR_DEFAULT, dacl);
		if (dn < 0)
			return (int)dn;
		if (dn > 0) {
			memcpy(aacl, dacl, (size_t)dn);
			store_access = !acl_inherit(aacl, (size_t)dn, &in.mode);
		} else
			in.mode &= ~(ctx->umask & 0777);
	}
	if (earlier)
		*earlier = 0;
	meta_batch_begin(); /* the node, its ACLs, dirty flags: one commit */
	rc = meta_create(fs->meta, parent, name, &in, target, out);
	/* resent after a worker died: the create may be the dead worker's */
	if (rc == -EEXIST && serve_request_resent() &&
	    meta_lookup(fs->meta, parent, name, out) == 0 &&
	    (out->mode & S_IFMT) == (mode & S_IFMT)) {
		rc = 0;
		if (earlier)
			*earlier = 1;
	} else if (rc == 0) {
		if (store_access)
			rc = meta_setxattr(fs->meta, out->ino, ACL_XATTR_ACCESS,
					   (char *)aacl, (size_t)dn, 0);
		if (!rc && dn > 0 && S_ISDIR(mode))
			rc = meta_setxattr(fs->meta, out->ino,
					   ACL_XATTR_DEFAULT, (char *)dacl,
					   (size_t)dn, 0);
		uint64_t gone;
		if (rc) /* no node without the ACL that guards it */
			(void)meta_unlink(fs->meta, parent, name, S_ISDIR(mode),
					  &gone);
		if (rc == 0) {
			mark_dirty(fs, out->ino, META_DIRTY_NAME);
			mark_dirty(fs, parent, META_DIRTY_ATTR); /* mtime */
		}
	}
	meta_batch_end(fs->meta);
	return rc;
}

static void reply_new_node(fuse_req_t req, int rc, const struct meta_attr *a,
			   const char *op, const char *name)
{
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	debug_stop_at(FS(req), op, name);
	reply_entry(req, a);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode, dev_t rdev)
{
	struct meta_attr a;
	int rc = make_node(req, parent, name, mode, rdev, NULL, &a, NULL);
	reply_new_node(req, rc, &a, "mknod", name);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
		     mode_t mode)
{
	struct meta_attr a;
	int rc = make_node(req, parent, name, S_IFDIR | (mode & 07777), 0, NULL,
			   &a, NULL);
	reply_new_node(req, rc, &a, "mkdir", name);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent,
		       const char *name)
{
	struct meta_attr a;
	int rc =
		make_node(req, parent, name, S_IFLNK | 0777, 0, link, &a, NULL);
	reply_new_node(req, rc, &a, "symlink", name);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name,
			int want_dir)
{
	struct fs *fs = FS(req);
	char *path = NULL;
	struct meta_attr a;
	uint64_t ino;
	int rc = read_only(fs) ? -EROFS : check_name(name);
	if (!rc)
		rc = child_path(fs, parent, name, &path);
	if (!rc)
		rc = meta_lookup(fs->meta, parent, name, &a);
	/* The deletion goes into the outbox with the unlink, in one
	 * transaction, and the flusher sends it in a batch, after any upload
	 * in flight (it holds s3_lock alone). Only for an inode that may have
	 * an object: its first upload marks it before the PUT, in one step
	 * with its check that the name is still there. A file created and
	 * removed between two uploads (a build's temporary files) costs S3
	 * nothing. */
	char *key = NULL;
	if (!rc)
		rc = layout_key(fs->prefix, path, want_dir, &key);
	meta_batch_begin();
	if (!rc)
		rc = meta_unlink_queue(fs->meta, parent, name, want_dir, key,
				       &ino);
	if (rc == -ENOENT && serve_request_resent())
		rc = 0; /* the dead worker removed it already */
	if (!rc)
		mark_dirty(fs, parent, META_DIRTY_ATTR);
	meta_batch_end(fs->meta);
	free(key);
	free(path);
	if (!rc)
		debug_stop_at(fs, want_dir ? "rmdir" : "unlink", name);
	fuse_reply_err(req, -rc);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_name(req, parent, name, 1);
}

struct move {
	struct fs *fs;
	size_t old_len; /* of the old key prefix */
	const char *new_prefix;
	char **done; /* old keys copied, to delete afterwards */
	char **made; /* their copies, queued for deletion until the rename */
	size_t ndone, cap;
	int dest_exists; /* renamed onto an (empty) directory */
	int rc;
};

static int copy_page(void *ctx, const struct s3_list_page *p)
{
	struct move *m = ctx;
	for (size_t i = 0; i < p->nentries && !m->rc; i++) {
		const char *old = p->entries[i].key;
		char *neu = NULL;
		struct s3_error e;
		if (asprintf(&neu, "%s%s", m->new_prefix, old + m->old_len) < 0)
			return -ENOMEM;
		if (m->ndone == m->cap) {
			size_t cap = m->cap ? m->cap * 2 : 64;
			char **d = realloc(m->done, cap * sizeof(*d));
			if (d)
				m->done = d;
			char **k =
				d ? realloc(m->made, cap * sizeof(*k)) : NULL;
			if (k)
				m->made = k;
			if (!d || !k) {
				free(neu);
				return -ENOMEM;
			}
			m->cap = cap;
		}
		char *was = strdup(old);
		if (!was) {
			free(neu);
			return -ENOMEM;
		}
		m->done[m->ndone] = was;
		m->made[m->ndone++] = neu;
		/* under the new prefix only the destination's own marker can
		 * exist (the kernel renames onto an empty directory only); any
		 * other copy is one to undo after a crash until the rename
		 * commits */
		const char *q = neu;
		m->rc = m->dest_exists && strcmp(neu, m->new_prefix) == 0
				? meta_outbox_cancel(m->fs->meta, neu)
				: meta_outbox_add(m->fs->meta, &q, 1);
		if (!m->rc)
			m->rc = s3_copy_object(
				m->fs->s3, m->fs->bucket, old, m->fs->bucket,
				neu, S3_METADATA_COPY, NULL, NULL, &e);
		if (m->rc)
			break;
	}
	return m->rc;
}

/* Copies every object under the old path's key(s) to the new path. The
 * caller deletes m->done afterwards. */
static int copy_tree(struct fs *fs, const char *old_path, const char *new_path,
		     struct move *m)
{
	char *old_key = NULL, *new_key = NULL;
	struct s3_error e;
	int rc = layout_key(fs->prefix, old_path, 1, &old_key);
	if (!rc)
		rc = layout_key(fs->prefix, new_path, 1, &new_key);
	if (!rc) {
		m->fs = fs;
		m->old_len = strlen(old_key);
		m->new_prefix = new_key;
		rc = s3_list_all(fs->s3, fs->bucket, old_key, NULL, copy_page,
				 m, &e);
		if (!rc)
			rc = m->rc;
	}
	free(old_key);
	free(new_key);
	return rc;
}

/* Marks the keys a rename changes for a running reconciliation. */
static int touch_rename(struct fs *fs, const char *old_path,
			const char *new_path, int is_dir)
{
	char *k1 = NULL, *k2 = NULL;
	int rc = layout_key(fs->prefix, old_path, is_dir, &k1);
	if (!rc)
		rc = layout_key(fs->prefix, new_path, is_dir, &k2);
	if (!rc) {
		fs_touch(fs, k1, is_dir);
		fs_touch(fs, k2, is_dir);
	}
	free(k1);
	free(k2);
	return rc;
}

/* Makes a regular file's whole content local and dirty, so that it is
 * uploaded from the cache and never fetched (or evicted) again before:
 * after an exchange its key holds the other file's bytes. */
static int pin_content(struct fs *fs, const struct meta_attr *a)
{
	struct data_file *df;
	if (!S_ISREG(a->mode))
		return 0;
	int rc = data_get(fs->data, a->ino, a->size, &df);
	if (rc)
		return rc;
	rc = data_hydrate_all(df);
	if (!rc)
		rc = data_mark_dirty_all(df);
	data_put(df);
	return rc;
}

/* A second exchange of two names undoes the first, so one the kernel
 * sends again after its worker died must not be made again when that
 * worker made it. Unlike a create or a rename, nothing in the tree tells:
 * each exchange leaves a note of its request id in the store, in the
 * commit that makes it, one per worker thread ("x.PID.TID", the last it
 * made). */
#define FS_EXCHANGE_NOTES "x."

static int note_exchange(struct fs *fs)
{
	if (fs_debug_ms("TIERFS_DEBUG_EXCHANGE_NOTE_FAILS", 0))
		return -EIO; /* a test's store that fails here */
	char name[META_NOTE_MAX + 1];
	snprintf(name, sizeof(name), FS_EXCHANGE_NOTES "%d.%d", (int)getpid(),
		 (int)gettid());
	return meta_note_put(fs->meta, name, serve_request_unique());
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* At start: a worker taking over keeps the earlier workers' notes (one
 * killed before it answered them hands them on); the mount's first
 * clears them, since the kernel numbers a new mount's requests anew. */
static int recall_exchanges(struct fs *fs)
{
	if (!fs->cfg.takeover)
		return meta_notes_clear(fs->meta, FS_EXCHANGE_NOTES);
	int rc = meta_notes(fs->meta, FS_EXCHANGE_NOTES, &fs->exchanged,
			    &fs->nexchanged);
	if (!rc && fs->nexchanged)
		qsort(fs->exchanged, fs->nexchanged, sizeof(uint64_t), cmp_u64);
	return rc;
}

/* Whether this request, sent again, is an exchange a dead worker made. */
static int exchanged_before(struct fs *fs)
{
	uint64_t id = serve_request_unique();
	return serve_request_resent() &&
	       bsearch(&id, fs->exchanged, fs->nexchanged, sizeof(id),
		       cmp_u64) != NULL;
}

/* renameat2(RENAME_EXCHANGE) of two non-directories: each key gets the
 * other's content and attributes by a fresh upload from the cache. The
 * caller holds s3_lock alone. */
static int exchange(struct fs *fs, uint64_t parent, const char *name,
		    uint64_t newparent, const char *newname,
		    const struct meta_attr *a, const char *old_path,
		    const char *new_path)
{
	struct meta_attr b;
	int rc = meta_lookup(fs->meta, newparent, newname, &b);
	if (rc)
		return rc;
	if (S_ISDIR(a->mode) || S_ISDIR(b.mode))
		return -EINVAL; /* directories: not supported (yet) */
	rc = touch_rename(fs, old_path, new_path, 0);
	if (!rc)
		rc = pin_content(fs, a);
	if (!rc)
		rc = pin_content(fs, &b);
	meta_batch_begin();
	if (!rc)
		rc = meta_rename(fs->meta, parent, name, newparent, newname,
				 RENAME_EXCHANGE, NULL);
	if (!rc && (rc = note_exchange(fs)) != 0)
		/* the batch commits what it holds: with no note, no exchange
		 * either, as the error the caller gets says */
		(void)meta_rename(fs->meta, parent, name, newparent, newname,
				  RENAME_EXCHANGE, NULL);
	int brc = meta_batch_end(fs->meta);
	if (rc || brc)
		return rc ? rc : brc;
	mark_dirty(fs, a->ino, META_DIRTY_DATA | META_DIRTY_NAME);
	mark_dirty(fs, b.ino, META_DIRTY_DATA | META_DIRTY_NAME);
	mark_dirty(fs, parent, META_DIRTY_ATTR);
	if (newparent != parent)
		mark_dirty(fs, newparent, META_DIRTY_ATTR);
	return 0;
}

/* A rename of a file S3 has no object of yet needs no S3 work: its upload
 * goes to the new name. Claiming the inode waits out an upload of it in
 * flight (after which it has an object, and the caller copies it).
 * *done: renamed here. */
static int rename_unsent(struct fs *fs, uint64_t parent, const char *name,
			 uint64_t newparent, const char *newname,
			 unsigned flags, const struct meta_attr *a,
			 const char *old_path, const char *new_path, int *done)
{
	char etag[S3_ETAG_MAX];
	*done = 0;
	int rc = claim(fs, a->ino, NULL);
	if (rc)
		return rc;
	meta_get_etag(fs->meta, a->ino, etag, sizeof(etag));
	if (!etag[0]) {
		rc = touch_rename(fs, old_path, new_path, 0);
		if (!rc)
			rc = meta_rename(fs->meta, parent, name, newparent,
					 newname, flags, NULL);
		*done = 1;
	}
	if (*done && !rc) {
		mark_dirty(fs, parent, META_DIRTY_ATTR);
		if (newparent != parent)
			mark_dirty(fs, newparent, META_DIRTY_ATTR);
		mark_dirty(fs, a->ino, META_DIRTY_NAME);
	}
	unclaim(fs, a->ino, NULL);
	return rc;
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
		      fuse_ino_t newparent, const char *newname,
		      unsigned int flags)
{
	struct fs *fs = FS(req);
	struct meta_attr a;
	char *old_path = NULL, *new_path = NULL, *old_key = NULL,
	     *new_key = NULL;
	struct move m = {0};
	struct s3_error e;
	int rc = read_only(fs) ? -EROFS : 0;
	if (!rc && (check_name(name) || check_name(newname)))
		rc = -ENAMETOOLONG;
	if (!rc)
		rc = meta_lookup(fs->meta, parent, name, &a);
	if (rc == -ENOENT && serve_request_resent() &&
	    meta_lookup(fs->meta, newparent, newname, &a) == 0) {
		fuse_reply_err(req, 0); /* the dead worker renamed it */
		return;
	}
	if (!rc)
		rc = child_path(fs, parent, name, &old_path);
	if (!rc)
		rc = child_path(fs, newparent, newname, &new_path);
	if (!rc && !(flags & RENAME_EXCHANGE) && !S_ISDIR(a.mode)) {
		int done;
		rc = rename_unsent(fs, parent, name, newparent, newname, flags,
				   &a, old_path, new_path, &done);
		if (rc || done)
			goto out_unlocked;
	}
	/* S3 must show the queued deletions before we copy what it lists,
	 * and no upload may interleave with the copies */
	pthread_rwlock_wrlock(&fs->s3_lock);
	if (!rc && (flags & RENAME_EXCHANGE)) {
		rc = exchanged_before(fs)
			     ? 0
			     : exchange(fs, parent, name, newparent, newname,
					&a, old_path, new_path);
		goto out;
	}
	if (!rc)
		rc = drain_outbox(fs);
	if (!rc)
		rc = touch_rename(fs, old_path, new_path, S_ISDIR(a.mode));
	/* S3 first, additive only: copies of what is already there, each
	 * queued for deletion until the rename commits, so that a crash in
	 * between leaves neither a copy nor a name the rename never made
	 * (a destination that exists keeps its object: cancelled instead) */
	struct meta_attr dest;
	m.dest_exists = meta_lookup(fs->meta, newparent, newname, &dest) == 0;
	if (!rc && S_ISDIR(a.mode)) {
		rc = copy_tree(fs, old_path, new_path, &m);
	} else if (!rc) {
		char etag[S3_ETAG_MAX];
		meta_get_etag(fs->meta, a.ino, etag, sizeof(etag));
		rc = layout_key(fs->prefix, old_path, 0, &old_key);
		if (!rc)
			rc = layout_key(fs->prefix, new_path, 0, &new_key);
		if (!rc && m.dest_exists) {
			rc = meta_outbox_cancel(fs->meta, new_key);
		} else if (!rc) {
			const char *q = new_key;
			rc = meta_outbox_add(fs->meta, &q, 1);
		}
		if (!rc && etag[0]) {
			rc = s3_copy_object(fs->s3, fs->bucket, old_key,
					    fs->bucket, new_key,
					    S3_METADATA_COPY, NULL, NULL, &e);
			if (rc == -ENOENT) /* never uploaded */
				rc = 0;
		}
	}
	/* then the old names go, through the outbox, queued with the rename
	 * in one transaction, so that a crash cannot leave them behind to
	 * reappear (nor lose them) */
	uint64_t replaced = 0;
	struct meta_rename_keys k = {
		.gone = old_key ? (const char *const *)&old_key
				: (const char *const *)m.done,
		.ngone = old_key ? 1 : m.ndone,
		.made = old_key ? (const char *const *)&new_key
				: (const char *const *)m.made,
		.nmade = old_key ? (m.dest_exists ? 0 : 1) : m.ndone};
	if (!rc) {
		/* copied, not yet committed */
		fs_debug_pause("TIERFS_DEBUG_RENAME_COPIED_PAUSE_MS");
		rc = meta_rename_queue(fs->meta, parent, name, newparent,
				       newname, flags, &k, &replaced);
	}
	if (!rc) {
		mark_dirty(fs, parent, META_DIRTY_ATTR);
		if (newparent != parent)
			mark_dirty(fs, newparent, META_DIRTY_ATTR);
		/* widen the window in which S3 still lists the old names
		 * the store no longer has */
		fs_debug_pause("TIERFS_DEBUG_RENAME_PAUSE_MS");
		drain_outbox(fs);
		if (S_ISREG(a.mode))
			mark_dirty(fs, a.ino, META_DIRTY_NAME);
	}
out:
	pthread_rwlock_unlock(&fs->s3_lock);
out_unlocked:
	for (size_t i = 0; i < m.ndone; i++) {
		free(m.done[i]);
		free(m.made[i]);
	}
	free(m.done);
	free(m.made);
	free(old_path);
	free(new_path);
	free(old_key);
	free(new_key);
	if (!rc)
		debug_stop_at(fs, "rename", name);
	fuse_reply_err(req, -rc);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent,
		    const char *newname)
{
	struct fs *fs = FS(req);
	struct meta_attr a;
	int rc = read_only(fs) ? -EROFS : check_name(newname);
	pt_settle(fs, ino);
	meta_batch_begin();
	if (!rc)
		rc = meta_link(fs->meta, ino, newparent, newname, &a);
	if (rc == -EEXIST && serve_request_resent() &&
	    meta_lookup(fs->meta, newparent, newname, &a) == 0 && a.ino == ino)
		rc = 0; /* the dead worker linked it */
	if (!rc) {
		mark_dirty(fs, ino, META_DIRTY_NAME);
		mark_dirty(fs, newparent, META_DIRTY_ATTR);
	}
	meta_batch_end(fs->meta);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	debug_stop_at(fs, "link", newname);
	reply_entry(req, &a);
}

/* Open files, by inode: the kernel's file handle is the inode number, so
 * a worker that takes over a live mount understands the handles its
 * predecessor gave out. opens counts OPEN/CREATE minus RELEASE; a handle
 * first seen in a read or write (opened before a takeover) is adopted with
 * opens 1, and a RELEASE the store cannot match is ignored. */
static struct handle **handle_slot(struct fs *fs, uint64_t ino)
{
	struct handle **p = &fs->handles[ino % FS_HANDLE_BUCKETS];
	while (*p && (*p)->ino != ino)
		p = &(*p)->next;
	return p;
}

/* --- passthrough ----------------------------------------------------------
 * With FUSE passthrough (serve.h) a regular file that the cache holds
 * whole is opened with the kernel reading and writing its cache file
 * itself, at the cache disk's own speed, with no request here.
 * - The kernel wants all of an inode's opens in one mode: in passthrough,
 *   on one backing file, or none. pt_open() follows the inode's other
 *   opens; the first open gets passthrough when the file is FULL and the
 *   volume has no capacity (a write in passthrough is never seen here, so
 *   no quota could refuse it with ENOSPC). A set-user-ID or set-group-ID
 *   file is not written in passthrough: the kernel would not clear the
 *   bits (a write there is no FUSE_WRITE_KILL_SUIDGID request); bits set
 *   while the file is open so stay after its writes.
 * - Such writes are found afterwards: an open with write access marks the
 *   cache file written outside (data_outside()), and pt_settle() compares
 *   the file's size and mtime with what it saw last. On a change all of
 *   it becomes dirty, and meta takes the file's size and times (the
 *   kernel's own, of the write). It runs before each reply that carries
 *   the inode's attributes, before fsync (not fdatasync under local
 *   durability: see op_fsync()), truncate, fallocate and upload,
 *   after an upload before its bytes are called clean, at each flusher
 *   tick, and at the last writer's release.
 * - The cache disk must keep room for the metadata store and the range
 *   logs, which writes through this process never take (data.c's
 *   reserve). An open may write in passthrough only while the disk has
 *   2 * fs->pt_stop free; below fs->pt_stop, pt_guard() (a thread of
 *   its own, every FS_PT_GUARD_TICK_MS) makes the cache files open for
 *   writing immutable (data_freeze()), so that further writes fail
 *   (EPERM) until they are closed or room is back. That needs a cache
 *   disk that refuses writes to an open immutable file (ext4 does):
 *   pt_probe() checks, or there is no passthrough. A file a killed
 *   worker left frozen is thawed by the next data_open().
 * - The kernel's opens outlive a worker: CACHE_DIR/opens records them
 *   (opens.h), and the next worker adopts them (adopt_open()).
 * fs->pt_lock orders the opens, releases and settlements of an inode. */

/* fi->fh: the inode, and how it was opened */
#define FS_FH_PT (1ull << 63)	    /* in passthrough */
#define FS_FH_PT_WRITE (1ull << 62) /* with write access */

/* The record of h in fs->opens (under fs->lock). */
static void handle_record(struct fs *fs, struct handle *h)
{
	if (!fs->opens)
		return;
	struct opens_rec r = {h->ino, h->backing, (uint32_t)h->opens,
			      h->pt,  h->writers, 0};
	(void)opens_store(fs->opens, &h->slot, &r); /* full: no passthrough */
}

static uint64_t free_bytes(const char *dir)
{
	struct statvfs sv;
	if (statvfs(dir, &sv) != 0)
		return UINT64_MAX;
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

/* Whether passthrough writes can be stopped on the cache disk
 * (data_freeze_works()). Sets fs->pt_stop from the disk's size: the
 * data cache's reserve and a margin for what writers add before the
 * guard stops them. */
static int pt_probe(struct fs *fs)
{
	struct statvfs sv;
	int rc = data_freeze_works(fs->data);
	if (rc)
		fs_log("no FUSE passthrough: writes to open files cannot be "
		       "stopped on the cache disk (%s)",
		       strerror(-rc));
	if (!rc && statvfs(fs->cache_dir, &sv) == 0) {
		uint64_t disk = (uint64_t)sv.f_blocks * sv.f_frsize;
		fs->pt_stop =
			data_reserve(fs->data) +
			(disk / 16 < FS_PT_MARGIN ? disk / 16 : FS_PT_MARGIN);
	}
	return rc;
}

/* Stops writes in passthrough while the cache disk is short of room
 * (fs->pt_stop), and lets them go on once it has twice that again
 * (eviction makes room meanwhile). The guard thread's tick. */
static void pt_guard(struct fs *fs)
{
	static int told;
	if (!__atomic_load_n(&fs->pt_writers, __ATOMIC_RELAXED))
		return;
	uint64_t room = free_bytes(fs->cache_dir);
	int stop = room < fs->pt_stop, go = room >= 2 * fs->pt_stop;
	if (!stop && !go)
		return;
	pthread_mutex_lock(&fs->pt_lock);
	pthread_mutex_lock(&fs->lock);
	for (size_t b = 0; b < FS_HANDLE_BUCKETS; b++)
		for (struct handle *h = fs->handles[b]; h; h = h->next)
			if (h->writers && h->frozen != stop &&
			    data_freeze(h->df, stop) == 0)
				h->frozen = stop;
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_unlock(&fs->pt_lock);
	if (stop && !told)
		fs_log("the cache disk is nearly full (%llu bytes free): "
		       "writes to files open in passthrough fail (EPERM) "
		       "until room is back",
		       (unsigned long long)room);
	told = stop;
}

static int ts_equal(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static struct pt_seen seen_of(const struct stat *st)
{
	return (struct pt_seen){(uint64_t)st->st_size, st->st_mtim, 1};
}

/* df's cache file as it is: what later writes in passthrough change. */
static void look(struct data_file *df, struct pt_seen *seen)
{
	struct stat st;
	if (fstat(data_fd(df), &st) == 0)
		*seen = seen_of(&st);
}

/* Brings meta and the cache's record up to df's cache file after writes
 * in passthrough; how: DATA_OUTSIDE_SEEN, or DATA_OUTSIDE_END for the
 * last writer's release. 1 when the file had changed since *seen (which
 * then describes it). Under fs->pt_lock. */
static int settle_file(struct fs *fs, uint64_t ino, struct data_file *df,
		       struct pt_seen *seen, int how)
{
	struct stat st;
	if (fstat(data_fd(df), &st) != 0)
		return 0;
	/* not the ctime: this process renames the file at its first upload
	 * ("<ino>.new"), which moves it */
	int changed = !seen->valid || (uint64_t)st.st_size != seen->size ||
		      !ts_equal(st.st_mtim, seen->mtime);
	if (!changed && how == DATA_OUTSIDE_SEEN)
		return 0;
	int rc = data_outside(df, how | (changed ? DATA_OUTSIDE_SEEN : 0),
			      (uint64_t)st.st_size);
	if (rc) { /* seen stays: the next look tries again */
		fs_log("inode %llu, written in passthrough: %s",
		       (unsigned long long)ino, strerror(-rc));
		return 0;
	}
	*seen = seen_of(&st);
	if (changed) {
		struct meta_attr in = {.size = (uint64_t)st.st_size,
				       .mtime = st.st_mtim,
				       .ctime = st.st_ctim};
		struct meta_attr out;
		/* lazy, growth too: data_outside() has just recorded the
		 * size (a crash hands it back: recover_dirty_files()),
		 * and the times may wait (see META_SET_LAZY) */
		meta_setattr(fs->meta, ino,
			     META_SET_GROW | META_SET_MTIME | META_SET_CTIME |
				     META_SET_LAZY | META_SET_LAZY_GROW,
			     &in, &out);
		mark_dirty(fs, ino, META_DIRTY_DATA);
	}
	return changed;
}

/* pt_settle() for ino: 1 when meta changed. */
static int pt_settle(struct fs *fs, uint64_t ino)
{
	if (!__atomic_load_n(&fs->pt_writers, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&fs->pt_lock);
	pthread_mutex_lock(&fs->lock);
	struct handle *h = *handle_slot(fs, ino);
	struct data_file *df = h && h->writers ? data_ref(h->df) : NULL;
	struct pt_seen seen = df ? h->seen : (struct pt_seen){0};
	pthread_mutex_unlock(&fs->lock);
	int changed = 0;
	if (df) {
		changed = settle_file(fs, ino, df, &seen, DATA_OUTSIDE_SEEN);
		pthread_mutex_lock(&fs->lock);
		h = *handle_slot(fs, ino); /* pt_lock kept it */
		if (h)
			h->seen = seen;
		pthread_mutex_unlock(&fs->lock);
		data_put(df);
	}
	pthread_mutex_unlock(&fs->pt_lock);
	return changed;
}

/* How many opens may write ino in passthrough. */
static uint32_t pt_writing(struct fs *fs, uint64_t ino)
{
	if (!__atomic_load_n(&fs->pt_writers, __ATOMIC_RELAXED))
		return 0;
	pthread_mutex_lock(&fs->lock);
	struct handle *h = *handle_slot(fs, ino);
	uint32_t n = h ? h->writers : 0;
	pthread_mutex_unlock(&fs->lock);
	return n;
}

/* After an upload of ino: owe, it could not vouch for the bytes it read
 * (upload_file()). They stay dirty, and the file is queued again once no
 * open may write it in passthrough: now, or at the last such release
 * (pt_writer_gone()); until then each settlement that sees a change
 * queues it as before. Not owe: it vouched, nothing is owed. */
static void pt_owe(struct fs *fs, uint64_t ino, int owe)
{
	if (!owe && !__atomic_load_n(&fs->pt_writers, __ATOMIC_RELAXED))
		return; /* no writer, so no handle owes */
	pthread_mutex_lock(&fs->pt_lock);
	pthread_mutex_lock(&fs->lock);
	struct handle *h = *handle_slot(fs, ino);
	int later = h && h->writers;
	if (h)
		h->owed = owe && later;
	pthread_mutex_unlock(&fs->lock);
	pthread_mutex_unlock(&fs->pt_lock);
	if (owe && !later)
		dirty_add(fs, ino, clock_now_ms(), 0);
}

/* pt_settle() for every file open for writing in passthrough. */
static void pt_settle_all(struct fs *fs)
{
	if (!__atomic_load_n(&fs->pt_writers, __ATOMIC_RELAXED))
		return;
	size_t n = 0, cap = 0;
	uint64_t *inos = NULL;
	pthread_mutex_lock(&fs->lock);
	for (size_t b = 0; b < FS_HANDLE_BUCKETS; b++)
		for (struct handle *h = fs->handles[b]; h; h = h->next) {
			if (!h->writers)
				continue;
			if (n == cap) {
				size_t c = cap ? cap * 2 : 16;
				uint64_t *v = realloc(inos, c * sizeof(*v));
				if (!v)
					goto out;
				inos = v;
				cap = c;
			}
			inos[n++] = h->ino;
		}
out:
	pthread_mutex_unlock(&fs->lock);
	for (size_t i = 0; i < n; i++)
		pt_settle(fs, inos[i]);
	free(inos);
}

/* The mode of a new open of ino, counted already (file_ref_as()): with
 * write access if writes. Passthrough sets fi and the reply's backing id.
 * Under fs->pt_lock. Opens counted at once see no first among them, and
 * all go through this process; those decided already set the mode of
 * those that follow. */
static int pt_open(struct fs *fs, uint64_t ino, struct data_file *df,
		   int writes, struct fuse_file_info *fi)
{
	pthread_mutex_lock(&fs->lock);
	/* the open counted in it keeps it */
	struct handle *h = *handle_slot(fs, ino);
	int must = h->pt > 0;
	int first = h->opens == 1;
	int backing = h->backing, begin = writes && h->writers == 0;
	int may = must || (first && h->slot >= 0 && !fs->pt_off &&
			   serve_passthrough() && fs_capacity(fs) == 0);
	pthread_mutex_unlock(&fs->lock);
	struct meta_attr a;
	if (may && !must && writes &&
	    (free_bytes(fs->cache_dir) < 2 * fs->pt_stop ||
	     meta_getattr(fs->meta, ino, &a) != 0 ||
	     (a.mode & (S_ISUID | S_ISGID))))
		may = 0; /* short of room: through this process's reserve;
			  * set-ID: its writes must clear it (serve.h) */
	if (!may || (!must && !data_whole(df)))
		return 0; /* through this process, as without passthrough */
	if (!backing) {
		backing = serve_backing_open(data_fd(df));
		/* EPERM: no CAP_SYS_ADMIN; EINVAL: a cache disk the kernel
		 * will not pass through to (an overlayfs) */
		if ((backing == -EPERM || backing == -EINVAL) && !fs->pt_off) {
			fs->pt_off = 1;
			fs_log("no FUSE passthrough: the kernel refused the "
			       "cache file as a backing file (%s)",
			       strerror(-backing));
		}
		if (backing < 0)
			return must ? -EIO : 0;
	}
	struct pt_seen seen = {0};
	int rc = begin ? data_outside(df, DATA_OUTSIDE_BEGIN, 0) : 0;
	if (!rc && begin)
		look(df, &seen);
	if (rc) {
		if (!h->backing)
			serve_backing_close(backing);
		return must ? rc : 0;
	}
	pthread_mutex_lock(&fs->lock);
	h->backing = backing;
	h->pt++;
	if (begin) {
		h->seen = seen;
		__atomic_add_fetch(&fs->pt_writers, 1, __ATOMIC_RELAXED);
	}
	h->writers += writes != 0;
	handle_record(fs, h);
	pthread_mutex_unlock(&fs->lock);
	fi->fh |= FS_FH_PT | (writes ? FS_FH_PT_WRITE : 0);
	fi->keep_cache = 0;
	serve_reply_passthrough(backing);
	return 0;
}

/* A RELEASE of an open with write access in passthrough. Under
 * fs->pt_lock. */
static void pt_writer_gone(struct fs *fs, uint64_t ino)
{
	struct data_file *df = NULL;
	struct pt_seen seen = {0};
	pthread_mutex_lock(&fs->lock);
	struct handle *h = *handle_slot(fs, ino);
	int owed = 0;
	if (h && h->writers && --h->writers == 0) { /* the last */
		df = data_ref(h->df);
		seen = h->seen;
		owed = h->owed;
		h->owed = 0;
		if (h->frozen && data_freeze(h->df, 0) == 0)
			h->frozen = 0;
		__atomic_sub_fetch(&fs->pt_writers, 1, __ATOMIC_RELAXED);
	}
	if (h)
		handle_record(fs, h);
	pthread_mutex_unlock(&fs->lock);
	if (df) {
		settle_file(fs, ino, df, &seen, DATA_OUTSIDE_END);
		data_put(df);
	}
	if (owed) /* still dirty: see pt_owe() */
		mark_dirty(fs, ino, META_DIRTY_DATA);
}

/* One open the last worker recorded: a handle as it left it, holding
 * the cache file (not evicted while the kernel may use it). */
static void adopt_open(void *ctx, int slot, const struct opens_rec *r)
{
	struct fs *fs = ctx;
	struct meta_attr a;
	struct data_file *df = NULL;
	struct handle *h = NULL;
	int rc = meta_getattr(fs->meta, r->ino, &a);
	if (!rc)
		rc = data_get(fs->data, r->ino, a.size, &df);
	if (!rc && !(h = calloc(1, sizeof(*h))))
		rc = -ENOMEM;
	if (rc) {
		fs_log("the kernel's open of inode %llu: %s",
		       (unsigned long long)r->ino, strerror(-rc));
		if (df)
			data_put(df);
		return;
	}
	*h = (struct handle){r->ino, r->opens,	 df,   NULL, r->backing,
			     r->pt,  r->writers, slot, {0},  0};
	struct handle **p = handle_slot(fs, r->ino);
	h->next = *p;
	*p = h;
	if (h->writers) {
		/* the cache took all of it as dirty (data_open()), and the
		 * store its size (recover_dirty_files()); the times of writes
		 * the last worker had not seen are lost */
		__atomic_add_fetch(&fs->pt_writers, 1, __ATOMIC_RELAXED);
		(void)data_outside(df, DATA_OUTSIDE_BEGIN, 0);
		look(df, &h->seen);
	}
}

/* The kernel's opens a killed worker recorded (CACHE_DIR/opens; see
 * "passthrough"): adopted, so that their cache files stay and the modes
 * of new opens agree with theirs. */
static void open_opens(struct fs *fs)
{
	char path[PATH_MAX];
	if (!fs->cfg.passthrough || !fs->cache_dir ||
	    snprintf(path, sizeof(path), "%s/opens", fs->cache_dir) >=
		    (int)sizeof(path))
		return;
	int rc = pt_probe(fs);
	if (!rc)
		rc = opens_map(path, &fs->opens);
	if (rc) {
		if (rc != -ENOTSUP && rc != -ENOTTY && rc != -EPERM)
			fs_log("no FUSE passthrough: %s: %s", path,
			       strerror(-rc));
		fs->opens = NULL;
		return;
	}
	opens_each(fs->opens, adopt_open, fs);
}

/* A dirty cache file the last worker wrote in passthrough, outside
 * (data_outside()) when it stopped: data_open() took all of it as
 * dirty, and unless an open of the kernel still writes it (adopted by
 * open_opens()), its record says so from here. */
static void end_outside(struct fs *fs, uint64_t ino, uint64_t size)
{
	struct data_file *df;
	pthread_mutex_lock(&fs->lock);
	struct handle *h = *handle_slot(fs, ino);
	int held = h && h->writers;
	pthread_mutex_unlock(&fs->lock);
	if (held || data_get(fs->data, ino, size, &df))
		return;
	(void)data_outside(df, DATA_OUTSIDE_END, 0);
	data_put(df);
}

/* Counts an open of ino (open) or makes sure it is known (an operation),
 * and gives the operation its own data reference (out, optional).
 * reads: the open has read access (data_open_read()). created: ino is a
 * file just made (op_create), with no object behind it, so its cache file
 * starts as one that needs no range log. */
static int file_ref_as(struct fs *fs, uint64_t ino, int open, int reads,
		       int created, struct data_file **out)
{
	struct meta_attr a = {0};
	struct data_file *df = NULL;
	/* the data reference comes first, outside fs->lock, which every read
	 * and write takes: making or opening a cache file is work on the
	 * cache disk (see data_create(), data_get()) */
	int rc = created ? data_create(fs->data, ino, &df)
			 : meta_getattr(fs->meta, ino, &a);
	if (!rc && !created)
		rc = data_get(fs->data, ino, a.size, &df);
	if (rc)
		return rc;
	pthread_mutex_lock(&fs->lock);
	struct handle **p = handle_slot(fs, ino), *h = *p;
	if (!h) {
		h = calloc(1, sizeof(*h));
		if (!h) {
			pthread_mutex_unlock(&fs->lock);
			data_put(df);
			return -ENOMEM;
		}
		h->df = df;
		h->ino = ino;
		h->slot = -1;
		*p = h;
		df = out ? data_ref(df) : NULL;
	}
	if (open || h->opens == 0) {
		h->opens++;
		handle_record(fs, h);
	}
	if (open && reads)
		data_open_read(h->df);
	if (out) {
		*out = df;
		df = NULL;
	}
	pthread_mutex_unlock(&fs->lock);
	if (df) /* a handle was there already: it holds its own */
		data_put(df);
	return 0;
}

static int file_ref(struct fs *fs, uint64_t ino, int open,
		    struct data_file **out)
{
	return file_ref_as(fs, ino, open, 0, 0, out);
}

static void file_release(struct fs *fs, uint64_t ino, uint64_t fh)
{
	struct handle *h;
	if (fs->opens)
		pthread_mutex_lock(&fs->pt_lock);
	if (fh & FS_FH_PT_WRITE)
		pt_writer_gone(fs, ino);
	pthread_mutex_lock(&fs->lock);
	struct handle **p = handle_slot(fs, ino);
	int backing = 0;
	h = *p;
	if (h) {
		if ((fh & FS_FH_PT) && h->pt && --h->pt == 0) {
			backing = h->backing;
			h->backing = 0;
		}
		data_opens_left(h->df, --h->opens);
		handle_record(fs, h);
		if (h->opens == 0)
			*p = h->next;
		else
			h = NULL;
	}
	pthread_mutex_unlock(&fs->lock);
	/* the kernel let go of it before it sent the RELEASE */
	if (backing)
		serve_backing_close(backing);
	if (fs->opens)
		pthread_mutex_unlock(&fs->pt_lock);
	if (h) {
		data_uncache_all(h->df);
		data_put(h->df);
		free(h);
	}
}

/* Every handle still open (RELEASEs the session never delivered). */
static void close_all_handles(struct fs *fs)
{
	for (size_t b = 0; b < FS_HANDLE_BUCKETS; b++)
		while (fs->handles[b]) {
			struct handle *h = fs->handles[b];
			fs->handles[b] = h->next;
			if (h->frozen)
				(void)data_freeze(h->df, 0);
			data_put(h->df);
			free(h);
		}
}

static int open_handle(struct fs *fs, uint64_t ino, int created,
		       struct fuse_file_info *fi)
{
	struct data_file *df = NULL;
	/* the cache file is made or opened outside fs->pt_lock too: other
	 * opens must not wait for the cache disk (see file_ref_as()) */
	int rc = file_ref_as(fs, ino, 1, (fi->flags & O_ACCMODE) != O_WRONLY,
			     created, fs->opens ? &df : NULL);
	fi->fh = ino;
	/* one writer: the page cache stays valid; but writes in
	 * passthrough bypass it, so with them it is read again at each
	 * open that is not in passthrough */
	fi->keep_cache = !serve_passthrough();
	if (rc || !df)
		return rc;
	pthread_mutex_lock(&fs->pt_lock);
	rc = pt_open(fs, ino, df, (fi->flags & O_ACCMODE) != O_RDONLY, fi);
	pthread_mutex_unlock(&fs->pt_lock);
	data_put(df);
	if (rc) /* refused: no RELEASE will come */
		file_release(fs, ino, fi->fh);
	return rc;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	if (read_only(fs) && (fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	int rc = open_handle(fs, ino, 0, fi);
	if (rc)
		fuse_reply_err(req, -rc);
	else
		fuse_reply_open(req, fi);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
		      mode_t mode, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct meta_attr a;
	struct fuse_entry_param e;
	int earlier;
	meta_batch_begin();
	int rc = make_node(req, parent, name, S_IFREG | (mode & 07777), 0, NULL,
			   &a, &earlier);
	if (!rc) {
		mark_dirty(fs, a.ino, META_DIRTY_DATA);
		/* the dead worker's cache file is there (unless it died
		 * first), and held already by the open it recorded
		 * (adopt_open()): it is opened as any file's is */
		rc = open_handle(fs, a.ino, !earlier, fi);
	}
	meta_batch_end(fs->meta);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	debug_stop_at(fs, "create", name);
	fill_entry(fs, &a, &e);
	meta_ref(fs->meta, a.ino, 1);
	if (fuse_reply_create(req, &e, fi) != 0) {
		file_release(fs, a.ino, fi->fh);
		forget_one(fs, a.ino, 1);
	}
}

/* Replies with [off, off + n) of df's cache file, which libfuse splices
 * from the file into the device (op_read() sends only sizes it can): the
 * kernel copies the bytes into the reader's pages straight from the
 * cache file's page cache, with no copy here. */
static void reply_placed(fuse_req_t req, struct data_file *df, size_t n,
			 off_t off)
{
	if (n == 0) {
		fuse_reply_buf(req, NULL, 0); /* at the end */
		return;
	}
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(n);
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = data_fd(df);
	bv.buf[0].pos = off;
	fuse_reply_data(req, &bv, 0);
}

/* Replies with up to size bytes at off read into memory: a small read,
 * or one the full cache disk has no room for (rc -ENOSPC, *n bytes).
 * *n: the bytes replied with. */
static int reply_copied(fuse_req_t req, struct data_file *df, size_t size,
			off_t off, int rc, size_t *n)
{
	char *buf = malloc(size ? size : 1);
	ssize_t got = -ENOMEM;
	if (buf && rc == -ENOSPC)
		got = data_read_through(df, buf, *n, (uint64_t)off);
	else if (buf)
		got = data_read(df, buf, size, (uint64_t)off);
	if (got < 0)
		fuse_reply_err(req, (int)-got);
	else
		fuse_reply_buf(req, buf, (size_t)got);
	free(buf);
	*n = got < 0 ? 0 : (size_t)got;
	return got < 0 ? (int)got : 0;
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct data_file *df;
	int rc = file_ref(FS(req), ino, 0, &df);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	size_t n = 0;
	int splice = size >= FS_SPLICE_MIN && size <= FS(req)->splice_max;
	if (splice)
		rc = data_place(df, size, (uint64_t)off, &n);
	if (!splice || rc == -ENOSPC)
		rc = reply_copied(req, df, size, off, rc, &n);
	else if (rc)
		fuse_reply_err(req, -rc);
	else
		reply_placed(req, df, n, off);
	/* the kernel's page cache holds what a buffered read returned now:
	 * the cache file's copy need not stay in memory too (after the
	 * reply, which need not wait for the writeback this starts) */
	if (rc == 0 && n && !(fi->flags & O_DIRECT))
		data_uncache(df, (uint64_t)off, n);
	data_put(df);
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
		     size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct data_file *df;
	(void)fi;
	int rc = read_only(fs) ? -EROFS : file_ref(fs, ino, 0, &df);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	uint64_t old = data_size(df);
	uint64_t end = (uint64_t)off + size;
	uint64_t held;
	rc = space_take(fs, end > old ? end - old : 0, &held);
	ssize_t n = rc ? rc : data_write(df, buf, size, (uint64_t)off);
	if (n < 0) {
		data_put(df);
		space_give(fs, held);
		fuse_reply_err(req, (int)-n);
		return;
	}
	struct meta_attr in = {.size = data_size(df), .mtime = fs_now_real()};
	struct meta_attr out;
	/* grow only: two writes answered in the other order must not leave
	 * the smaller end as the size */
	unsigned mask = (in.size != old ? META_SET_GROW : 0) | META_SET_MTIME |
			META_SET_LAZY;
	data_put(df);
	meta_batch_begin();
	/* a caller without CAP_FSETID (serve.h); the kernel asks on each of
	 * its writes, and tells the mode it holds only when it asks again */
	struct meta_attr cur;
	int killed = serve_request_kill_suidgid() &&
		     meta_getattr(fs->meta, ino, &cur) == 0 &&
		     (cur.mode & (S_ISUID | S_ISGID));
	if (killed)
		mask |= META_SET_KILL_SUIDGID;
	/* a write within the size changes no row when the kernel keeps the
	 * times: its SETATTR brings the mtime */
	if (in.size != old || killed || !fs->kernel_times)
		meta_setattr(fs->meta, ino, mask, &in, &out);
	space_give(fs, held);
	mark_dirty(fs, ino, META_DIRTY_DATA);
	meta_batch_end(fs->meta);
	fuse_reply_write(req, (size_t)n);
	if (killed && fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, ino, -1, 0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	file_release(FS(req), ino, fi ? fi->fh : 0);
	fuse_reply_err(req, 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct data_file *df = NULL;
	(void)fi;
	int rc;
	/* fdatasync keeping the data on the cache disk needs nothing of the
	 * settlement: a file open for writing in passthrough is marked so
	 * in its range log ("O+"; a ".new" file is all dirty anyway), and a
	 * crash makes the cache take it at its size on disk, all dirty
	 * (data_open()), and the store from there (recover_dirty_files()).
	 * Its times and its place in the upload queue follow at the next
	 * stat or flusher tick. This saves the store a SQLite commit. */
	if (!fs->cfg.durability_local || !datasync)
		pt_settle(fs, ino);
	if (fs->cfg.durability_local) {
		/* durable on the cache disk; the flusher uploads later. The
		 * store's WAL is fsynced by its syncer while the data and its
		 * log are, here. */
		uint64_t ticket = 0;
		rc = file_ref(fs, ino, 0, &df);
		if (!rc)
			rc = meta_sync_begin(fs->meta, ino, datasync, &ticket);
		if (!rc)
			rc = data_sync(df);
		int mrc = meta_sync_wait(fs->meta, ticket);
		if (df)
			data_put(df);
		fuse_reply_err(req, rc ? -rc : -mrc);
		return;
	}
	/* durable in S3 when fsync returns (--durability s3); S3 out of
	 * reach past --s3-timeout: EIO, and the data stays dirty in the
	 * cache, to be sent when S3 is back */
	rc = sync_inode(fs, ino, 1); /* the kernel holds the inode's lock */
	if (!rc)
		rc = meta_commit(fs->meta);
	if (rc)
		dirty_add(fs, ino, clock_now_ms(), 0);
	fuse_reply_err(req, rc && rc != -EROFS ? EIO : -rc);
}

struct dir_fill {
	fuse_req_t req;
	struct fs *fs;
	char *buf;
	size_t size, used;
	int plus;
	/* readdirplus: the inodes added, referenced once meta_readdir() is
	 * done (its callback runs under the store's lock) */
	uint64_t *inos;
	size_t ninos, capinos;
};

static int fill_one(void *ctx, const char *name, const struct meta_attr *a,
		    uint64_t next_off)
{
	struct dir_fill *d = ctx;
	size_t n;
	/* our offsets: 1 after ".", 2 after "..", cookie + 2 after others */
	if (d->plus) {
		struct fuse_entry_param e;
		fill_entry(d->fs, a, &e);
		if (d->ninos == d->capinos) {
			size_t cap = d->capinos ? d->capinos * 2 : 64;
			uint64_t *v = realloc(d->inos, cap * sizeof(*v));
			if (!v)
				return 1; /* send what fits so far */
			d->inos = v;
			d->capinos = cap;
		}
		n = fuse_add_direntry_plus(d->req, d->buf + d->used,
					   d->size - d->used, name, &e,
					   (off_t)(next_off + 2));
		if (n <= d->size - d->used)
			d->inos[d->ninos++] = a->ino;
	} else {
		struct stat st = {.st_ino = a->ino, .st_mode = a->mode};
		n = fuse_add_direntry(d->req, d->buf + d->used,
				      d->size - d->used, name, &st,
				      (off_t)(next_off + 2));
	}
	if (n > d->size - d->used)
		return 1; /* full: the kernel asks again from here */
	d->used += n;
	return 0;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       int plus)
{
	struct fs *fs = FS(req);
	struct meta_attr self;
	struct dir_fill d = {
		req, fs, malloc(size ? size : 1), size, 0, plus, NULL, 0, 0};
	if (plus) /* the entries carry sizes and times */
		pt_settle_all(fs);
	int rc = d.buf ? meta_getattr(fs->meta, ino, &self) : -ENOMEM;
	if (!rc && !S_ISDIR(self.mode))
		rc = -ENOTDIR;
	for (int dot = (int)off; !rc && dot < 2; dot++) {
		struct stat st = {.st_ino = ino, .st_mode = S_IFDIR};
		const char *nm = dot ? ".." : ".";
		size_t n;
		if (plus) {
			struct fuse_entry_param e = {0};
			e.attr = st;
			n = fuse_add_direntry_plus(req, d.buf + d.used,
						   size - d.used, nm, &e,
						   dot + 1);
		} else {
			n = fuse_add_direntry(req, d.buf + d.used,
					      size - d.used, nm, &st, dot + 1);
		}
		if (n > size - d.used)
			break;
		d.used += n;
	}
	if (!rc)
		rc = meta_readdir(fs->meta, ino,
				  off > 2 ? (uint64_t)off - 2 : 0, fill_one,
				  &d);
	for (size_t i = 0; rc >= 0 && i < d.ninos; i++)
		meta_ref(fs->meta, d.inos[i], 1);
	if (rc < 0) {
		fuse_reply_err(req, -rc);
	} else if (fuse_reply_buf(req, d.buf, d.used) != 0) {
		for (size_t i = 0; i < d.ninos; i++)
			forget_one(fs, d.inos[i], 1);
	}
	free(d.inos);
	free(d.buf);
}

/* A directory handle holds nothing of ours (readdir goes by inode and
 * cookie): when the kernel can do without OPENDIR and RELEASEDIR, ENOSYS
 * tells it to, two round trips less per opendir(3) (SQLite's journal
 * commits, git status, find). The kernel then also keeps listings in its
 * page cache until the directory changes; changes from S3 invalidate it
 * (index.c). */
static void op_opendir(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	(void)ino;
	if (FS(req)->kernel_opendir)
		fuse_reply_err(req, ENOSYS);
	else
		fuse_reply_open(req, fi);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			   off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 1);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync,
			struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	(void)ino;
	(void)datasync;
	(void)fi;
	if (fs->cfg.durability_local) {
		/* namespace changes are in the store: durable on the cache
		 * disk once its WAL is fsync'ed; the flusher uploads later */
		fuse_reply_err(req, -meta_commit(fs->meta));
		return;
	}
	/* namespace changes: every dirty inode goes to S3 now */
	int rc = fs_flush_all(fs);
	fuse_reply_err(req, rc && rc != -EROFS ? EIO : -rc);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs *fs = FS(req);
	struct statvfs sv;
	uint64_t bytes, inodes;
	const uint64_t bsize = 4096;
	(void)ino;
	meta_usage(fs->meta, &bytes, &inodes);
	uint64_t cap = fs_capacity(fs);
	if (!cap)
		cap = 1ull << 50;
	uint64_t used = (bytes + bsize - 1) / bsize;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = bsize;
	sv.f_frsize = bsize;
	sv.f_blocks = cap / bsize;
	sv.f_bfree = sv.f_blocks > used ? sv.f_blocks - used : 0;
	sv.f_bavail = sv.f_bfree;
	sv.f_files = inodes + (1u << 30);
	sv.f_ffree = 1u << 30;
	sv.f_favail = sv.f_ffree;
	sv.f_namemax = META_NAME_MAX;
	fuse_reply_statfs(req, &sv);
}

/* Setting an access ACL sets the mode's permission bits to what it
 * grants, and one a mode can say is kept as the mode alone (the kernel's
 * posix_acl_update_mode(), which it leaves to us). A caller outside the
 * file's group and without CAP_FSETID loses set-group-ID on the way. */
static int set_access_acl(struct fs *fs, uint64_t ino, const char *value,
			  size_t size, int flags)
{
	struct meta_attr cur, in, out;
	mode_t perm;
	int rc = acl_check(value, size);
	if (!rc)
		rc = meta_getattr(fs->meta, ino, &cur);
	if (rc)
		return rc;
	int equiv = acl_mode(value, size, &perm);
	memset(&in, 0, sizeof(in));
	in.mode = (cur.mode & ~(mode_t)ACCESSPERMS) | perm;
	if (serve_request_kill_sgid())
		in.mode &= ~(mode_t)S_ISGID;
	if (equiv) {
		rc = meta_removexattr(fs->meta, ino, ACL_XATTR_ACCESS);
		if (rc == -ENODATA)
			rc = 0;
	} else {
		rc = xattr_fits(fs, ino, ACL_XATTR_ACCESS, value, size);
		if (!rc)
			rc = meta_setxattr(fs->meta, ino, ACL_XATTR_ACCESS,
					   value, size, flags);
	}
	if (!rc && in.mode != cur.mode)
		rc = meta_setattr(fs->meta, ino, META_SET_MODE, &in, &out);
	return rc;
}

/* A default ACL is a valid one, and a new directory can hold it twice
 * (as its access and default ACL, make_node()) within its headers. */
static int default_acl_fits(const char *value, size_t size)
{
	int rc = acl_check(value, size);
	struct layout_xattr both[] = {
		{ACL_XATTR_ACCESS, (void *)value, size},
		{ACL_XATTR_DEFAULT, (void *)value, size},
	};
	return rc ? rc : layout_xattrs_fit(both, 2);
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			const char *value, size_t size, int flags)
{
	struct fs *fs = FS(req);
	int acl = fs->posix_acl && strcmp(name, ACL_XATTR_ACCESS) == 0;
	int rc = read_only(fs) ? -EROFS : 0;
	if (!rc && fs->posix_acl && strcmp(name, ACL_XATTR_DEFAULT) == 0)
		rc = default_acl_fits(value, size);
	if (!rc && !acl)
		rc = xattr_fits(fs, ino, name, value, size);
	meta_batch_begin(); /* an ACL and the mode it sets: one commit */
	if (!rc)
		rc = acl ? set_access_acl(fs, ino, value, size, flags)
			 : meta_setxattr(fs->meta, ino, name, value, size,
					 flags);
	if (rc == -EEXIST && serve_request_resent())
		rc = acl ? set_access_acl(fs, ino, value, size, 0)
			 : meta_setxattr(fs->meta, ino, name, value, size, 0);
	if (!rc)
		mark_dirty(fs, ino, META_DIRTY_ATTR);
	meta_batch_end(fs->meta);
	fuse_reply_err(req, -rc);
}

/* Replies to getxattr/listxattr: the size when asked for it (size 0),
 * else the bytes. */
static void reply_xattr(fuse_req_t req, size_t size, ssize_t n, const char *buf)
{
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			size_t size)
{
	char *buf = size ? malloc(size) : NULL;
	ssize_t n = size && !buf ? -ENOMEM
				 : meta_getxattr(FS(req)->meta, ino, name, buf,
						 size);
	reply_xattr(req, size, n, buf);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	char *buf = size ? malloc(size) : NULL;
	ssize_t n = size && !buf
			    ? -ENOMEM
			    : meta_listxattr(FS(req)->meta, ino, buf, size);
	reply_xattr(req, size, n, buf);
	free(buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct fs *fs = FS(req);
	int rc = read_only(fs) ? -EROFS : meta_removexattr(fs->meta, ino, name);
	if (rc == -ENODATA && serve_request_resent())
		rc = 0;
	if (!rc)
		mark_dirty(fs, ino, META_DIRTY_ATTR);
	fuse_reply_err(req, -rc);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset,
			 off_t length, struct fuse_file_info *fi)
{
	struct fs *fs = FS(req);
	struct data_file *df;
	uint64_t end = (uint64_t)offset + (uint64_t)length;
	(void)fi;
	pt_settle(fs, ino);
	int rc = mode ? -EOPNOTSUPP : file_ref(fs, ino, 0, &df);
	if (rc) {
		fuse_reply_err(req, -rc);
		return;
	}
	uint64_t old = data_size(df);
	if (!rc && end > old) {
		uint64_t held;
		rc = space_take(fs, end - old, &held);
		if (!rc)
			rc = data_truncate(df, end);
		if (!rc) {
			struct meta_attr in = {.size = end,
					       .mtime = fs_now_real()},
					 out;
			rc = meta_setattr(fs->meta, ino,
					  META_SET_GROW | META_SET_MTIME, &in,
					  &out);
		}
		space_give(fs, held);
		if (!rc)
			mark_dirty(fs, ino, META_DIRTY_DATA);
	}
	data_put(df);
	fuse_reply_err(req, -rc);
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = op_init,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.readlink = op_readlink,
	.mknod = op_mknod,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.symlink = op_symlink,
	.rename = op_rename,
	.link = op_link,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	/* no .flush: close() needs nothing of tierfs (uploads follow
	 * --upload-delay; locks are the kernel's). The kernel writes a file's
	 * pages back at close either way, and after libfuse's ENOSYS it stops
	 * sending FLUSH: one round trip less per close. */
	.release = op_release,
	.fsync = op_fsync,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.readdirplus = op_readdirplus,
	.fsyncdir = op_fsyncdir,
	.statfs = op_statfs,
	.setxattr = op_setxattr,
	.getxattr = op_getxattr,
	.listxattr = op_listxattr,
	.removexattr = op_removexattr,
	.create = op_create,
	.fallocate = op_fallocate,
};
