/* test_ranges.c: the byte-range set (cache/ranges.c), against a bitmap model.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../cache/ranges.h"

static void expect_encoding(const struct ranges *r, const char *want)
{
	struct buf b = BUF_INIT;
	assert_int_equal(ranges_encode(r, &b), 0);
	assert_string_equal(b.data ? b.data : "", want);
	buf_free(&b);
}

static void test_add_merges_overlapping_and_adjacent_ranges(void **state)
{
	(void)state;
	struct ranges r = RANGES_INIT;
	assert_int_equal(ranges_add(&r, 10, 20), 0);
	assert_int_equal(ranges_add(&r, 30, 40), 0);
	expect_encoding(&r, "10-20,30-40");
	assert_int_equal(ranges_add(&r, 20, 30), 0); /* touches both */
	expect_encoding(&r, "10-40");
	assert_int_equal(ranges_add(&r, 0, 5), 0);
	assert_int_equal(ranges_add(&r, 50, 60), 0);
	assert_int_equal(ranges_add(&r, 3, 55), 0); /* swallows three */
	expect_encoding(&r, "0-60");
	assert_int_equal(ranges_add(&r, 7, 7), 0); /* empty: no-op */
	expect_encoding(&r, "0-60");
	assert_int_equal(ranges_bytes(&r), 60);
	ranges_free(&r);
}

static void test_remove_splits_trims_and_drops(void **state)
{
	(void)state;
	struct ranges r = RANGES_INIT;
	assert_int_equal(ranges_add(&r, 0, 100), 0);
	assert_int_equal(ranges_remove(&r, 40, 60), 0); /* split */
	expect_encoding(&r, "0-40,60-100");
	assert_int_equal(ranges_remove(&r, 30, 70), 0); /* trim both */
	expect_encoding(&r, "0-30,70-100");
	assert_int_equal(ranges_remove(&r, 0, 30), 0); /* drop exactly */
	expect_encoding(&r, "70-100");
	assert_int_equal(ranges_remove(&r, 200, 300), 0); /* nothing there */
	assert_int_equal(ranges_remove(&r, 0, UINT64_MAX), 0);
	expect_encoding(&r, "");
	assert_int_equal(ranges_bytes(&r), 0);
	ranges_free(&r);
}

static void test_first_gap_finds_missing_bytes_in_order(void **state)
{
	(void)state;
	struct ranges r = RANGES_INIT;
	uint64_t gs, ge;
	assert_int_equal(ranges_first_gap(&r, 5, 10, &gs, &ge), 1);
	assert_int_equal(gs, 5);
	assert_int_equal(ge, 10);
	ranges_add(&r, 0, 10);
	ranges_add(&r, 20, 30);
	assert_int_equal(ranges_first_gap(&r, 0, 10, &gs, &ge), 0);
	assert_int_equal(ranges_first_gap(&r, 5, 25, &gs, &ge), 1);
	assert_int_equal(gs, 10);
	assert_int_equal(ge, 20);
	assert_int_equal(ranges_first_gap(&r, 25, 40, &gs, &ge), 1);
	assert_int_equal(gs, 30);
	assert_int_equal(ge, 40);
	assert_int_equal(ranges_first_gap(&r, 12, 15, &gs, &ge), 1);
	assert_int_equal(gs, 12);
	assert_int_equal(ge, 15);
	assert_true(ranges_contains(&r, 20, 30));
	assert_false(ranges_contains(&r, 9, 21));
	assert_true(ranges_contains(&r, 50, 50)); /* empty range */
	ranges_free(&r);
}

static void test_encoding_round_trips_and_rejects_bad_text(void **state)
{
	(void)state;
	struct ranges r = RANGES_INIT, back = RANGES_INIT;
	ranges_add(&r, 0, 4096);
	ranges_add(&r, 8192, 12288);
	ranges_add(&r, 1ull << 40, (1ull << 40) + 1);
	struct buf b = BUF_INIT;
	assert_int_equal(ranges_encode(&r, &b), 0);
	assert_int_equal(ranges_decode(b.data, &back), 0);
	assert_int_equal(back.n, r.n);
	assert_memory_equal(back.v, r.v, r.n * sizeof(*r.v));
	buf_free(&b);
	ranges_free(&back);
	assert_int_equal(ranges_decode("", &back), 0);
	assert_int_equal(back.n, 0);

	static const char *const bad[] = {
		"5-5",	     "6-5",   "0-10,10-20", "0-10,5-20",
		"10-20,0-5", "0-10,", ",0-10",	    "0-",
		"-5",	     "a-b",   "0-10 ",	    "0-99999999999999999999",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ranges x = RANGES_INIT;
		if (ranges_decode(bad[i], &x) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		assert_int_equal(x.n, 0);
		assert_null(x.v);
	}
	ranges_free(&r);
}

/* xorshift64*: a fixed-seed source, so a failure can be replayed */
static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ull;
}

#define MODEL_SIZE 512

static void test_random_operations_match_a_bitmap_model(void **state)
{
	(void)state;
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	for (int round = 0; round < 200; round++) {
		struct ranges r = RANGES_INIT;
		unsigned char model[MODEL_SIZE] = {0};
		for (int op = 0; op < 60; op++) {
			uint64_t a = next_rand(&seed) % MODEL_SIZE;
			uint64_t b = a + next_rand(&seed) % 64;
			if (b > MODEL_SIZE)
				b = MODEL_SIZE;
			int add = next_rand(&seed) % 3 != 0;
			if (add)
				assert_int_equal(ranges_add(&r, a, b), 0);
			else
				assert_int_equal(ranges_remove(&r, a, b), 0);
			memset(model + a, add, b - a);

			/* the set equals the model, byte for byte */
			uint64_t bytes = 0;
			for (int i = 0; i < MODEL_SIZE; i++) {
				bytes += model[i];
				if (ranges_contains(&r, i, i + 1) != model[i])
					fail_msg("round %d op %d: byte %d",
						 round, op, i);
			}
			assert_int_equal(ranges_bytes(&r), bytes);
			/* canonical: sorted, disjoint, never touching */
			for (size_t i = 0; i + 1 < r.n; i++)
				assert_true(r.v[i].end < r.v[i + 1].start);
			/* first_gap agrees with the model */
			uint64_t q = next_rand(&seed) % MODEL_SIZE, gs, ge;
			uint64_t want = q;
			while (want < MODEL_SIZE && model[want])
				want++;
			if (ranges_first_gap(&r, q, MODEL_SIZE, &gs, &ge)) {
				assert_int_equal(gs, want);
				assert_true(ge > gs && !model[ge - 1]);
				assert_true(ge == MODEL_SIZE || model[ge]);
			} else {
				assert_int_equal(want, MODEL_SIZE);
			}
		}
		ranges_free(&r);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_add_merges_overlapping_and_adjacent_ranges),
		cmocka_unit_test(test_remove_splits_trims_and_drops),
		cmocka_unit_test(test_first_gap_finds_missing_bytes_in_order),
		cmocka_unit_test(
			test_encoding_round_trips_and_rejects_bad_text),
		cmocka_unit_test(test_random_operations_match_a_bitmap_model),
	};
	return cmocka_run_group_tests_name("ranges", tests, NULL, NULL);
}
