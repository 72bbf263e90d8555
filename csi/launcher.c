/* launcher.c: running and finding `tierfs mount` daemons (see launcher.h).
 */
#include "launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/sha.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int csi_cache_dir(const char *cache_root, const char *volume_id,
		  char out[PATH_MAX])
{
	unsigned char md[SHA256_DIGEST_LENGTH];
	char hex[2 * SHA256_DIGEST_LENGTH + 1];
	SHA256((const unsigned char *)volume_id, strlen(volume_id), md);
	for (size_t i = 0; i < sizeof(md); i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	int n = snprintf(out, PATH_MAX, "%s/%s", cache_root, hex);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

int csi_mkdir_p(const char *dir, mode_t mode)
{
	char buf[PATH_MAX];
	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf))
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

/* Creates DIR/name.tmp fresh (O_EXCL, 0600 from the start, whatever the
 * umask), writes text, fsyncs and renames it over DIR/name. */
static int replace_file(const char *dir, const char *name, const char *text)
{
	char path[PATH_MAX], tmp[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
		    (int)sizeof(path) ||
	    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name) >=
		    (int)sizeof(tmp))
		return -ENAMETOOLONG;
	if (unlink(tmp) != 0 && errno != ENOENT)
		return -errno;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		      0600);
	if (fd < 0)
		return -errno;
	int rc = 0;
	if (fchmod(fd, 0600) != 0) /* in case of an odd umask: never wider */
		rc = -errno;
	size_t len = strlen(text), done = 0;
	while (!rc && done < len) {
		ssize_t n = write(fd, text + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			rc = n < 0 ? -errno : -EIO;
		else
			done += (size_t)n;
	}
	if (!rc && fsync(fd) != 0)
		rc = -errno;
	if (close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		unlink(tmp);
	return rc;
}

int csi_write_file(const char *dir, const char *name, const char *text)
{
	return replace_file(dir, name, text);
}

int csi_write_credentials(const char *dir, const char *access_key,
			  const char *secret_key, const char *session_token)
{
	/* quoted: the reader strips one pair of quotes, and keeps what is
	 * inside (spaces included) as it is */
	char *text = NULL;
	int n = asprintf(&text,
			 "accessKeyID = \"%s\"\nsecretAccessKey = \"%s\"\n"
			 "%s%s%s",
			 access_key, secret_key,
			 session_token ? "sessionToken = \"" : "",
			 session_token ? session_token : "",
			 session_token ? "\"\n" : "");
	if (n < 0)
		return -ENOMEM;
	int rc = replace_file(dir, CSI_CREDS_FILE, text);
	explicit_bzero(text, (size_t)n);
	free(text);
	return rc;
}

int csi_read_file(const char *dir, const char *name, char *buf, size_t len)
{
	char path[PATH_MAX];
	if (snprintf(path, sizeof(path), "%s/%s", dir, name) >=
	    (int)sizeof(path))
		return -ENAMETOOLONG;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	int err = errno;
	close(fd);
	if (n < 0)
		return -err;
	buf[n] = '\0';
	return 0;
}

void csi_field(const char *text, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	out[0] = '\0';
	for (const char *p = text; p && *p;) {
		if (!strncmp(p, name, nl) && p[nl] == '=') {
			size_t n = strcspn(p + nl + 1, "\n");
			snprintf(out, len, "%.*s", (int)n, p + nl + 1);
			return;
		}
		p = strchr(p, '\n');
		p = p ? p + 1 : NULL;
	}
}

/* What a daemon may see of our environment: where S3 is and which CAs to
 * trust, never credentials (those come in the 0600 file). */
static const char *const env_keep[] = {
	"PATH",		 "AWS_ENDPOINT_URL", "AWS_REGION",
	"AWS_CA_BUNDLE", "CURL_CA_BUNDLE",   "SSL_CERT_FILE",
	"ASAN_OPTIONS",	 "UBSAN_OPTIONS",    "TZ",
};

int csi_run(char *const argv[], char *out, size_t len)
{
	enum { NKEEP = sizeof(env_keep) / sizeof(env_keep[0]) };
	char *envp[NKEEP + 1];
	size_t ne = 0;
	for (size_t i = 0; i < NKEEP; i++) {
		const char *v = getenv(env_keep[i]);
		if (v && asprintf(&envp[ne], "%s=%s", env_keep[i], v) >= 0)
			ne++;
	}
	envp[ne] = NULL;

	int p[2], rc;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	sigset_t none, deflt;
	pid_t pid;
	out[0] = '\0';
	if (pipe2(p, O_CLOEXEC) != 0) {
		rc = -errno;
		goto fail_pipe;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null",
					 O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, p[1], STDERR_FILENO);
	posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
	posix_spawnattr_init(&at);
	/* tierfs-csi blocks SIGTERM/SIGINT in every thread (main.c): the
	 * daemon must get them, and must not die with our session */
	sigemptyset(&none);
	sigemptyset(&deflt);
	sigaddset(&deflt, SIGPIPE);
	sigaddset(&deflt, SIGTERM);
	sigaddset(&deflt, SIGINT);
	sigaddset(&deflt, SIGHUP);
	sigaddset(&deflt, SIGUSR1);
	posix_spawnattr_setsigmask(&at, &none);
	posix_spawnattr_setsigdefault(&at, &deflt);
	posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK |
					      POSIX_SPAWN_SETSIGDEF |
					      POSIX_SPAWN_SETSID);
	rc = -posix_spawn(&pid, argv[0], &fa, &at, argv, envp);
	posix_spawnattr_destroy(&at);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc) {
		close(p[0]);
		goto fail_pipe;
	}
	/* until every writer is gone: tierfs mount's daemon drops the pipe
	 * once it has its log open */
	size_t have = 0;
	char sink[512] = "";
	for (;;) {
		char *dst = have + 1 < len ? out + have : sink;
		size_t room = have + 1 < len ? len - 1 - have : sizeof(sink);
		ssize_t n = read(p[0], dst, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (dst == out + have)
			have += (size_t)n;
	}
	out[have] = '\0';
	close(p[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0) {
		if (errno != EINTR) {
			rc = -errno;
			goto fail_pipe;
		}
	}
	rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
fail_pipe:
	for (size_t i = 0; i < ne; i++)
		free(envp[i]);
	return rc;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

int csi_mount_dev(const char *path, char *dev, size_t len)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	if (!f)
		return -errno;
	char line[8192];
	int found = 0;
	/* the last entry wins: it is the one on top */
	while (fgets(line, sizeof(line), f)) {
		char *save = NULL, *fld[5];
		int i = 0;
		for (char *t = strtok_r(line, " ", &save); t && i < 5;
		     t = strtok_r(NULL, " ", &save))
			fld[i++] = t;
		if (i < 5)
			continue;
		unescape(fld[4]);
		if (strcmp(fld[4], path) == 0) {
			found = 1;
			snprintf(dev, len, "%s", fld[2]);
		}
	}
	fclose(f);
	return found;
}

int csi_daemon_alive(const char *dir, char *daemon_mnt)
{
	char st[2048], pid_s[32], state[32], cmd[256];
	if (daemon_mnt)
		daemon_mnt[0] = '\0';
	if (csi_read_file(dir, "state", st, sizeof(st)) != 0)
		return 0;
	if (daemon_mnt)
		csi_field(st, "mountpoint", daemon_mnt, PATH_MAX);
	csi_field(st, "supervisor", pid_s, sizeof(pid_s));
	csi_field(st, "state", state, sizeof(state));
	long pid = strtol(pid_s, NULL, 10);
	if (strcmp(state, "serving") != 0 || pid <= 0 ||
	    kill((pid_t)pid, 0) != 0)
		return 0;
	/* and still a tierfs, not a recycled pid */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%ld/cmdline", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, cmd, sizeof(cmd) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	cmd[n] = '\0';
	const char *base = strrchr(cmd, '/');
	base = base ? base + 1 : cmd;
	return strcmp(base, "tierfs") == 0;
}

void csi_volume_condition(int alive, const char *health, time_t now, char *msg,
			  size_t len)
{
	char v[160];
	msg[0] = '\0';
	if (!alive) {
		snprintf(
			msg, len,
			"the tierfs daemon serving this volume is not running; "
			"its mount is dead until NodeStageVolume runs again");
		return;
	}
	if (!health)
		return; /* just started: the first one comes in seconds */
	csi_field(health, "updated", v, sizeof(v));
	long long age = (long long)now - strtoll(v, NULL, 10);
	if (age > CSI_HEALTH_STALE_S) {
		snprintf(msg, len,
			 "the tierfs daemon has not reported for %lld s "
			 "(stuck?)",
			 age);
		return;
	}
	csi_field(health, "s3", v, sizeof(v));
	if (!strcmp(v, "error")) {
		csi_field(health, "s3_error", v, sizeof(v));
		snprintf(msg, len, "S3 is failing: %s", v);
		return;
	}
	csi_field(health, "oldest_dirty_s", v, sizeof(v));
	long long oldest = strtoll(v, NULL, 10);
	if (oldest > CSI_DIRTY_STUCK_S) {
		csi_field(health, "dirty_inodes", v, sizeof(v));
		snprintf(msg, len,
			 "uploads are stuck: a change has waited %lld s for "
			 "S3 (%s files pending)",
			 oldest, v);
	}
}
