/* test_volume.c: CSI volume ids (csi/volume.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "../../csi/volume.h"

static void test_an_id_splits_into_bucket_and_prefix(void **state)
{
	(void)state;
	struct csi_volume_ref v;
	char why[256];
	assert_int_equal(csi_volume_parse("homes/jhub/claim-alice", &v, why,
					  sizeof(why)),
			 0);
	assert_string_equal(v.bucket, "homes");
	assert_string_equal(v.prefix, "jhub/claim-alice");
	assert_string_equal(v.gen, "");
	assert_int_equal(csi_volume_parse("a.b-c/x y/ü", &v, why, sizeof(why)),
			 0);
	assert_string_equal(v.prefix, "x y/ü");
	assert_int_equal(csi_volume_parse("homes/jhub/claim-alice#3f9a1c0b", &v,
					  why, sizeof(why)),
			 0);
	assert_string_equal(v.prefix, "jhub/claim-alice");
	assert_string_equal(v.gen, "3f9a1c0b");
}

static void test_a_generation_names_one_volume_at_a_prefix(void **state)
{
	(void)state;
	struct csi_volume_ref v, legacy;
	char why[256], id[CSI_VOLUME_ID_MAX + 1];
	assert_int_equal(csi_volume_parse("homes/jhub/claim-alice#3f9a1c0b", &v,
					  why, sizeof(why)),
			 0);
	assert_true(csi_volume_gen_matches(&v, "3f9a1c0b"));
	assert_false(csi_volume_gen_matches(&v, "3f9a1c0c"));
	assert_false(csi_volume_gen_matches(&v, ""));
	assert_false(csi_volume_gen_matches(&v, NULL));
	/* an id without one (a static PV's) names whatever is there */
	assert_int_equal(csi_volume_parse("homes/jhub/claim-alice", &legacy,
					  why, sizeof(why)),
			 0);
	assert_true(csi_volume_gen_matches(&legacy, NULL));
	assert_true(csi_volume_gen_matches(&legacy, "3f9a1c0b"));
	csi_volume_id(&v, id);
	assert_string_equal(id, "homes/jhub/claim-alice#3f9a1c0b");
	csi_volume_id(&legacy, id);
	assert_string_equal(id, "homes/jhub/claim-alice");
	/* fresh ones are hex, and differ */
	char a[CSI_GEN_HEX + 1], b[CSI_GEN_HEX + 1];
	assert_int_equal(csi_volume_gen(a), 0);
	assert_int_equal(csi_volume_gen(b), 0);
	assert_int_equal(strlen(a), CSI_GEN_HEX);
	assert_int_equal(strspn(a, "0123456789abcdef"), CSI_GEN_HEX);
	if (!strcmp(a, b)) /* 1 in 2^32: draw once more */
		assert_int_equal(csi_volume_gen(b), 0);
	assert_string_not_equal(a, b);
}

static void test_bad_ids_are_refused_with_a_reason(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"homes",		     /* no prefix */
		"homes/",		     /* empty prefix */
		"ho/x",			     /* bucket too short */
		"Homes/x",		     /* upper case */
		"-homes/x",		     /* starts with '-' */
		"ho..mes/x",		     /* ".." in a bucket */
		"homes//x",		     /* leading '/' */
		"homes/x/",		     /* trailing '/' */
		"homes/a//b",		     /* empty segment */
		"homes/../etc",		     /* traversal */
		"homes/a/../../b",	     /* traversal, deeper */
		"homes/a/./b",		     /* "." */
		"homes/..",		     /* ".." alone */
		"homes/a\\b",		     /* backslash */
		"homes/a\nb",		     /* control byte */
		"homes/.tierfs/lease",	     /* tierfs' own folder */
		"homes/x/.tierfs",	     /* at any depth */
		"homes/.tierfs-snapshots/s", /* the snapshots' folder */
		"homes/a#b/c#0123abcd",	     /* '#' in the prefix */
		"homes/x#",		     /* an empty generation */
		"homes/x#0123abc",	     /* 7 digits */
		"homes/x#0123abcde",	     /* 9 */
		"homes/x#0123ABCD",	     /* upper case */
		"homes/x#../../a",	     /* not hex at all */
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct csi_volume_ref v;
		char why[256] = "";
		if (csi_volume_parse(bad[i], &v, why, sizeof(why)) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		if (!why[0])
			fail_msg("'%s' was refused without a reason", bad[i]);
	}
}

static void test_ids_tierfs_never_made_are_told_apart(void **state)
{
	(void)state;
	assert_true(csi_volume_never_made("fake-vol-id-123"));
	assert_false(csi_volume_never_made("homes/x")); /* could be ours */
	assert_false(csi_volume_never_made("a..b"));	/* traversal */
	assert_false(csi_volume_never_made("a\\b"));	/* backslash */
	assert_false(csi_volume_never_made("a\nb"));	/* control byte */
	assert_true(csi_volume_gen_ok("0123abcd"));
	assert_false(csi_volume_gen_ok("0123ABCD"));
	assert_false(csi_volume_gen_ok("0123abc"));
}

static void test_an_id_longer_than_128_bytes_is_refused(void **state)
{
	(void)state;
	char id[200];
	memset(id, 'a', sizeof(id) - 1);
	id[sizeof(id) - 1] = '\0';
	memcpy(id, "homes/", 6);
	struct csi_volume_ref v;
	char why[256];
	assert_int_equal(csi_volume_parse(id, &v, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "128"));
	id[CSI_VOLUME_ID_MAX] = '\0'; /* exactly 128: fine */
	assert_int_equal(csi_volume_parse(id, &v, why, sizeof(why)), 0);
}

static void test_make_keeps_a_short_prefix_as_it_is(void **state)
{
	(void)state;
	struct csi_volume_ref v;
	char id[CSI_VOLUME_ID_MAX + 1], why[256];
	assert_int_equal(csi_volume_make("homes", "jhub/claim-bob", &v, why,
					 sizeof(why)),
			 0);
	csi_volume_id(&v, id);
	assert_string_equal(id, "homes/jhub/claim-bob");
	assert_string_equal(v.prefix, "jhub/claim-bob");
	assert_string_equal(v.gen, "");
}

static void
test_make_shortens_a_long_prefix_the_same_way_each_time(void **state)
{
	(void)state;
	char a[300], b[300];
	memset(a, 'n', 63);
	a[63] = '/';
	memset(a + 64, 'c', 200);
	a[264] = '\0';
	memcpy(b, a, sizeof(b));
	b[263] = 'd'; /* differs only at the very end */
	struct csi_volume_ref va, va2, vb;
	char ida[CSI_VOLUME_ID_MAX + 1], ida2[CSI_VOLUME_ID_MAX + 1],
		idb[CSI_VOLUME_ID_MAX + 1], why[256];
	assert_int_equal(csi_volume_make("homes", a, &va, why, sizeof(why)), 0);
	assert_int_equal(csi_volume_make("homes", a, &va2, why, sizeof(why)),
			 0);
	assert_int_equal(csi_volume_make("homes", b, &vb, why, sizeof(why)), 0);
	/* with its generation, the id is exactly as long as ids may be */
	memcpy(va.gen, "0123abcd", CSI_GEN_HEX + 1);
	memcpy(va2.gen, "0123abcd", CSI_GEN_HEX + 1);
	memcpy(vb.gen, "0123abcd", CSI_GEN_HEX + 1);
	assert_int_equal(csi_volume_id(&va, ida), 0);
	assert_int_equal(csi_volume_id(&va2, ida2), 0);
	assert_int_equal(csi_volume_id(&vb, idb), 0);
	assert_int_equal(strlen(ida), CSI_VOLUME_ID_MAX);
	assert_string_equal(ida, ida2);
	assert_string_not_equal(ida, idb);
	assert_memory_equal(va.prefix, a, 40); /* it starts as the name */
	/* and it parses back to what was made */
	struct csi_volume_ref back;
	assert_int_equal(csi_volume_parse(ida, &back, why, sizeof(why)), 0);
	assert_string_equal(back.prefix, va.prefix);
	assert_string_equal(back.gen, "0123abcd");
	/* a ref that could not be an id makes none */
	memcpy(back.prefix, a, CSI_VOLUME_ID_MAX - 1);
	back.prefix[CSI_VOLUME_ID_MAX - 1] = '\0';
	assert_int_equal(csi_volume_id(&back, ida), -ENAMETOOLONG);
	assert_string_equal(ida, "");
}

static void
test_make_never_cuts_a_utf8_character_or_ends_a_segment_empty(void **state)
{
	(void)state;
	char p[400] = "";
	/* "é" is two bytes: wherever the cut falls, it must not split one */
	for (int i = 0; i < 150; i++)
		strcat(p, "é");
	struct csi_volume_ref v;
	char id[CSI_VOLUME_ID_MAX + 1], why[256];
	for (int shift = 0; shift < 2; shift++) {
		char q[402];
		snprintf(q, sizeof(q), "%s%s", shift ? "x" : "", p);
		assert_int_equal(
			csi_volume_make("homes", q, &v, why, sizeof(why)), 0);
		const char *dash = strrchr(v.prefix, '-');
		assert_non_null(dash);
		/* the byte before "-hash" ends a character */
		unsigned char last = (unsigned char)dash[-1];
		assert_true(last == 'x' || last == 0xa9);
	}
	/* a cut that lands just after a '/' drops it */
	char s[300];
	memset(s, 'a', sizeof(s) - 1);
	s[sizeof(s) - 1] = '\0';
	s[128 - 6 - 9 - 1 - 13] = '/';
	assert_int_equal(csi_volume_make("homes", s, &v, why, sizeof(why)), 0);
	assert_null(strstr(v.prefix, "/-"));
	csi_volume_id(&v, id);
	assert_int_equal(csi_volume_parse(id, &v, why, sizeof(why)), 0);
}

static void test_make_refuses_what_parse_refuses(void **state)
{
	(void)state;
	struct csi_volume_ref v;
	char why[256];
	assert_int_equal(csi_volume_make("UPPER", "x", &v, why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(
		csi_volume_make("homes", "a/../b", &v, why, sizeof(why)),
		-EINVAL);
	assert_int_equal(csi_volume_make("homes", "", &v, why, sizeof(why)),
			 -EINVAL);
	assert_int_equal(csi_volume_make("homes", "a#b", &v, why, sizeof(why)),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_an_id_splits_into_bucket_and_prefix),
		cmocka_unit_test(test_bad_ids_are_refused_with_a_reason),
		cmocka_unit_test(
			test_a_generation_names_one_volume_at_a_prefix),
		cmocka_unit_test(test_ids_tierfs_never_made_are_told_apart),
		cmocka_unit_test(test_an_id_longer_than_128_bytes_is_refused),
		cmocka_unit_test(test_make_keeps_a_short_prefix_as_it_is),
		cmocka_unit_test(
			test_make_shortens_a_long_prefix_the_same_way_each_time),
		cmocka_unit_test(
			test_make_never_cuts_a_utf8_character_or_ends_a_segment_empty),
		cmocka_unit_test(test_make_refuses_what_parse_refuses),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
