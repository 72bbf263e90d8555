/* test_s3_live.c: every S3 client operation against a live S3 (the local
 * Swift).
 *
 * Reads AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID and
 * AWS_SECRET_ACCESS_KEY (hack/s3-local.sh env), and TIERFS_TEST_BUCKET
 * (default "tierfs-it"). Each run works under its own prefix and removes
 * what it made.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "../../s3/s3.h"

#define BIG_SIZE (200ull << 20)
#define MANY_KEYS 1500

struct env {
	s3_client *c;
	struct s3_config cfg;
	struct s3_credentials creds;
	const char *bucket;
	char prefix[64];
};

static struct env *E(void **state)
{
	return *state;
}

/* prefix + name, in a static-free caller buffer */
static const char *K(void **state, char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s%s", E(state)->prefix, name);
	return buf;
}

static int setup(void **state)
{
	static struct env env;
	s3_config_init(&env.cfg);
	s3_config_from_env(&env.cfg);
	if (!env.cfg.endpoint) {
		fprintf(stderr, "AWS_ENDPOINT_URL is not set: run under "
				"hack/s3-local.sh env\n");
		return -1;
	}
	if (s3_credentials_from_env(&env.creds) != 0)
		return -1;
	if (s3_client_create(&env.cfg, &env.creds, &env.c) != 0)
		return -1;
	env.bucket = getenv("TIERFS_TEST_BUCKET");
	if (!env.bucket)
		env.bucket = "tierfs-it";
	snprintf(env.prefix, sizeof(env.prefix), "run-%d-%ld/", (int)getpid(),
		 (long)time(NULL));
	struct s3_error e;
	int rc = s3_create_bucket(env.c, env.bucket, &e);
	if (rc != 0 && rc != -EEXIST)
		return -1;
	*state = &env;
	return 0;
}

static int delete_page(void *ctx, const struct s3_list_page *p)
{
	struct env *env = ctx;
	const char **keys = calloc(p->nentries + 1, sizeof(char *));
	for (size_t i = 0; i < p->nentries; i++)
		keys[i] = p->entries[i].key;
	int rc =
		s3_delete_objects(env->c, env->bucket, keys, p->nentries, NULL);
	free(keys);
	return rc;
}

static int teardown(void **state)
{
	struct env *env = *state;
	s3_list_all(env->c, env->bucket, env->prefix, NULL, delete_page, env,
		    NULL);
	s3_client_destroy(env->c);
	s3_credentials_free(&env->creds);
	return 0;
}

static void sha256_fd(int fd, uint64_t len, unsigned char out[32])
{
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	static char chunk[1 << 20];
	EVP_DigestInit_ex(md, EVP_sha256(), NULL);
	for (uint64_t off = 0; off < len;) {
		ssize_t n = pread(fd, chunk, sizeof(chunk), (off_t)off);
		assert_true(n > 0);
		EVP_DigestUpdate(md, chunk, (size_t)n);
		off += (uint64_t)n;
	}
	EVP_DigestFinal_ex(md, out, NULL);
	EVP_MD_CTX_free(md);
}

static int random_file(uint64_t len)
{
	int fd = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	assert_true(fd >= 0);
	static unsigned char block[1 << 20];
	for (uint64_t off = 0; off < len; off += sizeof(block)) {
		size_t n = len - off < sizeof(block) ? (size_t)(len - off)
						     : sizeof(block);
		RAND_bytes(block, (int)n);
		assert_int_equal(pwrite(fd, block, n, (off_t)off), (ssize_t)n);
	}
	return fd;
}

static long max_rss_kib(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* --- buckets ---------------------------------------------------------------
 */

static void
test_bucket_create_is_eexist_when_ours_and_head_finds_it(void **state)
{
	struct s3_error e;
	assert_int_equal(s3_create_bucket(E(state)->c, E(state)->bucket, &e),
			 -EEXIST);
	assert_int_equal(s3_head_bucket(E(state)->c, E(state)->bucket, &e), 0);
	assert_int_equal(
		s3_head_bucket(E(state)->c, "tierfs-no-such-bucket", &e),
		-ENOENT);
	assert_int_equal(e.http_status, 404);
}

/* --- objects ----------------------------------------------------------------
 */

static void test_put_get_head_keep_body_type_and_metadata(void **state)
{
	char key[256], etag[S3_ETAG_MAX];
	struct s3_error e;
	const struct s3_meta meta[] = {{"mode", "33188"},
				       {"mtime", "1700000000.123456789"}};
	const struct s3_put_opts o = {"text/plain", meta, 2};
	const char body[] = "hello, tierfs";
	K(state, key, sizeof(key), "obj/hello.txt");
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, key, body,
				    strlen(body), &o, etag, &e),
			 0);
	/* a single PUT's ETag is the quoted MD5 of the body */
	unsigned char md5[16];
	char want_etag[40];
	EVP_Digest(body, strlen(body), md5, NULL, EVP_md5(), NULL);
	snprintf(want_etag, sizeof(want_etag), "\"");
	for (int i = 0; i < 16; i++)
		snprintf(want_etag + 1 + 2 * i, 3, "%02x", md5[i]);
	strcat(want_etag, "\"");
	assert_string_equal(etag, want_etag);

	struct s3_object_info info;
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, key, &info, &e),
		0);
	assert_int_equal(info.size, strlen(body));
	assert_string_equal(info.etag, etag);
	assert_string_equal(info.content_type, "text/plain");
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33188");
	assert_string_equal(s3_object_info_meta(&info, "mtime"),
			    "1700000000.123456789");
	assert_true(info.last_modified > time(NULL) - 3600);
	s3_object_info_free(&info);

	char got[64];
	ssize_t n = s3_get_buf(E(state)->c, E(state)->bucket, key, 0, S3_TO_END,
			       got, sizeof(got), NULL, &info, &e);
	assert_int_equal(n, strlen(body));
	assert_memory_equal(got, body, strlen(body));
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33188");
	s3_object_info_free(&info);

	/* a byte range, and the object size through Content-Range */
	n = s3_get_buf(E(state)->c, E(state)->bucket, key, 7, 6, got,
		       sizeof(got), etag, &info, &e);
	assert_int_equal(n, 6);
	assert_memory_equal(got, "tierfs", 6);
	assert_int_equal(info.size, strlen(body));
	s3_object_info_free(&info);

	/* a buffer too small is an error, not a truncation */
	n = s3_get_buf(E(state)->c, E(state)->bucket, key, 0, S3_TO_END, got, 4,
		       NULL, NULL, &e);
	assert_int_equal(n, -EOVERFLOW);
}

static void test_get_with_stale_etag_is_estale(void **state)
{
	char key[256], got[16];
	struct s3_error e;
	K(state, key, sizeof(key), "obj/etag");
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, key, "v1", 2,
				    NULL, NULL, &e),
			 0);
	ssize_t n = s3_get_buf(
		E(state)->c, E(state)->bucket, key, 0, S3_TO_END, got,
		sizeof(got), "\"00000000000000000000000000000000\"", NULL, &e);
	assert_int_equal(n, -ESTALE);
	assert_int_equal(e.http_status, 412);
}

static void test_missing_key_is_enoent_with_s3_code(void **state)
{
	char key[256], got[16];
	struct s3_error e;
	struct s3_object_info info;
	K(state, key, sizeof(key), "obj/never-written");
	ssize_t n = s3_get_buf(E(state)->c, E(state)->bucket, key, 0, S3_TO_END,
			       got, sizeof(got), NULL, NULL, &e);
	assert_int_equal(n, -ENOENT);
	assert_int_equal(e.http_status, 404);
	assert_string_equal(e.code, "NoSuchKey");
	assert_int_equal(e.attempts, 1); /* a 404 is not retried */
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, key, &info, &e),
		-ENOENT);
}

static void test_zero_byte_object_round_trips(void **state)
{
	char key[256], got[4];
	struct s3_error e;
	struct s3_object_info info;
	K(state, key, sizeof(key), "obj/empty");
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, key, NULL, 0,
				    NULL, NULL, &e),
			 0);
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, key, &info, &e),
		0);
	assert_int_equal(info.size, 0);
	s3_object_info_free(&info);
	assert_int_equal(s3_get_buf(E(state)->c, E(state)->bucket, key, 0,
				    S3_TO_END, got, sizeof(got), NULL, NULL,
				    &e),
			 0);
	int fd = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	assert_int_equal(pwrite(fd, "junk", 4, 0), 4);
	assert_int_equal(s3_download_fd(E(state)->c, E(state)->bucket, key, fd,
					&info, &e),
			 0);
	struct stat st;
	fstat(fd, &st);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(info.size, 0);
	s3_object_info_free(&info);
	/* a zero-byte upload from an fd */
	assert_int_equal(s3_upload_fd(E(state)->c, E(state)->bucket, key, fd, 0,
				      0, NULL, NULL, &e),
			 0);
	close(fd);
}

static void check_download_matches(void **state, const char *key, int src,
				   const unsigned char want[32])
{
	struct s3_error e;
	struct s3_object_info info;
	unsigned char got[32];
	int dst = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	assert_int_equal(s3_download_fd(E(state)->c, E(state)->bucket, key, dst,
					&info, &e),
			 0);
	assert_int_equal(info.size, BIG_SIZE);
	s3_object_info_free(&info);
	sha256_fd(dst, BIG_SIZE, got);
	assert_memory_equal(got, want, 32);
	close(dst);

	/* the plain single-stream GET too */
	dst = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	ssize_t n = s3_get_fd(E(state)->c, E(state)->bucket, key, 0, S3_TO_END,
			      dst, 0, NULL, NULL, &e);
	assert_int_equal(n, (ssize_t)BIG_SIZE);
	sha256_fd(dst, BIG_SIZE, got);
	assert_memory_equal(got, want, 32);
	close(dst);
	(void)src;
}

static void test_200mib_streams_both_ways_with_bounded_memory(void **state)
{
	char key[256], key2[256], etag[S3_ETAG_MAX];
	struct s3_error e;
	unsigned char want[32];
	int src = random_file(BIG_SIZE);
	sha256_fd(src, BIG_SIZE, want);
	long rss0 = max_rss_kib();

	/* parallel multipart */
	K(state, key, sizeof(key), "big/multipart.bin");
	assert_int_equal(s3_upload_fd(E(state)->c, E(state)->bucket, key, src,
				      0, BIG_SIZE, NULL, etag, &e),
			 0);
	assert_non_null(strchr(etag, '-')); /* a multipart ETag: "md5-N" */
	check_download_matches(state, key, src, want);

	/* one streamed PUT */
	K(state, key2, sizeof(key2), "big/single.bin");
	assert_int_equal(s3_put_fd(E(state)->c, E(state)->bucket, key2, src, 0,
				   BIG_SIZE, NULL, etag, &e),
			 0);
	assert_null(strchr(etag, '-'));
	check_download_matches(state, key2, src, want);

	/* a parallel ranged read into the middle of a file */
	int dst = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	uint64_t off = 3 * (1 << 20) + 17, len = 50 * (1 << 20) + 5;
	assert_int_equal(s3_get_parallel(E(state)->c, E(state)->bucket, key,
					 off, len, dst, 4096, NULL, NULL, &e),
			 (ssize_t)len);
	/* 200 MiB went through four times; memory grew by far less */
	long grew = max_rss_kib() - rss0;
	static char a[1 << 20], b[1 << 20];
	for (uint64_t done = 0; done < len; done += sizeof(a)) {
		size_t n = len - done < sizeof(a) ? (size_t)(len - done)
						  : sizeof(a);
		assert_int_equal(pread(src, a, n, (off_t)(off + done)),
				 (ssize_t)n);
		assert_int_equal(pread(dst, b, n, (off_t)(4096 + done)),
				 (ssize_t)n);
		assert_memory_equal(a, b, n);
	}
	close(dst);
	close(src);
	fprintf(stderr, "max RSS grew by %ld KiB for 200 MiB transfers\n",
		grew);
	assert_true(grew < 96 * 1024);
}

struct landed_log {
	int fd;		  /* where the GET writes, from byte 0 */
	const int *src;	  /* the object's bytes, in a file */
	uint64_t off;	  /* the range's first byte in the object */
	uint64_t last;	  /* the last prefix told */
	unsigned calls;	  /* times told */
	uint64_t stop_at; /* stop the GET once this much landed */
	int bad_prefix;	  /* a prefix told that was not in fd yet */
	int shrank;	  /* a prefix told smaller than one before */
};

/* Checks each prefix told against the file: every byte of it is there. */
static int on_landed(void *arg, uint64_t bytes)
{
	struct landed_log *l = arg;
	static char a[64 << 10], b[64 << 10];
	if (bytes < l->last)
		l->shrank = 1;
	uint64_t from = l->last;
	for (; from < bytes; from += sizeof(a)) {
		size_t n = bytes - from < sizeof(a) ? (size_t)(bytes - from)
						    : sizeof(a);
		if (pread(l->fd, a, n, (off_t)from) != (ssize_t)n ||
		    pread(*l->src, b, n, (off_t)(l->off + from)) !=
			    (ssize_t)n ||
		    memcmp(a, b, n))
			l->bad_prefix = 1;
	}
	l->last = bytes;
	l->calls++;
	return bytes >= l->stop_at;
}

/* A parallel ranged GET tells, as parts land, the prefix of the range
 * that is in the file, in order and in many steps (though not one per
 * piece curl hands over), ending at the whole range; a nonzero answer
 * stops it with -ECANCELED. */
static void test_a_parallel_get_tells_the_prefix_landed_and_stops(void **state)
{
	char key[256], etag[S3_ETAG_MAX];
	struct s3_error e;
	const uint64_t len = 3 * (8u << 20) + 12345; /* parts of 8 MiB */
	int src = random_file(len + 7);
	K(state, key, sizeof(key), "big/landed.bin");
	assert_int_equal(s3_upload_fd(E(state)->c, E(state)->bucket, key, src,
				      0, len + 7, NULL, etag, &e),
			 0);
	int dst = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	struct landed_log l = {dst, &src, 7, 0, 0, UINT64_MAX, 0, 0};
	struct s3_landed tell = {on_landed, &l};
	assert_int_equal(s3_get_parallel(E(state)->c, E(state)->bucket, key, 7,
					 len, dst, 0, NULL, &tell, &e),
			 (ssize_t)len);
	assert_int_equal(l.last, len);
	assert_false(l.bad_prefix);
	assert_false(l.shrank);
	assert_true(l.calls > 4 * 4); /* as it lands, not per part */
	/* but in writes of at least 128 KiB, not curl's pieces of 16 KiB:
	 * each is a pwrite and a wake-up of the readers waiting on it */
	assert_true(l.calls <= len / (128u << 10) + 4);

	/* stopped after 1 MiB: it says so, and no more is told */
	assert_int_equal(ftruncate(dst, 0), 0);
	l = (struct landed_log){dst, &src, 7, 0, 0, 1u << 20, 0, 0};
	assert_int_equal(s3_get_parallel(E(state)->c, E(state)->bucket, key, 7,
					 len, dst, 0, NULL, &tell, &e),
			 -ECANCELED);
	assert_false(l.bad_prefix);
	assert_true(l.last < len);
	close(dst);
	close(src);
}

static void test_delete_object_is_idempotent(void **state)
{
	char key[256];
	struct s3_error e;
	struct s3_object_info info;
	K(state, key, sizeof(key), "obj/delete-me");
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, key, "x", 1,
				    NULL, NULL, &e),
			 0);
	assert_int_equal(
		s3_delete_object(E(state)->c, E(state)->bucket, key, &e), 0);
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, key, &info, &e),
		-ENOENT);
	assert_int_equal(
		s3_delete_object(E(state)->c, E(state)->bucket, key, &e), 0);
}

static void test_copy_object_keeps_or_replaces_metadata(void **state)
{
	char src[256], dst[256], etag[S3_ETAG_MAX];
	struct s3_error e;
	struct s3_object_info info;
	const struct s3_meta m1[] = {{"mode", "33188"}};
	const struct s3_meta m2[] = {{"mode", "33261"}, {"uid", "1000"}};
	const struct s3_put_opts o1 = {"text/plain", m1, 1};
	const struct s3_put_opts o2 = {"application/x-sh", m2, 2};
	K(state, src, sizeof(src), "copy/src");
	K(state, dst, sizeof(dst), "copy/dst");
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, src, "body",
				    4, &o1, NULL, &e),
			 0);
	assert_int_equal(s3_copy_object(E(state)->c, E(state)->bucket, src,
					E(state)->bucket, dst, S3_METADATA_COPY,
					NULL, etag, &e),
			 0);
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, dst, &info, &e),
		0);
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33188");
	assert_int_equal(info.size, 4);
	s3_object_info_free(&info);

	/* metadata-only update in place, the way chmod will work */
	assert_int_equal(s3_copy_object(E(state)->c, E(state)->bucket, dst,
					E(state)->bucket, dst,
					S3_METADATA_REPLACE, &o2, etag, &e),
			 0);
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, dst, &info, &e),
		0);
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33261");
	assert_string_equal(s3_object_info_meta(&info, "uid"), "1000");
	assert_string_equal(info.content_type, "application/x-sh");
	s3_object_info_free(&info);
	char got[8];
	assert_int_equal(s3_get_buf(E(state)->c, E(state)->bucket, dst, 0,
				    S3_TO_END, got, sizeof(got), NULL, NULL,
				    &e),
			 4);
	assert_memory_equal(got, "body", 4);

	/* copying a missing source fails cleanly */
	K(state, src, sizeof(src), "copy/missing");
	assert_int_equal(s3_copy_object(E(state)->c, E(state)->bucket, src,
					E(state)->bucket, dst, S3_METADATA_COPY,
					NULL, NULL, &e),
			 -ENOENT);
}

/* --- listing and batch delete ----------------------------------------------
 */

struct many {
	struct env *env;
	unsigned from, to;
};

static void *put_many(void *arg)
{
	struct many *m = arg;
	char key[256];
	for (unsigned i = m->from; i < m->to; i++) {
		snprintf(key, sizeof(key), "%smany/k%05u", m->env->prefix, i);
		if (s3_put_buf(m->env->c, m->env->bucket, key, "", 0, NULL,
			       NULL, NULL) != 0)
			return (void *)1;
	}
	return NULL;
}

struct count {
	size_t keys, pages;
	char last[256];
	int ordered;
};

static int count_page(void *ctx, const struct s3_list_page *p)
{
	struct count *c = ctx;
	c->pages++;
	for (size_t i = 0; i < p->nentries; i++) {
		if (strcmp(p->entries[i].key, c->last) <= 0)
			c->ordered = 0;
		snprintf(c->last, sizeof(c->last), "%s", p->entries[i].key);
		c->keys++;
	}
	return 0;
}

static void test_list_over_1000_keys_pages_and_batch_delete(void **state)
{
	pthread_t t[8];
	struct many m[8];
	struct s3_error e;
	char prefix[128];
	for (int i = 0; i < 8; i++) {
		m[i] = (struct many){E(state), (unsigned)i * MANY_KEYS / 8,
				     (unsigned)(i + 1) * MANY_KEYS / 8};
		pthread_create(&t[i], NULL, put_many, &m[i]);
	}
	for (int i = 0; i < 8; i++) {
		void *r;
		pthread_join(t[i], &r);
		assert_null(r);
	}
	snprintf(prefix, sizeof(prefix), "%smany/", E(state)->prefix);
	struct count c = {.ordered = 1};
	assert_int_equal(s3_list_all(E(state)->c, E(state)->bucket, prefix,
				     NULL, count_page, &c, &e),
			 0);
	assert_int_equal(c.keys, MANY_KEYS);
	assert_true(c.pages >= 2);
	assert_true(c.ordered);

	/* start-after and max-keys */
	char after[256];
	snprintf(after, sizeof(after), "%sk01400", prefix);
	struct s3_list_page page;
	struct s3_list_opts o = {
		.prefix = prefix, .start_after = after, .max_keys = 10};
	assert_int_equal(
		s3_list_objects(E(state)->c, E(state)->bucket, &o, &page, &e),
		0);
	assert_int_equal(page.nentries, 10);
	assert_true(page.truncated);
	char want[256];
	snprintf(want, sizeof(want), "%sk01401", prefix);
	assert_string_equal(page.entries[0].key, want);
	assert_int_equal(page.entries[0].size, 0);
	s3_list_page_free(&page);

	/* DeleteObjects in batches of at most 1000 (two requests here) */
	const char **keys = calloc(MANY_KEYS + 1, sizeof(char *));
	char(*names)[256] = calloc(MANY_KEYS + 1, 256);
	for (unsigned i = 0; i < MANY_KEYS; i++) {
		snprintf(names[i], 256, "%sk%05u", prefix, i);
		keys[i] = names[i];
	}
	snprintf(names[MANY_KEYS], 256, "%snot-there", prefix);
	keys[MANY_KEYS] = names[MANY_KEYS];
	assert_int_equal(s3_delete_objects(E(state)->c, E(state)->bucket, keys,
					   MANY_KEYS + 1, &e),
			 0);
	memset(&c, 0, sizeof(c));
	c.ordered = 1;
	assert_int_equal(s3_list_all(E(state)->c, E(state)->bucket, prefix,
				     NULL, count_page, &c, &e),
			 0);
	assert_int_equal(c.keys, 0);
	free(keys);
	free(names);
}

static void test_list_with_delimiter_gives_common_prefixes(void **state)
{
	static const char *const names[] = {"tree/a", "tree/b/c", "tree/b/d",
					    "tree/e/", "tree/f/g/h"};
	char key[256], prefix[256];
	struct s3_error e;
	for (size_t i = 0; i < 5; i++)
		assert_int_equal(
			s3_put_buf(E(state)->c, E(state)->bucket,
				   K(state, key, sizeof(key), names[i]), "", 0,
				   NULL, NULL, &e),
			0);
	struct s3_list_page page;
	struct s3_list_opts o = {
		.prefix = K(state, prefix, sizeof(prefix), "tree/"),
		.delimiter = "/"};
	assert_int_equal(
		s3_list_objects(E(state)->c, E(state)->bucket, &o, &page, &e),
		0);
	assert_int_equal(page.nentries, 1);
	assert_string_equal(page.entries[0].key,
			    K(state, key, sizeof(key), "tree/a"));
	assert_int_equal(page.nprefixes, 3);
	assert_string_equal(page.common_prefixes[0],
			    K(state, key, sizeof(key), "tree/b/"));
	assert_string_equal(page.common_prefixes[1],
			    K(state, key, sizeof(key), "tree/e/"));
	assert_string_equal(page.common_prefixes[2],
			    K(state, key, sizeof(key), "tree/f/"));
	assert_false(page.truncated);
	s3_list_page_free(&page);
}

/* --- odd keys ----------------------------------------------------------------
 */

static void test_odd_keys_round_trip_through_put_get_and_list(void **state)
{
	static const char *const odd[] = {
		"odd/with space",    "odd/plus+sign",
		"odd/per%25cent%",   "odd/tilde~x",
		"odd/eq=als&amp",    "odd/ünïcödé/文件.txt",
		"odd/double//slash", "odd/trailing/",
		"odd/./dot/../x",    "odd/q?mark#hash",
		"odd/star*quote'\"", "odd/<xml>&",
		"odd/emoji😀",	     "odd/back\\slash",
		"odd/semi;colon:,",  "odd/tab\there",
		"odd/caret^[]{}|`",
	};
	const size_t n = sizeof(odd) / sizeof(odd[0]);
	char key[512], got[512], prefix[256];
	struct s3_error e;
	for (size_t i = 0; i < n; i++) {
		K(state, key, sizeof(key), odd[i]);
		assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, key,
					    key, strlen(key), NULL, NULL, &e),
				 0);
		ssize_t len =
			s3_get_buf(E(state)->c, E(state)->bucket, key, 0,
				   S3_TO_END, got, sizeof(got), NULL, NULL, &e);
		assert_int_equal(len, strlen(key));
		assert_memory_equal(got, key, (size_t)len);
	}
	struct s3_list_page page;
	struct s3_list_opts o = {
		.prefix = K(state, prefix, sizeof(prefix), "odd/")};
	assert_int_equal(
		s3_list_objects(E(state)->c, E(state)->bucket, &o, &page, &e),
		0);
	assert_int_equal(page.nentries, n);
	for (size_t i = 0; i < n; i++) {
		K(state, key, sizeof(key), odd[i]);
		int found = 0;
		for (size_t j = 0; j < page.nentries; j++)
			found |= strcmp(page.entries[j].key, key) == 0;
		if (!found)
			fail_msg("key '%s' not listed back", key);
	}
	s3_list_page_free(&page);
}

/* --- multipart ---------------------------------------------------------------
 */

static void test_multipart_with_copy_part_assembles_in_order(void **state)
{
	char src[256], dst[256], etag[S3_ETAG_MAX];
	char *upload = NULL;
	struct s3_error e;
	const uint64_t P = 5 << 20;
	int fd = random_file(2 * P + 1000);
	K(state, src, sizeof(src), "mpu/source");
	K(state, dst, sizeof(dst), "mpu/assembled");
	/* the source holds bytes [P, 2P) of the file at its offset 0..P */
	assert_int_equal(s3_put_fd(E(state)->c, E(state)->bucket, src, fd,
				   (off_t)P, P + 1000, NULL, NULL, &e),
			 0);
	const struct s3_meta meta[] = {{"mode", "33188"}};
	const struct s3_put_opts o = {NULL, meta, 1};
	assert_int_equal(s3_mpu_create(E(state)->c, E(state)->bucket, dst, &o,
				       &upload, &e),
			 0);
	struct s3_part parts[3] = {{1, ""}, {2, ""}, {3, ""}};
	assert_int_equal(s3_mpu_upload_part_fd(E(state)->c, E(state)->bucket,
					       dst, upload, 1, fd, 0, P,
					       parts[0].etag, &e),
			 0);
	assert_int_equal(s3_mpu_upload_part_copy(E(state)->c, E(state)->bucket,
						 dst, upload, 2,
						 E(state)->bucket, src, 0, P,
						 NULL, parts[1].etag, &e),
			 0);
	assert_int_equal(s3_mpu_upload_part_fd(
				 E(state)->c, E(state)->bucket, dst, upload, 3,
				 fd, (off_t)(2 * P), 1000, parts[2].etag, &e),
			 0);

	/* it is listed as in progress until completed */
	struct s3_upload_list ul;
	assert_int_equal(s3_mpu_list(E(state)->c, E(state)->bucket,
				     E(state)->prefix, NULL, NULL, &ul, &e),
			 0);
	int listed = 0;
	for (size_t i = 0; i < ul.nuploads; i++)
		listed |= strcmp(ul.uploads[i].upload_id, upload) == 0 &&
			  strcmp(ul.uploads[i].key, dst) == 0;
	assert_true(listed);
	s3_upload_list_free(&ul);

	assert_int_equal(s3_mpu_complete(E(state)->c, E(state)->bucket, dst,
					 upload, parts, 3, etag, &e),
			 0);
	assert_non_null(strstr(etag, "-3"));
	free(upload);

	int out = open("/var/tmp", O_TMPFILE | O_RDWR, 0600);
	struct s3_object_info info;
	assert_int_equal(s3_download_fd(E(state)->c, E(state)->bucket, dst, out,
					&info, &e),
			 0);
	assert_int_equal(info.size, 2 * P + 1000);
	assert_string_equal(s3_object_info_meta(&info, "mode"), "33188");
	s3_object_info_free(&info);
	unsigned char a[32], b[32];
	sha256_fd(fd, 2 * P + 1000, a);
	sha256_fd(out, 2 * P + 1000, b);
	assert_memory_equal(a, b, 32);
	close(out);
	close(fd);
}

static void test_multipart_abort_leaves_nothing(void **state)
{
	char key[256];
	char *upload = NULL;
	struct s3_error e;
	struct s3_object_info info;
	K(state, key, sizeof(key), "mpu/aborted");
	assert_int_equal(s3_mpu_create(E(state)->c, E(state)->bucket, key, NULL,
				       &upload, &e),
			 0);
	int fd = random_file(1000);
	char etag[S3_ETAG_MAX];
	assert_int_equal(s3_mpu_upload_part_fd(E(state)->c, E(state)->bucket,
					       key, upload, 1, fd, 0, 1000,
					       etag, &e),
			 0);
	close(fd);
	assert_int_equal(
		s3_mpu_abort(E(state)->c, E(state)->bucket, key, upload, &e),
		0);
	struct s3_upload_list ul;
	assert_int_equal(s3_mpu_list(E(state)->c, E(state)->bucket, key, NULL,
				     NULL, &ul, &e),
			 0);
	assert_int_equal(ul.nuploads, 0);
	s3_upload_list_free(&ul);
	assert_int_equal(
		s3_head_object(E(state)->c, E(state)->bucket, key, &info, &e),
		-ENOENT);
	assert_int_equal(
		s3_mpu_abort(E(state)->c, E(state)->bucket, key, upload, &e),
		-ENOENT);
	free(upload);
}

/* --- credentials and failures ----------------------------------------------
 */

static void
test_wrong_secret_is_eacces_without_the_secret_in_the_error(void **state)
{
	struct s3_credentials bad;
	struct s3_error e;
	s3_client *c;
	char key[256], msg[512];
	const char *secret = "wrong-secret-do-not-print";
	assert_int_equal(s3_credentials_set(&bad, E(state)->creds.access_key,
					    secret, NULL),
			 0);
	assert_int_equal(s3_client_create(&E(state)->cfg, &bad, &c), 0);
	K(state, key, sizeof(key), "obj/denied");
	assert_int_equal(
		s3_put_buf(c, E(state)->bucket, key, "x", 1, NULL, NULL, &e),
		-EACCES);
	assert_int_equal(e.http_status, 403);
	assert_string_equal(e.code, "SignatureDoesNotMatch");
	assert_int_equal(e.attempts, 1);
	s3_error_str(&e, msg, sizeof(msg));
	assert_null(strstr(msg, secret));

	/* rotating to the right credentials fixes the same client */
	assert_int_equal(s3_client_set_credentials(c, &E(state)->creds), 0);
	assert_int_equal(
		s3_put_buf(c, E(state)->bucket, key, "x", 1, NULL, NULL, &e),
		0);
	s3_client_destroy(c);
	s3_credentials_free(&bad);

	/* an unknown access key */
	assert_int_equal(
		s3_credentials_set(&bad, "nobody:nobody", secret, NULL), 0);
	assert_int_equal(s3_client_create(&E(state)->cfg, &bad, &c), 0);
	assert_int_equal(s3_head_bucket(c, E(state)->bucket, &e), -EACCES);
	s3_client_destroy(c);
	s3_credentials_free(&bad);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void
test_stopped_server_gives_bounded_retries_within_deadline(void **state)
{
	struct s3_config cfg = E(state)->cfg;
	struct s3_error e;
	s3_client *c;
	cfg.endpoint = "http://127.0.0.1:9"; /* discard: nothing listens */
	cfg.deadline_ms = 1500;
	cfg.max_attempts = 100;
	assert_int_equal(s3_client_create(&cfg, &E(state)->creds, &c), 0);
	double t0 = now_s();
	assert_int_equal(s3_head_bucket(c, "any-bucket", &e), -ETIMEDOUT);
	double took = now_s() - t0;
	assert_true(took < 1.5 + 0.5); /* the deadline, plus one attempt */
	assert_true(e.attempts > 1);
	assert_string_equal(e.code, "ConnectFailed");
	assert_int_equal(e.http_status, 0);
	s3_client_destroy(c);

	/* the attempt limit bounds it too */
	cfg.deadline_ms = 60000;
	cfg.max_attempts = 3;
	assert_int_equal(s3_client_create(&cfg, &E(state)->creds, &c), 0);
	assert_int_equal(s3_head_bucket(c, "any-bucket", &e), -ETIMEDOUT);
	assert_int_equal(e.attempts, 3);
	s3_client_destroy(c);
}

static void test_bad_endpoint_and_key_are_rejected_up_front(void **state)
{
	struct s3_config cfg = E(state)->cfg;
	struct s3_error e;
	char why[256];
	s3_client *c;
	cfg.endpoint = "ftp://127.0.0.1";
	assert_int_equal(s3_config_validate(&cfg, why, sizeof(why)), -EINVAL);
	assert_non_null(strstr(why, "endpoint"));
	assert_int_equal(s3_client_create(&cfg, &E(state)->creds, &c), -EINVAL);
	char longkey[S3_MAX_KEY_LEN + 2];
	memset(longkey, 'k', sizeof(longkey) - 1);
	longkey[sizeof(longkey) - 1] = '\0';
	assert_int_equal(s3_put_buf(E(state)->c, E(state)->bucket, longkey, "x",
				    1, NULL, NULL, &e),
			 -EINVAL);
	assert_non_null(strstr(e.message, "key"));
}

static void test_virtual_hosted_style_round_trips(void **state)
{
	/* BUCKET.localhost:PORT: the local S3 serves storage_domain
	 * localhost, and curl resolves *.localhost to loopback. */
	struct s3_config cfg = E(state)->cfg;
	struct s3_error e;
	s3_client *c;
	char endpoint[128], key[256], got[64];
	const char *port = strrchr(cfg.endpoint, ':');
	assert_non_null(port);
	snprintf(endpoint, sizeof(endpoint), "http://localhost%s", port);
	cfg.endpoint = endpoint;
	cfg.addressing = S3_ADDRESSING_VIRTUAL;
	assert_int_equal(s3_client_create(&cfg, &E(state)->creds, &c), 0);
	K(state, key, sizeof(key), "vhost/a b+c");
	assert_int_equal(s3_put_buf(c, E(state)->bucket, key, "virtual", 7,
				    NULL, NULL, &e),
			 0);
	assert_int_equal(s3_get_buf(c, E(state)->bucket, key, 0, S3_TO_END, got,
				    sizeof(got), NULL, NULL, &e),
			 7);
	assert_memory_equal(got, "virtual", 7);
	struct s3_list_page page;
	struct s3_list_opts o = {.prefix = key};
	assert_int_equal(s3_list_objects(c, E(state)->bucket, &o, &page, &e),
			 0);
	assert_int_equal(page.nentries, 1);
	assert_string_equal(page.entries[0].key, key);
	s3_list_page_free(&page);
	/* the same object through path-style addressing */
	assert_int_equal(s3_get_buf(E(state)->c, E(state)->bucket, key, 0,
				    S3_TO_END, got, sizeof(got), NULL, NULL,
				    &e),
			 7);
	assert_int_equal(s3_delete_object(c, E(state)->bucket, key, &e), 0);
	s3_client_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_bucket_create_is_eexist_when_ours_and_head_finds_it),
		cmocka_unit_test(test_put_get_head_keep_body_type_and_metadata),
		cmocka_unit_test(test_get_with_stale_etag_is_estale),
		cmocka_unit_test(test_missing_key_is_enoent_with_s3_code),
		cmocka_unit_test(test_zero_byte_object_round_trips),
		cmocka_unit_test(
			test_200mib_streams_both_ways_with_bounded_memory),
		cmocka_unit_test(test_delete_object_is_idempotent),
		cmocka_unit_test(
			test_a_parallel_get_tells_the_prefix_landed_and_stops),
		cmocka_unit_test(test_copy_object_keeps_or_replaces_metadata),
		cmocka_unit_test(
			test_list_over_1000_keys_pages_and_batch_delete),
		cmocka_unit_test(
			test_list_with_delimiter_gives_common_prefixes),
		cmocka_unit_test(
			test_odd_keys_round_trip_through_put_get_and_list),
		cmocka_unit_test(
			test_multipart_with_copy_part_assembles_in_order),
		cmocka_unit_test(test_multipart_abort_leaves_nothing),
		cmocka_unit_test(
			test_wrong_secret_is_eacces_without_the_secret_in_the_error),
		cmocka_unit_test(
			test_stopped_server_gives_bounded_retries_within_deadline),
		cmocka_unit_test(
			test_bad_endpoint_and_key_are_rejected_up_front),
		cmocka_unit_test(test_virtual_hosted_style_round_trips),
	};
	return cmocka_run_group_tests_name("s3_live", tests, setup, teardown);
}
