/* node.c: the CSI Node service: stage starts `tierfs mount`, publish
 * bind-mounts it into the pod.
 *
 * A volume on this node goes
 *   ABSENT --NodeStage--> STAGED (a daemon serves the staging path)
 *          --NodePublish--> PUBLISHED (bind mounts of it, one per target)
 *          --NodeUnpublish (last)--> STAGED --NodeUnstage--> ABSENT
 * and a daemon that died leaves STAGED-but-DEAD (a dead FUSE mount):
 * NodeGetVolumeStats reports it abnormal, NodeStage repairs it, and
 * NodeUnstage restarts it once from csi-stage so that what it had not
 * uploaded reaches S3 before the volume leaves the node.
 * Everything this file knows of a volume is on disk (launcher.h), so a
 * restarted plugin picks up where the last one stopped. Two calls for one
 * volume never overlap: the second gets ABORTED, as the spec advises.
 * Every handler runs the same steps: validate the fields, take the
 * volume, be idempotent, then act. Secrets never reach a message, a log
 * line or an argv: they go to the daemon in a 0600 file.
 */
#include "plugin.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "../s3/s3.h"
#include "../s3/units.h"
#include "csi.pb-c.h"
#include "launcher.h"
#include "volume.h"

#define NODE_INFLIGHT_MAX 256
#define NODE_UNMOUNT_TIMEOUT "100s"   /* NodeUnstage waits this for S3 */
#define NODE_MARKER_DEADLINE_MS 10000 /* reading PREFIX/.tierfs/volume */
#define NODE_MARKER_MAX 4096

/* Volumes with a call in progress (see the top of this file). */
struct csi_node {
	pthread_mutex_t lock;
	char ids[NODE_INFLIGHT_MAX][CSI_VOLUME_ID_MAX + 1]; /* by lock */
};

int csi_node_create(struct csi_node **out)
{
	struct csi_node *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->lock, NULL);
	*out = n;
	return 0;
}

void csi_node_destroy(struct csi_node *n)
{
	if (!n)
		return;
	pthread_mutex_destroy(&n->lock);
	free(n);
}

static int take_volume(struct csi_node *n, const char *id)
{
	int slot = -1;
	pthread_mutex_lock(&n->lock);
	for (int i = 0; i < NODE_INFLIGHT_MAX; i++) {
		if (!strcmp(n->ids[i], id)) {
			pthread_mutex_unlock(&n->lock);
			return -EBUSY;
		}
		if (slot < 0 && !n->ids[i][0])
			slot = i;
	}
	if (slot >= 0)
		snprintf(n->ids[slot], sizeof(n->ids[slot]), "%s", id);
	pthread_mutex_unlock(&n->lock);
	return slot;
}

static void give_volume(struct csi_node *n, int slot)
{
	pthread_mutex_lock(&n->lock);
	n->ids[slot][0] = '\0';
	pthread_mutex_unlock(&n->lock);
}

/* ---- validation -----------------------------------------------------------
 */

/* An id tierfs never made (csi_volume_never_made()): once every other
 * field checks out, the volume does not exist (NOT_FOUND), or is not
 * staged or published here (OK for the Unstage and Unpublish calls). Any
 * other id that csi_volume_parse() refuses is INVALID_ARGUMENT. */
static grpc_status_code check_volume_id(const char *id,
					struct csi_volume_ref *ref,
					int *unknown, struct csi_error *err)
{
	char why[256];
	*unknown = 0;
	if (!id || !*id)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_id: required");
	if (csi_volume_parse(id, ref, why, sizeof(why)) == 0)
		return GRPC_STATUS_OK;
	if (csi_volume_never_made(id)) {
		*unknown = 1;
		return GRPC_STATUS_OK;
	}
	return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT, "volume_id: %s",
			  why);
}

static grpc_status_code no_such_volume(const char *id, struct csi_error *err)
{
	return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
			  "volume_id '%s': no such volume (tierfs volume ids "
			  "are BUCKET/PREFIX)",
			  id);
}

/* An absolute path with no '.'/'..' segment and no control byte; out is
 * it without a trailing '/'. */
static grpc_status_code check_path(const char *field, const char *path,
				   char out[PATH_MAX], struct csi_error *err)
{
	if (!path || !*path)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: required", field);
	size_t n = strlen(path);
	if (path[0] != '/')
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: must be an absolute path", field);
	if (n >= PATH_MAX - 64)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: longer than %d bytes", field,
				  PATH_MAX - 64);
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "%s: must not hold control bytes",
					  field);
	for (const char *s = path; s; s = strchr(s + 1, '/')) {
		size_t sl = strcspn(s + 1, "/");
		if ((sl == 1 && s[1] == '.') ||
		    (sl == 2 && s[1] == '.' && s[2] == '.'))
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "%s: must not hold '.' or '..' "
					  "segments",
					  field);
	}
	snprintf(out, PATH_MAX, "%s", path);
	for (size_t l = strlen(out); l > 1 && out[l - 1] == '/'; l--)
		out[l - 1] = '\0';
	return GRPC_STATUS_OK;
}

/* The volume_path of NodeGetVolumeStats and NodeExpandVolume: a relative
 * path is no path the volume is at (NOT_FOUND, the spec's answer for a
 * volume not at volume_path; csi-sanity asks at "some/path"), other bad
 * paths are INVALID_ARGUMENT. */
static grpc_status_code check_volume_path(const char *path, char out[PATH_MAX],
					  struct csi_error *err)
{
	if (path && *path && path[0] != '/')
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume_path: not an absolute path, so the "
				  "volume is not there");
	return check_path("volume_path", path, out, err);
}

enum access { ACCESS_RW, ACCESS_RO, ACCESS_RWX };
static const char *const access_names[] = {"rw", "ro", "rwx"};

/* A mount capability with an access mode tierfs serves. A well-formed
 * one that tierfs volumes do not have (block, another fs_type,
 * MULTI_NODE_SINGLE_WRITER) gets `lacks`: the spec's "Exceeds
 * capabilities" is FAILED_PRECONDITION for NodeStage and NodePublish,
 * INVALID_ARGUMENT for NodeExpand. */
static grpc_status_code check_capability(const Csi__V1__VolumeCapability *c,
					 int required, grpc_status_code lacks,
					 enum access *acc,
					 struct csi_error *err)
{
	if (!c) {
		if (!required)
			return GRPC_STATUS_OK;
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability: required");
	}
	if (c->access_type_case ==
	    CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK)
		return csi_errorf(err, lacks,
				  "volume_capability: block access is not "
				  "supported (tierfs volumes are filesystems)");
	if (c->access_type_case !=
	    CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability.access_type: required "
				  "(mount)");
	if (c->mount->fs_type && *c->mount->fs_type &&
	    strcmp(c->mount->fs_type, "tierfs") != 0 &&
	    strcmp(c->mount->fs_type, "fuse") != 0)
		return csi_errorf(err, lacks,
				  "volume_capability.mount.fs_type '%.32s': "
				  "tierfs volumes are tierfs",
				  c->mount->fs_type);
	if (!c->access_mode)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability.access_mode: required");
	switch (c->access_mode->mode) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
		*acc = ACCESS_RW;
		return GRPC_STATUS_OK;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
		*acc = ACCESS_RO;
		return GRPC_STATUS_OK;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
		*acc = ACCESS_RWX;
		return GRPC_STATUS_OK;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER:
		return csi_errorf(err, lacks,
				  "volume_capability.access_mode: "
				  "MULTI_NODE_SINGLE_WRITER is not supported");
	default:
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability.access_mode: unknown "
				  "mode %d",
				  (int)c->access_mode->mode);
	}
}

/* A map entry's value by key (the generated maps are arrays of entries,
 * all with key and value first after the base). */
struct kv {
	ProtobufCMessage base;
	char *key;
	char *value;
};
#define MAP_GET(req, field, name)                                              \
	map_get((const struct kv *const *)(const void *)(req)->field,          \
		(req)->n_##field, name)
static const char *map_get(const struct kv *const *m, size_t n,
			   const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (m[i]->key && !strcmp(m[i]->key, name))
			return m[i]->value;
	return NULL;
}

static int all_digits(const char *s, size_t max)
{
	size_t n = strlen(s);
	return n > 0 && n <= max && strspn(s, "0123456789") == n;
}

/* A secret usable in the credentials file: printable, one line. Never
 * says what is wrong with the value beyond that. */
static grpc_status_code check_secret(const char *key, const char *v,
				     int required, struct csi_error *err)
{
	if (!v || !*v) {
		if (!required)
			return GRPC_STATUS_OK;
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "secrets: '%s' is required", key);
	}
	if (strlen(v) > 4000 || strpbrk(v, "\"\n\r"))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "secrets: '%s' is not a valid credential "
				  "(one line, no '\"')",
				  key);
	for (const char *p = v; *p; p++)
		if ((unsigned char)*p < 0x20)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "secrets: '%s' holds control bytes",
					  key);
	return GRPC_STATUS_OK;
}

/* ---- mount helpers --------------------------------------------------------
 */

/* realpath of path's parent + its last name: canonical even when path is a
 * dead FUSE mount that cannot be stat'ed. */
static void canon(const char *path, char out[PATH_MAX])
{
	char parent[PATH_MAX], real[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", path);
	char *slash = strrchr(parent, '/');
	if (!slash || slash == parent || !slash[1]) {
		snprintf(out, PATH_MAX, "%s", path);
		return;
	}
	*slash = '\0';
	if (!realpath(parent, real) ||
	    snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "",
		     slash + 1) >= PATH_MAX)
		snprintf(out, PATH_MAX, "%s", path);
}

struct staged {
	char dir[PATH_MAX];	/* the volume's cache dir */
	char text[8192];	/* csi-stage, when read */
	char staging[PATH_MAX]; /* where the daemon serves, canonical */
	int have_stage;		/* csi-stage exists */
	int alive;		/* the daemon runs and serves */
	int mounted;		/* staging is a mount point */
	char dev[32];		/* staging's device, when mounted */
};

/* What this node has of the volume: its cache dir, csi-stage, the daemon
 * and the staging mount. -errno only for a cache dir that cannot be
 * named. */
static int find_staged(const struct csi_plugin *p, const char *id,
		       struct staged *s)
{
	memset(s, 0, sizeof(*s));
	int rc = csi_cache_dir(p->cache_root, id, s->dir);
	if (rc)
		return rc;
	char dmnt[PATH_MAX];
	s->alive = csi_daemon_alive(s->dir, dmnt);
	s->have_stage = csi_read_file(s->dir, CSI_STAGE_FILE, s->text,
				      sizeof(s->text)) == 0;
	if (s->have_stage)
		csi_field(s->text, "staging", s->staging, sizeof(s->staging));
	else
		snprintf(s->staging, sizeof(s->staging), "%s", dmnt);
	if (s->alive && strcmp(dmnt, s->staging) != 0)
		s->alive = 0; /* serving somewhere csi-stage does not say */
	if (s->staging[0])
		s->mounted =
			csi_mount_dev(s->staging, s->dev, sizeof(s->dev)) == 1;
	return 0;
}

/* Builds the daemon's argv from csi-stage's "arg=" lines (into buf). */
static int stage_argv(const struct csi_plugin *p, char *text, char **argv,
		      int max)
{
	int n = 0;
	argv[n++] = (char *)p->tierfs_bin;
	for (char *line = text; line && *line && n < max - 1;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		if (!strncmp(line, "arg=", 4))
			argv[n++] = line + 4;
		line = nl ? nl + 1 : NULL;
	}
	argv[n] = NULL;
	return n;
}

/* Turns `tierfs mount`'s failure into a status: its text never holds a
 * secret (credentials reach it in a file). */
static grpc_status_code mount_failed(int rc, const char *out,
				     struct csi_error *err)
{
	char msg[CSI_LAUNCH_OUTPUT_MAX];
	snprintf(msg, sizeof(msg), "%s", out);
	for (char *c = msg; *c; c++)
		if (*c == '\n')
			*c = ' ';
	grpc_status_code code = GRPC_STATUS_INTERNAL;
	if (strstr(out, "read-write elsewhere") ||
	    strstr(out, "not this node's to write"))
		code = GRPC_STATUS_FAILED_PRECONDITION;
	else if (strstr(out, "NoSuchBucket"))
		code = GRPC_STATUS_NOT_FOUND;
	else if (rc == 2)
		code = GRPC_STATUS_INVALID_ARGUMENT;
	if (rc < 0)
		return csi_errorf(err, code, "starting tierfs: %s",
				  strerror(-rc));
	return csi_errorf(err, code, "tierfs mount failed (exit %d): %s", rc,
			  msg);
}

/* ---- NodeStageVolume ------------------------------------------------------
 */

/* The quota into *cap: PREFIX/.tierfs/volume's capacity (the controller
 * updates it on expansion), else the volume context's; 0: none. -ESTALE
 * when that marker is another volume's (the id's volume was deleted and
 * one made again at its prefix, see volume.h), else 0. */
static int stage_capacity(const struct csi_plugin *p,
			  const struct csi_volume_ref *ref,
			  const char *endpoint, const char *region,
			  const char *ak, const char *sk, const char *tok,
			  const char *ctx_capacity, uint64_t *cap)
{
	*cap = 0;
	if (ctx_capacity)
		*cap = strtoull(ctx_capacity, NULL, 10);
	struct s3_config cfg;
	s3_config_init(&cfg);
	s3_config_from_env(&cfg);
	if (p->s3_endpoint)
		cfg.endpoint = p->s3_endpoint;
	if (p->s3_region)
		cfg.region = p->s3_region;
	if (endpoint)
		cfg.endpoint = endpoint;
	if (region)
		cfg.region = region;
	cfg.deadline_ms = NODE_MARKER_DEADLINE_MS;
	struct s3_credentials creds = {(char *)ak, (char *)sk, (char *)tok};
	s3_client *c = NULL;
	char why[128], key[CSI_VOLUME_ID_MAX + 32], body[NODE_MARKER_MAX + 1];
	if (s3_config_validate(&cfg, why, sizeof(why)) ||
	    s3_client_create(&cfg, &creds, &c) != 0)
		return 0;
	snprintf(key, sizeof(key), "%s/.tierfs/volume", ref->prefix);
	struct s3_error e;
	ssize_t n = s3_get_buf(c, ref->bucket, key, 0, S3_TO_END, body,
			       NODE_MARKER_MAX, NULL, NULL, &e);
	s3_client_destroy(c);
	if (n < 0) {
		if (n != -ENOENT)
			fprintf(stderr,
				"tierfs-csi: reading s3://%s/%s: %s; the quota "
				"is the volume context's\n",
				ref->bucket, key, e.code);
		return 0;
	}
	body[n] = '\0';
	char v[32];
	csi_field(body, "generation", v, sizeof(v));
	if (!csi_volume_gen_matches(ref, v))
		return -ESTALE;
	csi_field(body, "capacity", v, sizeof(v));
	if (all_digits(v, 20))
		*cap = strtoull(v, NULL, 10);
	return 0;
}

/* Checks the volume context (each key optional) so that nothing bad
 * reaches the daemon's argv. */
static grpc_status_code check_context(const Csi__V1__NodeStageVolumeRequest *r,
				      struct csi_error *err)
{
	static const char *const ids[] = {"uid", "gid"};
	for (int i = 0; i < 2; i++) {
		const char *v = MAP_GET(r, volume_context, ids[i]);
		if (v && (!all_digits(v, 10) ||
			  strtoull(v, NULL, 10) > 0x7fffffffull))
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "volume_context.%s '%.16s': expected "
					  "a number",
					  ids[i], v);
	}
	const char *v = MAP_GET(r, volume_context, "mode");
	if (v && (strlen(v) > 5 || !*v || strspn(v, "01234567") != strlen(v)))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.mode '%.16s': expected an "
				  "octal mode such as 0770",
				  v);
	v = MAP_GET(r, volume_context, "durability");
	if (v && strcmp(v, "s3") && strcmp(v, "local"))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.durability '%.16s': "
				  "expected s3 or local",
				  v);
	uint64_t sz;
	v = MAP_GET(r, volume_context, "cacheSize");
	if (v && (*v == '-' || units_parse_size(v, &sz) != 0))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.cacheSize '%.16s': expected "
				  "a size such as 20Gi",
				  v);
	v = MAP_GET(r, volume_context, "capacity");
	if (v && !all_digits(v, 20))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.capacity '%.24s': expected "
				  "bytes",
				  v);
	v = MAP_GET(r, volume_context, "endpoint");
	if (v && ((strncmp(v, "http://", 7) && strncmp(v, "https://", 8)) ||
		  strpbrk(v, " \t\r\n") || strlen(v) > 512))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.endpoint: expected an "
				  "http:// or https:// URL");
	v = MAP_GET(r, volume_context, "region");
	if (v &&
	    (!*v || strlen(v) > 64 ||
	     strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(v)))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_context.region '%.16s': expected a "
				  "region name",
				  v);
	const Csi__V1__VolumeCapability__MountVolume *m =
		r->volume_capability->mount;
	if (m->volume_mount_group && *m->volume_mount_group &&
	    (!all_digits(m->volume_mount_group, 10) ||
	     strtoull(m->volume_mount_group, NULL, 10) > 0x7fffffffull))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability.mount.volume_mount_group "
				  "'%.16s': expected a numeric gid",
				  m->volume_mount_group);
	return GRPC_STATUS_OK;
}

/* The csi-stage text being built; the daemon's argv is its "arg=" lines
 * (stage_argv()). */
struct args {
	char text[8192];
	char copy[8192]; /* split by stage_argv() */
	size_t len;
};

static void add_arg(struct args *a, const char *v)
{
	int w = snprintf(a->text + a->len, sizeof(a->text) - a->len, "arg=%s\n",
			 v);
	if (w < 0 || (size_t)w >= sizeof(a->text) - a->len)
		return; /* cannot happen: the inputs are bounded */
	a->len += (size_t)w;
}

static grpc_status_code stage(void *ctx, const ProtobufCMessage *req,
			      ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodeStageVolumeRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char staging[PATH_MAX];
	enum access acc = ACCESS_RW;
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_path("staging_target_path", r->staging_target_path,
				  staging, err);
	if (!code)
		code = check_capability(r->volume_capability, 1,
					GRPC_STATUS_FAILED_PRECONDITION, &acc,
					err);
	const char *ak = MAP_GET(r, secrets, "accessKeyID");
	const char *sk = MAP_GET(r, secrets, "secretAccessKey");
	const char *tok = MAP_GET(r, secrets, "sessionToken");
	if (!code)
		code = check_secret("accessKeyID", ak, 1, err);
	if (!code)
		code = check_secret("secretAccessKey", sk, 1, err);
	if (!code)
		code = check_secret("sessionToken", tok, 0, err);
	if (!code)
		code = check_context(r, err);
	if (code)
		return code;
	if (unknown)
		return no_such_volume(r->volume_id, err);
	if (tok && !*tok)
		tok = NULL;

	int slot = take_volume(p->node, r->volume_id);
	if (slot < 0)
		return csi_errorf(err, GRPC_STATUS_ABORTED,
				  "volume_id: another call for this volume "
				  "is in progress");
	struct staged *s = malloc(sizeof(*s));
	struct args *a = malloc(sizeof(*a));
	char *out = malloc(CSI_LAUNCH_OUTPUT_MAX);
	if (!s || !a || !out) {
		code = csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
		goto out;
	}
	int rc = csi_mkdir_p(staging, 0750);
	if (rc) {
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "staging_target_path: cannot create it: %s",
				  strerror(-rc));
		goto out;
	}
	char want[PATH_MAX];
	canon(staging, want);
	rc = find_staged(p, r->volume_id, s);
	if (rc) {
		code = csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "--cache-root: too long for a cache dir");
		goto out;
	}
	const Csi__V1__VolumeCapability__MountVolume *m =
		r->volume_capability->mount;
	const char *gid = m->volume_mount_group && *m->volume_mount_group
				  ? m->volume_mount_group
				  : MAP_GET(r, volume_context, "gid");
	char want_access[16], want_gid[16];
	snprintf(want_gid, sizeof(want_gid), "%s", gid ? gid : "");
	snprintf(want_access, sizeof(want_access), "%s", access_names[acc]);
	if (s->alive && s->mounted) {
		if (strcmp(s->staging, want) != 0) {
			code = csi_errorf(
				err, GRPC_STATUS_FAILED_PRECONDITION,
				"volume_id: already staged on this "
				"node at another staging_target_path");
			goto out;
		}
		char have_access[16], have_gid[16];
		csi_field(s->text, "access", have_access, sizeof(have_access));
		csi_field(s->text, "gid", have_gid, sizeof(have_gid));
		if (strcmp(have_access, want_access) ||
		    strcmp(have_gid, want_gid))
			code = csi_errorf(
				err, GRPC_STATUS_ALREADY_EXISTS,
				"staging_target_path: the volume is staged "
				"there %s%s%s; this call asks for %s%s%s",
				have_access, *have_gid ? ", gid " : "",
				have_gid, want_access,
				*want_gid ? ", gid " : "", want_gid);
		goto out; /* the same: nothing to do */
	}
	/* our own daemon died there: detach its dead mount, mount again */
	if (!s->alive && s->mounted && !strcmp(s->staging, want))
		umount2(want, MNT_DETACH);
	char dev[32];
	if (csi_mount_dev(want, dev, sizeof(dev)) == 1) {
		code = csi_errorf(err, GRPC_STATUS_ALREADY_EXISTS,
				  "staging_target_path: another volume is "
				  "mounted there");
		goto out;
	}

	const char *endpoint = MAP_GET(r, volume_context, "endpoint");
	const char *region = MAP_GET(r, volume_context, "region");
	uint64_t cap;
	if (stage_capacity(p, &ref, endpoint, region, ak, sk, tok,
			   MAP_GET(r, volume_context, "capacity"), &cap) != 0) {
		code = csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume_id: the volume was deleted; its "
				  "prefix holds a volume made since");
		goto out;
	}

	rc = csi_mkdir_p(s->dir, 0700);
	if (!rc)
		rc = csi_write_credentials(s->dir, ak, sk, tok);
	if (rc) {
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "cache dir for the volume: %s",
				  strerror(-rc));
		goto out;
	}

	char url[CSI_BUCKET_MAX + CSI_VOLUME_ID_MAX + 8], path[PATH_MAX + 16],
		num[32];
	a->len = (size_t)snprintf(a->text, sizeof(a->text),
				  "volume_id=%s\nstaging=%s\naccess=%s\n"
				  "gid=%s\n",
				  r->volume_id, want, want_access, want_gid);
	add_arg(a, "mount");
	snprintf(url, sizeof(url), "s3://%s/%s", ref.bucket, ref.prefix);
	add_arg(a, url);
	add_arg(a, want);
	add_arg(a, "--cache-dir");
	add_arg(a, s->dir);
	add_arg(a, "--credentials-file");
	snprintf(path, sizeof(path), "%s/%s", s->dir, CSI_CREDS_FILE);
	add_arg(a, path);
	add_arg(a, "--node");
	add_arg(a, p->node_id);
	if (acc == ACCESS_RO)
		add_arg(a, "--read-only");
	if (acc == ACCESS_RWX)
		add_arg(a, "--no-lease");
	add_arg(a, "--capacity");
	snprintf(num, sizeof(num), "%" PRIu64, cap);
	add_arg(a, num);
	static const struct {
		const char *key, *flag;
	} ctx_flags[] = {
		{"uid", "--uid"},
		{"mode", "--dir-mode"},
		{"durability", "--durability"},
		{"cacheSize", "--cache-size"},
	};
	for (size_t i = 0; i < sizeof(ctx_flags) / sizeof(ctx_flags[0]); i++) {
		const char *v = MAP_GET(r, volume_context, ctx_flags[i].key);
		if (v) {
			add_arg(a, ctx_flags[i].flag);
			add_arg(a, v);
		}
	}
	if (gid) { /* VOLUME_MOUNT_GROUP (the pod's fsGroup) wins */
		add_arg(a, "--gid");
		add_arg(a, gid);
	}
	endpoint = endpoint ? endpoint : p->s3_endpoint;
	region = region ? region : p->s3_region;
	if (endpoint) {
		add_arg(a, "--endpoint");
		add_arg(a, endpoint);
	}
	if (region) {
		add_arg(a, "--region");
		add_arg(a, region);
	}
	/* written before the launch: a plugin killed while the daemon
	 * starts still finds it */
	rc = csi_write_file(s->dir, CSI_STAGE_FILE, a->text);
	if (rc) {
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "cache dir for the volume: %s",
				  strerror(-rc));
		goto out;
	}
	char *argv[64];
	memcpy(a->copy, a->text, sizeof(a->copy));
	stage_argv(p, a->copy, argv, 64);
	rc = csi_run(argv, out, CSI_LAUNCH_OUTPUT_MAX);
	if (rc != 0) {
		code = mount_failed(rc, out, err);
		goto out;
	}
	/* the mount's device: its binds have it too, and it identifies them
	 * even after the daemon died and the staging mount was detached */
	char dev2[32];
	if (csi_mount_dev(want, dev2, sizeof(dev2)) == 1 &&
	    snprintf(a->text + a->len, sizeof(a->text) - a->len, "dev=%s\n",
		     dev2) < (int)(sizeof(a->text) - a->len))
		csi_write_file(s->dir, CSI_STAGE_FILE, a->text);
out:
	if (code == GRPC_STATUS_OK) {
		Csi__V1__NodeStageVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_stage_volume_response__init(res);
		*resp = &res->base;
	}
	free(out);
	free(a);
	free(s);
	give_volume(p->node, slot);
	return code;
}

/* ---- NodeUnstageVolume ----------------------------------------------------
 */

/* Restarts a dead daemon from csi-stage, so that what it left in the
 * cache dir reaches S3 at the unmount that follows. */
static grpc_status_code revive(const struct csi_plugin *p, struct staged *s,
			       struct csi_error *err)
{
	char *argv[64], out[CSI_LAUNCH_OUTPUT_MAX], text[sizeof(s->text)];
	if (s->mounted)
		umount2(s->staging, MNT_DETACH);
	memcpy(text, s->text, sizeof(text));
	stage_argv(p, text, argv, 64);
	int rc = csi_run(argv, out, sizeof(out));
	if (rc != 0)
		return mount_failed(rc, out, err);
	return GRPC_STATUS_OK;
}

static grpc_status_code unstage(void *ctx, const ProtobufCMessage *req,
				ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodeUnstageVolumeRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char staging[PATH_MAX];
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_path("staging_target_path", r->staging_target_path,
				  staging, err);
	if (code)
		return code;
	if (unknown) { /* never staged here: nothing to do */
		Csi__V1__NodeUnstageVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_unstage_volume_response__init(res);
		*resp = &res->base;
		return GRPC_STATUS_OK;
	}
	int slot = take_volume(p->node, r->volume_id);
	if (slot < 0)
		return csi_errorf(err, GRPC_STATUS_ABORTED,
				  "volume_id: another call for this volume "
				  "is in progress");
	struct staged *s = malloc(sizeof(*s));
	char want[PATH_MAX], out[CSI_LAUNCH_OUTPUT_MAX];
	if (!s) {
		code = csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
		goto out;
	}
	canon(staging, want);
	if (find_staged(p, r->volume_id, s) != 0 || !s->have_stage ||
	    strcmp(s->staging, want) != 0)
		goto out; /* not staged there: nothing to do */
	if (!s->alive) {
		/* its uploads are owed: run it again to finish them */
		char rdir[PATH_MAX];
		code = GRPC_STATUS_OK;
		if (csi_read_file(s->dir, "state", out, sizeof(out)) == 0) {
			csi_field(out, "result", rdir, sizeof(rdir));
			if (!strcmp(rdir, "clean")) { /* stopped cleanly */
				if (s->mounted)
					umount2(want, MNT_DETACH);
				goto done;
			}
		}
		code = revive(p, s, err);
		if (code)
			goto out;
	}
	char *argv[] = {(char *)p->tierfs_bin, "unmount", want,
			"--cache-dir",	       s->dir,	  "--timeout",
			NODE_UNMOUNT_TIMEOUT,  NULL};
	int rc = csi_run(argv, out, sizeof(out));
	if (rc != 0) {
		for (char *c = out; *c; c++)
			if (*c == '\n')
				*c = ' ';
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "tierfs unmount failed (exit %d): %s", rc,
				  out);
		goto out;
	}
done:;
	char path[PATH_MAX + 16];
	snprintf(path, sizeof(path), "%s/%s", s->dir, CSI_CREDS_FILE);
	if (unlink(path) != 0 && errno != ENOENT)
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "removing the credentials file: %s",
				  strerror(errno));
	snprintf(path, sizeof(path), "%s/%s", s->dir, CSI_STAGE_FILE);
	if (!code && unlink(path) != 0 && errno != ENOENT)
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "removing the stage record: %s",
				  strerror(errno));
out:
	if (code == GRPC_STATUS_OK) {
		Csi__V1__NodeUnstageVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_unstage_volume_response__init(res);
		*resp = &res->base;
	}
	free(s);
	give_volume(p->node, slot);
	return code;
}

/* ---- NodePublishVolume / NodeUnpublishVolume ------------------------------
 */

static grpc_status_code publish(void *ctx, const ProtobufCMessage *req,
				ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodePublishVolumeRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char staging[PATH_MAX], target[PATH_MAX];
	enum access acc = ACCESS_RW;
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_path("target_path", r->target_path, target, err);
	if (!code)
		code = check_capability(r->volume_capability, 1,
					GRPC_STATUS_FAILED_PRECONDITION, &acc,
					err);
	/* tierfs stages: no staging path is the spec's "Staging target
	 * path not set", FAILED_PRECONDITION */
	if (!code && (!r->staging_target_path || !*r->staging_target_path))
		code = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				  "staging_target_path: not set (tierfs stages "
				  "volumes: NodeStageVolume first)");
	if (!code)
		code = check_path("staging_target_path", r->staging_target_path,
				  staging, err);
	if (code)
		return code;
	if (unknown)
		return no_such_volume(r->volume_id, err);
	int ro = r->readonly || acc == ACCESS_RO;
	int slot = take_volume(p->node, r->volume_id);
	if (slot < 0)
		return csi_errorf(err, GRPC_STATUS_ABORTED,
				  "volume_id: another call for this volume "
				  "is in progress");
	struct staged *s = malloc(sizeof(*s));
	char want[PATH_MAX], tgt[PATH_MAX], dev[32];
	if (!s) {
		code = csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
		goto out;
	}
	canon(staging, want);
	if (find_staged(p, r->volume_id, s) != 0 || !s->have_stage ||
	    strcmp(s->staging, want) != 0 || !s->mounted) {
		code = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				  "volume_id: not staged at "
				  "staging_target_path (call NodeStageVolume "
				  "first)");
		goto out;
	}
	if (!s->alive) {
		code = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				  "volume_id: its tierfs daemon is not running "
				  "(stage it again)");
		goto out;
	}
	canon(target, tgt);
	if (csi_mount_dev(tgt, dev, sizeof(dev)) == 1) {
		struct statvfs sv;
		if (strcmp(dev, s->dev) != 0) {
			code = csi_errorf(err, GRPC_STATUS_ALREADY_EXISTS,
					  "target_path: another volume is "
					  "mounted there");
		} else if (statvfs(tgt, &sv) != 0) {
			code = csi_errorf(err, GRPC_STATUS_INTERNAL,
					  "target_path: %s", strerror(errno));
		} else if (!!(sv.f_flag & ST_RDONLY) != ro) {
			code = csi_errorf(err, GRPC_STATUS_ALREADY_EXISTS,
					  "target_path: the volume is "
					  "published there %s",
					  ro ? "read-write" : "read-only");
		}
		goto out; /* already published as asked */
	}
	int rc = csi_mkdir_p(tgt, 0750);
	if (rc) {
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "target_path: cannot create it: %s",
				  strerror(-rc));
		goto out;
	}
	if (mount(want, tgt, NULL, MS_BIND, NULL) != 0) {
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "bind mount on target_path: %s",
				  strerror(errno));
		goto out;
	}
	if (ro && mount(NULL, tgt, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY,
			NULL) != 0) {
		int e = errno;
		umount2(tgt, MNT_DETACH);
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "making target_path read-only: %s",
				  strerror(e));
		goto out;
	}
out:
	if (code == GRPC_STATUS_OK) {
		Csi__V1__NodePublishVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_publish_volume_response__init(res);
		*resp = &res->base;
	}
	free(s);
	give_volume(p->node, slot);
	return code;
}

static grpc_status_code unpublish(void *ctx, const ProtobufCMessage *req,
				  ProtobufCMessage **resp,
				  struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodeUnpublishVolumeRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char target[PATH_MAX], tgt[PATH_MAX], dev[32];
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_path("target_path", r->target_path, target, err);
	if (code)
		return code;
	if (unknown) { /* never published here: nothing to do */
		Csi__V1__NodeUnpublishVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_unpublish_volume_response__init(res);
		*resp = &res->base;
		return GRPC_STATUS_OK;
	}
	int slot = take_volume(p->node, r->volume_id);
	if (slot < 0)
		return csi_errorf(err, GRPC_STATUS_ABORTED,
				  "volume_id: another call for this volume "
				  "is in progress");
	canon(target, tgt);
	/* a bind on top of a bind (published twice by hand): all of them */
	for (int i = 0; i < 8 && csi_mount_dev(tgt, dev, sizeof(dev)) == 1;
	     i++) {
		if (umount2(tgt, 0) != 0 && errno != EINVAL) {
			int e = errno;
			if (e == EBUSY || umount2(tgt, MNT_DETACH) != 0) {
				code = csi_errorf(err, GRPC_STATUS_INTERNAL,
						  "unmounting target_path: %s",
						  strerror(e));
				goto out;
			}
		}
	}
	if (rmdir(tgt) != 0 && errno != ENOENT)
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "removing target_path: %s", strerror(errno));
out:
	if (code == GRPC_STATUS_OK) {
		Csi__V1__NodeUnpublishVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_unpublish_volume_response__init(res);
		*resp = &res->base;
	}
	give_volume(p->node, slot);
	return code;
}

/* ---- NodeGetVolumeStats / NodeExpandVolume --------------------------------
 */

/* Whether path is where this volume is staged or a bind of it (by the
 * device the staging mount had, which its binds keep); fills s. */
static grpc_status_code find_path(const struct csi_plugin *p, const char *id,
				  const char *path, struct staged *s,
				  struct csi_error *err)
{
	char real[PATH_MAX], dev[32], staged_dev[32];
	canon(path, real);
	int found = find_staged(p, id, s) == 0 && s->have_stage;
	if (found) {
		csi_field(s->text, "dev", staged_dev, sizeof(staged_dev));
		found = !strcmp(real, s->staging) ||
			(csi_mount_dev(real, dev, sizeof(dev)) == 1 &&
			 ((s->mounted && !strcmp(dev, s->dev)) ||
			  !strcmp(dev, staged_dev)));
	}
	if (!found)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume_path: the volume is not staged or "
				  "published there");
	return GRPC_STATUS_OK;
}

static Csi__V1__VolumeUsage *usage(Csi__V1__VolumeUsage__Unit unit,
				   uint64_t total, uint64_t avail,
				   uint64_t used)
{
	Csi__V1__VolumeUsage *u = csi_calloc(1, sizeof(*u));
	csi__v1__volume_usage__init(u);
	u->unit = unit;
	u->total = (int64_t)total;
	u->available = (int64_t)avail;
	u->used = (int64_t)used;
	return u;
}

/* Why the volume is not healthy, or "" (see csi_volume_condition()). */
static void condition(const struct staged *s, char *msg, size_t len)
{
	char h[1024];
	int have =
		s->alive && csi_read_file(s->dir, "health", h, sizeof(h)) == 0;
	csi_volume_condition(s->alive, have ? h : NULL, time(NULL), msg, len);
}

static grpc_status_code get_volume_stats(void *ctx, const ProtobufCMessage *req,
					 ProtobufCMessage **resp,
					 struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodeGetVolumeStatsRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char path[PATH_MAX];
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_volume_path(r->volume_path, path, err);
	if (code)
		return code;
	if (unknown)
		return no_such_volume(r->volume_id, err);
	struct staged *s = malloc(sizeof(*s));
	if (!s)
		return csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
	code = find_path(p, r->volume_id, path, s, err);
	if (code) {
		free(s);
		return code;
	}
	Csi__V1__NodeGetVolumeStatsResponse *res = csi_calloc(1, sizeof(*res));
	csi__v1__node_get_volume_stats_response__init(res);
	char msg[512];
	condition(s, msg, sizeof(msg));
	struct statvfs sv;
	if (s->alive && statvfs(path, &sv) == 0) {
		uint64_t bs = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
		res->usage = csi_calloc(2, sizeof(*res->usage));
		res->usage[0] = usage(CSI__V1__VOLUME_USAGE__UNIT__BYTES,
				      sv.f_blocks * bs, sv.f_bavail * bs,
				      (sv.f_blocks - sv.f_bfree) * bs);
		res->usage[1] =
			usage(CSI__V1__VOLUME_USAGE__UNIT__INODES, sv.f_files,
			      sv.f_favail, sv.f_files - sv.f_ffree);
		res->n_usage = 2;
	} else if (!msg[0]) {
		snprintf(msg, sizeof(msg), "statfs of the volume failed: %s",
			 strerror(errno));
	}
	res->volume_condition = csi_calloc(1, sizeof(*res->volume_condition));
	csi__v1__volume_condition__init(res->volume_condition);
	res->volume_condition->abnormal = msg[0] != '\0';
	res->volume_condition->message = csi_strdup(msg[0] ? msg : "healthy");
	*resp = &res->base;
	free(s);
	return GRPC_STATUS_OK;
}

static grpc_status_code expand(void *ctx, const ProtobufCMessage *req,
			       ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__NodeExpandVolumeRequest *r = (const void *)req;
	struct csi_volume_ref ref;
	char path[PATH_MAX];
	enum access acc;
	int unknown;
	grpc_status_code code =
		check_volume_id(r->volume_id, &ref, &unknown, err);
	if (!code)
		code = check_volume_path(r->volume_path, path, err);
	if (!code)
		code = check_capability(r->volume_capability, 0,
					GRPC_STATUS_INVALID_ARGUMENT, &acc,
					err);
	if (code)
		return code;
	const Csi__V1__CapacityRange *cr = r->capacity_range;
	if (cr && (cr->required_bytes < 0 || cr->limit_bytes < 0))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "capacity_range: bytes must not be negative");
	if (cr && cr->limit_bytes && cr->required_bytes > cr->limit_bytes)
		return csi_errorf(err, GRPC_STATUS_OUT_OF_RANGE,
				  "capacity_range: required_bytes %" PRId64
				  " is above limit_bytes %" PRId64,
				  cr->required_bytes, cr->limit_bytes);
	if (unknown)
		return no_such_volume(r->volume_id, err);
	int slot = take_volume(p->node, r->volume_id);
	if (slot < 0)
		return csi_errorf(err, GRPC_STATUS_ABORTED,
				  "volume_id: another call for this volume "
				  "is in progress");
	struct staged *s = malloc(sizeof(*s));
	char out[CSI_LAUNCH_OUTPUT_MAX];
	int64_t bytes = 0;
	if (!s) {
		code = csi_errorf(err, GRPC_STATUS_RESOURCE_EXHAUSTED,
				  "out of memory");
		goto out;
	}
	code = find_path(p, r->volume_id, path, s, err);
	if (code)
		goto out;
	if (!s->alive) {
		code = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				  "volume_id: its tierfs daemon is not "
				  "running (stage it again)");
		goto out;
	}
	bytes = cr ? (cr->required_bytes ? cr->required_bytes : cr->limit_bytes)
		   : 0;
	if (bytes == 0) { /* nothing asked: say what it is */
		struct statvfs sv;
		if (statvfs(s->staging, &sv) == 0)
			bytes = (int64_t)(sv.f_blocks * sv.f_frsize);
		goto out;
	}
	char num[32];
	snprintf(num, sizeof(num), "%" PRId64, bytes);
	char *argv[] = {(char *)p->tierfs_bin,
			"resize",
			s->staging,
			"--cache-dir",
			s->dir,
			"--capacity",
			num,
			NULL};
	int rc = csi_run(argv, out, sizeof(out));
	if (rc != 0) {
		for (char *c = out; *c; c++)
			if (*c == '\n')
				*c = ' ';
		code = csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "tierfs resize failed (exit %d): %s", rc,
				  out);
	}
out:
	if (code == GRPC_STATUS_OK) {
		Csi__V1__NodeExpandVolumeResponse *res =
			csi_calloc(1, sizeof(*res));
		csi__v1__node_expand_volume_response__init(res);
		res->capacity_bytes = bytes;
		*resp = &res->base;
	}
	free(s);
	give_volume(p->node, slot);
	return code;
}

/* ---- capabilities and info ----------------------------------------------- */

/* Each capability tierfs offers and the RPC it needs. */
static const struct {
	Csi__V1__NodeServiceCapability__RPC__Type type;
	const char *rpc;
} node_caps[] = {
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME,
	 "NodeStageVolume"},
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS,
	 "NodeGetVolumeStats"},
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	 "NodeExpandVolume"},
	/* the condition rides on NodeGetVolumeStats */
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
	 "NodeGetVolumeStats"},
	/* the group is applied when staging (the daemon's --gid) */
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_MOUNT_GROUP,
	 "NodePublishVolume"},
};

static grpc_status_code get_capabilities(void *ctx, const ProtobufCMessage *req,
					 ProtobufCMessage **resp,
					 struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	size_t max = sizeof(node_caps) / sizeof(node_caps[0]);
	Csi__V1__NodeGetCapabilitiesResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__node_get_capabilities_response__init(r);
	r->capabilities = csi_calloc(max, sizeof(*r->capabilities));
	for (size_t i = 0; i < max; i++) {
		if (!csi_has_handler(csi_node_handlers, node_caps[i].rpc))
			continue;
		Csi__V1__NodeServiceCapability *c = csi_calloc(1, sizeof(*c));
		csi__v1__node_service_capability__init(c);
		c->type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
		c->rpc = csi_calloc(1, sizeof(*c->rpc));
		csi__v1__node_service_capability__rpc__init(c->rpc);
		c->rpc->type = node_caps[i].type;
		r->capabilities[r->n_capabilities++] = c;
	}
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

static grpc_status_code get_info(void *ctx, const ProtobufCMessage *req,
				 ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	(void)req;
	(void)err;
	Csi__V1__NodeGetInfoResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__node_get_info_response__init(r);
	r->node_id = csi_strdup(p->node_id);
	r->max_volumes_per_node = CSI_MAX_VOLUMES_PER_NODE;
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

const struct csi_handler csi_node_handlers[] = {
	{"NodeStageVolume", stage},
	{"NodeUnstageVolume", unstage},
	{"NodePublishVolume", publish},
	{"NodeUnpublishVolume", unpublish},
	{"NodeGetVolumeStats", get_volume_stats},
	{"NodeExpandVolume", expand},
	{"NodeGetCapabilities", get_capabilities},
	{"NodeGetInfo", get_info},
	{NULL, NULL},
};
