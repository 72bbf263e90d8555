/* test_buf.c: the growable NUL-terminated byte buffer (s3/buf.c). */
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

static void test_append_grows_across_many_appends_and_keeps_bytes(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;
	char expect[10000];

	for (size_t i = 0; i < sizeof(expect); i++) {
		char c = (char)('a' + i % 26);
		expect[i] = c;
		assert_int_equal(buf_append(&b, &c, 1), 0);
		assert_int_equal(b.len, i + 1);
		assert_true(b.cap > b.len);
		assert_int_equal(b.data[b.len], '\0');
	}
	assert_memory_equal(b.data, expect, sizeof(expect));
	buf_free(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
}

static void test_append_keeps_embedded_nul_bytes(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;
	static const char bin[] = {'a', '\0', 'b', '\0', 'c'};

	assert_int_equal(buf_append(&b, bin, sizeof(bin)), 0);
	assert_int_equal(buf_append(&b, bin, sizeof(bin)), 0);
	assert_int_equal(b.len, 2 * sizeof(bin));
	assert_memory_equal(b.data, bin, sizeof(bin));
	assert_memory_equal(b.data + sizeof(bin), bin, sizeof(bin));
	assert_int_equal(b.data[b.len], '\0');
	buf_free(&b);
}

static void test_append_of_zero_bytes_allocates_empty_string(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_append(&b, NULL, 0), 0);
	assert_non_null(b.data);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	buf_free(&b);
}

static void test_large_single_append_is_copied_whole(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;
	size_t n = 1u << 20;
	char *big = malloc(n);
	assert_non_null(big);
	for (size_t i = 0; i < n; i++)
		big[i] = (char)(i * 7 + 1);

	assert_int_equal(buf_puts(&b, "head:"), 0);
	assert_int_equal(buf_append(&b, big, n), 0);
	assert_int_equal(b.len, n + 5);
	assert_memory_equal(b.data, "head:", 5);
	assert_memory_equal(b.data + 5, big, n);
	assert_int_equal(b.data[b.len], '\0');
	free(big);
	buf_free(&b);
}

static void test_puts_putc_printf_concatenate_in_order(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "GET "), 0);
	assert_int_equal(buf_putc(&b, '/'), 0);
	assert_int_equal(buf_printf(&b, "%s?n=%d&x=%05u", "bucket", -3, 42u),
			 0);
	assert_int_equal(buf_puts(&b, ""), 0);
	assert_string_equal(b.data, "GET /bucket?n=-3&x=00042");
	assert_int_equal(b.len, strlen("GET /bucket?n=-3&x=00042"));
	buf_free(&b);
}

static void test_printf_grows_across_many_calls(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;
	char expect[64];
	size_t off = 0;

	for (int i = 0; i < 5000; i++) {
		int n = snprintf(expect, sizeof(expect), "[%d:%x]", i, i * 31);
		assert_int_equal(buf_printf(&b, "[%d:%x]", i, i * 31), 0);
		assert_memory_equal(b.data + off, expect, (size_t)n);
		off += (size_t)n;
		assert_int_equal(b.len, off);
		assert_int_equal(b.data[b.len], '\0');
	}
	assert_int_equal(strlen(b.data), b.len);
	assert_memory_equal(b.data, "[0:0][1:1f][2:3e]", 17);
	buf_free(&b);
}

static void test_printf_output_longer_than_initial_capacity(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;
	char pad[1001];

	memset(pad, 'x', 1000);
	pad[1000] = '\0';
	assert_int_equal(buf_putc(&b, '<'), 0);
	assert_int_equal(buf_printf(&b, "%s|%s", pad, pad), 0);
	assert_int_equal(b.len, 1 + 1000 + 1 + 1000);
	assert_int_equal(b.data[0], '<');
	assert_int_equal(b.data[1001], '|');
	assert_int_equal(b.data[2001], 'x');
	assert_int_equal(b.data[2002], '\0');
	buf_free(&b);
}

static void test_putc_stores_high_and_nul_bytes(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_putc(&b, (char)0xff), 0);
	assert_int_equal(buf_putc(&b, '\0'), 0);
	assert_int_equal(buf_putc(&b, (char)0x80), 0);
	assert_int_equal(b.len, 3);
	assert_int_equal((unsigned char)b.data[0], 0xff);
	assert_int_equal(b.data[1], '\0');
	assert_int_equal((unsigned char)b.data[2], 0x80);
	assert_int_equal(b.data[3], '\0');
	buf_free(&b);
}

static void test_reserve_makes_room_without_changing_contents(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "abc"), 0);
	assert_int_equal(buf_reserve(&b, 500), 0);
	assert_true(b.cap >= 3 + 500 + 1);
	assert_int_equal(b.len, 3);
	assert_string_equal(b.data, "abc");
	char *before = b.data;
	size_t cap = b.cap;
	/* The reserved room is used without another reallocation. */
	for (int i = 0; i < 500; i++)
		assert_int_equal(buf_putc(&b, 'z'), 0);
	assert_ptr_equal(b.data, before);
	assert_int_equal(b.cap, cap);
	assert_int_equal(b.len, 503);
	buf_free(&b);
}

static void
test_impossible_reserve_fails_and_leaves_buffer_unchanged(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "keep"), 0);
	char *data = b.data;
	size_t cap = b.cap;
	assert_int_equal(buf_reserve(&b, (size_t)-1 / 2), -ENOMEM);
	assert_int_equal(buf_append(&b, "x", (size_t)-1 / 2), -ENOMEM);
	assert_ptr_equal(b.data, data);
	assert_int_equal(b.cap, cap);
	assert_int_equal(b.len, 4);
	assert_string_equal(b.data, "keep");
	buf_free(&b);
}

static int buf_setup(void **state)
{
	struct buf *b = calloc(1, sizeof(*b));
	*state = b;
	return b ? 0 : -1;
}

static int buf_teardown(void **state)
{
	buf_free(*state);
	free(*state);
	return 0;
}

/* len + extra + 1 must not wrap around to a small number and pass as
 * "fits": a reserve that cannot be satisfied returns -ENOMEM. The buffer
 * lives in the test state so a failure here does not also leak. */
static void test_reserve_near_size_max_fails_instead_of_wrapping(void **state)
{
	struct buf *b = *state;

	assert_int_equal(buf_puts(b, "keep"), 0);
	size_t cap = b->cap;
	assert_int_equal(buf_reserve(b, (size_t)-1), -ENOMEM);
	assert_int_equal(buf_reserve(b, (size_t)-1 - 4), -ENOMEM);
	assert_int_equal(buf_reserve(b, (size_t)-1 - 10), -ENOMEM);
	assert_int_equal(b->cap, cap);
	assert_int_equal(b->len, 4);
	assert_string_equal(b->data, "keep");
}

static void test_reset_empties_but_keeps_memory(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_puts(&b, "some text that is long enough"), 0);
	char *data = b.data;
	size_t cap = b.cap;
	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_ptr_equal(b.data, data);
	assert_int_equal(b.cap, cap);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_puts(&b, "new"), 0);
	assert_string_equal(b.data, "new");
	assert_int_equal(b.len, 3);
	buf_free(&b);
}

static void test_reset_of_unallocated_buffer_is_harmless(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	buf_reset(&b);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
	buf_free(&b);
	buf_free(&b); /* twice is fine: free(NULL) */
	assert_null(b.data);
}

static void
test_steal_on_empty_buffer_returns_freeable_empty_string(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	char *s = buf_steal(&b);
	assert_non_null(s);
	assert_string_equal(s, "");
	free(s);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
}

static void test_steal_hands_over_contents_and_empties_buffer(void **state)
{
	(void)state;
	struct buf b = BUF_INIT;

	assert_int_equal(buf_printf(&b, "%s-%d", "part", 7), 0);
	char *data = b.data;
	char *s = buf_steal(&b);
	assert_ptr_equal(s, data);
	assert_string_equal(s, "part-7");
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
	/* The buffer is reusable after a steal. */
	assert_int_equal(buf_puts(&b, "again"), 0);
	assert_string_equal(b.data, "again");
	free(s);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_append_grows_across_many_appends_and_keeps_bytes),
		cmocka_unit_test(test_append_keeps_embedded_nul_bytes),
		cmocka_unit_test(
			test_append_of_zero_bytes_allocates_empty_string),
		cmocka_unit_test(test_large_single_append_is_copied_whole),
		cmocka_unit_test(test_puts_putc_printf_concatenate_in_order),
		cmocka_unit_test(test_printf_grows_across_many_calls),
		cmocka_unit_test(
			test_printf_output_longer_than_initial_capacity),
		cmocka_unit_test(test_putc_stores_high_and_nul_bytes),
		cmocka_unit_test(
			test_reserve_makes_room_without_changing_contents),
		cmocka_unit_test(
			test_impossible_reserve_fails_and_leaves_buffer_unchanged),
		cmocka_unit_test_setup_teardown(
			test_reserve_near_size_max_fails_instead_of_wrapping,
			buf_setup, buf_teardown),
		cmocka_unit_test(test_reset_empties_but_keeps_memory),
		cmocka_unit_test(test_reset_of_unallocated_buffer_is_harmless),
		cmocka_unit_test(
			test_steal_on_empty_buffer_returns_freeable_empty_string),
		cmocka_unit_test(
			test_steal_hands_over_contents_and_empties_buffer),
	};
	return cmocka_run_group_tests_name("buf", tests, NULL, NULL);
}
