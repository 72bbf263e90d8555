/* test_data.c: the data cache (cache/data.c) against a fake object store.
 *
 * The fake fetch callback serves an in-memory "object", counts calls and
 * records the ranges asked for, and can fail or block on a semaphore. Each
 * test runs in its own temporary cache directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <linux/magic.h>

#include "../../cache/data.h"
#include "small_disk.h"

#define MAX_CALLS 1024
#define RA_MIN (16u << 10)
#define RA_MAX (64u << 10)

struct fake {
	pthread_mutex_t lock;
	const unsigned char *obj; /* the object's bytes; not owned */
	size_t objlen;
	int calls;
	uint64_t off[MAX_CALLS];
	uint64_t len[MAX_CALLS];
	int err;   /* fail every fetch with -err */
	int block; /* post `started`, then wait on `gate` */
	/* the same for fetches at or past these offsets only (EIO) */
	uint64_t fail_from, block_from;
	/* a fetch longer than this lands this many bytes (telling
	 * data_fetch_landed()), then posts `started` and waits on `gate` */
	uint64_t stall_after;
	uint64_t fail_after; /* a fetch fails (EIO) once this many landed */
	int cancelled;	     /* fetches data_fetch_landed() stopped */
	sem_t started;
	sem_t gate;
};

struct env {
	char dir[64];
	struct data_config cfg;
	struct data *d;
	struct fake fk;
	unsigned char obj[1u << 20];
};

static unsigned char obj_byte(uint64_t i)
{
	return (unsigned char)(1 + i % 251); /* never 0: zeros stand out */
}

#define FAKE_CHUNK 4096 /* bytes landed per data_fetch_landed() */

static ssize_t fake_fetch(void *ctx, uint64_t ino, uint64_t off, uint64_t len,
			  int fd, off_t fd_off, struct data_fetch *fetch)
{
	struct fake *fk = ctx;
	(void)ino;
	pthread_mutex_lock(&fk->lock);
	if (fk->calls < MAX_CALLS) {
		fk->off[fk->calls] = off;
		fk->len[fk->calls] = len;
	}
	fk->calls++;
	int block = fk->block || off >= fk->block_from;
	int err = fk->err ? fk->err : off >= fk->fail_from ? EIO : 0;
	uint64_t stall = fk->stall_after && len > fk->stall_after
				 ? fk->stall_after
				 : UINT64_MAX;
	uint64_t fail = fk->fail_after ? fk->fail_after : UINT64_MAX;
	pthread_mutex_unlock(&fk->lock);
	if (block) {
		sem_post(&fk->started);
		sem_wait(&fk->gate);
	}
	if (err)
		return -err;
	size_t n = off >= fk->objlen ? 0 : fk->objlen - off;
	if (n > len)
		n = len;
	for (size_t done = 0; done < n;) {
		size_t k = n - done < FAKE_CHUNK ? n - done : FAKE_CHUNK;
		if (pwrite(fd, fk->obj + off + done, k, fd_off + (off_t)done) !=
		    (ssize_t)k)
			return -EIO;
		done += k;
		if (fetch && data_fetch_landed(fetch, done) == -ECANCELED) {
			pthread_mutex_lock(&fk->lock);
			fk->cancelled++;
			pthread_mutex_unlock(&fk->lock);
			return -ECANCELED;
		}
		if (done == stall) {
			sem_post(&fk->started);
			sem_wait(&fk->gate);
		}
		if (done >= fail && done < n)
			return -EIO;
	}
	return (ssize_t)n;
}

static int rm_entry(const char *path, const struct stat *st, int flag,
		    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	assert_non_null(e);
	strcpy(e->dir, "/tmp/test_data.XXXXXX");
	assert_non_null(mkdtemp(e->dir));
	for (size_t i = 0; i < sizeof(e->obj); i++)
		e->obj[i] = obj_byte(i);
	pthread_mutex_init(&e->fk.lock, NULL);
	sem_init(&e->fk.started, 0, 0);
	sem_init(&e->fk.gate, 0, 0);
	e->fk.obj = e->obj;
	e->fk.objlen = sizeof(e->obj);
	e->fk.fail_from = e->fk.block_from = UINT64_MAX;
	data_config_init(&e->cfg);
	e->cfg.dir = e->dir;
	e->cfg.size_limit = UINT64_MAX;
	e->cfg.free_floor = 0;
	e->cfg.readahead_min = RA_MIN;
	e->cfg.readahead_max = RA_MAX;
	e->cfg.lead = 2 * RA_MIN;
	e->cfg.prefetch_threads = 0; /* each test that counts fetches sees
					only the reads' own (prefetch tests
					reopen with threads) */
	e->cfg.fetch = fake_fetch;
	e->cfg.fetch_ctx = &e->fk;
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	*state = e;
	return 0;
}

static int teardown(void **state)
{
	struct env *e = *state;
	data_close(e->d);
	small_disk_drop(e->dir);
	nftw(e->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	sem_destroy(&e->fk.started);
	sem_destroy(&e->fk.gate);
	pthread_mutex_destroy(&e->fk.lock);
	free(e);
	return 0;
}

static void reopen(struct env *e)
{
	data_close(e->d);
	e->d = NULL;
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
}

static void expect_encoding(const struct ranges *r, const char *want)
{
	struct buf b = BUF_INIT;
	assert_int_equal(ranges_encode(r, &b), 0);
	assert_string_equal(b.data ? b.data : "", want);
	buf_free(&b);
}

static void expect_present(struct data_file *f, const char *want)
{
	struct ranges r = RANGES_INIT;
	assert_int_equal(data_present(f, &r), 0);
	expect_encoding(&r, want);
	ranges_free(&r);
}

/* data_dirty() takes an upload snapshot; hand it back cleared of nothing */
static void expect_dirty(struct data_file *f, const char *want)
{
	struct ranges r = RANGES_INIT, none = RANGES_INIT;
	assert_int_equal(data_dirty(f, &r), 0);
	expect_encoding(&r, want);
	assert_int_equal(data_mark_clean(f, &none), 0);
	ranges_free(&r);
}

static void expect_obj(const unsigned char *buf, uint64_t off, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != obj_byte(off + i))
			fail_msg("byte %zu (offset %llu): %u, want %u", i,
				 (unsigned long long)(off + i), buf[i],
				 obj_byte(off + i));
}

static void expect_fill(const unsigned char *buf, unsigned char c, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (buf[i] != c)
			fail_msg("byte %zu: %u, want %u", i, buf[i], c);
}

static void expect_call(struct env *e, int i, uint64_t off, uint64_t len)
{
	assert_true(i < e->fk.calls);
	assert_int_equal(e->fk.off[i], off);
	assert_int_equal(e->fk.len[i], len);
}

static int file_exists(const struct env *e, const char *name)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", e->dir, name);
	return access(path, F_OK) == 0;
}

static struct stat stat_of(const struct env *e, const char *name)
{
	char path[128];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", e->dir, name);
	assert_int_equal(stat(path, &st), 0);
	return st;
}

/* name in the test's cache dir, opened with flags (mode 0600) */
static int open_in(const struct env *e, const char *name, int flags)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/%s", e->dir, name);
	int fd = open(path, flags, 0600);
	assert_true(fd >= 0);
	return fd;
}

static void test_read_of_absent_range_fetches_exactly_it_once(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[5000];
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	assert_int_equal(data_read(f, buf, sizeof(buf), 10000), 5000);
	expect_obj(buf, 10000, 5000);
	assert_int_equal(e->fk.calls, 1);
	expect_call(e, 0, 10000, 5000); /* random access: no read-ahead */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(data_read(f, buf, sizeof(buf), 10000), 5000);
	expect_obj(buf, 10000, 5000);
	assert_int_equal(e->fk.calls, 1); /* served from the cache */
	expect_present(f, "10000-15000");
	expect_dirty(f, "");
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 5000);
	assert_int_equal(dirty, 0);
	data_put(f);
}

static void
test_sequential_reads_double_readahead_and_random_resets(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	assert_int_equal(data_get(e->d, 1, 512 * K, &f), 0);
	for (uint64_t off = 0; off < 256 * K; off += 4 * K) {
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
		expect_obj(buf, off, 4096);
	}
	/* first read random (exact); then min, doubling, capped at max */
	assert_int_equal(e->fk.calls, 7);
	expect_call(e, 0, 0, 4 * K);
	expect_call(e, 1, 4 * K, 16 * K);
	expect_call(e, 2, 20 * K, 32 * K);
	expect_call(e, 3, 52 * K, 64 * K);
	expect_call(e, 4, 116 * K, 64 * K);
	expect_call(e, 5, 180 * K, 64 * K);
	expect_call(e, 6, 244 * K, 64 * K);
	/* a jump is random access: exactly the bytes asked for */
	assert_int_equal(data_read(f, buf, 4096, 400 * K), 4096);
	expect_obj(buf, 400 * K, 4096);
	expect_call(e, 7, 400 * K, 4 * K);
	/* and sequential access after it starts again from readahead_min */
	assert_int_equal(data_read(f, buf, 4096, 404 * K), 4096);
	expect_obj(buf, 404 * K, 4096);
	expect_call(e, 8, 404 * K, 16 * K);
	/* read-ahead stops at the file's size */
	assert_int_equal(data_read(f, buf, 4096, 500 * K), 4096);
	assert_int_equal(data_read(f, buf, 4096, 504 * K), 4096);
	expect_call(e, 10, 504 * K, 8 * K);
	assert_int_equal(e->fk.calls, 11);
	data_put(f);
}

static void test_interleaved_sequential_readers_each_get_readahead(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	assert_int_equal(data_get(e->d, 1, 4096 * K, &f), 0);
	/* four readers, each sequential in its own quarter, in turn */
	for (uint64_t step = 0; step < 64 * K; step += 4 * K)
		for (uint64_t r = 0; r < 4; r++) {
			uint64_t off = r * 256 * K + step;
			assert_int_equal(data_read(f, buf, 4096, off), 4096);
			expect_obj(buf, off, 4096);
		}
	/* each: its first read exact, then 16, 32, 64 KiB; without a
	 * stream of its own each read would be one fetch: 64 in all */
	assert_int_equal(e->fk.calls, 16);
	for (int r = 0; r < 4; r++) {
		uint64_t base = (uint64_t)r * 256 * K;
		expect_call(e, r, base, 4 * K);
		expect_call(e, 4 + r, base + 4 * K, 16 * K);
		expect_call(e, 8 + r, base + 20 * K, 32 * K);
		expect_call(e, 12 + r, base + 52 * K, 64 * K);
	}
	/* more readers than streams: the least recently read one goes */
	for (uint64_t r = 0; r < DATA_RA_STREAMS_MAX + 1; r++)
		assert_int_equal(data_read(f, buf, 16, 1200 * K + r * 8 * K),
				 16);
	int calls = e->fk.calls;
	assert_int_equal(data_read(f, buf, 16, 1200 * K + 16), 16);
	expect_call(e, calls, 1200 * K + 16, 16); /* forgotten: exact */
	/* (which took the place of the next oldest, r = 1) */
	assert_int_equal(data_read(f, buf, 16, 1200 * K + 16 * K + 16), 16);
	/* read-ahead, up to the next reader's bytes, present already */
	expect_call(e, calls + 1, 1200 * K + 16 * K + 16, 8 * K - 16);
	data_put(f);
}

/* Each open with read access widens its first read to readahead_min: a
 * reader starting in the middle of a file gets a window at once, not
 * after a second round trip; later random reads fetch exactly. */
static void test_an_opens_first_read_fetches_a_window(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	assert_int_equal(data_get(e->d, 1, 1024 * K, &f), 0);
	data_open_read(f);
	data_open_read(f);
	/* two opens, each reading from its own place */
	assert_int_equal(data_read(f, buf, 4096, 256 * K), 4096);
	expect_obj(buf, 256 * K, 4096);
	expect_call(e, 0, 256 * K, RA_MIN);
	assert_int_equal(data_read(f, buf, 4096, 512 * K), 4096);
	expect_call(e, 1, 512 * K, RA_MIN);
	/* the next read of the first is present: no fetch */
	assert_int_equal(data_read(f, buf, 4096, 260 * K), 4096);
	expect_obj(buf, 260 * K, 4096);
	assert_int_equal(e->fk.calls, 2);
	/* both opens have read: random reads are exact again */
	assert_int_equal(data_read(f, buf, 4096, 800 * K), 4096);
	expect_call(e, 2, 800 * K, 4 * K);
	/* one open goes: its unused credit with it */
	data_open_read(f);
	data_open_read(f);
	data_opens_left(f, 1);
	assert_int_equal(data_read(f, buf, 4096, 900 * K), 4096);
	expect_call(e, 3, 900 * K, RA_MIN);
	assert_int_equal(data_read(f, buf, 4096, 1000 * K), 4096);
	expect_call(e, 4, 1000 * K, 4 * K);
	assert_int_equal(e->fk.calls, 5);
	data_put(f);
}

/* A data loader's 64 workers, or fio's 64 jobs with offset_increment:
 * each reader keeps its stream while the others read (the table grows),
 * so each gets read-ahead from its second read on. */
static void test_many_interleaved_readers_each_keep_their_stream(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[8192];
	const uint64_t K = 1024, R = 64, S = 64 * K;
	/* (past the fake object's first MiB the bytes read are zeros; the
	 * fetches are what this test counts) */
	assert_int_equal(data_get(e->d, 1, R * S, &f), 0);
	for (uint64_t step = 0; step < 16 * K; step += 4 * K)
		for (uint64_t r = 0; r < R; r++)
			assert_int_equal(data_read(f, buf, 4096, r * S + step),
					 4096);
	/* each: its first read exact, its second widened to 16 KiB, which
	 * covers the next two; one fetch per read (256) without a stream */
	assert_int_equal(e->fk.calls, 2 * R);
	for (uint64_t r = 0; r < R; r++) {
		expect_call(e, (int)r, r * S, 4 * K);
		expect_call(e, (int)(R + r), r * S + 4 * K, 16 * K);
	}
	data_put(f);
	/* the streams went with the last reference: a new open starts over,
	 * so reader 0's next read (of which 4 KiB are absent) is exact */
	assert_int_equal(data_get(e->d, 1, R * S, &f), 0);
	assert_int_equal(data_read(f, buf, 8192, 16 * K), 8192);
	assert_int_equal(e->fk.calls, 2 * R + 1);
	expect_call(e, (int)(2 * R), 20 * K, 4 * K);
	data_put(f);
}

/* ---- prefetch: fetches ahead of a sequential reader, in threads ---- */

static void with_prefetch_threads(struct env *e, unsigned n)
{
	e->cfg.prefetch_threads = n;
	reopen(e);
}

static int fake_calls(struct env *e)
{
	pthread_mutex_lock(&e->fk.lock);
	int n = e->fk.calls;
	pthread_mutex_unlock(&e->fk.lock);
	return n;
}

/* Waits (up to 10 s) until want is present in f, or fails. */
static void await_present(struct data_file *f, const char *want)
{
	struct ranges r = RANGES_INIT;
	struct buf b = BUF_INIT;
	for (int i = 0; i < 10000; i++) {
		b.len = 0;
		ranges_free(&r);
		assert_int_equal(data_present(f, &r), 0);
		assert_int_equal(ranges_encode(&r, &b), 0);
		if (strcmp(b.data ? b.data : "", want) == 0)
			break;
		usleep(1000);
	}
	expect_encoding(&r, want);
	ranges_free(&r);
	buf_free(&b);
}

static void test_a_sequential_reader_finds_what_follows_fetched(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024, size = sizeof(e->obj);
	with_prefetch_threads(e, 2);
	assert_int_equal(data_get(e->d, 1, size, &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096); /* exact */
	assert_int_equal(data_read(f, buf, 4096, 4 * K), 4096);
	expect_obj(buf, 4 * K, 4096);
	/* a prefetch thread fetched the read's lead, [4, 36) KiB, and the
	 * window is 32 KiB now: of the 64 KiB after the reader, [36, 68)
	 * comes with no read asking ([68, 72) is less than a piece: it
	 * waits for a later read) */
	await_present(f, "0-69632");
	assert_int_equal(fake_calls(e), 3);
	expect_call(e, 1, 4 * K, 32 * K);
	expect_call(e, 2, 36 * K, 32 * K);
	/* and so on to the end: each byte fetched once, and read right */
	for (uint64_t off = 8 * K; off < size; off += 4 * K) {
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
		expect_obj(buf, off, 4096);
	}
	await_present(f, "0-1048576");
	uint64_t fetched = 0, longest = 0;
	for (int i = 0; i < fake_calls(e); i++) {
		fetched += e->fk.len[i];
		if (e->fk.len[i] > longest)
			longest = e->fk.len[i];
	}
	assert_int_equal(fetched, size);
	/* pieces of the window, which grew to readahead_max (which call
	 * fetched one depends on how the reader and the threads ran) */
	assert_int_equal(longest, RA_MAX);
	data_put(f);
}

static void test_a_failed_prefetch_leaves_its_bytes_to_the_reader(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	with_prefetch_threads(e, 2);
	e->fk.fail_from = 36 * K; /* the read-ahead pieces fail */
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	assert_int_equal(data_read(f, buf, 4096, 4 * K), 4096);
	for (int i = 0; i < 10000 && fake_calls(e) < 3; i++)
		usleep(1000);
	/* the reader that needs them fetches them, and says it failed */
	assert_int_equal(data_read(f, buf, 4096, 8 * K), 4096);
	assert_int_equal(data_read(f, buf, 4096, 36 * K), -EIO);
	/* the lead, [4, 36) KiB, is present once its fetch ends: the read
	 * at 8 KiB went on as soon as its own bytes had landed */
	await_present(f, "0-36864");
	pthread_mutex_lock(&e->fk.lock);
	e->fk.fail_from = UINT64_MAX;
	pthread_mutex_unlock(&e->fk.lock);
	assert_int_equal(data_read(f, buf, 4096, 36 * K), 4096);
	expect_obj(buf, 36 * K, 4096);
	data_put(f);
}

static void *closer_main(void *d)
{
	data_close(d);
	return NULL;
}

/* With one prefetch thread: two sequential reads of object 1 have it
 * fetch their lead, [4, 36) KiB, then a piece ahead, [36, 68) KiB, whose
 * fetch blocks; returns once it has. */
static struct data_file *start_stuck_prefetch(struct env *e)
{
	struct data_file *f;
	unsigned char buf[4096];
	with_prefetch_threads(e, 1);
	e->fk.block_from = 36 * 1024;
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	assert_int_equal(data_read(f, buf, 4096, 4096), 4096);
	assert_int_equal(sem_wait(&e->fk.started), 0);
	return f;
}

/* When the last open goes, the pieces fetched ahead are dropped: those
 * queued are skipped, and the one under way stops at its next bytes,
 * keeping those that landed. 64 readers that stop must not leave the
 * prefetch threads fetching for seconds ahead of the next file's
 * readers. */
static void test_the_last_close_drops_prefetches_not_started(void **state)
{
	struct env *e = *state;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	struct data_file *f = start_stuck_prefetch(e);
	for (uint64_t off = 8 * K; off < 36 * K; off += 4 * K)
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
	/* [68, 100) KiB is queued behind the stuck piece now */
	assert_int_equal(fake_calls(e), 3);
	data_opens_left(f, 0);
	pthread_mutex_lock(&e->fk.lock);
	e->fk.block_from = UINT64_MAX;
	pthread_mutex_unlock(&e->fk.lock);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	/* the stuck piece stops after its first 4 KiB */
	await_present(f, "0-40960");
	usleep(200 * 1000); /* time for the thread to take the next piece */
	assert_int_equal(fake_calls(e), 3);
	pthread_mutex_lock(&e->fk.lock);
	assert_int_equal(e->fk.cancelled, 1);
	pthread_mutex_unlock(&e->fk.lock);
	expect_present(f, "0-40960");
	/* what is left is fetched when read, and reads right */
	assert_int_equal(data_read(f, buf, 4096, 44 * K), 4096);
	expect_obj(buf, 44 * K, 4096);
	data_put(f);
}

/* data_close() with one piece being fetched and one queued: it waits for
 * the first, drops the second, and leaves the cache whole. */
static void
test_close_with_prefetches_pending_leaves_the_cache_whole(void **state)
{
	struct env *e = *state;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	struct data_file *f = start_stuck_prefetch(e);
	for (uint64_t off = 8 * K; off < 36 * K; off += 4 * K) /* and */
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
	/* [68, 100) KiB is queued behind it now */
	data_put(f);
	pthread_t th;
	assert_int_equal(pthread_create(&th, NULL, closer_main, e->d), 0);
	e->d = NULL;
	usleep(50 * 1000);
	pthread_mutex_lock(&e->fk.lock);
	e->fk.block_from = UINT64_MAX;
	pthread_mutex_unlock(&e->fk.lock);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	/* the piece in flight landed; the queued one at most also did */
	int calls = fake_calls(e);
	assert_true(calls == 3 || calls == 4);
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	expect_present(f, calls == 3 ? "0-69632" : "0-102400");
	for (uint64_t off = 0; off < 100 * K; off += 4 * K) {
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
		expect_obj(buf, off, 4096);
	}
	data_put(f);
}

static void test_reads_past_object_end_return_zeros_up_to_size(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[9000];
	e->fk.objlen = 10000; /* the object is shorter than the file */
	assert_int_equal(data_get(e->d, 1, 16384, &f), 0);
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(data_read(f, buf, sizeof(buf), 8192), 8192);
	expect_obj(buf, 8192, 10000 - 8192);
	expect_fill(buf + (10000 - 8192), 0, 16384 - 10000);
	assert_int_equal(data_read(f, buf, sizeof(buf), 16384), 0);
	assert_int_equal(data_read(f, buf, sizeof(buf), 20000), 0);
	expect_present(f, "8192-16384");
	assert_int_equal(e->fk.calls, 1);
	data_put(f);
}

/* data_place() is data_read() for a reply spliced from the cache file:
 * the same fetches and counts, and the bytes left in place. */
static void test_place_leaves_the_bytes_in_the_cache_file(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[9000];
	size_t n = 1;
	e->fk.objlen = 60000; /* the object is shorter than the file */
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	assert_int_equal(data_place(f, 5000, 10000, &n), 0);
	assert_int_equal(n, 5000);
	assert_int_equal(e->fk.calls, 1);
	expect_call(e, 0, 10000, 5000);
	expect_present(f, "10000-15000");
	assert_int_equal(pread(data_fd(f), buf, 5000, 10000), 5000);
	expect_obj(buf, 10000, 5000);
	/* cut at the size; past the object's end the file holds zeros */
	assert_int_equal(data_place(f, sizeof(buf), 58000, &n), 0);
	assert_int_equal(n, 65536 - 58000);
	assert_int_equal(pread(data_fd(f), buf, n, 58000), (ssize_t)n);
	expect_obj(buf, 58000, 2000);
	expect_fill(buf + 2000, 0, n - 2000);
	/* at and past the end: nothing, and nothing fetched */
	int calls = e->fk.calls;
	assert_int_equal(data_place(f, 10, 65536, &n), 0);
	assert_int_equal(n, 0);
	n = 1;
	assert_int_equal(data_place(f, 10, 70000, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(e->fk.calls, calls);
	data_put(f);
}

static void test_truncate_grow_reads_zeros_without_fetching(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	static unsigned char buf[20000];
	e->fk.objlen = 10000;
	assert_int_equal(data_get(e->d, 1, 10000, &f), 0);
	assert_int_equal(data_read(f, buf, 10000, 0), 10000);
	assert_int_equal(data_truncate(f, 20000), 0);
	assert_int_equal(data_size(f), 20000);
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(data_read(f, buf, 11000, 9000), 11000);
	expect_obj(buf, 9000, 1000);
	expect_fill(buf + 1000, 0, 10000);
	assert_int_equal(e->fk.calls, 1);
	expect_present(f, "0-20000");
	expect_dirty(f, "10000-20000");
	/* shrink drops both sets; growing again shows zeros, not old bytes */
	assert_int_equal(data_truncate(f, 5000), 0);
	expect_present(f, "0-5000");
	expect_dirty(f, "");
	assert_int_equal(data_read(f, buf, 2000, 4000), 1000);
	assert_int_equal(data_truncate(f, 8000), 0);
	memset(buf, 0xee, sizeof(buf));
	assert_int_equal(data_read(f, buf, 8000, 0), 8000);
	expect_obj(buf, 0, 5000);
	expect_fill(buf + 5000, 0, 3000);
	assert_int_equal(e->fk.calls, 1);
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 8000);
	assert_int_equal(dirty, 3000);
	data_put(f);
}

static void test_write_over_partial_data_merges_with_fetched_bytes(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[10000], x[4096];
	memset(x, 'X', sizeof(x));
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	assert_int_equal(data_write(f, x, sizeof(x), 2048), 4096);
	expect_present(f, "0-6144");
	expect_dirty(f, "2048-6144");
	assert_int_equal(data_read(f, buf, 10000, 0), 10000);
	assert_int_equal(e->fk.calls, 2);
	expect_call(e, 1, 6144, 10000 - 6144); /* only the gap */
	expect_obj(buf, 0, 2048);
	expect_fill(buf + 2048, 'X', 4096);
	expect_obj(buf + 6144, 6144, 10000 - 6144);
	/* a write past the end extends the size */
	assert_int_equal(data_write(f, x, 100, 70000), 100);
	assert_int_equal(data_size(f), 70100);
	data_put(f);
}

/* A file cut short, then written past its end: the gap reads as zeros,
 * not as the bytes the (older, longer) object still holds there, and is
 * dirty, so the upload sends those zeros; after a restart too. */
static void test_a_gap_past_the_end_reads_as_zeros_not_the_object(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[8192], x[100];
	memset(x, 'X', sizeof(x));
	assert_int_equal(data_get(e->d, 1, 8192, &f), 0);
	assert_int_equal(data_read(f, buf, 1000, 0), 1000);
	assert_int_equal(data_truncate(f, 4000), 0);
	assert_int_equal(data_write(f, x, sizeof(x), 6000), 100);
	expect_present(f, "0-1000,4000-6100");
	expect_dirty(f, "4000-6100");
	assert_int_equal(data_read(f, buf, 8192, 0), 6100);
	expect_obj(buf, 0, 4000);
	expect_fill(buf + 4000, 0, 2000);
	expect_fill(buf + 6000, 'X', 100);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 1, 6100, &f), 0);
	expect_dirty(f, "4000-6100");
	memset(buf, 1, sizeof(buf));
	assert_int_equal(data_read(f, buf, 2100, 4000), 2100);
	expect_fill(buf, 0, 2000);
	data_put(f);
}

static void test_fetch_error_propagates_and_marks_nothing_present(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	e->fk.err = EIO;
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), -EIO);
	expect_present(f, "");
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 0);
	e->fk.err = ETIMEDOUT;
	assert_int_equal(data_hydrate_all(f), -ETIMEDOUT);
	expect_present(f, "");
	e->fk.err = 0;
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), 4096);
	expect_obj(buf, 0, 4096);
	expect_present(f, "0-4096");
	data_put(f);
}

struct reader {
	struct data_file *f;
	uint64_t off;
	size_t len;
	ssize_t rc;
	unsigned char buf[8192];
};

static void *reader_main(void *arg)
{
	struct reader *r = arg;
	r->rc = data_read(r->f, r->buf, r->len, r->off);
	return NULL;
}

/* A sequential reader's miss is one lead fetch of data_config.lead bytes
 * by a prefetch thread, and the reader goes on as soon as its own bytes
 * have landed: here while the fetch is stuck past them. */
static void test_a_reader_goes_on_as_its_bytes_land(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct reader rd;
	unsigned char buf[4096];
	pthread_t th;
	const uint64_t K = 1024;
	with_prefetch_threads(e, 1);
	e->fk.stall_after = 8 * K;
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	data_open_read(f);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	expect_obj(buf, 0, 4096);
	assert_int_equal(sem_wait(&e->fk.started), 0); /* stuck at 8 KiB */
	assert_int_equal(data_read(f, buf, 4096, 4 * K), 4096);
	expect_obj(buf, 4 * K, 4096);
	/* one fetch, the lead; the piece planned ahead waits for the
	 * thread; landed bytes are not marked present before the end */
	assert_int_equal(fake_calls(e), 1);
	expect_call(e, 0, 0, 32 * K);
	expect_present(f, "");
	/* a reader past what landed waits for it */
	rd = (struct reader){.f = f, .off = 12 * K, .len = 4096};
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	pthread_mutex_lock(&e->fk.lock);
	e->fk.stall_after = 0;
	pthread_mutex_unlock(&e->fk.lock);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(rd.rc, 4096);
	expect_obj(rd.buf, 12 * K, 4096);
	/* the lead, the piece after it, and, the stream having read RA_MIN
	 * in a row, the plan of [16, 144) KiB goes RA_MAX ahead: its third
	 * piece is [64, 128) KiB */
	await_present(f, "0-131072");
	assert_int_equal(fake_calls(e), 3);
	expect_call(e, 2, 64 * K, RA_MAX);
	data_put(f);
}

/* A stream that has read RA_MIN bytes in a row plans RA_MAX ahead at
 * once, not its window, but only while its file has at most 8 streams,
 * counting the opens that have not read yet: 64 readers of one file that
 * each did so queued GETs of bytes no one was reading yet before the
 * ones they waited for. */
static void test_only_a_file_of_few_streams_plans_ra_max_ahead(void **state)
{
	struct env *e = *state;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	/* besides the reader's stream: other streams, opens not read yet */
	const struct {
		unsigned streams, unread;
	} cases[] = {{7, 0}, {8, 0}, {0, 8}, {4, 4}};
	with_prefetch_threads(e, 1);
	for (uint64_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct data_file *f;
		char want[512];
		int few = cases[k].streams + cases[k].unread <= 7;
		/* the reader's own stream, [0, 16) KiB: its lead [4, 36)
		 * and the piece [36, 68); settled at its fourth read, also
		 * the RA_MAX piece [68, 132), unless the file has 9 streams,
		 * counting the opens not read yet */
		int len = snprintf(want, sizeof(want), "0-%u",
				   few ? 132u * 1024 : 68u * 1024);
		assert_int_equal(data_get(e->d, 1 + k, sizeof(e->obj), &f), 0);
		for (uint64_t r = 0; r < cases[k].streams; r++) {
			uint64_t at = 512 * K + r * 64 * K;
			assert_int_equal(data_read(f, buf, 4096, at), 4096);
			len += snprintf(want + len, sizeof(want) - len,
					",%" PRIu64 "-%" PRIu64, at, at + 4096);
		}
		for (uint64_t off = 0; off < 16 * K; off += 4 * K) {
			assert_int_equal(data_read(f, buf, 4096, off), 4096);
			expect_obj(buf, off, 4096);
			for (unsigned r = 0; off == 0 && r < cases[k].unread;
			     r++)
				data_open_read(f); /* opened since */
		}
		await_present(f, want);
		usleep(100 * 1000); /* time for a wrong piece to land too */
		expect_present(f, want);
		data_put(f);
	}
}

/* The parts of one large read reach data_read() in any order: a read
 * within the window of a stream continues it (and a late part behind it
 * does not start it over), while a stream without a window yet is
 * continued only exactly, so random reads are never widened. */
static void test_parts_of_a_read_out_of_order_continue_the_stream(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	const uint64_t K = 1024;
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	assert_int_equal(data_read(f, buf, 4096, 8 * K), 4096); /* random */
	expect_call(e, 1, 8 * K, 4 * K);
	assert_int_equal(data_read(f, buf, 4096, 12 * K), 4096);
	expect_call(e, 2, 12 * K, RA_MIN); /* [12, 28), window 32 KiB */
	/* the stream ended at 16 KiB: a part at 36 KiB, then the one
	 * before it */
	assert_int_equal(data_read(f, buf, 4096, 36 * K), 4096);
	expect_obj(buf, 36 * K, 4096);
	expect_call(e, 3, 36 * K, 32 * K);
	assert_int_equal(data_read(f, buf, 4096, 32 * K), 4096);
	expect_obj(buf, 32 * K, 4096);
	expect_call(e, 4, 32 * K, 4 * K); /* its gap, up to what is there */
	/* and on from the end of the later part, sequential */
	assert_int_equal(data_read(f, buf, 4096, 40 * K), 4096);
	assert_int_equal(fake_calls(e), 5);
	data_put(f);
}

/* A fetch that fails after some of its bytes landed keeps them, and a
 * read whose bytes all landed succeeds. */
static void test_a_failed_fetch_keeps_the_bytes_that_landed(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[16384];
	const uint64_t K = 1024;
	e->fk.fail_after = 8 * K;
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	data_open_read(f); /* the read is widened to [0, 16) KiB */
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	expect_obj(buf, 0, 4096);
	expect_call(e, 0, 0, RA_MIN);
	expect_present(f, "0-8192");
	/* a read past them fails, and leaves what landed of its own */
	assert_int_equal(data_read(f, buf, 16 * K, 20 * K), -EIO);
	expect_present(f, "0-8192,20480-28672");
	e->fk.fail_after = 0;
	assert_int_equal(data_read(f, buf, 4096, 8 * K), 4096);
	expect_obj(buf, 8 * K, 4096);
	data_put(f);
}

/* A sequential reader waits on its fetch with the file unlocked while
 * other readers grow the stream table (realloc): it must not then update
 * its stream through a pointer into the old table (ASan: use after free),
 * and its window must still have doubled. */
static void
test_a_reader_in_a_fetch_survives_the_stream_table_growing(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct reader rd = {.off = 16, .len = 4096};
	unsigned char buf[16384];
	pthread_t th;
	const uint64_t K = 1024;
	assert_int_equal(data_get(e->d, 1, sizeof(e->obj), &f), 0);
	assert_int_equal(data_read(f, buf, 16, 0), 16);
	rd.f = f; /* sequential: its fetch is widened to RA_MIN, and blocks */
	e->fk.block = 1;
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	assert_int_equal(sem_wait(&e->fk.started), 0);
	e->fk.block = 0;
	/* 16 readers elsewhere, each a stream: the table doubles thrice */
	for (uint64_t r = 1; r <= 16; r++)
		assert_int_equal(data_read(f, buf, 16, 256 * K + r * 32 * K),
				 16);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(rd.rc, 4096);
	expect_obj(rd.buf, 16, 4096);
	expect_call(e, 1, 16, RA_MIN);
	/* the rest of what it fetched, then its next fetch: twice RA_MIN */
	assert_int_equal(data_read(f, buf, RA_MIN - 4096, 16 + 4096),
			 RA_MIN - 4096);
	int calls = e->fk.calls;
	assert_int_equal(data_read(f, buf, 16, 16 + RA_MIN), 16);
	expect_call(e, calls, 16 + RA_MIN, 2 * RA_MIN);
	data_put(f);
}

static void
test_concurrent_readers_of_missing_range_share_one_fetch(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct reader rd[4];
	pthread_t th[4];
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	e->fk.block = 1;
	for (int i = 0; i < 4; i++) {
		rd[i] = (struct reader){.f = f, .off = 0, .len = 8192};
		assert_int_equal(
			pthread_create(&th[i], NULL, reader_main, &rd[i]), 0);
		if (i == 0) /* the first reader's fetch is in flight */
			assert_int_equal(sem_wait(&e->fk.started), 0);
	}
	/* Give the others time to reach the in-flight range (they find it
	 * present if they come later: one fetch either way). */
	struct timespec ts = {0, 50 * 1000 * 1000};
	nanosleep(&ts, NULL);
	pthread_mutex_lock(&e->fk.lock);
	e->fk.block = 0; /* a second fetch, if any, would not block */
	pthread_mutex_unlock(&e->fk.lock);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(rd[i].rc, 8192);
		expect_obj(rd[i].buf, 0, 8192);
	}
	assert_int_equal(e->fk.calls, 1);
	data_put(f);
}

struct writer {
	struct data_file *f;
	uint64_t off;
	size_t len;
	uint64_t truncate_to; /* with len 0: data_truncate() instead */
	ssize_t rc;
};

static void *writer_main(void *arg)
{
	struct writer *w = arg;
	static unsigned char ws[4096];
	memset(ws, 'W', sizeof(ws));
	w->rc = w->len ? data_write(w->f, ws, w->len, w->off)
		       : data_truncate(w->f, w->truncate_to);
	return NULL;
}

/* Starts a read of [0, 8192) whose fetch blocks, then wr (a write or a
 * truncate) in a thread of its own, and lets the fetch end once wr has
 * had time to run: the fetch writes the cache file unlocked, so wr must
 * wait for it, or the fetched bytes land over it. */
static void race_fetch(struct env *e, struct data_file *f, struct writer *wr,
		       struct reader *rd)
{
	pthread_t rt, wt;
	*rd = (struct reader){.f = f, .off = 0, .len = 8192};
	wr->f = f;
	e->fk.block = 1;
	assert_int_equal(pthread_create(&rt, NULL, reader_main, rd), 0);
	assert_int_equal(sem_wait(&e->fk.started), 0);
	assert_int_equal(pthread_create(&wt, NULL, writer_main, wr), 0);
	usleep(100 * 1000); /* without the wait, wr is done by now */
	assert_int_equal(sem_post(&e->fk.gate), 0);
	assert_int_equal(pthread_join(rt, NULL), 0);
	assert_int_equal(pthread_join(wt, NULL), 0);
	e->fk.block = 0;
	assert_int_equal(e->fk.calls, 1);
}

/* Whether th ends within 10 s (else the test fails; th is left). */
static int joins_soon(pthread_t th)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	return pthread_timedjoin_np(th, NULL, &ts) == 0;
}

/* With the one prefetch thread stuck in a fetch, a read that needs a
 * piece still queued behind it fetches that piece itself, and a write
 * over a lead still queued drops it, so that the reader waiting for that
 * lead fetches its bytes itself: no one waits for the queue to move. */
static void test_queued_prefetches_are_taken_over_not_waited_for(void **state)
{
	struct env *e = *state;
	struct reader rd, rd2;
	struct writer wr = {.off = 330 * 1024, .len = 100};
	unsigned char buf[4096];
	pthread_t th, th2;
	const uint64_t K = 1024;
	struct data_file *f = start_stuck_prefetch(e);
	pthread_mutex_lock(&e->fk.lock);
	e->fk.block_from = UINT64_MAX; /* (the stuck fetch stays stuck) */
	pthread_mutex_unlock(&e->fk.lock);
	for (uint64_t off = 8 * K; off < 36 * K; off += 4 * K)
		assert_int_equal(data_read(f, buf, 4096, off), 4096);
	/* [68, 100) KiB is queued now; a second stream's read at 304 KiB
	 * queues its lead, [304, 336), and waits for it */
	assert_int_equal(data_read(f, buf, 4096, 300 * K), 4096);
	rd2 = (struct reader){.f = f, .off = 304 * K, .len = 4096};
	assert_int_equal(pthread_create(&th2, NULL, reader_main, &rd2), 0);
	rd = (struct reader){.f = f, .off = 76 * K, .len = 4096};
	assert_int_equal(pthread_create(&th, NULL, reader_main, &rd), 0);
	int took = joins_soon(th);
	if (!took) { /* it waits for the queue: unstick it, then fail */
		assert_int_equal(sem_post(&e->fk.gate), 0);
		assert_int_equal(pthread_join(th, NULL), 0);
	}
	assert_true(took);
	assert_int_equal(rd.rc, 4096);
	expect_obj(rd.buf, 76 * K, 4096);
	assert_int_equal(fake_calls(e), 5);
	expect_call(e, 3, 300 * K, 4 * K);
	/* the reader took it: [68, 132) KiB, queued by the read at 12 KiB,
	 * the first after RA_MIN read in a row, which planned RA_MAX ahead */
	expect_call(e, 4, 68 * K, RA_MAX);
	usleep(200 * 1000); /* rd2 queued its lead long before */
	wr.f = f;
	assert_int_equal(pthread_create(&th, NULL, writer_main, &wr), 0);
	assert_true(joins_soon(th));
	assert_int_equal(wr.rc, 100);
	/* the lead is gone: its reader fetched [304, 320) itself, and
	 * queued [320, 330) and [330.1, 362.1) behind the stuck fetch */
	took = joins_soon(th2);
	if (!took) {
		assert_int_equal(sem_post(&e->fk.gate), 0);
		assert_int_equal(pthread_join(th2, NULL), 0);
	}
	assert_true(took);
	assert_int_equal(rd2.rc, 4096);
	expect_obj(rd2.buf, 304 * K, 4096);
	expect_call(e, 5, 304 * K, 16 * K);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	/* the thread ends its fetch, skips the taken piece and the dropped
	 * lead, and fetches the two pieces after them, and [132, 196) that
	 * the read at 76 KiB queued (within a window of the first stream,
	 * it continued it) */
	await_present(f, "0-200704,307200-370788");
	assert_int_equal(fake_calls(e), 9);
	assert_int_equal(data_read(f, buf, 100, 330 * K), 100);
	expect_fill(buf, 'W', 100);
	data_put(f);
}

static void test_a_write_waits_for_the_fetch_it_lands_on(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct reader rd;
	struct writer wr = {.off = 1000, .len = 1000};
	unsigned char buf[8192];
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	race_fetch(e, f, &wr, &rd);
	assert_int_equal(wr.rc, 1000);
	assert_int_equal(rd.rc, 8192); /* fetched before the write: */
	expect_obj(rd.buf, 0, 1000);   /* either content in [1000, 2000) */
	expect_obj(rd.buf + 2000, 2000, 8192 - 2000);
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), 8192);
	expect_obj(buf, 0, 1000);
	expect_fill(buf + 1000, 'W', 1000);
	expect_obj(buf + 2000, 2000, 8192 - 2000);
	assert_int_equal(e->fk.calls, 1);
	expect_present(f, "0-8192");
	expect_dirty(f, "1000-2000");
	data_put(f);
	reopen(e); /* and so the log says */
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	memset(buf, 0, sizeof(buf));
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), 8192);
	expect_fill(buf + 1000, 'W', 1000);
	expect_dirty(f, "1000-2000");
	data_put(f);
}

/* A truncate that cuts into a fetch waits for it too: else the fetch
 * writes past the cut, and a later grow reads its bytes, not zeros. */
static void test_a_truncate_into_a_fetch_waits_for_it(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct reader rd;
	struct writer wr = {.truncate_to = 4000};
	unsigned char buf[8192];
	assert_int_equal(data_get(e->d, 1, 65536, &f), 0);
	race_fetch(e, f, &wr, &rd);
	assert_int_equal(wr.rc, 0);
	assert_int_equal(data_size(f), 4000);
	expect_present(f, "0-4000");
	assert_int_equal(data_truncate(f, 8192), 0);
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), 8192);
	expect_obj(buf, 0, 4000);
	expect_fill(buf + 4000, 0, 8192 - 4000);
	assert_int_equal(e->fk.calls, 1);
	data_put(f);
}

/* ---- rewrites, which write the cache file with the lock dropped ---- */

#define REWRITE_LEN (32u << 20) /* a pwrite of some milliseconds */

struct rewriter {
	struct data_file *f;
	const unsigned char *buf;
	int started, done; /* atomics */
	ssize_t n;
};

static void *rewriter_main(void *arg)
{
	struct rewriter *r = arg;
	__atomic_store_n(&r->started, 1, __ATOMIC_SEQ_CST);
	r->n = data_write(r->f, r->buf, REWRITE_LEN, 0);
	__atomic_store_n(&r->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* A file whose [0, REWRITE_LEN) is dirty 'A', and a thread rewriting it
 * with 'X', started (most likely inside its pwrite when this returns). */
static struct data_file *start_rewrite(struct env *e, uint64_t ino,
				       struct rewriter *r, pthread_t *th)
{
	struct data_file *f;
	unsigned char *a = malloc(REWRITE_LEN);
	assert_non_null(a);
	memset(a, 'A', REWRITE_LEN);
	assert_int_equal(data_get(e->d, ino, 0, &f), 0);
	assert_int_equal(data_write(f, a, REWRITE_LEN, 0), REWRITE_LEN);
	free(a);
	unsigned char *x = malloc(REWRITE_LEN);
	assert_non_null(x);
	memset(x, 'X', REWRITE_LEN);
	*r = (struct rewriter){.f = f, .buf = x};
	assert_int_equal(pthread_create(th, NULL, rewriter_main, r), 0);
	while (!__atomic_load_n(&r->started, __ATOMIC_SEQ_CST))
		usleep(100);
	usleep(1000);
	return f;
}

static void end_rewrite(struct rewriter *r, pthread_t th)
{
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(r->n, REWRITE_LEN);
	free((void *)r->buf);
}

/* A truncate waits for a rewrite in flight: else the rest of the pwrite
 * lands past the cut, and the write's end brings the old size back over
 * zeros. Either order is fine; a mix is not. */
static void test_a_truncate_waits_for_a_rewrite_in_flight(void **state)
{
	struct env *e = *state;
	unsigned char *got = malloc(REWRITE_LEN);
	assert_non_null(got);
	for (uint64_t ino = 1; ino <= 3; ino++) {
		struct rewriter r;
		pthread_t th;
		struct data_file *f = start_rewrite(e, ino, &r, &th);
		assert_int_equal(data_truncate(f, 0), 0);
		end_rewrite(&r, th);
		uint64_t size = data_size(f);
		if (size != 0) { /* the truncate came first */
			assert_int_equal(size, REWRITE_LEN);
			assert_int_equal(data_read(f, got, REWRITE_LEN, 0),
					 REWRITE_LEN);
			for (size_t i = 0; i < REWRITE_LEN; i += 4096)
				assert_int_equal(got[i], 'X');
		}
		data_put(f);
	}
	free(got);
}

/* An upload that snapshots and cleans the range while a rewrite of it
 * writes may have read old bytes: the rewrite leaves it dirty. */
static void test_a_rewrite_an_upload_cleaned_meanwhile_stays_dirty(void **state)
{
	struct env *e = *state;
	int raced = 0;
	for (uint64_t ino = 1; ino <= 5; ino++) {
		struct rewriter r;
		pthread_t th;
		struct ranges snap = RANGES_INIT;
		struct data_file *f = start_rewrite(e, ino, &r, &th);
		assert_int_equal(data_dirty(f, &snap), 0);
		/* asked after the snapshot: a rewrite that ended before it
		 * is in what the upload sends, and rightly cleaned */
		int before = !__atomic_load_n(&r.done, __ATOMIC_SEQ_CST);
		assert_int_equal(data_mark_clean(f, &snap), 0);
		ranges_free(&snap);
		end_rewrite(&r, th);
		data_put(f);
		if (before) { /* the upload began before the rewrite ended */
			raced++;
			reopen(e); /* and the log says so */
			assert_int_equal(data_get(e->d, ino, REWRITE_LEN, &f),
					 0);
			expect_dirty(f, "0-33554432");
			data_put(f);
		}
	}
	assert_true(raced > 0);
}

static void
test_mark_clean_keeps_ranges_written_after_snapshot_dirty(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	unsigned char w[8192];
	memset(w, 'a', sizeof(w));
	assert_int_equal(data_get(e->d, 1, 0, &f), 0);
	assert_int_equal(data_write(f, w, 8192, 0), 8192);
	assert_int_equal(data_dirty(f, &snap), 0); /* the upload starts */
	expect_encoding(&snap, "0-8192");
	assert_int_equal(data_write(f, w, 904, 4096), 904); /* during it */
	assert_int_equal(data_truncate(f, 10000), 0);	    /* grows: dirty */
	assert_int_equal(data_mark_clean(f, &snap), 0);	    /* it is done */
	ranges_free(&snap);
	expect_dirty(f, "4096-5000,8192-10000");
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 10000);
	assert_int_equal(dirty, 904 + 1808);
	/* the next upload, with no write during it, cleans everything */
	assert_int_equal(data_dirty(f, &snap), 0);
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	expect_dirty(f, "");
	expect_present(f, "0-10000");
	data_put(f);
	reopen(e); /* the D- records were logged */
	assert_int_equal(data_get(e->d, 1, 10000, &f), 0);
	expect_dirty(f, "");
	expect_present(f, "0-10000");
	data_put(f);
}

static off_t log_size(struct env *e, const char *name)
{
	return stat_of(e, name).st_size;
}

static void test_a_rewrite_of_dirty_bytes_adds_no_log_line(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	unsigned char w[8192], r[1000];
	memset(w, 'a', sizeof(w));
	assert_int_equal(data_get(e->d, 4, 0, &f), 0);
	assert_int_equal(data_write(f, w, 8192, 0), 8192);
	off_t logged = log_size(e, "4.log");
	memset(w, 'b', sizeof(w));
	assert_int_equal(data_write(f, w, 1000, 1000), 1000);
	assert_int_equal(log_size(e, "4.log"), logged);
	/* an upload's snapshot, a rewrite during it: still no line, and
	 * the rewritten bytes stay dirty when the upload is done */
	assert_int_equal(data_dirty(f, &snap), 0);
	memset(w, 'c', sizeof(w));
	assert_int_equal(data_write(f, w, 1000, 3000), 1000);
	assert_int_equal(log_size(e, "4.log"), logged);
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	expect_dirty(f, "3000-4000");
	/* bytes no longer dirty, or past the size, are logged */
	logged = log_size(e, "4.log");
	assert_int_equal(data_write(f, w, 1000, 5000), 1000);
	assert_true(log_size(e, "4.log") > logged);
	logged = log_size(e, "4.log");
	assert_int_equal(data_write(f, w, 1000, 7692), 1000);
	assert_true(log_size(e, "4.log") > logged);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 4, 8692, &f), 0);
	expect_dirty(f, "3000-4000,5000-6000,7692-8692");
	expect_present(f, "0-8692");
	assert_int_equal(data_read(f, r, 1000, 1000), 1000);
	expect_fill(r, 'b', 1000);
	assert_int_equal(data_read(f, r, 1000, 3000), 1000);
	expect_fill(r, 'c', 1000);
	data_put(f);
}

static void test_a_write_across_chunk_boundaries_lands_whole(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	/* data.c writes in aligned 64 KiB pieces: this one starts inside
	 * one, spans three, and ends inside a fifth */
	const size_t len = 4 * 65536 + 777;
	const uint64_t off = 65536 - 123;
	unsigned char *w = malloc(len), *r = malloc(len);
	assert_non_null(w);
	assert_non_null(r);
	for (size_t i = 0; i < len; i++)
		w[i] = (unsigned char)(i * 7 + i / 65536);
	assert_int_equal(data_get(e->d, 6, 0, &f), 0);
	assert_int_equal(data_write(f, w, len, off), (ssize_t)len);
	assert_int_equal(data_size(f), off + len);
	expect_dirty(f, "0-328334"); /* with the zeros before it */
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 6, off + len, &f), 0);
	assert_int_equal(data_read(f, r, len, off), (ssize_t)len);
	assert_memory_equal(r, w, len);
	data_put(f);
	free(w);
	free(r);
}

static void test_close_and_reopen_restore_sets_data_and_usage(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	unsigned char buf[30000], w[3000];
	memset(w, 'q', sizeof(w));
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	assert_int_equal(data_read(f, buf, 20000, 0), 20000);
	assert_int_equal(data_write(f, w, 3000, 50000), 3000);
	assert_int_equal(data_write(f, w, 3000, 10000), 3000);
	assert_int_equal(data_dirty(f, &snap), 0);
	assert_int_equal(data_write(f, w, 10, 50000), 10);
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	assert_int_equal(data_truncate(f, 52000), 0);
	expect_present(f, "0-20000,50000-52000");
	expect_dirty(f, "50000-50010");
	assert_int_equal(data_sync(f), 0);
	data_put(f);
	uint64_t c0, d0, c1, d1;
	data_usage(e->d, &c0, &d0);
	reopen(e);
	data_usage(e->d, &c1, &d1);
	assert_int_equal(c1, c0);
	assert_int_equal(d1, d0);
	assert_int_equal(c1, 22000);
	assert_int_equal(d1, 10);
	int calls = e->fk.calls;
	assert_int_equal(data_get(e->d, 3, 52000, &f), 0);
	expect_present(f, "0-20000,50000-52000");
	expect_dirty(f, "50000-50010");
	assert_int_equal(data_size(f), 52000);
	assert_int_equal(data_read(f, buf, 20000, 0), 20000);
	expect_obj(buf, 0, 10000);
	expect_fill(buf + 10000, 'q', 3000);
	expect_obj(buf + 13000, 13000, 7000);
	assert_int_equal(data_read(f, buf, 5000, 50000), 2000);
	expect_fill(buf, 'q', 2000);
	assert_int_equal(e->fk.calls, calls); /* nothing fetched */
	data_put(f);
}

/* After a restart, the files with dirty bytes and the sizes their logs
 * (or ".new" files) give: what fs.c takes back into a store that a
 * power loss rolled back. A clean file is not listed. */
static void test_a_reopened_cache_lists_its_dirty_files_with_sizes(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char w[5000], buf[100];
	memset(w, 'w', sizeof(w));
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0); /* logged */
	assert_int_equal(data_write(f, w, 5000, 100000), 5000);
	assert_int_equal(data_sync(f), 0);
	data_put(f);
	assert_int_equal(data_create(e->d, 4, &f), 0); /* ".new" */
	assert_int_equal(data_write(f, w, 4000, 0), 4000);
	assert_int_equal(data_truncate(f, 4100), 0);
	data_put(f);
	assert_int_equal(data_get(e->d, 5, 100000, &f), 0); /* clean */
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), sizeof(buf));
	data_put(f);
	reopen(e);
	struct data_dirty_file *v;
	size_t n;
	assert_int_equal(data_dirty_files(e->d, &v, &n), 0);
	assert_int_equal(n, 2);
	if (v[0].ino != 3) { /* hash order */
		struct data_dirty_file t = v[0];
		v[0] = v[1];
		v[1] = t;
	}
	assert_int_equal(v[0].ino, 3);
	assert_int_equal(v[0].size, 105000);
	assert_int_equal(v[1].ino, 4);
	assert_int_equal(v[1].size, 4100);
	free(v);
}

/* The cache dir as a power loss leaves it: the last open's files on the
 * disk, no "synced" from a clean close, and the next open in a new boot
 * (boot). The disk kept the logs but not the bytes of the cache files
 * named in lose (zeroed, as unwritten blocks read). */
static void power_loss(struct env *e, const char *boot, const uint64_t *lose,
		       size_t nlose)
{
	char path[128];
	data_close(e->d);
	e->d = NULL;
	snprintf(path, sizeof(path), "%s/synced", e->dir);
	assert_int_equal(unlink(path), 0);
	for (size_t i = 0; i < nlose; i++) {
		snprintf(path, sizeof(path), "%s/%" PRIu64, e->dir, lose[i]);
		struct stat st;
		assert_int_equal(stat(path, &st), 0);
		assert_int_equal(truncate(path, 0), 0);
		assert_int_equal(truncate(path, st.st_size), 0);
	}
	e->cfg.boot_id = boot;
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
}

/* ino (of 100000 bytes) holds present, and its first len bytes are
 * read from the cache, with no fetch. */
static void expect_served_from_cache(struct env *e, uint64_t ino,
				     const char *present, size_t len)
{
	struct data_file *f;
	unsigned char buf[20000];
	assert_true(len <= sizeof(buf));
	int calls = e->fk.calls;
	assert_int_equal(data_get(e->d, ino, 100000, &f), 0);
	expect_present(f, present);
	assert_int_equal(data_read(f, buf, len, 0), (ssize_t)len);
	expect_obj(buf, 0, len);
	assert_int_equal(e->fk.calls, calls);
	data_put(f);
}

/* A power loss can keep a log's "P+" line and lose the fetched bytes it
 * speaks of: the open in the next boot serves no clean byte from the
 * cache (it fetches them again) and keeps every dirty one. */
static void test_after_a_power_loss_only_dirty_bytes_are_kept(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char w[3000], buf[20000];
	memset(w, 'q', sizeof(w));
	e->cfg.boot_id = "boot-a";
	reopen(e);
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	assert_int_equal(data_read(f, buf, 20000, 0), 20000);
	assert_int_equal(data_write(f, w, 3000, 50000), 3000);
	assert_int_equal(data_sync(f), 0);
	data_put(f);
	assert_int_equal(data_get(e->d, 4, 100000, &f), 0); /* clean only */
	assert_int_equal(data_read(f, buf, 10000, 0), 10000);
	data_put(f);
	assert_int_equal(data_create(e->d, 5, &f), 0); /* ".new": all dirty */
	assert_int_equal(data_write(f, w, 3000, 0), 3000);
	data_put(f);

	/* the disk kept the writes (fsynced) but not the fetched bytes */
	uint64_t lose[] = {4};
	power_loss(e, "boot-b", lose, 1);
	assert_false(file_exists(e, "4.log"));
	assert_false(file_exists(e, "4"));
	assert_false(file_exists(e, "synced"));
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 6000);
	assert_int_equal(dirty, 6000);
	int calls = e->fk.calls;
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	expect_present(f, "50000-53000");
	expect_dirty(f, "50000-53000");
	assert_int_equal(data_read(f, buf, 20000, 0), 20000);
	expect_obj(buf, 0, 20000);
	assert_true(e->fk.calls > calls);
	assert_int_equal(data_read(f, buf, 3000, 50000), 3000);
	expect_fill(buf, 'q', 3000);
	data_put(f);
	calls = e->fk.calls;
	assert_int_equal(data_get(e->d, 4, 100000, &f), 0);
	expect_present(f, "");
	assert_int_equal(data_read(f, buf, 10000, 0), 10000);
	expect_obj(buf, 0, 10000); /* fetched again, not the lost zeros */
	assert_true(e->fk.calls > calls);
	data_put(f);
	assert_int_equal(data_get(e->d, 5, 3000, &f), 0);
	expect_dirty(f, "0-3000");
	data_put(f);

	/* the boot is recorded: a killed process later in it keeps what
	 * was fetched since */
	power_loss(e, "boot-b", NULL, 0);
	expect_served_from_cache(e, 3, "0-20000,50000-53000", 20000);
}

/* A clean close flushes everything and says so ("synced"): the open in a
 * new boot keeps the cache whole, and takes the marker away first, so a
 * power loss later is noticed. */
static void test_after_a_clean_close_a_new_boot_keeps_the_cache(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[10000];
	e->cfg.boot_id = "boot-a";
	reopen(e);
	assert_int_equal(data_get(e->d, 4, 100000, &f), 0);
	assert_int_equal(data_read(f, buf, 10000, 0), 10000);
	data_put(f);
	data_close(e->d);
	e->d = NULL;
	assert_true(file_exists(e, "synced"));
	e->cfg.boot_id = "boot-b";
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_false(file_exists(e, "synced"));
	expect_served_from_cache(e, 4, "0-10000", 10000);
}

/* A log the load cannot rewrite after a power loss (a full disk; here
 * a file size limit) leaves the cache trimmed in memory, but neither
 * records the boot nor says "synced" at close: the next open trims
 * again, and then records it. */
static void
test_a_trim_the_disk_cannot_take_is_done_again_next_open(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char w[3000], buf[20000];
	memset(w, 'q', sizeof(w));
	e->cfg.boot_id = "boot-a";
	reopen(e);
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	assert_int_equal(data_read(f, buf, 20000, 0), 20000);
	assert_int_equal(data_write(f, w, 3000, 50000), 3000);
	assert_int_equal(data_sync(f), 0);
	data_put(f);

	struct rlimit was, small = {16, 16};
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &was), 0);
	small.rlim_max = was.rlim_max;
	void (*sig)(int) = signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
	power_loss(e, "boot-b", NULL, 0);
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &was), 0);
	signal(SIGXFSZ, sig);
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	expect_present(f, "50000-53000");
	data_put(f);
	data_close(e->d);
	e->d = NULL;
	assert_false(file_exists(e, "synced"));

	e->cfg.boot_id = "boot-b";
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_get(e->d, 3, 100000, &f), 0);
	expect_present(f, "50000-53000");
	data_put(f);
	char path[128], id[16] = "";
	snprintf(path, sizeof(path), "%s/boot", e->dir);
	FILE *fp = fopen(path, "r");
	assert_non_null(fp);
	assert_non_null(fgets(id, sizeof(id), fp));
	fclose(fp);
	assert_string_equal(id, "boot-b\n");
}

static void test_clean_file_adopts_callers_size_on_get(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	assert_int_equal(data_get(e->d, 4, 8192, &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	data_put(f);
	assert_int_equal(data_get(e->d, 4, 2048, &f), 0);
	assert_int_equal(data_size(f), 2048);
	expect_present(f, "0-2048");
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 4, 2048, &f), 0);
	expect_present(f, "0-2048");
	data_put(f);
}

static unsigned char crash_byte(uint64_t i, uint64_t j)
{
	return (unsigned char)(1 + (i * 7 + j) % 253);
}

#define CRASH_W 512

/* The child: writes record i at i * CRASH_W, reporting each completed
 * write on fd, until n writes (then it kills itself) or it is killed. */
static void crash_child(struct env *e, int fd, uint64_t n, int fresh)
{
	struct data *d;
	struct data_file *f;
	unsigned char w[CRASH_W];
	if (data_open(&e->cfg, &d) ||
	    (fresh ? data_create(d, 7, &f) : data_get(d, 7, 0, &f)))
		_exit(2);
	for (uint64_t i = 0; i < n; i++) {
		for (uint64_t j = 0; j < CRASH_W; j++)
			w[j] = crash_byte(i, j);
		if (data_write(f, w, CRASH_W, i * CRASH_W) != CRASH_W)
			_exit(3);
		uint32_t done = (uint32_t)i + 1;
		if (fd >= 0 && write(fd, &done, sizeof(done)) != sizeof(done))
			_exit(4);
	}
	raise(SIGKILL);
	_exit(5);
}

/* Every one of the first `done` writes is present, dirty and intact;
 * any later one that the log records is intact too. */
static void expect_crash_writes(struct env *e, uint64_t done, uint64_t max)
{
	struct data_file *f;
	struct ranges p = RANGES_INIT, dr = RANGES_INIT, none = RANGES_INIT;
	unsigned char buf[CRASH_W];
	assert_int_equal(data_get(e->d, 7, 0, &f), 0);
	assert_int_equal(data_present(f, &p), 0);
	assert_int_equal(data_dirty(f, &dr), 0);
	assert_int_equal(data_mark_clean(f, &none), 0);
	assert_true(ranges_contains(&dr, 0, done * CRASH_W));
	assert_true(data_size(f) >= done * CRASH_W);
	for (uint64_t i = 0; i < max; i++) {
		if (!ranges_contains(&dr, i * CRASH_W, (i + 1) * CRASH_W)) {
			assert_true(i >= done);
			continue;
		}
		assert_true(
			ranges_contains(&p, i * CRASH_W, (i + 1) * CRASH_W));
		assert_int_equal(data_read(f, buf, CRASH_W, i * CRASH_W),
				 CRASH_W);
		for (uint64_t j = 0; j < CRASH_W; j++)
			if (buf[j] != crash_byte(i, j))
				fail_msg("write %llu byte %llu",
					 (unsigned long long)i,
					 (unsigned long long)j);
	}
	assert_int_equal(e->fk.calls, 0); /* all of it was local */
	ranges_free(&p);
	ranges_free(&dr);
	data_put(f);
}

static void test_kill9_after_writes_loses_no_completed_write(void **state)
{
	struct env *e = *state;
	data_close(e->d); /* one process at a time owns the directory */
	e->d = NULL;
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		crash_child(e, -1, 300, 0);
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	expect_crash_writes(e, 300, 300);
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 300 * CRASH_W);
	assert_int_equal(dirty, 300 * CRASH_W);
}

static void kill9_mid_stream(struct env *e, int fresh)
{
	int p[2];
	const uint64_t max = 20000; /* crosses several log compactions */
	data_close(e->d);
	e->d = NULL;
	assert_int_equal(pipe(p), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(p[0]);
		crash_child(e, p[1], max, fresh);
	}
	close(p[1]);
	uint32_t done = 0, v;
	while (done < 6000 && read(p[0], &v, sizeof(v)) == sizeof(v))
		done = v;
	assert_int_equal(kill(pid, SIGKILL), 0); /* while it writes on */
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	while (read(p[0], &v, sizeof(v)) == sizeof(v))
		done = v; /* reported before the kill */
	close(p[0]);
	assert_true(done >= 6000);
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	expect_crash_writes(e, done, max);
}

static void test_kill9_mid_stream_loses_no_completed_write(void **state)
{
	kill9_mid_stream(*state, 0);
}

/* The same for a file made by data_create(): no log, its size on disk */
static void test_kill9_mid_stream_of_a_new_file_loses_nothing(void **state)
{
	struct env *e = *state;
	kill9_mid_stream(e, 1);
	assert_true(file_exists(e, "7.new"));
	assert_false(file_exists(e, "7.log"));
}

static void append_to(struct env *e, const char *name, const char *text)
{
	int fd = open_in(e, name, O_WRONLY | O_APPEND | O_CREAT);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(close(fd), 0);
}

/* A file created here has no object behind it: one file on disk, no log,
 * every byte written dirty; a reopen finds it so, by its size. */
static void test_a_new_file_keeps_no_log_until_an_upload(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[8192];
	assert_int_equal(data_create(e->d, 5, &f), 0);
	assert_true(file_exists(e, "5.new"));
	assert_false(file_exists(e, "5.log"));
	assert_false(file_exists(e, "5"));
	memset(buf, 'a', sizeof(buf));
	assert_int_equal(data_write(f, buf, 8192, 0), 8192);
	/* past the end: the gap is the file's too (zeros), not an object's */
	assert_int_equal(data_write(f, buf, 100, 10000), 100);
	expect_dirty(f, "0-10100");
	assert_int_equal(data_truncate(f, 9000), 0);  /* shrink */
	assert_int_equal(data_truncate(f, 12000), 0); /* grow: zeros */
	assert_int_equal(data_sync(f), 0);
	expect_present(f, "0-12000");
	expect_dirty(f, "0-12000");
	assert_false(file_exists(e, "5.log"));
	data_put(f);
	reopen(e);
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 12000);
	assert_int_equal(dirty, 12000);
	assert_int_equal(data_get(e->d, 5, 12000, &f), 0);
	assert_int_equal(data_size(f), 12000);
	expect_dirty(f, "0-12000");
	assert_int_equal(data_read(f, buf, 8192, 4096), 12000 - 4096);
	expect_fill(buf, 'a', 4096);
	expect_fill(buf + 4096, 0, 12000 - 8192); /* the gap, then the grow */
	assert_int_equal(e->fk.calls, 0);	  /* nothing to fetch, ever */
	data_put(f);
	/* an empty one is clean: evicted like any clean closed file */
	assert_int_equal(data_create(e->d, 6, &f), 0);
	data_put(f);
	e->cfg.size_limit = 0;
	reopen(e);
	data_evict(e->d);
	assert_false(file_exists(e, "6.new"));
	assert_true(file_exists(e, "5.new")); /* dirty: never */
}

/* Its first upload's data_mark_clean() gives it a log and its usual
 * name; what was written during the upload stays dirty. */
static void test_an_upload_gives_a_new_file_its_log(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	unsigned char buf[4096];
	memset(buf, 'b', sizeof(buf));
	assert_int_equal(data_create(e->d, 5, &f), 0);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	assert_int_equal(data_write(f, buf, 4096, 4096), 4096);
	/* an upload that found nothing to clear leaves it as it is */
	expect_dirty(f, "0-8192");
	assert_true(file_exists(e, "5.new"));
	assert_int_equal(data_dirty(f, &snap), 0);
	assert_int_equal(data_write(f, buf, 100, 5000), 100); /* meanwhile */
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	assert_false(file_exists(e, "5.new"));
	assert_true(file_exists(e, "5.log"));
	assert_true(file_exists(e, "5"));
	expect_dirty(f, "5000-5100");
	/* from now on, a log file as any other: written lines are kept */
	assert_int_equal(data_write(f, buf, 10, 9000), 10);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 5, 9010, &f), 0);
	/* the gap past the end was zeros, written here like the rest */
	expect_present(f, "0-9010");
	expect_dirty(f, "5000-5100,8192-9010");
	assert_int_equal(data_read(f, buf, 4096, 4096), 4096);
	expect_fill(buf, 'b', 4096);
	data_put(f);
}

/* A crash between the two steps of that leaves "<ino>.new" beside the
 * log: data_open() renames it and believes the log, which is true. */
static void test_an_adoption_cut_short_is_finished_on_open(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	unsigned char buf[4096];
	char a[256], b[256];
	memset(buf, 'c', sizeof(buf));
	assert_int_equal(data_create(e->d, 5, &f), 0);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	assert_int_equal(data_dirty(f, &snap), 0);
	assert_int_equal(data_write(f, buf, 10, 4096), 10);
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	data_put(f);
	data_close(e->d);
	e->d = NULL;
	snprintf(a, sizeof(a), "%s/5", e->dir);
	snprintf(b, sizeof(b), "%s/5.new", e->dir);
	assert_int_equal(rename(a, b), 0); /* as before the rename */
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_false(file_exists(e, "5.new"));
	assert_true(file_exists(e, "5"));
	assert_int_equal(data_get(e->d, 5, 4106, &f), 0);
	expect_present(f, "0-4106");
	expect_dirty(f, "4096-4106");
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	expect_fill(buf, 'c', 4096);
	data_put(f);
}

/* An inode number used again (a crash lost the store's commit of the
 * first file): nothing of the earlier file survives into the new one. */
static void test_create_drops_what_an_earlier_file_left(void **state)
{
	struct env *e = *state;
	struct data_file *f, *g;
	unsigned char buf[4096];
	memset(buf, 'd', sizeof(buf));
	assert_int_equal(data_get(e->d, 5, 0, &f), 0);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	assert_int_equal(data_create(e->d, 5, &g), -EBUSY); /* still held */
	data_put(f);
	assert_int_equal(data_create(e->d, 5, &f), 0);
	assert_false(file_exists(e, "5.log"));
	assert_false(file_exists(e, "5"));
	assert_int_equal(data_size(f), 0);
	expect_dirty(f, "");
	data_put(f);
	/* a log no record knows of (an unlink that failed) goes too: beside
	 * a ".new" file it would read as an adoption */
	append_to(e, "9.log", "S 4096\nD+ 0 4096\n");
	assert_int_equal(data_create(e->d, 9, &f), 0);
	assert_false(file_exists(e, "9.log"));
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 9, 0, &f), 0);
	assert_int_equal(data_size(f), 0);
	data_put(f);
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(dirty, 0);
}

static void test_torn_last_log_line_is_ignored_and_cut_off(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char w[100];
	memset(w, 'z', sizeof(w));
	assert_int_equal(data_get(e->d, 2, 0, &f), 0);
	assert_int_equal(data_write(f, w, 100, 0), 100);
	data_put(f);
	data_close(e->d);
	e->d = NULL;
	append_to(e, "2.log", "D+ 500 90"); /* the crash tore this write */
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_get(e->d, 2, 100, &f), 0);
	expect_dirty(f, "0-100");
	assert_int_equal(data_size(f), 100);
	/* the next record must not be glued onto the torn one */
	assert_int_equal(data_write(f, w, 100, 200), 100);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 2, 300, &f), 0);
	expect_dirty(f, "0-300"); /* (the gap it left: zeros, dirty) */
	data_put(f);
	/* a garbled complete line is skipped, the rest still applies */
	data_close(e->d);
	e->d = NULL;
	append_to(e, "2.log", "X? what\nD+ 400 450\n");
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_get(e->d, 2, 450, &f), 0);
	expect_dirty(f, "0-300,400-450");
	data_put(f);
}

static void test_compaction_keeps_sets_and_data_identical(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges p0 = RANGES_INIT, d0 = RANGES_INIT, snap = RANGES_INIT;
	struct ranges none = RANGES_INIT;
	unsigned char buf[20000];
	assert_int_equal(data_get(e->d, 9, 40000, &f), 0);
	assert_int_equal(data_read(f, buf, 1000, 30000), 1000); /* P+ */
	for (uint64_t i = 0; i < 12000; i++) {
		unsigned char c = (unsigned char)('a' + i % 26);
		uint64_t off = i < 100 ? 20000 + 2 * i : i; /* some holes */
		assert_int_equal(data_write(f, &c, 1, off), 1);
		if (i == 6000) { /* and some D- records */
			assert_int_equal(data_dirty(f, &snap), 0);
			assert_int_equal(data_mark_clean(f, &snap), 0);
			ranges_free(&snap);
		}
	}
	struct stat st;
	char path[128];
	snprintf(path, sizeof(path), "%s/9.log", e->dir);
	assert_int_equal(stat(path, &st), 0);
	/* ~13 bytes a record, 12000 records: it was compacted */
	assert_true(st.st_size < (64 << 10));
	assert_false(file_exists(e, "9.log.tmp"));
	assert_int_equal(data_present(f, &p0), 0);
	assert_int_equal(data_dirty(f, &d0), 0);
	assert_int_equal(data_mark_clean(f, &none), 0);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 9, 40000, &f), 0);
	struct ranges p1 = RANGES_INIT, d1 = RANGES_INIT;
	assert_int_equal(data_present(f, &p1), 0);
	assert_int_equal(data_dirty(f, &d1), 0);
	assert_int_equal(data_mark_clean(f, &none), 0);
	struct buf a = BUF_INIT, b = BUF_INIT;
	assert_int_equal(ranges_encode(&p0, &a), 0);
	assert_int_equal(ranges_encode(&p1, &b), 0);
	assert_string_equal(a.data, b.data);
	buf_reset(&a);
	buf_reset(&b);
	assert_int_equal(ranges_encode(&d0, &a), 0);
	assert_int_equal(ranges_encode(&d1, &b), 0);
	assert_string_equal(a.data, b.data);
	buf_free(&a);
	buf_free(&b);
	assert_int_equal(data_read(f, buf, 12000, 0), 12000);
	for (uint64_t i = 100; i < 12000; i++)
		assert_int_equal(buf[i], 'a' + i % 26);
	ranges_free(&p0);
	ranges_free(&d0);
	ranges_free(&p1);
	ranges_free(&d1);
	data_put(f);
}

static void test_hydrate_all_fetches_every_missing_range(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	static unsigned char buf[100000];
	unsigned char w[1000];
	memset(w, 'h', sizeof(w));
	assert_int_equal(data_get(e->d, 1, 100000, &f), 0);
	assert_int_equal(data_read(f, buf, 10000, 40000), 10000);
	assert_int_equal(data_write(f, w, 1000, 70000), 1000);
	assert_int_equal(data_hydrate_all(f), 0);
	expect_present(f, "0-100000");
	assert_int_equal(e->fk.calls, 4);
	expect_call(e, 1, 0, 40000);
	expect_call(e, 2, 50000, 20000);
	expect_call(e, 3, 71000, 29000);
	assert_int_equal(data_read(f, buf, 100000, 0), 100000);
	expect_obj(buf, 0, 70000);
	expect_fill(buf + 70000, 'h', 1000);
	expect_obj(buf + 71000, 71000, 29000);
	assert_int_equal(e->fk.calls, 4);
	data_put(f);
}

/* Makes ino a closed file with `bytes` clean cached bytes. */
static void make_clean_file(struct env *e, uint64_t ino, size_t bytes)
{
	struct data_file *f;
	static unsigned char buf[8192];
	assert_int_equal(data_get(e->d, ino, bytes, &f), 0);
	assert_int_equal(data_read(f, buf, bytes, 0), (ssize_t)bytes);
	data_put(f);
}

static void test_evict_drops_least_recently_used_down_to_limit(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	e->cfg.size_limit = 8192;
	reopen(e);
	make_clean_file(e, 1, 4096);
	make_clean_file(e, 2, 4096);
	make_clean_file(e, 3, 4096);
	assert_int_equal(data_get(e->d, 1, 4096, &f), 0); /* 1 is used */
	data_put(f);
	/* LRU order is now 2, 3, 1: one file must go, and it is 2 */
	assert_int_equal(data_evict(e->d), 4096);
	assert_false(file_exists(e, "2"));
	assert_false(file_exists(e, "2.log"));
	assert_true(file_exists(e, "1") && file_exists(e, "3"));
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 8192);
	assert_int_equal(data_evict(e->d), 0); /* under the limit */
	/* an evicted file comes back ABSENT */
	assert_int_equal(data_get(e->d, 2, 4096, &f), 0);
	expect_present(f, "");
	data_put(f);
}

static void test_evict_never_drops_open_or_dirty_files(void **state)
{
	struct env *e = *state;
	struct data_file *held, *f;
	unsigned char w[100] = {0};
	e->cfg.size_limit = 0;
	reopen(e);
	make_clean_file(e, 1, 4096);
	assert_int_equal(data_get(e->d, 1, 4096, &held), 0); /* open */
	assert_int_equal(data_get(e->d, 2, 0, &f), 0);
	assert_int_equal(data_write(f, w, 100, 0), 100); /* dirty */
	data_put(f);
	make_clean_file(e, 3, 4096);
	assert_int_equal(data_evict(e->d), 4096); /* only 3 */
	assert_true(file_exists(e, "1") && file_exists(e, "2"));
	assert_false(file_exists(e, "3"));
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 4096 + 100);
	assert_int_equal(dirty, 100);
	data_put(held); /* now closed and clean: it may go */
	assert_int_equal(data_evict(e->d), 4096);
	assert_false(file_exists(e, "1"));
	assert_true(file_exists(e, "2"));
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 100);
}

static void test_free_floor_evicts_clean_closed_files(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char w[10] = {0};
	e->cfg.free_floor = UINT64_MAX; /* can never be met */
	reopen(e);
	make_clean_file(e, 1, 4096);
	make_clean_file(e, 2, 2048);
	assert_int_equal(data_get(e->d, 3, 0, &f), 0);
	assert_int_equal(data_write(f, w, 10, 0), 10);
	data_put(f);
	assert_int_equal(data_evict(e->d), 4096 + 2048);
	assert_true(file_exists(e, "3"));
	assert_false(file_exists(e, "1") || file_exists(e, "2"));
}

static void test_reopen_orders_lru_by_log_mtime(void **state)
{
	struct env *e = *state;
	make_clean_file(e, 1, 4096);
	make_clean_file(e, 2, 4096);
	make_clean_file(e, 3, 4096);
	data_close(e->d);
	e->d = NULL;
	/* 3 is the oldest, then 1, then 2 */
	const uint64_t order[3] = {3, 1, 2};
	for (int i = 0; i < 3; i++) {
		char name[32];
		snprintf(name, sizeof(name), "%llu.log",
			 (unsigned long long)order[i]);
		struct timespec ts[2] = {{1000000 + i, 0}, {1000000 + i, 0}};
		int dfd = open(e->dir, O_RDONLY | O_DIRECTORY);
		assert_true(dfd >= 0);
		assert_int_equal(utimensat(dfd, name, ts, 0), 0);
		close(dfd);
	}
	e->cfg.size_limit = 8192;
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_evict(e->d), 4096);
	assert_false(file_exists(e, "3"));
	assert_true(file_exists(e, "1") && file_exists(e, "2"));
}

static void test_remove_deletes_dirty_open_file_and_its_log(void **state)
{
	struct env *e = *state;
	struct data_file *f, *g;
	unsigned char w[100], buf[100];
	memset(w, 'r', sizeof(w));
	assert_int_equal(data_get(e->d, 5, 0, &f), 0);
	assert_int_equal(data_write(f, w, 100, 0), 100);
	assert_int_equal(data_remove(e->d, 5), 0);
	assert_false(file_exists(e, "5") || file_exists(e, "5.log"));
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 0);
	assert_int_equal(dirty, 0);
	/* the open reference still works (unlink while open) ... */
	assert_int_equal(data_write(f, w, 100, 100), 100);
	assert_int_equal(data_read(f, buf, 100, 0), 100);
	expect_fill(buf, 'r', 100);
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(dirty, 0);
	/* ... and a reused inode number starts empty */
	assert_int_equal(data_get(e->d, 5, 0, &g), 0);
	expect_present(g, "");
	data_put(f);
	data_put(g);
	assert_int_equal(data_remove(e->d, 12345), 0); /* not cached: fine */
	reopen(e);
	assert_int_equal(data_get(e->d, 5, 0, &g), 0);
	expect_present(g, "");
	data_put(g);
}

static void test_drop_clean_spares_open_and_dirty_files(void **state)
{
	struct env *e = *state;
	struct data_file *f, *held;
	unsigned char w[10] = {0};
	make_clean_file(e, 1, 4096);
	assert_int_equal(data_get(e->d, 1, 4096, &held), 0);
	assert_int_equal(data_drop_clean(e->d, 1), -EBUSY); /* open */
	assert_true(file_exists(e, "1"));
	data_put(held);
	assert_int_equal(data_get(e->d, 2, 0, &f), 0);
	assert_int_equal(data_write(f, w, 10, 0), 10);
	data_put(f);
	assert_int_equal(data_drop_clean(e->d, 2), -EBUSY); /* dirty */
	assert_true(file_exists(e, "2") && file_exists(e, "2.log"));
	/* clean and closed: gone, and the next reader fetches afresh */
	assert_int_equal(data_drop_clean(e->d, 1), 0);
	assert_false(file_exists(e, "1") || file_exists(e, "1.log"));
	assert_int_equal(data_drop_clean(e->d, 777), 0); /* never cached */
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 10);
	assert_int_equal(data_get(e->d, 1, 4096, &f), 0);
	expect_present(f, "");
	data_put(f);
}

static void test_mark_dirty_all_needs_a_full_file_and_pins_it(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[64];
	assert_int_equal(data_get(e->d, 4, 8192, &f), 0);
	assert_int_equal(data_read(f, buf, sizeof(buf), 0), 64);
	assert_int_equal(data_mark_dirty_all(f), -EAGAIN); /* partial */
	assert_int_equal(data_hydrate_all(f), 0);
	assert_int_equal(data_mark_dirty_all(f), 0);
	expect_dirty(f, "0-8192");
	data_put(f);
	e->cfg.size_limit = 0;
	reopen(e); /* the log says so after a restart too */
	assert_int_equal(data_evict(e->d), 0); /* dirty: never evicted */
	assert_int_equal(data_get(e->d, 4, 8192, &f), 0);
	expect_dirty(f, "0-8192");
	data_put(f);
}

/* The kernel writes a file open in passthrough: nothing is dirty until a
 * change is seen; what is seen is all dirty, past the old size too, and
 * stays dirty across an upload under way; a restart while such writes
 * may be going on (a killed worker) takes the size on disk, all dirty. */
static void
test_outside_writes_are_dirty_whole_and_outlive_a_crash(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	struct ranges snap = RANGES_INIT;
	make_clean_file(e, 5, 4096);
	assert_int_equal(data_get(e->d, 5, 4096, &f), 0);
	assert_int_equal(data_outside(f, DATA_OUTSIDE_BEGIN, 0), 0);
	expect_dirty(f, "");
	/* an upload takes its snapshot; the kernel writes past the end */
	assert_int_equal(data_dirty(f, &snap), 0);
	assert_int_equal(pwrite(data_fd(f), "xyz", 3, 6000), 3);
	assert_int_equal(data_outside(f, DATA_OUTSIDE_SEEN, 6003), 0);
	assert_int_equal(data_size(f), 6003);
	expect_present(f, "0-6003");
	expect_dirty(f, "0-6003");
	assert_int_equal(data_mark_clean(f, &snap), 0);
	ranges_free(&snap);
	expect_dirty(f, "0-6003"); /* seen during the upload: still owed */
	/* more, unseen, then the worker is killed: the next one takes the
	 * file as the disk has it */
	assert_int_equal(pwrite(data_fd(f), "more", 4, 8000), 4);
	data_put(f);
	reopen(e);
	assert_int_equal(data_get(e->d, 5, 0, &f), 0);
	assert_int_equal(data_size(f), 8004);
	expect_dirty(f, "0-8004");
	/* the last writer goes: the record says no one writes it now */
	assert_int_equal(data_outside(f, DATA_OUTSIDE_END, 0), 0);
	data_put(f);
	char path[128];
	snprintf(path, sizeof(path), "%s/5", e->dir);
	int fd = open(path, O_WRONLY);
	assert_int_equal(pwrite(fd, "late", 4, 9000), 4); /* not ours */
	assert_int_equal(close(fd), 0);
	reopen(e);
	assert_int_equal(data_get(e->d, 5, 0, &f), 0);
	assert_int_equal(data_size(f), 8004); /* not outside any more */
	data_put(f);
}

/* Writes in passthrough are stopped by making the cache file immutable;
 * a process killed meanwhile leaves it so, and the next open of the
 * cache must make it writable again, or its bytes are never uploaded
 * (data_get() opens it for writing). */
static void test_a_file_left_frozen_is_thawed_at_the_next_open(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	if (data_freeze_works(e->d) != 0)
		skip(); /* the test directory's disk has no immutable flag */
	assert_false(file_exists(e, "freeze-probe"));
	assert_false(file_exists(e, "frozen"));
	make_clean_file(e, 6, 4096);
	assert_int_equal(data_get(e->d, 6, 4096, &f), 0);
	assert_int_equal(data_outside(f, DATA_OUTSIDE_BEGIN, 0), 0);
	assert_int_equal(data_freeze(f, 1), 0);
	assert_true(file_exists(e, "frozen"));
	errno = 0;
	assert_int_equal(pwrite(data_fd(f), "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	data_put(f);
	reopen(e); /* never thawed: the process was killed */
	assert_false(file_exists(e, "frozen"));
	assert_int_equal(data_get(e->d, 6, 0, &f), 0);
	assert_int_equal(pwrite(data_fd(f), "y", 1, 4096), 1);
	assert_int_equal(data_outside(f, DATA_OUTSIDE_SEEN, 4097), 0);
	expect_dirty(f, "0-4097");
	/* a freeze undone in time leaves the file writable, no marker
	 * needed at the next open either way */
	assert_int_equal(data_freeze(f, 1), 0);
	assert_int_equal(data_freeze(f, 0), 0);
	assert_int_equal(pwrite(data_fd(f), "z", 1, 0), 1);
	data_put(f);
	/* a file made here and never uploaded (".new", all dirty): the
	 * thaw must leave the load able to find it */
	unsigned char x[8192];
	memset(x, 'n', sizeof(x));
	assert_int_equal(data_create(e->d, 7, &f), 0);
	assert_int_equal(data_write(f, x, sizeof(x), 0), sizeof(x));
	assert_int_equal(data_freeze(f, 1), 0);
	data_put(f);
	reopen(e);
	assert_false(file_exists(e, "frozen"));
	assert_int_equal(data_get(e->d, 7, 0, &f), 0);
	assert_int_equal(data_size(f), sizeof(x));
	expect_dirty(f, "0-8192");
	data_put(f);
}

static void test_open_drops_strays_and_keeps_valid_files(void **state)
{
	struct env *e = *state;
	make_clean_file(e, 1, 4096);
	data_close(e->d);
	e->d = NULL;
	append_to(e, "99", "data with no log");
	append_to(e, "98.log", "P+ 0 10\n"); /* a log with no data */
	append_to(e, "1.log.tmp", "S 0\n");  /* an unfinished compaction */
	append_to(e, "notes.txt", "not ours");
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_false(file_exists(e, "99") || file_exists(e, "98.log") ||
		     file_exists(e, "1.log.tmp"));
	assert_true(file_exists(e, "1") && file_exists(e, "notes.txt"));
	uint64_t cached, dirty;
	data_usage(e->d, &cached, &dirty);
	assert_int_equal(cached, 4096);
	assert_int_equal(dirty, 0);
}

/* ---- spares ---- */

static int count_spares(struct env *e)
{
	char name[32];
	int n = 0;
	for (int i = 0; i < 64; i++) {
		snprintf(name, sizeof(name), ".spare.%d", i);
		n += file_exists(e, name);
	}
	return n;
}

/* ino's file, created here with 4 KiB of 'a' written. */
static void make_new_file(struct env *e, uint64_t ino)
{
	struct data_file *f;
	unsigned char buf[4096];
	memset(buf, 'a', sizeof(buf));
	assert_int_equal(data_create(e->d, ino, &f), 0);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	data_put(f);
}

/* A removed file's cache file and log are emptied and kept; the next new
 * files take those inodes, empty, rather than allocate (a journal-less
 * ext4 scans recently freed inodes on every allocation). */
static void test_new_files_take_the_emptied_files_of_removed_ones(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	memset(buf, 'a', sizeof(buf));
	make_new_file(e, 5);
	ino_t was = stat_of(e, "5.new").st_ino;
	assert_int_equal(data_remove(e->d, 5), 0);
	assert_false(file_exists(e, "5.new"));
	struct stat sp = stat_of(e, ".spare.0");
	assert_int_equal(sp.st_ino, was);
	assert_int_equal(sp.st_size, 0);
	assert_int_equal(sp.st_blocks, 0); /* its bytes are free */
	assert_int_equal(data_create(e->d, 6, &f), 0);
	assert_int_equal(stat_of(e, "6.new").st_ino, was);
	assert_false(file_exists(e, ".spare.0"));
	assert_int_equal(data_size(f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 0);
	data_put(f);

	/* a file with a log: both go, and a new one's log and file take
	 * them (which takes which does not matter) */
	make_clean_file(e, 1, 4096);
	ino_t a = stat_of(e, "1").st_ino, b = stat_of(e, "1.log").st_ino;
	assert_int_equal(data_remove(e->d, 1), 0);
	assert_int_equal(count_spares(e), 2);
	assert_int_equal(data_get(e->d, 2, 0, &f), 0);
	assert_int_equal(data_write(f, buf, 100, 0), 100);
	ino_t x = stat_of(e, "2").st_ino, y = stat_of(e, "2.log").st_ino;
	assert_true((x == a && y == b) || (x == b && y == a));
	assert_int_equal(count_spares(e), 0);
	data_put(f);
	reopen(e); /* and what the new file's log says holds */
	assert_int_equal(data_get(e->d, 2, 100, &f), 0);
	expect_dirty(f, "0-100");
	assert_int_equal(data_read(f, buf, 100, 0), 100);
	expect_fill(buf, 'a', 100);
	data_put(f);
}

/* The flags of name's first extent (FIEMAP), or -1 when the disk does not
 * say (not ext4, or nothing mapped). */
static int first_extent_flags(struct env *e, const char *name)
{
	int fd = open_in(e, name, O_RDONLY);
	struct {
		struct fiemap fm;
		struct fiemap_extent ext[1];
	} q;
	memset(&q, 0, sizeof(q));
	q.fm.fm_length = FIEMAP_MAX_OFFSET;
	q.fm.fm_extent_count = 1;
	int rc = ioctl(fd, FS_IOC_FIEMAP, &q.fm);
	assert_int_equal(close(fd), 0);
	return rc == 0 && q.fm.fm_mapped_extents == 1 ? (int)q.ext[0].fe_flags
						      : -1;
}

/* A new file that takes a spare is not one that ext4 writes out at its
 * next close (auto_da_alloc, for files truncated to 0): emptying the
 * spare through a descriptor closed at once clears that mark, and taking
 * it truncates nothing. With the mark, the user's close(2) of every new
 * file started its writeback, and allocated blocks its unlink freed. */
static void
test_a_file_made_from_a_spare_is_not_written_out_at_close(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	memset(buf, 'a', sizeof(buf));
	make_new_file(e, 5);
	assert_int_equal(data_remove(e->d, 5), 0);
	assert_int_equal(count_spares(e), 1);
	assert_int_equal(data_create(e->d, 6, &f), 0);
	assert_int_equal(count_spares(e), 0);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	/* another close of the file, as the kernel's of its passthrough
	 * file: with the mark, it allocates and writes the page out */
	assert_int_equal(close(open_in(e, "6.new", O_RDONLY)), 0);
	int flags = first_extent_flags(e, "6.new");
	data_put(f);
	if (flags < 0)
		skip(); /* the test directory's disk does not map extents */
	assert_true(flags & FIEMAP_EXTENT_DELALLOC); /* still in memory */
}

/* Eviction frees the bytes whether the files become spares or not; a
 * file still held open is unlinked, never emptied: its reader goes on. */
static void test_spares_hold_no_bytes_and_open_files_keep_theirs(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[4096];
	make_clean_file(e, 1, 4096);
	e->cfg.size_limit = 0;
	reopen(e);
	assert_int_equal(data_evict(e->d), 4096);
	assert_int_equal(count_spares(e), 2);
	for (int i = 0; i < 2; i++) {
		char name[32];
		snprintf(name, sizeof(name), ".spare.%d", i);
		assert_int_equal(stat_of(e, name).st_blocks, 0);
	}
	assert_int_equal(data_get(e->d, 3, 4096, &f), 0);
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	assert_int_equal(data_remove(e->d, 3), 0);
	assert_false(file_exists(e, "3") || file_exists(e, "3.log"));
	assert_int_equal(count_spares(e), 0); /* taken by 3, not given back */
	memset(buf, 0, sizeof(buf));
	assert_int_equal(data_read(f, buf, 4096, 0), 4096);
	expect_obj(buf, 0, 4096);
	data_put(f);
}

/* At most data_config.spares are kept; a reopen keeps those on disk up
 * to that, drops names it does not write, and a spare found holding
 * bytes (a crash) is emptied when it is taken. */
static void test_spares_are_bounded_and_outlive_a_reopen(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[64];
	e->cfg.spares = 2;
	reopen(e);
	for (uint64_t ino = 10; ino < 13; ino++) {
		assert_int_equal(data_create(e->d, ino, &f), 0);
		data_put(f);
	}
	for (uint64_t ino = 10; ino < 13; ino++)
		assert_int_equal(data_remove(e->d, ino), 0);
	/* 10 and 11 made .spare.0 and .spare.1; 12 was unlinked */
	assert_true(file_exists(e, ".spare.0") && file_exists(e, ".spare.1"));
	assert_int_equal(count_spares(e), 2);
	assert_false(file_exists(e, "12.new"));
	data_close(e->d);
	e->d = NULL;
	append_to(e, ".spare.9", "bytes a crash left");
	append_to(e, ".spare.x", "not a name we write");
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_false(file_exists(e, ".spare.x"));
	assert_int_equal(count_spares(e), 2); /* one of the three went */
	for (uint64_t ino = 20; ino < 23; ino++) {
		assert_int_equal(data_create(e->d, ino, &f), 0);
		assert_int_equal(data_size(f), 0);
		assert_int_equal(data_read(f, buf, sizeof(buf), 0), 0);
		data_put(f);
	}
	assert_int_equal(count_spares(e), 0);
	for (uint64_t ino = 20; ino < 23; ino++) {
		char name[32];
		snprintf(name, sizeof(name), "%llu.new",
			 (unsigned long long)ino);
		assert_int_equal(stat_of(e, name).st_size, 0);
	}
	/* a new spare's name is past every one kept: .spare.10 if 9 was
	 * kept, else .spare.2 */
	assert_int_equal(data_remove(e->d, 20), 0);
	assert_int_equal(count_spares(e), 1);
	assert_true(file_exists(e, ".spare.10") || file_exists(e, ".spare.2"));
	/* none kept at all */
	e->cfg.spares = 0;
	reopen(e);
	assert_int_equal(count_spares(e), 0);
	assert_int_equal(data_remove(e->d, 21), 0);
	assert_false(file_exists(e, "21.new"));
	assert_int_equal(count_spares(e), 0);
}

/* ---- page cache ---- */

/* Bytes of the cache file's first len in memory (mincore). */
static size_t resident(struct data_file *f, size_t len)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t pages = (len + (size_t)page - 1) / (size_t)page, n = 0;
	unsigned char vec[256];
	assert_true(pages <= sizeof(vec));
	void *p = mmap(NULL, len, PROT_READ, MAP_SHARED, data_fd(f), 0);
	assert_true(p != MAP_FAILED);
	assert_int_equal(mincore(p, len, vec), 0);
	for (size_t i = 0; i < pages; i++)
		n += (vec[i] & 1) ? (size_t)page : 0;
	munmap(p, len);
	return n;
}

/* What a buffered reader got leaves the cache file's page cache once on
 * disk; dirty bytes stay (an upload reads them), and so does all of a
 * file only direct readers read, at its last close. */
static void test_uncache_drops_clean_pages_and_keeps_dirty_ones(void **state)
{
	struct env *e = *state;
	struct data_file *f;
	unsigned char buf[64 << 10];
	size_t len = sizeof(buf);
	struct statfs sf;
	assert_int_equal(statfs(e->dir, &sf), 0);
	if (sf.f_type == TMPFS_MAGIC)
		skip(); /* its pages are the file: never dropped */
	assert_int_equal(data_get(e->d, 1, len, &f), 0);
	assert_int_equal(data_read(f, buf, len, 0), (ssize_t)len);
	assert_int_equal(fdatasync(data_fd(f)), 0); /* on disk: clean */
	assert_int_equal(resident(f, len), len);
	data_uncache(f, 0, len / 2);
	assert_int_equal(resident(f, len), len / 2);
	data_uncache_all(f); /* the last close */
	assert_int_equal(resident(f, len), 0);
	assert_int_equal(data_read(f, buf, len, 0), (ssize_t)len);
	assert_memory_equal(buf, e->obj, len); /* from the disk */

	/* dirty bytes in the range: kept */
	memset(buf, 'd', 4096);
	assert_int_equal(data_write(f, buf, 4096, 0), 4096);
	assert_int_equal(fdatasync(data_fd(f)), 0);
	assert_int_equal(resident(f, len), len);
	data_uncache(f, 0, 8192);
	data_uncache_all(f);
	assert_int_equal(resident(f, len), len);
	data_put(f);

	/* read by direct readers alone (no data_uncache()): kept */
	assert_int_equal(data_get(e->d, 2, len, &f), 0);
	assert_int_equal(data_read(f, buf, len, 0), (ssize_t)len);
	assert_int_equal(fdatasync(data_fd(f)), 0);
	data_uncache_all(f);
	assert_int_equal(resident(f, len), len);
	data_put(f);
}

/* ---- opens held up by the cache disk ---- */

/* Read leases on every spare (at most 8): the open with O_TRUNC of the
 * file that takes one waits until the lease goes, as a slow disk would
 * hold it up. Returns how many. */
static int lease_spares(struct env *e, int fds[8])
{
	int n = 0;
	for (int i = 0; i < 64 && n < 8; i++) {
		char path[128];
		snprintf(path, sizeof(path), "%s/.spare.%d", e->dir, i);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		assert_int_equal(fcntl(fd, F_SETLEASE, F_RDLCK), 0);
		fds[n++] = fd;
	}
	return n;
}

static void unlease(int fds[8], int n)
{
	for (int i = 0; i < n; i++) {
		(void)fcntl(fds[i], F_SETLEASE, F_UNLCK); /* or broken */
		close(fds[i]);
	}
}

/* One spare, from a file made and removed. */
static void make_spare(struct env *e, uint64_t ino)
{
	struct data_file *f;
	assert_int_equal(data_create(e->d, ino, &f), 0);
	data_put(f);
	assert_int_equal(data_remove(e->d, ino), 0);
	assert_int_equal(count_spares(e), 1);
}

static void wait_no_spares(struct env *e)
{
	for (int i = 0; count_spares(e) && i < 30000; i++)
		usleep(1000);
	assert_int_equal(count_spares(e), 0);
}

struct caller {
	struct data *d;
	uint64_t ino;
	int remove; /* data_remove(), else data_get() */
	int rc;
	struct data_file *f;
	sem_t done;
	pthread_t th;
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	c->rc = c->remove ? data_remove(c->d, c->ino)
			  : data_get(c->d, c->ino, 0, &c->f);
	sem_post(&c->done);
	return NULL;
}

static void call_start(struct caller *c, struct data *d, uint64_t ino,
		       int remove)
{
	*c = (struct caller){.d = d, .ino = ino, .remove = remove};
	sem_init(&c->done, 0, 0);
	assert_int_equal(pthread_create(&c->th, NULL, caller_main, c), 0);
}

static int call_done_within(struct caller *c, int seconds)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += seconds;
	while (sem_timedwait(&c->done, &ts) != 0)
		if (errno != EINTR)
			return 0;
	sem_post(&c->done); /* call_join() waits on it again */
	return 1;
}

static void call_join(struct caller *c)
{
	sem_wait(&c->done);
	pthread_join(c->th, NULL);
	sem_destroy(&c->done);
}

/* data_get() makes a new file's cache file and log without the cache's
 * lock. While the cache disk holds that up, another file's data_get() is
 * answered; a data_get() of the same number waits and gets the same
 * record; a data_remove() of it waits, then removes what was made
 * (without the wait the files would be made after the removal, for a
 * file that is gone). */
static void test_a_held_up_open_holds_up_only_its_own_number(void **state)
{
	struct env *e = *state;
	struct caller a, b, c, r;
	int fds[8];
	unsigned char w[100], buf[100];
	memset(w, 'h', sizeof(w));
	void (*old_sigio)(int) = signal(SIGIO, SIG_IGN); /* lease breaks */
	make_clean_file(e, 1, 4096);			 /* cached, closed */
	make_spare(e, 9);
	int n = lease_spares(e, fds);
	call_start(&a, e->d, 2, 0);
	wait_no_spares(e); /* a took it, and waits on the lease */
	call_start(&b, e->d, 2, 0);
	call_start(&c, e->d, 1, 0);
	assert_true(call_done_within(&c, 20)); /* the lease breaks at 45 s */
	assert_int_equal(c.rc, 0);
	assert_false(call_done_within(&a, 0));
	assert_false(call_done_within(&b, 0));
	unlease(fds, n);
	call_join(&a);
	call_join(&b);
	call_join(&c);
	assert_int_equal(a.rc, 0);
	assert_int_equal(b.rc, 0);
	assert_ptr_equal(a.f, b.f);
	assert_int_equal(data_write(a.f, w, 100, 0), 100);
	data_put(a.f);
	assert_int_equal(data_read(b.f, buf, 100, 0), 100);
	expect_fill(buf, 'h', 100);
	data_put(b.f);
	data_put(c.f);

	make_spare(e, 10);
	n = lease_spares(e, fds);
	call_start(&a, e->d, 3, 0);
	wait_no_spares(e);
	call_start(&r, e->d, 3, 1);
	assert_false(call_done_within(&r, 1)); /* it waits for a */
	unlease(fds, n);
	call_join(&a);
	call_join(&r);
	assert_int_equal(a.rc, 0);
	assert_int_equal(r.rc, 0);
	assert_false(file_exists(e, "3") || file_exists(e, "3.log"));
	/* the open reference still works (unlink while open) */
	assert_int_equal(data_write(a.f, w, 100, 0), 100);
	assert_int_equal(data_read(a.f, buf, 100, 0), 100);
	expect_fill(buf, 'h', 100);
	data_put(a.f);
	signal(SIGIO, old_sigio);
}

/* ---- room on a small cache disk ---- */

/* Reopens e's cache on a tmpfs of mib MiB (its reserve: an eighth of it);
 * 0, or -1 when no tmpfs can be mounted here (not root). */
static int reopen_on_tmpfs(struct env *e, char *dir, size_t dirlen,
			   unsigned mib)
{
	char size[16];
	snprintf(size, sizeof(size), "%um", mib);
	if (small_disk_mount(e->dir, size, dir, dirlen))
		return -1;
	data_close(e->d);
	e->cfg.dir = dir;
	assert_int_equal(data_open(&e->cfg, &e->d), 0);
	assert_int_equal(data_reserve(e->d), ((uint64_t)mib << 20) / 8);
	return 0;
}

/* Back on e's own directory, the tmpfs gone. */
static void leave_tmpfs(struct env *e, const char *dir)
{
	data_close(e->d);
	e->d = NULL;
	assert_int_equal(umount2(dir, MNT_DETACH), 0);
	e->cfg.dir = e->dir;
	reopen(e);
}

static uint64_t avail_of(const char *dir)
{
	struct statvfs sv;
	assert_int_equal(statvfs(dir, &sv), 0);
	return (uint64_t)sv.f_bavail * sv.f_frsize;
}

struct hydrator {
	struct data_file *f;
	int rc;
};

static void *hydrator_main(void *arg)
{
	struct hydrator *h = arg;
	h->rc = data_hydrate(h->f, 0, UINT64_MAX);
	return NULL;
}

/* A fetch under way has taken its room before any of its bytes land:
 * a write that fits only if the fetch's bytes are not counted fails with
 * ENOSPC, and one that fits beside them goes in. Counted only once they
 * showed on the disk, both landed and ate into the reserve the metadata
 * store keeps for its commits. */
static void test_a_write_counts_the_room_a_fetch_under_way_took(void **state)
{
	struct env *e = *state;
	char dir[128];
	if (reopen_on_tmpfs(e, dir, sizeof(dir), 8))
		skip();
	const uint64_t obj = sizeof(e->obj), M = 1u << 20;
	uint64_t reserve = data_reserve(e->d);
	struct data_file *f, *g;
	assert_int_equal(data_get(e->d, 1, obj, &f), 0);
	assert_int_equal(data_get(e->d, 2, 0, &g), 0);
	struct hydrator h = {f, -1};
	pthread_t th;
	e->fk.block = 1;
	assert_int_equal(pthread_create(&th, NULL, hydrator_main, &h), 0);
	assert_int_equal(sem_wait(&e->fk.started), 0);
	uint64_t room = avail_of(dir) - reserve; /* the fetch landed nothing */
	size_t big = (size_t)(room - obj / 2), fits = (size_t)(room - obj - M);
	unsigned char *buf = malloc(big);
	assert_non_null(buf);
	memset(buf, 'w', big);
	assert_int_equal(data_write(g, buf, big, 0), -ENOSPC);
	assert_int_equal(data_write(g, buf, fits, 0), (ssize_t)fits);
	assert_int_equal(sem_post(&e->fk.gate), 0);
	assert_int_equal(pthread_join(th, NULL), 0);
	e->fk.block = 0;
	assert_int_equal(h.rc, 0);
	assert_true(avail_of(dir) >= reserve);
	free(buf);
	data_put(g);
	data_put(f);
	leave_tmpfs(e, dir);
}

struct filler {
	struct data_file *f;
	size_t chunk;
	uint64_t wrote;
	ssize_t last;
};

static void *filler_main(void *arg)
{
	struct filler *w = arg;
	unsigned char *buf = malloc(w->chunk);
	if (!buf)
		return NULL;
	memset(buf, 'f', w->chunk);
	while ((w->last = data_write(w->f, buf, w->chunk, w->wrote)) > 0)
		w->wrote += (uint64_t)w->last;
	free(buf);
	return NULL;
}

/* Writers on many threads at once (the kernel's writeback of a FUSE
 * mount) fill the disk up to its reserve, not into it: each stops with
 * ENOSPC, and at most an eighth of the reserve (the budget of writes
 * that skip fstatvfs) is gone. */
static void test_writers_at_once_leave_the_reserve(void **state)
{
	struct env *e = *state;
	char dir[128];
	if (reopen_on_tmpfs(e, dir, sizeof(dir), 16))
		skip();
	enum { N = 8 };
	struct filler w[N];
	pthread_t th[N];
	uint64_t reserve = data_reserve(e->d);
	for (int i = 0; i < N; i++) {
		w[i] = (struct filler){.chunk = 256u << 10};
		assert_int_equal(data_get(e->d, 10 + (uint64_t)i, 0, &w[i].f),
				 0);
		assert_int_equal(
			pthread_create(&th[i], NULL, filler_main, &w[i]), 0);
	}
	uint64_t total = 0;
	for (int i = 0; i < N; i++) {
		assert_int_equal(pthread_join(th[i], NULL), 0);
		assert_int_equal(w[i].last, -ENOSPC);
		total += w[i].wrote;
		data_put(w[i].f);
	}
	assert_true(total >= 8u << 20);
	assert_true(avail_of(dir) >= reserve - reserve / 8);
	leave_tmpfs(e, dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_read_of_absent_range_fetches_exactly_it_once),
		T(test_sequential_reads_double_readahead_and_random_resets),
		T(test_interleaved_sequential_readers_each_get_readahead),
		T(test_an_opens_first_read_fetches_a_window),
		T(test_the_last_close_drops_prefetches_not_started),
		T(test_many_interleaved_readers_each_keep_their_stream),
		T(test_reads_past_object_end_return_zeros_up_to_size),
		T(test_place_leaves_the_bytes_in_the_cache_file),
		T(test_truncate_grow_reads_zeros_without_fetching),
		T(test_write_over_partial_data_merges_with_fetched_bytes),
		T(test_a_gap_past_the_end_reads_as_zeros_not_the_object),
		T(test_fetch_error_propagates_and_marks_nothing_present),
		T(test_concurrent_readers_of_missing_range_share_one_fetch),
		T(test_a_reader_in_a_fetch_survives_the_stream_table_growing),
		T(test_a_sequential_reader_finds_what_follows_fetched),
		T(test_a_failed_prefetch_leaves_its_bytes_to_the_reader),
		T(test_a_reader_goes_on_as_its_bytes_land),
		T(test_a_failed_fetch_keeps_the_bytes_that_landed),
		T(test_parts_of_a_read_out_of_order_continue_the_stream),
		T(test_only_a_file_of_few_streams_plans_ra_max_ahead),
		T(test_close_with_prefetches_pending_leaves_the_cache_whole),
		T(test_queued_prefetches_are_taken_over_not_waited_for),
		T(test_a_write_waits_for_the_fetch_it_lands_on),
		T(test_a_truncate_into_a_fetch_waits_for_it),
		T(test_a_truncate_waits_for_a_rewrite_in_flight),
		T(test_a_rewrite_an_upload_cleaned_meanwhile_stays_dirty),
		T(test_mark_clean_keeps_ranges_written_after_snapshot_dirty),
		T(test_close_and_reopen_restore_sets_data_and_usage),
		T(test_a_reopened_cache_lists_its_dirty_files_with_sizes),
		T(test_after_a_power_loss_only_dirty_bytes_are_kept),
		T(test_after_a_clean_close_a_new_boot_keeps_the_cache),
		T(test_a_trim_the_disk_cannot_take_is_done_again_next_open),
		T(test_clean_file_adopts_callers_size_on_get),
		T(test_kill9_after_writes_loses_no_completed_write),
		T(test_kill9_mid_stream_loses_no_completed_write),
		T(test_kill9_mid_stream_of_a_new_file_loses_nothing),
		T(test_a_new_file_keeps_no_log_until_an_upload),
		T(test_an_upload_gives_a_new_file_its_log),
		T(test_an_adoption_cut_short_is_finished_on_open),
		T(test_create_drops_what_an_earlier_file_left),
		T(test_torn_last_log_line_is_ignored_and_cut_off),
		T(test_a_rewrite_of_dirty_bytes_adds_no_log_line),
		T(test_a_write_across_chunk_boundaries_lands_whole),
		T(test_compaction_keeps_sets_and_data_identical),
		T(test_hydrate_all_fetches_every_missing_range),
		T(test_evict_drops_least_recently_used_down_to_limit),
		T(test_evict_never_drops_open_or_dirty_files),
		T(test_free_floor_evicts_clean_closed_files),
		T(test_reopen_orders_lru_by_log_mtime),
		T(test_remove_deletes_dirty_open_file_and_its_log),
		T(test_drop_clean_spares_open_and_dirty_files),
		T(test_mark_dirty_all_needs_a_full_file_and_pins_it),
		T(test_outside_writes_are_dirty_whole_and_outlive_a_crash),
		T(test_a_file_left_frozen_is_thawed_at_the_next_open),
		T(test_open_drops_strays_and_keeps_valid_files),
		T(test_new_files_take_the_emptied_files_of_removed_ones),
		T(test_a_file_made_from_a_spare_is_not_written_out_at_close),
		T(test_spares_hold_no_bytes_and_open_files_keep_theirs),
		T(test_spares_are_bounded_and_outlive_a_reopen),
		T(test_a_held_up_open_holds_up_only_its_own_number),
		T(test_uncache_drops_clean_pages_and_keeps_dirty_ones),
		T(test_a_write_counts_the_room_a_fetch_under_way_took),
		T(test_writers_at_once_leave_the_reserve),
#undef T
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
