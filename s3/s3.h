/* s3.h: the tierfs S3 client, SigV4-signed requests over libcurl with retries.
 *
 * Threading: one s3_client may be used by any number of threads at once. It
 * keeps a pool of curl handles, so connections are reused across calls.
 * Every call blocks until the request (and its retries) has finished.
 * Ownership: strings passed in are borrowed for the duration of the call.
 * Results the library allocates are owned by the caller and released with
 * the matching *_free() function. Every call returns 0 or -errno; when the
 * caller passes a struct s3_error, it is filled with what the server said.
 * Secrets are never written into an s3_error, a log line or a URL.
 */
#ifndef TIERFS_S3_H
#define TIERFS_S3_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

/* Defaults, all in one place. */
#define S3_DEFAULT_REGION "us-east-1"
#define S3_DEFAULT_MAX_ATTEMPTS 8
#define S3_DEFAULT_DEADLINE_MS 60000u
#define S3_DEFAULT_BACKOFF_BASE_MS 50u
#define S3_DEFAULT_BACKOFF_MAX_MS 5000u
#define S3_DEFAULT_CONNECT_TIMEOUT_MS 5000u
#define S3_DEFAULT_STALL_TIMEOUT_S 30u
#define S3_DEFAULT_PARALLEL 8u
#define S3_DEFAULT_PART_SIZE (16u << 20)
#define S3_DEFAULT_MULTIPART_THRESHOLD (16u << 20)
#define S3_DEFAULT_MAX_PARTS 1000u /* Swift's limit; AWS allows 10000 */
#define S3_MIN_PART_SIZE (5u << 20)
#define S3_MAX_DELETE_BATCH 1000u
#define S3_MAX_KEY_LEN 1024u

#define S3_ETAG_MAX 80 /* a quoted MD5 or "md5-NNNNN", with room */
#define S3_TO_END                                                              \
	UINT64_MAX /* length meaning "through the end of the object" */

enum s3_addressing {
	S3_ADDRESSING_AUTO =
		0, /* virtual-hosted for AWS, path-style for others */
	S3_ADDRESSING_PATH,
	S3_ADDRESSING_VIRTUAL,
};

enum s3_payload_signing {
	S3_PAYLOAD_AUTO = 0, /* signed over http, UNSIGNED-PAYLOAD over https */
	S3_PAYLOAD_SIGNED,
	S3_PAYLOAD_UNSIGNED,
};

enum s3_log_level { S3_LOG_DEBUG, S3_LOG_INFO, S3_LOG_WARN, S3_LOG_ERROR };
typedef void (*s3_log_fn)(void *ctx, enum s3_log_level level, const char *msg);

struct s3_credentials {
	char *access_key;    /* owned */
	char *secret_key;    /* owned; never logged */
	char *session_token; /* owned; NULL when not using STS */
};

struct s3_config {
	const char
		*endpoint;  /* "http://127.0.0.1:8780"; NULL: AWS for region */
	const char *region; /* NULL: S3_DEFAULT_REGION */
	enum s3_addressing addressing;
	enum s3_payload_signing payload_signing;
	const char *ca_file; /* NULL: the system CAs */
	unsigned max_attempts;
	unsigned deadline_ms; /* total time for one call, retries included */
	unsigned backoff_base_ms;
	unsigned backoff_max_ms;
	unsigned connect_timeout_ms;
	unsigned stall_timeout_s; /* an attempt moving no bytes this long fails
				   */
	unsigned parallel; /* ranges or parts in flight for one transfer */
	uint64_t part_size;
	uint64_t multipart_threshold;
	unsigned max_parts;
	/* Signed bodies read from an fd that may change while they are sent
	 * (a file being written): when non-zero, such a body of up to this
	 * many bytes is read once into memory and that copy is hashed and
	 * sent, with at most this many bytes held at once by the client
	 * (others wait their turn). 0: hashed from the fd, then read again
	 * to send (the fd must not change meanwhile). */
	uint64_t snapshot_budget;
	s3_log_fn log;
	void *log_ctx;
};

/* What the server (or the transport) said about the last failure. */
struct s3_error {
	int http_status; /* 0 when no response arrived */
	char code[64];	 /* S3 error code, e.g. "NoSuchKey", or a transport name
			  */
	char message[256]; /* human-readable; never holds a secret */
	char request_id[64];
	unsigned attempts;
};

struct s3_meta {
	char *name; /* without "x-amz-meta-", lower case */
	char *value;
};

struct s3_put_opts {
	const char *content_type;   /* NULL: binary/octet-stream */
	const struct s3_meta *meta; /* borrowed */
	size_t nmeta;
};

struct s3_object_info {
	uint64_t size;
	char etag[S3_ETAG_MAX]; /* with its quotes, as S3 sends it */
	time_t last_modified;
	char *content_type;   /* owned; may be NULL */
	struct s3_meta *meta; /* owned array */
	size_t nmeta;
};

struct s3_list_entry {
	char *key; /* owned */
	uint64_t size;
	char etag[S3_ETAG_MAX];
	time_t last_modified;
};

struct s3_list_opts {
	const char *prefix;
	const char *delimiter;
	const char *continuation_token;
	const char *start_after;
	unsigned max_keys; /* 0: the server's default (1000) */
};

struct s3_list_page {
	struct s3_list_entry *entries; /* owned */
	size_t nentries;
	char **common_prefixes; /* owned */
	size_t nprefixes;
	int truncated;
	char *next_token; /* owned; NULL when not truncated */
};

struct s3_part {
	unsigned number; /* 1-based */
	char etag[S3_ETAG_MAX];
};

struct s3_upload {
	char *key;	 /* owned */
	char *upload_id; /* owned */
	time_t initiated;
};

struct s3_upload_list {
	struct s3_upload *uploads; /* owned */
	size_t nuploads;
	int truncated;
	char *next_key_marker;	     /* owned */
	char *next_upload_id_marker; /* owned */
};

enum s3_metadata_directive { S3_METADATA_COPY, S3_METADATA_REPLACE };

typedef struct s3_client s3_client;

/* --- configuration and credentials ------------------------------------ */

/* Fills every field with its default. */
void s3_config_init(struct s3_config *cfg);
/* Fills endpoint/region/ca_file from AWS_ENDPOINT_URL, AWS_REGION (or
 * AWS_DEFAULT_REGION) and AWS_CA_BUNDLE where set. The strings point into
 * the environment. */
void s3_config_from_env(struct s3_config *cfg);
/* 0, or -EINVAL with the reason in why[whylen]. */
int s3_config_validate(const struct s3_config *cfg, char *why, size_t whylen);

/* From AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN.
 * -ENOENT when the key id or secret is missing. */
int s3_credentials_from_env(struct s3_credentials *out);
/* From a file of "name = value" lines (aws_access_key_id,
 * aws_secret_access_key, aws_session_token, or the CSI secret names
 * accessKeyID, secretAccessKey, sessionToken). In an ini file with
 * [sections], only [$AWS_PROFILE] (default: [default]) is read. The file
 * must not be readable or writable by group or others: -EPERM otherwise. */
int s3_credentials_from_file(const char *path, struct s3_credentials *out,
			     char *why, size_t whylen);
/* Copies; -ENOMEM. */
int s3_credentials_set(struct s3_credentials *out, const char *access_key,
		       const char *secret_key, const char *session_token);
/* Wipes the secret from memory and frees. */
void s3_credentials_free(struct s3_credentials *c);

/* --- the client --------------------------------------------------------- */

/* The client copies cfg's strings and the credentials. -EINVAL for a bad
 * configuration (the reason goes to cfg->log), -ENOMEM. */
int s3_client_create(const struct s3_config *cfg,
		     const struct s3_credentials *creds, s3_client **out);
void s3_client_destroy(s3_client *c);
/* Replaces the credentials (rotation); thread-safe. */
int s3_client_set_credentials(s3_client *c, const struct s3_credentials *creds);
const struct s3_config *s3_client_config(const s3_client *c);

/* --- objects ------------------------------------------------------------ */

/* GET bytes [off, off+len) (len may be S3_TO_END) into buf. Returns the byte
 * count, or -errno. -EOVERFLOW when the body is larger than bufsize. info
 * (optional) gets the object's size, ETag, type and metadata. if_match
 * (optional) makes the call fail with -ESTALE when the ETag differs. */
ssize_t s3_get_buf(s3_client *c, const char *bucket, const char *key,
		   uint64_t off, uint64_t len, void *buf, size_t bufsize,
		   const char *if_match, struct s3_object_info *info,
		   struct s3_error *err);
/* GET bytes [off, off+len) and pwrite() them to fd at fd_off. The body is
 * streamed, never held whole. fd_off < 0 means fd is a pipe: bytes are
 * written in order, and a failure after the first byte is not retried.
 * Returns the byte count or -errno. */
ssize_t s3_get_fd(s3_client *c, const char *bucket, const char *key,
		  uint64_t off, uint64_t len, int fd, off_t fd_off,
		  const char *if_match, struct s3_object_info *info,
		  struct s3_error *err);
/* Told as a GET's body lands in its fd: how many bytes from the start of
 * the range are written, a prefix that only grows (a retry that writes
 * the same bytes again is not told twice). A nonzero return stops the GET,
 * which then fails with -ECANCELED. */
struct s3_landed {
	int (*fn)(void *arg, uint64_t bytes);
	void *arg;
};
/* s3_get_fd() that tells landed (optional) as the body lands. */
ssize_t s3_get_fd_landed(s3_client *c, const char *bucket, const char *key,
			 uint64_t off, uint64_t len, int fd, off_t fd_off,
			 const char *if_match, struct s3_object_info *info,
			 const struct s3_landed *landed, struct s3_error *err);
/* PUT from memory. etag_out (optional) is S3_ETAG_MAX bytes. */
int s3_put_buf(s3_client *c, const char *bucket, const char *key,
	       const void *buf, size_t len, const struct s3_put_opts *opts,
	       char *etag_out, struct s3_error *err);
/* PUT len bytes read with pread() from fd at off. A retry reads them again,
 * so the fd range must not change during the call. */
int s3_put_fd(s3_client *c, const char *bucket, const char *key, int fd,
	      off_t off, uint64_t len, const struct s3_put_opts *opts,
	      char *etag_out, struct s3_error *err);
int s3_head_object(s3_client *c, const char *bucket, const char *key,
		   struct s3_object_info *out, struct s3_error *err);
void s3_object_info_free(struct s3_object_info *info);
/* Returns the value of metadata header name, or NULL. */
const char *s3_object_info_meta(const struct s3_object_info *info,
				const char *name);
/* Deleting a key that does not exist succeeds, as in S3. */
int s3_delete_object(s3_client *c, const char *bucket, const char *key,
		     struct s3_error *err);
/* Deletes n keys in batches of S3_MAX_DELETE_BATCH. Keys that did not exist
 * count as deleted. -EIO if any key could not be deleted; the first such
 * key and its error are reported in err. */
int s3_delete_objects(s3_client *c, const char *bucket, const char *const *keys,
		      size_t n, struct s3_error *err);
/* Server-side copy. With S3_METADATA_REPLACE, opts gives the new type and
 * metadata; with COPY, opts must be NULL. */
int s3_copy_object(s3_client *c, const char *src_bucket, const char *src_key,
		   const char *dst_bucket, const char *dst_key,
		   enum s3_metadata_directive directive,
		   const struct s3_put_opts *opts, char *etag_out,
		   struct s3_error *err);

/* --- listing ------------------------------------------------------------ */

/* One ListObjectsV2 page. */
int s3_list_objects(s3_client *c, const char *bucket,
		    const struct s3_list_opts *opts, struct s3_list_page *out,
		    struct s3_error *err);
void s3_list_page_free(struct s3_list_page *page);
/* Calls fn for every page until the listing ends or fn returns non-zero
 * (which is then returned). */
typedef int (*s3_list_fn)(void *ctx, const struct s3_list_page *page);
int s3_list_all(s3_client *c, const char *bucket, const char *prefix,
		const char *delimiter, s3_list_fn fn, void *ctx,
		struct s3_error *err);

/* --- multipart ---------------------------------------------------------- */

/* *upload_id_out is owned by the caller (free()). */
int s3_mpu_create(s3_client *c, const char *bucket, const char *key,
		  const struct s3_put_opts *opts, char **upload_id_out,
		  struct s3_error *err);
int s3_mpu_upload_part_fd(s3_client *c, const char *bucket, const char *key,
			  const char *upload_id, unsigned part_number, int fd,
			  off_t off, uint64_t len, char *etag_out,
			  struct s3_error *err);
/* UploadPartCopy of src bytes [src_off, src_off+src_len). */
int s3_mpu_upload_part_copy(s3_client *c, const char *bucket, const char *key,
			    const char *upload_id, unsigned part_number,
			    const char *src_bucket, const char *src_key,
			    uint64_t src_off, uint64_t src_len,
			    const char *src_if_match, char *etag_out,
			    struct s3_error *err);
/* parts must be in ascending part-number order. */
int s3_mpu_complete(s3_client *c, const char *bucket, const char *key,
		    const char *upload_id, const struct s3_part *parts,
		    size_t nparts, char *etag_out, struct s3_error *err);
/* Aborting an upload that no longer exists returns -ENOENT. */
int s3_mpu_abort(s3_client *c, const char *bucket, const char *key,
		 const char *upload_id, struct s3_error *err);
/* One page of in-progress uploads under prefix (ListMultipartUploads). */
int s3_mpu_list(s3_client *c, const char *bucket, const char *prefix,
		const char *key_marker, const char *upload_id_marker,
		struct s3_upload_list *out, struct s3_error *err);
void s3_upload_list_free(struct s3_upload_list *l);

/* --- buckets ------------------------------------------------------------ */

/* -EEXIST when the bucket exists already (owned by us or not). */
int s3_create_bucket(s3_client *c, const char *bucket, struct s3_error *err);
/* 0 when the bucket exists and is reachable; -ENOENT, -EACCES, ... */
int s3_head_bucket(s3_client *c, const char *bucket, struct s3_error *err);

/* --- large transfers (parallel) ----------------------------------------- */

/* Uploads len bytes of fd from off: one PUT below the multipart threshold,
 * otherwise a multipart upload of cfg.parallel parts in flight, aborted on
 * failure so no partial object or orphaned upload is left. */
int s3_upload_fd(s3_client *c, const char *bucket, const char *key, int fd,
		 off_t off, uint64_t len, const struct s3_put_opts *opts,
		 char *etag_out, struct s3_error *err);
/* The part size s3_upload_fd() and s3_upload_fd_reuse() use for an
 * object of len bytes (cfg.part_size, grown to fit cfg.max_parts). */
uint64_t s3_upload_part_size(s3_client *c, uint64_t len);
/* How s3_upload_fd_reuse() makes part i. */
enum s3_part_source {
	S3_PART_FD = 0,	  /* read from fd at the part's offset */
	S3_PART_COPY = 1, /* copied server-side from src_key */
	S3_PART_ALT = 2,  /* read from alt_fd at the part's offset */
};

/* Rewrites key as a multipart upload of len bytes in which part i (bytes
 * [i*P, i*P+P) for P = s3_upload_part_size()) is made as source[i] says:
 * copied server-side from src_key, pinned to src_etag (UploadPartCopy,
 * If-Match; NULL: not pinned), or read from fd (or alt_fd) at the same
 * offset: a small edit to a big object sends only the parts it touched.
 * The caller makes sure the copied ranges exist in the source with the
 * same bytes. -EINVAL at or below the multipart threshold; a source that
 * no longer matches src_etag fails with -ESTALE (412) and the upload is
 * aborted. Swift's s3api answers 412 for any multipart source, whatever
 * the ETag. */
int s3_upload_fd_reuse(s3_client *c, const char *bucket, const char *key,
		       int fd, int alt_fd, uint64_t len,
		       const struct s3_put_opts *opts, const char *src_key,
		       const char *src_etag, const unsigned char *source,
		       char *etag_out, struct s3_error *err);
/* Downloads the whole object into fd at offset 0 (the file is truncated to
 * the object's size) with cfg.parallel ranged GETs pinned to one ETag.
 * info (optional) gets the object's attributes. */
int s3_download_fd(s3_client *c, const char *bucket, const char *key, int fd,
		   struct s3_object_info *info, struct s3_error *err);
/* Ranged GET of [off, off+len) into fd at fd_off using up to cfg.parallel
 * parallel requests of cfg.part_size. landed (optional) is told the
 * prefix of the range that is written, as the parts land. Returns bytes
 * written or -errno. */
ssize_t s3_get_parallel(s3_client *c, const char *bucket, const char *key,
			uint64_t off, uint64_t len, int fd, off_t fd_off,
			const char *if_match, const struct s3_landed *landed,
			struct s3_error *err);

/* --- errors ------------------------------------------------------------- */

/* Maps an S3 error code and HTTP status to -errno (the mapping the client
 * itself uses): NoSuchKey -> -ENOENT, AccessDenied -> -EACCES, ... */
int s3_errno_from_status(int http_status, const char *code);
/* "NoSuchKey (404): The specified key does not exist." into buf. */
const char *s3_error_str(const struct s3_error *err, char *buf, size_t len);

#endif /* TIERFS_S3_H */
