/* test_meta.c: the metadata store: POSIX namespace semantics, lookup
 * counts, xattrs, dirty tracking, persistence, crash safety and group
 * commit.
 *
 * Each test gets its own temporary directory holding meta.db. Crash tests
 * fork a child that changes the store and dies without closing it; the
 * parent reopens the file and checks what survived. Commit visibility is
 * checked through a second, read-only SQLite connection.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "../../cache/meta.h"
#include "small_disk.h"

#define ROOT META_ROOT_INO
#define SLOW_INTERVAL_MS 600000 /* the timer never fires in a test */

struct fixture {
	char dir[64];
	char path[96];
	struct meta *m;
	struct slow_vfs *slow; /* owned; open_lazy() opens through it */
};

static void slow_vfs_remove(struct fixture *f);

/* ---- helpers ------------------------------------------------------------ */

static struct meta *open_store(struct fixture *f, unsigned interval_ms)
{
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = f->path;
	cfg.commit_interval_ms = interval_ms;
	cfg.root_uid = 1000;
	cfg.root_gid = 100;
	struct meta *m = NULL;
	assert_int_equal(meta_open(&cfg, &m), 0);
	assert_non_null(m);
	return m;
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_meta.XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/meta.db", f->dir);
	f->m = open_store(f, SLOW_INTERVAL_MS);
	*state = f;
	return 0;
}

/* A SQLite file and what SQLite keeps beside it. */
static void remove_db(const char *path)
{
	static const char *const sfx[] = {"", "-wal", "-shm", "-journal",
					  "-ballast"};
	char p[160];
	for (size_t i = 0; i < sizeof(sfx) / sizeof(sfx[0]); i++) {
		snprintf(p, sizeof(p), "%s%s", path, sfx[i]);
		unlink(p);
	}
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (f->m)
		assert_int_equal(meta_check(f->m), 0);
	meta_close(f->m);
	if (f->slow)
		slow_vfs_remove(f);
	remove_db(f->path);
	small_disk_drop(f->dir);
	char small[96];
	snprintf(small, sizeof(small), "%s/small", f->dir);
	rmdir(small);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void reopen(struct fixture *f, unsigned interval_ms)
{
	meta_close(f->m);
	f->m = open_store(f, interval_ms);
}

static struct meta_attr attr_of(uint32_t mode)
{
	struct meta_attr a;
	memset(&a, 0, sizeof(a));
	a.mode = mode;
	a.uid = 1000;
	a.gid = 100;
	return a;
}

static uint64_t mk(struct meta *m, uint64_t parent, const char *name,
		   uint32_t mode)
{
	struct meta_attr a = attr_of(mode), out;
	assert_int_equal(meta_create(m, parent, name, &a, NULL, &out), 0);
	return out.ino;
}

static uint64_t mkfile(struct meta *m, uint64_t parent, const char *name)
{
	return mk(m, parent, name, S_IFREG | 0644);
}

static uint64_t mkdir_(struct meta *m, uint64_t parent, const char *name)
{
	return mk(m, parent, name, S_IFDIR | 0755);
}

static struct meta_attr getattr(struct meta *m, uint64_t ino)
{
	struct meta_attr a;
	assert_int_equal(meta_getattr(m, ino, &a), 0);
	return a;
}

static uint64_t lookup_ino(struct meta *m, uint64_t parent, const char *name)
{
	struct meta_attr a;
	int rc = meta_lookup(m, parent, name, &a);
	return rc == 0 ? a.ino : 0;
}

/* Sets a directory's times into the past so a later update is visible. */
static void age(struct meta *m, uint64_t ino)
{
	struct meta_attr a = attr_of(0);
	a.mtime.tv_sec = 1000;
	a.ctime.tv_sec = 1000;
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_CTIME, &a, NULL),
		0);
}

struct ent {
	char name[META_NAME_MAX + 1];
	uint64_t ino;
	uint64_t off;
};

struct ents {
	struct ent *v;
	size_t n, cap;
	size_t limit; /* stop after this many (0: no limit) */
};

static int collect(void *ctx, const char *name, const struct meta_attr *a,
		   uint64_t next_off)
{
	struct ents *e = ctx;
	if (e->limit && e->n >= e->limit)
		return 1;
	if (e->n == e->cap) {
		e->cap = e->cap ? e->cap * 2 : 16;
		e->v = realloc(e->v, e->cap * sizeof(*e->v));
		assert_non_null(e->v);
	}
	snprintf(e->v[e->n].name, sizeof(e->v[e->n].name), "%s", name);
	e->v[e->n].ino = a->ino;
	e->v[e->n].off = next_off;
	e->n++;
	return 0;
}

static struct ents list_dir(struct meta *m, uint64_t dir)
{
	struct ents e = {0};
	assert_int_equal(meta_readdir(m, dir, 0, collect, &e), 0);
	return e;
}

static int ents_has(const struct ents *e, const char *name)
{
	for (size_t i = 0; i < e->n; i++)
		if (strcmp(e->v[i].name, name) == 0)
			return 1;
	return 0;
}

/* A textual dump of everything reachable from ino: attributes, change
 * counters, etags, symlink targets, xattrs. */
static void dump_ino(struct meta *m, FILE *out, const char *path, uint64_t ino)
{
	struct meta_attr a = getattr(m, ino);
	uint64_t seq = 0;
	char etag[256];
	assert_int_equal(meta_change_seq(m, ino, &seq), 0);
	assert_int_equal(meta_get_etag(m, ino, etag, sizeof(etag)), 0);
	fprintf(out,
		"%s ino=%" PRIu64 " mode=%o uid=%u gid=%u nlink=%u "
		"size=%" PRIu64 " a=%lld.%09ld m=%lld.%09ld c=%lld.%09ld "
		"rdev=%u dirty=%u gen=%" PRIu64 " seq=%" PRIu64 " etag=%s",
		path, a.ino, a.mode, a.uid, a.gid, a.nlink, a.size,
		(long long)a.atime.tv_sec, a.atime.tv_nsec,
		(long long)a.mtime.tv_sec, a.mtime.tv_nsec,
		(long long)a.ctime.tv_sec, a.ctime.tv_nsec, a.rdev, a.dirty,
		a.generation, seq, etag);
	if (S_ISLNK(a.mode)) {
		char *t = NULL;
		assert_int_equal(meta_readlink(m, ino, &t), 0);
		fprintf(out, " -> %s", t);
		free(t);
	}
	char names[1024];
	ssize_t n = meta_listxattr(m, ino, names, sizeof(names));
	assert_true(n >= 0);
	for (char *p = names; p < names + n; p += strlen(p) + 1) {
		unsigned char v[256];
		ssize_t vn = meta_getxattr(m, ino, p, v, sizeof(v));
		assert_true(vn >= 0);
		fprintf(out, " x:%s=", p);
		for (ssize_t i = 0; i < vn; i++)
			fprintf(out, "%02x", v[i]);
	}
	fputc('\n', out);
	if (!S_ISDIR(a.mode))
		return;
	struct ents e = list_dir(m, ino);
	for (size_t i = 0; i < e.n; i++) {
		char child[1024];
		snprintf(child, sizeof(child), "%s/%s", path, e.v[i].name);
		fprintf(out, "  entry off=%" PRIu64 "\n", e.v[i].off);
		dump_ino(m, out, child, e.v[i].ino);
	}
	free(e.v);
}

static char *dump(struct meta *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	assert_non_null(out);
	dump_ino(m, out, "", ROOT);
	uint64_t bytes, inodes;
	meta_usage(m, &bytes, &inodes);
	fprintf(out, "usage %" PRIu64 " %" PRIu64 "\n", bytes, inodes);
	assert_int_equal(fclose(out), 0);
	return buf;
}

/* Runs a one-integer query on a second, read-only connection. */
static int64_t peek(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_busy_timeout(db, 2000), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	return v;
}

/* peek() of one expression over inode ino's committed row. */
static int64_t peek_inode(const char *path, uint64_t ino, const char *expr)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT %s FROM inodes WHERE ino = %" PRIu64,
		 expr, ino);
	return peek(path, sql);
}

static char *peek_text(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	char *v = strdup((const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	return v;
}

static int64_t count_name(const char *path, const char *name)
{
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM dentries WHERE name = '%s'", name);
	return peek(path, sql);
}

/* Runs SQL on a second, read-write connection (to corrupt or block). */
static void exec_rw(const char *path, const char *sql)
{
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_busy_timeout(db, 2000), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

/* A VFS over the store's (META_VFS) whose fsyncs take sync_ms: a loaded
 * disk, on which a checkpoint (two fsyncs) runs long. Every connection of
 * a store opened with meta_config.vfs SLOW_VFS goes through it. */
#define SLOW_VFS "tierfs-test-slow"

struct slow_vfs {
	sqlite3_vfs vfs; /* first: SQLite hands back this pointer */
	sqlite3_vfs *real;
	long sync_ms;
	_Atomic long syncs; /* made through it: the store did use it */
};

struct slow_file {
	sqlite3_file base;
	struct slow_vfs *sv;
	sqlite3_file *real; /* the default VFS's file, right after this */
};

#define REAL(file) (((struct slow_file *)(file))->real)

static int sf_close(sqlite3_file *f)
{
	return REAL(f)->pMethods->xClose(REAL(f));
}

static int sf_read(sqlite3_file *f, void *buf, int n, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xRead(REAL(f), buf, n, off);
}

static int sf_write(sqlite3_file *f, const void *buf, int n, sqlite3_int64 off)
{
	return REAL(f)->pMethods->xWrite(REAL(f), buf, n, off);
}

static int sf_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	return REAL(f)->pMethods->xTruncate(REAL(f), size);
}

static int sf_sync(sqlite3_file *f, int flags)
{
	((struct slow_file *)f)->sv->syncs++;
	sleep_ms(((struct slow_file *)f)->sv->sync_ms);
	return REAL(f)->pMethods->xSync(REAL(f), flags);
}

static int sf_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
	return REAL(f)->pMethods->xFileSize(REAL(f), size);
}

static int sf_lock(sqlite3_file *f, int level)
{
	return REAL(f)->pMethods->xLock(REAL(f), level);
}

static int sf_unlock(sqlite3_file *f, int level)
{
	return REAL(f)->pMethods->xUnlock(REAL(f), level);
}

static int sf_check_reserved(sqlite3_file *f, int *out)
{
	return REAL(f)->pMethods->xCheckReservedLock(REAL(f), out);
}

static int sf_file_control(sqlite3_file *f, int op, void *arg)
{
	return REAL(f)->pMethods->xFileControl(REAL(f), op, arg);
}

static int sf_sector_size(sqlite3_file *f)
{
	return REAL(f)->pMethods->xSectorSize(REAL(f));
}

static int sf_device_chars(sqlite3_file *f)
{
	return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}

static int sf_shm_map(sqlite3_file *f, int region, int size, int extend,
		      void volatile **out)
{
	return REAL(f)->pMethods->xShmMap(REAL(f), region, size, extend, out);
}

static int sf_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	return REAL(f)->pMethods->xShmLock(REAL(f), offset, n, flags);
}

static void sf_shm_barrier(sqlite3_file *f)
{
	REAL(f)->pMethods->xShmBarrier(REAL(f));
}

static int sf_shm_unmap(sqlite3_file *f, int delete_flag)
{
	return REAL(f)->pMethods->xShmUnmap(REAL(f), delete_flag);
}

/* version 2: no xFetch, so SQLite does not memory-map through us */
static const sqlite3_io_methods slow_file_methods = {
	2,
	sf_close,
	sf_read,
	sf_write,
	sf_truncate,
	sf_sync,
	sf_file_size,
	sf_lock,
	sf_unlock,
	sf_check_reserved,
	sf_file_control,
	sf_sector_size,
	sf_device_chars,
	sf_shm_map,
	sf_shm_lock,
	sf_shm_barrier,
	sf_shm_unmap,
};

static int sv_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f,
		   int flags, int *out_flags)
{
	struct slow_vfs *sv = (struct slow_vfs *)vfs;
	struct slow_file *sf = (struct slow_file *)f;
	sf->sv = sv;
	sf->real = (sqlite3_file *)(sf + 1);
	int rc = sv->real->xOpen(sv->real, name, sf->real, flags, out_flags);
	f->pMethods = sf->real->pMethods ? &slow_file_methods : NULL;
	return rc;
}

static void slow_vfs_install(struct fixture *f, long sync_ms)
{
	struct slow_vfs *sv = calloc(1, sizeof(*sv));
	assert_non_null(sv);
	sv->real = sqlite3_vfs_find(META_VFS);
	assert_non_null(sv->real);
	sv->vfs = *sv->real;
	sv->vfs.iVersion = 1; /* no xSetSystemCall: it is the real VFS's */
	sv->vfs.zName = SLOW_VFS;
	sv->vfs.szOsFile = (int)sizeof(struct slow_file) + sv->real->szOsFile;
	sv->vfs.xOpen = sv_open;
	sv->vfs.pNext = NULL;
	sv->sync_ms = sync_ms;
	assert_int_equal(sqlite3_vfs_register(&sv->vfs, 0), SQLITE_OK);
	f->slow = sv;
}

/* After every connection through it is closed. */
static void slow_vfs_remove(struct fixture *f)
{
	struct slow_vfs *sv = f->slow;
	assert_int_equal(sqlite3_vfs_unregister(&sv->vfs), SQLITE_OK);
	free(sv);
	f->slow = NULL;
}

/* ---- open --------------------------------------------------------------- */

static void test_new_store_has_root_directory_from_config(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a = getattr(f->m, ROOT);
	assert_int_equal(a.ino, ROOT);
	assert_int_equal(a.mode, S_IFDIR | 0755);
	assert_int_equal(a.uid, 1000);
	assert_int_equal(a.gid, 100);
	assert_int_equal(a.nlink, 2);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 0);
	assert_int_equal(inodes, 1);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, ROOT, &path), 0);
	assert_string_equal(path, "");
	free(path);
}

static void test_store_file_is_wal_with_versioned_schema(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(meta_commit(f->m), 0);
	char *mode = peek_text(f->path, "PRAGMA journal_mode");
	assert_string_equal(mode, "wal");
	free(mode);
	assert_int_equal(peek(f->path, "SELECT value FROM meta WHERE "
				       "key = 'format_version'"),
			 1);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM sqlite_master "
				       "WHERE name IN ('inodes', 'dentries', "
				       "'xattrs', 'meta', 'outbox')"),
			 5);
}

/* Whether the table of names is keyed by cookie (this build's shape). */
static int64_t dentries_keyed(const char *path)
{
	return peek(path, "SELECT pk FROM pragma_table_info('dentries') "
			  "WHERE name = 'cookie'");
}

/* Closes the store and gives its table of names the shape earlier builds
 * made; extra: more SQL for the same transaction. */
static void to_earlier_shape(struct fixture *f, const char *extra)
{
	char sql[640];
	meta_close(f->m);
	f->m = NULL;
	snprintf(
		sql, sizeof(sql),
		"BEGIN;"
		"CREATE TABLE old(parent INTEGER NOT NULL, name TEXT NOT NULL,"
		" ino INTEGER NOT NULL, cookie INTEGER NOT NULL UNIQUE,"
		" PRIMARY KEY(parent, name));"
		"INSERT INTO old SELECT parent, name, ino, cookie FROM dentries;"
		"DROP TABLE dentries;"
		"ALTER TABLE old RENAME TO dentries;"
		"%s"
		"COMMIT;",
		extra);
	exec_rw(f->path, sql);
	assert_int_equal(dentries_keyed(f->path), 0);
}

/* Earlier builds kept dentries by rowid, with three indexes (one by
 * inode that nothing read): three more pages of WAL per change of a name.
 * Opening such a store rebuilds the table, keyed by cookie, and keeps
 * every entry and its place in its directory. */
static void test_open_rebuilds_a_store_of_the_earlier_shape(void **state)
{
	struct fixture *f = *state;
	const char *indexes = "SELECT count(*) FROM sqlite_master WHERE type = "
			      "'index' AND tbl_name = 'dentries'";
	uint64_t d = mkdir_(f->m, ROOT, "d");
	mkfile(f->m, d, "a");
	mkfile(f->m, d, "b");
	assert_int_equal(meta_rename(f->m, d, "a", d, "c", 0, NULL), 0);
	char *before = dump(f->m);
	assert_int_equal(dentries_keyed(f->path), 1);
	assert_int_equal(peek(f->path, indexes), 1);
	to_earlier_shape(f, "CREATE INDEX dentries_ino ON dentries(ino);");
	assert_int_equal(peek(f->path, indexes), 3);
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(dentries_keyed(f->path), 1);
	assert_int_equal(peek(f->path, indexes), 1);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	free(after);
	/* and it goes on working, through a reopen */
	mkfile(f->m, d, "e");
	reopen(f, SLOW_INTERVAL_MS);
	after = dump(f->m);
	assert_true(strlen(after) > strlen(before));
	assert_true(lookup_ino(f->m, d, "e") > d);
	free(before);
	free(after);
}

/* A rebuild that fails (here the name it builds under is taken; on a
 * node, a full disk) leaves the earlier shape, which works: the store
 * opens, and the next open tries again. */
static void test_a_failed_rebuild_keeps_the_earlier_shape_working(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	mkfile(f->m, d, "a");
	to_earlier_shape(f, "CREATE TABLE dentries_new(x);");
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(dentries_keyed(f->path), 0);
	assert_true(lookup_ino(f->m, d, "a") > d);
	uint64_t b = mkfile(f->m, d, "b");
	assert_int_equal(meta_rename(f->m, d, "a", d, "c", 0, NULL), 0);
	assert_int_equal(meta_unlink(f->m, d, "b", 0, NULL), 0);
	char *before = dump(f->m);
	meta_close(f->m);
	f->m = NULL;
	exec_rw(f->path, "DROP TABLE dentries_new");
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(dentries_keyed(f->path), 1);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	assert_int_equal(lookup_ino(f->m, d, "b"), 0);
	assert_true(lookup_ino(f->m, d, "c") > d &&
		    lookup_ino(f->m, d, "c") < b);
	free(before);
	free(after);
}

static void test_open_rejects_a_foreign_sqlite_file(void **state)
{
	struct fixture *f = *state;
	char path[128];
	snprintf(path, sizeof(path), "%s/other.db", f->dir);
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(
		sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = path;
	struct meta *m = (struct meta *)1;
	assert_int_equal(meta_open(&cfg, &m), -EINVAL);
	assert_null(m);
	unlink(path);
}

static void test_open_rejects_a_file_that_is_not_sqlite(void **state)
{
	struct fixture *f = *state;
	char path[128];
	snprintf(path, sizeof(path), "%s/garbage.db", f->dir);
	FILE *g = fopen(path, "w");
	assert_non_null(g);
	for (int i = 0; i < 512; i++)
		fputs("not a database ", g);
	assert_int_equal(fclose(g), 0);
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = path;
	struct meta *m = NULL;
	assert_true(meta_open(&cfg, &m) < 0);
	assert_null(m);
	unlink(path);
}

static void test_open_rejects_an_unknown_format_version(void **state)
{
	struct fixture *f = *state;
	meta_close(f->m);
	f->m = NULL;
	sqlite3 *db = NULL;
	assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "UPDATE meta SET value = 99 WHERE key = "
				      "'format_version'",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_close(db), SQLITE_OK);
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = f->path;
	struct meta *m = NULL;
	assert_int_equal(meta_open(&cfg, &m), -EINVAL);
	assert_null(m);
}

/* Reads path's store in a new process (exec'd: a forked child would
 * share this one's SQLite state and its locks) with Python's sqlite3 and
 * no busy timeout: 0 when it read, 5 when the store was locked. */
static int read_from_another_process(const char *path)
{
	static const char prog[] =
		"import sqlite3, sys\n"
		"try:\n"
		"    c = sqlite3.connect(sys.argv[1], timeout=0)\n"
		"    c.execute('SELECT count(*) FROM inodes').fetchone()\n"
		"except sqlite3.OperationalError as e:\n"
		"    sys.exit(5 if 'locked' in str(e) else 1)\n";
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		execl("/usr/bin/python3", "python3", "-c", prog, path,
		      (char *)NULL);
		_exit(127);
	}
	int st = 0;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* The store is the worker's alone (META_VFS): another process is refused
 * while it is open, not handed a store two writers share; once it is
 * closed the file reads as any SQLite database. */
static void test_an_open_store_refuses_other_processes(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(read_from_another_process(f->path), 5);
	meta_close(f->m);
	f->m = NULL;
	assert_int_equal(read_from_another_process(f->path), 0);
}

static void test_open_requires_a_path(void **state)
{
	(void)state;
	struct meta_config cfg;
	meta_config_init(&cfg);
	struct meta *m = NULL;
	assert_int_equal(meta_open(&cfg, &m), -EINVAL);
	assert_int_equal(cfg.commit_interval_ms,
			 META_DEFAULT_COMMIT_INTERVAL_MS);
	assert_int_equal(cfg.root_mode, S_IFDIR | 0755);
}

static void reopen_expect(struct fixture *f, int want)
{
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = f->path;
	struct meta *m = NULL;
	assert_int_equal(meta_open(&cfg, &m), want);
	assert_null(m);
}

static void test_open_rejects_nlink_that_disagrees_with_names(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	meta_close(f->m);
	f->m = NULL;
	char sql[128];
	snprintf(sql, sizeof(sql),
		 "UPDATE inodes SET nlink = 2 WHERE ino = %" PRIu64, file);
	exec_rw(f->path, sql);
	reopen_expect(f, -EIO);
}

static void test_open_rejects_a_dentry_naming_a_missing_inode(void **state)
{
	struct fixture *f = *state;
	meta_close(f->m);
	f->m = NULL;
	exec_rw(f->path, "INSERT INTO dentries VALUES(1, 'ghost', 999, 999)");
	reopen_expect(f, -EIO);
}

/* Names are checked where the entries are read (beside the inodes' load);
 * the entries read before a bad one are freed (ASan). */
static void test_open_rejects_a_name_no_entry_may_have(void **state)
{
	struct fixture *f = *state;
	for (int i = 0; i < 50; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		mkfile(f->m, ROOT, name);
	}
	uint64_t last = mkfile(f->m, ROOT, "last");
	meta_close(f->m);
	f->m = NULL;
	static const char *const bad[] = {"a/b", "..", "."};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char sql[160];
		snprintf(sql, sizeof(sql),
			 "UPDATE dentries SET name = '%s' WHERE ino = %" PRIu64,
			 bad[i], last);
		exec_rw(f->path, sql);
		reopen_expect(f, -EIO);
	}
	exec_rw(f->path, "UPDATE dentries SET name = 'last' WHERE name = '.'");
	reopen(f, SLOW_INTERVAL_MS);
	assert_int_equal(lookup_ino(f->m, ROOT, "last"), last);
	assert_int_equal(meta_check(f->m), 0);
}

static void test_open_rejects_a_directory_with_two_names(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	meta_close(f->m);
	f->m = NULL;
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "INSERT INTO dentries VALUES(1, 'd2', %" PRIu64 ", 999);"
		 "UPDATE inodes SET nlink = 4 WHERE ino = 1",
		 d);
	exec_rw(f->path, sql);
	reopen_expect(f, -EIO);
}

/* A load takes an entry's inode from the load order when the numbers run
 * together, and from the table when they do not: renames, links and
 * directories filled in turn give entries whose inodes are out of order. */
static void test_reopen_rebuilds_entries_out_of_inode_order(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a"), b = mkdir_(f->m, ROOT, "b");
	char name[32], to[32];
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		mkfile(f->m, i % 2 ? a : b, name);
	}
	struct meta_attr out;
	for (int i = 1; i < 40; i += 6) {
		snprintf(name, sizeof(name), "f%02d", i);
		snprintf(to, sizeof(to), "r%02d", i);
		assert_int_equal(meta_rename(f->m, a, name, b, to, 0, NULL), 0);
		assert_int_equal(meta_link(f->m, lookup_ino(f->m, b, to), ROOT,
					   to, &out),
				 0);
	}
	uint64_t c = mkdir_(f->m, a, "c");
	assert_int_equal(meta_rename(f->m, a, "c", ROOT, "c", 0, NULL), 0);
	mkfile(f->m, c, "late");
	mkfile(f->m, a, "later");
	char *before = dump(f->m);
	reopen(f, SLOW_INTERVAL_MS);
	assert_int_equal(meta_check(f->m), 0);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* a file renumbered 0, consistent otherwise: the kernel has no inode 0 */
static void test_open_rejects_inode_number_zero(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	meta_close(f->m);
	f->m = NULL;
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "UPDATE dentries SET ino = 0 WHERE ino = %" PRIu64 ";"
		 "UPDATE inodes SET ino = 0 WHERE ino = %" PRIu64,
		 file, file);
	exec_rw(f->path, sql);
	reopen_expect(f, -EIO);
}

static void test_failed_write_rolls_back_memory_and_file(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t file = mkfile(f->m, ROOT, "f");
	assert_int_equal(meta_commit(f->m), 0);
	/* a row behind the store's back takes the next cookie (nothing was
	 * removed: the one after the highest), so the next dentry insert
	 * fails inside its savepoint */
	int64_t cookie = peek(f->path, "SELECT max(cookie) + 1 FROM dentries");
	char sql[128];
	snprintf(sql, sizeof(sql),
		 "INSERT INTO dentries VALUES(777, 'blocker', 777, %" PRId64
		 ")",
		 cookie);
	exec_rw(f->path, sql);
	struct meta_attr root0 = getattr(f->m, ROOT), d0 = getattr(f->m, d);
	struct meta_attr f0 = getattr(f->m, file);
	uint64_t seq0 = 0, seq1 = 0;
	assert_int_equal(meta_change_seq(f->m, ROOT, &seq0), 0);
	struct meta_attr a = attr_of(S_IFDIR | 0755), out;
	assert_true(meta_create(f->m, ROOT, "x", &a, NULL, &out) < 0);
	assert_true(meta_link(f->m, file, ROOT, "y", &out) < 0);
	assert_true(meta_rename(f->m, ROOT, "d", ROOT, "e", 0, NULL) < 0);
	/* memory is as before every failed change */
	assert_int_equal(lookup_ino(f->m, ROOT, "x"), 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "y"), 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "d"), d);
	struct meta_attr root1 = getattr(f->m, ROOT), d1 = getattr(f->m, d);
	struct meta_attr f1 = getattr(f->m, file);
	assert_memory_equal(&root0, &root1, sizeof(root0));
	assert_memory_equal(&d0, &d1, sizeof(d0));
	assert_memory_equal(&f0, &f1, sizeof(f0));
	assert_int_equal(meta_change_seq(f->m, ROOT, &seq1), 0);
	assert_int_equal(seq0, seq1);
	assert_int_equal(meta_check(f->m), 0);
	/* the store still works once the obstacle is gone */
	assert_int_equal(meta_commit(f->m), 0);
	exec_rw(f->path, "DELETE FROM dentries WHERE parent = 777");
	assert_int_equal(meta_create(f->m, ROOT, "x", &a, NULL, &out), 0);
	assert_int_equal(getattr(f->m, ROOT).nlink, 4);
	char *before = dump(f->m);
	reopen(f, SLOW_INTERVAL_MS);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* ---- lookup / create ---------------------------------------------------- */

static void test_create_file_sets_attrs_and_dirty_name(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a = attr_of(S_IFREG | 0640), out;
	a.mtime.tv_sec = 12345;
	a.mtime.tv_nsec = 678;
	a.rdev = 0;
	assert_int_equal(meta_create(f->m, ROOT, "f", &a, NULL, &out), 0);
	assert_true(out.ino > ROOT);
	assert_int_equal(out.mode, S_IFREG | 0640);
	assert_int_equal(out.uid, 1000);
	assert_int_equal(out.gid, 100);
	assert_int_equal(out.nlink, 1);
	assert_int_equal(out.size, 0);
	assert_int_equal(out.mtime.tv_sec, 12345);
	assert_int_equal(out.mtime.tv_nsec, 678);
	assert_true(out.ctime.tv_sec > 1000000000); /* zero time: now */
	assert_int_equal(out.dirty, META_DIRTY_NAME);
	assert_int_equal(out.generation, 0);
	struct meta_attr l;
	assert_int_equal(meta_lookup(f->m, ROOT, "f", &l), 0);
	assert_memory_equal(&l, &out, sizeof(l));
	struct meta_attr g = getattr(f->m, out.ino);
	assert_memory_equal(&g, &out, sizeof(g));
}

static void test_create_updates_parent_mtime_and_ctime(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	age(f->m, d);
	mkfile(f->m, d, "f");
	struct meta_attr a = getattr(f->m, d);
	assert_true(a.mtime.tv_sec > 1000);
	assert_true(a.ctime.tv_sec > 1000);
}

static void test_create_errors(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a = attr_of(S_IFREG | 0644), out;
	uint64_t file = mkfile(f->m, ROOT, "f");
	char long_name[META_NAME_MAX + 2];
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[META_NAME_MAX + 1] = '\0';

	assert_int_equal(meta_create(f->m, ROOT, "f", &a, NULL, &out), -EEXIST);
	assert_int_equal(meta_create(f->m, 999, "g", &a, NULL, &out), -ENOENT);
	assert_int_equal(meta_create(f->m, file, "g", &a, NULL, &out),
			 -ENOTDIR);
	assert_int_equal(meta_create(f->m, ROOT, long_name, &a, NULL, &out),
			 -ENAMETOOLONG);
	assert_int_equal(meta_create(f->m, ROOT, "a/b", &a, NULL, &out),
			 -EINVAL);
	assert_int_equal(meta_create(f->m, ROOT, ".", &a, NULL, &out), -EINVAL);
	assert_int_equal(meta_create(f->m, ROOT, "..", &a, NULL, &out),
			 -EINVAL);
	assert_int_equal(meta_create(f->m, ROOT, "", &a, NULL, &out), -EINVAL);
	/* a target only with a symlink, and a symlink only with a target */
	assert_int_equal(meta_create(f->m, ROOT, "g", &a, "t", &out), -EINVAL);
	struct meta_attr l = attr_of(S_IFLNK | 0777);
	assert_int_equal(meta_create(f->m, ROOT, "g", &l, NULL, &out), -EINVAL);
	/* exactly 255 bytes is fine */
	long_name[META_NAME_MAX] = '\0';
	assert_int_equal(meta_create(f->m, ROOT, long_name, &a, NULL, &out), 0);
	assert_int_equal(lookup_ino(f->m, ROOT, long_name), out.ino);
	/* nothing of the failed calls is left behind */
	struct ents e = list_dir(f->m, ROOT);
	assert_int_equal(e.n, 2);
	free(e.v);
}

static void test_create_node_types_keep_mode_and_rdev(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a = attr_of(S_IFCHR | 0600), out;
	a.rdev = 0x0501;
	assert_int_equal(meta_create(f->m, ROOT, "tty", &a, NULL, &out), 0);
	assert_int_equal(out.mode, S_IFCHR | 0600);
	assert_int_equal(out.rdev, 0x0501);
	a = attr_of(S_IFIFO | 0644);
	assert_int_equal(meta_create(f->m, ROOT, "fifo", &a, NULL, &out), 0);
	assert_int_equal(out.mode, S_IFIFO | 0644);
	a = attr_of(0644); /* no type bits: a regular file, as mknod(2) */
	assert_int_equal(meta_create(f->m, ROOT, "plain", &a, NULL, &out), 0);
	assert_int_equal(out.mode, S_IFREG | 0644);
}

static void test_lookup_errors(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a;
	uint64_t file = mkfile(f->m, ROOT, "f");
	char long_name[META_NAME_MAX + 2];
	memset(long_name, 'x', sizeof(long_name) - 1);
	long_name[META_NAME_MAX + 1] = '\0';
	assert_int_equal(meta_lookup(f->m, ROOT, "nope", &a), -ENOENT);
	assert_int_equal(meta_lookup(f->m, 4242, "f", &a), -ENOENT);
	assert_int_equal(meta_lookup(f->m, file, "x", &a), -ENOTDIR);
	assert_int_equal(meta_lookup(f->m, ROOT, long_name, &a), -ENAMETOOLONG);
	assert_int_equal(meta_getattr(f->m, 4242, &a), -ENOENT);
}

static void test_mkdir_counts_subdirectories_in_parent_nlink(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a");
	assert_int_equal(getattr(f->m, ROOT).nlink, 3);
	assert_int_equal(getattr(f->m, a).nlink, 2);
	mkdir_(f->m, a, "b");
	mkdir_(f->m, a, "c");
	mkfile(f->m, a, "file");
	assert_int_equal(getattr(f->m, a).nlink, 4);
	assert_int_equal(getattr(f->m, ROOT).nlink, 3);
}

static void test_inode_numbers_are_never_reused(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	uint64_t b = mkfile(f->m, ROOT, "b");
	assert_true(b > a);
	assert_int_equal(meta_unlink(f->m, ROOT, "b", 0, NULL), 0);
	uint64_t c = mkfile(f->m, ROOT, "c");
	assert_true(c > b);
	assert_int_equal(meta_unlink(f->m, ROOT, "c", 0, NULL), 0);
	reopen(f, SLOW_INTERVAL_MS);
	uint64_t d = mkfile(f->m, ROOT, "d");
	assert_true(d > c);
}

/* The stored counters run ahead of the numbers handed out, so a create
 * does not rewrite them (two pages of its WAL frames) but once a chunk;
 * every number handed out stays below them. */
static void test_counters_are_stored_a_chunk_ahead(void **state)
{
	struct fixture *f = *state;
	const char *ino_sql = "SELECT value FROM meta WHERE key='next_ino'";
	const char *ck_sql = "SELECT value FROM meta WHERE key='next_cookie'";
	char name[32];
	uint64_t last = mkfile(f->m, ROOT, "first");
	assert_int_equal(meta_commit(f->m), 0);
	int64_t ino0 = peek(f->path, ino_sql), ck0 = peek(f->path, ck_sql);
	assert_true(ino0 > (int64_t)last + 100);
	for (int i = 0; i < 100; i++) {
		snprintf(name, sizeof(name), "f%03d", i);
		last = mkfile(f->m, ROOT, name);
		assert_int_equal(meta_commit(f->m), 0);
	}
	assert_int_equal(peek(f->path, ino_sql), ino0);
	assert_int_equal(peek(f->path, ck_sql), ck0);
	assert_true((int64_t)last < ino0);
	/* past the chunk: the next one is stored with the create */
	while ((int64_t)last < ino0) {
		snprintf(name, sizeof(name), "g%" PRIu64, last);
		last = mkfile(f->m, ROOT, name);
	}
	assert_int_equal(meta_commit(f->m), 0);
	assert_true(peek(f->path, ino_sql) > (int64_t)last);
	assert_true(peek(f->path, ck_sql) >
		    peek(f->path, "SELECT max(cookie) FROM dentries"));
	assert_int_equal(meta_check(f->m), 0);
}

static void test_create_in_removed_directory_is_enoent(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	meta_ref(f->m, d, 1);
	assert_int_equal(meta_unlink(f->m, ROOT, "d", 1, NULL), 0);
	struct meta_attr a = attr_of(S_IFREG | 0644), out;
	assert_int_equal(meta_create(f->m, d, "x", &a, NULL, &out), -ENOENT);
	assert_int_equal(getattr(f->m, d).nlink, 0);
	struct ents e = list_dir(f->m, d);
	assert_int_equal(e.n, 0);
	free(e.v);
	assert_int_equal(meta_forget(f->m, d, 1), 1);
	assert_int_equal(meta_getattr(f->m, d, &a), -ENOENT);
}

/* ---- symlinks ----------------------------------------------------------- */

static void test_symlink_stores_target_and_readlink_returns_it(void **state)
{
	struct fixture *f = *state;
	struct meta_attr a = attr_of(S_IFLNK | 0777), out;
	assert_int_equal(
		meta_create(f->m, ROOT, "l", &a, "../some/where", &out), 0);
	assert_int_equal(out.mode, S_IFLNK | 0777);
	assert_int_equal(out.size, strlen("../some/where"));
	char *t = NULL;
	assert_int_equal(meta_readlink(f->m, out.ino, &t), 0);
	assert_string_equal(t, "../some/where");
	free(t);
	uint64_t file = mkfile(f->m, ROOT, "f");
	assert_int_equal(meta_readlink(f->m, file, &t), -EINVAL);
	assert_null(t);
	assert_int_equal(meta_readlink(f->m, 4242, &t), -ENOENT);
	assert_int_equal(meta_create(f->m, ROOT, "empty", &a, "", &out),
			 -ENOENT);
}

/* ---- link --------------------------------------------------------------- */

static void test_link_adds_a_name_and_bumps_nlink_and_ctime(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t file = mkfile(f->m, ROOT, "f");
	age(f->m, d);
	struct meta_attr a = attr_of(0), out;
	a.ctime.tv_sec = 1000;
	assert_int_equal(meta_setattr(f->m, file, META_SET_CTIME, &a, NULL), 0);
	assert_int_equal(meta_link(f->m, file, d, "g", &out), 0);
	assert_int_equal(out.ino, file);
	assert_int_equal(out.nlink, 2);
	assert_true(out.ctime.tv_sec > 1000);
	assert_true(out.dirty & META_DIRTY_NAME);
	assert_int_equal(lookup_ino(f->m, d, "g"), file);
	assert_int_equal(lookup_ino(f->m, ROOT, "f"), file);
	struct meta_attr da = getattr(f->m, d);
	assert_true(da.mtime.tv_sec > 1000 && da.ctime.tv_sec > 1000);
	/* a hard link is not a subdirectory */
	assert_int_equal(da.nlink, 2);
}

static void test_link_errors(void **state)
{
	struct fixture *f = *state;
	struct meta_attr out;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t file = mkfile(f->m, ROOT, "f");
	assert_int_equal(meta_link(f->m, d, ROOT, "d2", &out), -EPERM);
	assert_int_equal(meta_link(f->m, file, ROOT, "f", &out), -EEXIST);
	assert_int_equal(meta_link(f->m, 4242, ROOT, "x", &out), -ENOENT);
	assert_int_equal(meta_link(f->m, file, 4242, "x", &out), -ENOENT);
	assert_int_equal(meta_link(f->m, file, file, "x", &out), -ENOTDIR);
	assert_int_equal(meta_link(f->m, file, ROOT, "a/b", &out), -EINVAL);
	/* an unlinked (still open) file cannot get a name back */
	meta_ref(f->m, file, 1);
	assert_int_equal(meta_unlink(f->m, ROOT, "f", 0, NULL), 0);
	assert_int_equal(meta_link(f->m, file, ROOT, "back", &out), -ENOENT);
	assert_int_equal(meta_forget(f->m, file, 1), 1);
}

/* ---- unlink / rmdir ----------------------------------------------------- */

static void test_unlink_errors(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t file = mkfile(f->m, ROOT, "f");
	mkfile(f->m, d, "inner");
	uint64_t ino = 77;
	assert_int_equal(meta_unlink(f->m, ROOT, "nope", 0, &ino), -ENOENT);
	assert_int_equal(ino, 77);
	assert_int_equal(meta_unlink(f->m, ROOT, "d", 0, NULL), -EISDIR);
	assert_int_equal(meta_unlink(f->m, ROOT, "f", 1, NULL), -ENOTDIR);
	assert_int_equal(meta_unlink(f->m, ROOT, "d", 1, NULL), -ENOTEMPTY);
	assert_int_equal(meta_unlink(f->m, file, "x", 0, NULL), -ENOTDIR);
	assert_int_equal(meta_unlink(f->m, 4242, "x", 0, NULL), -ENOENT);
	assert_int_equal(meta_unlink(f->m, ROOT, ".", 1, NULL), -EINVAL);
	assert_int_equal(lookup_ino(f->m, ROOT, "d"), d);
	assert_int_equal(lookup_ino(f->m, ROOT, "f"), file);
}

static void
test_unlink_drops_nlink_then_deletes_unreferenced_inode(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	struct meta_attr out, a = attr_of(0);
	a.size = 100;
	assert_int_equal(meta_setattr(f->m, file, META_SET_SIZE, &a, NULL), 0);
	assert_int_equal(meta_link(f->m, file, ROOT, "g", &out), 0);
	age(f->m, ROOT);
	uint64_t ino = 0;
	assert_int_equal(meta_unlink(f->m, ROOT, "f", 0, &ino), 0);
	assert_int_equal(ino, file);
	assert_int_equal(getattr(f->m, file).nlink, 1);
	assert_int_equal(lookup_ino(f->m, ROOT, "f"), 0);
	assert_true(getattr(f->m, ROOT).mtime.tv_sec > 1000);
	assert_true(getattr(f->m, ROOT).ctime.tv_sec > 1000);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 100);
	assert_int_equal(inodes, 2);
	/* last name, no kernel reference: gone at once */
	assert_int_equal(meta_unlink(f->m, ROOT, "g", 0, &ino), 0);
	assert_int_equal(meta_getattr(f->m, file, &out), -ENOENT);
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 0);
	assert_int_equal(inodes, 1);
	assert_int_equal(meta_commit(f->m), 0);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM inodes"), 1);
}

static void test_rmdir_removes_empty_dir_and_fixes_parent_nlink(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a");
	uint64_t b = mkdir_(f->m, a, "b");
	assert_int_equal(getattr(f->m, a).nlink, 3);
	uint64_t ino = 0;
	assert_int_equal(meta_unlink(f->m, a, "b", 1, &ino), 0);
	assert_int_equal(ino, b);
	assert_int_equal(getattr(f->m, a).nlink, 2);
	struct meta_attr out;
	assert_int_equal(meta_getattr(f->m, b, &out), -ENOENT);
	assert_int_equal(meta_unlink(f->m, ROOT, "a", 1, NULL), 0);
	assert_int_equal(getattr(f->m, ROOT).nlink, 2);
}

/* ---- lookup counts ------------------------------------------------------ */

static void test_unlinked_open_file_lives_until_last_forget(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	assert_int_equal(meta_setxattr(f->m, file, "user.k", "v", 1, 0), 0);
	meta_ref(f->m, file, 2);
	meta_ref(f->m, file, 1);
	assert_int_equal(meta_unlink(f->m, ROOT, "f", 0, NULL), 0);
	/* still there for fstat and reads: nlink 0, no name */
	struct meta_attr a = getattr(f->m, file);
	assert_int_equal(a.nlink, 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "f"), 0);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, file, &path), -ENOENT);
	char v[4];
	assert_int_equal(meta_getxattr(f->m, file, "user.k", v, sizeof(v)), 1);
	assert_int_equal(meta_commit(f->m), 0);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM inodes"), 2);
	assert_int_equal(meta_forget(f->m, file, 2), 0);
	assert_int_equal(getattr(f->m, file).nlink, 0);
	assert_int_equal(meta_forget(f->m, file, 1), 1);
	assert_int_equal(meta_getattr(f->m, file, &a), -ENOENT);
	assert_int_equal(meta_commit(f->m), 0);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM inodes"), 1);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM xattrs"), 0);
}

static void test_forget_of_linked_inode_and_root_deletes_nothing(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	meta_ref(f->m, file, 1);
	assert_int_equal(meta_forget(f->m, file, 1), 0);
	assert_int_equal(getattr(f->m, file).nlink, 1);
	meta_ref(f->m, ROOT, 5);
	assert_int_equal(meta_forget(f->m, ROOT, 5), 0);
	assert_int_equal(getattr(f->m, ROOT).ino, ROOT);
	assert_int_equal(meta_forget(f->m, 4242, 1), -ENOENT);
	meta_ref(f->m, 4242, 1); /* logged, no effect */
}

static void test_orphans_are_deleted_at_reopen(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t kept = mkfile(f->m, ROOT, "kept");
	meta_ref(f->m, file, 1);
	meta_ref(f->m, d, 1);
	/* the orphan's xattrs go with it; the others are still read */
	assert_int_equal(meta_setxattr(f->m, file, "user.k", "v", 1, 0), 0);
	assert_int_equal(meta_setxattr(f->m, kept, "user.k", "w", 1, 0), 0);
	assert_int_equal(meta_unlink(f->m, ROOT, "f", 0, NULL), 0);
	assert_int_equal(meta_unlink(f->m, ROOT, "d", 1, NULL), 0);
	reopen(f, SLOW_INTERVAL_MS);
	struct meta_attr a;
	assert_int_equal(meta_getattr(f->m, file, &a), -ENOENT);
	assert_int_equal(meta_getattr(f->m, d, &a), -ENOENT);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(inodes, 2);
	assert_int_equal(getattr(f->m, ROOT).nlink, 2);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM inodes"), 2);
	assert_int_equal(peek(f->path, "SELECT count(*) FROM xattrs"), 1);
	char v[4];
	assert_int_equal(meta_getxattr(f->m, kept, "user.k", v, sizeof(v)), 1);
	assert_int_equal(v[0], 'w');
	/* numbers are not given out again */
	assert_true(mkfile(f->m, ROOT, "new") > file);
	assert_true(meta_check(f->m) == 0);
}

/* ---- rename ------------------------------------------------------------- */

static void test_rename_moves_a_file_within_and_across_directories(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t file = mkfile(f->m, ROOT, "f");
	uint64_t rep = 77;
	age(f->m, ROOT);
	age(f->m, d);
	assert_int_equal(meta_rename(f->m, ROOT, "f", ROOT, "g", 0, &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "f"), 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "g"), file);
	assert_true(getattr(f->m, ROOT).mtime.tv_sec > 1000);
	assert_int_equal(meta_rename(f->m, ROOT, "g", d, "h", 0, NULL), 0);
	assert_int_equal(lookup_ino(f->m, d, "h"), file);
	assert_int_equal(lookup_ino(f->m, ROOT, "g"), 0);
	assert_true(getattr(f->m, d).mtime.tv_sec > 1000);
	assert_true(getattr(f->m, file).dirty & META_DIRTY_NAME);
	assert_int_equal(getattr(f->m, file).nlink, 1);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, file, &path), 0);
	assert_string_equal(path, "d/h");
	free(path);
	struct ents e = list_dir(f->m, ROOT);
	assert_int_equal(e.n, 1);
	assert_true(ents_has(&e, "d"));
	assert_false(ents_has(&e, "f") || ents_has(&e, "g"));
	free(e.v);
}

static void test_rename_replaces_a_file_and_reports_it(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	uint64_t b = mkfile(f->m, ROOT, "b");
	uint64_t c = mkfile(f->m, ROOT, "c");
	uint64_t rep = 0;
	/* b unreferenced: deleted by the rename */
	assert_int_equal(meta_rename(f->m, ROOT, "a", ROOT, "b", 0, &rep), 0);
	assert_int_equal(rep, b);
	assert_int_equal(lookup_ino(f->m, ROOT, "b"), a);
	struct meta_attr out;
	assert_int_equal(meta_getattr(f->m, b, &out), -ENOENT);
	/* c referenced: lives on as an orphan */
	meta_ref(f->m, c, 1);
	assert_int_equal(meta_rename(f->m, ROOT, "b", ROOT, "c", 0, &rep), 0);
	assert_int_equal(rep, c);
	assert_int_equal(getattr(f->m, c).nlink, 0);
	assert_int_equal(meta_forget(f->m, c, 1), 1);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(inodes, 2);
}

static void test_rename_replacing_a_hard_link_keeps_the_other_name(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	uint64_t b = mkfile(f->m, ROOT, "b");
	struct meta_attr out;
	assert_int_equal(meta_link(f->m, b, ROOT, "b2", &out), 0);
	uint64_t rep = 0;
	assert_int_equal(meta_rename(f->m, ROOT, "a", ROOT, "b", 0, &rep), 0);
	assert_int_equal(rep, b);
	assert_int_equal(getattr(f->m, b).nlink, 1);
	assert_int_equal(lookup_ino(f->m, ROOT, "b2"), b);
	assert_int_equal(lookup_ino(f->m, ROOT, "b"), a);
}

static void test_rename_directory_over_empty_directory(void **state)
{
	struct fixture *f = *state;
	uint64_t p1 = mkdir_(f->m, ROOT, "p1");
	uint64_t p2 = mkdir_(f->m, ROOT, "p2");
	uint64_t src = mkdir_(f->m, p1, "src");
	uint64_t dst = mkdir_(f->m, p2, "dst");
	mkfile(f->m, src, "keep");
	assert_int_equal(getattr(f->m, p1).nlink, 3);
	assert_int_equal(getattr(f->m, p2).nlink, 3);
	uint64_t rep = 0;
	assert_int_equal(meta_rename(f->m, p1, "src", p2, "dst", 0, &rep), 0);
	assert_int_equal(rep, dst);
	assert_int_equal(lookup_ino(f->m, p2, "dst"), src);
	assert_int_equal(getattr(f->m, p1).nlink, 2);
	assert_int_equal(getattr(f->m, p2).nlink, 3);
	assert_int_equal(getattr(f->m, src).nlink, 2);
	struct meta_attr out;
	assert_int_equal(meta_getattr(f->m, dst, &out), -ENOENT);
	assert_int_equal(meta_lookup(f->m, src, "keep", &out), 0);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, out.ino, &path), 0);
	assert_string_equal(path, "p2/dst/keep");
	free(path);
}

static void test_rename_type_mismatches_and_nonempty_target(void **state)
{
	struct fixture *f = *state;
	mkdir_(f->m, ROOT, "dir");
	uint64_t full = mkdir_(f->m, ROOT, "full");
	mkfile(f->m, full, "x");
	mkdir_(f->m, ROOT, "empty");
	mkfile(f->m, ROOT, "file");
	assert_int_equal(meta_rename(f->m, ROOT, "dir", ROOT, "file", 0, NULL),
			 -ENOTDIR);
	assert_int_equal(meta_rename(f->m, ROOT, "file", ROOT, "dir", 0, NULL),
			 -EISDIR);
	assert_int_equal(meta_rename(f->m, ROOT, "dir", ROOT, "full", 0, NULL),
			 -ENOTEMPTY);
	assert_int_equal(meta_rename(f->m, ROOT, "nope", ROOT, "x", 0, NULL),
			 -ENOENT);
	assert_int_equal(meta_rename(f->m, ROOT, "file", 4242, "x", 0, NULL),
			 -ENOENT);
	assert_int_equal(meta_rename(f->m, ROOT, "file", ROOT, "a/b", 0, NULL),
			 -EINVAL);
	assert_int_equal(
		meta_rename(f->m, ROOT, "file", ROOT, "x", 0x100, NULL),
		-EINVAL);
	assert_int_equal(meta_rename(f->m, ROOT, "file", ROOT, "x",
				     RENAME_NOREPLACE | RENAME_EXCHANGE, NULL),
			 -EINVAL);
	/* nothing moved */
	assert_int_equal(getattr(f->m, ROOT).nlink, 5);
	assert_true(lookup_ino(f->m, ROOT, "dir") != 0);
	assert_true(lookup_ino(f->m, ROOT, "file") != 0);
}

static void test_rename_directory_into_its_own_subtree_is_einval(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a");
	uint64_t b = mkdir_(f->m, a, "b");
	uint64_t c = mkdir_(f->m, b, "c");
	assert_int_equal(meta_rename(f->m, ROOT, "a", a, "x", 0, NULL),
			 -EINVAL);
	assert_int_equal(meta_rename(f->m, ROOT, "a", c, "x", 0, NULL),
			 -EINVAL);
	assert_int_equal(meta_rename(f->m, a, "b", c, "b", 0, NULL), -EINVAL);
	/* onto an ancestor: it is not empty */
	assert_int_equal(meta_rename(f->m, b, "c", ROOT, "a", 0, NULL),
			 -ENOTEMPTY);
	/* moving up is fine */
	assert_int_equal(meta_rename(f->m, b, "c", ROOT, "c", 0, NULL), 0);
	assert_int_equal(getattr(f->m, ROOT).nlink, 4);
	assert_int_equal(getattr(f->m, b).nlink, 2);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, c, &path), 0);
	assert_string_equal(path, "c");
	free(path);
}

static void test_rename_directory_across_parents_fixes_nlink(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a");
	uint64_t b = mkdir_(f->m, ROOT, "b");
	uint64_t sub = mkdir_(f->m, a, "sub");
	uint64_t deep = mkfile(f->m, sub, "deep");
	assert_int_equal(meta_rename(f->m, a, "sub", b, "moved", 0, NULL), 0);
	assert_int_equal(getattr(f->m, a).nlink, 2);
	assert_int_equal(getattr(f->m, b).nlink, 3);
	assert_int_equal(getattr(f->m, sub).nlink, 2);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, deep, &path), 0);
	assert_string_equal(path, "b/moved/deep");
	free(path);
}

static void test_rename_onto_the_same_inode_is_a_noop(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "a");
	struct meta_attr out;
	assert_int_equal(meta_link(f->m, file, ROOT, "b", &out), 0);
	uint64_t seq0 = 0, seq1 = 0, rep = 77;
	assert_int_equal(meta_change_seq(f->m, file, &seq0), 0);
	assert_int_equal(meta_rename(f->m, ROOT, "a", ROOT, "b", 0, &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "a"), file);
	assert_int_equal(lookup_ino(f->m, ROOT, "b"), file);
	assert_int_equal(getattr(f->m, file).nlink, 2);
	assert_int_equal(meta_rename(f->m, ROOT, "a", ROOT, "a", 0, NULL), 0);
	assert_int_equal(meta_change_seq(f->m, file, &seq1), 0);
	assert_int_equal(seq0, seq1);
}

static void test_rename_noreplace_refuses_an_existing_target(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	uint64_t b = mkfile(f->m, ROOT, "b");
	assert_int_equal(
		meta_rename(f->m, ROOT, "a", ROOT, "b", RENAME_NOREPLACE, NULL),
		-EEXIST);
	assert_int_equal(lookup_ino(f->m, ROOT, "a"), a);
	assert_int_equal(lookup_ino(f->m, ROOT, "b"), b);
	assert_int_equal(
		meta_rename(f->m, ROOT, "a", ROOT, "c", RENAME_NOREPLACE, NULL),
		0);
	assert_int_equal(lookup_ino(f->m, ROOT, "c"), a);
}

static void test_rename_exchange_swaps_file_and_directory(void **state)
{
	struct fixture *f = *state;
	uint64_t p1 = mkdir_(f->m, ROOT, "p1");
	uint64_t p2 = mkdir_(f->m, ROOT, "p2");
	uint64_t file = mkfile(f->m, p1, "x");
	uint64_t dir = mkdir_(f->m, p2, "y");
	uint64_t inner = mkfile(f->m, dir, "inner");
	uint64_t rep = 77;
	assert_int_equal(
		meta_rename(f->m, p1, "x", p2, "y", RENAME_EXCHANGE, &rep), 0);
	assert_int_equal(rep, 0);
	assert_int_equal(lookup_ino(f->m, p1, "x"), dir);
	assert_int_equal(lookup_ino(f->m, p2, "y"), file);
	assert_int_equal(getattr(f->m, p1).nlink, 3);
	assert_int_equal(getattr(f->m, p2).nlink, 2);
	char *path = NULL;
	assert_int_equal(meta_path(f->m, inner, &path), 0);
	assert_string_equal(path, "p1/x/inner");
	free(path);
	assert_int_equal(
		meta_rename(f->m, p1, "x", p2, "nope", RENAME_EXCHANGE, NULL),
		-ENOENT);
	/* a directory cannot be exchanged with something inside it */
	assert_int_equal(
		meta_rename(f->m, p1, "x", dir, "inner", RENAME_EXCHANGE, NULL),
		-EINVAL);
}

/* ---- setattr ------------------------------------------------------------ */

static void test_setattr_chmod_chown_truncate_set_ctime_now(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	struct meta_attr a = attr_of(0), out;
	a.ctime.tv_sec = 1000;
	a.mtime.tv_sec = 1000;
	assert_int_equal(meta_setattr(f->m, file,
				      META_SET_CTIME | META_SET_MTIME, &a,
				      &out),
			 0);
	assert_int_equal(out.ctime.tv_sec, 1000);

	a.mode = S_IFDIR | 04755; /* type bits are ignored */
	assert_int_equal(meta_setattr(f->m, file, META_SET_MODE, &a, &out), 0);
	assert_int_equal(out.mode, S_IFREG | 04755);
	assert_true(out.ctime.tv_sec > 1000);
	assert_int_equal(out.mtime.tv_sec, 1000);
	assert_true(out.dirty & META_DIRTY_ATTR);

	assert_int_equal(meta_setattr(f->m, file, META_SET_CTIME, &a, &out), 0);
	a.uid = 7;
	a.gid = 8;
	assert_int_equal(
		meta_setattr(f->m, file, META_SET_UID | META_SET_GID, &a, &out),
		0);
	assert_int_equal(out.uid, 7);
	assert_int_equal(out.gid, 8);
	assert_true(out.ctime.tv_sec > 1000);

	assert_int_equal(meta_setattr(f->m, file,
				      META_SET_CTIME | META_SET_MTIME, &a,
				      &out),
			 0);
	a.size = 4096;
	assert_int_equal(meta_setattr(f->m, file, META_SET_SIZE, &a, &out), 0);
	assert_int_equal(out.size, 4096);
	assert_true(out.ctime.tv_sec > 1000);
	assert_true(out.mtime.tv_sec > 1000);
	assert_true(out.dirty & META_DIRTY_DATA);
	struct meta_attr g = getattr(f->m, file);
	assert_memory_equal(&out, &g, sizeof(out));
}

static void test_setattr_times_take_the_given_values(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	struct meta_attr a = attr_of(0), out;
	a.atime = (struct timespec){111, 222};
	a.mtime = (struct timespec){333, 444};
	a.ctime = (struct timespec){555, 666};
	assert_int_equal(meta_setattr(f->m, file,
				      META_SET_ATIME | META_SET_MTIME, &a,
				      &out),
			 0);
	assert_int_equal(out.atime.tv_sec, 111);
	assert_int_equal(out.atime.tv_nsec, 222);
	assert_int_equal(out.mtime.tv_sec, 333);
	assert_int_equal(out.mtime.tv_nsec, 444);
	assert_true(out.ctime.tv_sec > 1000); /* utimensat moves ctime */
	assert_int_equal(meta_setattr(f->m, file, META_SET_CTIME, &a, &out), 0);
	assert_int_equal(out.ctime.tv_sec, 555);
	assert_int_equal(out.ctime.tv_nsec, 666);
	a.mtime.tv_nsec = 1000000000L;
	assert_int_equal(meta_setattr(f->m, file, META_SET_MTIME, &a, &out),
			 -EINVAL);
}

static void test_setattr_errors(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	struct meta_attr l = attr_of(S_IFLNK | 0777), out;
	assert_int_equal(meta_create(f->m, ROOT, "l", &l, "t", &out), 0);
	struct meta_attr a = attr_of(0);
	a.size = 1;
	assert_int_equal(meta_setattr(f->m, d, META_SET_SIZE, &a, NULL),
			 -EISDIR);
	assert_int_equal(meta_setattr(f->m, out.ino, META_SET_SIZE, &a, NULL),
			 -EINVAL);
	assert_int_equal(meta_setattr(f->m, 4242, META_SET_MODE, &a, NULL),
			 -ENOENT);
	assert_int_equal(meta_setattr(f->m, d, 0x8000, &a, NULL), -EINVAL);
}

static void test_usage_counts_regular_file_bytes_and_inodes(void **state)
{
	struct fixture *f = *state;
	uint64_t x = mkfile(f->m, ROOT, "x");
	uint64_t y = mkfile(f->m, ROOT, "y");
	mkdir_(f->m, ROOT, "d");
	struct meta_attr a = attr_of(0);
	a.size = 1000;
	assert_int_equal(meta_setattr(f->m, x, META_SET_SIZE, &a, NULL), 0);
	a.size = 24;
	assert_int_equal(meta_setattr(f->m, y, META_SET_SIZE, &a, NULL), 0);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 1024);
	assert_int_equal(inodes, 4);
	a.size = 10;
	assert_int_equal(meta_setattr(f->m, x, META_SET_SIZE, &a, NULL), 0);
	assert_int_equal(meta_unlink(f->m, ROOT, "y", 0, NULL), 0);
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 10);
	assert_int_equal(inodes, 3);
}

/* ---- xattrs ------------------------------------------------------------- */

static void test_xattr_set_get_list_remove(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	char buf[64];
	assert_int_equal(meta_setxattr(f->m, file, "user.a", "hello", 5, 0), 0);
	assert_int_equal(
		meta_setxattr(f->m, file, "user.b", "\0\1\2", 3, XATTR_CREATE),
		0);
	assert_int_equal(meta_setxattr(f->m, file, "user.empty", NULL, 0, 0),
			 0);
	assert_int_equal(meta_getxattr(f->m, file, "user.a", NULL, 0), 5);
	assert_int_equal(meta_getxattr(f->m, file, "user.a", buf, sizeof(buf)),
			 5);
	assert_memory_equal(buf, "hello", 5);
	assert_int_equal(meta_getxattr(f->m, file, "user.b", buf, 3), 3);
	assert_memory_equal(buf, "\0\1\2", 3);
	assert_int_equal(meta_getxattr(f->m, file, "user.empty", buf, 8), 0);
	assert_int_equal(meta_getxattr(f->m, file, "user.a", buf, 4), -ERANGE);
	assert_int_equal(meta_getxattr(f->m, file, "user.zz", buf, 8),
			 -ENODATA);

	const char want[] = "user.a\0user.b\0user.empty";
	assert_int_equal(meta_listxattr(f->m, file, NULL, 0), sizeof(want));
	assert_int_equal(meta_listxattr(f->m, file, buf, sizeof(buf)),
			 sizeof(want));
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(meta_listxattr(f->m, file, buf, 5), -ERANGE);

	/* replacing keeps the list order */
	assert_int_equal(
		meta_setxattr(f->m, file, "user.a", "bye", 3, XATTR_REPLACE),
		0);
	assert_int_equal(meta_getxattr(f->m, file, "user.a", buf, sizeof(buf)),
			 3);
	assert_memory_equal(buf, "bye", 3);
	assert_int_equal(meta_listxattr(f->m, file, buf, sizeof(buf)),
			 sizeof(want));
	assert_memory_equal(buf, want, sizeof(want));

	assert_int_equal(meta_removexattr(f->m, file, "user.a"), 0);
	assert_int_equal(meta_getxattr(f->m, file, "user.a", buf, sizeof(buf)),
			 -ENODATA);
	assert_int_equal(meta_removexattr(f->m, file, "user.a"), -ENODATA);
	const char want2[] = "user.b\0user.empty";
	assert_int_equal(meta_listxattr(f->m, file, buf, sizeof(buf)),
			 sizeof(want2));
	assert_memory_equal(buf, want2, sizeof(want2));
}

static void test_xattr_flags_and_errors(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	assert_int_equal(
		meta_setxattr(f->m, file, "user.a", "1", 1, XATTR_REPLACE),
		-ENODATA);
	assert_int_equal(meta_setxattr(f->m, file, "user.a", "1", 1, 0), 0);
	assert_int_equal(
		meta_setxattr(f->m, file, "user.a", "2", 1, XATTR_CREATE),
		-EEXIST);
	char v;
	assert_int_equal(meta_getxattr(f->m, file, "user.a", &v, 1), 1);
	assert_int_equal(v, '1');
	assert_int_equal(meta_setxattr(f->m, 4242, "user.a", "1", 1, 0),
			 -ENOENT);
	assert_int_equal(meta_getxattr(f->m, 4242, "user.a", &v, 1), -ENOENT);
	assert_int_equal(meta_listxattr(f->m, 4242, NULL, 0), -ENOENT);
	assert_int_equal(meta_removexattr(f->m, 4242, "user.a"), -ENOENT);
	assert_int_equal(meta_setxattr(f->m, file, "", "1", 1, 0), -ERANGE);
	assert_int_equal(meta_setxattr(f->m, file, "user.a", "1", 1, 0x40),
			 -EINVAL);
	assert_int_equal(meta_listxattr(f->m, mkfile(f->m, ROOT, "g"), NULL, 0),
			 0);
}

static void test_xattr_change_sets_ctime_and_dirty_attr(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	struct meta_attr a = attr_of(0);
	a.ctime.tv_sec = 1000;
	assert_int_equal(meta_setattr(f->m, file, META_SET_CTIME, &a, NULL), 0);
	uint64_t seq0 = 0, seq1 = 0;
	assert_int_equal(meta_change_seq(f->m, file, &seq0), 0);
	assert_int_equal(meta_clear_dirty(f->m, file, META_DIRTY_ATTR, seq0),
			 0);
	assert_int_equal(meta_setxattr(f->m, file, "user.a", "1", 1, 0), 0);
	struct meta_attr g = getattr(f->m, file);
	assert_true(g.ctime.tv_sec > 1000);
	assert_true(g.dirty & META_DIRTY_ATTR);
	assert_int_equal(meta_change_seq(f->m, file, &seq1), 0);
	assert_true(seq1 > seq0);
}

/* ---- readdir ------------------------------------------------------------ */

static void test_readdir_lists_in_creation_order_and_resumes(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	const char *names[] = {"z", "a", "m", "b"};
	uint64_t inos[4];
	for (int i = 0; i < 4; i++)
		inos[i] = mkfile(f->m, d, names[i]);
	struct ents e = list_dir(f->m, d);
	assert_int_equal(e.n, 4);
	for (int i = 0; i < 4; i++) {
		assert_string_equal(e.v[i].name, names[i]);
		assert_int_equal(e.v[i].ino, inos[i]);
		assert_true(i == 0 || e.v[i].off > e.v[i - 1].off);
	}
	/* resuming at the second entry's position gives the last two */
	struct ents r = {0};
	assert_int_equal(meta_readdir(f->m, d, e.v[1].off, collect, &r), 0);
	assert_int_equal(r.n, 2);
	assert_string_equal(r.v[0].name, "m");
	assert_string_equal(r.v[1].name, "b");
	/* a callback that stops: only what it took */
	struct ents one = {.limit = 1};
	assert_int_equal(meta_readdir(f->m, d, 0, collect, &one), 0);
	assert_int_equal(one.n, 1);
	assert_string_equal(one.v[0].name, "z");
	/* past the end: nothing */
	struct ents none = {0};
	assert_int_equal(meta_readdir(f->m, d, e.v[3].off, collect, &none), 0);
	assert_int_equal(none.n, 0);
	free(e.v);
	free(r.v);
	free(one.v);
}

static void test_readdir_errors(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	struct ents e = {0};
	assert_int_equal(meta_readdir(f->m, 4242, 0, collect, &e), -ENOENT);
	assert_int_equal(meta_readdir(f->m, file, 0, collect, &e), -ENOTDIR);
	assert_int_equal(e.n, 0);
}

static void
test_readdir_positions_survive_deletes_during_iteration(void **state)
{
	struct fixture *f = *state;
	enum { N = 200, BATCH = 7 };
	uint64_t d = mkdir_(f->m, ROOT, "d");
	char name[32];
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "e%03d", i);
		mkfile(f->m, d, name);
	}
	int seen[N] = {0};
	uint64_t off = 0;
	int added = 0;
	for (;;) {
		struct ents b = {.limit = BATCH};
		assert_int_equal(meta_readdir(f->m, d, off, collect, &b), 0);
		if (b.n == 0) {
			free(b.v);
			break;
		}
		for (size_t i = 0; i < b.n; i++) {
			int k = -1;
			if (sscanf(b.v[i].name, "e%d", &k) == 1) {
				assert_true(k >= 0 && k < N);
				seen[k]++;
			}
			/* delete what was returned, the entry the next
			 * position points at included */
			assert_int_equal(
				meta_unlink(f->m, d, b.v[i].name, 0, NULL), 0);
		}
		/* and also an entry not yet returned, and add new ones */
		int ahead = -1;
		sscanf(b.v[b.n - 1].name, "e%d", &ahead);
		if (ahead >= 0 && ahead + 3 < N) {
			snprintf(name, sizeof(name), "e%03d", ahead + 3);
			if (lookup_ino(f->m, d, name)) {
				assert_int_equal(
					meta_unlink(f->m, d, name, 0, NULL), 0);
				seen[ahead + 3] = -100; /* must not appear */
			}
		}
		if (added < 10) { /* new entries come after the position */
			snprintf(name, sizeof(name), "new%d", added++);
			mkfile(f->m, d, name);
		}
		off = b.v[b.n - 1].off;
		free(b.v);
	}
	for (int i = 0; i < N; i++)
		assert_true(seen[i] == 1 || seen[i] == -100);
	struct ents rest = list_dir(f->m, d);
	assert_int_equal(rest.n, 0); /* the new ones were returned, deleted */
	free(rest.v);
}

/* ---- paths, dirty flags, etags ------------------------------------------ */

static void test_path_walks_first_names_to_the_root(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkdir_(f->m, ROOT, "a");
	uint64_t b = mkdir_(f->m, a, "b");
	uint64_t c = mkfile(f->m, b, "c");
	char *p = NULL;
	assert_int_equal(meta_path(f->m, c, &p), 0);
	assert_string_equal(p, "a/b/c");
	free(p);
	assert_int_equal(meta_path(f->m, a, &p), 0);
	assert_string_equal(p, "a");
	free(p);
	/* a hard link: the first name counts until it goes */
	struct meta_attr out;
	assert_int_equal(meta_link(f->m, c, ROOT, "alias", &out), 0);
	assert_int_equal(meta_path(f->m, c, &p), 0);
	assert_string_equal(p, "a/b/c");
	free(p);
	assert_int_equal(meta_unlink(f->m, b, "c", 0, NULL), 0);
	assert_int_equal(meta_path(f->m, c, &p), 0);
	assert_string_equal(p, "alias");
	free(p);
	assert_int_equal(meta_path(f->m, 4242, &p), -ENOENT);
	assert_null(p);
}

static void test_path_nth_names_every_hard_link(void **state)
{
	struct fixture *f = *state;
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t c = mkfile(f->m, d, "c");
	struct meta_attr out;
	char *p = NULL;
	assert_int_equal(meta_link(f->m, c, ROOT, "second", &out), 0);
	assert_int_equal(meta_link(f->m, c, d, "third", &out), 0);
	const char *want[] = {"d/c", "second", "d/third"};
	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(meta_path_nth(f->m, c, i, &p), 0);
		assert_string_equal(p, want[i]);
		free(p);
	}
	assert_int_equal(meta_path_nth(f->m, c, 3, &p), -ENOENT);
	assert_null(p);
	assert_int_equal(meta_path_nth(f->m, ROOT, 0, &p), 0);
	assert_string_equal(p, "");
	free(p);
	assert_int_equal(meta_path_nth(f->m, ROOT, 1, &p), -ENOENT);
}

static void test_outbox_queues_deletions_with_the_unlink(void **state)
{
	struct fixture *f = *state;
	uint64_t ids[8], ino;
	char *keys[8];
	/* files with objects: uploaded, or read from the listing */
	const char *names[] = {"a", "b", "c"};
	for (int i = 0; i < 3; i++)
		assert_int_equal(
			meta_set_etag(f->m, mkfile(f->m, ROOT, names[i]), "e"),
			0);
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "a", 0, "vol/a", &ino),
			 0);
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "b", 0, "vol/b", &ino),
			 0);
	/* a failed unlink queues nothing */
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "zz", 0, "vol/zz", &ino),
			 -ENOENT);
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "c", 0, "vol/c", &ino),
			 0);
	assert_int_equal(meta_commit(f->m), 0);
	meta_close(f->m);
	f->m = open_store(f, 0);
	/* oldest first, and after a reopen */
	assert_int_equal(meta_outbox_peek(f->m, 8, ids, keys), 3);
	assert_string_equal(keys[0], "vol/a");
	assert_string_equal(keys[1], "vol/b");
	assert_string_equal(keys[2], "vol/c");
	for (int i = 0; i < 3; i++)
		free(keys[i]);
	assert_int_equal(meta_outbox_peek(f->m, 1, ids, keys), 1);
	free(keys[0]);
	assert_int_equal(meta_outbox_done(f->m, ids, 1), 0);
	/* a new object at vol/c cancels its pending deletion */
	assert_int_equal(meta_outbox_cancel(f->m, "vol/c"), 0);
	assert_int_equal(meta_outbox_peek(f->m, 8, ids, keys), 1);
	assert_string_equal(keys[0], "vol/b");
	free(keys[0]);
	assert_int_equal(meta_outbox_done(f->m, ids, 1), 0);
	assert_int_equal(meta_outbox_peek(f->m, 8, ids, keys), 0);
	assert_int_equal(meta_check(f->m), 0);
}

/* An upload read ino's name, then cancels the deletion queued for its key:
 * only while the name is still there, in one step with the check. */
static void
test_outbox_cancel_for_a_name_that_went_keeps_the_deletion(void **state)
{
	struct fixture *f = *state;
	uint64_t ids[4], ino;
	char *keys[4];
	struct meta_attr a;
	uint64_t x = mkfile(f->m, ROOT, "a");
	assert_int_equal(meta_link(f->m, x, ROOT, "b", &a), 0);
	/* a deletion queued for a name that is back (a new file there) */
	const char *stale[] = {"vol/a"};
	assert_int_equal(meta_outbox_add(f->m, stale, 1), 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/a", x, 0, "a", "?"),
			 0);
	assert_int_equal(meta_outbox_has(f->m, "vol/a"), 0);
	/* b unlinked after the upload read it: its deletion stands */
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "b", 0, "vol/b", &ino),
			 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/b", x, 1, "b", "?"),
			 -ESTALE);
	assert_int_equal(meta_outbox_has(f->m, "vol/b"), 1);
	/* a renamed: its old key's deletion stands too */
	assert_int_equal(meta_rename(f->m, ROOT, "a", ROOT, "c", 0, NULL), 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/a", x, 0, "a", "?"),
			 -ESTALE);
	assert_int_equal(meta_outbox_peek(f->m, 4, ids, keys), 1);
	assert_string_equal(keys[0], "vol/b");
	free(keys[0]);
	/* and an inode with no name left */
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "c", 0, "vol/c", &ino),
			 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/c", x, 0, "c", "?"),
			 -ESTALE);
	assert_int_equal(meta_outbox_has(f->m, "vol/c"), 1);
	assert_int_equal(meta_check(f->m), 0);
}

/* An inode gets a mark with the first upload's cancel_for, in one step
 * with the check of its name; an unlink queues a deletion only for an
 * inode with a mark or an ETag. */
static void test_unlink_of_a_file_never_uploaded_queues_nothing(void **state)
{
	struct fixture *f = *state;
	uint64_t ino;
	char etag[64];
	uint64_t a = mkfile(f->m, ROOT, "a");
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "a", 0, "vol/a", &ino),
			 0);
	assert_int_equal(ino, a);
	assert_int_equal(meta_outbox_has(f->m, "vol/a"), 0);
	/* an upload that found its name gone marks nothing */
	uint64_t b = mkfile(f->m, ROOT, "b");
	assert_int_equal(meta_rename(f->m, ROOT, "b", ROOT, "c", 0, NULL), 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/b", b, 0, "b", "?"),
			 -ESTALE);
	assert_int_equal(meta_get_etag(f->m, b, etag, sizeof(etag)), 0);
	assert_string_equal(etag, "");
	/* one that starts marks it, and keeps an ETag it has */
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/c", b, 0, "c", "?"),
			 0);
	assert_int_equal(meta_get_etag(f->m, b, etag, sizeof(etag)), 0);
	assert_string_equal(etag, "?");
	assert_int_equal(meta_set_etag(f->m, b, "e1"), 0);
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/c", b, 0, "c", "?"),
			 0);
	assert_int_equal(meta_get_etag(f->m, b, etag, sizeof(etag)), 0);
	assert_string_equal(etag, "e1");
	/* the mark is kept across a reopen, and the unlink queues */
	uint64_t d = mkfile(f->m, ROOT, "d");
	assert_int_equal(meta_outbox_cancel_for(f->m, "vol/d", d, 0, "d", "?"),
			 0);
	assert_int_equal(meta_commit(f->m), 0);
	meta_close(f->m);
	f->m = open_store(f, 0);
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "d", 0, "vol/d", &ino),
			 0);
	assert_int_equal(meta_outbox_has(f->m, "vol/d"), 1);
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "c", 0, "vol/c", &ino),
			 0);
	assert_int_equal(meta_outbox_has(f->m, "vol/c"), 1);
	assert_int_equal(meta_check(f->m), 0);
}

static void test_setattr_grow_never_shrinks(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	struct meta_attr in = attr_of(S_IFREG | 0644), out;
	in.size = 8192;
	assert_int_equal(meta_setattr(f->m, a, META_SET_GROW, &in, &out), 0);
	assert_int_equal(out.size, 8192);
	/* the reply to an earlier, shorter write arrives last */
	in.size = 4096;
	assert_int_equal(meta_setattr(f->m, a, META_SET_GROW, &in, &out), 0);
	assert_int_equal(out.size, 8192);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(bytes, 8192);
	/* truncate still shrinks */
	assert_int_equal(meta_setattr(f->m, a, META_SET_SIZE, &in, &out), 0);
	assert_int_equal(out.size, 4096);
}

static void test_outbox_add_and_has(void **state)
{
	struct fixture *f = *state;
	const char *keys[] = {"vol/d/", "vol/d/x"};
	uint64_t ids[4];
	char *got[4];
	assert_int_equal(meta_outbox_has(f->m, "vol/d/x"), 0);
	assert_int_equal(meta_outbox_add(f->m, keys, 2), 0);
	assert_int_equal(meta_outbox_has(f->m, "vol/d/x"), 1);
	assert_int_equal(meta_outbox_has(f->m, "vol/d"), 0);
	assert_int_equal(meta_outbox_peek(f->m, 4, ids, got), 2);
	assert_string_equal(got[0], "vol/d/");
	assert_string_equal(got[1], "vol/d/x");
	free(got[0]);
	free(got[1]);
	assert_int_equal(meta_outbox_done(f->m, ids, 2), 0);
	assert_int_equal(meta_outbox_has(f->m, "vol/d/x"), 0);
}

static void test_setattr_if_refuses_a_dirty_or_changed_inode(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a"), seq;
	struct meta_attr in = attr_of(S_IFREG | 0600), out;
	in.size = 7;
	assert_int_equal(meta_change_seq(f->m, a, &seq), 0);
	/* new inodes are dirty (not in S3 yet) */
	assert_int_equal(
		meta_setattr_if(f->m, a, seq, META_SET_SIZE, &in, &out),
		-EAGAIN);
	assert_int_equal(meta_clear_dirty(f->m, a, ~0u, seq), 0);
	assert_int_equal(
		meta_setattr_if(f->m, a, seq - 1, META_SET_SIZE, &in, &out),
		-EAGAIN);
	assert_int_equal(getattr(f->m, a).size, 0);
	assert_int_equal(
		meta_setattr_if(f->m, a, seq, META_SET_SIZE, &in, &out), 0);
	assert_int_equal(out.size, 7);
	/* the counter moved: the same seq no longer matches */
	assert_int_equal(
		meta_setattr_if(f->m, a, seq, META_SET_SIZE, &in, &out),
		-EAGAIN);
}

static void test_snapshot_copies_the_tree_and_adopt_forgets_dirt(void **state)
{
	struct fixture *f = *state;
	char snap[sizeof(f->path)];
	snprintf(snap, sizeof(snap), "%s/snap.db", f->dir);
	uint64_t d = mkdir_(f->m, ROOT, "d");
	uint64_t a = mkfile(f->m, d, "a");
	uint64_t b = mkfile(f->m, ROOT, "b"), ino, seq;
	struct meta_attr out;
	assert_int_equal(meta_link(f->m, a, ROOT, "hard", &out), 0);
	assert_int_equal(meta_setxattr(f->m, a, "user.k", "v", 1, 0), 0);
	/* a and d are in S3 (clean, with ETags); b is dirty, c is queued */
	assert_int_equal(meta_set_etag(f->m, a, "\"ea\""), 0);
	assert_int_equal(meta_set_etag(f->m, b, "\"eb\""), 0);
	for (uint64_t i = ROOT; i <= a; i++)
		if (meta_change_seq(f->m, i, &seq) == 0)
			meta_clear_dirty(f->m, i, ~0u, seq);
	assert_int_equal(meta_set_dirty(f->m, b, META_DIRTY_DATA), 0);
	mkfile(f->m, ROOT, "c");
	assert_int_equal(meta_unlink_queue(f->m, ROOT, "c", 0, "vol/c", &ino),
			 0);
	assert_int_equal(meta_commit(f->m), 0);
	uint64_t before = meta_changes(f->m);
	assert_int_equal(meta_snapshot(f->m, snap), 0);
	char *want = dump(f->m);

	/* the copy opens as a store equal to the original */
	struct fixture g = *f;
	snprintf(g.path, sizeof(g.path), "%s", snap);
	assert_int_equal(meta_snapshot_adopt(snap), 0);
	assert_int_equal(meta_snapshot_check(snap), 0);
	struct meta *m2 = open_store(&g, SLOW_INTERVAL_MS);
	assert_int_equal(meta_check(m2), 0);
	assert_int_equal(getattr(m2, a).nlink, 2);
	assert_int_equal(lookup_ino(m2, ROOT, "hard"), a);
	char etag[64];
	assert_int_equal(meta_get_etag(m2, a, etag, sizeof(etag)), 0);
	assert_string_equal(etag, "\"ea\"");
	/* what was dirty is clean, its version unknown ("!"): S3 decides */
	assert_int_equal(getattr(m2, b).dirty, 0);
	assert_int_equal(meta_get_etag(m2, b, etag, sizeof(etag)), 0);
	assert_string_equal(etag, "!");
	assert_int_equal(meta_outbox_has(m2, "vol/c"), 0);
	meta_close(m2);
	/* the original was not changed by being copied */
	assert_int_equal(meta_changes(f->m), before);
	char *again = dump(f->m);
	assert_string_equal(again, want);
	free(again);
	free(want);
	remove_db(snap);
}

static void test_adopt_rejects_what_is_not_a_store(void **state)
{
	struct fixture *f = *state;
	char p[128];
	snprintf(p, sizeof(p), "%s/junk.db", f->dir);
	FILE *j = fopen(p, "w");
	assert_non_null(j);
	fputs("not a database at all, just some text", j);
	fclose(j);
	assert_int_equal(meta_snapshot_adopt(p), -EINVAL);
	assert_int_equal(meta_snapshot_check(p), -EINVAL);
	unlink(p);
	/* a SQLite file of another application */
	exec_rw(p, "CREATE TABLE t(x)");
	assert_int_equal(meta_snapshot_adopt(p), -EINVAL);
	unlink(p);
	/* a store with a torn page: the check finds it, whether or not the
	 * adoption's own reads come across it */
	assert_int_equal(meta_snapshot(f->m, p), 0);
	int fd = open(p, O_WRONLY);
	assert_true(fd >= 0);
	char zeros[4096] = {0};
	memset(zeros, 0xa5, sizeof(zeros));
	assert_int_equal(pwrite(fd, zeros, sizeof(zeros), 4096),
			 (ssize_t)sizeof(zeros));
	close(fd);
	(void)meta_snapshot_adopt(p);
	assert_int_equal(meta_snapshot_check(p), -EINVAL);
	remove_db(p);
}

static void
test_adopting_kernel_refs_keeps_orphans_and_unlinked_inodes(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a"), ino;
	uint64_t b = mkfile(f->m, ROOT, "b");
	meta_ref(f->m, a, 1);
	assert_int_equal(meta_unlink(f->m, ROOT, "a", 0, &ino), 0);
	assert_int_equal(getattr(f->m, a).nlink, 0); /* open, unlinked */
	assert_int_equal(meta_commit(f->m), 0);
	/* the worker dies; its successor adopts the kernel's references */
	meta_close(f->m);
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = f->path;
	cfg.commit_interval_ms = 0;
	cfg.adopt_kernel_refs = 1;
	assert_int_equal(meta_open(&cfg, &f->m), 0);
	assert_int_equal(getattr(f->m, a).nlink, 0); /* kept */
	/* the kernel's counts are unknown: a forget deletes nothing */
	assert_int_equal(meta_forget(f->m, a, 5), 0);
	assert_int_equal(getattr(f->m, a).nlink, 0);
	/* an unlinked inode the kernel may hold stays as an orphan */
	assert_int_equal(meta_unlink(f->m, ROOT, "b", 0, &ino), 0);
	assert_int_equal(getattr(f->m, b).nlink, 0);
	/* a plain reopen (a new mount) deletes both */
	reopen(f, SLOW_INTERVAL_MS);
	struct meta_attr x;
	assert_int_equal(meta_getattr(f->m, a, &x), -ENOENT);
	assert_int_equal(meta_getattr(f->m, b, &x), -ENOENT);
}

static void test_dirty_list_survives_reopen(void **state)
{
	struct fixture *f = *state;
	uint64_t a = mkfile(f->m, ROOT, "a");
	uint64_t b = mkfile(f->m, ROOT, "b");
	uint64_t seq, *inos = NULL;
	size_t n = 0;
	/* a is clean again (uploaded); b stays dirty */
	assert_int_equal(meta_change_seq(f->m, a, &seq), 0);
	assert_int_equal(meta_clear_dirty(f->m, a, ~0u, seq), 0);
	assert_int_equal(meta_change_seq(f->m, ROOT, &seq), 0);
	meta_clear_dirty(f->m, ROOT, ~0u, seq);
	assert_int_equal(meta_commit(f->m), 0);
	meta_close(f->m);
	f->m = open_store(f, 0);
	assert_int_equal(meta_dirty_list(f->m, &inos, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(inos[0], b);
	free(inos);
}

static void test_lookup_ref_keeps_an_unlinked_inode_alive(void **state)
{
	struct fixture *f = *state;
	uint64_t c = mkfile(f->m, ROOT, "c");
	struct meta_attr a;
	uint64_t gone;
	assert_int_equal(meta_lookup_ref(f->m, ROOT, "c", &a), 0);
	assert_int_equal(a.ino, c);
	/* the reference taken with the lookup keeps it after its last name */
	assert_int_equal(meta_unlink(f->m, ROOT, "c", 0, &gone), 0);
	assert_int_equal(meta_getattr(f->m, c, &a), 0);
	assert_int_equal(a.nlink, 0);
	assert_int_equal(meta_forget(f->m, c, 1), 1);
	assert_int_equal(meta_getattr(f->m, c, &a), -ENOENT);
	assert_int_equal(meta_lookup_ref(f->m, ROOT, "c", &a), -ENOENT);
}

static void test_clear_dirty_only_when_change_seq_is_unchanged(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	uint64_t seq0 = 0, seq1 = 0, seq2 = 0;
	assert_int_equal(meta_change_seq(f->m, file, &seq0), 0);
	assert_int_equal(meta_set_dirty(f->m, file, META_DIRTY_DATA), 0);
	assert_int_equal(meta_change_seq(f->m, file, &seq1), 0);
	assert_true(seq1 > seq0);
	assert_int_equal(getattr(f->m, file).dirty,
			 META_DIRTY_NAME | META_DIRTY_DATA);
	/* the uploader saw seq1; a write comes in during the upload */
	assert_int_equal(meta_set_dirty(f->m, file, META_DIRTY_DATA), 0);
	assert_int_equal(meta_clear_dirty(f->m, file,
					  META_DIRTY_DATA | META_DIRTY_NAME,
					  seq1),
			 -EAGAIN);
	assert_int_equal(getattr(f->m, file).dirty,
			 META_DIRTY_NAME | META_DIRTY_DATA);
	/* the next upload sees the current counter and clears */
	assert_int_equal(meta_change_seq(f->m, file, &seq2), 0);
	assert_int_equal(meta_set_etag(f->m, file, "\"abc\""), 0);
	assert_int_equal(meta_clear_dirty(f->m, file, META_DIRTY_DATA, seq2),
			 0);
	assert_int_equal(getattr(f->m, file).dirty, META_DIRTY_NAME);
	assert_int_equal(meta_clear_dirty(f->m, file, META_DIRTY_NAME, seq2),
			 0);
	assert_int_equal(getattr(f->m, file).dirty, 0);
	uint64_t seq3 = 0;
	assert_int_equal(meta_change_seq(f->m, file, &seq3), 0);
	assert_int_equal(seq3, seq2); /* bookkeeping is not a change */
	assert_int_equal(meta_set_dirty(f->m, file, 0x80), -EINVAL);
	assert_int_equal(meta_set_dirty(f->m, 4242, META_DIRTY_DATA), -ENOENT);
	assert_int_equal(meta_clear_dirty(f->m, 4242, 1, 0), -ENOENT);
	assert_int_equal(meta_change_seq(f->m, 4242, &seq3), -ENOENT);
}

static void test_every_change_bumps_change_seq(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	uint64_t prev = 0, cur = 0;
	struct meta_attr a = attr_of(0644), out;
	assert_int_equal(meta_change_seq(f->m, file, &prev), 0);
#define BUMPED()                                                               \
	do {                                                                   \
		assert_int_equal(meta_change_seq(f->m, file, &cur), 0);        \
		assert_true(cur > prev);                                       \
		prev = cur;                                                    \
	} while (0)
	assert_int_equal(meta_setattr(f->m, file, META_SET_MODE, &a, NULL), 0);
	BUMPED();
	assert_int_equal(meta_link(f->m, file, ROOT, "g", &out), 0);
	BUMPED();
	assert_int_equal(meta_rename(f->m, ROOT, "g", ROOT, "h", 0, NULL), 0);
	BUMPED();
	assert_int_equal(meta_unlink(f->m, ROOT, "h", 0, NULL), 0);
	BUMPED();
	assert_int_equal(meta_setxattr(f->m, file, "user.x", "1", 1, 0), 0);
	BUMPED();
	assert_int_equal(meta_removexattr(f->m, file, "user.x"), 0);
	BUMPED();
#undef BUMPED
}

static void test_etag_roundtrip_and_short_buffer(void **state)
{
	struct fixture *f = *state;
	uint64_t file = mkfile(f->m, ROOT, "f");
	char buf[64];
	assert_int_equal(meta_get_etag(f->m, file, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	assert_int_equal(meta_set_etag(f->m, file, "\"0123456789abcdef\""), 0);
	assert_int_equal(meta_get_etag(f->m, file, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "\"0123456789abcdef\"");
	assert_int_equal(meta_get_etag(f->m, file, buf, 5), -ERANGE);
	assert_int_equal(meta_set_etag(f->m, file, ""), 0);
	assert_int_equal(meta_get_etag(f->m, file, buf, sizeof(buf)), 0);
	assert_string_equal(buf, "");
	assert_int_equal(meta_set_etag(f->m, 4242, "x"), -ENOENT);
	assert_int_equal(meta_get_etag(f->m, 4242, buf, sizeof(buf)), -ENOENT);
}

/* ---- persistence -------------------------------------------------------- */

static void build_tree(struct meta *m)
{
	uint64_t home = mkdir_(m, ROOT, "home");
	uint64_t proj = mkdir_(m, home, "proj");
	uint64_t nb = mkfile(m, proj, "notebook.ipynb");
	uint64_t data = mkfile(m, home, "data.csv");
	struct meta_attr a = attr_of(0), out;
	a.size = 12345;
	a.mtime = (struct timespec){1700000000, 123456789};
	assert_int_equal(
		meta_setattr(m, data, META_SET_SIZE | META_SET_MTIME, &a, NULL),
		0);
	struct meta_attr l = attr_of(S_IFLNK | 0777);
	assert_int_equal(
		meta_create(m, home, "latest", &l, "proj/notebook.ipynb", &out),
		0);
	assert_int_equal(meta_link(m, nb, home, "hardlink", &out), 0);
	assert_int_equal(meta_link(m, nb, ROOT, "hardlink2", &out), 0);
	assert_int_equal(meta_setxattr(m, nb, "user.kernel", "python3", 7, 0),
			 0);
	assert_int_equal(meta_setxattr(m, nb, "user.bin", "\0\xff", 2, 0), 0);
	assert_int_equal(meta_setxattr(m, home, "user.dir", "d", 1, 0), 0);
	assert_int_equal(meta_set_etag(m, data, "\"e1\""), 0);
	uint64_t seq = 0;
	assert_int_equal(meta_change_seq(m, data, &seq), 0);
	assert_int_equal(meta_clear_dirty(m, data, META_DIRTY_NAME, seq), 0);
	assert_int_equal(meta_set_dirty(m, nb, META_DIRTY_DATA), 0);
	struct meta_attr c = attr_of(S_IFCHR | 0600);
	c.rdev = 0x0103;
	assert_int_equal(meta_create(m, home, "null", &c, NULL, &out), 0);
	mkdir_(m, proj, "empty");
	mkfile(m, ROOT, "gone");
	assert_int_equal(meta_rename(m, ROOT, "gone", proj, "moved", 0, NULL),
			 0);
}

static void test_reopen_restores_everything_exactly(void **state)
{
	struct fixture *f = *state;
	build_tree(f->m);
	char *before = dump(f->m);
	reopen(f, SLOW_INTERVAL_MS);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	assert_int_equal(meta_check(f->m), 0);
	/* positions kept their values; new entries still go after them */
	uint64_t home = lookup_ino(f->m, ROOT, "home");
	struct ents e1 = list_dir(f->m, home);
	mkfile(f->m, home, "later");
	struct ents e2 = list_dir(f->m, home);
	assert_int_equal(e2.n, e1.n + 1);
	assert_string_equal(e2.v[e2.n - 1].name, "later");
	assert_true(e2.v[e2.n - 1].off > e1.v[e1.n - 1].off);
	free(e1.v);
	free(e2.v);
	free(before);
	free(after);
}

/* ---- crash safety ------------------------------------------------------- */

static struct meta *child_open(const char *path, unsigned interval)
{
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = path;
	cfg.commit_interval_ms = interval;
	struct meta *m = NULL;
	if (meta_open(&cfg, &m) != 0)
		_exit(10);
	return m;
}

static int child_mk(struct meta *m, uint64_t parent, const char *name,
		    uint32_t mode, uint64_t *ino)
{
	struct meta_attr a = attr_of(mode), out;
	int rc = meta_create(m, parent, name, &a, NULL, &out);
	if (ino)
		*ino = out.ino;
	return rc;
}

/* Closes the fixture's store and forks: in the child, *m is the store
 * opened again, which commits at meta_commit() only; NULL in the parent. */
static pid_t fork_with_store(struct fixture *f, struct meta **m)
{
	meta_close(f->m);
	f->m = NULL;
	pid_t pid = fork();
	assert_true(pid >= 0);
	*m = pid == 0 ? child_open(f->path, SLOW_INTERVAL_MS) : NULL;
	return pid;
}

static void crash_after_commit(struct fixture *f, int use_sigkill)
{
	struct meta *m;
	pid_t pid = fork_with_store(f, &m);
	if (pid == 0) {
		uint64_t d = 0, x = 0;
		if (child_mk(m, ROOT, "committed_dir", S_IFDIR | 0755, &d) ||
		    child_mk(m, d, "committed_file", S_IFREG | 0644, &x) ||
		    meta_setxattr(m, x, "user.k", "v", 1, 0) ||
		    meta_commit(m) != 0)
			_exit(11);
		if (child_mk(m, ROOT, "uncommitted", S_IFREG | 0644, NULL) ||
		    meta_rename(m, d, "committed_file", ROOT, "moved", 0,
				NULL) ||
		    meta_unlink(m, ROOT, "committed_dir", 1, NULL))
			_exit(12);
		if (use_sigkill)
			raise(SIGKILL);
		_exit(0);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (use_sigkill) {
		assert_true(WIFSIGNALED(status));
		assert_int_equal(WTERMSIG(status), SIGKILL);
	} else {
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), 0);
	}
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(meta_check(f->m), 0);
	uint64_t d = lookup_ino(f->m, ROOT, "committed_dir");
	assert_true(d != 0);
	uint64_t x = lookup_ino(f->m, d, "committed_file");
	assert_true(x != 0);
	char v;
	assert_int_equal(meta_getxattr(f->m, x, "user.k", &v, 1), 1);
	assert_int_equal(lookup_ino(f->m, ROOT, "uncommitted"), 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "moved"), 0);
	assert_int_equal(getattr(f->m, ROOT).nlink, 3);
	char *ok = peek_text(f->path, "PRAGMA integrity_check");
	assert_string_equal(ok, "ok");
	free(ok);
}

static void test_sigkill_keeps_committed_and_drops_uncommitted(void **state)
{
	crash_after_commit(*state, 1);
}

static void test_exit_without_close_keeps_committed_only(void **state)
{
	crash_after_commit(*state, 0);
}

static void test_sigkill_mid_stream_never_leaves_a_torn_tree(void **state)
{
	struct fixture *f = *state;
	meta_close(f->m);
	f->m = NULL;
	int pfd[2];
	assert_int_equal(pipe(pfd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		struct meta *m = child_open(f->path, 1);
		char name[64], other[64];
		uint64_t d = 0;
		if (child_mk(m, ROOT, "base", S_IFDIR | 0755, &d) ||
		    meta_commit(m))
			_exit(11);
		for (unsigned i = 0;; i++) {
			/* after 20 rounds, give the timer time to commit,
			 * then tell the parent to kill at will */
			if (i == 20) {
				sleep_ms(50);
				if (write(pfd[1], "x", 1) != 1)
					_exit(12);
			}
			uint64_t sub = 0, file = 0;
			snprintf(name, sizeof(name), "d%u", i);
			if (child_mk(m, d, name, S_IFDIR | 0755, &sub) ||
			    child_mk(m, sub, "f", S_IFREG | 0644, &file))
				_exit(13);
			struct meta_attr out;
			snprintf(other, sizeof(other), "l%u", i);
			if (meta_link(m, file, d, other, &out) ||
			    meta_setxattr(m, file, "user.i", &i, sizeof(i), 0))
				_exit(14);
			if (i % 3 == 0 &&
			    (meta_rename(m, d, name, ROOT, name, 0, NULL) ||
			     meta_unlink(m, d, other, 0, NULL)))
				_exit(15);
		}
	}
	close(pfd[1]);
	char c;
	assert_int_equal(read(pfd[0], &c, 1), 1);
	close(pfd[0]);
	sleep_ms(30);
	assert_int_equal(kill(pid, SIGKILL), 0);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(meta_check(f->m), 0);
	assert_true(lookup_ino(f->m, ROOT, "base") != 0);
	char *ok = peek_text(f->path, "PRAGMA integrity_check");
	assert_string_equal(ok, "ok");
	free(ok);
	/* the group commits kept the first 20 rounds at least */
	uint64_t base = lookup_ino(f->m, ROOT, "base");
	struct ents e = list_dir(f->m, base);
	assert_true(e.n >= 20);
	free(e.v);
}

/* ---- commits ------------------------------------------------------------ */

static void test_group_commit_lands_without_meta_commit(void **state)
{
	struct fixture *f = *state;
	reopen(f, 20);
	mkfile(f->m, ROOT, "grouped");
	int found = 0;
	for (int i = 0; i < 200 && !found; i++) {
		found = count_name(f->path, "grouped") == 1;
		if (!found)
			sleep_ms(10);
	}
	assert_true(found);
}

static void test_meta_commit_makes_changes_visible(void **state)
{
	struct fixture *f = *state;
	mkfile(f->m, ROOT, "pending");
	assert_int_equal(count_name(f->path, "pending"), 0);
	assert_int_equal(meta_commit(f->m), 0);
	assert_int_equal(count_name(f->path, "pending"), 1);
	assert_int_equal(meta_commit(f->m), 0); /* nothing open: fine */
}

static void test_interval_zero_commits_every_change(void **state)
{
	struct fixture *f = *state;
	reopen(f, 0);
	mkfile(f->m, ROOT, "at_once");
	assert_int_equal(count_name(f->path, "at_once"), 1);
	assert_int_equal(meta_unlink(f->m, ROOT, "at_once", 0, NULL), 0);
	assert_int_equal(count_name(f->path, "at_once"), 0);
}

static void test_a_batch_is_one_commit_at_its_end(void **state)
{
	struct fixture *f = *state;
	reopen(f, 0);
	meta_batch_begin();
	uint64_t ino = mkfile(f->m, ROOT, "batched");
	meta_batch_begin(); /* nested: only the outermost end commits */
	assert_int_equal(meta_set_dirty(f->m, ino, META_DIRTY_DATA), 0);
	assert_int_equal(meta_batch_end(f->m), 0);
	assert_int_equal(count_name(f->path, "batched"), 0);
	assert_int_equal(meta_batch_end(f->m), 0);
	assert_int_equal(count_name(f->path, "batched"), 1);
	assert_int_equal(peek_inode(f->path, ino, "dirty"),
			 META_DIRTY_NAME | META_DIRTY_DATA);
}

static struct meta *open_lazy(struct fixture *f, unsigned lazy_ms)
{
	meta_close(f->m);
	struct meta_config cfg;
	meta_config_init(&cfg);
	cfg.path = f->path;
	cfg.commit_interval_ms = 0;
	cfg.lazy_commit_ms = lazy_ms;
	if (f->slow)
		cfg.vfs = SLOW_VFS;
	assert_int_equal(meta_open(&cfg, &f->m), 0);
	return f->m;
}

static int64_t mtime_row(struct fixture *f, uint64_t ino)
{
	return peek_inode(f->path, ino, "mtime_s");
}

/* 1 once the committed mtime of ino is want, within 2 s. */
static int mtime_row_becomes(struct fixture *f, uint64_t ino, int64_t want)
{
	for (int i = 0; i < 200; i++) {
		if (mtime_row(f, ino) == want)
			return 1;
		sleep_ms(10);
	}
	return 0;
}

/* A file in the root as S3 has it: no dirty flag left. */
static uint64_t mkfile_clean(struct meta *m, const char *name)
{
	uint64_t ino = mkfile(m, ROOT, name), seq;
	assert_int_equal(meta_change_seq(m, ino, &seq), 0);
	assert_int_equal(meta_clear_dirty(m, ino,
					  META_DIRTY_DATA | META_DIRTY_ATTR |
						  META_DIRTY_NAME,
					  seq),
			 0);
	return ino;
}

static void test_a_lazy_mtime_is_committed_by_the_timer(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 50);
	uint64_t ino = mkfile_clean(m, "lazy");
	struct meta_attr in = {.mtime = {.tv_sec = 1000}}, out;
	/* the first write marks the clean file dirty: committed at once */
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	assert_int_equal(mtime_row(f, ino), 1000);
	/* the next one only moves the mtime: the timer commits it */
	in.mtime.tv_sec = 2000;
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	assert_int_equal(out.mtime.tv_sec, 2000);
	assert_int_equal(mtime_row(f, ino), 1000);
	assert_true(mtime_row_becomes(f, ino, 2000));
	/* the same for one inside a batch (a FUSE WRITE is one) */
	in.mtime.tv_sec = 3000;
	meta_batch_begin();
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	assert_int_equal(meta_batch_end(m), 0);
	assert_true(mtime_row_becomes(f, ino, 3000));
}

static void test_a_lazy_change_goes_with_the_next_eager_one(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000);
	uint64_t ino = mkfile(m, ROOT, "lazy");
	assert_int_equal(
		meta_set_dirty(m, ino, META_DIRTY_DATA | META_DIRTY_ATTR), 0);
	struct meta_attr in = {.mtime = {.tv_sec = 3000}, .size = 10}, out;
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	assert_int_equal(mtime_row(f, ino) == 3000, 0);
	/* a size change is never lazy, and takes the mtime with it */
	in.mtime.tv_sec = 4000;
	assert_int_equal(
		meta_setattr(m, ino,
			     META_SET_GROW | META_SET_MTIME | META_SET_LAZY,
			     &in, &out),
		0);
	assert_int_equal(mtime_row(f, ino), 4000);
	assert_int_equal(meta_sync(m, ino, 0), 0);
	/* in a batch, a lazy change does not make the end commit */
	in.mtime.tv_sec = 5000;
	meta_batch_begin();
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	assert_int_equal(meta_batch_end(m), 0);
	assert_int_equal(mtime_row(f, ino), 4000);
	/* fdatasync does not need it; fsync does */
	assert_int_equal(meta_sync(m, ino, 1), 0);
	assert_int_equal(mtime_row(f, ino), 4000);
	assert_int_equal(meta_sync(m, ino, 0), 0);
	assert_int_equal(mtime_row(f, ino), 5000);
	/* and a closed store has it */
	in.mtime.tv_sec = 6000;
	assert_int_equal(
		meta_setattr(m, ino, META_SET_MTIME | META_SET_LAZY, &in, &out),
		0);
	reopen(f, SLOW_INTERVAL_MS);
	assert_int_equal(mtime_row(f, ino), 6000);
}

/* A settlement of writes made in passthrough (fs.c's settle_file()): its
 * growth and its times wait for the timer, since the cache file records
 * the size; without META_SET_LAZY_GROW a growth is committed at once. */
static void test_a_lazy_growth_waits_only_when_asked_to(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000);
	uint64_t ino = mkfile(m, ROOT, "grown");
	assert_int_equal(meta_set_dirty(m, ino, META_DIRTY_DATA), 0);
	const unsigned settle =
		META_SET_GROW | META_SET_MTIME | META_SET_CTIME | META_SET_LAZY;
	struct meta_attr in = {.size = 4096,
			       .mtime = {.tv_sec = 1000},
			       .ctime = {.tv_sec = 1000}},
			 out;
	/* the first one adds META_DIRTY_ATTR beside DATA: still lazy */
	assert_int_equal(
		meta_setattr(m, ino, settle | META_SET_LAZY_GROW, &in, &out),
		0);
	assert_int_equal(out.size, 4096);
	assert_int_equal(peek_inode(f->path, ino, "size"), 0);
	assert_int_equal(mtime_row(f, ino) == 1000, 0);
	/* without the flag, growth is committed before the call returns */
	in.size = 8192;
	in.mtime.tv_sec = in.ctime.tv_sec = 2000;
	assert_int_equal(meta_setattr(m, ino, settle, &in, &out), 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 8192);
	assert_int_equal(mtime_row(f, ino), 2000);
	assert_int_equal(meta_sync(m, ino, 0), 0);
	/* fdatasync needs no commit for a lazy growth; fsync does */
	in.size = 12288;
	in.mtime.tv_sec = in.ctime.tv_sec = 3000;
	assert_int_equal(
		meta_setattr(m, ino, settle | META_SET_LAZY_GROW, &in, &out),
		0);
	assert_int_equal(meta_sync(m, ino, 1), 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 8192);
	assert_int_equal(meta_sync(m, ino, 0), 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 12288);
	assert_int_equal(mtime_row(f, ino), 3000);
	/* a file clean until now becomes dirty: that is never lazy */
	uint64_t clean = mkfile_clean(m, "clean");
	assert_int_equal(peek_inode(f->path, clean, "dirty"), 0);
	assert_int_equal(
		meta_setattr(m, clean, settle | META_SET_LAZY_GROW, &in, &out),
		0);
	assert_int_equal(peek_inode(f->path, clean, "size"), 12288);
	assert_int_equal(peek_inode(f->path, clean, "dirty"), META_DIRTY_ATTR);
}

static off_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? st.st_size : -1;
}

static void test_the_wal_is_copied_back_by_the_checkpointer(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000); /* a commit per change */
	char wal[128];
	snprintf(wal, sizeof(wal), "%s-wal", f->path);
	off_t db0 = file_size(f->path);
	uint64_t bg = 0, inl = 0;
	/* each create is a commit of a few pages: past 1,000 WAL frames,
	 * and short of the 8,000 where a commit copies them itself */
	char name[32];
	for (int i = 0; i < 600; i++) {
		snprintf(name, sizeof(name), "f%04d", i);
		mkfile(m, ROOT, name);
	}
	for (int i = 0; i < 200 && bg == 0; i++) {
		meta_checkpoints(m, &bg, &inl);
		sleep_ms(10);
	}
	assert_true(bg >= 1);
	assert_int_equal(inl, 0); /* no request waited for one */
	assert_true(file_size(f->path) > db0);
	/* a long run of commits keeps the WAL bounded, and all of it is
	 * there after a reopen */
	for (int i = 600; i < 6000; i++) {
		snprintf(name, sizeof(name), "f%04d", i);
		mkfile(m, ROOT, name);
	}
	assert_true(file_size(wal) < (off_t)12000 * 4120);
	reopen(f, SLOW_INTERVAL_MS);
	struct meta_attr a;
	assert_int_equal(meta_lookup(f->m, ROOT, "f5999", &a), 0);
	assert_int_equal(meta_lookup(f->m, ROOT, "f0000", &a), 0);
}

/* On a loaded disk a checkpoint's fsyncs take long, and commits go on
 * meanwhile; the commit past META_CKPT_INLINE_FRAMES still bounds the
 * WAL (it had grown past 12,000 frames under CI load). */
static void
test_the_wal_stays_bounded_while_a_checkpoint_runs_long(void **state)
{
	struct fixture *f = *state;
	slow_vfs_install(f, 100);
	struct meta *m = open_lazy(f, 600000); /* a commit per change */
	char wal[128], name[32];
	snprintf(wal, sizeof(wal), "%s-wal", f->path);
	uint64_t bg = 0, inl = 0;
	for (int i = 0; i < 6000; i++) {
		snprintf(name, sizeof(name), "f%04d", i);
		mkfile(m, ROOT, name);
	}
	meta_checkpoints(m, &bg, &inl);
	assert_true(bg >= 1);
	assert_true(f->slow->syncs >= 2); /* a checkpoint's, at least */
	assert_true(file_size(wal) < (off_t)9000 * 4120);
	meta_close(f->m);
	f->m = NULL;
	slow_vfs_remove(f);
	f->m = open_store(f, SLOW_INTERVAL_MS);
	struct meta_attr a;
	assert_int_equal(meta_lookup(f->m, ROOT, "f5999", &a), 0);
}

static int64_t mode_row(struct fixture *f, uint64_t ino)
{
	return peek_inode(f->path, ino, "mode");
}

static int64_t inode_rows(struct fixture *f, uint64_t ino)
{
	return peek_inode(f->path, ino, "count(*)");
}

static int64_t dirty_row(struct fixture *f, uint64_t ino)
{
	return peek_inode(f->path, ino, "dirty");
}

static int gone(struct meta *m, uint64_t ino)
{
	struct meta_attr a;
	return meta_getattr(m, ino, &a) == -ENOENT;
}

/* An unlinked file, still referenced by the kernel, uploaded (clean). */
static uint64_t clean_orphan(struct fixture *f, struct meta *m)
{
	uint64_t ino = mkfile(m, ROOT, "gone"), seq;
	meta_ref(m, ino, 1);
	assert_int_equal(meta_change_seq(m, ino, &seq), 0);
	assert_int_equal(meta_clear_dirty(m, ino, ~0u, seq), 0);
	assert_int_equal(meta_unlink(m, ROOT, "gone", 0, NULL), 0);
	assert_int_equal(inode_rows(f, ino), 1);
	assert_int_equal(dirty_row(f, ino) & META_DIRTY_ATTR, 0);
	return ino;
}

static void test_an_orphans_last_forget_goes_with_the_next_commit(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000);
	uint64_t ino = clean_orphan(f, m);
	assert_int_equal(meta_forget(m, ino, 1), 1);
	assert_true(gone(m, ino));
	/* a commit of its own would cost rm -rf one per file */
	assert_int_equal(inode_rows(f, ino), 1);
	mkfile(m, ROOT, "next");
	assert_int_equal(inode_rows(f, ino), 0);
	assert_int_equal(meta_check(m), 0);
}

static void test_an_orphans_times_wait_and_leave_it_clean(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000);
	uint64_t ino = clean_orphan(f, m);
	int64_t was = mtime_row(f, ino);
	/* the kernel flushes the times of a file it is evicting */
	struct meta_attr in = {.mtime = {.tv_sec = 7000},
			       .ctime = {.tv_sec = 7000}},
			 out;
	assert_int_equal(meta_setattr(m, ino, META_SET_MTIME | META_SET_CTIME,
				      &in, &out),
			 0);
	assert_int_equal(out.mtime.tv_sec, 7000);
	assert_int_equal(mtime_row(f, ino), was);
	/* nothing of it is owed to S3 */
	assert_int_equal(meta_set_dirty(m, ino, META_DIRTY_ATTR), 0);
	assert_int_equal(meta_commit(m), 0);
	assert_int_equal(mtime_row(f, ino), 7000);
	assert_int_equal(dirty_row(f, ino) & META_DIRTY_ATTR, 0);
	/* a mode change is not a time: committed at once */
	in.mode = 0600;
	assert_int_equal(meta_setattr(m, ino, META_SET_MODE, &in, &out), 0);
	assert_int_equal(mode_row(f, ino) & 07777, 0600);
	assert_int_equal(meta_forget(m, ino, 1), 1);
}

static void test_an_orphan_lost_with_its_lazy_forget_is_gone_after(void **state)
{
	struct fixture *f = *state;
	meta_close(f->m);
	f->m = NULL;
	uint64_t ino = 0;
	int pipefd[2];
	assert_int_equal(pipe(pipefd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct meta *m = open_lazy(f, 600000);
		uint64_t x = clean_orphan(f, m);
		if (meta_forget(m, x, 1) != 1 ||
		    write(pipefd[1], &x, sizeof(x)) != sizeof(x))
			_exit(11);
		raise(SIGKILL);
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &ino, sizeof(ino)), sizeof(ino));
	close(pipefd[0]);
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	assert_int_equal(inode_rows(f, ino), 1); /* its deletion was lost */
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_int_equal(inode_rows(f, ino), 0);
	assert_true(gone(f->m, ino));
	assert_int_equal(meta_check(f->m), 0);
}

static void test_kill_suidgid_clears_the_bits_at_once(void **state)
{
	struct fixture *f = *state;
	struct meta *m = open_lazy(f, 600000);
	uint64_t ino = mk(m, ROOT, "s", S_IFREG | 06775);
	uint64_t dir = mk(m, ROOT, "d", S_IFDIR | 06775);
	uint64_t nogx = mk(m, ROOT, "g", S_IFREG | 06765);
	assert_int_equal(meta_set_dirty(m, ino, META_DIRTY_DATA), 0);
	struct meta_attr in = {.mtime = {.tv_sec = 1000}}, out;
	const unsigned write = META_SET_MTIME | META_SET_LAZY;
	/* a write by a caller without CAP_FSETID: committed, not lazy */
	assert_int_equal(
		meta_setattr(m, ino, write | META_SET_KILL_SUIDGID, &in, &out),
		0);
	assert_int_equal(out.mode, S_IFREG | 0775);
	assert_true(out.dirty & META_DIRTY_ATTR);
	assert_int_equal(mode_row(f, ino), S_IFREG | 0775);
	assert_int_equal(mtime_row(f, ino), 1000);
	/* set-group-ID without group execute is not set-group-ID for
	 * execution: it stays */
	assert_int_equal(
		meta_setattr(m, nogx, write | META_SET_KILL_SUIDGID, &in, &out),
		0);
	assert_int_equal(out.mode, S_IFREG | 02765);
	assert_int_equal(mode_row(f, nogx), S_IFREG | 02765);
	/* a directory keeps both */
	assert_int_equal(meta_setattr(m, dir,
				      META_SET_UID | META_SET_KILL_SUIDGID, &in,
				      &out),
			 0);
	assert_int_equal(out.mode, S_IFDIR | 06775);
	/* a mode given with it wins (chmod) */
	in.mode = 04755;
	assert_int_equal(meta_setattr(m, ino,
				      META_SET_MODE | META_SET_KILL_SUIDGID,
				      &in, &out),
			 0);
	assert_int_equal(out.mode, S_IFREG | 04755);
	/* with nothing to clear, a write stays lazy */
	in.mode = 0755;
	assert_int_equal(meta_setattr(m, ino, META_SET_MODE, &in, &out), 0);
	in.mtime.tv_sec = 2000;
	assert_int_equal(
		meta_setattr(m, ino, write | META_SET_KILL_SUIDGID, &in, &out),
		0);
	assert_int_equal(mtime_row(f, ino), 1000);
}

static void test_fdatasync_commits_a_shrunk_size_fsync_any(void **state)
{
	struct fixture *f = *state;
	reopen(f, SLOW_INTERVAL_MS);
	uint64_t ino = mkfile(f->m, ROOT, "synced");
	assert_int_equal(meta_set_dirty(f->m, ino, META_DIRTY_DATA), 0);
	/* a new inode is not durable until a commit */
	assert_int_equal(meta_sync(f->m, ino, 1), 0);
	assert_int_equal(count_name(f->path, "synced"), 1);
	/* a size that grew is the cache file's to record (fs.c takes it
	 * back after a power loss): fdatasync owes nothing, fsync commits */
	struct meta_attr in = {.size = 100}, out;
	uint64_t t;
	assert_int_equal(meta_setattr(f->m, ino, META_SET_GROW, &in, &out), 0);
	assert_int_equal(meta_sync_begin(f->m, ino, 1, &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 0);
	assert_int_equal(meta_sync(f->m, ino, 0), 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 100);
	/* a size that shrank is the store's alone: fdatasync commits it */
	in.size = 10;
	assert_int_equal(meta_setattr(f->m, ino, META_SET_SIZE, &in, &out), 0);
	assert_int_equal(meta_sync(f->m, ino, 1), 0);
	assert_int_equal(peek_inode(f->path, ino, "size"), 10);
	/* a mode change (the inode already dirty): fdatasync leaves it
	 * open, fsync commits it */
	assert_int_equal(meta_set_dirty(f->m, ino, META_DIRTY_ATTR), 0);
	assert_int_equal(meta_sync(f->m, ino, 0), 0);
	in.mode = 0600;
	assert_int_equal(meta_setattr(f->m, ino, META_SET_MODE, &in, &out), 0);
	assert_int_equal(meta_sync(f->m, ino, 1), 0);
	assert_int_equal(peek_inode(f->path, ino, "mode") & 07777, 0644);
	assert_int_equal(meta_sync(f->m, ino, 0), 0);
	assert_int_equal(peek_inode(f->path, ino, "mode") & 07777, 0600);
	/* a removed inode: everything is committed */
	assert_int_equal(meta_unlink(f->m, ROOT, "synced", 0, NULL), 0);
	assert_int_equal(meta_sync(f->m, ino, 1), 0);
	assert_int_equal(count_name(f->path, "synced"), 0);
}

static void test_sync_tickets_cover_what_was_changed_before(void **state)
{
	struct fixture *f = *state;
	reopen(f, SLOW_INTERVAL_MS);
	uint64_t a = mkfile(f->m, ROOT, "a"), b = mkfile(f->m, ROOT, "b");
	uint64_t ta, tb, t;
	assert_int_equal(meta_sync_begin(f->m, a, 1, &ta), 0);
	assert_true(ta != 0); /* a new inode is owed a sync */
	struct meta_attr in = {.size = 7}, out;
	assert_int_equal(meta_setattr(f->m, b, META_SET_GROW, &in, &out), 0);
	/* an fsync: an fdatasync's ticket leaves growth to the cache file's
	 * record, so it covers b's new size only when the sync round a's
	 * ticket started had not begun yet (CI saw it begin first) */
	assert_int_equal(meta_sync_begin(f->m, b, 0, &tb), 0);
	assert_true(tb == 0 || tb >= ta); /* 0: that round covered it */
	assert_int_equal(meta_sync_wait(f->m, tb), 0);
	assert_int_equal(meta_sync_wait(f->m, ta), 0);
	/* both durable: nothing owed, and the size is in the file */
	assert_int_equal(meta_sync_begin(f->m, a, 0, &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(meta_sync_begin(f->m, b, 0, &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(peek_inode(f->path, b, "size"), 7);
	assert_int_equal(meta_sync_wait(f->m, 0), 0);
}

struct syncer_arg {
	struct meta *m;
	uint64_t ino;
	int rc;
};

/* Cuts the file short 300 times (to 300 bytes, then 299, ... 1), each
 * cut fdatasync'ed: a size that shrank is what fdatasync commits. */
static void *shrink_and_sync(void *p)
{
	struct syncer_arg *a = p;
	for (uint64_t i = 300; i >= 1 && a->rc == 0; i--) {
		struct meta_attr in = {.size = i}, out;
		a->rc = meta_setattr(a->m, a->ino, META_SET_SIZE, &in, &out);
		if (a->rc == 0)
			a->rc = meta_sync(a->m, a->ino, 1);
	}
	return NULL;
}

static void test_concurrent_fsyncs_all_end_durable(void **state)
{
	struct fixture *f = *state;
	reopen(f, SLOW_INTERVAL_MS);
	enum { N = 4 };
	pthread_t th[N];
	struct syncer_arg arg[N];
	for (int i = 0; i < N; i++) {
		char name[16];
		snprintf(name, sizeof(name), "f%d", i);
		arg[i] = (struct syncer_arg){f->m, mkfile(f->m, ROOT, name), 0};
		assert_int_equal(
			pthread_create(&th[i], NULL, shrink_and_sync, &arg[i]),
			0);
	}
	for (int i = 0; i < N; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(arg[i].rc, 0);
		uint64_t t;
		assert_int_equal(meta_sync_begin(f->m, arg[i].ino, 1, &t), 0);
		assert_int_equal(t, 0);
		assert_int_equal(peek_inode(f->path, arg[i].ino, "size"), 1);
	}
}

static void test_close_commits_pending_changes(void **state)
{
	struct fixture *f = *state;
	mkfile(f->m, ROOT, "at_close");
	meta_close(f->m);
	f->m = NULL;
	assert_int_equal(count_name(f->path, "at_close"), 1);
	f->m = open_store(f, SLOW_INTERVAL_MS);
	assert_true(lookup_ino(f->m, ROOT, "at_close") != 0);
}

/* ---- scale -------------------------------------------------------------- */

static void test_ten_thousand_files_in_one_directory(void **state)
{
	struct fixture *f = *state;
	enum { N = 10000 };
	uint64_t d = mkdir_(f->m, ROOT, "big");
	char name[32];
	uint64_t *inos = calloc(N, sizeof(*inos));
	assert_non_null(inos);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "file-%05d", i);
		inos[i] = mkfile(f->m, d, name);
	}
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "file-%05d", i);
		assert_int_equal(lookup_ino(f->m, d, name), inos[i]);
	}
	/* readdir in reply-sized batches, as FUSE does */
	size_t total = 0;
	uint64_t off = 0;
	for (;;) {
		struct ents b = {.limit = 100};
		assert_int_equal(meta_readdir(f->m, d, off, collect, &b), 0);
		if (!b.n) {
			free(b.v);
			break;
		}
		for (size_t i = 0; i < b.n; i++)
			assert_int_equal(b.v[i].ino, inos[total + i]);
		total += b.n;
		off = b.v[b.n - 1].off;
		free(b.v);
	}
	assert_int_equal(total, N);
	assert_int_equal(meta_check(f->m), 0);
	assert_int_equal(meta_commit(f->m), 0);
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "file-%05d", i);
		assert_int_equal(meta_unlink(f->m, d, name, 0, NULL), 0);
	}
	struct ents e = list_dir(f->m, d);
	assert_int_equal(e.n, 0);
	free(e.v);
	uint64_t bytes, inodes;
	meta_usage(f->m, &bytes, &inodes);
	assert_int_equal(inodes, 2);
	assert_int_equal(meta_unlink(f->m, ROOT, "big", 1, NULL), 0);
	free(inos);
}

struct worker {
	struct meta *m;
	uint64_t dir, dir2; /* this worker's own: no cross-talk */
	int failures;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	char name[32];
	for (int i = 0; i < 300; i++) {
		struct meta_attr a = attr_of(S_IFREG | 0644), out;
		snprintf(name, sizeof(name), "f%d", i);
		if (meta_create(w->m, w->dir, name, &a, NULL, &out) != 0 ||
		    meta_setxattr(w->m, out.ino, "user.n", &i, sizeof(i), 0) ||
		    meta_rename(w->m, w->dir, name, w->dir2, name, 0, NULL))
			w->failures++;
		if (i % 2 && meta_unlink(w->m, w->dir2, name, 0, NULL) != 0)
			w->failures++;
	}
	return NULL;
}

static void
test_concurrent_changes_with_group_commit_stay_consistent(void **state)
{
	struct fixture *f = *state;
	reopen(f, 1);
	enum { W = 4 };
	pthread_t th[W];
	struct worker w[W];
	int started = 0, join_errors = 0;
	char name[32];
	for (int i = 0; i < W; i++) {
		snprintf(name, sizeof(name), "w%d", i);
		w[i] = (struct worker){.m = f->m};
		w[i].dir = mkdir_(f->m, ROOT, name);
		snprintf(name, sizeof(name), "w%d-done", i);
		w[i].dir2 = mkdir_(f->m, ROOT, name);
	}
	for (int i = 0; i < W; i++)
		if (pthread_create(&th[i], NULL, worker_main, &w[i]) == 0)
			started++;
	/* join all before any assertion can leave this frame */
	for (int i = 0; i < started; i++)
		join_errors += pthread_join(th[i], NULL) != 0;
	assert_int_equal(started, W);
	assert_int_equal(join_errors, 0);
	for (int i = 0; i < W; i++) {
		assert_int_equal(w[i].failures, 0);
		struct ents e = list_dir(f->m, w[i].dir2);
		assert_int_equal(e.n, 150);
		free(e.v);
	}
	assert_int_equal(meta_check(f->m), 0);
	char *before = dump(f->m);
	reopen(f, SLOW_INTERVAL_MS);
	char *after = dump(f->m);
	assert_string_equal(before, after);
	free(before);
	free(after);
}

/* ---- notes -------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* meta_notes(prefix), sorted, as a count and up to 4 values. */
static size_t notes_of(struct meta *m, const char *prefix, uint64_t out[4])
{
	uint64_t *v = NULL;
	size_t n = 99;
	assert_int_equal(meta_notes(m, prefix, &v, &n), 0);
	if (n)
		qsort(v, n, sizeof(*v), cmp_u64);
	for (size_t i = 0; i < n && i < 4; i++)
		out[i] = v[i];
	free(v);
	return n;
}

static void test_notes_commit_with_their_batch_and_clear_by_prefix(void **state)
{
	struct fixture *f = *state;
	reopen(f, 0); /* every change committed when made */
	uint64_t v[4];
	assert_int_equal(notes_of(f->m, "x.", v), 0);
	meta_batch_begin();
	mkfile(f->m, ROOT, "f");
	assert_int_equal(meta_note_put(f->m, "x.1.1", 42), 0);
	assert_int_equal(meta_batch_end(f->m), 0);
	assert_int_equal(meta_note_put(f->m, "x.1.2", 1ull << 62), 0);
	assert_int_equal(meta_note_put(f->m, "x.1.1", 44), 0); /* replaced */
	assert_int_equal(meta_note_put(f->m, "y", 7), 0);
	reopen(f, 0);
	assert_int_equal(notes_of(f->m, "x.", v), 2);
	assert_int_equal(v[0], 44);
	assert_int_equal(v[1], 1ull << 62);
	assert_int_equal(notes_of(f->m, "y", v), 1);
	assert_int_equal(v[0], 7);
	assert_int_equal(notes_of(f->m, "", v), 3);
	assert_int_equal(meta_notes_clear(f->m, "x."), 0);
	assert_int_equal(notes_of(f->m, "x.", v), 0);
	reopen(f, 0);
	assert_int_equal(notes_of(f->m, "x.", v), 0);
	assert_int_equal(notes_of(f->m, "y", v), 1);
	/* the store's own counters are not notes */
	assert_int_equal(meta_notes_clear(f->m, ""), 0);
	reopen(f, 0);
	assert_int_equal(notes_of(f->m, "", v), 0);
	struct meta_attr a;
	assert_int_equal(meta_lookup(f->m, ROOT, "f", &a), 0);
	assert_true(mkfile(f->m, ROOT, "g") > a.ino);
}

static void test_a_note_is_lost_or_kept_with_its_batch(void **state)
{
	struct fixture *f = *state;
	char name[META_NOTE_MAX + 2];
	memset(name, 'n', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	assert_int_equal(meta_note_put(f->m, name, 1), -EINVAL);
	assert_int_equal(meta_note_put(f->m, "", 1), -EINVAL);
	struct meta *m;
	pid_t pid = fork_with_store(f, &m);
	if (pid == 0) {
		name[META_NOTE_MAX] = '\0'; /* the longest name */
		meta_batch_begin();
		int rc = child_mk(m, ROOT, "kept", S_IFREG | 0644, NULL);
		rc = rc ? rc : meta_note_put(m, name, 3);
		rc = rc ? rc : meta_batch_end(m);
		if (rc || meta_commit(m))
			_exit(11);
		meta_batch_begin();
		rc = child_mk(m, ROOT, "lost", S_IFREG | 0644, NULL);
		rc = rc ? rc : meta_note_put(m, "x.1.1", 5);
		if (rc || meta_batch_end(m))
			_exit(12);
		raise(SIGKILL); /* before the timer commits the second */
		_exit(0);
	}
	int status = 0;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	f->m = open_store(f, SLOW_INTERVAL_MS);
	uint64_t v[4];
	assert_int_equal(notes_of(f->m, "", v), 1);
	assert_int_equal(v[0], 3);
	assert_true(lookup_ino(f->m, ROOT, "kept") != 0);
	assert_int_equal(lookup_ino(f->m, ROOT, "lost"), 0);
}

static uint64_t allocated(const char *path)
{
	struct stat st;
	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* The cache disk (a 4 MiB tmpfs) filled by another writer: commits whose
 * WAL has to grow take the ballast's room, where SQLite would roll them
 * back and the store then refuse every change; once the disk has room
 * again, a commit holds the ballast again. */
static void test_a_full_disk_gives_the_store_its_ballast(void **state)
{
	struct fixture *f = *state;
	char dir[80], fill[128], ballast[128];
	if (small_disk_mount(f->dir, "4m", dir, sizeof(dir)))
		skip(); /* not root */
	meta_close(f->m);
	remove_db(f->path);
	snprintf(f->path, sizeof(f->path), "%s/meta.db", dir);
	snprintf(ballast, sizeof(ballast), "%s-ballast", f->path);
	snprintf(fill, sizeof(fill), "%s/fill", dir);
	f->m = open_store(f, 0);
	assert_int_equal(allocated(ballast), 256 << 10); /* a sixteenth */
	small_disk_fill(fill);
	char name[16];
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		mkfile(f->m, ROOT, name);
	}
	assert_int_equal(allocated(ballast), 0);
	assert_int_equal(meta_check(f->m), 0);
	assert_int_equal(unlink(fill), 0);
	usleep(1100 * 1000); /* META_BALLAST_RETRY_MS */
	mkfile(f->m, ROOT, "after");
	assert_int_equal(allocated(ballast), 256 << 10);
	reopen(f, 0); /* all of it committed */
	assert_true(lookup_ino(f->m, ROOT, "f7") != 0);
	assert_true(lookup_ino(f->m, ROOT, "after") != 0);
	meta_close(f->m);
	remove_db(f->path);
	assert_int_equal(umount2(dir, MNT_DETACH), 0);
	snprintf(f->path, sizeof(f->path), "%s/meta.db", f->dir);
	f->m = open_store(f, SLOW_INTERVAL_MS);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_new_store_has_root_directory_from_config),
		T(test_store_file_is_wal_with_versioned_schema),
		T(test_open_rebuilds_a_store_of_the_earlier_shape),
		T(test_a_failed_rebuild_keeps_the_earlier_shape_working),
		T(test_open_rejects_a_foreign_sqlite_file),
		T(test_open_rejects_a_file_that_is_not_sqlite),
		T(test_open_rejects_an_unknown_format_version),
		T(test_open_requires_a_path),
		T(test_notes_commit_with_their_batch_and_clear_by_prefix),
		T(test_a_note_is_lost_or_kept_with_its_batch),
		T(test_an_open_store_refuses_other_processes),
		T(test_open_rejects_nlink_that_disagrees_with_names),
		T(test_open_rejects_a_dentry_naming_a_missing_inode),
		T(test_open_rejects_a_name_no_entry_may_have),
		T(test_open_rejects_a_directory_with_two_names),
		T(test_reopen_rebuilds_entries_out_of_inode_order),
		T(test_open_rejects_inode_number_zero),
		T(test_failed_write_rolls_back_memory_and_file),
		T(test_create_file_sets_attrs_and_dirty_name),
		T(test_create_updates_parent_mtime_and_ctime),
		T(test_create_errors),
		T(test_create_node_types_keep_mode_and_rdev),
		T(test_lookup_errors),
		T(test_mkdir_counts_subdirectories_in_parent_nlink),
		T(test_inode_numbers_are_never_reused),
		T(test_counters_are_stored_a_chunk_ahead),
		T(test_create_in_removed_directory_is_enoent),
		T(test_symlink_stores_target_and_readlink_returns_it),
		T(test_link_adds_a_name_and_bumps_nlink_and_ctime),
		T(test_link_errors),
		T(test_unlink_errors),
		T(test_unlink_drops_nlink_then_deletes_unreferenced_inode),
		T(test_rmdir_removes_empty_dir_and_fixes_parent_nlink),
		T(test_unlinked_open_file_lives_until_last_forget),
		T(test_forget_of_linked_inode_and_root_deletes_nothing),
		T(test_orphans_are_deleted_at_reopen),
		T(test_rename_moves_a_file_within_and_across_directories),
		T(test_rename_replaces_a_file_and_reports_it),
		T(test_rename_replacing_a_hard_link_keeps_the_other_name),
		T(test_rename_directory_over_empty_directory),
		T(test_rename_type_mismatches_and_nonempty_target),
		T(test_rename_directory_into_its_own_subtree_is_einval),
		T(test_rename_directory_across_parents_fixes_nlink),
		T(test_rename_onto_the_same_inode_is_a_noop),
		T(test_rename_noreplace_refuses_an_existing_target),
		T(test_rename_exchange_swaps_file_and_directory),
		T(test_setattr_chmod_chown_truncate_set_ctime_now),
		T(test_setattr_times_take_the_given_values),
		T(test_kill_suidgid_clears_the_bits_at_once),
		T(test_setattr_errors),
		T(test_usage_counts_regular_file_bytes_and_inodes),
		T(test_xattr_set_get_list_remove),
		T(test_xattr_flags_and_errors),
		T(test_xattr_change_sets_ctime_and_dirty_attr),
		T(test_readdir_lists_in_creation_order_and_resumes),
		T(test_readdir_errors),
		T(test_readdir_positions_survive_deletes_during_iteration),
		T(test_path_walks_first_names_to_the_root),
		T(test_path_nth_names_every_hard_link),
		T(test_lookup_ref_keeps_an_unlinked_inode_alive),
		T(test_dirty_list_survives_reopen),
		T(test_outbox_queues_deletions_with_the_unlink),
		T(test_outbox_add_and_has),
		T(test_outbox_cancel_for_a_name_that_went_keeps_the_deletion),
		T(test_unlink_of_a_file_never_uploaded_queues_nothing),
		T(test_setattr_grow_never_shrinks),
		T(test_adopting_kernel_refs_keeps_orphans_and_unlinked_inodes),
		T(test_setattr_if_refuses_a_dirty_or_changed_inode),
		T(test_snapshot_copies_the_tree_and_adopt_forgets_dirt),
		T(test_adopt_rejects_what_is_not_a_store),
		T(test_clear_dirty_only_when_change_seq_is_unchanged),
		T(test_every_change_bumps_change_seq),
		T(test_etag_roundtrip_and_short_buffer),
		T(test_reopen_restores_everything_exactly),
		T(test_sigkill_keeps_committed_and_drops_uncommitted),
		T(test_exit_without_close_keeps_committed_only),
		T(test_sigkill_mid_stream_never_leaves_a_torn_tree),
		T(test_group_commit_lands_without_meta_commit),
		T(test_meta_commit_makes_changes_visible),
		T(test_interval_zero_commits_every_change),
		T(test_a_batch_is_one_commit_at_its_end),
		T(test_a_lazy_mtime_is_committed_by_the_timer),
		T(test_a_lazy_change_goes_with_the_next_eager_one),
		T(test_a_lazy_growth_waits_only_when_asked_to),
		T(test_the_wal_is_copied_back_by_the_checkpointer),
		T(test_the_wal_stays_bounded_while_a_checkpoint_runs_long),
		T(test_an_orphans_last_forget_goes_with_the_next_commit),
		T(test_an_orphans_times_wait_and_leave_it_clean),
		T(test_an_orphan_lost_with_its_lazy_forget_is_gone_after),
		T(test_fdatasync_commits_a_shrunk_size_fsync_any),
		T(test_sync_tickets_cover_what_was_changed_before),
		T(test_concurrent_fsyncs_all_end_durable),
		T(test_close_commits_pending_changes),
		T(test_ten_thousand_files_in_one_directory),
		T(test_concurrent_changes_with_group_commit_stay_consistent),
		T(test_a_full_disk_gives_the_store_its_ballast),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
