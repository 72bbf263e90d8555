/* test_walbuf.c: the VFS that writes each WAL commit at once
 * (cache/walbuf.c), against real SQLite databases in a temporary dir. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "../../cache/walbuf.h"
#include "small_disk.h"

struct fixture {
	char dir[64];
	char path[96];
	struct walbuf *wb;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_walbuf.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/db", f->dir);
	assert_int_equal(walbuf_new(NULL, &f->wb), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	walbuf_free(f->wb);
	char cmd[128];
	small_disk_drop(f->dir);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
	assert_int_equal(system(cmd), 0);
	free(f);
	return 0;
}

static void exec(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	int rc = sqlite3_exec(db, sql, NULL, NULL, &err);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, err ? err : sqlite3_errstr(rc));
}

static int64_t query(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* vfs NULL: SQLite's default, as any other reader of the file. */
static sqlite3 *open_db(const char *path, const char *vfs)
{
	sqlite3 *db = NULL;
	assert_int_equal(
		sqlite3_open_v2(path, &db,
				SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE,
				vfs),
		SQLITE_OK);
	exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
	return db;
}

static sqlite3 *open_writer(struct fixture *f)
{
	sqlite3 *db = open_db(f->path, walbuf_name(f->wb));
	exec(db, "CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, "
		 "v BLOB)");
	return db;
}

/* What a reader that does not go through walbuf finds: rows and the sum
 * of their lengths; and that the file is sound. */
static void expect_rows(const char *path, int64_t rows, int64_t bytes)
{
	sqlite3 *db = open_db(path, NULL);
	assert_int_equal(query(db, "SELECT count(*) FROM t"), rows);
	assert_int_equal(query(db, "SELECT coalesce(sum(length(v)), 0) "
				   "FROM t"),
			 bytes);
	sqlite3_stmt *st;
	assert_int_equal(
		sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_string_equal((const char *)sqlite3_column_text(st, 0), "ok");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

static void test_a_commit_of_several_pages_is_one_write(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db = open_writer(f);
	sqlite3 *reader = open_db(f->path, NULL);
	for (int i = 1; i <= 3; i++) {
		unsigned long w0, c0, w1, c1;
		walbuf_counts(f->wb, &w0, &c0);
		/* three rows of 3000 bytes: pages of their own */
		exec(db, "BEGIN; INSERT INTO t (v) VALUES (zeroblob(3000)), "
			 "(zeroblob(3000)), (zeroblob(3000)); COMMIT;");
		walbuf_counts(f->wb, &w1, &c1);
		assert_true(w1 - w0 >= 6); /* three frames at least */
		assert_int_equal(c1 - c0, 1);
		/* another connection, through the plain VFS, sees it at once */
		assert_int_equal(query(reader, "SELECT count(*) FROM t"),
				 3 * i);
	}
	sqlite3_close(reader);
	sqlite3_close(db);
	expect_rows(f->path, 9, 9 * 3000);
}

static void
test_a_killed_transaction_leaves_only_what_was_committed(void **state)
{
	struct fixture *f = *state;
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sqlite3 *db = open_writer(f);
		exec(db, "INSERT INTO t (v) VALUES (zeroblob(100))");
		/* a small page cache spills the open transaction's pages
		 * into the WAL before its commit */
		exec(db, "PRAGMA cache_size=8; BEGIN;");
		for (int i = 0; i < 400; i++)
			exec(db, "INSERT INTO t (v) VALUES (zeroblob(1000))");
		raise(SIGKILL); /* kill -9, mid-transaction */
		_exit(1);
	}
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	expect_rows(f->path, 1, 100);
}

static void test_a_commit_bigger_than_the_buffer_lands_whole(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db = open_writer(f);
	unsigned long w0, c0, w1, c1;
	walbuf_counts(f->wb, &w0, &c0);
	exec(db, "BEGIN");
	for (int i = 0; i < 100; i++) /* about 400 KB of pages */
		exec(db, "INSERT INTO t (v) VALUES (zeroblob(4000))");
	exec(db, "COMMIT");
	walbuf_counts(f->wb, &w1, &c1);
	assert_true(c1 - c0 > 1);  /* in several pieces of WALBUF_MAX */
	assert_true(c1 - c0 < 50); /* not a write per frame */
	sqlite3_close(db);
	expect_rows(f->path, 100, 100 * 4000);
}

static void test_a_rolled_back_spill_then_a_commit(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db = open_writer(f);
	exec(db, "PRAGMA cache_size=8; BEGIN;");
	for (int i = 0; i < 400; i++)
		exec(db, "INSERT INTO t (v) VALUES (zeroblob(1000))");
	exec(db, "ROLLBACK");
	/* the next commit writes over the frames the rollback dropped */
	exec(db, "INSERT INTO t (v) VALUES (zeroblob(10))");
	assert_int_equal(query(db, "SELECT count(*) FROM t"), 1);
	sqlite3_close(db);
	expect_rows(f->path, 1, 10);
}

static void test_the_wal_starts_over_after_a_checkpoint(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db = open_writer(f);
	for (int i = 0; i < 20; i++)
		exec(db, "INSERT INTO t (v) VALUES (zeroblob(2000))");
	unsigned long w0, c0, w1, c1;
	walbuf_counts(f->wb, &w0, &c0);
	/* copies into the database file and empties the WAL: the database
	 * file is not the VFS's to gather, so no count moves */
	exec(db, "PRAGMA wal_checkpoint(TRUNCATE)");
	walbuf_counts(f->wb, &w1, &c1);
	assert_int_equal(w1, w0);
	/* a new WAL header, then frames from its start */
	for (int i = 0; i < 20; i++)
		exec(db, "INSERT INTO t (v) VALUES (zeroblob(2000))");
	walbuf_counts(f->wb, &w1, &c1);
	/* one write a commit; the new header may go on its own, with the
	 * sync SQLite gives it */
	assert_true(c1 - c0 == 20 || c1 - c0 == 21);
	sqlite3_close(db);
	expect_rows(f->path, 40, 40 * 2000);
}

/* walbuf_on_full()'s hook of a test: frees a ballast file once, when it
 * may (give) */
struct full_hook {
	char ballast[128];
	int give;
	int calls;
};

static int give_ballast(void *ctx)
{
	struct full_hook *h = ctx;
	h->calls++;
	if (!h->give)
		return 0;
	h->give = 0;
	return truncate(h->ballast, 0) == 0;
}

/* On a full disk (a 1 MiB tmpfs), a commit whose WAL has to grow asks
 * the hook for room and lands once it freed some; with none to free, it
 * fails as SQLite's own write would, and what was committed stays. */
static void test_a_full_disk_asks_the_hook_for_room(void **state)
{
	struct fixture *f = *state;
	char dir[96], path[128], fill[128];
	if (small_disk_mount(f->dir, "1m", dir, sizeof(dir)))
		skip(); /* not root */
	struct full_hook h = {.give = 1};
	snprintf(h.ballast, sizeof(h.ballast), "%s/ballast", dir);
	snprintf(path, sizeof(path), "%s/db", dir);
	snprintf(fill, sizeof(fill), "%s/fill", dir);
	int fd = open(h.ballast, O_WRONLY | O_CREAT, 0600);
	assert_true(fd >= 0);
	assert_int_equal(posix_fallocate(fd, 0, 256 << 10), 0);
	close(fd);
	walbuf_on_full(f->wb, give_ballast, &h);
	sqlite3 *db = open_db(path, walbuf_name(f->wb));
	exec(db, "CREATE TABLE t (id INTEGER PRIMARY KEY, v BLOB)");
	small_disk_fill(fill);
	exec(db, "INSERT INTO t (v) VALUES (randomblob(100000))");
	assert_int_equal(h.calls, 1);
	struct stat st;
	assert_int_equal(stat(h.ballast, &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(sqlite3_exec(db,
				      "INSERT INTO t (v) VALUES "
				      "(randomblob(400000))",
				      NULL, NULL, NULL),
			 SQLITE_FULL);
	assert_int_equal(h.calls, 2);
	sqlite3_close(db);
	assert_int_equal(unlink(fill), 0);
	expect_rows(path, 1, 100000);
	assert_int_equal(umount2(dir, MNT_DETACH), 0);
}

static void test_an_unknown_base_is_refused(void **state)
{
	(void)state;
	struct walbuf *wb = (struct walbuf *)&wb;
	assert_int_equal(walbuf_new("no-such-vfs", &wb), -ENOENT);
	assert_null(wb);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(
			test_a_commit_of_several_pages_is_one_write, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_a_killed_transaction_leaves_only_what_was_committed,
			setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_commit_bigger_than_the_buffer_lands_whole, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_a_rolled_back_spill_then_a_commit, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_the_wal_starts_over_after_a_checkpoint, setup,
			teardown),
		cmocka_unit_test_setup_teardown(
			test_a_full_disk_asks_the_hook_for_room, setup,
			teardown),
		cmocka_unit_test(test_an_unknown_base_is_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
