/* launcher.h: how the Node service runs and finds `tierfs mount` daemons.
 *
 * Each staged volume has a cache dir CACHE_ROOT/<64 hex: SHA-256 of the
 * volume id> (so no id can reach outside CACHE_ROOT), holding the
 * daemon's own files (state, health, capacity, tierfs.log, ...) plus two
 * of ours: `credentials` (0600, the node-stage secrets) and `csi-stage`
 * (what was staged where, with which mount arguments; no secrets). The
 * daemons are detached (their own session, no fd of ours), so they outlive
 * tierfs-csi; a restarted plugin finds everything again from these files.
 * Threading: every function is safe from any thread (no shared state);
 * the caller keeps two calls for one volume from overlapping (node.c).
 */
#ifndef TIERFS_CSI_LAUNCHER_H
#define TIERFS_CSI_LAUNCHER_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#define CSI_LAUNCH_OUTPUT_MAX 1024 /* of a tool's stderr kept for errors */
#define CSI_STAGE_FILE "csi-stage"
#define CSI_CREDS_FILE "credentials"

/* CACHE_ROOT/<hex SHA-256 of volume_id>; -ENAMETOOLONG when it will not
 * fit. */
int csi_cache_dir(const char *cache_root, const char *volume_id,
		  char out[PATH_MAX]);

/* Makes dir (and its parents, 0700). 0 or -errno. */
int csi_mkdir_p(const char *dir, mode_t mode);

/* Writes DIR/credentials, mode 0600 from its creation (a fresh O_EXCL
 * file, renamed into place), in the format of s3_credentials_from_file().
 * session_token may be NULL. 0 or -errno. */
int csi_write_credentials(const char *dir, const char *access_key,
			  const char *secret_key, const char *session_token);

/* Writes DIR/name whole (tmp + rename, 0600). 0 or -errno. */
int csi_write_file(const char *dir, const char *name, const char *text);
/* Reads DIR/name into buf (NUL-terminated); -ENOENT when absent. */
int csi_read_file(const char *dir, const char *name, char *buf, size_t len);
/* The value of "name=value" in a file's text, or "" (out is len bytes). */
void csi_field(const char *text, const char *name, char *out, size_t len);
#define CSI_HEALTH_STALE_S 120 /* health not rewritten this long: stuck */
#define CSI_DIRTY_STUCK_S 600  /* a change waits this long: uploads stuck */
/* Why a staged volume is not healthy, into msg, or "" when it is: its
 * daemon is not alive; its health file (CACHE_DIR/health, cache/health.c;
 * NULL when not written yet) is older than CSI_HEALTH_STALE_S at now;
 * it says S3 is failing (s3=error, with s3_error); or its oldest change
 * has waited more than CSI_DIRTY_STUCK_S for S3 (oldest_dirty_s). */
void csi_volume_condition(int alive, const char *health, time_t now, char *msg,
			  size_t len);

/* Runs argv (argv[0] a path) with a scrubbed environment, in its own
 * session, with no fd of ours but its stderr/stdout, which are captured
 * into out (at most len-1 bytes, NUL-terminated). Waits for it and
 * returns its exit status (0..255), or -errno when it could not run. A
 * child that daemonizes (tierfs mount) is waited for only until its
 * parent process exits. */
int csi_run(char *const argv[], char *out, size_t len);

/* The mount point entry of path in /proc/self/mountinfo: 1 and its
 * device ("maj:min") when path is a mount point, 0 when not, -errno. */
int csi_mount_dev(const char *path, char *dev, size_t len);

/* Reads DIR/state: 1 when a daemon serves mountpoint (its supervisor is
 * alive and the state says serving), else 0. daemon_mnt (optional,
 * PATH_MAX) gets the mountpoint the state names. */
int csi_daemon_alive(const char *dir, char *daemon_mnt);

#endif
