/* mount.c: `tierfs mount`, the FUSE daemon's command line and start-up.
 *
 * Start-up order matters: every argument is validated and the bucket is
 * checked before anything is created; then the process forks (unless -f)
 * before any thread exists, and the child opens the cache dir, loads the
 * tree, mounts, and only then tells the parent, which exits 0. Any failure
 * on the way is reported by the parent with a non-zero exit, and nothing
 * stays mounted. SIGTERM, SIGINT and umount end the session; everything
 * dirty is then uploaded before the process exits.
 * Credentials come from the environment or a 0600 file, never from argv.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse3/fuse_lowlevel.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../s3/s3.h"
#include "../s3/units.h"
#include "data.h"
#include "fs.h"
#include "lease.h"
#include "meta.h"
#include "serve.h"

#define DEFAULT_CACHE_SIZE (20ull << 30)
/* bytes of upload bodies held in memory at once (s3.h snapshot_budget):
 * four 16 MiB parts */
#define UPLOAD_SNAPSHOT_BUDGET (64ull << 20)
/* the supervisor gives up after this many worker crashes in the window */
#define SUPERVISE_CRASH_MAX 10
#define SUPERVISE_WINDOW_S 60

struct mount_opts {
	char *bucket; /* owned */
	char *prefix; /* owned */
	const char *mountpoint;
	const char *cache_dir;
	const char *creds_file;
	uint64_t cache_size;
	struct s3_config s3;
	struct fs_config fs;
	int foreground;
	int verbose;
	int take_over;	  /* --take-over: the lease's holder is known gone */
	int no_lease;	  /* --no-lease: RWX, last writer wins per file */
	int capacity_set; /* --capacity was given */
	const char *node_name; /* --node: the lease's host; NULL: hostname */
	const struct s3_credentials *creds; /* for each worker's own client */
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tierfs mount s3://BUCKET[/PREFIX] MOUNTPOINT --cache-dir DIR\n"
		"           [--endpoint URL] [--region R] [--credentials-file F]\n"
		"           [--cache-size 20G] [--capacity 10G]\n"
		"           [--uid N] [--gid N] [--file-mode 0644] [--dir-mode 0755]\n"
		"           [--durability s3|local] [--upload-delay 2s] [--read-only]\n"
		"           [--snapshot-interval 5m] [--reconcile-interval 10m]\n"
		"           [--take-over] [--lease-interval 30s] [--s3-timeout 60s]\n"
		"           [--node NAME] [--no-lease] [--no-passthrough]\n"
		"           [-f] [--log-level debug|info|warn|error]\n"
		"       tierfs unmount MOUNTPOINT --cache-dir DIR [--timeout 10m]\n"
		"           (returns 0 once everything is in S3)\n"
		"       tierfs resize MOUNTPOINT --cache-dir DIR --capacity SIZE\n"
		"           (the running mount's quota; 0 for none)\n"
		"Credentials: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and\n"
		"AWS_SESSION_TOKEN), or --credentials-file with mode 0600.\n");
}

static int bad(const char *arg, const char *value, const char *why)
{
	fprintf(stderr, "tierfs: %s '%s': %s\n", arg, value, why);
	return -EINVAL;
}

static int parse_size(const char *arg, const char *s, uint64_t *out)
{
	if (units_parse_size(s, out))
		return bad(arg, s, "expected a size such as 10G or 512M");
	return 0;
}

static int parse_id(const char *arg, const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v > 0x7fffffff)
		return bad(arg, s, "expected a number 0..2147483647");
	*out = (uint32_t)v;
	return 0;
}

static int parse_mode(const char *arg, const char *s, uint32_t *out)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 8);
	if (errno || end == s || *end || *s == '-' || v > 07777)
		return bad(arg, s, "expected an octal mode such as 0644");
	*out = (uint32_t)v;
	return 0;
}

/* "2s", "500ms", "1m", "3" (seconds) */
static int parse_delay(const char *arg, const char *s, unsigned *ms)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	unsigned long mul;
	if (errno || end == s || *s == '-')
		return bad(arg, s, "expected a duration such as 2s or 500ms");
	if (!strcmp(end, "ms"))
		mul = 1;
	else if (!strcmp(end, "s") || !*end)
		mul = 1000;
	else if (!strcmp(end, "m"))
		mul = 60000;
	else
		return bad(arg, s, "expected a duration such as 2s or 500ms");
	if (v > 3600000 / mul)
		return bad(arg, s, "at most one hour");
	*ms = (unsigned)(v * mul);
	return 0;
}

/* "s3://bucket[/prefix]" with the prefix's trailing '/' removed. */
static int parse_url(const char *url, struct mount_opts *o)
{
	if (strncmp(url, "s3://", 5) != 0)
		return bad("volume", url, "expected s3://BUCKET[/PREFIX]");
	const char *b = url + 5;
	size_t bl = strcspn(b, "/");
	if (bl < 3 || bl > 63 ||
	    strspn(b, "abcdefghijklmnopqrstuvwxyz0123456789.-") < bl)
		return bad("volume", url,
			   "bucket names are 3..63 lower-case letters, digits, "
			   "'.' and '-'");
	const char *p = b[bl] ? b + bl + 1 : "";
	size_t pl = strlen(p);
	while (pl && p[pl - 1] == '/')
		pl--;
	o->bucket = strndup(b, bl);
	o->prefix = strndup(p, pl);
	if (!o->bucket || !o->prefix)
		return -ENOMEM;
	/* the prefix's components must be usable names, like a path's */
	char *key;
	if (*o->prefix && layout_key("", o->prefix, 0, &key) != 0)
		return bad("volume", url,
			   "the prefix must not hold empty, '.' or '..' "
			   "components");
	if (*o->prefix)
		free(key);
	return 0;
}

enum {
	OPT_CACHE_DIR = 256,
	OPT_ENDPOINT,
	OPT_REGION,
	OPT_CREDS,
	OPT_CACHE_SIZE,
	OPT_CAPACITY,
	OPT_UID,
	OPT_GID,
	OPT_FILE_MODE,
	OPT_DIR_MODE,
	OPT_DURABILITY,
	OPT_UPLOAD_DELAY,
	OPT_SNAPSHOT_INTERVAL,
	OPT_RECONCILE_INTERVAL,
	OPT_READ_ONLY,
	OPT_TAKE_OVER,
	OPT_S3_TIMEOUT,
	OPT_LEASE_INTERVAL,
	OPT_LOG_LEVEL,
	OPT_NODE,
	OPT_NO_LEASE,
	OPT_NO_PASSTHROUGH,
};

static const struct option long_opts[] = {
	{"cache-dir", required_argument, NULL, OPT_CACHE_DIR},
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},
	{"region", required_argument, NULL, OPT_REGION},
	{"credentials-file", required_argument, NULL, OPT_CREDS},
	{"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
	{"capacity", required_argument, NULL, OPT_CAPACITY},
	{"uid", required_argument, NULL, OPT_UID},
	{"gid", required_argument, NULL, OPT_GID},
	{"file-mode", required_argument, NULL, OPT_FILE_MODE},
	{"dir-mode", required_argument, NULL, OPT_DIR_MODE},
	{"durability", required_argument, NULL, OPT_DURABILITY},
	{"upload-delay", required_argument, NULL, OPT_UPLOAD_DELAY},
	{"snapshot-interval", required_argument, NULL, OPT_SNAPSHOT_INTERVAL},
	{"reconcile-interval", required_argument, NULL, OPT_RECONCILE_INTERVAL},
	{"read-only", no_argument, NULL, OPT_READ_ONLY},
	{"take-over", no_argument, NULL, OPT_TAKE_OVER},
	{"s3-timeout", required_argument, NULL, OPT_S3_TIMEOUT},
	{"lease-interval", required_argument, NULL, OPT_LEASE_INTERVAL},
	{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
	{"node", required_argument, NULL, OPT_NODE},
	{"no-lease", no_argument, NULL, OPT_NO_LEASE},
	{"no-passthrough", no_argument, NULL, OPT_NO_PASSTHROUGH},
	{"foreground", no_argument, NULL, 'f'},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static int parse_args(int argc, char **argv, struct mount_opts *o)
{
	int c, rc = 0;
	while (rc == 0 &&
	       (c = getopt_long(argc, argv, "fh", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_CACHE_DIR:
			o->cache_dir = optarg;
			break;
		case OPT_ENDPOINT:
			o->s3.endpoint = optarg;
			break;
		case OPT_REGION:
			o->s3.region = optarg;
			break;
		case OPT_CREDS:
			o->creds_file = optarg;
			break;
		case OPT_CACHE_SIZE:
			rc = parse_size("--cache-size", optarg, &o->cache_size);
			break;
		case OPT_CAPACITY:
			rc = parse_size("--capacity", optarg, &o->fs.capacity);
			o->capacity_set = 1;
			break;
		case OPT_UID:
			rc = parse_id("--uid", optarg, &o->fs.defaults.uid);
			break;
		case OPT_GID:
			rc = parse_id("--gid", optarg, &o->fs.defaults.gid);
			break;
		case OPT_FILE_MODE:
			rc = parse_mode("--file-mode", optarg,
					&o->fs.defaults.file_mode);
			break;
		case OPT_DIR_MODE:
			rc = parse_mode("--dir-mode", optarg,
					&o->fs.defaults.dir_mode);
			break;
		case OPT_DURABILITY:
			if (!strcmp(optarg, "s3"))
				o->fs.durability_local = 0;
			else if (!strcmp(optarg, "local"))
				o->fs.durability_local = 1;
			else
				rc = bad("--durability", optarg,
					 "expected s3 or local");
			break;
		case OPT_UPLOAD_DELAY:
			rc = parse_delay("--upload-delay", optarg,
					 &o->fs.upload_delay_ms);
			break;
		case OPT_SNAPSHOT_INTERVAL:
			rc = parse_delay("--snapshot-interval", optarg,
					 &o->fs.snapshot_interval_ms);
			break;
		case OPT_RECONCILE_INTERVAL:
			rc = parse_delay("--reconcile-interval", optarg,
					 &o->fs.reconcile_interval_ms);
			break;
		case OPT_READ_ONLY:
			o->fs.read_only = 1;
			break;
		case OPT_TAKE_OVER:
			o->take_over = 1;
			break;
		case OPT_NO_LEASE:
			o->no_lease = 1;
			break;
		case OPT_NO_PASSTHROUGH:
			o->fs.passthrough = 0;
			break;
		case OPT_NODE:
			if (!*optarg || strlen(optarg) >= 64 ||
			    strpbrk(optarg, "\n\r"))
				rc = bad("--node", optarg,
					 "expected a name of 1..63 bytes");
			o->node_name = optarg;
			break;
		case OPT_S3_TIMEOUT:
			rc = parse_delay("--s3-timeout", optarg,
					 &o->s3.deadline_ms);
			if (!rc && o->s3.deadline_ms < 1000)
				rc = bad("--s3-timeout", optarg, "at least 1s");
			break;
		case OPT_LEASE_INTERVAL:
			rc = parse_delay("--lease-interval", optarg,
					 &o->fs.lease_interval_ms);
			if (!rc && o->fs.lease_interval_ms < 100)
				rc = bad("--lease-interval", optarg,
					 "at least 100ms");
			break;
		case OPT_LOG_LEVEL:
			if (!strcmp(optarg, "debug"))
				o->verbose = 1;
			else if (strcmp(optarg, "info") &&
				 strcmp(optarg, "warn") &&
				 strcmp(optarg, "error"))
				rc = bad("--log-level", optarg,
					 "expected debug, info, warn or error");
			break;
		case 'f':
			o->foreground = 1;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (rc)
		return rc;
	if (argc - optind != 2) {
		fprintf(stderr, "tierfs: mount needs s3://BUCKET[/PREFIX] and "
				"MOUNTPOINT\n");
		usage(stderr);
		return -EINVAL;
	}
	rc = parse_url(argv[optind], o);
	if (rc)
		return rc;
	o->mountpoint = argv[optind + 1];
	struct stat st;
	if (stat(o->mountpoint, &st) != 0 || !S_ISDIR(st.st_mode))
		return bad("MOUNTPOINT", o->mountpoint,
			   "must be an existing directory");
	if (!o->cache_dir)
		return bad("--cache-dir", "", "is required");
	if (o->cache_dir[0] != '/')
		return bad("--cache-dir", o->cache_dir, "must be absolute");
	if (o->no_lease && o->take_over)
		return bad("--take-over", "", "makes no sense with --no-lease");
	char why[256];
	if (s3_config_validate(&o->s3, why, sizeof(why)))
		return bad("--endpoint/--region",
			   o->s3.endpoint ? o->s3.endpoint : "", why);
	return 0;
}

static int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) != 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) != 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Tells the waiting parent how start-up went (0 or a positive errno). */
static void report(int fd, int err)
{
	if (fd < 0)
		return;
	ssize_t n = write(fd, &err, sizeof(err));
	(void)n;
	close(fd);
}

/* ---- the worker: one process serving the mount ----------------------------
 */

/* SIGTERM, SIGINT and SIGHUP go to handler; SIGPIPE is ignored (a write
 * to a closed pipe or socket returns EPIPE instead). */
static void on_stop_signals(void (*handler)(int))
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

struct worker {
	struct mount_opts *o;
	struct fs *fs;
	int report_fd;
	unsigned flags; /* FS_START_* */
};

static void worker_signal(int sig)
{
	(void)sig;
	serve_stop();
}

/* Runs in the worker once INIT is processed: the mount serves from now. */
static void worker_ready(void *ctx, int takeover)
{
	struct worker *w = ctx;
	if (takeover)
		fprintf(stderr, "tierfs: worker %d took over the mount\n",
			(int)getpid());
	else
		fprintf(stderr, "tierfs: s3://%s/%s mounted on %s\n",
			w->o->bucket, w->o->prefix, w->o->mountpoint);
	int rc = fs_start(w->fs, w->flags);
	if (rc)
		fprintf(stderr,
			"tierfs: no background thread (%s): no "
			"snapshots or reconciliation until unmount\n",
			strerror(-rc));
	report(w->report_fd, 0);
	w->report_fd = -1;
}

/* The cache's free floor: DATA_DEFAULT_FREE_FLOOR, but at most a quarter
 * of the cache dir's filesystem. A floor the disk can never meet (a small
 * cache disk) would evict each clean file as soon as it is closed, and
 * with S3 out of reach, reads of it would fail. */
static uint64_t free_floor_for(const char *dir)
{
	struct statvfs sv;
	if (statvfs(dir, &sv) != 0)
		return DATA_DEFAULT_FREE_FLOOR;
	uint64_t quarter = (uint64_t)sv.f_blocks * sv.f_frsize / 4;
	return quarter < DATA_DEFAULT_FREE_FLOOR ? quarter
						 : DATA_DEFAULT_FREE_FLOOR;
}

/* Why a read-write mount is refused: the lease is someone else's. */
static void lease_refused(const struct mount_opts *o, const struct lease *l,
			  const char *why)
{
	if (!strncmp(why, "granted", 7))
		fprintf(stderr,
			"tierfs: s3://%s/%s is not this node's to write: its "
			"lease is %s (this node is '%s'). Mount it "
			"--read-only, or pass --take-over\n",
			o->bucket, o->prefix, why, l->host);
	else
		fprintf(stderr,
			"tierfs: s3://%s/%s is mounted read-write elsewhere: "
			"its lease is %s. Mount it --read-only, or pass "
			"--take-over once that node is gone\n",
			o->bucket, o->prefix, why);
}

static void snapshot_unusable(int rc)
{
	fprintf(stderr,
		"tierfs: the index snapshot is unusable (%s); reading the "
		"listing instead\n",
		strerror(-rc));
}

struct snapshot_check {
	const char *path;
	int rc;
};

static void *check_main(void *arg)
{
	struct snapshot_check *c = arg;
	c->rc = meta_snapshot_check(c->path);
	return NULL;
}

struct stale_find {
	s3_client *s3;
	const struct mount_opts *o;
	struct fs_stale_uploads found;
};

static void *find_main(void *arg)
{
	struct stale_find *f = arg;
	/* a failed listing is logged; the uploads wait for the next mount */
	fs_find_stale_uploads(f->s3, f->o->bucket, f->o->prefix, &f->found);
	return NULL;
}

/* Creates the cache dir's "loaded": the volume is in the store, and no
 * mount from here on loads it again. Durable (the directory synced) before
 * the mount serves: a power loss that took the marker but kept what fsync
 * made durable since would have the next mount drop those changes with
 * the store it loads anew. A store that came whole from a snapshot
 * (fs_fetch_snapshot(), not synced) is made durable first: the marker must
 * never stand beside a torn one. */
static int mark_loaded(const char *cache_dir, const char *loaded,
		       const char *snapshot_store)
{
	int fd;
	if (snapshot_store) {
		fd = open(snapshot_store, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return -errno;
		int rc = fsync(fd) == 0 ? 0 : -errno;
		close(fd);
		if (rc)
			return rc;
	}
	fd = open(loaded, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	close(fd);
	fd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int rc = fsync(fd) == 0 ? 0 : -errno;
	close(fd);
	return rc;
}

/* Opens the store (loading the volume on a new cache dir), then serves
 * the mount on fuse_fd until it ends. gen 0 is the first worker of this
 * mount; a later one takes over from a dead predecessor. Returns the exit
 * status: 0 when the mount ended and everything reached S3. */
static int worker_main(struct mount_opts *o, s3_client *inherited, int fuse_fd,
		       unsigned gen, int report_fd)
{
	/* connections of its own: the pooled ones it inherited are shared
	 * with the supervisor and with every worker before it, and one that
	 * died may have left a response half read on them */
	s3_client *s3 = NULL;
	(void)inherited;
	if (s3_client_create(&o->s3, o->creds, &s3) != 0) {
		fprintf(stderr, "tierfs: cannot create the S3 client\n");
		report(report_fd, EIO);
		return 1;
	}
	if (o->fs.lease)
		o->fs.lease->s3 = s3;
	char path[PATH_MAX];
	struct meta *meta = NULL;
	struct fs *fs = NULL;
	struct fuse_session *se = NULL;
	struct stale_find stale = {s3, o, {NULL, 0}};
	int rc, status = 1;

	on_stop_signals(worker_signal);

	/* The first mount on this cache dir starts from the volume's index
	 * snapshot when there is one (the tree at once), else from a LIST. */
	char loaded[PATH_MAX];
	snprintf(loaded, sizeof(loaded), "%s/loaded", o->cache_dir);
	snprintf(path, sizeof(path), "%s/meta.db", o->cache_dir);
	int first = access(loaded, F_OK) != 0, from_snapshot = 0;
	if (first) {
		/* a load that never finished: nothing in it is ours yet */
		fs_remove_store(path);
		rc = fs_fetch_snapshot(s3, o->bucket, o->prefix, path);
		from_snapshot = rc == 0;
		if (rc && rc != -ENOENT)
			snapshot_unusable(rc);
	}
	struct meta_config mc;
	meta_config_init(&mc);
	mc.path = path;
	/* every change is committed before it is answered (one commit per
	 * request: fs.c batches its changes): a killed worker loses nothing
	 * the kernel was told (a commit is a write, not an fsync; fsync and
	 * syncfs make it durable against power loss) */
	mc.commit_interval_ms = 0;
	/* but a write's mtime alone may wait a little: the kernel holds it
	 * (writeback cache) and sends it again with SETATTR */
	mc.lazy_commit_ms =
		fs_debug_ms("TIERFS_DEBUG_LAZY_COMMIT_MS", FS_LAZY_COMMIT_MS);
	mc.root_mode = S_IFDIR | (o->fs.defaults.dir_mode & 07777);
	mc.root_uid = o->fs.defaults.uid;
	mc.root_gid = o->fs.defaults.gid;
	mc.adopt_kernel_refs = gen > 0;
	/* the snapshot's quick_check reads it on a second core while the
	 * store loads from it (about 40 ms of the 0.4 s a first mount of
	 * 100k files took with one after the other); a store that fails it
	 * is dropped, and so is one that does not load */
	struct snapshot_check chk = {path, 0};
	pthread_t checker, finder;
	int checking = from_snapshot &&
		       pthread_create(&checker, NULL, check_main, &chk) == 0;
	/* and the uploads a killed process left are listed meanwhile (a
	 * read, before the lease is confirmed: the aborts wait for it) */
	int finding = !o->fs.read_only &&
		      pthread_create(&finder, NULL, find_main, &stale) == 0;
	if (from_snapshot && !checking)
		chk.rc = meta_snapshot_check(path);
	rc = meta_open(&mc, &meta);
	if (checking)
		pthread_join(checker, NULL);
	if (finding)
		pthread_join(finder, NULL);
	if (from_snapshot && (chk.rc || rc)) {
		snapshot_unusable(chk.rc ? chk.rc : rc);
		if (meta)
			meta_close(meta);
		meta = NULL;
		fs_remove_store(path);
		from_snapshot = 0;
		rc = meta_open(&mc, &meta);
	}
	if (rc) {
		fprintf(stderr, "tierfs: metadata store '%s': %s\n", path,
			strerror(-rc));
		goto out;
	}
	/* the lease's read-back waited while the volume loaded; nothing is
	 * written to S3 before it. A lease lost here is said in the log (or
	 * on the terminal, with -f), and mount_main() says it to its caller */
	if (gen == 0 && o->fs.lease) {
		char why[256];
		/* a racing node's PUT may land in here */
		fs_debug_pause("TIERFS_DEBUG_LEASE_CONFIRM_PAUSE_MS");
		rc = lease_confirm(o->fs.lease, why, sizeof(why));
		if (rc == -EBUSY)
			lease_refused(o, o->fs.lease, why);
		else if (rc)
			fprintf(stderr, "tierfs: taking the write lease: %s\n",
				strerror(-rc));
		if (rc) {
			report(report_fd, -rc);
			report_fd = -1;
			goto out;
		}
	}
	struct data_config dc;
	char data_dir[PATH_MAX];
	data_config_init(&dc);
	snprintf(data_dir, sizeof(data_dir), "%s/data", o->cache_dir);
	dc.dir = data_dir;
	dc.size_limit = o->cache_size;
	dc.free_floor = free_floor_for(o->cache_dir);
	/* tests stand for a reboot with another id (NULL: the kernel's) */
	dc.boot_id = getenv("TIERFS_DEBUG_BOOT_ID");
	o->fs.bucket = o->bucket;
	o->fs.prefix = o->prefix;
	o->fs.cache_dir = o->cache_dir;
	/* the quota as last set: --capacity, or `tierfs resize` since */
	uint64_t cap;
	if (fs_capacity_read(o->cache_dir, &cap) == 0)
		o->fs.capacity = cap;
	o->fs.takeover = gen > 0;
	rc = fs_create(&o->fs, s3, meta, &dc, &fs);
	if (rc) {
		fprintf(stderr, "tierfs: cache '%s': %s\n", data_dir,
			strerror(-rc));
		goto out;
	}
	if (first) {
		rc = from_snapshot ? 0 : fs_load_tree(fs);
		if (!rc)
			rc = mark_loaded(o->cache_dir, loaded,
					 from_snapshot ? path : NULL);
		if (rc) {
			fprintf(stderr, "tierfs: loading s3://%s/%s: %s\n",
				o->bucket, o->prefix, strerror(-rc));
			goto out;
		}
	}
	fs_abort_stale_uploads(fs, &stale.found);

	char *fargv[] = {"tierfs", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(1, fargv);
	se = fuse_session_new(&args, &fs_ops, sizeof(fs_ops), fs);
	fuse_opt_free_args(&args);
	if (!se || serve_attach(se, fuse_fd) != 0) {
		fprintf(stderr, "tierfs: cannot serve the mount's /dev/fuse\n");
		goto out;
	}
	fs_set_session(fs, se);
	/* what other tools changed meanwhile shows after a reconciliation;
	 * a tree just read from the listing needs none */
	struct worker w = {
		o, fs, report_fd,
		(!first || from_snapshot ? FS_START_RECONCILE : 0) |
			(from_snapshot ? FS_START_FROM_SNAPSHOT : 0)};
	snprintf(path, sizeof(path), "%s/init.req", o->cache_dir);
	struct serve_config sc = {SERVE_DEFAULT_THREADS, FS_MAX_WRITE, path,
				  worker_ready, &w};
	rc = serve_run(se, &sc);
	report_fd = w.report_fd;
	status = rc ? 1 : 0;
	if (rc)
		fprintf(stderr, "tierfs: serving the mount: %s\n",
			strerror(-rc));
out:
	if (fs) {
		fs_set_session(fs, NULL);
		rc = fs_destroy(fs);
		if (rc) {
			fprintf(stderr,
				"tierfs: not everything reached S3 (%s); it "
				"stays in %s for the next mount\n",
				strerror(-rc), o->cache_dir);
			status = 1;
		}
	}
	if (se)
		fuse_session_destroy(se);
	if (meta)
		meta_close(meta);
	fs_abort_stale_uploads(NULL, &stale.found); /* frees what is left */
	s3_client_destroy(s3);
	report(report_fd, status ? EIO : 0);
	return status;
}

/* ---- the state file: what runs for this cache dir ------------------------ */

/* CACHE_DIR/state (0600, replaced whole): the volume, the mountpoint, the
 * supervisor's and the worker's pids, and, once it stopped, whether
 * everything reached S3. A launcher that restarts finds its daemons here,
 * and `tierfs unmount` waits on it. */
static void write_state(const struct mount_opts *o, pid_t worker,
			const char *state, int status)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/state", o->cache_dir);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	char real[PATH_MAX];
	if (!realpath(o->mountpoint, real))
		snprintf(real, sizeof(real), "%s", o->mountpoint);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fchmod(fileno(f), 0600);
	fprintf(f,
		"volume=s3://%s/%s\nmountpoint=%s\nsupervisor=%d\nworker=%d\n"
		"state=%s\n",
		o->bucket, o->prefix, real, (int)getpid(), (int)worker, state);
	if (!strcmp(state, "stopped"))
		fprintf(f, "result=%s\n", status ? "dirty" : "clean");
	if (fclose(f) == 0)
		rename(tmp, path);
}

/* ---- the supervisor: holds the mount, restarts dead workers ----------------
 */

static volatile sig_atomic_t stop_requested;
static volatile pid_t current_worker;

static void supervisor_signal(int sig)
{
	stop_requested = 1;
	if (current_worker > 0)
		kill(current_worker, sig == SIGINT ? SIGTERM : sig);
}

static const struct fuse_lowlevel_ops no_ops;

/* Everything after the fork: mounts, then runs workers until one ends the
 * mount. Returns the exit status. */
static int run(struct mount_opts *o, s3_client *s3, int report_fd)
{
	char path[PATH_MAX];
	int status = 1;
	int rc = mkdir_p(o->cache_dir, 0700);
	if (rc) {
		fprintf(stderr, "tierfs: --cache-dir '%s': %s\n", o->cache_dir,
			strerror(-rc));
		report(report_fd, -rc);
		return 1;
	}
	/* an INIT kept by an earlier mount is not this mount's, nor are the
	 * kernel's opens it recorded */
	snprintf(path, sizeof(path), "%s/init.req", o->cache_dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/init.req.pt", o->cache_dir);
	unlink(path);
	snprintf(path, sizeof(path), "%s/opens", o->cache_dir);
	unlink(path);

	char fsname[128];
	snprintf(fsname, sizeof(fsname), "fsname=tierfs:%s", o->bucket);
	char *fargv[] = {"tierfs",
			 "-o",
			 fsname,
			 "-o",
			 "subtype=tierfs,default_permissions,allow_other",
			 o->fs.read_only ? "-o" : NULL,
			 "ro",
			 NULL};
	struct fuse_args args = FUSE_ARGS_INIT(o->fs.read_only ? 7 : 5, fargv);
	struct fuse_session *se =
		fuse_session_new(&args, &no_ops, sizeof(no_ops), NULL);
	fuse_opt_free_args(&args);
	if (!se || fuse_session_mount(se, o->mountpoint) != 0) {
		fprintf(stderr, "tierfs: cannot mount on '%s'\n",
			o->mountpoint);
		if (se)
			fuse_session_destroy(se);
		report(report_fd, EIO);
		return 1;
	}
	int fuse_fd = fuse_session_fd(se);

	on_stop_signals(supervisor_signal);

	unsigned gen = 0, recent = 0, killed = 0;
	time_t window = time(NULL);
	for (;;) {
		pid_t pid = fork();
		if (pid == 0)
			_exit(worker_main(o, s3, fuse_fd, gen,
					  gen ? -1 : report_fd));
		if (pid < 0) {
			perror("tierfs: fork");
			break;
		}
		if (gen == 0 && report_fd >= 0) {
			close(report_fd); /* the worker reports */
			report_fd = -1;
		}
		current_worker = pid;
		write_state(o, pid, "serving", 0);
		int st;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		current_worker = 0;
		if (WIFEXITED(st)) {
			status = WEXITSTATUS(st);
			break;
		}
		/* killed: the mount lives on in a new worker, unless we
		 * were told to stop or workers keep crashing. SIGKILL comes
		 * from outside (the OOM killer, an admin): it never ends the
		 * mount, but a burst of them slows the restarts down. Any
		 * other signal is a crash (SIGSEGV, SIGABRT, ...), perhaps on
		 * a request every new worker is sent again: more than
		 * SUPERVISE_CRASH_MAX of them in SUPERVISE_WINDOW_S, and the
		 * supervisor gives up rather than spin. */
		int sig = WTERMSIG(st);
		time_t now = time(NULL);
		if (now - window > SUPERVISE_WINDOW_S) {
			window = now;
			recent = killed = 0;
		}
		if (access(path, F_OK) != 0) {
			fprintf(stderr,
				"tierfs: worker %d died (signal %d) before "
				"the mount was up\n",
				(int)pid, sig);
			break;
		}
		if (sig == SIGKILL && !stop_requested &&
		    ++killed > SUPERVISE_CRASH_MAX) {
			fprintf(stderr,
				"tierfs: worker %d killed (signal 9): %u "
				"kills within %d s; the next worker starts "
				"in 1 s\n",
				(int)pid, killed, SUPERVISE_WINDOW_S);
			sleep(1);
		} else if (stop_requested ||
			   (sig != SIGKILL && ++recent > SUPERVISE_CRASH_MAX)) {
			fprintf(stderr,
				"tierfs: worker %d died (signal %d); %s\n",
				(int)pid, sig,
				stop_requested ? "stopping as asked"
					       : "too many crashes, giving up");
			break;
		}
		fprintf(stderr,
			"tierfs: worker %d died (signal %d); starting "
			"another on the live mount\n",
			(int)pid, sig);
		gen++;
	}
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	unlink(path);
	write_state(o, 0, "stopped", status);
	return status;
}

/* After a start that failed: waits, up to 30 s, for the daemon to unmount
 * and exit, so that nothing is left mounted when the command returns (a
 * caller such as the CSI node retries on the same mountpoint). */
static void reap_failed(pid_t pid)
{
	for (int i = 0; i < 3000; i++) {
		pid_t r = waitpid(pid, NULL, WNOHANG);
		if (r == pid || (r < 0 && errno != EINTR))
			return;
		usleep(10 * 1000);
	}
}

/* Whether HEAD finds the bucket; says why not. */
static int bucket_reachable(s3_client *s3, const char *bucket)
{
	struct s3_error e;
	if (s3_head_bucket(s3, bucket, &e) == 0)
		return 1;
	fprintf(stderr, "tierfs: bucket '%s': %s: %s\n", bucket, e.code,
		e.message);
	return 0;
}

static int mount_main(int argc, char **argv)
{
	struct mount_opts o;
	struct s3_credentials creds = {0};
	s3_client *s3 = NULL;
	char why[512];
	int status = 2;
	struct lease lease;
	int have_lease = 0;

	memset(&o, 0, sizeof(o));
	s3_config_init(&o.s3);
	s3_config_from_env(&o.s3);
	/* cache files change while they upload: send consistent copies */
	o.s3.snapshot_budget = UPLOAD_SNAPSHOT_BUDGET;
	fs_config_init(&o.fs);
	o.cache_size = DEFAULT_CACHE_SIZE;
	optind = 1;
	if (parse_args(argc, argv, &o))
		goto out;
	int rc = o.creds_file ? s3_credentials_from_file(o.creds_file, &creds,
							 why, sizeof(why))
			      : s3_credentials_from_env(&creds);
	if (rc) {
		if (!o.creds_file)
			snprintf(why, sizeof(why),
				 "no credentials: set AWS_ACCESS_KEY_ID and "
				 "AWS_SECRET_ACCESS_KEY, or pass "
				 "--credentials-file");
		fprintf(stderr, "tierfs: %s\n", why);
		goto out;
	}
	status = 1;
	o.creds = &creds;
	if (s3_client_create(&o.s3, &creds, &s3) != 0) {
		fprintf(stderr, "tierfs: cannot create the S3 client\n");
		goto out;
	}
	/* A mount that takes the lease learns that the bucket is there, and
	 * the credentials good, from the lease's GET; the HEAD then only
	 * explains a failure. It was 7-24 ms before the lease's PUT, from
	 * which the read-back waits LEASE_SETTLE_MS before the mount serves. */
	int leased = !o.fs.read_only && !o.no_lease;
	if (!leased && !bucket_reachable(s3, o.bucket))
		goto out;
	/* one daemon per cache dir: the lock is inherited by the supervisor
	 * and its workers, and free once the last of them is gone */
	rc = mkdir_p(o.cache_dir, 0700);
	if (rc) {
		fprintf(stderr, "tierfs: --cache-dir '%s': %s\n", o.cache_dir,
			strerror(-rc));
		goto out;
	}
	char lockp[PATH_MAX];
	snprintf(lockp, sizeof(lockp), "%s/lock", o.cache_dir);
	int lockfd = open(lockp, O_RDWR | O_CREAT, 0600);
	if (lockfd < 0 || flock(lockfd, LOCK_EX | LOCK_NB) != 0) {
		fprintf(stderr,
			"tierfs: --cache-dir '%s' is in use by another tierfs "
			"(see its state file)\n",
			o.cache_dir);
		goto out;
	}
	/* --capacity is the quota from now on; without it, the last one
	 * set for this cache dir (a remount after `tierfs resize`) */
	if (o.capacity_set) {
		rc = fs_capacity_write(o.cache_dir, o.fs.capacity);
		if (rc) {
			fprintf(stderr, "tierfs: %s/%s: %s\n", o.cache_dir,
				FS_CAPACITY_FILE, strerror(-rc));
			goto out;
		}
	}
	/* one writer per volume: the lease, before anything is mounted;
	 * --no-lease (RWX) takes none: the last writer of a file wins */
	if (leased) {
		rc = lease_init(&lease, s3, o.bucket, o.prefix, o.cache_dir,
				o.node_name);
		have_lease = rc == 0;
		/* the read-back that confirms it comes later, in the worker,
		 * once the volume is loaded (worker_main()) */
		if (!rc)
			rc = lease_claim(&lease, o.take_over, why, sizeof(why));
		if (rc == -EBUSY) {
			lease_refused(&o, &lease, why);
			goto out;
		}
		if (rc) {
			if (bucket_reachable(s3, o.bucket))
				fprintf(stderr,
					"tierfs: taking the write lease: %s\n",
					strerror(-rc));
			goto out;
		}
		if (o.take_over)
			fprintf(stderr, "tierfs: took the write lease over\n");
		o.fs.lease = &lease;
	}

	if (o.foreground) {
		status = run(&o, s3, -1);
		goto out;
	}
	int pipefd[2];
	if (pipe(pipefd) != 0) {
		perror("tierfs: pipe");
		goto out;
	}
	pid_t pid = fork();
	if (pid < 0) {
		perror("tierfs: fork");
		goto out;
	}
	if (pid == 0) {
		close(pipefd[0]);
		setsid();
		/* the daemon logs into its cache dir */
		char logp[PATH_MAX];
		snprintf(logp, sizeof(logp), "%s/tierfs.log", o.cache_dir);
		mkdir_p(o.cache_dir, 0700);
		int fd = open(logp, O_WRONLY | O_CREAT | O_APPEND, 0600);
		int nul = open("/dev/null", O_RDWR);
		if (nul >= 0) {
			dup2(nul, STDIN_FILENO);
			dup2(fd >= 0 ? fd : nul, STDOUT_FILENO);
			dup2(fd >= 0 ? fd : nul, STDERR_FILENO);
		}
		if (chdir("/") != 0)
			_exit(1);
		_exit(run(&o, s3, pipefd[1]));
	}
	close(pipefd[1]);
	int err = EIO;
	ssize_t n = read(pipefd[0], &err, sizeof(err));
	close(pipefd[0]);
	if (n == (ssize_t)sizeof(err) && err == EBUSY && have_lease) {
		/* a racing node's PUT of the lease landed after ours */
		lease_describe(&lease, why, sizeof(why));
		lease_refused(&o, &lease, why);
		reap_failed(pid);
		status = 1;
	} else if (n != (ssize_t)sizeof(err) || err) {
		fprintf(stderr, "tierfs: mount failed; see %s/tierfs.log\n",
			o.cache_dir);
		reap_failed(pid);
		status = 1;
	} else {
		status = 0;
	}
out:
	if (have_lease)
		lease_free(&lease);
	s3_client_destroy(s3);
	s3_credentials_free(&creds);
	free(o.bucket);
	free(o.prefix);
	return status;
}

/* ---- tierfs unmount ------------------------------------------------------ */

static void state_field(const char *body, const char *name, char *out,
			size_t len)
{
	size_t nl = strlen(name);
	out[0] = '\0';
	for (const char *p = body; p && *p;) {
		if (!strncmp(p, name, nl) && p[nl] == '=') {
			size_t n = strcspn(p + nl + 1, "\n");
			snprintf(out, len, "%.*s", (int)n, p + nl + 1);
			return;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
}

static int read_state(const char *cache_dir, char *buf, size_t len)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/state", cache_dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -EIO;
	buf[n] = '\0';
	return 0;
}

/* What the state file in cache_dir says of the daemon serving mountpoint:
 * its real path (mnt), the supervisor's pid and its state. 0, or 2 after
 * saying on stderr why it does not serve that mountpoint. */
static int daemon_of(const char *mountpoint, const char *cache_dir,
		     char mnt[PATH_MAX], pid_t *pid, char state[32])
{
	char st[2048], where[PATH_MAX], pid_s[32];
	if (!realpath(mountpoint, mnt)) {
		fprintf(stderr, "tierfs: '%s': %s\n", mountpoint,
			strerror(errno));
		return 2;
	}
	if (read_state(cache_dir, st, sizeof(st)) != 0) {
		fprintf(stderr, "tierfs: no daemon state in '%s'\n", cache_dir);
		return 2;
	}
	state_field(st, "mountpoint", where, sizeof(where));
	state_field(st, "supervisor", pid_s, sizeof(pid_s));
	state_field(st, "state", state, 32);
	*pid = (pid_t)strtol(pid_s, NULL, 10);
	if (strcmp(where, mnt) != 0) {
		fprintf(stderr, "tierfs: '%s' serves '%s', not '%s'\n",
			cache_dir, where, mnt);
		return 2;
	}
	return 0;
}

/* Unmounts and waits until the daemon has put everything in S3 (what
 * NodeUnstage needs): 0 then, 1 when something stayed behind, 2 for bad
 * arguments. */
static int unmount_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"cache-dir", required_argument, NULL, 'c'},
		{"timeout", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0},
	};
	const char *cache_dir = NULL;
	unsigned timeout_ms = 600000;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'c')
			cache_dir = optarg;
		else if (c == 't' &&
			 parse_delay("--timeout", optarg, &timeout_ms) == 0)
			continue;
		else
			return 2;
	}
	if (argc - optind != 1 || !cache_dir) {
		fprintf(stderr, "usage: tierfs unmount MOUNTPOINT --cache-dir "
				"DIR [--timeout 10m]\n");
		return 2;
	}
	char mnt[PATH_MAX], st[2048], result[32], state[32];
	pid_t pid;
	if (daemon_of(argv[optind], cache_dir, mnt, &pid, state))
		return 2;
	if (umount2(mnt, 0) != 0 && errno != EINVAL) {
		fprintf(stderr, "tierfs: umount '%s': %s\n", mnt,
			strerror(errno));
		return 1;
	}
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (read_state(cache_dir, st, sizeof(st)) == 0) {
			state_field(st, "result", result, sizeof(result));
			if (result[0])
				break;
		}
		if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
			result[0] = '\0';
			break; /* gone without saying how it ended */
		}
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) * 1000 +
			    (now.tv_nsec - t0.tv_nsec) / 1000000 >
		    (long)timeout_ms) {
			fprintf(stderr, "tierfs: the daemon is still uploading "
					"after the timeout\n");
			return 1;
		}
		usleep(50 * 1000);
	}
	/* and gone, so that the cache dir is free for the next mount */
	for (int i = 0; pid > 0 && i < 200 && kill(pid, 0) == 0; i++)
		usleep(25 * 1000);
	if (strcmp(result, "clean") != 0) {
		fprintf(stderr,
			"tierfs: not everything reached S3; it stays in %s "
			"for the next mount\n",
			cache_dir);
		return 1;
	}
	return 0;
}

/* ---- tierfs resize ------------------------------------------------------- */

/* Sets the running mount's quota: writes CACHE_DIR/capacity, then waits
 * until statfs on the mount shows it (the worker's background thread
 * looks every FS_BG_TICK_MS). 0 then, 1 when the daemon did not apply it
 * in time (the file stays: the next worker and mount use it), 2 for bad
 * arguments. */
static int resize_main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"cache-dir", required_argument, NULL, 'c'},
		{"capacity", required_argument, NULL, 's'},
		{NULL, 0, NULL, 0},
	};
	const char *cache_dir = NULL, *size_s = NULL;
	int c;
	optind = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'c')
			cache_dir = optarg;
		else if (c == 's')
			size_s = optarg;
		else
			return 2;
	}
	uint64_t cap;
	if (argc - optind != 1 || !cache_dir || !size_s) {
		fprintf(stderr,
			"usage: tierfs resize MOUNTPOINT --cache-dir DIR "
			"--capacity SIZE\n");
		return 2;
	}
	if (parse_size("--capacity", size_s, &cap))
		return 2;
	char mnt[PATH_MAX], state[32];
	pid_t pid;
	if (daemon_of(argv[optind], cache_dir, mnt, &pid, state))
		return 2;
	if (strcmp(state, "serving") != 0 || pid <= 0 || kill(pid, 0) != 0) {
		fprintf(stderr, "tierfs: '%s' does not serve '%s' now\n",
			cache_dir, mnt);
		return 2;
	}
	int rc = fs_capacity_write(cache_dir, cap);
	if (rc) {
		fprintf(stderr, "tierfs: %s/%s: %s\n", cache_dir,
			FS_CAPACITY_FILE, strerror(-rc));
		return 1;
	}
	/* what op_statfs reports for it */
	uint64_t want = (cap ? cap : 1ull << 50) / 4096;
	for (int i = 0; i < 100; i++) {
		struct statvfs sv;
		if (statvfs(mnt, &sv) == 0 && sv.f_blocks == want)
			return 0;
		usleep(50 * 1000);
	}
	fprintf(stderr,
		"tierfs: the daemon has not applied the new quota within 5 s; "
		"it is saved in %s/%s for its next worker\n",
		cache_dir, FS_CAPACITY_FILE);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && strcmp(argv[1], "mount") == 0)
		return mount_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "unmount") == 0)
		return unmount_main(argc - 1, argv + 1);
	if (argc >= 2 && strcmp(argv[1], "resize") == 0)
		return resize_main(argc - 1, argv + 1);
	if (argc >= 2 &&
	    (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
		usage(stdout);
		return 0;
	}
	usage(stderr);
	return 2;
}
