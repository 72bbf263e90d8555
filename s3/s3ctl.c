/* s3ctl.c: `tierfsctl s3 ls|get|put|rm|head|mb|bench`, the S3 client from a
 * shell.
 *
 * Configuration comes from the same variables as every tierfs tool
 * (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 * AWS_SESSION_TOKEN) or from flags; secrets only from the environment or a
 * 0600 file, never from argv. Exit status: 0 ok, 1 operation failed,
 * 2 usage error.
 */
#include "s3ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/rand.h>

#include "s3.h"
#include "units.h"

#define BENCH_SMALL_SIZE 4096
#define BENCH_SMALL_COUNT 50
#define BENCH_FILL_BLOCK (1u << 20)

struct ctl {
	struct s3_config cfg;
	struct s3_credentials creds;
	s3_client *client;
	int verbose;
	int recursive;
	uint64_t size;
	unsigned threads;
	const char *content_type;
	struct s3_meta meta[16];
	size_t nmeta;
	char *meta_store[16];
	const char *tmpdir;
};

static void log_stderr(void *ctx, enum s3_log_level level, const char *msg)
{
	const struct ctl *ctl = ctx;
	static const char *const names[] = {"debug", "info", "warn", "error"};
	if (level == S3_LOG_DEBUG && !ctl->verbose)
		return;
	if (level <= S3_LOG_INFO && !ctl->verbose)
		return;
	fprintf(stderr, "tierfsctl: %s: %s\n", names[level], msg);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tierfsctl s3 COMMAND [options]\n"
		"  ls s3://BUCKET[/PREFIX] [-r]      list keys (one level, or all with -r)\n"
		"  head s3://BUCKET/KEY               size, ETag, mtime and metadata\n"
		"  get s3://BUCKET/KEY [FILE|-]       download (parallel ranges into a file)\n"
		"  put FILE s3://BUCKET/KEY [--content-type T] [--meta NAME=VALUE]...\n"
		"  rm s3://BUCKET/KEY | rm -r s3://BUCKET/PREFIX\n"
		"  mb s3://BUCKET                     create a bucket (ok if it is ours)\n"
		"  bench s3://BUCKET/KEY [--size 1G] [--threads 8]\n"
		"                                     raw PUT/GET MiB/s and small-PUT latency\n"
		"options: --endpoint URL --region R --credentials-file F\n"
		"         --parallel N --part-size SIZE --path-style|--virtual-host\n"
		"         --tmpdir DIR -v\n"
		"Credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY[/AWS_SESSION_TOKEN]\n"
		"or --credentials-file (mode 0600). Endpoint and region default to\n"
		"AWS_ENDPOINT_URL and AWS_REGION.\n");
}

/* Splits "s3://bucket/key" into malloc'ed parts; key may be "". */
static int parse_url(const char *url, char **bucket, char **key)
{
	if (strncmp(url, "s3://", 5) != 0) {
		fprintf(stderr, "tierfsctl: '%s': expected s3://BUCKET[/KEY]\n",
			url);
		return -EINVAL;
	}
	const char *b = url + 5;
	size_t bl = strcspn(b, "/");
	if (bl < 3 || bl > 63) {
		fprintf(stderr,
			"tierfsctl: '%s': bucket name must be 3..63 characters\n",
			url);
		return -EINVAL;
	}
	*bucket = strndup(b, bl);
	*key = strdup(b[bl] ? b + bl + 1 : "");
	return *bucket && *key ? 0 : -ENOMEM;
}

static int fail(const char *what, int rc, const struct s3_error *e)
{
	char buf[512];
	if (e && (e->code[0] || e->message[0]))
		fprintf(stderr, "tierfsctl: %s: %s (%s)\n", what,
			s3_error_str(e, buf, sizeof(buf)), strerror(-rc));
	else
		fprintf(stderr, "tierfsctl: %s: %s\n", what, strerror(-rc));
	return 1;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int print_page(void *ctx, const struct s3_list_page *p)
{
	(void)ctx;
	for (size_t i = 0; i < p->nprefixes; i++)
		printf("%28s  %s\n", "PRE", p->common_prefixes[i]);
	for (size_t i = 0; i < p->nentries; i++) {
		char t[32];
		struct tm tm;
		gmtime_r(&p->entries[i].last_modified, &tm);
		strftime(t, sizeof(t), "%Y-%m-%d %H:%M:%S", &tm);
		printf("%s %10" PRIu64 "  %s\n", t, p->entries[i].size,
		       p->entries[i].key);
	}
	return 0;
}

static int cmd_ls(struct ctl *ctl, const char *bucket, const char *key)
{
	struct s3_error e;
	int rc = s3_list_all(ctl->client, bucket, key,
			     ctl->recursive ? NULL : "/", print_page, NULL, &e);
	return rc ? fail("ls", rc, &e) : 0;
}

static int cmd_head(struct ctl *ctl, const char *bucket, const char *key)
{
	struct s3_error e;
	struct s3_object_info info;
	int rc = s3_head_object(ctl->client, bucket, key, &info, &e);
	if (rc)
		return fail("head", rc, &e);
	printf("size: %" PRIu64 "\netag: %s\nlast-modified: %lld\n"
	       "content-type: %s\n",
	       info.size, info.etag, (long long)info.last_modified,
	       info.content_type ? info.content_type : "");
	for (size_t i = 0; i < info.nmeta; i++)
		printf("x-amz-meta-%s: %s\n", info.meta[i].name,
		       info.meta[i].value);
	s3_object_info_free(&info);
	return 0;
}

static int cmd_get(struct ctl *ctl, const char *bucket, const char *key,
		   const char *dest)
{
	struct s3_error e;
	int rc;
	if (!dest || strcmp(dest, "-") == 0) {
		ssize_t n = s3_get_fd(ctl->client, bucket, key, 0, S3_TO_END,
				      STDOUT_FILENO, -1, NULL, NULL, &e);
		return n < 0 ? fail("get", (int)n, &e) : 0;
	}
	int fd = open(dest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail(dest, -errno, NULL);
	rc = s3_download_fd(ctl->client, bucket, key, fd, NULL, &e);
	if (close(fd) != 0 && rc == 0)
		rc = -errno;
	return rc ? fail("get", rc, &e) : 0;
}

static struct s3_put_opts put_opts(const struct ctl *ctl)
{
	struct s3_put_opts o = {.content_type = ctl->content_type,
				.meta = ctl->meta,
				.nmeta = ctl->nmeta};
	return o;
}

static int cmd_put(struct ctl *ctl, const char *src, const char *bucket,
		   const char *key)
{
	struct s3_error e;
	struct stat st;
	char etag[S3_ETAG_MAX];
	int fd = open(src, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(src, -errno, NULL);
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		fprintf(stderr, "tierfsctl: put: '%s' is not a regular file\n",
			src);
		return 1;
	}
	struct s3_put_opts o = put_opts(ctl);
	int rc = s3_upload_fd(ctl->client, bucket, key, fd, 0,
			      (uint64_t)st.st_size, &o, etag, &e);
	close(fd);
	if (rc)
		return fail("put", rc, &e);
	printf("%s\n", etag);
	return 0;
}

struct rm_ctx {
	struct ctl *ctl;
	const char *bucket;
	size_t deleted;
	struct s3_error *err;
};

static int rm_page(void *arg, const struct s3_list_page *p)
{
	struct rm_ctx *rc = arg;
	const char **keys =
		calloc(p->nentries ? p->nentries : 1, sizeof(char *));
	if (!keys)
		return -ENOMEM;
	for (size_t i = 0; i < p->nentries; i++)
		keys[i] = p->entries[i].key;
	int r = s3_delete_objects(rc->ctl->client, rc->bucket, keys,
				  p->nentries, rc->err);
	free(keys);
	if (r == 0)
		rc->deleted += p->nentries;
	return r;
}

static int cmd_rm(struct ctl *ctl, const char *bucket, const char *key)
{
	struct s3_error e;
	if (!ctl->recursive) {
		int rc = s3_delete_object(ctl->client, bucket, key, &e);
		return rc ? fail("rm", rc, &e) : 0;
	}
	struct rm_ctx rc = {ctl, bucket, 0, &e};
	int r = s3_list_all(ctl->client, bucket, key, NULL, rm_page, &rc, &e);
	if (r)
		return fail("rm -r", r, &e);
	printf("deleted %zu objects\n", rc.deleted);
	return 0;
}

static int cmd_mb(struct ctl *ctl, const char *bucket)
{
	struct s3_error e;
	int rc = s3_create_bucket(ctl->client, bucket, &e);
	if (rc == -EEXIST && strcmp(e.code, "BucketAlreadyExists") != 0)
		return 0; /* already ours */
	return rc ? fail("mb", rc, &e) : 0;
}

/* A temporary file of size bytes of random data (1 MiB blocks). */
static int bench_source(const struct ctl *ctl, uint64_t size)
{
	int fd = open(ctl->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	unsigned char *block = malloc(BENCH_FILL_BLOCK);
	int rc = block ? 0 : -ENOMEM;
	for (uint64_t off = 0; rc == 0 && off < size; off += BENCH_FILL_BLOCK) {
		size_t n = size - off < BENCH_FILL_BLOCK ? (size_t)(size - off)
							 : BENCH_FILL_BLOCK;
		if (RAND_bytes(block, (int)n) != 1)
			rc = -EIO;
		else if (pwrite(fd, block, n, (off_t)off) != (ssize_t)n)
			rc = -errno;
	}
	free(block);
	if (rc) {
		close(fd);
		return rc;
	}
	return fd;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static int cmd_bench(struct ctl *ctl, const char *bucket, const char *key)
{
	struct s3_error e;
	uint64_t size = ctl->size ? ctl->size : (1ull << 30);
	double mib = (double)size / (1 << 20);
	int rc = 0;
	char small_key[S3_MAX_KEY_LEN + 32];

	if (!*key) {
		fprintf(stderr, "tierfsctl: bench: needs s3://BUCKET/KEY\n");
		return 2;
	}
	int src = bench_source(ctl, size);
	if (src < 0)
		return fail("bench: temporary file", src, NULL);
	int dst = open(ctl->tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (dst < 0) {
		close(src);
		return fail("bench: temporary file", -errno, NULL);
	}
	printf("object: %.0f MiB, %u threads, %" PRIu64 " MiB parts\n", mib,
	       ctl->cfg.parallel, ctl->cfg.part_size >> 20);
	fflush(stdout);

	double t0 = now_s();
	rc = s3_upload_fd(ctl->client, bucket, key, src, 0, size, NULL, NULL,
			  &e);
	double t1 = now_s();
	if (rc) {
		fail("bench put", rc, &e);
		goto out;
	}
	printf("put: %.1f MiB/s\n", mib / (t1 - t0));
	fflush(stdout);

	struct s3_object_info info;
	t0 = now_s();
	rc = s3_download_fd(ctl->client, bucket, key, dst, &info, &e);
	t1 = now_s();
	if (rc) {
		fail("bench get", rc, &e);
		goto cleanup;
	}
	s3_object_info_free(&info);
	printf("get: %.1f MiB/s\n", mib / (t1 - t0));
	fflush(stdout);

	char small[BENCH_SMALL_SIZE];
	double lat[BENCH_SMALL_COUNT];
	RAND_bytes((unsigned char *)small, sizeof(small));
	snprintf(small_key, sizeof(small_key), "%s.small", key);
	for (int i = 0; i < BENCH_SMALL_COUNT && rc == 0; i++) {
		t0 = now_s();
		rc = s3_put_buf(ctl->client, bucket, small_key, small,
				sizeof(small), NULL, NULL, &e);
		lat[i] = (now_s() - t0) * 1000;
	}
	if (rc) {
		fail("bench small-put", rc, &e);
		goto cleanup;
	}
	qsort(lat, BENCH_SMALL_COUNT, sizeof(double), cmp_double);
	printf("small-put: %.1f ms (median of %d x %d B; p90 %.1f ms)\n",
	       lat[BENCH_SMALL_COUNT / 2], BENCH_SMALL_COUNT, BENCH_SMALL_SIZE,
	       lat[BENCH_SMALL_COUNT * 9 / 10]);
cleanup:
	s3_delete_object(ctl->client, bucket, key, NULL);
	s3_delete_object(ctl->client, bucket, small_key, NULL);
out:
	close(src);
	close(dst);
	return rc ? 1 : 0;
}

static int add_meta(struct ctl *ctl, const char *arg)
{
	const char *eq = strchr(arg, '=');
	if (!eq || eq == arg || ctl->nmeta >= 16) {
		fprintf(stderr,
			"tierfsctl: --meta '%s': expected NAME=VALUE (at most "
			"16)\n",
			arg);
		return -EINVAL;
	}
	char *copy = strdup(arg);
	if (!copy)
		return -ENOMEM;
	copy[eq - arg] = '\0';
	ctl->meta_store[ctl->nmeta] = copy;
	ctl->meta[ctl->nmeta].name = copy;
	ctl->meta[ctl->nmeta].value = copy + (eq - arg) + 1;
	ctl->nmeta++;
	return 0;
}

enum {
	OPT_ENDPOINT = 256,
	OPT_REGION,
	OPT_CREDS,
	OPT_PARALLEL,
	OPT_PART_SIZE,
	OPT_PATH_STYLE,
	OPT_VIRTUAL,
	OPT_SIZE,
	OPT_THREADS,
	OPT_CONTENT_TYPE,
	OPT_META,
	OPT_TMPDIR,
};

static const struct option long_opts[] = {
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},
	{"region", required_argument, NULL, OPT_REGION},
	{"credentials-file", required_argument, NULL, OPT_CREDS},
	{"parallel", required_argument, NULL, OPT_PARALLEL},
	{"part-size", required_argument, NULL, OPT_PART_SIZE},
	{"path-style", no_argument, NULL, OPT_PATH_STYLE},
	{"virtual-host", no_argument, NULL, OPT_VIRTUAL},
	{"size", required_argument, NULL, OPT_SIZE},
	{"threads", required_argument, NULL, OPT_THREADS},
	{"content-type", required_argument, NULL, OPT_CONTENT_TYPE},
	{"meta", required_argument, NULL, OPT_META},
	{"tmpdir", required_argument, NULL, OPT_TMPDIR},
	{"recursive", no_argument, NULL, 'r'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int parse_uint(const char *opt, const char *s, unsigned max,
		      unsigned *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > max) {
		fprintf(stderr, "tierfsctl: %s '%s': must be 1..%u\n", opt, s,
			max);
		return -EINVAL;
	}
	*out = (unsigned)v;
	return 0;
}

static int parse_args(struct ctl *ctl, int argc, char **argv,
		      const char **creds_file)
{
	int c;
	while ((c = getopt_long(argc, argv, "rvh", long_opts, NULL)) != -1) {
		int rc = 0;
		switch (c) {
		case OPT_ENDPOINT:
			ctl->cfg.endpoint = optarg;
			break;
		case OPT_REGION:
			ctl->cfg.region = optarg;
			break;
		case OPT_CREDS:
			*creds_file = optarg;
			break;
		case OPT_PARALLEL:
			rc = parse_uint("--parallel", optarg, 256,
					&ctl->cfg.parallel);
			break;
		case OPT_THREADS:
			rc = parse_uint("--threads", optarg, 256,
					&ctl->cfg.parallel);
			break;
		case OPT_PART_SIZE:
			rc = units_parse_size(optarg, &ctl->cfg.part_size);
			if (rc)
				fprintf(stderr,
					"tierfsctl: --part-size '%s': expected "
					"a size such as 8M\n",
					optarg);
			break;
		case OPT_SIZE:
			rc = units_parse_size(optarg, &ctl->size);
			if (rc || ctl->size == 0) {
				fprintf(stderr,
					"tierfsctl: --size '%s': expected a "
					"size such as 1G\n",
					optarg);
				rc = -EINVAL;
			}
			break;
		case OPT_PATH_STYLE:
			ctl->cfg.addressing = S3_ADDRESSING_PATH;
			break;
		case OPT_VIRTUAL:
			ctl->cfg.addressing = S3_ADDRESSING_VIRTUAL;
			break;
		case OPT_CONTENT_TYPE:
			ctl->content_type = optarg;
			break;
		case OPT_META:
			rc = add_meta(ctl, optarg);
			break;
		case OPT_TMPDIR:
			ctl->tmpdir = optarg;
			break;
		case 'r':
			ctl->recursive = 1;
			break;
		case 'v':
			ctl->verbose = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
		if (rc)
			return rc;
	}
	return 0;
}

int s3ctl_main(int argc, char **argv)
{
	struct ctl ctl;
	const char *creds_file = NULL;
	char why[512];
	int rc, status = 2;
	char *bucket = NULL, *key = NULL;

	memset(&ctl, 0, sizeof(ctl));
	ctl.tmpdir = "/var/tmp";
	s3_config_init(&ctl.cfg);
	s3_config_from_env(&ctl.cfg);
	ctl.cfg.log = log_stderr;
	ctl.cfg.log_ctx = &ctl;
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	const char *cmd = argv[1];
	optind = 2;
	if (parse_args(&ctl, argc, argv, &creds_file))
		goto out;
	char **pos = argv + optind;
	int npos = argc - optind;

	if (creds_file)
		rc = s3_credentials_from_file(creds_file, &ctl.creds, why,
					      sizeof(why));
	else if ((rc = s3_credentials_from_env(&ctl.creds)) == -ENOENT)
		snprintf(why, sizeof(why),
			 "no credentials: set AWS_ACCESS_KEY_ID and "
			 "AWS_SECRET_ACCESS_KEY, or pass --credentials-file");
	if (rc) {
		fprintf(stderr, "tierfsctl: %s\n", why);
		goto out;
	}
	if (s3_config_validate(&ctl.cfg, why, sizeof(why))) {
		fprintf(stderr, "tierfsctl: %s\n", why);
		goto out;
	}
	if (s3_client_create(&ctl.cfg, &ctl.creds, &ctl.client)) {
		fprintf(stderr, "tierfsctl: cannot create the S3 client\n");
		status = 1;
		goto out;
	}

	const char *url = NULL;
	if (strcmp(cmd, "put") == 0 && npos == 2)
		url = pos[1];
	else if (npos >= 1 && strcmp(cmd, "put") != 0)
		url = pos[0];
	if (!url) {
		usage(stderr);
		goto out;
	}
	if (parse_url(url, &bucket, &key))
		goto out;
	int need_key = strcmp(cmd, "head") == 0 || strcmp(cmd, "get") == 0 ||
		       strcmp(cmd, "put") == 0 ||
		       (strcmp(cmd, "rm") == 0 && !ctl.recursive);
	if (need_key && !*key) {
		fprintf(stderr, "tierfsctl: %s: '%s' names no key\n", cmd, url);
		goto out;
	}

	if (strcmp(cmd, "ls") == 0 && npos == 1)
		status = cmd_ls(&ctl, bucket, key);
	else if (strcmp(cmd, "head") == 0 && npos == 1)
		status = cmd_head(&ctl, bucket, key);
	else if (strcmp(cmd, "get") == 0 && npos <= 2)
		status = cmd_get(&ctl, bucket, key, npos == 2 ? pos[1] : NULL);
	else if (strcmp(cmd, "put") == 0)
		status = cmd_put(&ctl, pos[0], bucket, key);
	else if (strcmp(cmd, "rm") == 0 && npos == 1)
		status = cmd_rm(&ctl, bucket, key);
	else if (strcmp(cmd, "mb") == 0 && npos == 1)
		status = cmd_mb(&ctl, bucket);
	else if (strcmp(cmd, "bench") == 0 && npos == 1)
		status = cmd_bench(&ctl, bucket, key);
	else
		usage(stderr);
out:
	free(bucket);
	free(key);
	for (size_t i = 0; i < ctl.nmeta; i++)
		free(ctl.meta_store[i]);
	s3_client_destroy(ctl.client);
	s3_credentials_free(&ctl.creds);
	return status;
}
