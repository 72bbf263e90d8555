/* test_layout.c: the s3fs-compatible object layout (cache/layout.c). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../../cache/layout.h"

static const struct layout_defaults defaults = {1000, 100, 0644, 0755};

static void test_time_always_has_nine_fractional_digits(void **state)
{
	(void)state;
	char s[LAYOUT_TIME_MAX];
	layout_format_time((struct timespec){1700000000, 42}, s);
	assert_string_equal(s, "1700000000.000000042");
	layout_format_time((struct timespec){0, 0}, s);
	assert_string_equal(s, "0.000000000");
	layout_format_time((struct timespec){5, 999999999}, s);
	assert_string_equal(s, "5.999999999");
}

static void test_time_parses_whole_and_fractional_seconds(void **state)
{
	(void)state;
	struct timespec t;
	assert_int_equal(layout_parse_time("1700000000.000000042", &t), 0);
	assert_int_equal(t.tv_sec, 1700000000);
	assert_int_equal(t.tv_nsec, 42);
	/* s3fs writes whole seconds */
	assert_int_equal(layout_parse_time("1700000000", &t), 0);
	assert_int_equal(t.tv_sec, 1700000000);
	assert_int_equal(t.tv_nsec, 0);
	/* fewer digits are tenths, hundredths, ... */
	assert_int_equal(layout_parse_time("12.5", &t), 0);
	assert_int_equal(t.tv_nsec, 500000000);
	assert_int_equal(layout_parse_time("-1.5", &t), 0);
	assert_int_equal(t.tv_sec, -2);
	assert_int_equal(t.tv_nsec, 500000000);
}

static void test_time_round_trips(void **state)
{
	(void)state;
	const struct timespec in[] = {
		{0, 0}, {1, 1}, {1700000000, 123456789}, {-2, 500000000}};
	for (size_t i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		char s[LAYOUT_TIME_MAX];
		struct timespec out;
		layout_format_time(in[i], s);
		assert_int_equal(layout_parse_time(s, &out), 0);
		assert_int_equal(out.tv_sec, in[i].tv_sec);
		assert_int_equal(out.tv_nsec, in[i].tv_nsec);
	}
}

static void test_time_rejects_malformed_text(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"abc",
		"1.",
		" 1",
		"1 ",
		"1.0000000001",
		"1e9",
		"+1",
		"1.-5",
		"--1",
		"1.2.3",
		"0x10",
		"1234567890123456789012",
	};
	struct timespec t;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (layout_parse_time(bad[i], &t) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
	assert_int_equal(layout_parse_time(NULL, &t), -EINVAL);
}

static void check_key(const char *prefix, const char *path, int is_dir,
		      const char *want)
{
	char *key = NULL;
	assert_int_equal(layout_key(prefix, path, is_dir, &key), 0);
	assert_string_equal(key, want);
	free(key);
}

static void test_key_joins_prefix_path_and_directory_slash(void **state)
{
	(void)state;
	check_key("vol/alice", "notes/a.txt", 0, "vol/alice/notes/a.txt");
	check_key("vol/alice", "notes", 1, "vol/alice/notes/");
	check_key("vol/alice", "", 1, "vol/alice/");
	check_key("", "a b+c/ü.py", 0, "a b+c/ü.py");
	check_key("", "dir", 1, "dir/");
}

static void test_key_refuses_paths_no_filesystem_could_name(void **state)
{
	(void)state;
	static const char *const bad[] = {"/abs", "a//b", "a/./b", "a/../b",
					  "..",	  ".",	  "a/",	   "a/.."};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *key = (char *)"untouched";
		if (layout_key("vol", bad[i], 0, &key) != -EINVAL)
			fail_msg("path '%s' was accepted", bad[i]);
		assert_null(key);
	}
	char *key;
	assert_int_equal(layout_key("", "", 1, &key), -EINVAL);
}

static void test_path_of_key_strips_prefix_and_marks_directories(void **state)
{
	(void)state;
	char *path;
	int is_dir;
	assert_int_equal(layout_path_of_key("vol/alice", "vol/alice/a/b.txt",
					    &path, &is_dir),
			 0);
	assert_string_equal(path, "a/b.txt");
	assert_false(is_dir);
	free(path);
	assert_int_equal(
		layout_path_of_key("vol/alice", "vol/alice/a/", &path, &is_dir),
		0);
	assert_string_equal(path, "a");
	assert_true(is_dir);
	free(path);
	assert_int_equal(layout_path_of_key("", "top", &path, &is_dir), 0);
	assert_string_equal(path, "top");
	free(path);
}

static void test_path_of_key_hides_private_and_foreign_keys(void **state)
{
	(void)state;
	char *path;
	int is_dir;
	/* outside the prefix, including a sibling sharing its first bytes */
	assert_int_equal(
		layout_path_of_key("vol/alice", "vol/alicex/f", &path, &is_dir),
		-ENOENT);
	assert_int_equal(
		layout_path_of_key("vol/alice", "other/f", &path, &is_dir),
		-ENOENT);
	/* the volume's own marker */
	assert_int_equal(
		layout_path_of_key("vol/alice", "vol/alice/", &path, &is_dir),
		-ENOENT);
	/* the private directory and everything under it */
	assert_int_equal(layout_path_of_key("vol/alice", "vol/alice/.tierfs/",
					    &path, &is_dir),
			 -ENOENT);
	assert_int_equal(layout_path_of_key("vol/alice",
					    "vol/alice/.tierfs/index", &path,
					    &is_dir),
			 -ENOENT);
	/* ...but not a name that merely starts the same way */
	assert_int_equal(layout_path_of_key("vol/alice", "vol/alice/.tierfsx",
					    &path, &is_dir),
			 0);
	free(path);
	/* keys no path can name */
	assert_int_equal(layout_path_of_key("vol", "vol/a//b", &path, &is_dir),
			 -EINVAL);
	assert_int_equal(
		layout_path_of_key("vol", "vol/a/../b", &path, &is_dir),
		-EINVAL);
	assert_null(path);
}

static void test_is_private_matches_whole_component(void **state)
{
	(void)state;
	assert_true(layout_is_private(".tierfs"));
	assert_true(layout_is_private(".tierfs/lease"));
	assert_false(layout_is_private(".tierfsx"));
	assert_false(layout_is_private("a/.tierfs"));
}

static void info_with(struct s3_object_info *info, struct s3_meta *meta,
		      size_t n, const char *type)
{
	memset(info, 0, sizeof(*info));
	info->meta = meta;
	info->nmeta = n;
	info->content_type = (char *)type;
	info->last_modified = 1600000000;
}

static void test_attrs_come_from_headers(void **state)
{
	(void)state;
	struct s3_meta m[] = {{"mode", "33261"},
			      {"uid", "1001"},
			      {"gid", "101"},
			      {"mtime", "1700000000.000000042"},
			      {"ctime", "1700000001.5"}};
	struct s3_object_info info;
	struct layout_attrs a;
	info_with(&info, m, 5, "text/plain");
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_int_equal(a.mode, S_IFREG | 0755);
	assert_int_equal(a.uid, 1001);
	assert_int_equal(a.gid, 101);
	assert_int_equal(a.mtime.tv_sec, 1700000000);
	assert_int_equal(a.mtime.tv_nsec, 42);
	assert_int_equal(a.ctime.tv_sec, 1700000001);
	assert_int_equal(a.ctime.tv_nsec, 500000000);
	assert_int_equal(a.have, LAYOUT_HAVE_MODE | LAYOUT_HAVE_UID |
					 LAYOUT_HAVE_GID | LAYOUT_HAVE_MTIME |
					 LAYOUT_HAVE_CTIME);
}

static void test_objects_without_headers_get_the_defaults(void **state)
{
	(void)state;
	struct s3_object_info info;
	struct layout_attrs a;
	info_with(&info, NULL, 0, "binary/octet-stream");
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_int_equal(a.mode, S_IFREG | 0644);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 100);
	assert_int_equal(a.mtime.tv_sec, 1600000000); /* Last-Modified */
	assert_int_equal(a.ctime.tv_sec, 1600000000);
	assert_int_equal(a.have, 0);

	/* a directory marker, by its key or by its type */
	layout_attrs_from_info(&info, 1, &defaults, &a);
	assert_int_equal(a.mode, S_IFDIR | 0755);
	info_with(&info, NULL, 0, "application/x-directory; charset=UTF-8");
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_int_equal(a.mode, S_IFDIR | 0755);
}

static void test_malformed_headers_fall_back_to_defaults(void **state)
{
	(void)state;
	struct s3_meta m[] = {{"mode", "rwxr-xr-x"},
			      {"uid", "-1"},
			      {"gid", "99999999999"},
			      {"mtime", "yesterday"}};
	struct s3_object_info info;
	struct layout_attrs a;
	info_with(&info, m, 4, NULL);
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_int_equal(a.mode, S_IFREG | 0644);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 100);
	assert_int_equal(a.mtime.tv_sec, 1600000000);
	assert_int_equal(a.have, 0);
}

static void test_mode_without_type_bits_gets_the_keys_type(void **state)
{
	(void)state;
	struct s3_meta m[] = {{"mode", "493"}}; /* 0755, no type */
	struct s3_object_info info;
	struct layout_attrs a;
	info_with(&info, m, 1, NULL);
	layout_attrs_from_info(&info, 1, &defaults, &a);
	assert_int_equal(a.mode, S_IFDIR | 0755);
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_int_equal(a.mode, S_IFREG | 0755);
	/* a symlink's mode is kept as written */
	struct s3_meta l[] = {{"mode", "41471"}}; /* S_IFLNK | 0777 */
	info_with(&info, l, 1, NULL);
	layout_attrs_from_info(&info, 0, &defaults, &a);
	assert_true(S_ISLNK(a.mode));
}

static void test_headers_round_trip_through_attrs(void **state)
{
	(void)state;
	struct layout_attrs in = {.mode = S_IFREG | 0600,
				  .uid = 1000,
				  .gid = 100,
				  .mtime = {1700000000, 123456789},
				  .ctime = {1700000002, 5}};
	struct layout_xattr x[] = {{"user.note", "hi", 2}};
	struct layout_headers h;
	assert_int_equal(layout_headers_build(&in, x, 1, &h), 0);
	assert_int_equal(h.nmeta, 6);
	assert_null(h.content_type);
	struct s3_object_info info;
	info_with(&info, h.meta, h.nmeta, NULL);
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33152");
	assert_string_equal(s3_object_info_meta(&info, "mtime"),
			    "1700000000.123456789");
	struct layout_attrs out;
	layout_attrs_from_info(&info, 0, &defaults, &out);
	assert_int_equal(out.mode, in.mode);
	assert_int_equal(out.uid, in.uid);
	assert_int_equal(out.gid, in.gid);
	assert_memory_equal(&out.mtime, &in.mtime, sizeof(in.mtime));
	assert_memory_equal(&out.ctime, &in.ctime, sizeof(in.ctime));
	struct layout_xattr *back;
	size_t n;
	assert_int_equal(
		layout_xattr_decode(s3_object_info_meta(&info, "xattr"), &back,
				    &n),
		0);
	assert_int_equal(n, 1);
	assert_string_equal(back[0].name, "user.note");
	assert_int_equal(back[0].size, 2);
	assert_memory_equal(back[0].value, "hi", 2);
	layout_xattrs_free(back, n);
	layout_headers_free(&h);

	/* a directory is typed for s3fs and carries no xattr header */
	in.mode = S_IFDIR | 0755;
	assert_int_equal(layout_headers_build(&in, NULL, 0, &h), 0);
	assert_string_equal(h.content_type, LAYOUT_DIR_CONTENT_TYPE);
	assert_int_equal(h.nmeta, 5);
	layout_headers_free(&h);
}

static void test_xattrs_fit_within_the_s3_metadata_limit(void **state)
{
	(void)state;
	static char big[2048];
	memset(big, 0xfb, sizeof(big)); /* base64 "+/": URL-encoded 3x */
	/* what fits is measured on the headers an object would carry */
	struct layout_xattr one[] = {{"user.a", big, 1000}};
	assert_int_equal(layout_xattrs_fit(one, 1), -ENOSPC);
	one[0].size = 400;
	assert_int_equal(layout_xattrs_fit(one, 1), 0);
	struct layout_attrs in = {S_IFREG | 0600, 1000, 100, {1, 0}, {1, 0}, 0};
	struct layout_headers h;
	assert_int_equal(layout_headers_build(&in, one, 1, &h), 0);
	assert_in_range(layout_headers_size(&h), 400 * 4 / 3, LAYOUT_META_MAX);
	layout_headers_free(&h);
	/* the sum counts, not each value alone */
	struct layout_xattr three[] = {{"user.a", big, 250},
				       {"user.b", big, 250},
				       {"user.c", big, 250}};
	assert_int_equal(layout_xattrs_fit(three, 2), 0);
	assert_int_equal(layout_xattrs_fit(three, 3), -ENOSPC);
	/* bytes whose base64 needs no escapes: 1,300 of them fit */
	memset(big, 'x', sizeof(big));
	one[0].size = 1300;
	assert_int_equal(layout_xattrs_fit(one, 1), 0);
	one[0].size = 1400;
	assert_int_equal(layout_xattrs_fit(one, 1), -ENOSPC);
	/* a name s3fs's format cannot carry */
	struct layout_xattr bad[] = {{"user.a:b", "x", 1}};
	assert_int_equal(layout_xattrs_fit(bad, 1), -EINVAL);
	assert_int_equal(layout_xattrs_fit(NULL, 0), 0);
}

static void test_xattr_encoding_is_s3fs_format(void **state)
{
	(void)state;
	/* {"user.a":"aGk="} URL-encoded: user.a=hi in s3fs's format */
	struct layout_xattr x[] = {{"user.a", "hi", 2}};
	char *s;
	assert_int_equal(layout_xattr_encode(x, 1, &s), 0);
	assert_string_equal(s, "%7B%22user.a%22%3A%22aGk%3D%22%7D");
	free(s);
	/* decoding also takes '.' and '=' left unencoded */
	struct layout_xattr *back;
	size_t n;
	assert_int_equal(
		layout_xattr_decode("%7B%22user.a%22%3A%22aGk=%22%2C%22"
				    "user.b%22%3A%22%22%7D",
				    &back, &n),
		0);
	assert_int_equal(n, 2);
	assert_string_equal(back[0].name, "user.a");
	assert_memory_equal(back[0].value, "hi", 2);
	assert_string_equal(back[1].name, "user.b");
	assert_int_equal(back[1].size, 0);
	layout_xattrs_free(back, n);
}

static void test_xattr_binary_values_round_trip(void **state)
{
	(void)state;
	unsigned char v1[256], v2[1] = {0}, v3[5] = {1, 2, 3, 4, 5};
	for (int i = 0; i < 256; i++)
		v1[i] = (unsigned char)i;
	struct layout_xattr x[] = {{"user.bin", v1, sizeof(v1)},
				   {"user.zero", v2, 1},
				   {"security.selinux", v3, 5}};
	char *s;
	struct layout_xattr *back;
	size_t n;
	assert_int_equal(layout_xattr_encode(x, 3, &s), 0);
	assert_int_equal(layout_xattr_decode(s, &back, &n), 0);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_string_equal(back[i].name, x[i].name);
		assert_int_equal(back[i].size, x[i].size);
		assert_memory_equal(back[i].value, x[i].value, x[i].size);
	}
	layout_xattrs_free(back, n);
	free(s);
	/* the empty set */
	assert_int_equal(layout_xattr_decode("%7B%7D", &back, &n), 0);
	assert_int_equal(n, 0);
	layout_xattrs_free(back, n);
}

static void test_xattr_decode_refuses_malformed_values(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"not json",
		"{",
		"{\"a\":\"aGk=\"",
		"{\"a\":\"aGk=\"}junk",
		"{\"a\"}",
		"{\"a\":aGk=}",
		"{\"\":\"aGk=\"}",
		"{\"a\":\"a\"}",	       /* not base64: length */
		"{\"a\":\"aGk=\" \"b\":\"\"}", /* no comma */
		"%7",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct layout_xattr *x = (void *)1;
		size_t n = 7;
		if (layout_xattr_decode(bad[i], &x, &n) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		assert_null(x);
		assert_int_equal(n, 0);
	}
}

static void test_xattr_encode_refuses_names_s3fs_cannot_parse(void **state)
{
	(void)state;
	struct layout_xattr x[] = {{"user.a\"b", "v", 1}};
	char *s = (char *)"untouched";
	assert_int_equal(layout_xattr_encode(x, 1, &s), -EINVAL);
	assert_null(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_time_always_has_nine_fractional_digits),
		cmocka_unit_test(test_time_parses_whole_and_fractional_seconds),
		cmocka_unit_test(test_time_round_trips),
		cmocka_unit_test(test_time_rejects_malformed_text),
		cmocka_unit_test(
			test_key_joins_prefix_path_and_directory_slash),
		cmocka_unit_test(
			test_key_refuses_paths_no_filesystem_could_name),
		cmocka_unit_test(
			test_path_of_key_strips_prefix_and_marks_directories),
		cmocka_unit_test(
			test_path_of_key_hides_private_and_foreign_keys),
		cmocka_unit_test(test_is_private_matches_whole_component),
		cmocka_unit_test(test_attrs_come_from_headers),
		cmocka_unit_test(test_objects_without_headers_get_the_defaults),
		cmocka_unit_test(test_malformed_headers_fall_back_to_defaults),
		cmocka_unit_test(
			test_mode_without_type_bits_gets_the_keys_type),
		cmocka_unit_test(test_headers_round_trip_through_attrs),
		cmocka_unit_test(test_xattrs_fit_within_the_s3_metadata_limit),
		cmocka_unit_test(test_xattr_encoding_is_s3fs_format),
		cmocka_unit_test(test_xattr_binary_values_round_trip),
		cmocka_unit_test(test_xattr_decode_refuses_malformed_values),
		cmocka_unit_test(
			test_xattr_encode_refuses_names_s3fs_cannot_parse),
	};
	return cmocka_run_group_tests_name("layout", tests, NULL, NULL);
}
