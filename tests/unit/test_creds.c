/* test_creds.c: S3 credentials from files and the environment (s3/creds.c). */
#include <dirent.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "../../s3/s3.h"

#define SECRET "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
#define KEY_ID "AKIAIOSFODNN7EXAMPLE"

struct fixture {
	char dir[64];
	char path[128];
};

static int tmpdir_setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_creds.XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int tmpdir_teardown(void **state)
{
	struct fixture *f = *state;
	DIR *d = opendir(f->dir);
	struct dirent *e;
	char p[512];

	while (d && (e = readdir(d))) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Writes text to a new file in the fixture's directory (its name in
 * f->path) and gives it mode. */
static const char *write_file(struct fixture *f, const char *text, mode_t mode)
{
	snprintf(f->path, sizeof(f->path), "%s/credsXXXXXX", f->dir);
	int fd = mkstemp(f->path);
	assert_true(fd >= 0);
	size_t len = strlen(text);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
	assert_int_equal(fchmod(fd, mode), 0);
	assert_int_equal(close(fd), 0);
	return f->path;
}

/* Reads text written with mode 0600 and expects success. */
static void load_ok(struct fixture *f, const char *text,
		    struct s3_credentials *c)
{
	char why[512] = "";
	memset(c, 0, sizeof(*c));
	int rc = s3_credentials_from_file(write_file(f, text, 0600), c, why,
					  sizeof(why));
	if (rc != 0)
		fail_msg("rc %d: %s", rc, why);
}

/* --- s3_credentials_from_file -------------------------------------------- */

static void test_aws_ini_format_is_read(void **state)
{
	struct s3_credentials c;

	load_ok(*state,
		"[default]\naws_access_key_id = AK\n"
		"aws_secret_access_key = SK\n",
		&c);
	assert_string_equal(c.access_key, "AK");
	assert_string_equal(c.secret_key, "SK");
	assert_null(c.session_token);
	s3_credentials_free(&c);
}

static void test_aws_ini_session_token_and_other_settings(void **state)
{
	struct s3_credentials c;

	load_ok(*state,
		"[default]\n"
		"region = eu-west-1\n"
		"aws_access_key_id=" KEY_ID "\n"
		"aws_secret_access_key=" SECRET "\n"
		"aws_session_token = FwoGZXIvYXdzE+/token==\n"
		"output = json\n",
		&c);
	assert_string_equal(c.access_key, KEY_ID);
	assert_string_equal(c.secret_key, SECRET);
	assert_string_equal(c.session_token, "FwoGZXIvYXdzE+/token==");
	s3_credentials_free(&c);
}

static void test_csi_secret_style_is_read(void **state)
{
	struct s3_credentials c;

	/* No newline at the end, as a mounted Kubernetes secret may be. */
	load_ok(*state, "accessKeyID=AK\nsecretAccessKey=SK\nsessionToken=TOK",
		&c);
	assert_string_equal(c.access_key, "AK");
	assert_string_equal(c.secret_key, "SK");
	assert_string_equal(c.session_token, "TOK");
	s3_credentials_free(&c);
}

static void
test_export_prefix_quotes_comments_and_crlf_are_handled(void **state)
{
	struct s3_credentials c;

	load_ok(*state,
		"# tierfs credentials\r\n"
		"; an ini comment\r\n"
		"\r\n"
		"   \t\r\n"
		"export AWS_ACCESS_KEY_ID=\"" KEY_ID "\"\r\n"
		"export AWS_SECRET_ACCESS_KEY='" SECRET "'\r\n"
		"  export AWS_SESSION_TOKEN = \"tok en\"  \r\n",
		&c);
	assert_string_equal(c.access_key, KEY_ID);
	assert_string_equal(c.secret_key, SECRET);
	assert_string_equal(c.session_token, "tok en");
	s3_credentials_free(&c);
}

static void test_value_keeps_equals_and_colon_characters(void **state)
{
	struct s3_credentials c;

	load_ok(*state,
		"aws_access_key_id: AK\n"
		"aws_secret_access_key = abc/def+ghi==:x\n",
		&c);
	assert_string_equal(c.access_key, "AK");
	assert_string_equal(c.secret_key, "abc/def+ghi==:x");
	s3_credentials_free(&c);
}

static void test_later_line_replaces_earlier_value(void **state)
{
	struct s3_credentials c;

	load_ok(*state,
		"aws_access_key_id = OLD\naws_secret_access_key = OLDSECRET\n"
		"accessKeyID = NEW\nsecretAccessKey = NEWSECRET\n",
		&c);
	assert_string_equal(c.access_key, "NEW");
	assert_string_equal(c.secret_key, "NEWSECRET");
	s3_credentials_free(&c);
}

static void test_empty_session_token_becomes_null(void **state)
{
	struct s3_credentials c;

	load_ok(*state, "accessKeyID=AK\nsecretAccessKey=SK\nsessionToken=\n",
		&c);
	assert_null(c.session_token);
	s3_credentials_free(&c);
}

static void test_group_or_world_readable_file_is_refused(void **state)
{
	static const mode_t modes[] = {0644, 0640, 0604, 0660, 0620, 0602};
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct s3_credentials c = {0};
		char why[512] = "";
		char mode[8];
		const char *p = write_file(f,
					   "accessKeyID=" KEY_ID "\n"
					   "secretAccessKey=" SECRET "\n",
					   modes[i]);
		assert_int_equal(
			s3_credentials_from_file(p, &c, why, sizeof(why)),
			-EPERM);
		snprintf(mode, sizeof(mode), "%04o", (unsigned)modes[i]);
		if (!strstr(why, mode))
			fail_msg("mode %s not in '%s'", mode, why);
		assert_non_null(strstr(why, "chmod 600"));
		assert_null(strstr(why, SECRET));
		assert_null(c.access_key);
		assert_null(c.secret_key);
		assert_int_equal(unlink(p), 0);
	}
}

static void test_owner_only_modes_are_accepted(void **state)
{
	static const mode_t modes[] = {0600, 0400, 0700};
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
		struct s3_credentials c = {0};
		char why[512] = "";
		const char *p = write_file(
			f, "accessKeyID=AK\nsecretAccessKey=SK\n", modes[i]);
		assert_int_equal(
			s3_credentials_from_file(p, &c, why, sizeof(why)), 0);
		assert_string_equal(c.secret_key, "SK");
		s3_credentials_free(&c);
		assert_int_equal(unlink(p), 0);
	}
}

static void test_missing_secret_is_einval(void **state)
{
	static const char *const texts[] = {
		"aws_access_key_id = AK\n",
		"aws_access_key_id = AK\naws_secret_access_key =\n",
		"aws_access_key_id = AK\naws_secret_access_key = \"\"\n",
		"aws_secret_access_key = " SECRET "\n", /* no key id */
		"",
		"# only a comment\n[default]\n",
	};
	struct fixture *f = *state;

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		struct s3_credentials c = {0};
		char why[512] = "";
		const char *p = write_file(f, texts[i], 0600);
		int rc = s3_credentials_from_file(p, &c, why, sizeof(why));
		if (rc != -EINVAL)
			fail_msg("text %zu: rc %d, want -EINVAL", i, rc);
		assert_true(why[0] != '\0');
		assert_null(strstr(why, SECRET));
		assert_null(c.access_key);
		assert_null(c.secret_key);
		assert_int_equal(unlink(p), 0);
	}
}

static void test_missing_file_is_enoent(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";
	char p[256];

	snprintf(p, sizeof(p), "%s/does-not-exist", f->dir);
	assert_int_equal(s3_credentials_from_file(p, &c, why, sizeof(why)),
			 -ENOENT);
	assert_non_null(strstr(why, "does-not-exist"));
	assert_null(c.access_key);
}

static void test_symlink_is_not_followed(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";
	char link[256];
	const char *target = write_file(f,
					"accessKeyID=" KEY_ID "\n"
					"secretAccessKey=" SECRET "\n",
					0600);

	snprintf(link, sizeof(link), "%s/link", f->dir);
	assert_int_equal(symlink(target, link), 0);
	int rc = s3_credentials_from_file(link, &c, why, sizeof(why));
	assert_int_equal(rc, -ELOOP);
	assert_true(why[0] != '\0');
	assert_null(strstr(why, SECRET));
	assert_null(c.access_key);
	assert_null(c.secret_key);
	/* The target itself is fine. */
	assert_int_equal(s3_credentials_from_file(target, &c, why, sizeof(why)),
			 0);
	s3_credentials_free(&c);
}

static void test_directory_is_refused(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";

	assert_int_equal(s3_credentials_from_file(f->dir, &c, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "not a regular file"));
	assert_null(c.access_key);
}

static void test_malformed_line_names_line_number_not_secret(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";

	/* Line 3 is a secret pasted without its name. */
	const char *p =
		write_file(f,
			   "[default]\n"
			   "aws_access_key_id = " KEY_ID "\n" SECRET "\n"
			   "aws_secret_access_key = " SECRET "\n",
			   0600);
	assert_int_equal(s3_credentials_from_file(p, &c, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "line 3"));
	assert_null(strstr(why, SECRET));
	assert_null(strstr(why, "wJalr"));
	assert_null(c.access_key);
	assert_null(c.secret_key);
}

static void test_malformed_line_after_secret_does_not_leak_it(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";

	const char *p = write_file(f,
				   "secretAccessKey=" SECRET "\n"
				   "accessKeyID=" KEY_ID "\n"
				   "\n"
				   "this line has no separator\n",
				   0600);
	assert_int_equal(s3_credentials_from_file(p, &c, why, sizeof(why)),
			 -EINVAL);
	assert_non_null(strstr(why, "line 4"));
	assert_null(strstr(why, SECRET));
	assert_null(strstr(why, "no separator"));
	assert_null(c.secret_key);
}

static void test_small_why_buffer_is_truncated_safely(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[9];

	memset(why, 'X', sizeof(why));
	const char *p =
		write_file(f, "accessKeyID=AK\nsecretAccessKey=SK\n", 0644);
	assert_int_equal(s3_credentials_from_file(p, &c, why, sizeof(why)),
			 -EPERM);
	assert_int_equal(strlen(why), sizeof(why) - 1);
}

/* --- s3_credentials_from_env --------------------------------------------- */

static void clear_env(void)
{
	unsetenv("AWS_ACCESS_KEY_ID");
	unsetenv("AWS_SECRET_ACCESS_KEY");
	unsetenv("AWS_SESSION_TOKEN");
}

static void test_env_without_key_or_secret_is_enoent(void **state)
{
	(void)state;
	struct s3_credentials c = {0};

	clear_env();
	assert_int_equal(s3_credentials_from_env(&c), -ENOENT);
	setenv("AWS_ACCESS_KEY_ID", KEY_ID, 1);
	assert_int_equal(s3_credentials_from_env(&c), -ENOENT);
	setenv("AWS_SECRET_ACCESS_KEY", "", 1);
	assert_int_equal(s3_credentials_from_env(&c), -ENOENT);
	unsetenv("AWS_ACCESS_KEY_ID");
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	assert_int_equal(s3_credentials_from_env(&c), -ENOENT);
	setenv("AWS_ACCESS_KEY_ID", "", 1);
	assert_int_equal(s3_credentials_from_env(&c), -ENOENT);
	assert_null(c.access_key);
	assert_null(c.secret_key);
	clear_env();
}

static void test_env_credentials_are_copied(void **state)
{
	(void)state;
	struct s3_credentials c = {0};

	clear_env();
	setenv("AWS_ACCESS_KEY_ID", KEY_ID, 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	assert_int_equal(s3_credentials_from_env(&c), 0);
	assert_string_equal(c.access_key, KEY_ID);
	assert_string_equal(c.secret_key, SECRET);
	assert_null(c.session_token);
	/* Copies, not pointers into the environment. */
	assert_ptr_not_equal(c.secret_key, getenv("AWS_SECRET_ACCESS_KEY"));
	clear_env();
	assert_string_equal(c.secret_key, SECRET);
	s3_credentials_free(&c);
}

static void test_env_session_token_is_picked_up(void **state)
{
	(void)state;
	struct s3_credentials c = {0};

	clear_env();
	setenv("AWS_ACCESS_KEY_ID", "ASIAEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", SECRET, 1);
	setenv("AWS_SESSION_TOKEN", "IQoJb3JpZ2luX2VjE/+token=", 1);
	assert_int_equal(s3_credentials_from_env(&c), 0);
	assert_string_equal(c.access_key, "ASIAEXAMPLE");
	assert_string_equal(c.session_token, "IQoJb3JpZ2luX2VjE/+token=");
	s3_credentials_free(&c);

	setenv("AWS_SESSION_TOKEN", "", 1);
	assert_int_equal(s3_credentials_from_env(&c), 0);
	assert_null(c.session_token);
	s3_credentials_free(&c);
	clear_env();
}

/* --- s3_credentials_set / s3_credentials_free ---------------------------- */

static void test_free_zeroes_the_struct(void **state)
{
	(void)state;
	struct s3_credentials c;

	memset(&c, 0xa5, sizeof(c));
	assert_int_equal(s3_credentials_set(&c, KEY_ID, SECRET, "TOK"), 0);
	assert_string_equal(c.access_key, KEY_ID);
	assert_string_equal(c.secret_key, SECRET);
	assert_string_equal(c.session_token, "TOK");
	s3_credentials_free(&c);
	assert_null(c.access_key);
	assert_null(c.secret_key);
	assert_null(c.session_token);
	/* Freeing again, or freeing NULL, is harmless. */
	s3_credentials_free(&c);
	s3_credentials_free(NULL);
	assert_null(c.secret_key);
}

static void test_set_copies_and_drops_empty_token(void **state)
{
	(void)state;
	char key[] = "AK", secret[] = "SK";
	struct s3_credentials c = {0};

	assert_int_equal(s3_credentials_set(&c, key, secret, ""), 0);
	assert_ptr_not_equal(c.access_key, key);
	assert_ptr_not_equal(c.secret_key, secret);
	secret[0] = 'X';
	assert_string_equal(c.secret_key, "SK");
	assert_null(c.session_token);
	s3_credentials_free(&c);

	assert_int_equal(s3_credentials_set(&c, NULL, NULL, NULL), 0);
	assert_string_equal(c.access_key, "");
	assert_string_equal(c.secret_key, "");
	assert_null(c.session_token);
	s3_credentials_free(&c);
}

#define FILE_TEST(fn)                                                          \
	cmocka_unit_test_setup_teardown(fn, tmpdir_setup, tmpdir_teardown)

static void test_ini_reads_only_the_selected_profile(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c;
	const char *text = "[default]\naws_access_key_id = DEFKEY\n"
			   "aws_secret_access_key = DEFSECRET\n"
			   "[profile prod]\naws_access_key_id = PRODKEY\n"
			   "aws_secret_access_key = PRODSECRET\n";
	unsetenv("AWS_PROFILE");
	load_ok(f, text, &c);
	assert_string_equal(c.access_key, "DEFKEY");
	assert_string_equal(c.secret_key, "DEFSECRET");
	s3_credentials_free(&c);

	setenv("AWS_PROFILE", "prod", 1);
	load_ok(f, text, &c);
	assert_string_equal(c.access_key, "PRODKEY");
	assert_string_equal(c.secret_key, "PRODSECRET");
	s3_credentials_free(&c);
	unsetenv("AWS_PROFILE");
}

static void test_fifo_is_refused_without_blocking(void **state)
{
	struct fixture *f = *state;
	struct s3_credentials c = {0};
	char why[512] = "";
	snprintf(f->path, sizeof(f->path), "%s/fifo", f->dir);
	assert_int_equal(mkfifo(f->path, 0600), 0);
	/* with no writer, a blocking open would hang this test forever */
	assert_int_equal(
		s3_credentials_from_file(f->path, &c, why, sizeof(why)),
		-EINVAL);
	assert_non_null(strstr(why, "regular file"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_ini_reads_only_the_selected_profile, tmpdir_setup,
			tmpdir_teardown),
		cmocka_unit_test_setup_teardown(
			test_fifo_is_refused_without_blocking, tmpdir_setup,
			tmpdir_teardown),
		FILE_TEST(test_aws_ini_format_is_read),
		FILE_TEST(test_aws_ini_session_token_and_other_settings),
		FILE_TEST(test_csi_secret_style_is_read),
		FILE_TEST(
			test_export_prefix_quotes_comments_and_crlf_are_handled),
		FILE_TEST(test_value_keeps_equals_and_colon_characters),
		FILE_TEST(test_later_line_replaces_earlier_value),
		FILE_TEST(test_empty_session_token_becomes_null),
		FILE_TEST(test_group_or_world_readable_file_is_refused),
		FILE_TEST(test_owner_only_modes_are_accepted),
		FILE_TEST(test_missing_secret_is_einval),
		FILE_TEST(test_missing_file_is_enoent),
		FILE_TEST(test_symlink_is_not_followed),
		FILE_TEST(test_directory_is_refused),
		FILE_TEST(test_malformed_line_names_line_number_not_secret),
		FILE_TEST(test_malformed_line_after_secret_does_not_leak_it),
		FILE_TEST(test_small_why_buffer_is_truncated_safely),
		cmocka_unit_test(test_env_without_key_or_secret_is_enoent),
		cmocka_unit_test(test_env_credentials_are_copied),
		cmocka_unit_test(test_env_session_token_is_picked_up),
		cmocka_unit_test(test_free_zeroes_the_struct),
		cmocka_unit_test(test_set_copies_and_drops_empty_token),
	};
	return cmocka_run_group_tests_name("creds", tests, NULL, NULL);
}
