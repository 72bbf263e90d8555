/* sigv4.c: AWS Signature Version 4 for S3 requests, on OpenSSL.
 *
 * canonical request = METHOD \n URI \n QUERY \n HEADERS \n SIGNED \n HASH,
 * where HEADERS is "name:value\n" per header, names lower-cased and sorted,
 * values trimmed with inner runs of spaces collapsed.
 */
#include "sigv4.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#include "buf.h"

static void to_hex(const unsigned char *in, size_t len, char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < len; i++) {
		out[2 * i] = hex[in[i] >> 4];
		out[2 * i + 1] = hex[in[i] & 15];
	}
	out[2 * len] = '\0';
}

void sigv4_amz_date(time_t t, char out[17])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, 17, "%Y%m%dT%H%M%SZ", &tm);
}

void sigv4_sha256_hex(const void *data, size_t len, char out[65])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	SHA256(data, len, md);
	to_hex(md, sizeof(md), out);
}

struct lc_header {
	char *name; /* lower-cased copy */
	const char *value;
};

static int cmp_header(const void *a, const void *b)
{
	return strcmp(((const struct lc_header *)a)->name,
		      ((const struct lc_header *)b)->name);
}

/* Appends value with leading/trailing spaces removed and inner runs of
 * whitespace collapsed to one space. */
static int put_trimmed(struct buf *b, const char *v)
{
	while (*v == ' ' || *v == '\t')
		v++;
	int space = 0, rc = 0;
	for (; *v && rc == 0; v++) {
		if (*v == ' ' || *v == '\t') {
			space = 1;
			continue;
		}
		if (space)
			rc = buf_putc(b, ' ');
		space = 0;
		if (!rc)
			rc = buf_putc(b, *v);
	}
	return rc;
}

char *sigv4_canonical_request(const struct sigv4_request *r,
			      char **signed_headers_out)
{
	struct buf b = BUF_INIT, sh = BUF_INIT;
	struct lc_header *h = calloc(r->nheaders ? r->nheaders : 1, sizeof(*h));
	int rc = h ? 0 : -1;
	for (size_t i = 0; i < r->nheaders && rc == 0; i++) {
		h[i].name = strdup(r->headers[i].name);
		h[i].value = r->headers[i].value;
		if (!h[i].name) {
			rc = -1;
			break;
		}
		for (char *p = h[i].name; *p; p++)
			*p = (char)tolower((unsigned char)*p);
	}
	if (rc == 0) {
		qsort(h, r->nheaders, sizeof(*h), cmp_header);
		rc = buf_printf(&b, "%s\n%s\n%s\n", r->method, r->canonical_uri,
				r->canonical_query ? r->canonical_query : "");
	}
	for (size_t i = 0; i < r->nheaders && rc == 0; i++) {
		rc = buf_printf(&b, "%s:", h[i].name);
		if (!rc)
			rc = put_trimmed(&b, h[i].value);
		if (!rc)
			rc = buf_putc(&b, '\n');
		if (!rc && i)
			rc = buf_putc(&sh, ';');
		if (!rc)
			rc = buf_puts(&sh, h[i].name);
	}
	if (rc == 0)
		rc = buf_printf(&b, "\n%s\n%s", sh.data ? sh.data : "",
				r->payload_hash);
	if (h)
		for (size_t i = 0; i < r->nheaders; i++)
			free(h[i].name);
	free(h);
	if (rc) {
		buf_free(&b);
		buf_free(&sh);
		return NULL;
	}
	if (signed_headers_out)
		*signed_headers_out = buf_steal(&sh);
	else
		buf_free(&sh);
	return buf_steal(&b);
}

char *sigv4_string_to_sign(const struct sigv4_request *r,
			   const char *canonical_request)
{
	char hash[65];
	struct buf b = BUF_INIT;
	sigv4_sha256_hex(canonical_request, strlen(canonical_request), hash);
	if (buf_printf(&b, "AWS4-HMAC-SHA256\n%s\n%.8s/%s/%s/aws4_request\n%s",
		       r->amz_date, r->amz_date, r->region, r->service, hash)) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}

static void hmac(const void *key, size_t keylen, const char *msg,
		 unsigned char out[32])
{
	unsigned int len = 32;
	HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg,
	     strlen(msg), out, &len);
}

void sigv4_signature(const char *secret, const struct sigv4_request *r,
		     const char *string_to_sign, char out[65])
{
	char date[9];
	unsigned char k[32];
	struct buf seed = BUF_INIT;

	memcpy(date, r->amz_date, 8);
	date[8] = '\0';
	if (buf_printf(&seed, "AWS4%s", secret)) {
		out[0] = '\0';
		return;
	}
	hmac(seed.data, seed.len, date, k);
	OPENSSL_cleanse(seed.data, seed.len);
	buf_free(&seed);
	hmac(k, 32, r->region, k);
	hmac(k, 32, r->service, k);
	hmac(k, 32, "aws4_request", k);
	unsigned char sig[32];
	hmac(k, 32, string_to_sign, sig);
	OPENSSL_cleanse(k, sizeof(k));
	to_hex(sig, 32, out);
}

char *sigv4_authorization(const struct sigv4_request *r, const char *access_key,
			  const char *secret)
{
	char *signed_headers = NULL;
	char *creq = sigv4_canonical_request(r, &signed_headers);
	char *sts = creq ? sigv4_string_to_sign(r, creq) : NULL;
	struct buf b = BUF_INIT;
	char sig[65];
	int rc = -1;

	if (sts) {
		sigv4_signature(secret, r, sts, sig);
		rc = buf_printf(&b,
				"AWS4-HMAC-SHA256 Credential=%s/%.8s/%s/%s/"
				"aws4_request,SignedHeaders=%s,Signature=%s",
				access_key, r->amz_date, r->region, r->service,
				signed_headers, sig);
	}
	free(creq);
	free(sts);
	free(signed_headers);
	if (rc) {
		buf_free(&b);
		return NULL;
	}
	return buf_steal(&b);
}
