/* test_uri.c: SigV4 URI encoding, canonical query strings and decoding. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../s3/buf.h"
#include "../../s3/uri.h"

/* Encodes the NUL-terminated s; the caller frees the result. */
static char *encode(const char *s, int keep_slash)
{
	struct buf b = BUF_INIT;
	assert_int_equal(uri_encode(&b, s, strlen(s), keep_slash), 0);
	assert_non_null(b.data);
	assert_int_equal(strlen(b.data), b.len);
	return buf_steal(&b);
}

static void check_encode(const char *s, int keep_slash, const char *expect)
{
	char *got = encode(s, keep_slash);
	assert_string_equal(got, expect);
	free(got);
}

static char *canonical(const struct uri_param *p, size_t n)
{
	struct buf b = BUF_INIT;
	assert_int_equal(uri_canonical_query(&b, p, n), 0);
	return buf_steal(&b);
}

static void check_decode(const char *s, int plus_is_space, const char *expect)
{
	char *d = strdup(s);
	assert_non_null(d);
	assert_int_equal(uri_decode(d, plus_is_space), 0);
	assert_string_equal(d, expect);
	free(d);
}

static uint64_t xorshift64(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static int unreserved(unsigned c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
	       c == '~';
}

/* --- uri_encode ---------------------------------------------------------- */

static void test_encode_keeps_only_unreserved_bytes(void **state)
{
	(void)state;
	for (int keep_slash = 0; keep_slash <= 1; keep_slash++) {
		for (unsigned c = 1; c <= 0xff; c++) {
			char in[2] = {(char)c, '\0'};
			char expect[4];
			if (unreserved(c) || (keep_slash && c == '/'))
				snprintf(expect, sizeof(expect), "%c", (char)c);
			else
				snprintf(expect, sizeof(expect), "%%%02X", c);
			struct buf b = BUF_INIT;
			assert_int_equal(uri_encode(&b, in, 1, keep_slash), 0);
			if (strcmp(b.data, expect) != 0)
				fail_msg("byte 0x%02x keep_slash=%d: got '%s', "
					 "want '%s'",
					 c, keep_slash, b.data, expect);
			assert_int_equal(b.len, strlen(expect));
			buf_free(&b);
		}
	}
}

static void test_encode_all_bytes_in_one_string_matches_rule(void **state)
{
	(void)state;
	char in[255];
	char expect[255 * 3 + 1];
	size_t n = 0;

	for (unsigned c = 1; c <= 0xff; c++) {
		in[c - 1] = (char)c;
		if (unreserved(c))
			expect[n++] = (char)c;
		else
			n += (size_t)snprintf(expect + n, sizeof(expect) - n,
					      "%%%02X", c);
	}
	expect[n] = '\0';
	struct buf b = BUF_INIT;
	assert_int_equal(uri_encode(&b, in, sizeof(in), 0), 0);
	assert_int_equal(b.len, n);
	assert_string_equal(b.data, expect);
	buf_free(&b);
}

static void
test_encode_escapes_space_plus_percent_equals_not_tilde(void **state)
{
	(void)state;
	for (int keep_slash = 0; keep_slash <= 1; keep_slash++) {
		check_encode(" ", keep_slash, "%20");
		check_encode("+", keep_slash, "%2B");
		check_encode("%", keep_slash, "%25");
		check_encode("%20", keep_slash, "%2520");
		check_encode("~", keep_slash, "~");
		check_encode("=", keep_slash, "%3D");
		check_encode("a b+c%d=e~f", keep_slash, "a%20b%2Bc%25d%3De~f");
		check_encode("-_.~AZaz09", keep_slash, "-_.~AZaz09");
	}
}

static void test_encode_path_mode_keeps_slashes_query_mode_escapes(void **state)
{
	(void)state;
	check_encode("/", 1, "/");
	check_encode("/", 0, "%2F");
	check_encode("a//b", 1, "a//b");
	check_encode("a//b", 0, "a%2F%2Fb");
	check_encode("/bucket/dir/ file+1", 1, "/bucket/dir/%20file%2B1");
	check_encode("/bucket/dir/ file+1", 0, "%2Fbucket%2Fdir%2F%20file%2B1");
	check_encode("//", 1, "//");
	check_encode("//", 0, "%2F%2F");
}

static void test_encode_utf8_bytes_as_uppercase_hex(void **state)
{
	(void)state;
	/* é = C3 A9; 日本 = E6 97 A5 E6 9C AC; 😀 = F0 9F 98 80 */
	check_encode("caf\xc3\xa9/\xe6\x97\xa5\xe6\x9c\xac", 1,
		     "caf%C3%A9/%E6%97%A5%E6%9C%AC");
	check_encode("\xf0\x9f\x98\x80", 0, "%F0%9F%98%80");
	check_encode("\xff\xfe", 0, "%FF%FE");
}

static void test_encode_empty_string_gives_empty_terminated_buffer(void **state)
{
	(void)state;
	for (int keep_slash = 0; keep_slash <= 1; keep_slash++) {
		struct buf b = BUF_INIT;
		assert_int_equal(uri_encode(&b, "", 0, keep_slash), 0);
		assert_non_null(b.data);
		assert_int_equal(b.len, 0);
		assert_string_equal(b.data, "");
		buf_free(&b);
	}
}

static void test_encode_uses_len_and_escapes_nul_bytes(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(uri_encode(&b, "abcdef", 3, 0), 0);
	assert_string_equal(b.data, "abc");
	buf_reset(&b);
	assert_int_equal(uri_encode(&b, "a\0b", 3, 1), 0);
	assert_string_equal(b.data, "a%00b");
	assert_int_equal(b.len, 5);
	buf_free(&b);
}

static void test_encode_appends_to_existing_contents(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "/bucket/"), 0);
	assert_int_equal(uri_encode(&b, "a b/c", 5, 1), 0);
	assert_int_equal(buf_putc(&b, '?'), 0);
	assert_int_equal(uri_encode(&b, "x=y", 3, 0), 0);
	assert_string_equal(b.data, "/bucket/a%20b/c?x%3Dy");
	buf_free(&b);
}

static void test_encode_long_key_grows_buffer(void **state)
{
	(void)state;
	char key[1025];
	memset(key, ' ', 1024);
	key[1024] = '\0';
	char *got = encode(key, 1);
	assert_int_equal(strlen(got), 3 * 1024);
	for (size_t i = 0; i < 1024; i++)
		assert_memory_equal(got + 3 * i, "%20", 3);
	free(got);
}

/* --- uri_canonical_query ------------------------------------------------- */

static void test_canonical_query_of_no_params_appends_nothing(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(uri_canonical_query(&b, NULL, 0), 0);
	assert_int_equal(b.len, 0);
	assert_int_equal(buf_puts(&b, "x"), 0);
	assert_int_equal(uri_canonical_query(&b, NULL, 0), 0);
	assert_string_equal(b.data, "x");
	buf_free(&b);
}

static void test_canonical_query_sorts_by_name(void **state)
{
	(void)state;
	const struct uri_param p[] = {
		{"prefix", "photos/"}, {"list-type", "2"},
		{"max-keys", "10"},    {"delimiter", "/"},
		{"Zeta", "z"},	       {"encoding-type", "url"},
	};
	char *q = canonical(p, sizeof(p) / sizeof(p[0]));
	/* Byte order: upper case sorts before lower case. */
	assert_string_equal(q, "Zeta=z&delimiter=%2F&encoding-type=url&"
			       "list-type=2&max-keys=10&prefix=photos%2F");
	free(q);
}

static void test_canonical_query_sorts_by_encoded_name_not_raw(void **state)
{
	(void)state;
	/* Raw "a." < "a/", but encoded "a%2F" < "a." since '%' < '.'. */
	const struct uri_param p[] = {
		{"a.", "1"},
		{"a/", "2"},
	};
	char *q = canonical(p, 2);
	assert_string_equal(q, "a%2F=2&a.=1");
	free(q);
}

static void
test_canonical_query_sorts_equal_names_by_encoded_value(void **state)
{
	(void)state;
	/* Raw "." < "/" but encoded "%2F" < "."; and "b" > "a". */
	const struct uri_param p[] = {
		{"k", "b"},
		{"k", "."},
		{"k", "/"},
		{"k", "a"},
	};
	char *q = canonical(p, 4);
	assert_string_equal(q, "k=%2F&k=.&k=a&k=b");
	free(q);
}

static void
test_canonical_query_empty_and_null_values_give_name_equals(void **state)
{
	(void)state;
	const struct uri_param p[] = {
		{"uploads", NULL},
		{"delete", ""},
		{"partNumber", "3"},
	};
	char *q = canonical(p, 3);
	assert_string_equal(q, "delete=&partNumber=3&uploads=");
	free(q);

	const struct uri_param one[] = {{"acl", NULL}};
	q = canonical(one, 1);
	assert_string_equal(q, "acl=");
	free(q);
}

static void test_canonical_query_encodes_continuation_token(void **state)
{
	(void)state;
	const struct uri_param p[] = {
		{"list-type", "2"},
		{"continuation-token",
		 "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=+"},
		{"prefix", "dir one/caf\xc3\xa9"},
		{"start-after", "a~b"},
	};
	char *q = canonical(p, 4);
	assert_string_equal(
		q, "continuation-token="
		   "1ueGcxLPRx1Tr%2FXYExHnhbYLgveDs2J%2Fwm36Hy4vbOwM%3D%2B&"
		   "list-type=2&prefix=dir%20one%2Fcaf%C3%A9&start-after=a~b");
	free(q);
}

static void test_canonical_query_encodes_names_too(void **state)
{
	(void)state;
	const struct uri_param p[] = {
		{"x-id", "PutObject"},
		{"name with space", "v=1&w"},
	};
	char *q = canonical(p, 2);
	assert_string_equal(q, "name%20with%20space=v%3D1%26w&x-id=PutObject");
	free(q);
}

static void
test_canonical_query_appends_and_leaves_params_untouched(void **state)
{
	(void)state;
	struct uri_param p[] = {
		{"b", "2"},
		{"a", "1"},
	};
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "GET\n/\n"), 0);
	assert_int_equal(uri_canonical_query(&b, p, 2), 0);
	assert_string_equal(b.data, "GET\n/\na=1&b=2");
	/* The caller's array is not reordered. */
	assert_string_equal(p[0].name, "b");
	assert_string_equal(p[1].name, "a");
	buf_free(&b);
}

/* --- uri_decode ---------------------------------------------------------- */

static void test_decode_inverts_encode_for_random_bytes(void **state)
{
	(void)state;
	uint64_t x = 0x9e3779b97f4a7c15ull;

	for (int round = 0; round < 2000; round++) {
		char raw[80];
		size_t n = (size_t)(xorshift64(&x) % (sizeof(raw) - 1));
		for (size_t i = 0; i < n; i++)
			raw[i] = (char)(1 + xorshift64(&x) % 255);
		raw[n] = '\0';
		for (int mode = 0; mode < 4; mode++) {
			int keep_slash = mode & 1, plus = mode >> 1;
			char *enc = encode(raw, keep_slash);
			assert_int_equal(uri_decode(enc, plus), 0);
			assert_int_equal(strlen(enc), n);
			assert_memory_equal(enc, raw, n);
			free(enc);
		}
	}
}

static void test_decode_handles_plus_per_flag(void **state)
{
	(void)state;
	check_decode("a+b", 1, "a b");
	check_decode("a+b", 0, "a+b");
	check_decode("a%2Bb+c", 1, "a+b c");
	check_decode("a%2Bb+c", 0, "a+b+c");
	check_decode("+++", 1, "   ");
}

static void test_decode_accepts_upper_and_lower_case_hex(void **state)
{
	(void)state;
	check_decode("a%20b%2Bc", 1, "a b+c");
	check_decode("caf%c3%a9", 0, "caf\xc3\xa9");
	check_decode("caf%C3%A9", 0, "caf\xc3\xa9");
	check_decode("%7e%7E~", 0, "~~~");
	check_decode("%2F%2f/", 0, "///");
	check_decode("%25%32%30", 0, "%20"); /* decodes once, not twice */
	check_decode("", 1, "");
	check_decode("plain-key.txt", 1, "plain-key.txt");
}

static void test_decode_rejects_bad_escapes(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"%",	 "%4",	  "%zz", "%g0", "%0g",	     "abc%",
		"abc%2", "a%%20", "%-1", "% 1", "%\xff\xff", "ok%2Fthen%",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		/* On the heap, sized exactly, so reading past the end would
		 * be caught by ASan. */
		char *s = strdup(bad[i]);
		assert_non_null(s);
		if (uri_decode(s, 1) != -EINVAL)
			fail_msg("'%s' was not rejected", bad[i]);
		free(s);
		s = strdup(bad[i]);
		assert_int_equal(uri_decode(s, 0), -EINVAL);
		free(s);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_encode_keeps_only_unreserved_bytes),
		cmocka_unit_test(
			test_encode_all_bytes_in_one_string_matches_rule),
		cmocka_unit_test(
			test_encode_escapes_space_plus_percent_equals_not_tilde),
		cmocka_unit_test(
			test_encode_path_mode_keeps_slashes_query_mode_escapes),
		cmocka_unit_test(test_encode_utf8_bytes_as_uppercase_hex),
		cmocka_unit_test(
			test_encode_empty_string_gives_empty_terminated_buffer),
		cmocka_unit_test(test_encode_uses_len_and_escapes_nul_bytes),
		cmocka_unit_test(test_encode_appends_to_existing_contents),
		cmocka_unit_test(test_encode_long_key_grows_buffer),
		cmocka_unit_test(
			test_canonical_query_of_no_params_appends_nothing),
		cmocka_unit_test(test_canonical_query_sorts_by_name),
		cmocka_unit_test(
			test_canonical_query_sorts_by_encoded_name_not_raw),
		cmocka_unit_test(
			test_canonical_query_sorts_equal_names_by_encoded_value),
		cmocka_unit_test(
			test_canonical_query_empty_and_null_values_give_name_equals),
		cmocka_unit_test(
			test_canonical_query_encodes_continuation_token),
		cmocka_unit_test(test_canonical_query_encodes_names_too),
		cmocka_unit_test(
			test_canonical_query_appends_and_leaves_params_untouched),
		cmocka_unit_test(test_decode_inverts_encode_for_random_bytes),
		cmocka_unit_test(test_decode_handles_plus_per_flag),
		cmocka_unit_test(test_decode_accepts_upper_and_lower_case_hex),
		cmocka_unit_test(test_decode_rejects_bad_escapes),
	};
	return cmocka_run_group_tests_name("uri", tests, NULL, NULL);
}
