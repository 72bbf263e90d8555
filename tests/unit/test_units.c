/* test_units.c: command-line sizes (s3/units.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "../../s3/units.h"

static void test_sizes_with_and_without_suffixes(void **state)
{
	(void)state;
	static const struct {
		const char *text;
		uint64_t want;
	} ok[] = {
		{"0", 0},
		{"4096", 4096},
		{"4k", 4096},
		{"4K", 4096},
		{"512M", 512ull << 20},
		{"512MiB", 512ull << 20},
		{"10G", 10ull << 30},
		{"10Gi", 10ull << 30},
		{"1GB", 1ull << 30},
		{"2T", 2ull << 40},
		{"16777215T", 16777215ull << 40},
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 1;
		if (units_parse_size(ok[i].text, &v) != 0 || v != ok[i].want)
			fail_msg("'%s' gave %llu", ok[i].text,
				 (unsigned long long)v);
	}
}

static void test_non_sizes_are_refused(void **state)
{
	(void)state;
	static const char *const bad[] = {"",	  "G",	"-1",  " 1",
					  "1 ",	  "1X", "1Gx", "1GiBB",
					  "1.5G", "+3", "0x10"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 7;
		if (units_parse_size(bad[i], &v) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		assert_int_equal(v, 7);
	}
	uint64_t v;
	assert_int_equal(units_parse_size("16777216T", &v), -ERANGE);
	assert_int_equal(units_parse_size("99999999999999999999", &v), -ERANGE);
	assert_int_equal(units_parse_size(NULL, &v), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_with_and_without_suffixes),
		cmocka_unit_test(test_non_sizes_are_refused),
	};
	return cmocka_run_group_tests_name("units", tests, NULL, NULL);
}
