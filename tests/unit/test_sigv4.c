/* test_sigv4.c: SigV4 against the worked examples in AWS's S3 SigV4 docs.
 *
 * Every expected value below (canonical requests, string-to-sign hashes,
 * signatures) is the one AWS publishes for its examples, with the example
 * key pair AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY
 * and the date 20130524T000000Z.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../s3/sigv4.h"
#include "../../s3/uri.h"

#define ACCESS_KEY "AKIAIOSFODNN7EXAMPLE"
#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define HOST "examplebucket.s3.amazonaws.com"
#define DATE "20130524T000000Z"

struct example {
	struct sigv4_request req;
	const char *canonical;
	const char *sts_hash; /* last line of the string to sign */
	const char *signature;
};

static void check_example(const struct example *ex)
{
	char *signed_headers = NULL;
	char *creq = sigv4_canonical_request(&ex->req, &signed_headers);
	assert_non_null(creq);
	assert_string_equal(creq, ex->canonical);

	char *sts = sigv4_string_to_sign(&ex->req, creq);
	assert_non_null(sts);
	char expect_sts[256];
	snprintf(expect_sts, sizeof(expect_sts),
		 "AWS4-HMAC-SHA256\n" DATE
		 "\n20130524/us-east-1/s3/aws4_request\n%s",
		 ex->sts_hash);
	assert_string_equal(sts, expect_sts);

	char sig[65];
	sigv4_signature(SECRET, &ex->req, sts, sig);
	assert_string_equal(sig, ex->signature);

	char *auth = sigv4_authorization(&ex->req, ACCESS_KEY, SECRET);
	char expect_auth[512];
	snprintf(expect_auth, sizeof(expect_auth),
		 "AWS4-HMAC-SHA256 Credential=" ACCESS_KEY
		 "/20130524/us-east-1/s3/aws4_request,SignedHeaders=%s,"
		 "Signature=%s",
		 signed_headers, ex->signature);
	assert_string_equal(auth, expect_auth);
	assert_null(strstr(auth, SECRET));
	free(auth);
	free(sts);
	free(creq);
	free(signed_headers);
}

static void test_get_object_with_range_matches_aws_example(void **state)
{
	(void)state;
	/* given in a different order and case than signed, to prove sorting
	 * and lower-casing */
	const struct sigv4_header h[] = {
		{"x-amz-date", DATE},
		{"Range", "bytes=0-9"},
		{"Host", HOST},
		{"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
	};
	const struct example ex = {
		.req = {.method = "GET",
			.canonical_uri = "/test.txt",
			.canonical_query = "",
			.headers = h,
			.nheaders = 4,
			.payload_hash = SIGV4_EMPTY_SHA256,
			.amz_date = DATE,
			.region = "us-east-1",
			.service = "s3"},
		.canonical =
			"GET\n/test.txt\n\n"
			"host:" HOST "\nrange:bytes=0-9\n"
			"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			"x-amz-date:" DATE "\n\n"
			"host;range;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
		.sts_hash =
			"7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
		.signature =
			"f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
	};
	check_example(&ex);
}

static void test_put_object_with_dollar_key_matches_aws_example(void **state)
{
	(void)state;
	const char *body = "Welcome to Amazon S3.";
	char hash[65];
	sigv4_sha256_hex(body, strlen(body), hash);
	assert_string_equal(
		hash,
		"44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");

	/* the key "test$file.text" must encode to the canonical URI */
	struct buf uri = BUF_INIT;
	assert_int_equal(buf_putc(&uri, '/'), 0);
	assert_int_equal(uri_encode(&uri, "test$file.text", 14, 1), 0);
	assert_string_equal(uri.data, "/test%24file.text");

	const struct sigv4_header h[] = {
		{"Host", HOST},
		{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
		{"x-amz-date", DATE},
		{"x-amz-storage-class", "REDUCED_REDUNDANCY"},
		{"x-amz-content-sha256", hash},
	};
	const struct example ex = {
		.req = {.method = "PUT",
			.canonical_uri = uri.data,
			.canonical_query = "",
			.headers = h,
			.nheaders = 5,
			.payload_hash = hash,
			.amz_date = DATE,
			.region = "us-east-1",
			.service = "s3"},
		.canonical =
			"PUT\n/test%24file.text\n\n"
			"date:Fri, 24 May 2013 00:00:00 GMT\n"
			"host:" HOST "\n"
			"x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
			"x-amz-date:" DATE "\n"
			"x-amz-storage-class:REDUCED_REDUNDANCY\n\n"
			"date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
			"44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
		.sts_hash =
			"9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
		.signature =
			"98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd",
	};
	check_example(&ex);
	buf_free(&uri);
}

static const struct sigv4_header bucket_headers[] = {
	{"host", HOST},
	{"x-amz-content-sha256", SIGV4_EMPTY_SHA256},
	{"x-amz-date", DATE},
};

static void test_get_bucket_lifecycle_matches_aws_example(void **state)
{
	(void)state;
	const struct uri_param p[] = {{"lifecycle", NULL}};
	struct buf q = BUF_INIT;
	assert_int_equal(uri_canonical_query(&q, p, 1), 0);
	assert_string_equal(q.data, "lifecycle=");
	const struct example ex = {
		.req = {.method = "GET",
			.canonical_uri = "/",
			.canonical_query = q.data,
			.headers = bucket_headers,
			.nheaders = 3,
			.payload_hash = SIGV4_EMPTY_SHA256,
			.amz_date = DATE,
			.region = "us-east-1",
			.service = "s3"},
		.canonical =
			"GET\n/\nlifecycle=\n"
			"host:" HOST "\n"
			"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			"x-amz-date:" DATE "\n\n"
			"host;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
		.sts_hash =
			"9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
		.signature =
			"fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543",
	};
	check_example(&ex);
	buf_free(&q);
}

static void
test_list_objects_query_is_sorted_and_matches_aws_example(void **state)
{
	(void)state;
	/* given out of order: the canonical query must sort them */
	const struct uri_param p[] = {{"prefix", "J"}, {"max-keys", "2"}};
	struct buf q = BUF_INIT;
	assert_int_equal(uri_canonical_query(&q, p, 2), 0);
	assert_string_equal(q.data, "max-keys=2&prefix=J");
	const struct example ex = {
		.req = {.method = "GET",
			.canonical_uri = "/",
			.canonical_query = q.data,
			.headers = bucket_headers,
			.nheaders = 3,
			.payload_hash = SIGV4_EMPTY_SHA256,
			.amz_date = DATE,
			.region = "us-east-1",
			.service = "s3"},
		.canonical =
			"GET\n/\nmax-keys=2&prefix=J\n"
			"host:" HOST "\n"
			"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
			"x-amz-date:" DATE "\n\n"
			"host;x-amz-content-sha256;x-amz-date\n" SIGV4_EMPTY_SHA256,
		.sts_hash =
			"df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
		.signature =
			"34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7",
	};
	check_example(&ex);
	buf_free(&q);
}

static void test_header_values_are_trimmed_and_spaces_collapsed(void **state)
{
	(void)state;
	const struct sigv4_header h[] = {
		{"X-Amz-Meta-Note", "  two   words\there  "},
		{"host", "h"},
	};
	struct sigv4_request r = {.method = "PUT",
				  .canonical_uri = "/k",
				  .canonical_query = "",
				  .headers = h,
				  .nheaders = 2,
				  .payload_hash = "x",
				  .amz_date = DATE,
				  .region = "us-east-1",
				  .service = "s3"};
	char *creq = sigv4_canonical_request(&r, NULL);
	assert_non_null(creq);
	assert_string_equal(creq, "PUT\n/k\n\nhost:h\n"
				  "x-amz-meta-note:two words here\n\n"
				  "host;x-amz-meta-note\nx");
	free(creq);
}

static void test_signature_depends_on_region_and_date(void **state)
{
	(void)state;
	struct sigv4_request r = {.method = "GET",
				  .canonical_uri = "/",
				  .canonical_query = "",
				  .headers = bucket_headers,
				  .nheaders = 3,
				  .payload_hash = SIGV4_EMPTY_SHA256,
				  .amz_date = DATE,
				  .region = "us-east-1",
				  .service = "s3"};
	char *a = sigv4_authorization(&r, ACCESS_KEY, SECRET);
	r.region = "eu-west-1";
	char *b = sigv4_authorization(&r, ACCESS_KEY, SECRET);
	r.amz_date = "20130525T000000Z";
	char *c = sigv4_authorization(&r, ACCESS_KEY, SECRET);
	assert_string_not_equal(a, b);
	assert_string_not_equal(b, c);
	assert_non_null(strstr(b, "/20130524/eu-west-1/s3/aws4_request"));
	assert_non_null(strstr(c, "/20130525/eu-west-1/s3/aws4_request"));
	free(a);
	free(b);
	free(c);
}

static void test_amz_date_formats_utc(void **state)
{
	(void)state;
	char d[17];
	sigv4_amz_date(1369353600, d); /* 2013-05-24 00:00:00 UTC */
	assert_string_equal(d, DATE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_get_object_with_range_matches_aws_example),
		cmocka_unit_test(
			test_put_object_with_dollar_key_matches_aws_example),
		cmocka_unit_test(test_get_bucket_lifecycle_matches_aws_example),
		cmocka_unit_test(
			test_list_objects_query_is_sorted_and_matches_aws_example),
		cmocka_unit_test(
			test_header_values_are_trimmed_and_spaces_collapsed),
		cmocka_unit_test(test_signature_depends_on_region_and_date),
		cmocka_unit_test(test_amz_date_formats_utc),
	};
	return cmocka_run_group_tests_name("sigv4", tests, NULL, NULL);
}
