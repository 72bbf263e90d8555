/* s3conn.c: S3 clients and whole-prefix helpers for the Controller (see
 * s3conn.h). */
#include "s3conn.h"

#include <curl/curl.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *csi_map_get(size_t n, const struct csi_map_entry *const *map,
			const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (map[i]->key && strcmp(map[i]->key, key) == 0)
			return map[i]->value;
	return NULL;
}

static void s3_log(void *ctx, enum s3_log_level level, const char *msg)
{
	(void)ctx;
	if (level >= S3_LOG_WARN) /* s3/ never puts a secret in a message */
		fprintf(stderr, "tierfs-csi: s3: %s\n", msg);
}

static void base_config(const struct csi_plugin *p, const char *endpoint,
			const char *region, struct s3_config *cfg)
{
	s3_config_init(cfg);
	s3_config_from_env(cfg);
	if (p->s3_endpoint)
		cfg->endpoint = p->s3_endpoint;
	if (p->s3_region)
		cfg->region = p->s3_region;
	if (endpoint && *endpoint)
		cfg->endpoint = endpoint;
	if (region && *region)
		cfg->region = region;
	cfg->max_attempts = CSI_S3_MAX_ATTEMPTS;
	cfg->deadline_ms = CSI_S3_DEADLINE_MS;
	cfg->log = s3_log;
}

static grpc_status_code make_client(const struct s3_config *cfg,
				    const struct s3_credentials *cr,
				    s3_client **out, struct csi_error *err)
{
	char why[256];
	if (s3_config_validate(cfg, why, sizeof(why)) != 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "S3 endpoint/region: %s", why);
	int rc = s3_client_create(cfg, cr, out);
	if (rc)
		return csi_errorf(err, GRPC_STATUS_INTERNAL, "S3 client: %s",
				  strerror(-rc));
	return GRPC_STATUS_OK;
}

int csi_s3_has_secrets(size_t n, const struct csi_map_entry *const *secrets)
{
	return csi_map_get(n, secrets, CSI_SECRET_ACCESS_KEY) ||
	       csi_map_get(n, secrets, CSI_SECRET_SECRET_KEY);
}

grpc_status_code csi_s3_from_secrets(const struct csi_plugin *p,
				     const char *endpoint, const char *region,
				     size_t n,
				     const struct csi_map_entry *const *secrets,
				     s3_client **out, struct csi_error *err)
{
	const char *ak = csi_map_get(n, secrets, CSI_SECRET_ACCESS_KEY);
	const char *sk = csi_map_get(n, secrets, CSI_SECRET_SECRET_KEY);
	const char *tok = csi_map_get(n, secrets, CSI_SECRET_SESSION_TOKEN);
	if (!ak || !*ak)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "secrets: '%s' is required (the S3 access "
				  "key id)",
				  CSI_SECRET_ACCESS_KEY);
	if (!sk || !*sk)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "secrets: '%s' is required (the S3 secret "
				  "key)",
				  CSI_SECRET_SECRET_KEY);
	/* calls that carry no volume_context (Delete, Expand, snapshots,
	 * unpublish) find a StorageClass's own endpoint in its secret */
	if (!endpoint || !*endpoint)
		endpoint = csi_map_get(n, secrets, CSI_SECRET_ENDPOINT);
	if (!region || !*region)
		region = csi_map_get(n, secrets, CSI_SECRET_REGION);
	struct s3_config cfg;
	base_config(p, endpoint, region, &cfg);
	struct s3_credentials cr = {0};
	if (s3_credentials_set(&cr, ak, sk, tok && *tok ? tok : NULL) != 0)
		return csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
	grpc_status_code st = make_client(&cfg, &cr, out, err);
	s3_credentials_free(&cr);
	return st;
}

grpc_status_code csi_s3_own(const struct csi_plugin *p, s3_client **out,
			    struct csi_error *err)
{
	*out = NULL;
	struct s3_credentials cr = {0};
	if (p->credentials_file) {
		char why[256];
		int rc = s3_credentials_from_file(p->credentials_file, &cr, why,
						  sizeof(why));
		if (rc)
			return csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
					  "--credentials-file: %s", why);
	} else if (s3_credentials_from_env(&cr) != 0) {
		return GRPC_STATUS_OK; /* none configured */
	}
	struct s3_config cfg;
	base_config(p, NULL, NULL, &cfg);
	grpc_status_code st = make_client(&cfg, &cr, out, err);
	s3_credentials_free(&cr);
	return st;
}

grpc_status_code csi_s3_status(int rc, const struct s3_error *e,
			       struct csi_error *err, const char *what)
{
	char said[400];
	if (e && (e->http_status || e->code[0]))
		s3_error_str(e, said, sizeof(said));
	else
		snprintf(said, sizeof(said), "%s", strerror(-rc));
	grpc_status_code code;
	switch (-rc) {
	case EACCES:
	case EPERM:
		code = GRPC_STATUS_PERMISSION_DENIED;
		break;
	case ENOENT:
		code = GRPC_STATUS_NOT_FOUND;
		break;
	case EINVAL:
	case ENAMETOOLONG:
	case ENOTSUP:
		code = GRPC_STATUS_FAILED_PRECONDITION;
		break;
	case ENOMEM:
		code = GRPC_STATUS_RESOURCE_EXHAUSTED;
		break;
	default:
		code = GRPC_STATUS_UNAVAILABLE;
	}
	return csi_errorf(err, code, "%s: S3: %s", what, said);
}

void csi_keys_free(struct csi_keys *k)
{
	for (size_t i = 0; i < k->n; i++)
		free(k->v[i].key);
	free(k->v);
	memset(k, 0, sizeof(*k));
}

static int keys_add(struct csi_keys *k, const char *key, uint64_t size)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? 2 * k->cap : 64;
		struct csi_key *v = realloc(k->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		k->v = v;
		k->cap = cap;
	}
	char *dup = strdup(key);
	if (!dup)
		return -ENOMEM;
	k->v[k->n].key = dup;
	k->v[k->n].size = size;
	k->n++;
	return 0;
}

static int add_page(void *ctx, const struct s3_list_page *page)
{
	struct csi_keys *k = ctx;
	for (size_t i = 0; i < page->nentries; i++) {
		int rc = keys_add(k, page->entries[i].key,
				  page->entries[i].size);
		if (rc)
			return rc;
	}
	return 0;
}

static int add_dirs(void *ctx, const struct s3_list_page *page)
{
	struct csi_keys *k = ctx;
	for (size_t i = 0; i < page->nprefixes; i++) {
		int rc = keys_add(k, page->common_prefixes[i], 0);
		if (rc)
			return rc;
	}
	return 0;
}

int csi_s3_list(s3_client *c, const char *bucket, const char *prefix,
		struct csi_keys *out, struct s3_error *e)
{
	memset(out, 0, sizeof(*out));
	int rc = s3_list_all(c, bucket, prefix, NULL, add_page, out, e);
	if (rc)
		csi_keys_free(out);
	return rc;
}

int csi_s3_list_dirs(s3_client *c, const char *bucket, const char *prefix,
		     struct csi_keys *out, struct s3_error *e)
{
	memset(out, 0, sizeof(*out));
	int rc = s3_list_all(c, bucket, prefix, "/", add_dirs, out, e);
	if (rc)
		csi_keys_free(out);
	return rc;
}

/* Above CSI_S3_COPY_MAX: a multipart upload whose parts are copied
 * server-side; the type and metadata come from a HEAD of the source, since
 * UploadPartCopy carries none. Aborted on failure. */
static int copy_multipart(s3_client *c, const char *sb, const char *sk,
			  uint64_t size, const char *db, const char *dk,
			  struct s3_error *e)
{
	struct s3_object_info info = {0};
	int rc = s3_head_object(c, sb, sk, &info, e);
	if (rc)
		return rc;
	unsigned max_parts = s3_client_config(c)->max_parts;
	uint64_t part = CSI_S3_COPY_PART;
	if (max_parts && (size + part - 1) / part > max_parts)
		part = (size + max_parts - 1) / max_parts;
	size_t nparts = (size_t)((size + part - 1) / part);
	struct s3_put_opts opts = {.content_type = info.content_type,
				   .meta = info.meta,
				   .nmeta = info.nmeta};
	char *upload_id = NULL;
	struct s3_part *parts = calloc(nparts, sizeof(*parts));
	if (!parts) {
		s3_object_info_free(&info);
		return -ENOMEM;
	}
	rc = s3_mpu_create(c, db, dk, &opts, &upload_id, e);
	for (size_t i = 0; rc == 0 && i < nparts; i++) {
		uint64_t off = i * part;
		uint64_t len = size - off < part ? size - off : part;
		parts[i].number = (unsigned)i + 1;
		rc = s3_mpu_upload_part_copy(c, db, dk, upload_id,
					     parts[i].number, sb, sk, off, len,
					     NULL, parts[i].etag, e);
	}
	if (rc == 0)
		rc = s3_mpu_complete(c, db, dk, upload_id, parts, nparts, NULL,
				     e);
	if (rc && upload_id) {
		struct s3_error ignored;
		(void)s3_mpu_abort(c, db, dk, upload_id, &ignored);
	}
	free(upload_id);
	free(parts);
	s3_object_info_free(&info);
	return rc;
}

int csi_s3_copy(s3_client *c, const char *src_bucket, const char *src_key,
		uint64_t size, const char *dst_bucket, const char *dst_key,
		struct s3_error *e)
{
	if (size > CSI_S3_COPY_MAX)
		return copy_multipart(c, src_bucket, src_key, size, dst_bucket,
				      dst_key, e);
	return s3_copy_object(c, src_bucket, src_key, dst_bucket, dst_key,
			      S3_METADATA_COPY, NULL, NULL, e);
}

int csi_s3_delete_keys(s3_client *c, const char *bucket,
		       const struct csi_keys *k, struct s3_error *e)
{
	if (k->n == 0)
		return 0;
	const char **keys = calloc(k->n, sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	for (size_t i = 0; i < k->n; i++)
		keys[i] = k->v[i].key;
	int rc = s3_delete_objects(c, bucket, keys, k->n, e);
	free(keys);
	return rc;
}

int csi_s3_get_text(s3_client *c, const char *bucket, const char *key,
		    char *buf, size_t len, struct s3_error *e)
{
	ssize_t n = s3_get_buf(c, bucket, key, 0, S3_TO_END, buf, len - 1, NULL,
			       NULL, e);
	if (n < 0)
		return (int)n;
	buf[n] = '\0';
	return 0;
}

int csi_s3_put_text(s3_client *c, const char *bucket, const char *key,
		    const char *text, struct s3_error *e)
{
	struct s3_put_opts opts = {.content_type = "text/plain"};
	return s3_put_buf(c, bucket, key, text, strlen(text), &opts, NULL, e);
}

int csi_kv_get(const char *text, const char *key, char *out, size_t len)
{
	size_t kl = strlen(key);
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t ll = end ? (size_t)(end - line) : strlen(line);
		if (ll > kl && strncmp(line, key, kl) == 0 && line[kl] == '=') {
			size_t vl = ll - kl - 1;
			if (vl >= len)
				vl = len - 1;
			memcpy(out, line + kl + 1, vl);
			out[vl] = '\0';
			return 0;
		}
		line = end ? end + 1 : NULL;
	}
	return -ENOENT;
}

int csi_s3_reachable(const struct csi_plugin *p, char *why, size_t len)
{
	struct s3_config cfg;
	base_config(p, NULL, NULL, &cfg);
	if (!cfg.endpoint || !*cfg.endpoint)
		return 0; /* none configured: each StorageClass names its own */
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(why, len, "cannot start an HTTP client");
		return -ENOMEM;
	}
	char errbuf[CURL_ERROR_SIZE] = "";
	curl_easy_setopt(h, CURLOPT_URL, cfg.endpoint);
	curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)CSI_PROBE_TIMEOUT_MS);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	if (cfg.ca_file)
		curl_easy_setopt(h, CURLOPT_CAINFO, cfg.ca_file);
	/* any HTTP answer (403 without credentials included) means S3 is
	 * there; only no answer at all is a failure */
	CURLcode cc = curl_easy_perform(h);
	curl_easy_cleanup(h);
	if (cc == CURLE_OK)
		return 0;
	snprintf(why, len, "S3 endpoint %s unreachable: %s", cfg.endpoint,
		 errbuf[0] ? errbuf : curl_easy_strerror(cc));
	return -EHOSTUNREACH;
}
