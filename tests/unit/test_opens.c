/* test_opens.c: the record of the kernel's opens (cache/opens.c), as a
 * worker leaves it and the next one finds it. */
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

#include "../../cache/opens.h"

struct found {
	struct opens_rec v[8];
	int slot[8];
	int n;
};

static void collect(void *ctx, int slot, const struct opens_rec *r)
{
	struct found *f = ctx;
	if (f->n < 8) {
		f->v[f->n] = *r;
		f->slot[f->n++] = slot;
	}
}

static const char *temp_path(void)
{
	static char path[64];
	char dir[] = "/tmp/test_opens.XXXXXX";
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/opens", dir);
	return path;
}

static void remove_path(const char *path)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "%s", path);
	*strrchr(dir, '/') = '\0';
	assert_int_equal(unlink(path), 0);
	assert_int_equal(rmdir(dir), 0);
}

static void test_records_outlive_the_worker_that_wrote_them(void **state)
{
	(void)state;
	const char *path = temp_path();
	struct opens *t;
	int a = -1, b = -1;
	assert_int_equal(opens_map(path, &t), 0);
	struct opens_rec ra = {7, 3, 2, 2, 1, 0}, rb = {9, 0, 1, 0, 0, 0};
	assert_int_equal(opens_store(t, &a, &ra), 0);
	assert_int_equal(opens_store(t, &b, &rb), 0);
	assert_true(a >= 0 && b >= 0 && a != b);
	ra.opens = 1; /* one RELEASE: in place */
	ra.writers = 0;
	assert_int_equal(opens_store(t, &a, &ra), 0);
	opens_unmap(t); /* the worker dies; the file stays */

	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(opens_map(path, &t), 0);
	struct found f = {0};
	opens_each(t, collect, &f);
	assert_int_equal(f.n, 2);
	assert_int_equal(f.v[0].ino, 7);
	assert_int_equal(f.slot[0], a);
	assert_int_equal(f.v[0].backing, 3);
	assert_int_equal(f.v[0].opens, 1);
	assert_int_equal(f.v[0].pt, 2);
	assert_int_equal(f.v[0].writers, 0);
	assert_int_equal(f.v[1].ino, 9);
	/* the last RELEASE frees the slot, for the next record to take */
	rb.opens = 0;
	assert_int_equal(opens_store(t, &b, &rb), 0);
	assert_int_equal(b, -1);
	struct opens_rec rc = {11, 0, 1, 0, 0, 0};
	int c = -1;
	assert_int_equal(opens_store(t, &c, &rc), 0);
	assert_int_equal(c, f.slot[1]);
	opens_unmap(t);
	remove_path(path);
}

static void test_a_full_table_refuses_a_new_record(void **state)
{
	(void)state;
	const char *path = temp_path();
	struct opens *t;
	assert_int_equal(opens_map(path, &t), 0);
	for (unsigned i = 0; i < OPENS_SLOTS; i++) {
		struct opens_rec r = {i + 1, 0, 1, 0, 0, 0};
		int s = -1;
		assert_int_equal(opens_store(t, &s, &r), 0);
	}
	struct opens_rec r = {OPENS_SLOTS + 1, 0, 1, 0, 0, 0};
	int s = -1;
	assert_int_equal(opens_store(t, &s, &r), -ENOSPC);
	assert_int_equal(s, -1);
	opens_unmap(t);
	remove_path(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_records_outlive_the_worker_that_wrote_them),
		cmocka_unit_test(test_a_full_table_refuses_a_new_record),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
