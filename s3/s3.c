/* s3.c: the S3 client: request engine (sign, send, retry) and S3 operations.
 *
 * One request runs through req_run(): for each attempt it takes a curl
 * handle from the pool, signs the request afresh (the date changes), sends
 * it, and classifies the outcome with retry.h. Bodies are streamed: uploads
 * are read with pread() from the caller's fd (so a retry resends exactly the
 * same bytes), downloads are pwrite()n to the caller's fd at the right
 * offset (so a retry overwrites, never appends). Error bodies and XML
 * results are collected in memory, capped at RESP_MAX.
 *
 * Invariants:
 * - a curl handle is used by one thread at a time: it is either in the pool
 *   (under pool_lock) or owned by the req_run() that took it;
 * - the secret is read under cred_lock into a local copy that is wiped
 *   before req_run() returns; nothing derived from it but the signature
 *   leaves this file.
 */
#include "s3.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "buf.h"
#include "clock.h"
#include "retry.h"
#include "sigv4.h"
#include "uri.h"
#include "xml.h"

#define POOL_MAX 64
#define RESP_MAX (16u << 20) /* XML results and error bodies */
#define REQ_MAX_HEADERS 48
#define REQ_MAX_PARAMS 8
#define HASH_CHUNK (256u << 10)
/* body copies kept mapped for the next part while an upload goes on */
#define SNAP_SPARES 8
#define COPY_STALL_TIMEOUT_S 300u

struct s3_client {
	struct s3_config cfg; /* string fields point at the copies below */
	char *endpoint;	      /* owned */
	char *region;	      /* owned */
	char *ca_file;	      /* owned; may be NULL */
	char *scheme;	      /* owned: "http" or "https" */
	char *hostport;	      /* owned: "host" or "host:port" */
	char *base_path;      /* owned: "" or "/path" without trailing '/' */
	int path_style;
	int sign_payload;

	pthread_mutex_t cred_lock;
	struct s3_credentials creds; /* protected by cred_lock */

	pthread_mutex_t pool_lock;
	CURL *pool[POOL_MAX]; /* protected by pool_lock */
	int npool;	      /* protected by pool_lock */

	CURLSH *share; /* DNS cache and TLS sessions, shared by all handles */
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];

	atomic_long clock_skew; /* seconds to add to local time when signing */

	pthread_mutex_t snap_lock; /* bodies read into memory (see s3.h) */
	pthread_cond_t snap_free;
	uint64_t snap_held; /* protected by snap_lock, as the spares are */
	struct snap_spare {
		char *mem;
		uint64_t len;
	} snap_spare[SNAP_SPARES];
	int nspare;
	uint64_t spare_bytes;
};

/* --- configuration ------------------------------------------------------ */

void s3_config_init(struct s3_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->region = S3_DEFAULT_REGION;
	cfg->max_attempts = S3_DEFAULT_MAX_ATTEMPTS;
	cfg->deadline_ms = S3_DEFAULT_DEADLINE_MS;
	cfg->backoff_base_ms = S3_DEFAULT_BACKOFF_BASE_MS;
	cfg->backoff_max_ms = S3_DEFAULT_BACKOFF_MAX_MS;
	cfg->connect_timeout_ms = S3_DEFAULT_CONNECT_TIMEOUT_MS;
	cfg->stall_timeout_s = S3_DEFAULT_STALL_TIMEOUT_S;
	cfg->parallel = S3_DEFAULT_PARALLEL;
	cfg->part_size = S3_DEFAULT_PART_SIZE;
	cfg->multipart_threshold = S3_DEFAULT_MULTIPART_THRESHOLD;
	cfg->max_parts = S3_DEFAULT_MAX_PARTS;
}

void s3_config_from_env(struct s3_config *cfg)
{
	const char *v;
	if ((v = getenv("AWS_ENDPOINT_URL_S3")) && *v)
		cfg->endpoint = v;
	else if ((v = getenv("AWS_ENDPOINT_URL")) && *v)
		cfg->endpoint = v;
	if ((v = getenv("AWS_REGION")) && *v)
		cfg->region = v;
	else if ((v = getenv("AWS_DEFAULT_REGION")) && *v)
		cfg->region = v;
	if ((v = getenv("AWS_CA_BUNDLE")) && *v)
		cfg->ca_file = v;
}

int s3_config_validate(const struct s3_config *cfg, char *why, size_t whylen)
{
	const char *e = cfg->endpoint;
	if (e && strncmp(e, "http://", 7) != 0 &&
	    strncmp(e, "https://", 8) != 0) {
		snprintf(why, whylen,
			 "endpoint '%s': must start with http:// or https://",
			 e);
		return -EINVAL;
	}
	if (e && e[strcspn(e, " \t\r\n?#@")] != '\0') {
		snprintf(why, whylen,
			 "endpoint '%s': must not contain spaces, '?', '#' or "
			 "'@'",
			 e);
		return -EINVAL;
	}
	if (!cfg->region || !*cfg->region ||
	    cfg->region[strspn(cfg->region,
			       "abcdefghijklmnopqrstuvwxyz0123456789-")] !=
		    '\0') {
		snprintf(why, whylen,
			 "region '%s': must be lower-case letters, digits and "
			 "'-'",
			 cfg->region ? cfg->region : "");
		return -EINVAL;
	}
	if (cfg->max_attempts < 1 || cfg->max_attempts > 100) {
		snprintf(why, whylen, "max_attempts %u: must be 1..100",
			 cfg->max_attempts);
		return -EINVAL;
	}
	if (cfg->parallel < 1 || cfg->parallel > 256) {
		snprintf(why, whylen, "parallel %u: must be 1..256",
			 cfg->parallel);
		return -EINVAL;
	}
	if (cfg->part_size < S3_MIN_PART_SIZE ||
	    cfg->part_size > (5ull << 30)) {
		snprintf(why, whylen,
			 "part_size %llu: must be between 5 MiB and 5 GiB",
			 (unsigned long long)cfg->part_size);
		return -EINVAL;
	}
	if (cfg->max_parts < 1 || cfg->max_parts > 10000) {
		snprintf(why, whylen, "max_parts %u: must be 1..10000",
			 cfg->max_parts);
		return -EINVAL;
	}
	if (cfg->deadline_ms < 1 ||
	    cfg->backoff_max_ms < cfg->backoff_base_ms) {
		snprintf(why, whylen,
			 "deadline_ms must be > 0 and backoff_max_ms >= "
			 "backoff_base_ms");
		return -EINVAL;
	}
	return 0;
}

static void logf_(const s3_client *c, enum s3_log_level lvl, const char *fmt,
		  ...) __attribute__((format(printf, 3, 4)));
static void logf_(const s3_client *c, enum s3_log_level lvl, const char *fmt,
		  ...)
{
	char msg[512];
	va_list ap;
	if (!c->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	c->cfg.log(c->cfg.log_ctx, lvl, msg);
}

/* --- client lifecycle --------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
	curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access a,
		       void *ctx)
{
	(void)h;
	(void)a;
	s3_client *c = ctx;
	pthread_mutex_lock(&c->share_lock[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ctx)
{
	(void)h;
	s3_client *c = ctx;
	pthread_mutex_unlock(&c->share_lock[data]);
}

/* Splits endpoint into scheme, host[:port] and base path. */
static int parse_endpoint(s3_client *c)
{
	const char *e = c->endpoint;
	const char *sep = strstr(e, "://");
	assert(sep);
	c->scheme = strndup(e, (size_t)(sep - e));
	const char *host = sep + 3;
	size_t hl = strcspn(host, "/");
	c->hostport = strndup(host, hl);
	const char *path = host + hl;
	size_t pl = strlen(path);
	while (pl > 0 && path[pl - 1] == '/')
		pl--;
	c->base_path = strndup(path, pl);
	if (!c->scheme || !c->hostport || !c->base_path)
		return -ENOMEM;
	if (!*c->hostport)
		return -EINVAL;
	return 0;
}

int s3_client_create(const struct s3_config *cfg,
		     const struct s3_credentials *creds, s3_client **out)
{
	char why[256];
	int rc = s3_config_validate(cfg, why, sizeof(why));
	if (rc) {
		if (cfg->log)
			cfg->log(cfg->log_ctx, S3_LOG_ERROR, why);
		return rc;
	}
	pthread_once(&curl_once, curl_init_once);
	if (curl_init_rc != CURLE_OK)
		return -ENOMEM;

	s3_client *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->cfg = *cfg;
	c->region = strdup(cfg->region);
	if (cfg->endpoint)
		c->endpoint = strdup(cfg->endpoint);
	else if (c->region &&
		 asprintf(&c->endpoint, "https://s3.%s.amazonaws.com",
			  c->region) < 0)
		c->endpoint = NULL;
	c->ca_file = cfg->ca_file ? strdup(cfg->ca_file) : NULL;
	if (!c->region || !c->endpoint || (cfg->ca_file && !c->ca_file)) {
		rc = -ENOMEM;
		goto fail_strings;
	}
	c->cfg.endpoint = c->endpoint;
	c->cfg.region = c->region;
	c->cfg.ca_file = c->ca_file;
	rc = parse_endpoint(c);
	if (rc)
		goto fail_strings;

	int https = strcmp(c->scheme, "https") == 0;
	int aws = strstr(c->hostport, "amazonaws.com") != NULL;
	c->path_style = cfg->addressing == S3_ADDRESSING_AUTO
				? !aws
				: cfg->addressing == S3_ADDRESSING_PATH;
	c->sign_payload = cfg->payload_signing == S3_PAYLOAD_AUTO
				  ? !https
				  : cfg->payload_signing == S3_PAYLOAD_SIGNED;

	if (creds) {
		rc = s3_credentials_set(&c->creds, creds->access_key,
					creds->secret_key,
					creds->session_token);
		if (rc)
			goto fail_strings;
	}
	pthread_mutex_init(&c->cred_lock, NULL);
	pthread_mutex_init(&c->pool_lock, NULL);
	pthread_mutex_init(&c->snap_lock, NULL);
	pthread_cond_init(&c->snap_free, NULL);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_init(&c->share_lock[i], NULL);
	c->share = curl_share_init();
	if (!c->share) {
		rc = -ENOMEM;
		goto fail_share;
	}
	curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
	curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
	curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
	curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
	curl_share_setopt(c->share, CURLSHOPT_SHARE,
			  CURL_LOCK_DATA_SSL_SESSION);
	atomic_init(&c->clock_skew, 0);
	*out = c;
	return 0;

fail_share:
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&c->share_lock[i]);
	pthread_cond_destroy(&c->snap_free);
	pthread_mutex_destroy(&c->snap_lock);
	pthread_mutex_destroy(&c->pool_lock);
	pthread_mutex_destroy(&c->cred_lock);
	s3_credentials_free(&c->creds);
fail_strings:
	free(c->scheme);
	free(c->hostport);
	free(c->base_path);
	free(c->endpoint);
	free(c->region);
	free(c->ca_file);
	free(c);
	return rc;
}

void s3_client_destroy(s3_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->npool; i++)
		curl_easy_cleanup(c->pool[i]);
	curl_share_cleanup(c->share);
	for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
		pthread_mutex_destroy(&c->share_lock[i]);
	pthread_cond_destroy(&c->snap_free);
	pthread_mutex_destroy(&c->snap_lock);
	pthread_mutex_destroy(&c->pool_lock);
	pthread_mutex_destroy(&c->cred_lock);
	s3_credentials_free(&c->creds);
	free(c->scheme);
	free(c->hostport);
	free(c->base_path);
	free(c->endpoint);
	free(c->region);
	free(c->ca_file);
	free(c);
}

int s3_client_set_credentials(s3_client *c, const struct s3_credentials *creds)
{
	struct s3_credentials fresh;
	int rc = s3_credentials_set(&fresh, creds->access_key,
				    creds->secret_key, creds->session_token);
	if (rc)
		return rc;
	pthread_mutex_lock(&c->cred_lock);
	struct s3_credentials old = c->creds;
	c->creds = fresh;
	pthread_mutex_unlock(&c->cred_lock);
	s3_credentials_free(&old);
	return 0;
}

const struct s3_config *s3_client_config(const s3_client *c)
{
	return &c->cfg;
}

static CURL *pool_get(s3_client *c)
{
	CURL *h = NULL;
	pthread_mutex_lock(&c->pool_lock);
	if (c->npool > 0)
		h = c->pool[--c->npool];
	pthread_mutex_unlock(&c->pool_lock);
	return h ? h : curl_easy_init();
}

/* Returns h to the pool; curl_easy_reset() keeps its live connection. */
static void pool_put(s3_client *c, CURL *h)
{
	curl_easy_reset(h);
	pthread_mutex_lock(&c->pool_lock);
	if (c->npool < POOL_MAX) {
		c->pool[c->npool++] = h;
		h = NULL;
	}
	pthread_mutex_unlock(&c->pool_lock);
	if (h)
		curl_easy_cleanup(h);
}

/* --- errors ------------------------------------------------------------- */

struct code_errno {
	const char *code;
	int err;
};

static const struct code_errno code_map[] = {
	{"NoSuchKey", ENOENT},
	{"NoSuchBucket", ENOENT},
	{"NoSuchUpload", ENOENT},
	{"NoSuchVersion", ENOENT},
	{"AccessDenied", EACCES},
	{"SignatureDoesNotMatch", EACCES},
	{"InvalidAccessKeyId", EACCES},
	{"AllAccessDisabled", EACCES},
	{"AccountProblem", EACCES},
	{"InvalidToken", EACCES},
	{"ExpiredToken", EACCES},
	{"RequestTimeTooSkewed", EACCES},
	{"BucketAlreadyExists", EEXIST},
	{"BucketAlreadyOwnedByYou", EEXIST},
	{"BucketNotEmpty", ENOTEMPTY},
	{"PreconditionFailed", ESTALE},
	{"InvalidRange", ERANGE},
	{"EntityTooLarge", EFBIG},
	{"KeyTooLongError", ENAMETOOLONG},
	{"QuotaExceeded", EDQUOT},
	{"NotImplemented", ENOTSUP},
	{"BadDigest", EIO},
	{"InvalidDigest", EINVAL},
	{"EntityTooSmall", EINVAL},
	{"InvalidArgument", EINVAL},
	{"InvalidRequest", EINVAL},
	{"InvalidBucketName", EINVAL},
	{"InvalidPart", EINVAL},
	{"InvalidPartOrder", EINVAL},
	{"MalformedXML", EINVAL},
	{"MethodNotAllowed", EPERM},
};

int s3_errno_from_status(int http_status, const char *code)
{
	if (code && *code)
		for (size_t i = 0; i < sizeof(code_map) / sizeof(code_map[0]);
		     i++)
			if (strcmp(code, code_map[i].code) == 0)
				return -code_map[i].err;
	switch (http_status) {
	case 400:
	case 411:
		return -EINVAL;
	case 401:
	case 403:
		return -EACCES;
	case 404:
		return -ENOENT;
	case 409:
		return -EBUSY;
	case 412:
		return -ESTALE;
	case 416:
		return -ERANGE;
	case 501:
		return -ENOTSUP;
	default:
		return -EIO;
	}
}

const char *s3_error_str(const struct s3_error *err, char *buf, size_t len)
{
	if (err->http_status)
		snprintf(buf, len, "%s (HTTP %d): %s",
			 err->code[0] ? err->code : "error", err->http_status,
			 err->message);
	else
		snprintf(buf, len, "%s: %s", err->code[0] ? err->code : "error",
			 err->message);
	return buf;
}

/* --- requests ----------------------------------------------------------- */

struct hdr {
	char *name; /* owned, lower case */
	char *value;
};

struct req {
	/* what to send (borrowed) */
	const char *method;
	const char *bucket; /* NULL: service level */
	const char *key;    /* NULL: bucket level */
	struct uri_param params[REQ_MAX_PARAMS];
	size_t nparams;
	struct sigv4_header hdrs[REQ_MAX_HEADERS];
	size_t nhdrs;
	struct buf hdr_store; /* owned: storage for header values we format */
	const char *body;     /* request body in memory, or NULL */
	int body_fd;	      /* or from this fd (-1: none) */
	off_t body_off;
	uint64_t body_len;
	uint64_t body_pos; /* read position within the body, this attempt */
	int body_streamed; /* the body came from an fd (timeouts: see below) */
	char payload_hash[65];
	unsigned stall_timeout_s;

	/* where the response body goes */
	int sink_fd; /* pwrite target, -1: none */
	off_t sink_off;
	char *sink_buf; /* or this buffer */
	size_t sink_cap;
	uint64_t sink_pos;
	/* fd sinks at an offset: curl hands the body over in pieces of
	 * 16 KiB (7.88); they are gathered here and written SINK_STAGE at a
	 * time, so a large GET costs one pwrite per SINK_STAGE bytes */
	char *stage; /* owned, SINK_STAGE bytes once needed */
	size_t staged;
	int sink_err;			/* -errno from the sink */
	const struct s3_landed *landed; /* told as sink_fd fills */
	uint64_t landed_max;		/* what it was last told */
	const char *sink_why; /* what was wrong with the body, when not ours */
	/* a ranged GET's: a 200 to it is the whole object, from byte 0 */
	int ranged;
	uint64_t range_off, range_len;

	/* what came back, reset each attempt */
	long status;
	struct buf resp;   /* XML result or error body */
	struct hdr *rhdrs; /* owned: response headers */
	size_t nrhdrs, caprhdrs;
};

static void req_init(struct req *r, const char *method, const char *bucket,
		     const char *key)
{
	memset(r, 0, sizeof(*r));
	r->method = method;
	r->bucket = bucket;
	r->key = key;
	r->body_fd = -1;
	r->sink_fd = -1;
}

static void rhdrs_clear(struct req *r)
{
	for (size_t i = 0; i < r->nrhdrs; i++) {
		free(r->rhdrs[i].name);
		free(r->rhdrs[i].value);
	}
	r->nrhdrs = 0;
}

static void req_free(struct req *r)
{
	rhdrs_clear(r);
	free(r->rhdrs);
	buf_free(&r->resp);
	buf_free(&r->hdr_store);
	free(r->stage);
}

static void req_param(struct req *r, const char *name, const char *value)
{
	assert(r->nparams < REQ_MAX_PARAMS);
	r->params[r->nparams].name = name;
	r->params[r->nparams].value = value;
	r->nparams++;
}

static void req_header(struct req *r, const char *name, const char *value)
{
	assert(r->nhdrs < REQ_MAX_HEADERS);
	r->hdrs[r->nhdrs].name = name;
	r->hdrs[r->nhdrs].value = value;
	r->nhdrs++;
}

static const char *req_header_value(const struct req *r, const char *name)
{
	for (size_t i = 0; i < r->nrhdrs; i++)
		if (strcmp(r->rhdrs[i].name, name) == 0)
			return r->rhdrs[i].value;
	return NULL;
}

/* Adds Content-Type and x-amz-meta-* from opts. The meta names are
 * formatted into a list kept alive by r->hdr_store's owner: the caller's
 * opts, which outlive the request. */
static int req_put_opts(struct req *r, const struct s3_put_opts *opts,
			char (*names)[96], size_t max_names)
{
	req_header(r, "content-type",
		   opts && opts->content_type ? opts->content_type
					      : "binary/octet-stream");
	if (!opts)
		return 0;
	if (opts->nmeta > max_names)
		return -E2BIG;
	for (size_t i = 0; i < opts->nmeta; i++) {
		const char *n = opts->meta[i].name;
		if (!n || !*n || strlen(n) > 80 ||
		    n[strspn(n, "abcdefghijklmnopqrstuvwxyz0123456789-_")] ||
		    strpbrk(opts->meta[i].value ? opts->meta[i].value : "",
			    "\r\n"))
			return -EINVAL;
		snprintf(names[i], sizeof(names[i]), "x-amz-meta-%s", n);
		req_header(r, names[i], opts->meta[i].value);
	}
	return 0;
}

static size_t on_body_read(char *dst, size_t size, size_t nmemb, void *ctx)
{
	struct req *r = ctx;
	size_t want = size * nmemb;
	uint64_t left = r->body_len - r->body_pos;
	if (want > left)
		want = (size_t)left;
	if (want == 0)
		return 0;
	if (r->body) {
		memcpy(dst, r->body + r->body_pos, want);
	} else {
		ssize_t n;
		do {
			n = pread(r->body_fd, dst, want,
				  r->body_off + (off_t)r->body_pos);
		} while (n < 0 && errno == EINTR);
		if (n <= 0) {
			r->sink_err = n < 0 ? -errno : -EIO; /* file shrank */
			return CURL_READFUNC_ABORT;
		}
		want = (size_t)n;
	}
	r->body_pos += want;
	return want;
}

static int on_body_seek(void *ctx, curl_off_t off, int origin)
{
	struct req *r = ctx;
	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->body_len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->body_pos = (uint64_t)off;
	return CURL_SEEKFUNC_OK;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ctx)
{
	struct req *r = ctx;
	size_t len = size * nmemb;
	if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
		/* a new response (after 100 Continue, say): start over */
		rhdrs_clear(r);
		const char *sp = memchr(line, ' ', len);
		r->status = sp ? strtol(sp + 1, NULL, 10) : 0;
		return len;
	}
	const char *colon = memchr(line, ':', len);
	if (!colon)
		return len;
	if (r->nrhdrs == r->caprhdrs) {
		size_t cap = r->caprhdrs ? r->caprhdrs * 2 : 16;
		struct hdr *h = realloc(r->rhdrs, cap * sizeof(*h));
		if (!h)
			return 0;
		r->rhdrs = h;
		r->caprhdrs = cap;
	}
	size_t nl = (size_t)(colon - line);
	const char *v = colon + 1;
	size_t vl = len - nl - 1;
	while (vl && (*v == ' ' || *v == '\t')) {
		v++;
		vl--;
	}
	while (vl &&
	       (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
		vl--;
	char *name = strndup(line, nl);
	char *value = strndup(v, vl);
	if (!name || !value) {
		free(name);
		free(value);
		return 0;
	}
	for (char *p = name; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	r->rhdrs[r->nrhdrs].name = name;
	r->rhdrs[r->nrhdrs].value = value;
	r->nrhdrs++;
	return len;
}

#define SINK_STAGE (256u << 10)

/* Writes len bytes to the fd sink at sink_pos, then tells the landed
 * callback. Returns 0, or sets sink_err and returns it. */
static int sink_put(struct req *r, const char *data, size_t len)
{
	size_t done = 0;
	while (done < len) {
		ssize_t n =
			r->sink_off < 0
				? write(r->sink_fd, data + done, len - done)
				: pwrite(r->sink_fd, data + done, len - done,
					 r->sink_off +
						 (off_t)(r->sink_pos + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return r->sink_err = n < 0 ? -errno : -EIO;
		done += (size_t)n;
	}
	r->sink_pos += len;
	if (r->landed && r->sink_pos > r->landed_max) {
		r->landed_max = r->sink_pos;
		if (r->landed->fn(r->landed->arg, r->sink_pos))
			return r->sink_err = -ECANCELED;
	}
	return 0;
}

/* Writes what is staged. Returns 0 or sink_err. */
static int sink_flush(struct req *r)
{
	size_t n = r->staged;
	r->staged = 0;
	return n ? sink_put(r, r->stage, n) : 0;
}

static size_t on_body_write(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct req *r = ctx;
	size_t len = size * nmemb;
	int success = r->status >= 200 && r->status < 300;
	if (!success || (r->sink_fd < 0 && !r->sink_buf)) {
		if (r->resp.len + len > RESP_MAX) {
			r->sink_err = -EOVERFLOW;
			return 0;
		}
		return buf_append(&r->resp, data, len) ? 0 : len;
	}
	if (r->ranged && r->status == 200 && r->range_off > 0) {
		/* a server that ignored Range: these bytes belong at 0 */
		r->sink_err = -EPROTO;
		r->sink_why = "a ranged GET was answered with the whole object";
		return 0;
	}
	if (r->ranged && r->range_len != S3_TO_END &&
	    r->sink_pos + r->staged + len > r->range_len) {
		r->sink_err = -EPROTO;
		r->sink_why = "a ranged GET was answered with more bytes than "
			      "asked for";
		return 0;
	}
	if (r->sink_buf) {
		if (r->sink_pos + len > r->sink_cap) {
			r->sink_err = -EOVERFLOW;
			return 0;
		}
		memcpy(r->sink_buf + r->sink_pos, data, len);
		r->sink_pos += len;
		return len;
	}
	if (r->sink_off < 0) /* a pipe, written in order, never rewound */
		return sink_put(r, data, len) ? 0 : len;
	size_t done = 0;
	while (done < len) {
		if (r->staged == 0 && len - done >= SINK_STAGE)
			/* a whole stage's worth at once: no copy */
			return sink_put(r, data + done, len - done) ? 0 : len;
		if (!r->stage && !(r->stage = malloc(SINK_STAGE))) {
			r->sink_err = -ENOMEM;
			return 0;
		}
		size_t n = SINK_STAGE - r->staged < len - done
				   ? SINK_STAGE - r->staged
				   : len - done;
		memcpy(r->stage + r->staged, data + done, n);
		r->staged += n;
		done += n;
		if (r->staged == SINK_STAGE && sink_flush(r))
			return 0;
	}
	return len;
}

/* SHA-256 of the request body, streaming through the fd if needed. */
static int hash_body(struct req *r)
{
	if (r->body_len == 0) {
		strcpy(r->payload_hash, SIGV4_EMPTY_SHA256);
		return 0;
	}
	if (r->body) {
		sigv4_sha256_hex(r->body, r->body_len, r->payload_hash);
		return 0;
	}
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	char *chunk = malloc(HASH_CHUNK);
	int rc = md && chunk && EVP_DigestInit_ex(md, EVP_sha256(), NULL) == 1
			 ? 0
			 : -ENOMEM;
	for (uint64_t pos = 0; rc == 0 && pos < r->body_len;) {
		size_t want = r->body_len - pos < HASH_CHUNK
				      ? (size_t)(r->body_len - pos)
				      : HASH_CHUNK;
		ssize_t n = pread(r->body_fd, chunk, want,
				  r->body_off + (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else if (EVP_DigestUpdate(md, chunk, (size_t)n) != 1)
			rc = -ENOMEM;
		else
			pos += (uint64_t)n;
	}
	if (rc == 0) {
		unsigned char d[SHA256_DIGEST_LENGTH];
		static const char hex[] = "0123456789abcdef";
		EVP_DigestFinal_ex(md, d, NULL);
		for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
			r->payload_hash[2 * i] = hex[d[i] >> 4];
			r->payload_hash[2 * i + 1] = hex[d[i] & 15];
		}
		r->payload_hash[64] = '\0';
	}
	EVP_MD_CTX_free(md);
	free(chunk);
	return rc;
}

/* The encoded path: "/bucket/key" (path style) or "/key" (virtual). */
static int build_path(const s3_client *c, const struct req *r, struct buf *out,
		      struct buf *host)
{
	int rc = buf_puts(out, c->base_path);
	if (!rc && r->bucket && c->path_style) {
		rc = buf_putc(out, '/');
		if (!rc)
			rc = uri_encode(out, r->bucket, strlen(r->bucket), 0);
	}
	if (!rc && r->key) {
		rc = buf_putc(out, '/');
		if (!rc)
			rc = uri_encode(out, r->key, strlen(r->key), 1);
	}
	if (!rc && out->len == 0)
		rc = buf_putc(out, '/');
	if (!rc && r->bucket && !c->path_style)
		rc = buf_printf(host, "%s.%s", r->bucket, c->hostport);
	else if (!rc)
		rc = buf_puts(host, c->hostport);
	return rc;
}

/* A TLS handshake failure is worth retrying only when the network broke
 * it (a reset, an early EOF); a protocol mismatch such as https:// to a
 * plain-http port fails the same way every time. */
static enum retry_transport classify_tls(const char *errbuf)
{
	static const char *const transient[] = {
		"reset",     "SSL_ERROR_SYSCALL",  "unexpected eof",
		"timed out", "Connection refused", "Broken pipe",
	};
	for (size_t i = 0; i < sizeof(transient) / sizeof(transient[0]); i++)
		if (strcasestr(errbuf, transient[i]))
			return RETRY_T_CONNECT;
	return RETRY_T_FATAL;
}

static enum retry_transport classify_curl(CURLcode cc, const char *errbuf)
{
	switch (cc) {
	case CURLE_OK:
		return RETRY_T_NONE;
	case CURLE_SSL_CONNECT_ERROR:
		return classify_tls(errbuf);
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_CONNECT:
		return RETRY_T_CONNECT;
	case CURLE_OPERATION_TIMEDOUT:
		return RETRY_T_TIMEOUT;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return RETRY_T_RESET;
	default:
		return RETRY_T_FATAL;
	}
}

static const char *transport_code(enum retry_transport t)
{
	switch (t) {
	case RETRY_T_CONNECT:
		return "ConnectFailed";
	case RETRY_T_RESET:
		return "ConnectionReset";
	case RETRY_T_TIMEOUT:
		return "Timeout";
	default:
		return "TransportError";
	}
}

/* Applies the server's Date header to the clock skew used for signing. */
static void learn_skew(s3_client *c, const struct req *r)
{
	const char *date = req_header_value(r, "date");
	if (!date)
		return;
	time_t server = curl_getdate(date, NULL);
	if (server > 0) {
		long skew = (long)(server - time(NULL));
		atomic_store(&c->clock_skew, skew);
		logf_(c, S3_LOG_WARN,
		      "clock skew of %ld s against the server; "
		      "correcting",
		      skew);
	}
}

/* Sets up handle h for one attempt of r; the headers list goes to *list. */
static int prepare(s3_client *c, struct req *r, CURL *h, const char *url,
		   const char *host, const char *path, const char *query,
		   struct curl_slist **list, uint64_t remaining_ms,
		   char *errbuf)
{
	char amz_date[17];
	struct sigv4_header hs[REQ_MAX_HEADERS + 4];
	size_t n = 0;
	struct buf line = BUF_INIT;
	int rc = 0;

	sigv4_amz_date(time(NULL) + atomic_load(&c->clock_skew), amz_date);
	hs[n++] = (struct sigv4_header){"host", host};
	hs[n++] = (struct sigv4_header){"x-amz-date", amz_date};
	hs[n++] =
		(struct sigv4_header){"x-amz-content-sha256", r->payload_hash};
	for (size_t i = 0; i < r->nhdrs; i++)
		hs[n++] = r->hdrs[i];

	pthread_mutex_lock(&c->cred_lock);
	char *ak = c->creds.access_key ? strdup(c->creds.access_key) : NULL;
	char *sk = c->creds.secret_key ? strdup(c->creds.secret_key) : NULL;
	char *tok =
		c->creds.session_token ? strdup(c->creds.session_token) : NULL;
	int have_creds = c->creds.access_key != NULL;
	int creds_oom = (c->creds.access_key && !ak) ||
			(c->creds.secret_key && !sk) ||
			(c->creds.session_token && !tok);
	pthread_mutex_unlock(&c->cred_lock);
	if (creds_oom) {
		rc = -ENOMEM;
		goto out;
	}
	if (tok)
		hs[n++] = (struct sigv4_header){"x-amz-security-token", tok};

	struct sigv4_request sr = {
		.method = r->method,
		.canonical_uri = path,
		.canonical_query = query,
		.headers = hs,
		.nheaders = n,
		.payload_hash = r->payload_hash,
		.amz_date = amz_date,
		.region = c->region,
		.service = "s3",
	};
	char *auth = NULL;
	if (have_creds) {
		auth = sigv4_authorization(&sr, ak, sk ? sk : "");
		if (!auth) {
			rc = -ENOMEM;
			goto out;
		}
	}
	struct curl_slist *l = NULL;
	for (size_t i = 0; i < n && rc == 0; i++) {
		buf_reset(&line);
		rc = buf_printf(&line, "%s: %s", hs[i].name, hs[i].value);
		struct curl_slist *nl =
			rc ? NULL : curl_slist_append(l, line.data);
		if (!rc && !nl)
			rc = -ENOMEM;
		if (nl)
			l = nl;
	}
	if (auth && rc == 0) {
		buf_reset(&line);
		rc = buf_printf(&line, "Authorization: %s", auth);
		struct curl_slist *nl =
			rc ? NULL : curl_slist_append(l, line.data);
		if (!rc && !nl)
			rc = -ENOMEM;
		if (nl)
			l = nl;
	}
	if (auth) {
		OPENSSL_cleanse(auth, strlen(auth));
		free(auth);
	}
	static const char *const unset[] = {
		"Expect:", "Accept:", "Transfer-Encoding:"};
	for (size_t i = 0; i < 3 && rc == 0; i++) {
		struct curl_slist *nl = curl_slist_append(l, unset[i]);
		if (!nl)
			rc = -ENOMEM;
		else
			l = nl;
	}
	if (line.data)
		OPENSSL_cleanse(line.data, line.cap);
	*list = l;
	if (rc)
		goto out;

	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, l);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_SHARE, c->share);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)c->cfg.connect_timeout_ms);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME,
			 (long)(r->stall_timeout_s ? r->stall_timeout_s
						   : c->cfg.stall_timeout_s));
	/* Small requests (no streamed body) are bounded by the deadline;
	 * streamed ones by the stall timeout, however long they take. */
	if (r->body_fd < 0 && !r->body_streamed && r->sink_fd < 0)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
				 (long)(remaining_ms ? remaining_ms : 1));
	curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 256L << 10);
	curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 256L << 10);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body_write);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	if (c->ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca_file);

	if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else if (strcmp(r->method, "PUT") == 0 ||
		   strcmp(r->method, "POST") == 0) {
		if (strcmp(r->method, "PUT") == 0) {
			curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
			curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE,
					 (curl_off_t)r->body_len);
		} else {
			curl_easy_setopt(h, CURLOPT_POST, 1L);
			curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
					 (curl_off_t)r->body_len);
		}
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_body_read);
		curl_easy_setopt(h, CURLOPT_READDATA, r);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_body_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, r);
	} else if (strcmp(r->method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}
out:
	buf_free(&line);
	if (sk) {
		OPENSSL_cleanse(sk, strlen(sk));
		free(sk);
	}
	if (tok) {
		OPENSSL_cleanse(tok, strlen(tok));
		free(tok);
	}
	free(ak);
	return rc;
}

/* Fills err from the response r (status, XML error body, request id). */
static void fill_http_error(const struct req *r, struct s3_error *e)
{
	e->http_status = (int)r->status;
	e->code[0] = e->message[0] = '\0';
	if (r->resp.len == 0 ||
	    xml_parse_error(r->resp.data, r->resp.len, e) != 0) {
		/* HEAD has no body; some proxies send HTML */
		snprintf(e->message, sizeof(e->message), "HTTP status %ld",
			 r->status);
		switch (r->status) {
		case 403:
			snprintf(e->code, sizeof(e->code), "Forbidden");
			break;
		case 404:
			snprintf(e->code, sizeof(e->code), "NotFound");
			break;
		case 503:
			snprintf(e->code, sizeof(e->code),
				 "ServiceUnavailable");
			break;
		default:
			snprintf(e->code, sizeof(e->code), "HTTP%ld",
				 r->status);
		}
	}
	const char *id = req_header_value(r, "x-amz-request-id");
	if (!id)
		id = req_header_value(r, "x-trans-id");
	if (id && !e->request_id[0])
		snprintf(e->request_id, sizeof(e->request_id), "%s", id);
}

static uint64_t random_u64(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != sizeof(v))
		v = (uint64_t)clock_now_ms() * 6364136223846793005ull +
		    (uint64_t)pthread_self();
	return v;
}

/* Some operations answer 200 and put an <Error> in the body. */
static int body_is_error(const struct req *r)
{
	return r->resp.len > 0 &&
	       memmem(r->resp.data, r->resp.len > 512 ? 512 : r->resp.len,
		      "<Error>", 7) != NULL;
}

/* A signed payload is hashed before it is sent. Read twice from an fd
 * that a writer changes meanwhile (a file written while it uploads), the
 * hash and the bytes sent disagree and S3 answers BadDigest, again and
 * again while the writes go on. With cfg.snapshot_budget set, such a body
 * is read once into memory, and that copy is hashed and sent: a
 * consistent snapshot of the range. The copies are mmap'd, and the
 * client holds at most the budget; a request waits for room.
 *
 * A copy is kept as a spare for the next body of its length while
 * uploads go on: a fresh mapping costs a page fault and a zeroed page for
 * every 4 KiB (a sixth of the daemon's CPU in a 20-stream write). Spares
 * count against the budget, and the last release unmaps them all, so an
 * idle client holds nothing. */
static char *spare_take(s3_client *c, uint64_t len)
{
	for (int i = 0; i < c->nspare; i++)
		if (c->snap_spare[i].len == len) {
			char *mem = c->snap_spare[i].mem;
			c->snap_spare[i] = c->snap_spare[--c->nspare];
			c->spare_bytes -= len;
			return mem;
		}
	return NULL;
}

/* Unmaps spares until they and the copies in use fit the budget (0:
 * all of them). */
static void spares_trim(s3_client *c, uint64_t budget)
{
	while (c->nspare > 0 && c->snap_held + c->spare_bytes > budget) {
		struct snap_spare *sp = &c->snap_spare[--c->nspare];
		munmap(sp->mem, sp->len);
		c->spare_bytes -= sp->len;
	}
}

/* Gives a body copy (NULL: none was made) and its bytes back to the
 * budget. */
static void body_release(s3_client *c, char *owned, uint64_t len)
{
	pthread_mutex_lock(&c->snap_lock);
	c->snap_held -= len;
	if (owned && c->snap_held > 0 && c->nspare < SNAP_SPARES) {
		c->snap_spare[c->nspare++] = (struct snap_spare){owned, len};
		c->spare_bytes += len;
		owned = NULL;
	}
	if (c->snap_held == 0)
		spares_trim(c, 0);
	pthread_cond_broadcast(&c->snap_free);
	pthread_mutex_unlock(&c->snap_lock);
	if (owned)
		munmap(owned, len);
}

static int body_to_memory(s3_client *c, struct req *r, char **owned)
{
	pthread_mutex_lock(&c->snap_lock);
	while (c->snap_held + r->body_len > c->cfg.snapshot_budget)
		pthread_cond_wait(&c->snap_free, &c->snap_lock);
	c->snap_held += r->body_len;
	char *mem = spare_take(c, r->body_len);
	if (!mem)
		spares_trim(c, c->cfg.snapshot_budget);
	pthread_mutex_unlock(&c->snap_lock);
	int rc = 0;
	if (!mem) {
		mem = mmap(NULL, r->body_len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (mem == MAP_FAILED) {
			rc = -ENOMEM;
			mem = NULL;
		} else {
			/* huge pages: a 16 MiB part faults 8 times, not
			 * 4096 */
			madvise(mem, r->body_len, MADV_HUGEPAGE);
		}
	}
	for (uint64_t pos = 0; !rc && pos < r->body_len;) {
		ssize_t n = pread(r->body_fd, mem + pos,
				  (size_t)(r->body_len - pos),
				  r->body_off + (off_t)pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			pos += (uint64_t)n;
	}
	if (rc) {
		body_release(c, mem, r->body_len);
		return rc;
	}
	*owned = mem;
	r->body = mem;
	r->body_fd = -1;
	r->body_streamed = 1;
	return 0;
}

/* Runs r with retries. Returns 0 (2xx and no error body) or -errno; on
 * failure err (when given) says why. */
static int req_run(s3_client *c, struct req *r, struct s3_error *err_out)
{
	struct s3_error err = {0};
	struct buf url = BUF_INIT, path = BUF_INIT, host = BUF_INIT,
		   query = BUF_INIT;
	char errbuf[CURL_ERROR_SIZE];
	char *owned_body = NULL;
	int given_fd = r->body_fd;
	uint64_t start = clock_now_ms();
	int rc;

	if (r->key &&
	    (strlen(r->key) == 0 || strlen(r->key) > S3_MAX_KEY_LEN)) {
		snprintf(err.message, sizeof(err.message),
			 "key of %zu bytes: must be 1..%u bytes",
			 strlen(r->key), S3_MAX_KEY_LEN);
		rc = -EINVAL;
		goto done;
	}
	if (r->sink_fd < 0 && !r->sink_buf && r->body_fd < 0 && !r->body)
		r->body_len = 0;
	rc = 0;
	if (c->sign_payload && r->body_fd >= 0 && r->body_len > 0 &&
	    r->body_len <= c->cfg.snapshot_budget)
		rc = body_to_memory(c, r, &owned_body);
	if (rc)
		; /* reported below */
	else if (c->sign_payload ||
		 (r->body_fd < 0 && r->body_len < (1u << 20)))
		rc = hash_body(r);
	else
		rc = (strcpy(r->payload_hash, SIGV4_UNSIGNED_PAYLOAD), 0);
	if (rc) {
		snprintf(err.message, sizeof(err.message),
			 "reading the body to upload: %s", strerror(-rc));
		goto done;
	}
	rc = build_path(c, r, &path, &host);
	if (!rc)
		rc = uri_canonical_query(&query, r->params, r->nparams);
	if (!rc)
		rc = buf_printf(&url, "%s://%s%s%s%s", c->scheme, host.data,
				path.data, query.len ? "?" : "",
				query.len ? query.data : "");
	if (rc)
		goto done;

	for (unsigned attempt = 1;; attempt++) {
		uint64_t elapsed = clock_now_ms() - start;
		uint64_t remaining = elapsed < c->cfg.deadline_ms
					     ? c->cfg.deadline_ms - elapsed
					     : 0;
		struct curl_slist *hl = NULL;
		CURL *h = pool_get(c);
		if (!h) {
			rc = -ENOMEM;
			goto done;
		}
		r->body_pos = 0;
		r->sink_pos = 0;
		r->staged = 0;
		r->sink_err = 0;
		r->sink_why = NULL;
		r->status = 0;
		rhdrs_clear(r);
		buf_reset(&r->resp);
		errbuf[0] = '\0';
		rc = prepare(c, r, h, url.data, host.data, path.data,
			     query.len ? query.data : "", &hl, remaining,
			     errbuf);
		CURLcode cc = rc ? CURLE_OK : curl_easy_perform(h);
		if (!r->sink_err)
			(void)sink_flush(r); /* sets sink_err if it fails */
		curl_slist_free_all(hl);
		pool_put(c, h);
		if (rc)
			goto done;
		err.attempts = attempt;

		enum retry_transport t = classify_curl(cc, errbuf);
		if (r->sink_err) {
			/* our side failed (disk full, buffer too small), or
			 * the body was not what was asked for */
			rc = r->sink_err;
			err.http_status = (int)r->status;
			snprintf(err.code, sizeof(err.code), "%s",
				 r->sink_why ? "BadResponse" : "LocalError");
			snprintf(err.message, sizeof(err.message), "%s",
				 r->sink_why ? r->sink_why : strerror(-rc));
			goto done;
		}
		if (t == RETRY_T_NONE && r->status >= 200 && r->status < 300 &&
		    !body_is_error(r)) {
			rc = 0;
			goto done;
		}
		if (t != RETRY_T_NONE) {
			err.http_status = 0;
			snprintf(err.code, sizeof(err.code), "%s",
				 transport_code(t));
			snprintf(err.message, sizeof(err.message), "%s",
				 errbuf[0] ? errbuf : curl_easy_strerror(cc));
			size_t ml = strlen(err.message);
			if (ml && err.message[ml - 1] == '\n')
				err.message[ml - 1] = '\0';
		} else {
			fill_http_error(r, &err);
			if (strcmp(err.code, "RequestTimeTooSkewed") == 0)
				learn_skew(c, r);
		}
		int again = retry_should_retry(t, (int)r->status, err.code);
		if (r->sink_fd >= 0 && r->sink_off < 0 && r->sink_pos > 0)
			again = 0; /* bytes already went down a pipe */
		if (!again) {
			rc = t == RETRY_T_NONE
				     ? s3_errno_from_status((int)r->status,
							    err.code)
				     : -EIO;
			goto done;
		}
		unsigned wait =
			retry_backoff_ms(attempt, c->cfg.backoff_base_ms,
					 c->cfg.backoff_max_ms, random_u64());
		elapsed = clock_now_ms() - start;
		if (attempt >= c->cfg.max_attempts ||
		    elapsed + wait >= c->cfg.deadline_ms) {
			rc = t == RETRY_T_NONE ? -EIO : -ETIMEDOUT;
			logf_(c, S3_LOG_ERROR,
			      "%s %s/%s: giving up after %u attempts in %llu ms: "
			      "%s: %s",
			      r->method, r->bucket ? r->bucket : "",
			      r->key ? r->key : "", attempt,
			      (unsigned long long)elapsed, err.code,
			      err.message);
			goto done;
		}
		logf_(c, S3_LOG_WARN,
		      "%s %s/%s: attempt %u failed (%s: %s); retrying in %u ms",
		      r->method, r->bucket ? r->bucket : "",
		      r->key ? r->key : "", attempt, err.code, err.message,
		      wait);
		struct timespec ts = {wait / 1000,
				      (long)(wait % 1000) * 1000000};
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
	}
done:
	buf_free(&url);
	buf_free(&path);
	buf_free(&host);
	buf_free(&query);
	if (owned_body) { /* the caller's fd body again, as it gave it */
		body_release(c, owned_body, r->body_len);
		r->body = NULL;
		r->body_fd = given_fd;
		r->body_streamed = 0;
	}
	if (err_out)
		*err_out = err;
	return rc;
}

/* --- response headers into object info ---------------------------------- */

static void copy_etag(char *dst, const char *src)
{
	snprintf(dst, S3_ETAG_MAX, "%s", src ? src : "");
}

void s3_object_info_free(struct s3_object_info *info)
{
	if (!info)
		return;
	for (size_t i = 0; i < info->nmeta; i++) {
		free(info->meta[i].name);
		free(info->meta[i].value);
	}
	free(info->meta);
	free(info->content_type);
	memset(info, 0, sizeof(*info));
}

const char *s3_object_info_meta(const struct s3_object_info *info,
				const char *name)
{
	for (size_t i = 0; i < info->nmeta; i++)
		if (strcasecmp(info->meta[i].name, name) == 0)
			return info->meta[i].value;
	return NULL;
}

static int info_from_headers(const struct req *r, struct s3_object_info *info)
{
	memset(info, 0, sizeof(*info));
	const char *v;
	if ((v = req_header_value(r, "content-range")) &&
	    (v = strchr(v, '/')) && v[1] != '*')
		info->size = strtoull(v + 1, NULL, 10);
	else if ((v = req_header_value(r, "content-length")))
		info->size = strtoull(v, NULL, 10);
	copy_etag(info->etag, req_header_value(r, "etag"));
	if ((v = req_header_value(r, "last-modified")))
		info->last_modified = curl_getdate(v, NULL);
	if ((v = req_header_value(r, "content-type")) &&
	    !(info->content_type = strdup(v)))
		goto nomem;
	size_t n = 0;
	for (size_t i = 0; i < r->nrhdrs; i++)
		n += strncmp(r->rhdrs[i].name, "x-amz-meta-", 11) == 0;
	if (n && !(info->meta = calloc(n, sizeof(*info->meta))))
		goto nomem;
	for (size_t i = 0; i < r->nrhdrs; i++) {
		if (strncmp(r->rhdrs[i].name, "x-amz-meta-", 11) != 0)
			continue;
		struct s3_meta *m = &info->meta[info->nmeta];
		m->name = strdup(r->rhdrs[i].name + 11);
		m->value = strdup(r->rhdrs[i].value);
		if (!m->name || !m->value) {
			free(m->name);
			free(m->value);
			goto nomem;
		}
		info->nmeta++;
	}
	return 0;
nomem:
	s3_object_info_free(info);
	return -ENOMEM;
}

/* --- objects ------------------------------------------------------------ */

static void set_range(struct req *r, uint64_t off, uint64_t len, char *range,
		      size_t cap)
{
	if (off == 0 && len == S3_TO_END)
		return;
	if (len == S3_TO_END)
		snprintf(range, cap, "bytes=%llu-", (unsigned long long)off);
	else
		snprintf(range, cap, "bytes=%llu-%llu", (unsigned long long)off,
			 (unsigned long long)(off + len - 1));
	req_header(r, "range", range);
	r->ranged = 1;
	r->range_off = off;
	r->range_len = len;
}

static ssize_t get_common(s3_client *c, struct req *r, uint64_t off,
			  uint64_t len, const char *if_match,
			  struct s3_object_info *info, struct s3_error *err)
{
	char range[64];
	if (len == 0) {
		if (info)
			memset(info, 0, sizeof(*info));
		return 0;
	}
	set_range(r, off, len, range, sizeof(range));
	if (if_match)
		req_header(r, "if-match", if_match);
	int rc = req_run(c, r, err);
	if (rc == 0 && info)
		rc = info_from_headers(r, info);
	ssize_t n = rc ? rc : (ssize_t)r->sink_pos;
	req_free(r);
	return n;
}

ssize_t s3_get_buf(s3_client *c, const char *bucket, const char *key,
		   uint64_t off, uint64_t len, void *buf, size_t bufsize,
		   const char *if_match, struct s3_object_info *info,
		   struct s3_error *err)
{
	struct req r;
	req_init(&r, "GET", bucket, key);
	r.sink_buf = buf;
	r.sink_cap = bufsize;
	/* a zero-byte object still needs a sink, or the body goes to resp */
	if (!buf)
		r.sink_buf = (char *)"";
	return get_common(c, &r, off, len, if_match, info, err);
}

ssize_t s3_get_fd_landed(s3_client *c, const char *bucket, const char *key,
			 uint64_t off, uint64_t len, int fd, off_t fd_off,
			 const char *if_match, struct s3_object_info *info,
			 const struct s3_landed *landed, struct s3_error *err)
{
	struct req r;
	req_init(&r, "GET", bucket, key);
	r.sink_fd = fd;
	r.sink_off = fd_off;
	r.landed = landed;
	return get_common(c, &r, off, len, if_match, info, err);
}

ssize_t s3_get_fd(s3_client *c, const char *bucket, const char *key,
		  uint64_t off, uint64_t len, int fd, off_t fd_off,
		  const char *if_match, struct s3_object_info *info,
		  struct s3_error *err)
{
	return s3_get_fd_landed(c, bucket, key, off, len, fd, fd_off, if_match,
				info, NULL, err);
}

static int put_common(s3_client *c, struct req *r,
		      const struct s3_put_opts *opts, char *etag_out,
		      struct s3_error *err)
{
	char names[REQ_MAX_HEADERS - 8][96];
	int rc = req_put_opts(r, opts, names, REQ_MAX_HEADERS - 8);
	if (rc) {
		if (err) {
			memset(err, 0, sizeof(*err));
			snprintf(err->message, sizeof(err->message),
				 "metadata: names must be [a-z0-9_-]{1,80}, "
				 "values single-line, at most %d entries",
				 REQ_MAX_HEADERS - 8);
		}
		req_free(r);
		return rc;
	}
	rc = req_run(c, r, err);
	if (rc == 0 && etag_out)
		copy_etag(etag_out, req_header_value(r, "etag"));
	req_free(r);
	return rc;
}

int s3_put_buf(s3_client *c, const char *bucket, const char *key,
	       const void *buf, size_t len, const struct s3_put_opts *opts,
	       char *etag_out, struct s3_error *err)
{
	struct req r;
	req_init(&r, "PUT", bucket, key);
	r.body = len ? buf : "";
	r.body_len = len;
	return put_common(c, &r, opts, etag_out, err);
}

int s3_put_fd(s3_client *c, const char *bucket, const char *key, int fd,
	      off_t off, uint64_t len, const struct s3_put_opts *opts,
	      char *etag_out, struct s3_error *err)
{
	struct req r;
	req_init(&r, "PUT", bucket, key);
	r.body_fd = fd;
	r.body_off = off;
	r.body_len = len;
	return put_common(c, &r, opts, etag_out, err);
}

int s3_head_object(s3_client *c, const char *bucket, const char *key,
		   struct s3_object_info *out, struct s3_error *err)
{
	struct req r;
	req_init(&r, "HEAD", bucket, key);
	int rc = req_run(c, &r, err);
	if (rc == 0)
		rc = info_from_headers(&r, out);
	req_free(&r);
	return rc;
}

int s3_delete_object(s3_client *c, const char *bucket, const char *key,
		     struct s3_error *err)
{
	struct req r;
	req_init(&r, "DELETE", bucket, key);
	struct s3_error e = {0};
	int rc = req_run(c, &r, &e);
	req_free(&r);
	/* a key that is already gone is deleted; a missing bucket is not */
	if (rc == -ENOENT && strcmp(e.code, "NoSuchBucket") != 0)
		rc = 0;
	if (err)
		*err = e;
	return rc;
}

static int xml_escape(struct buf *b, const char *s)
{
	int rc = 0;
	for (; *s && rc == 0; s++) {
		switch (*s) {
		case '&':
			rc = buf_puts(b, "&amp;");
			break;
		case '<':
			rc = buf_puts(b, "&lt;");
			break;
		case '>':
			rc = buf_puts(b, "&gt;");
			break;
		case '"':
			rc = buf_puts(b, "&quot;");
			break;
		case '\'':
			rc = buf_puts(b, "&apos;");
			break;
		default:
			rc = buf_putc(b, *s);
		}
	}
	return rc;
}

static void base64_md5(const void *data, size_t len, char out[32])
{
	unsigned char md[16];
	EVP_Digest(data, len, md, NULL, EVP_md5(), NULL);
	EVP_EncodeBlock((unsigned char *)out, md, 16);
}

static int delete_batch(s3_client *c, const char *bucket,
			const char *const *keys, size_t n, struct s3_error *err)
{
	struct buf body = BUF_INIT;
	char md5[32];
	int rc = buf_puts(&body, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"
				 "<Delete><Quiet>true</Quiet>");
	for (size_t i = 0; i < n && rc == 0; i++) {
		rc = buf_puts(&body, "<Object><Key>");
		if (!rc)
			rc = xml_escape(&body, keys[i]);
		if (!rc)
			rc = buf_puts(&body, "</Key></Object>");
	}
	if (!rc)
		rc = buf_puts(&body, "</Delete>");
	if (rc) {
		buf_free(&body);
		return rc;
	}
	base64_md5(body.data, body.len, md5);
	struct req r;
	req_init(&r, "POST", bucket, NULL);
	req_param(&r, "delete", "");
	req_header(&r, "content-md5", md5);
	req_header(&r, "content-type", "application/xml");
	r.body = body.data;
	r.body_len = body.len;
	rc = req_run(c, &r, err);
	if (rc == 0) {
		size_t nerr = 0;
		struct s3_error e = {0};
		rc = xml_parse_delete_result(r.resp.data, r.resp.len, &nerr,
					     &e);
		if (rc == 0 && nerr) {
			rc = -EIO;
			if (err) {
				e.attempts = err->attempts;
				e.http_status = 200;
				*err = e;
			}
		}
	}
	req_free(&r);
	buf_free(&body);
	return rc;
}

int s3_delete_objects(s3_client *c, const char *bucket, const char *const *keys,
		      size_t n, struct s3_error *err)
{
	for (size_t i = 0; i < n; i += S3_MAX_DELETE_BATCH) {
		size_t k = n - i < S3_MAX_DELETE_BATCH ? n - i
						       : S3_MAX_DELETE_BATCH;
		int rc = delete_batch(c, bucket, keys + i, k, err);
		if (rc)
			return rc;
	}
	return 0;
}

/* "bucket/key", URL-encoded, for x-amz-copy-source. */
static int copy_source(struct buf *b, const char *bucket, const char *key)
{
	int rc = uri_encode(b, bucket, strlen(bucket), 0);
	if (!rc)
		rc = buf_putc(b, '/');
	if (!rc)
		rc = uri_encode(b, key, strlen(key), 1);
	return rc;
}

int s3_copy_object(s3_client *c, const char *src_bucket, const char *src_key,
		   const char *dst_bucket, const char *dst_key,
		   enum s3_metadata_directive directive,
		   const struct s3_put_opts *opts, char *etag_out,
		   struct s3_error *err)
{
	struct buf src = BUF_INIT;
	struct req r;
	char names[REQ_MAX_HEADERS - 8][96];
	int rc = copy_source(&src, src_bucket, src_key);
	if (rc)
		return rc;
	req_init(&r, "PUT", dst_bucket, dst_key);
	r.stall_timeout_s = COPY_STALL_TIMEOUT_S;
	req_header(&r, "x-amz-copy-source", src.data);
	if (directive == S3_METADATA_REPLACE) {
		req_header(&r, "x-amz-metadata-directive", "REPLACE");
		rc = req_put_opts(&r, opts, names, REQ_MAX_HEADERS - 8);
	} else {
		req_header(&r, "x-amz-metadata-directive", "COPY");
	}
	if (rc == 0)
		rc = req_run(c, &r, err);
	if (rc == 0 && etag_out)
		rc = xml_parse_etag_result(r.resp.data, r.resp.len,
					   "CopyObjectResult", etag_out);
	req_free(&r);
	buf_free(&src);
	return rc;
}

/* --- listing ------------------------------------------------------------ */

void s3_list_page_free(struct s3_list_page *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nentries; i++)
		free(p->entries[i].key);
	for (size_t i = 0; i < p->nprefixes; i++)
		free(p->common_prefixes[i]);
	free(p->entries);
	free(p->common_prefixes);
	free(p->next_token);
	memset(p, 0, sizeof(*p));
}

int s3_list_objects(s3_client *c, const char *bucket,
		    const struct s3_list_opts *opts, struct s3_list_page *out,
		    struct s3_error *err)
{
	struct req r;
	char maxkeys[16];
	req_init(&r, "GET", bucket, NULL);
	req_param(&r, "list-type", "2");
	req_param(&r, "encoding-type", "url");
	if (opts && opts->prefix && *opts->prefix)
		req_param(&r, "prefix", opts->prefix);
	if (opts && opts->delimiter && *opts->delimiter)
		req_param(&r, "delimiter", opts->delimiter);
	if (opts && opts->continuation_token && *opts->continuation_token)
		req_param(&r, "continuation-token", opts->continuation_token);
	if (opts && opts->start_after && *opts->start_after)
		req_param(&r, "start-after", opts->start_after);
	if (opts && opts->max_keys) {
		snprintf(maxkeys, sizeof(maxkeys), "%u", opts->max_keys);
		req_param(&r, "max-keys", maxkeys);
	}
	int rc = req_run(c, &r, err);
	if (rc == 0) {
		rc = xml_parse_list(r.resp.data, r.resp.len, out);
		if (rc && err)
			snprintf(err->message, sizeof(err->message),
				 "ListObjectsV2 response: malformed XML");
	}
	req_free(&r);
	return rc;
}

int s3_list_all(s3_client *c, const char *bucket, const char *prefix,
		const char *delimiter, s3_list_fn fn, void *ctx,
		struct s3_error *err)
{
	char *token = NULL;
	int rc;
	do {
		struct s3_list_page page;
		struct s3_list_opts o = {.prefix = prefix,
					 .delimiter = delimiter,
					 .continuation_token = token};
		rc = s3_list_objects(c, bucket, &o, &page, err);
		free(token);
		token = NULL;
		if (rc)
			break;
		rc = fn(ctx, &page);
		if (rc == 0 && page.truncated) {
			token = page.next_token;
			page.next_token = NULL;
		}
		s3_list_page_free(&page);
	} while (rc == 0 && token);
	free(token);
	return rc;
}

/* --- multipart ---------------------------------------------------------- */

int s3_mpu_create(s3_client *c, const char *bucket, const char *key,
		  const struct s3_put_opts *opts, char **upload_id_out,
		  struct s3_error *err)
{
	struct req r;
	char names[REQ_MAX_HEADERS - 8][96];
	req_init(&r, "POST", bucket, key);
	req_param(&r, "uploads", "");
	int rc = req_put_opts(&r, opts, names, REQ_MAX_HEADERS - 8);
	if (rc == 0)
		rc = req_run(c, &r, err);
	if (rc == 0)
		rc = xml_parse_initiate(r.resp.data, r.resp.len, upload_id_out);
	req_free(&r);
	return rc;
}

int s3_mpu_upload_part_fd(s3_client *c, const char *bucket, const char *key,
			  const char *upload_id, unsigned part_number, int fd,
			  off_t off, uint64_t len, char *etag_out,
			  struct s3_error *err)
{
	struct req r;
	char num[16];
	snprintf(num, sizeof(num), "%u", part_number);
	req_init(&r, "PUT", bucket, key);
	req_param(&r, "partNumber", num);
	req_param(&r, "uploadId", upload_id);
	r.body_fd = fd;
	r.body_off = off;
	r.body_len = len;
	int rc = req_run(c, &r, err);
	if (rc == 0 && etag_out)
		copy_etag(etag_out, req_header_value(&r, "etag"));
	req_free(&r);
	return rc;
}

int s3_mpu_upload_part_copy(s3_client *c, const char *bucket, const char *key,
			    const char *upload_id, unsigned part_number,
			    const char *src_bucket, const char *src_key,
			    uint64_t src_off, uint64_t src_len,
			    const char *src_if_match, char *etag_out,
			    struct s3_error *err)
{
	struct req r;
	struct buf src = BUF_INIT;
	char num[16], range[64];
	int rc = copy_source(&src, src_bucket, src_key);
	if (rc)
		return rc;
	snprintf(num, sizeof(num), "%u", part_number);
	snprintf(range, sizeof(range), "bytes=%llu-%llu",
		 (unsigned long long)src_off,
		 (unsigned long long)(src_off + src_len - 1));
	req_init(&r, "PUT", bucket, key);
	r.stall_timeout_s = COPY_STALL_TIMEOUT_S;
	req_param(&r, "partNumber", num);
	req_param(&r, "uploadId", upload_id);
	req_header(&r, "x-amz-copy-source", src.data);
	req_header(&r, "x-amz-copy-source-range", range);
	if (src_if_match)
		req_header(&r, "x-amz-copy-source-if-match", src_if_match);
	rc = src_len ? req_run(c, &r, err) : -EINVAL;
	if (rc == 0)
		rc = xml_parse_etag_result(r.resp.data, r.resp.len,
					   "CopyPartResult", etag_out);
	req_free(&r);
	buf_free(&src);
	return rc;
}

/* The ETag S3 gives the object a multipart upload of these parts makes:
 * "hex(MD5(md5(part 1) || ... || md5(part N)))-N". 0, or -EINVAL when a
 * part ETag is not a plain MD5 (then it cannot be predicted). */
static int multipart_etag(const struct s3_part *parts, size_t nparts,
			  char out[S3_ETAG_MAX])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int rc =
		md && EVP_DigestInit_ex(md, EVP_md5(), NULL) == 1 ? 0 : -ENOMEM;
	for (size_t i = 0; i < nparts && rc == 0; i++) {
		const char *e = parts[i].etag;
		unsigned char bin[16];
		size_t off = e[0] == '"';
		if (strlen(e) != 32 + 2 * off) {
			rc = -EINVAL;
			break;
		}
		for (int j = 0; j < 16 && rc == 0; j++) {
			unsigned v;
			if (sscanf(e + off + 2 * j, "%2x", &v) != 1 ||
			    !isxdigit((unsigned char)e[off + 2 * j]) ||
			    !isxdigit((unsigned char)e[off + 2 * j + 1]))
				rc = -EINVAL;
			bin[j] = (unsigned char)v;
		}
		if (rc == 0 && EVP_DigestUpdate(md, bin, 16) != 1)
			rc = -ENOMEM;
	}
	if (rc == 0) {
		unsigned char d[16];
		EVP_DigestFinal_ex(md, d, NULL);
		char *p = out;
		*p++ = '"';
		for (int j = 0; j < 16; j++)
			p += sprintf(p, "%02x", d[j]);
		snprintf(p, S3_ETAG_MAX - 33, "-%zu\"", nparts);
	}
	EVP_MD_CTX_free(md);
	return rc;
}

/* A Complete answered NoSuchUpload may have been applied by an earlier send
 * (ours, or one curl repeated on a dead connection). It was exactly when
 * the object now carries the ETag these very parts produce; an older
 * object with as many parts does not count. */
static int completed_already(s3_client *c, const char *bucket, const char *key,
			     const struct s3_part *parts, size_t nparts,
			     char *etag_out)
{
	struct s3_object_info info;
	char want[S3_ETAG_MAX];
	if (multipart_etag(parts, nparts, want) != 0)
		return 0;
	if (s3_head_object(c, bucket, key, &info, NULL) != 0)
		return 0;
	int done = strcmp(info.etag, want) == 0;
	if (done && etag_out)
		copy_etag(etag_out, info.etag);
	s3_object_info_free(&info);
	return done;
}

int s3_mpu_complete(s3_client *c, const char *bucket, const char *key,
		    const char *upload_id, const struct s3_part *parts,
		    size_t nparts, char *etag_out, struct s3_error *err)
{
	struct buf body = BUF_INIT;
	struct s3_error e = {0};
	int rc = buf_puts(&body, "<CompleteMultipartUpload>");
	for (size_t i = 0; i < nparts && rc == 0; i++) {
		rc = buf_printf(&body,
				"<Part><PartNumber>%u</PartNumber><ETag>",
				parts[i].number);
		if (!rc)
			rc = xml_escape(&body, parts[i].etag);
		if (!rc)
			rc = buf_puts(&body, "</ETag></Part>");
	}
	if (!rc)
		rc = buf_puts(&body, "</CompleteMultipartUpload>");
	if (rc) {
		buf_free(&body);
		return rc;
	}
	struct req r;
	req_init(&r, "POST", bucket, key);
	r.stall_timeout_s = COPY_STALL_TIMEOUT_S;
	req_param(&r, "uploadId", upload_id);
	req_header(&r, "content-type", "application/xml");
	r.body = body.data;
	r.body_len = body.len;
	rc = req_run(c, &r, &e);
	if (rc == 0) {
		char etag[S3_ETAG_MAX];
		rc = xml_parse_etag_result(r.resp.data, r.resp.len,
					   "CompleteMultipartUploadResult",
					   etag);
		if (rc == 0 && etag_out)
			copy_etag(etag_out, etag);
	} else if (rc == -ENOENT && strcmp(e.code, "NoSuchUpload") == 0 &&
		   completed_already(c, bucket, key, parts, nparts, etag_out)) {
		rc = 0;
	}
	req_free(&r);
	buf_free(&body);
	if (err)
		*err = e;
	return rc;
}

int s3_mpu_abort(s3_client *c, const char *bucket, const char *key,
		 const char *upload_id, struct s3_error *err)
{
	struct req r;
	req_init(&r, "DELETE", bucket, key);
	req_param(&r, "uploadId", upload_id);
	int rc = req_run(c, &r, err);
	req_free(&r);
	return rc;
}

void s3_upload_list_free(struct s3_upload_list *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->nuploads; i++) {
		free(l->uploads[i].key);
		free(l->uploads[i].upload_id);
	}
	free(l->uploads);
	free(l->next_key_marker);
	free(l->next_upload_id_marker);
	memset(l, 0, sizeof(*l));
}

int s3_mpu_list(s3_client *c, const char *bucket, const char *prefix,
		const char *key_marker, const char *upload_id_marker,
		struct s3_upload_list *out, struct s3_error *err)
{
	struct req r;
	req_init(&r, "GET", bucket, NULL);
	req_param(&r, "uploads", "");
	req_param(&r, "encoding-type", "url");
	if (prefix && *prefix)
		req_param(&r, "prefix", prefix);
	if (key_marker && *key_marker)
		req_param(&r, "key-marker", key_marker);
	if (upload_id_marker && *upload_id_marker)
		req_param(&r, "upload-id-marker", upload_id_marker);
	int rc = req_run(c, &r, err);
	if (rc == 0)
		rc = xml_parse_uploads(r.resp.data, r.resp.len, out);
	req_free(&r);
	return rc;
}

/* --- buckets ------------------------------------------------------------ */

int s3_create_bucket(s3_client *c, const char *bucket, struct s3_error *err)
{
	struct req r;
	struct buf body = BUF_INIT;
	req_init(&r, "PUT", bucket, NULL);
	if (strcmp(c->region, "us-east-1") != 0) {
		if (buf_printf(
			    &body,
			    "<CreateBucketConfiguration><LocationConstraint>"
			    "%s</LocationConstraint></CreateBucketConfiguration>",
			    c->region))
			return -ENOMEM;
		r.body = body.data;
		r.body_len = body.len;
	}
	int rc = req_run(c, &r, err);
	req_free(&r);
	buf_free(&body);
	return rc;
}

int s3_head_bucket(s3_client *c, const char *bucket, struct s3_error *err)
{
	struct req r;
	req_init(&r, "HEAD", bucket, NULL);
	int rc = req_run(c, &r, err);
	req_free(&r);
	return rc;
}
