/* test_retry.c: retry decisions, full-jitter backoff, and S3 error -> errno. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "../../s3/retry.h"
#include "../../s3/s3.h"

static uint64_t xorshift64(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* min(max, base * 2^(attempt-1)), computed without overflow. */
static uint64_t expected_ceiling(unsigned attempt, unsigned base, unsigned max)
{
	uint64_t c = base;
	for (unsigned i = 1; i < attempt && c < max; i++)
		c *= 2;
	return c < max ? c : max;
}

/* The largest 64-bit value that is congruent to c modulo c + 1: with the
 * uniform rnd % (ceiling + 1) mapping it lands exactly on the ceiling. */
static uint64_t rnd_for_ceiling(uint64_t c)
{
	return UINT64_MAX - (UINT64_MAX - c) % (c + 1);
}

/* --- retry_should_retry -------------------------------------------------- */

static void
test_transport_failures_are_retried_whatever_the_status(void **state)
{
	(void)state;
	static const enum retry_transport t[] = {RETRY_T_CONNECT, RETRY_T_RESET,
						 RETRY_T_TIMEOUT};
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		assert_true(retry_should_retry(t[i], 0, NULL));
		assert_true(retry_should_retry(t[i], 0, ""));
		assert_true(retry_should_retry(t[i], 0, "CURLE_RECV_ERROR"));
	}
}

static void test_fatal_transport_failure_is_never_retried(void **state)
{
	(void)state;
	assert_false(retry_should_retry(RETRY_T_FATAL, 0, NULL));
	assert_false(retry_should_retry(RETRY_T_FATAL, 0, ""));
	assert_false(retry_should_retry(RETRY_T_FATAL, 503, "SlowDown"));
	assert_false(retry_should_retry(RETRY_T_FATAL, 500, "InternalError"));
}

static void test_server_errors_are_retried(void **state)
{
	(void)state;
	static const int st[] = {500, 502, 503, 504};
	for (size_t i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
		assert_true(retry_should_retry(RETRY_T_NONE, st[i], NULL));
		assert_true(retry_should_retry(RETRY_T_NONE, st[i], ""));
	}
	assert_true(retry_should_retry(RETRY_T_NONE, 500, "InternalError"));
	assert_true(
		retry_should_retry(RETRY_T_NONE, 503, "ServiceUnavailable"));
}

static void test_501_not_implemented_is_not_retried(void **state)
{
	(void)state;
	assert_false(retry_should_retry(RETRY_T_NONE, 501, NULL));
	assert_false(retry_should_retry(RETRY_T_NONE, 501, ""));
	assert_false(retry_should_retry(RETRY_T_NONE, 501, "NotImplemented"));
}

static void test_429_too_many_requests_is_retried(void **state)
{
	(void)state;
	assert_true(retry_should_retry(RETRY_T_NONE, 429, NULL));
	assert_true(retry_should_retry(RETRY_T_NONE, 429, ""));
	assert_true(retry_should_retry(RETRY_T_NONE, 429, "TooManyRequests"));
}

static void test_503_slowdown_is_retried(void **state)
{
	(void)state;
	assert_true(retry_should_retry(RETRY_T_NONE, 503, "SlowDown"));
}

static void test_400_request_timeout_is_retried(void **state)
{
	(void)state;
	assert_true(retry_should_retry(RETRY_T_NONE, 400, "RequestTimeout"));
}

static void test_transient_4xx_codes_are_retried(void **state)
{
	(void)state;
	assert_true(
		retry_should_retry(RETRY_T_NONE, 403, "RequestTimeTooSkewed"));
	assert_true(retry_should_retry(RETRY_T_NONE, 400, "ExpiredToken"));
	assert_true(retry_should_retry(RETRY_T_NONE, 409, "OperationAborted"));
	assert_true(retry_should_retry(RETRY_T_NONE, 400, "Throttling"));
}

static void test_other_400s_are_not_retried(void **state)
{
	(void)state;
	assert_false(retry_should_retry(RETRY_T_NONE, 400, "InvalidArgument"));
	assert_false(retry_should_retry(RETRY_T_NONE, 400, "MalformedXML"));
	assert_false(retry_should_retry(RETRY_T_NONE, 400, NULL));
	assert_false(retry_should_retry(RETRY_T_NONE, 400, ""));
}

static void test_auth_failures_are_not_retried(void **state)
{
	(void)state;
	assert_false(retry_should_retry(RETRY_T_NONE, 403, "AccessDenied"));
	assert_false(
		retry_should_retry(RETRY_T_NONE, 403, "SignatureDoesNotMatch"));
	assert_false(
		retry_should_retry(RETRY_T_NONE, 403, "InvalidAccessKeyId"));
	assert_false(retry_should_retry(RETRY_T_NONE, 403, NULL));
}

static void test_not_found_is_not_retried(void **state)
{
	(void)state;
	assert_false(retry_should_retry(RETRY_T_NONE, 404, NULL));
	assert_false(retry_should_retry(RETRY_T_NONE, 404, "NoSuchKey"));
	assert_false(retry_should_retry(RETRY_T_NONE, 404, "NoSuchBucket"));
	assert_false(
		retry_should_retry(RETRY_T_NONE, 412, "PreconditionFailed"));
}

static void test_200_with_internal_error_body_is_retried(void **state)
{
	(void)state;
	/* S3 can answer CopyObject / CompleteMultipartUpload with 200 and
	 * an <Error> body. */
	assert_true(retry_should_retry(RETRY_T_NONE, 200, "InternalError"));
	assert_true(retry_should_retry(RETRY_T_NONE, 200, "SlowDown"));
	assert_false(retry_should_retry(RETRY_T_NONE, 200, NULL));
	assert_false(retry_should_retry(RETRY_T_NONE, 200, ""));
	assert_false(retry_should_retry(RETRY_T_NONE, 200, "AccessDenied"));
}

/* --- retry_backoff_ms ---------------------------------------------------- */

static void test_backoff_with_zero_rnd_is_zero(void **state)
{
	(void)state;
	for (unsigned k = 1; k <= 64; k++) {
		assert_int_equal(retry_backoff_ms(k, 50, 5000, 0), 0);
		assert_int_equal(retry_backoff_ms(k, 1, UINT_MAX, 0), 0);
	}
}

static void test_backoff_ceiling_doubles_from_base_until_max(void **state)
{
	(void)state;
	static const unsigned want[] = {50,   100,  200,  400,	800, 1600,
					3200, 5000, 5000, 5000, 5000};
	for (unsigned k = 1; k <= sizeof(want) / sizeof(want[0]); k++) {
		assert_int_equal(expected_ceiling(k, 50, 5000), want[k - 1]);
		unsigned got = retry_backoff_ms(k, 50, 5000,
						rnd_for_ceiling(want[k - 1]));
		if (got != want[k - 1])
			fail_msg("attempt %u: ceiling %u, want %u", k, got,
				 want[k - 1]);
		/* A small rnd equal to the ceiling reaches it too. */
		assert_int_equal(retry_backoff_ms(k, 50, 5000, want[k - 1]),
				 want[k - 1]);
	}
}

/* 200 pseudo-random draws for attempt k all fall in [0, ceiling], and the
 * ceiling itself is reachable. */
static void check_jitter_bounds(unsigned k, unsigned b, unsigned m)
{
	uint64_t x = 0x243f6a8885a308d3ull ^ ((uint64_t)k << 32 | (b ^ m));
	uint64_t c = expected_ceiling(k, b, m);

	for (int i = 0; i < 200; i++) {
		unsigned v = retry_backoff_ms(k, b, m, xorshift64(&x));
		if (v > c)
			fail_msg("base %u max %u attempt %u: %u > %llu", b, m,
				 k, v, (unsigned long long)c);
	}
	assert_true(retry_backoff_ms(k, b, m, UINT64_MAX) <= c);
	assert_int_equal(retry_backoff_ms(k, b, m, rnd_for_ceiling(c)), c);
}

static void test_backoff_stays_within_full_jitter_bounds(void **state)
{
	(void)state;
	static const unsigned bases[] = {1, 50, 100, 1000};
	static const unsigned maxes[] = {0, 1, 5000, 30000, UINT_MAX};
	const size_t nb = sizeof(bases) / sizeof(bases[0]);
	const size_t nm = sizeof(maxes) / sizeof(maxes[0]);

	for (size_t bm = 0; bm < nb * nm; bm++) {
		unsigned b = bases[bm / nm], m = maxes[bm % nm];
		for (unsigned k = 1; k <= 40; k++)
			check_jitter_bounds(k, b, m);
	}
}

static void
test_backoff_large_attempts_cap_at_max_without_overflow(void **state)
{
	(void)state;
	/* 50 * 2^39 does not fit in 32 bits; the result must still be capped
	 * at max, and reach it. */
	static const unsigned attempts[] = {31, 32, 33,	  40,
					    64, 65, 1000, UINT_MAX};
	for (size_t i = 0; i < sizeof(attempts) / sizeof(attempts[0]); i++) {
		unsigned k = attempts[i];
		assert_int_equal(
			retry_backoff_ms(k, 50, 5000, rnd_for_ceiling(5000)),
			5000);
		assert_true(retry_backoff_ms(k, 50, 5000, UINT64_MAX) <= 5000);
		assert_int_equal(
			retry_backoff_ms(k, 1000, UINT_MAX, UINT64_MAX),
			UINT_MAX);
		assert_int_equal(
			retry_backoff_ms(k, UINT_MAX, UINT_MAX, UINT64_MAX - 1),
			(unsigned)((UINT64_MAX - 1) %
				   ((uint64_t)UINT_MAX + 1)));
	}
}

static void test_backoff_base_above_max_is_capped_at_max(void **state)
{
	(void)state;
	assert_int_equal(
		retry_backoff_ms(1, 10000, 5000, rnd_for_ceiling(5000)), 5000);
	assert_true(retry_backoff_ms(1, 10000, 5000, UINT64_MAX) <= 5000);
	assert_int_equal(retry_backoff_ms(3, 10, 0, UINT64_MAX), 0);
}

static void test_backoff_is_spread_over_the_whole_range(void **state)
{
	(void)state;
	static const struct {
		unsigned attempt, base, max;
	} cases[] = {
		{1, 50, 5000},
		{3, 100, 10000}, /* ceiling 400 */
		{20, 50, 5000},	 /* capped: ceiling 5000 */
		{40, 1000, 60000},
	};
	for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
		uint64_t x = 0xdeadbeefcafef00dull;
		uint64_t c = expected_ceiling(cases[ci].attempt, cases[ci].base,
					      cases[ci].max);
		uint64_t sum = 0;
		unsigned lo = UINT_MAX, hi = 0;
		for (int i = 0; i < 1000; i++) {
			unsigned v = retry_backoff_ms(
				cases[ci].attempt, cases[ci].base,
				cases[ci].max, xorshift64(&x));
			sum += v;
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		double mean = (double)sum / 1000.0, half = (double)c / 2.0;
		if (mean < half * 0.8 || mean > half * 1.2)
			fail_msg("case %zu: mean %.1f, want about %.1f", ci,
				 mean, half);
		/* Full jitter: both ends of [0, ceiling] are visited. */
		assert_true(lo < c / 10);
		assert_true(hi > c - c / 10);
	}
}

/* --- s3_errno_from_status ------------------------------------------------ */

static void test_errno_missing_key_or_bucket_is_enoent(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(404, "NoSuchKey"), -ENOENT);
	assert_int_equal(s3_errno_from_status(404, "NoSuchBucket"), -ENOENT);
	assert_int_equal(s3_errno_from_status(404, "NoSuchUpload"), -ENOENT);
	assert_int_equal(s3_errno_from_status(404, ""), -ENOENT);
	assert_int_equal(s3_errno_from_status(404, NULL), -ENOENT);
}

static void test_errno_auth_failures_are_eacces(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(403, "AccessDenied"), -EACCES);
	assert_int_equal(s3_errno_from_status(403, "SignatureDoesNotMatch"),
			 -EACCES);
	assert_int_equal(s3_errno_from_status(403, "InvalidAccessKeyId"),
			 -EACCES);
	assert_int_equal(s3_errno_from_status(403, ""), -EACCES);
	assert_int_equal(s3_errno_from_status(403, NULL), -EACCES);
}

static void test_errno_code_wins_over_status(void **state)
{
	(void)state;
	/* A HEAD has no body, so 404 alone means ENOENT, but a code, when
	 * present, decides. */
	assert_int_equal(s3_errno_from_status(400, "NoSuchKey"), -ENOENT);
	assert_int_equal(s3_errno_from_status(200, "AccessDenied"), -EACCES);
}

static void test_errno_503_without_code_is_eio(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(503, ""), -EIO);
	assert_int_equal(s3_errno_from_status(503, NULL), -EIO);
	assert_int_equal(s3_errno_from_status(500, ""), -EIO);
	assert_int_equal(s3_errno_from_status(503, "SlowDown"), -EIO);
}

static void test_errno_precondition_failed_is_estale(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(412, "PreconditionFailed"),
			 -ESTALE);
	assert_int_equal(s3_errno_from_status(412, ""), -ESTALE);
}

static void test_errno_bucket_already_owned_is_eexist(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(409, "BucketAlreadyOwnedByYou"),
			 -EEXIST);
	assert_int_equal(s3_errno_from_status(409, "BucketAlreadyExists"),
			 -EEXIST);
}

static void test_errno_not_implemented_is_enotsup(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(501, "NotImplemented"), -ENOTSUP);
	assert_int_equal(s3_errno_from_status(501, ""), -ENOTSUP);
}

static void test_errno_other_status_only_mappings(void **state)
{
	(void)state;
	assert_int_equal(s3_errno_from_status(400, ""), -EINVAL);
	assert_int_equal(s3_errno_from_status(416, NULL), -ERANGE);
	assert_int_equal(s3_errno_from_status(409, "BucketNotEmpty"),
			 -ENOTEMPTY);
	assert_int_equal(s3_errno_from_status(400, "EntityTooSmall"), -EINVAL);
	assert_int_equal(s3_errno_from_status(418, "SomethingNew"), -EIO);
}

int main(void)
{
	const struct CMUnitTest retry_tests[] = {
		cmocka_unit_test(
			test_transport_failures_are_retried_whatever_the_status),
		cmocka_unit_test(test_fatal_transport_failure_is_never_retried),
		cmocka_unit_test(test_server_errors_are_retried),
		cmocka_unit_test(test_501_not_implemented_is_not_retried),
		cmocka_unit_test(test_429_too_many_requests_is_retried),
		cmocka_unit_test(test_503_slowdown_is_retried),
		cmocka_unit_test(test_400_request_timeout_is_retried),
		cmocka_unit_test(test_transient_4xx_codes_are_retried),
		cmocka_unit_test(test_other_400s_are_not_retried),
		cmocka_unit_test(test_auth_failures_are_not_retried),
		cmocka_unit_test(test_not_found_is_not_retried),
		cmocka_unit_test(test_200_with_internal_error_body_is_retried),
		cmocka_unit_test(test_backoff_with_zero_rnd_is_zero),
		cmocka_unit_test(
			test_backoff_ceiling_doubles_from_base_until_max),
		cmocka_unit_test(test_backoff_stays_within_full_jitter_bounds),
		cmocka_unit_test(
			test_backoff_large_attempts_cap_at_max_without_overflow),
		cmocka_unit_test(test_backoff_base_above_max_is_capped_at_max),
		cmocka_unit_test(test_backoff_is_spread_over_the_whole_range),
	};
	const struct CMUnitTest errno_tests[] = {
		cmocka_unit_test(test_errno_missing_key_or_bucket_is_enoent),
		cmocka_unit_test(test_errno_auth_failures_are_eacces),
		cmocka_unit_test(test_errno_code_wins_over_status),
		cmocka_unit_test(test_errno_503_without_code_is_eio),
		cmocka_unit_test(test_errno_precondition_failed_is_estale),
		cmocka_unit_test(test_errno_bucket_already_owned_is_eexist),
		cmocka_unit_test(test_errno_not_implemented_is_enotsup),
		cmocka_unit_test(test_errno_other_status_only_mappings),
	};
	int failed =
		cmocka_run_group_tests_name("retry", retry_tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("s3_errno_from_status",
					      errno_tests, NULL, NULL);
	return failed;
}
