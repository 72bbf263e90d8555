/* s3conn.h: the Controller's way to S3: a client per call from plugin flags
 * + request secrets, errno -> gRPC status, and the whole-prefix helpers
 * (list, copy, delete, small text objects) its RPCs are built from.
 *
 * Threading: every function is thread-safe; a client made here belongs to
 * the calling handler and is destroyed by it (s3_client_destroy()).
 * Ownership: strings passed in are borrowed for the call; struct
 * csi_keys arrays are owned by the caller and freed with csi_keys_free().
 * Secrets: they only ever travel into s3_credentials; no message built here
 * holds one (s3_error never does, see s3.h).
 */
#ifndef TIERFS_CSI_S3CONN_H
#define TIERFS_CSI_S3CONN_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "../s3/s3.h"
#include "plugin.h"
#include "server.h"

/* The controller's retries are short: the CSI sidecars retry the whole
 * call with their own backoff, so a dead endpoint answers within seconds. */
#define CSI_S3_MAX_ATTEMPTS 4
#define CSI_S3_DEADLINE_MS 20000u
/* A single CopyObject may copy at most 5 GiB; larger objects are copied by
 * UploadPartCopy in parts of at least CSI_S3_COPY_PART bytes. */
#define CSI_S3_COPY_MAX (5ull << 30)
#define CSI_S3_COPY_PART (512ull << 20)

/* The secret keys a request's `secrets` map carries (issue 5). */
#define CSI_SECRET_ACCESS_KEY "accessKeyID"
#define CSI_SECRET_SECRET_KEY "secretAccessKey"
#define CSI_SECRET_SESSION_TOKEN "sessionToken"
/* optional: where the volume's S3 is when not at --s3-endpoint; read
 * when the call itself names none (StorageClass `endpoint`/`region`) */
#define CSI_SECRET_ENDPOINT "endpoint"
#define CSI_SECRET_REGION "region"

/* Every protobuf-c map entry (FooEntry) has this layout: base, key, value.
 * The map helpers take a map as (n, entries) cast to this type. */
struct csi_map_entry {
	ProtobufCMessage base;
	char *key;
	char *value;
};
#define CSI_MAP(msg, field)                                                    \
	(msg)->n_##field, (const struct csi_map_entry *const *)(msg)->field

/* The value of key in a map, or NULL. */
const char *csi_map_get(size_t n, const struct csi_map_entry *const *map,
			const char *key);

/* A client for endpoint/region (each NULL: the --s3-* flag, then the
 * AWS_ENDPOINT_URL/AWS_REGION environment) with the credentials of a
 * request's secrets. A missing secret is INVALID_ARGUMENT naming the
 * secret's key (never a value). */
grpc_status_code csi_s3_from_secrets(const struct csi_plugin *p,
				     const char *endpoint, const char *region,
				     size_t n,
				     const struct csi_map_entry *const *secrets,
				     s3_client **out, struct csi_error *err);
/* Whether the request's secrets hold any credential at all. */
int csi_s3_has_secrets(size_t n, const struct csi_map_entry *const *secrets);
/* The controller's own client, for calls that carry no secrets
 * (ListVolumes): --credentials-file, else AWS_ACCESS_KEY_ID/..._SECRET...
 * from the environment. *out = NULL (and OK) when neither is configured. */
grpc_status_code csi_s3_own(const struct csi_plugin *p, s3_client **out,
			    struct csi_error *err);

/* Maps a failed S3 call to a status, with "what: S3 said" as message:
 * -EACCES/-EPERM -> PERMISSION_DENIED, -ENOENT -> NOT_FOUND, -EINVAL ->
 * FAILED_PRECONDITION (S3 refused a request we built), anything else
 * (transport, 5xx after retries) -> UNAVAILABLE. */
grpc_status_code csi_s3_status(int rc, const struct s3_error *e,
			       struct csi_error *err, const char *what);

/* Keys found under a prefix. */
struct csi_key {
	char *key; /* owned */
	uint64_t size;
};
struct csi_keys {
	struct csi_key *v; /* owned */
	size_t n, cap;
};
void csi_keys_free(struct csi_keys *k);
/* Every key under prefix (which ends in "/"), in S3's order. 0 or -errno. */
int csi_s3_list(s3_client *c, const char *bucket, const char *prefix,
		struct csi_keys *out, struct s3_error *e);
/* The sub-"directories" right under prefix (delimiter "/"), each a full
 * prefix ending in "/", in the csi_keys (size 0). */
int csi_s3_list_dirs(s3_client *c, const char *bucket, const char *prefix,
		     struct csi_keys *out, struct s3_error *e);
/* Server-side copy of one object of `size` bytes, metadata kept:
 * CopyObject, or UploadPartCopy above CSI_S3_COPY_MAX. 0 or -errno. */
int csi_s3_copy(s3_client *c, const char *src_bucket, const char *src_key,
		uint64_t size, const char *dst_bucket, const char *dst_key,
		struct s3_error *e);
/* Deletes every key in k (DeleteObjects batches). 0 or -errno. */
int csi_s3_delete_keys(s3_client *c, const char *bucket,
		       const struct csi_keys *k, struct s3_error *e);
/* GETs a small text object (< len bytes) into buf, NUL-terminated.
 * -ENOENT when absent, -EOVERFLOW when too big. */
int csi_s3_get_text(s3_client *c, const char *bucket, const char *key,
		    char *buf, size_t len, struct s3_error *e);
int csi_s3_put_text(s3_client *c, const char *bucket, const char *key,
		    const char *text, struct s3_error *e);

/* "key=value\n" text: the value of key into out (0), or -ENOENT. */
/* Whether the plugin's default S3 endpoint (--s3-endpoint, else
 * AWS_ENDPOINT_URL) answers HTTP within CSI_PROBE_TIMEOUT_MS: 0 (also when
 * none is configured), or -errno with why (no secrets in it). */
#define CSI_PROBE_TIMEOUT_MS 3000
int csi_s3_reachable(const struct csi_plugin *p, char *why, size_t len);
int csi_kv_get(const char *text, const char *key, char *out, size_t len);

#endif
