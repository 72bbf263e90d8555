/* transfer.c: large uploads and downloads, split into parts sent in parallel.
 *
 * A transfer is a list of equal parts (the last one shorter) handed out to
 * cfg.parallel worker threads through an atomic counter. The first failure
 * stops the hand-out; parts already in flight finish or fail on their own.
 * Uploads then abort the multipart upload, so S3 never shows a partial
 * object. Downloads pin every range to the ETag seen first (If-Match), so a
 * file is never stitched together from two versions of an object. Memory is
 * bounded by the curl buffers of the workers: bodies go straight between
 * the fd and the socket.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "s3.h"

struct xfer {
	s3_client *c;
	const char *bucket;
	const char *key;
	int fd;
	uint64_t off;  /* first byte of the object range (download) */
	off_t fd_off;  /* where that range starts in fd */
	uint64_t len;  /* bytes in all */
	uint64_t part; /* part size */
	unsigned nparts;
	const char *upload_id; /* upload: the multipart upload */
	struct s3_part *parts; /* upload: nparts ETags, written by workers */
	const char *if_match;  /* download: the pinned ETag; reuse: src's */
	const char *src_key; /* reuse: where unchanged parts are copied from */
	const unsigned char *source; /* reuse: nparts s3_part_source */
	int alt_fd;		     /* reuse: for S3_PART_ALT parts */

	/* download: told the prefix of the range that landed */
	const struct s3_landed *landed;

	atomic_uint next;
	atomic_int failed;
	pthread_mutex_t lock;
	int rc;		     /* protected by lock: the first failure */
	struct s3_error err; /* protected by lock */
	/* protected by lock, with landed: bytes landed per part, and the
	 * first part not whole yet */
	uint64_t *part_landed;
	unsigned lead;
	int stopped; /* landed said stop: every part stops */
};

static void xfer_fail(struct xfer *x, int rc, const struct s3_error *e)
{
	pthread_mutex_lock(&x->lock);
	if (x->rc == 0) {
		x->rc = rc;
		x->err = *e;
	}
	pthread_mutex_unlock(&x->lock);
	atomic_store(&x->failed, 1);
}

static uint64_t part_len(const struct xfer *x, unsigned i)
{
	uint64_t start = (uint64_t)i * x->part;
	return x->len - start < x->part ? x->len - start : x->part;
}

typedef int (*part_fn)(struct xfer *x, unsigned i, struct s3_error *e);

static int upload_part_from(struct xfer *x, unsigned i, int fd,
			    struct s3_error *e)
{
	x->parts[i].number = i + 1;
	return s3_mpu_upload_part_fd(x->c, x->bucket, x->key, x->upload_id,
				     i + 1, fd,
				     x->fd_off + (off_t)((uint64_t)i * x->part),
				     part_len(x, i), x->parts[i].etag, e);
}

static int upload_part(struct xfer *x, unsigned i, struct s3_error *e)
{
	return upload_part_from(x, i, x->fd, e);
}

static int upload_or_copy_part(struct xfer *x, unsigned i, struct s3_error *e)
{
	if (x->source[i] == S3_PART_FD)
		return upload_part(x, i, e);
	if (x->source[i] == S3_PART_ALT)
		return upload_part_from(x, i, x->alt_fd, e);
	x->parts[i].number = i + 1;
	return s3_mpu_upload_part_copy(x->c, x->bucket, x->key, x->upload_id,
				       i + 1, x->bucket, x->src_key,
				       (uint64_t)i * x->part, part_len(x, i),
				       x->if_match, x->parts[i].etag, e);
}

struct part_landed {
	struct xfer *x;
	unsigned i;
};

/* A part's bytes landed: tells x->landed the whole parts before the first
 * part not whole, and that part's bytes. */
static int part_landed(void *arg, uint64_t bytes)
{
	const struct part_landed *pl = arg;
	struct xfer *x = pl->x;
	pthread_mutex_lock(&x->lock);
	x->part_landed[pl->i] = bytes;
	int rc = x->stopped;
	if (!rc && pl->i == x->lead) {
		while (x->lead < x->nparts &&
		       x->part_landed[x->lead] == part_len(x, x->lead))
			x->lead++;
		uint64_t prefix = x->len;
		if (x->lead < x->nparts)
			prefix = (uint64_t)x->lead * x->part +
				 x->part_landed[x->lead];
		rc = x->stopped = x->landed->fn(x->landed->arg, prefix) != 0;
	}
	pthread_mutex_unlock(&x->lock);
	return rc;
}

static int download_part(struct xfer *x, unsigned i, struct s3_error *e)
{
	uint64_t start = (uint64_t)i * x->part;
	uint64_t n = part_len(x, i);
	struct part_landed pl = {x, i};
	struct s3_landed tell = {part_landed, &pl};
	ssize_t got =
		s3_get_fd_landed(x->c, x->bucket, x->key, x->off + start, n,
				 x->fd, x->fd_off + (off_t)start, x->if_match,
				 NULL, x->part_landed ? &tell : NULL, e);
	if (got >= 0 && (uint64_t)got != n) {
		snprintf(e->message, sizeof(e->message),
			 "range at %llu: got %zd of %llu bytes",
			 (unsigned long long)(x->off + start), got,
			 (unsigned long long)n);
		got = -EIO;
	}
	return got < 0 ? (int)got : 0;
}

struct worker {
	struct xfer *x;
	part_fn fn;
};

/* Takes parts off the shared counter until none are left or one failed. */
static void *worker_main(void *arg)
{
	const struct worker *w = arg;
	struct xfer *x = w->x;
	for (;;) {
		unsigned i = atomic_fetch_add(&x->next, 1);
		if (i >= x->nparts || atomic_load(&x->failed))
			break;
		struct s3_error e = {0};
		int rc = w->fn(x, i, &e);
		if (rc)
			xfer_fail(x, rc, &e);
	}
	return NULL;
}

/* Runs fn on every part, on min(parallel, nparts) threads, the caller's
 * among them. */
static int xfer_run(struct xfer *x, part_fn fn, struct s3_error *err)
{
	struct worker w = {x, fn};
	unsigned n = s3_client_config(x->c)->parallel;
	if (n > x->nparts)
		n = x->nparts;
	pthread_t *tids = calloc(n, sizeof(*tids));
	unsigned started = 0;
	if (tids)
		for (; started + 1 < n; started++)
			if (pthread_create(&tids[started], NULL, worker_main,
					   &w) != 0)
				break;
	worker_main(&w);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	if (err && x->rc)
		*err = x->err;
	return x->rc;
}

static void xfer_init(struct xfer *x, s3_client *c, const char *bucket,
		      const char *key, int fd, uint64_t len)
{
	const struct s3_config *cfg = s3_client_config(c);
	memset(x, 0, sizeof(*x));
	x->c = c;
	x->bucket = bucket;
	x->key = key;
	x->fd = fd;
	x->len = len;
	x->part = cfg->part_size;
	/* grow parts (in MiB steps) until they fit the part-count limit */
	while ((len + x->part - 1) / x->part > cfg->max_parts)
		x->part += 1u << 20;
	x->nparts = len ? (unsigned)((len + x->part - 1) / x->part) : 0;
	atomic_init(&x->next, 0);
	atomic_init(&x->failed, 0);
	pthread_mutex_init(&x->lock, NULL);
}

/* A multipart upload of x's parts with fn, completed, or aborted on
 * failure so no partial object or orphaned upload is left. */
static int multipart(struct xfer *x, part_fn fn, const struct s3_put_opts *opts,
		     char *etag_out, struct s3_error *err)
{
	char *upload_id = NULL;
	int rc = s3_mpu_create(x->c, x->bucket, x->key, opts, &upload_id, err);
	if (rc)
		return rc;
	x->upload_id = upload_id;
	x->parts = calloc(x->nparts, sizeof(*x->parts));
	rc = x->parts ? xfer_run(x, fn, err) : -ENOMEM;
	if (rc == 0)
		rc = s3_mpu_complete(x->c, x->bucket, x->key, upload_id,
				     x->parts, x->nparts, etag_out, err);
	if (rc) /* best effort: leave no orphaned upload behind */
		s3_mpu_abort(x->c, x->bucket, x->key, upload_id, NULL);
	free(x->parts);
	free(upload_id);
	return rc;
}

int s3_upload_fd(s3_client *c, const char *bucket, const char *key, int fd,
		 off_t off, uint64_t len, const struct s3_put_opts *opts,
		 char *etag_out, struct s3_error *err)
{
	if (len <= s3_client_config(c)->multipart_threshold)
		return s3_put_fd(c, bucket, key, fd, off, len, opts, etag_out,
				 err);
	struct xfer x;
	xfer_init(&x, c, bucket, key, fd, len);
	x.fd_off = off;
	int rc = multipart(&x, upload_part, opts, etag_out, err);
	pthread_mutex_destroy(&x.lock);
	return rc;
}

uint64_t s3_upload_part_size(s3_client *c, uint64_t len)
{
	struct xfer x;
	xfer_init(&x, c, "", "", -1, len);
	pthread_mutex_destroy(&x.lock);
	return x.part;
}

int s3_upload_fd_reuse(s3_client *c, const char *bucket, const char *key,
		       int fd, int alt_fd, uint64_t len,
		       const struct s3_put_opts *opts, const char *src_key,
		       const char *src_etag, const unsigned char *source,
		       char *etag_out, struct s3_error *err)
{
	struct xfer x;
	if (len <= s3_client_config(c)->multipart_threshold)
		return -EINVAL;
	xfer_init(&x, c, bucket, key, fd, len);
	x.src_key = src_key;
	x.if_match = src_etag;
	x.source = source;
	x.alt_fd = alt_fd;
	int rc = multipart(&x, upload_or_copy_part, opts, etag_out, err);
	pthread_mutex_destroy(&x.lock);
	return rc;
}

ssize_t s3_get_parallel(s3_client *c, const char *bucket, const char *key,
			uint64_t off, uint64_t len, int fd, off_t fd_off,
			const char *if_match, const struct s3_landed *landed,
			struct s3_error *err)
{
	struct xfer x;
	if (len == 0)
		return 0;
	xfer_init(&x, c, bucket, key, fd, len);
	if (x.nparts == 1) {
		pthread_mutex_destroy(&x.lock);
		return s3_get_fd_landed(c, bucket, key, off, len, fd, fd_off,
					if_match, NULL, landed, err);
	}
	x.off = off;
	x.fd_off = fd_off;
	x.if_match = if_match;
	x.landed = landed;
	if (landed) {
		x.part_landed = calloc(x.nparts, sizeof(*x.part_landed));
		if (!x.part_landed) {
			pthread_mutex_destroy(&x.lock);
			return -ENOMEM;
		}
	}
	int rc = xfer_run(&x, download_part, err);
	free(x.part_landed);
	pthread_mutex_destroy(&x.lock);
	return rc ? rc : (ssize_t)len;
}

int s3_download_fd(s3_client *c, const char *bucket, const char *key, int fd,
		   struct s3_object_info *info, struct s3_error *err)
{
	struct s3_object_info first;
	uint64_t part = s3_client_config(c)->part_size;
	/* The first part's response tells the size and ETag: no HEAD needed. */
	ssize_t got =
		s3_get_fd(c, bucket, key, 0, part, fd, 0, NULL, &first, err);
	if (got == -ERANGE) { /* an empty object has no byte 0 */
		got = s3_head_object(c, bucket, key, &first, err);
		if (got == 0 && first.size != 0) {
			s3_object_info_free(&first);
			return -ESTALE; /* it changed under us */
		}
	}
	if (got < 0)
		return (int)got;
	int rc = 0;
	if (ftruncate(fd, (off_t)first.size) != 0)
		rc = -errno;
	if (rc == 0 && first.size > (uint64_t)got) {
		ssize_t n = s3_get_parallel(c, bucket, key, (uint64_t)got,
					    first.size - (uint64_t)got, fd,
					    (off_t)got, first.etag, NULL, err);
		if (n < 0)
			rc = (int)n;
	}
	if (rc == 0 && info)
		*info = first;
	else
		s3_object_info_free(&first);
	return rc;
}
