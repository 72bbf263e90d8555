/* health.c: what a running worker tells its launcher, and what it hears
 * back: CACHE_DIR/health (written) and CACHE_DIR/capacity (read).
 *
 * health: "name=value" lines, replaced whole (tmp + rename, 0600) every
 * FS_HEALTH_INTERVAL_MS by the background thread: updated (Unix seconds),
 * s3 (ok|error), s3_error (S3's error code or errno text, never a secret),
 * dirty_inodes, oldest_dirty_s. A launcher reads it for the CSI
 * VolumeCondition; a file older than a few intervals means the worker is
 * stuck or gone.
 * capacity: the quota in bytes, one decimal line, written by `tierfs
 * resize` (and by `tierfs mount --capacity`). The background thread looks
 * at its mtime every tick and applies a change at once; a new worker reads
 * it at start, so the quota survives a crash and a remount.
 * Threading: fs_health_note() from any thread (fs->health_lock); the
 * rest from the background thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_int.h"

void fs_health_note(struct fs *fs, int rc, const char *what)
{
	pthread_mutex_lock(&fs->health_lock);
	uint64_t now = clock_now_ms();
	if (rc == 0) {
		fs->s3_ok_ms = now;
		fs->s3_fail_since_ms = 0;
	} else {
		fs->s3_err_ms = now;
		if (!fs->s3_fail_since_ms)
			fs->s3_fail_since_ms = now;
		snprintf(fs->s3_err, sizeof(fs->s3_err), "%s", what);
	}
	pthread_mutex_unlock(&fs->health_lock);
}

/* Whether the last S3 call noted failed; under health_lock. */
static int s3_failing_locked(const struct fs *fs)
{
	return fs->s3_err_ms && fs->s3_err_ms >= fs->s3_ok_ms;
}

int fs_s3_failing(struct fs *fs)
{
	pthread_mutex_lock(&fs->health_lock);
	int failing = s3_failing_locked(fs);
	pthread_mutex_unlock(&fs->health_lock);
	return failing;
}

uint64_t fs_capacity(struct fs *fs)
{
	return __atomic_load_n(&fs->cfg.capacity, __ATOMIC_RELAXED);
}

int fs_capacity_read(const char *cache_dir, uint64_t *bytes)
{
	char path[PATH_MAX], buf[32];
	snprintf(path, sizeof(path), "%s/%s", cache_dir, FS_CAPACITY_FILE);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return -EINVAL;
	buf[n] = '\0';
	char *end;
	errno = 0;
	unsigned long long v = strtoull(buf, &end, 10);
	if (errno || end == buf || (*end && *end != '\n') || buf[0] == '-')
		return -EINVAL;
	*bytes = v;
	return 0;
}

int fs_capacity_write(const char *cache_dir, uint64_t bytes)
{
	char path[PATH_MAX], tmp[PATH_MAX + 16], buf[32];
	snprintf(path, sizeof(path), "%s/%s", cache_dir, FS_CAPACITY_FILE);
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int len = snprintf(buf, sizeof(buf), "%" PRIu64 "\n", bytes);
	int rc = write(fd, buf, (size_t)len) == len ? 0 : -EIO;
	if (fsync(fd) != 0 && !rc)
		rc = -errno;
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

/* Applies CACHE_DIR/capacity when it changed since the last look. */
static void poll_capacity(struct fs *fs)
{
	char path[PATH_MAX];
	struct stat st;
	snprintf(path, sizeof(path), "%s/%s", fs->cache_dir, FS_CAPACITY_FILE);
	if (stat(path, &st) != 0)
		return;
	if (st.st_mtim.tv_sec == fs->cap_mtime.tv_sec &&
	    st.st_mtim.tv_nsec == fs->cap_mtime.tv_nsec &&
	    st.st_ino == fs->cap_ino)
		return;
	uint64_t bytes;
	if (fs_capacity_read(fs->cache_dir, &bytes) != 0) {
		fs_log("'%s' is not a byte count; the quota stays %" PRIu64,
		       path, fs_capacity(fs));
	} else if (bytes != fs_capacity(fs)) {
		fs_log("quota changed from %" PRIu64 " to %" PRIu64 " bytes",
		       fs_capacity(fs), bytes);
		__atomic_store_n(&fs->cfg.capacity, bytes, __ATOMIC_RELAXED);
	}
	fs->cap_mtime = st.st_mtim;
	fs->cap_ino = st.st_ino;
}

/* Writes CACHE_DIR/health (see the top of this file). */
static void write_health(struct fs *fs)
{
	uint64_t now = clock_now_ms(), oldest = now;
	size_t ndirty;
	pthread_mutex_lock(&fs->lock);
	ndirty = fs->ndirty;
	for (size_t i = 0; i < fs->ndirty; i++)
		if (fs->dirty[i].since_ms < oldest)
			oldest = fs->dirty[i].since_ms;
	pthread_mutex_unlock(&fs->lock);

	pthread_mutex_lock(&fs->health_lock);
	/* a failed upload is requeued as if new: the failure streak says
	 * how long what it held has been waiting */
	if (fs->s3_fail_since_ms && fs->s3_fail_since_ms < oldest)
		oldest = fs->s3_fail_since_ms;
	int failing = s3_failing_locked(fs);
	char err[sizeof(fs->s3_err)];
	snprintf(err, sizeof(err), "%s", failing ? fs->s3_err : "");
	pthread_mutex_unlock(&fs->health_lock);
	for (char *p = err; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';

	char path[PATH_MAX], tmp[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/%s", fs->cache_dir, FS_HEALTH_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	if (fchmod(fileno(f), 0600) != 0) {
		fclose(f);
		unlink(tmp);
		return;
	}
	fprintf(f,
		"updated=%lld\ns3=%s\ns3_error=%s\ndirty_inodes=%zu\n"
		"oldest_dirty_s=%" PRIu64 "\ncapacity=%" PRIu64 "\n",
		(long long)time(NULL), failing ? "error" : "ok", err, ndirty,
		(now - oldest) / 1000, fs_capacity(fs));
	if (fclose(f) == 0)
		rename(tmp, path);
	else
		unlink(tmp);
}

void fs_health_tick(struct fs *fs)
{
	if (!fs->cache_dir)
		return;
	poll_capacity(fs);
	uint64_t now = clock_now_ms();
	if (now < fs->next_health_ms)
		return;
	fs->next_health_ms = now + FS_HEALTH_INTERVAL_MS;
	/* nothing went to S3 lately (an idle or read-only volume): ask it,
	 * cheaply, so the health says what S3 says now */
	pthread_mutex_lock(&fs->health_lock);
	uint64_t last =
		fs->s3_ok_ms > fs->s3_err_ms ? fs->s3_ok_ms : fs->s3_err_ms;
	pthread_mutex_unlock(&fs->health_lock);
	if (!last || now - last >= FS_HEALTH_PROBE_MS) {
		struct s3_error e;
		memset(&e, 0, sizeof(e));
		int rc = s3_head_bucket(fs->s3, fs->bucket, &e);
		char what[sizeof(fs->s3_err)];
		snprintf(what, sizeof(what), "HEAD bucket: %.40s%s%.60s",
			 e.code[0] ? e.code : strerror(-rc),
			 e.message[0] ? ": " : "", e.message);
		fs_health_note(fs, rc, what);
	}
	write_health(fs);
}
