/* sigv4.h: AWS Signature Version 4 for S3 requests, on OpenSSL.
 *
 * Pure functions, thread-safe. The caller builds the already-encoded
 * canonical URI and query (uri.h); this module sorts and trims the headers,
 * builds the canonical request and string to sign, and derives the
 * signature. Results are malloc'ed and owned by the caller. The secret is
 * used only to derive the signing key and is never copied out.
 */
#ifndef TIERFS_SIGV4_H
#define TIERFS_SIGV4_H

#include <stddef.h>
#include <time.h>

#define SIGV4_EMPTY_SHA256                                                     \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SIGV4_UNSIGNED_PAYLOAD "UNSIGNED-PAYLOAD"

struct sigv4_header {
	const char *name; /* any case; lower-cased when signed */
	const char *value;
};

struct sigv4_request {
	const char *method;
	const char *canonical_uri; /* encoded path, e.g. "/bucket/a%20b" */
	const char
		*canonical_query; /* from uri_canonical_query(); "" if none */
	const struct sigv4_header *headers; /* host and x-amz-* among them */
	size_t nheaders;
	const char *payload_hash; /* hex SHA-256, or SIGV4_UNSIGNED_PAYLOAD */
	const char *amz_date;	  /* "20130524T000000Z" */
	const char *region;
	const char *service; /* "s3" */
};

/* "20130524T000000Z" for t, in UTC. */
void sigv4_amz_date(time_t t, char out[17]);
void sigv4_sha256_hex(const void *data, size_t len, char out[65]);
/* The canonical request; *signed_headers_out (optional) gets "a;b;c".
 * NULL on ENOMEM. */
char *sigv4_canonical_request(const struct sigv4_request *r,
			      char **signed_headers_out);
char *sigv4_string_to_sign(const struct sigv4_request *r,
			   const char *canonical_request);
/* Hex signature of string_to_sign with the key derived from secret. */
void sigv4_signature(const char *secret, const struct sigv4_request *r,
		     const char *string_to_sign, char out[65]);
/* The whole Authorization header value. NULL on ENOMEM. */
char *sigv4_authorization(const struct sigv4_request *r, const char *access_key,
			  const char *secret);

#endif
