/* controller.c: the CSI Controller service: volumes as S3 prefixes.
 *
 * Every handler runs the same steps (STYLE.md 13): validate the fields
 * (INVALID_ARGUMENT naming the field), make an S3 client from the plugin's
 * flags and the request's secrets (s3conn.h), be idempotent by name or id,
 * then act. A capability is advertised only once the RPCs behind it have
 * handlers (controller_caps below).
 *
 * What a volume is in S3 (DESIGN.md §4), for volume id "BUCKET/PREFIX":
 *   PREFIX/.tierfs/volume    the marker: "key=value" lines, written last
 *                            by CreateVolume, so a volume exists exactly
 *                            when its marker does. Keys: format, name,
 *                            capacity (bytes; the node reads it as the
 *                            quota), prefix, the StorageClass options
 *                            (durability cacheSize uid gid mode onDelete
 *                            endpoint region, when set; onDelete always),
 *                            source (snapshot id, when restored), created
 *                            (Unix seconds).
 *   PREFIX/.tierfs/lease     the write lease (cache/lease.h). Controller
 *                            publish for writing hands it to a node by
 *                            writing "owner=grant\nhost=NODE\nrenewed=T\n".
 *   PREFIX/.tierfs/volume.released  the marker of a volume deleted with
 *                            onDelete=retain: the data stays, the volume
 *                            is gone for the CO; a later CreateVolume
 *                            rendering the same prefix adopts the data.
 * A snapshot of BUCKET/PREFIX named N is BUCKET/.tierfs-snapshots/K/ (K is
 * N, or N made safe and shortened with a hash, see snap_make()), holding a
 * server-side copy of every object of the volume but its lease (and the
 * flush handshake's objects), and the marker .tierfs/snapshot (name,
 * source, size, objects, created). Its id is "BUCKET/.tierfs-snapshots/K".
 * When a node has the volume mounted read-write (a live lease), it is
 * first asked to send what it has not uploaded (flush_holder()), so the
 * snapshot holds every write made before CreateSnapshot.
 *
 * Ids: an id with no "/" at all (e.g. csi-sanity's "fake-vol-id-...") is
 * one tierfs never made: NOT_FOUND, or OK where the spec says a missing
 * object is success (DeleteVolume, ControllerUnpublishVolume,
 * DeleteSnapshot). Any other id that fails csi_volume_parse() (traversal,
 * NUL or control bytes, oversize, bad bucket) is INVALID_ARGUMENT.
 * Nodes: a controller alone cannot tell which nodes exist and publishes
 * to any well-formed node_id; in --mode all the plugin is the only node
 * (the spec's unified plugin), so ControllerPublishVolume to any other
 * node_id is NOT_FOUND.
 *
 * Error choices: a bucket that does not exist is FAILED_PRECONDITION (the
 * request is well-formed; the system is not ready for it); S3 failures map
 * per csi_s3_status(). Messages never hold a secret.
 */
#include "plugin.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "../s3/units.h"
#include "csi.pb-c.h"
#include "s3conn.h"
#include "volume.h"

#define MARKER_REL ".tierfs/volume"
#define RELEASED_REL ".tierfs/volume.released"
#define LEASE_REL ".tierfs/lease"
#define FLUSH_REL ".tierfs/flush"     /* a snapshot's flush request */
#define FLUSHED_REL ".tierfs/flushed" /* the holder's answer */
#define FLUSH_WAIT_S 50 /* the holder looks at each renewal (30 s) */
#define SNAP_MARKER_REL ".tierfs/snapshot"
#define MARKER_FORMAT "1"
#define DEFAULT_CAPACITY (1ll << 30) /* no capacity_range: 1 GiB */
#define LEASE_LIVE_S 90		     /* a lease renewed this recently is held */
#define TEXT_MAX 8192		     /* markers and leases are small */
#define KEY_MAX 1100		     /* S3_MAX_KEY_LEN and then some */
#define NAME_MAX_LEN 128
#define SNAP_HASH_HEX 12
#define PUBLISHED_TO "tierfs.dev/published-to"
#define K8S_PARAM_PREFIX "csi.storage.k8s.io/"
#define DEFAULT_PREFIX_TMPL "{pvc_namespace}/{pvc_name}"

typedef Csi__V1__VolumeCapability VolCap;

/* --- small checks ----------------------------------------------------------
 */

static int has_ctl(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return 1;
	return 0;
}

static grpc_status_code vol_ref(const char *field, const char *id,
				struct csi_volume_ref *ref, int *foreign,
				struct csi_error *err)
{
	*foreign = 0;
	if (!id || !*id)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s is required", field);
	char why[256];
	if (csi_volume_parse(id, ref, why, sizeof(why)) == 0)
		return GRPC_STATUS_OK;
	if (csi_volume_never_made(id)) {
		*foreign = 1;
		return GRPC_STATUS_OK;
	}
	return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: %s", field,
			  why);
}

static void rel_key(char *out, const char *prefix, const char *rel)
{
	snprintf(out, KEY_MAX, "%s/%s", prefix, rel);
}

/* --- snapshot ids ------------------------------------------------------- */

struct snap_ref {
	char bucket[CSI_BUCKET_MAX + 1];
	char key[CSI_VOLUME_ID_MAX + 1];
	char dir[CSI_VOLUME_ID_MAX + 64]; /* ".tierfs-snapshots/K/" */
};

static int snap_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
}

static int snap_key_ok(const char *k)
{
	if (!*k || k[0] == '.')
		return 0;
	for (; *k; k++)
		if (!snap_char_ok(*k))
			return 0;
	return 1;
}

static void snap_fill_dir(struct snap_ref *r)
{
	snprintf(r->dir, sizeof(r->dir), "%s/%s/", CSI_SNAPSHOT_DIR, r->key);
}

/* The snapshot named `name` of a volume in `bucket`: its key is the name
 * when that is safe and fits the 128-byte id, else the name with unsafe
 * bytes as '-', cut, then '-' and 12 hex digits of its SHA-256. */
static void snap_make(const char *bucket, const char *name, struct snap_ref *r,
		      char id[CSI_VOLUME_ID_MAX + 1])
{
	size_t room = CSI_VOLUME_ID_MAX - strlen(bucket) - 1 -
		      strlen(CSI_SNAPSHOT_DIR) - 1;
	snprintf(r->bucket, sizeof(r->bucket), "%s", bucket);
	if (snap_key_ok(name) && strlen(name) <= room) {
		snprintf(r->key, sizeof(r->key), "%s", name);
	} else {
		unsigned char md[SHA256_DIGEST_LENGTH];
		SHA256((const unsigned char *)name, strlen(name), md);
		size_t keep = room - 1 - SNAP_HASH_HEX, o = 0;
		for (size_t i = 0; name[i] && o < keep; i++) {
			if (o == 0 && name[i] == '.')
				continue;
			r->key[o++] = snap_char_ok(name[i]) ? name[i] : '-';
		}
		if (o)
			r->key[o++] = '-';
		for (size_t i = 0; i < SNAP_HASH_HEX / 2; i++, o += 2)
			snprintf(r->key + o, 3, "%02x", md[i]);
		r->key[o] = '\0';
	}
	snap_fill_dir(r);
	char full[CSI_BUCKET_MAX + sizeof(CSI_SNAPSHOT_DIR) + sizeof(r->key) +
		  2];
	int n = snprintf(full, sizeof(full), "%s/%s/%s", bucket,
			 CSI_SNAPSHOT_DIR, r->key);
	assert(n > 0 && n <= CSI_VOLUME_ID_MAX); /* room was kept above */
	(void)n;
	snprintf(id, CSI_VOLUME_ID_MAX + 1, "%.*s", CSI_VOLUME_ID_MAX, full);
}

static grpc_status_code snap_ref_parse(const char *field, const char *id,
				       struct snap_ref *r, int *foreign,
				       struct csi_error *err)
{
	*foreign = 0;
	if (!id || !*id)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s is required", field);
	if (csi_volume_never_made(id)) {
		*foreign = 1;
		return GRPC_STATUS_OK;
	}
	if (strlen(id) > CSI_VOLUME_ID_MAX)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s is longer than %d bytes", field,
				  CSI_VOLUME_ID_MAX);
	const char *slash = strchr(id, '/');
	size_t bl = (size_t)(slash - id);
	char why[256];
	if (bl > CSI_BUCKET_MAX)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: bucket name must be 3 to 63 bytes",
				  field);
	memcpy(r->bucket, id, bl);
	r->bucket[bl] = '\0';
	if (csi_bucket_check(r->bucket, why, sizeof(why)) != 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT, "%s: %s",
				  field, why);
	size_t dl = strlen(CSI_SNAPSHOT_DIR);
	const char *rest = slash + 1;
	if (strncmp(rest, CSI_SNAPSHOT_DIR, dl) != 0 || rest[dl] != '/' ||
	    !snap_key_ok(rest + dl + 1))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: not a tierfs snapshot id "
				  "(BUCKET/%s/NAME, NAME of [A-Za-z0-9._-] "
				  "not starting with '.')",
				  field, CSI_SNAPSHOT_DIR);
	snprintf(r->key, sizeof(r->key), "%s", rest + dl + 1);
	snap_fill_dir(r);
	return GRPC_STATUS_OK;
}

/* --- capabilities ------------------------------------------------------- */

enum access { ACC_RWO, ACC_RO, ACC_RWX };

/* NULL when tierfs can serve c, else why not (into buf). */
static const char *cap_problem(const VolCap *c, enum access *acc, char *buf,
			       size_t len)
{
	if (!c->access_mode)
		return "access_mode is required";
	if (c->access_type_case ==
	    CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK)
		return "block access is not supported (tierfs volumes are "
		       "filesystems; use mount)";
	if (c->access_type_case !=
	    CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT)
		return "access_type is required (mount)";
	enum access a;
	switch (c->access_mode->mode) {
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
		a = ACC_RWO;
		break;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY:
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
		a = ACC_RO;
		break;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
		a = ACC_RWX; /* last writer wins, per file */
		break;
	case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_SINGLE_WRITER:
		return "access_mode MULTI_NODE_SINGLE_WRITER is not supported";
	default:
		snprintf(buf, len, "access_mode %d is not supported",
			 (int)c->access_mode->mode);
		return buf;
	}
	if (acc)
		*acc = a;
	return NULL;
}

static grpc_status_code caps_check(const char *field, size_t n,
				   VolCap *const *caps, struct csi_error *err)
{
	if (n == 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s is required", field);
	char buf[64];
	for (size_t i = 0; i < n; i++) {
		const char *why = cap_problem(caps[i], NULL, buf, sizeof(buf));
		if (why)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "%s[%zu]: %s", field, i, why);
	}
	return GRPC_STATUS_OK;
}

/* --- StorageClass parameters ------------------------------------------------
 */

struct vparams {
	const char *bucket, *prefix, *durability, *cache_size, *uid, *gid,
		*mode, *on_delete, *endpoint, *region;
	const char *pvc_ns, *pvc_name, *pv_name; /* csi.storage.k8s.io/ */
};

static const struct {
	const char *key;
	size_t off;
} param_keys[] = {
	{"bucket", offsetof(struct vparams, bucket)},
	{"prefix", offsetof(struct vparams, prefix)},
	{"durability", offsetof(struct vparams, durability)},
	{"cacheSize", offsetof(struct vparams, cache_size)},
	{"uid", offsetof(struct vparams, uid)},
	{"gid", offsetof(struct vparams, gid)},
	{"mode", offsetof(struct vparams, mode)},
	{"onDelete", offsetof(struct vparams, on_delete)},
	{"endpoint", offsetof(struct vparams, endpoint)},
	{"region", offsetof(struct vparams, region)},
	{K8S_PARAM_PREFIX "pvc/namespace", offsetof(struct vparams, pvc_ns)},
	{K8S_PARAM_PREFIX "pvc/name", offsetof(struct vparams, pvc_name)},
	{K8S_PARAM_PREFIX "pv/name", offsetof(struct vparams, pv_name)},
};

/* The options that go into the marker and are compared for idempotency,
 * in marker order; `ctx` ones also go into the volume_context. */
static const struct {
	const char *key;
	size_t off;
	int ctx;
} options[] = {
	{"durability", offsetof(struct vparams, durability), 1},
	{"cacheSize", offsetof(struct vparams, cache_size), 1},
	{"uid", offsetof(struct vparams, uid), 1},
	{"gid", offsetof(struct vparams, gid), 1},
	{"mode", offsetof(struct vparams, mode), 1},
	{"onDelete", offsetof(struct vparams, on_delete), 0},
	{"endpoint", offsetof(struct vparams, endpoint), 1},
	{"region", offsetof(struct vparams, region), 1},
};
#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

static const char *vp_get(const struct vparams *vp, size_t off)
{
	return *(const char *const *)((const char *)vp + off);
}

static int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return 0;
	return 1;
}

static const char *value_problem(const char *key, const char *v)
{
	if (has_ctl(v))
		return "may not hold control bytes";
	if (strlen(v) > 256)
		return "is longer than 256 bytes";
	if (strcmp(key, "durability") == 0 && strcmp(v, "s3") != 0 &&
	    strcmp(v, "local") != 0)
		return "expected s3 or local";
	if (strcmp(key, "onDelete") == 0 && strcmp(v, "delete") != 0 &&
	    strcmp(v, "retain") != 0)
		return "expected delete or retain";
	if (strcmp(key, "cacheSize") == 0) {
		uint64_t n;
		if (units_parse_size(v, &n) != 0 || n == 0)
			return "expected a size such as 20Gi";
	}
	if (strcmp(key, "uid") == 0 || strcmp(key, "gid") == 0) {
		if (!all_digits(v) || strlen(v) > 10 ||
		    strtoull(v, NULL, 10) > 4294967294ull)
			return "expected a decimal id from 0 to 4294967294";
	}
	if (strcmp(key, "mode") == 0) {
		size_t n = strlen(v);
		if (n == 0 || n > 5 || strspn(v, "01234567") != n ||
		    strtoul(v, NULL, 8) > 07777)
			return "expected an octal mode such as 0770";
	}
	if (strcmp(key, "endpoint") == 0 && ((strncmp(v, "http://", 7) != 0 &&
					      strncmp(v, "https://", 8) != 0) ||
					     strpbrk(v, " \t")))
		return "expected an http:// or https:// URL";
	if (strcmp(key, "region") == 0 &&
	    (!*v ||
	     strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(v)))
		return "expected a region name such as us-east-1";
	return NULL;
}

/* Fills vp from a parameters map: unknown keys are INVALID_ARGUMENT,
 * listed by name; each value is checked. */
static grpc_status_code params_parse(size_t n,
				     const struct csi_map_entry *const *m,
				     struct vparams *vp, struct csi_error *err)
{
	memset(vp, 0, sizeof(*vp));
	char unknown[CSI_ERROR_MAX - 64] = "";
	size_t nunknown = 0;
	for (size_t i = 0; i < n; i++) {
		const char *k = m[i]->key, *v = m[i]->value;
		size_t j;
		for (j = 0; j < sizeof(param_keys) / sizeof(param_keys[0]); j++)
			if (strcmp(k, param_keys[j].key) == 0)
				break;
		if (j == sizeof(param_keys) / sizeof(param_keys[0])) {
			/* the provisioner's own keys are fine */
			if (strncmp(k, K8S_PARAM_PREFIX,
				    strlen(K8S_PARAM_PREFIX)) == 0)
				continue;
			size_t ul = strlen(unknown);
			snprintf(unknown + ul, sizeof(unknown) - ul,
				 "%s'%.40s'", nunknown ? ", " : "",
				 has_ctl(k) ? "?" : k);
			nunknown++;
			continue;
		}
		*(const char **)((char *)vp + param_keys[j].off) = v;
		const char *why = value_problem(k, v);
		if (why)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "parameters.%s: %s", k, why);
	}
	if (nunknown)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "parameters: unknown %s %s (known: bucket, "
				  "prefix, durability, cacheSize, uid, gid, "
				  "mode, onDelete, endpoint, region)",
				  nunknown == 1 ? "key" : "keys", unknown);
	return GRPC_STATUS_OK;
}

/* Renders the prefix template into out. */
static grpc_status_code render_prefix(const struct vparams *vp,
				      const char *name, char *out, size_t len,
				      struct csi_error *err)
{
	const char *t = vp->prefix;
	if (!t)
		t = vp->pvc_ns && vp->pvc_name ? DEFAULT_PREFIX_TMPL : name;
	static const struct {
		const char *ph, *param;
		size_t off;
	} phs[] = {
		{"{pvc_namespace}", K8S_PARAM_PREFIX "pvc/namespace",
		 offsetof(struct vparams, pvc_ns)},
		{"{pvc_name}", K8S_PARAM_PREFIX "pvc/name",
		 offsetof(struct vparams, pvc_name)},
		{"{pv_name}", K8S_PARAM_PREFIX "pv/name",
		 offsetof(struct vparams, pv_name)},
	};
	size_t o = 0;
	for (const char *s = t; *s;) {
		const char *piece = s;
		size_t pl = 1;
		if (*s == '{') {
			size_t j;
			for (j = 0; j < sizeof(phs) / sizeof(phs[0]); j++)
				if (strncmp(s, phs[j].ph, strlen(phs[j].ph)) ==
				    0)
					break;
			if (j == sizeof(phs) / sizeof(phs[0]))
				return csi_errorf(
					err, GRPC_STATUS_INVALID_ARGUMENT,
					"parameters.prefix: unknown "
					"placeholder at '%.20s' (known: "
					"{pvc_namespace} {pvc_name} {pv_name})",
					s);
			piece = vp_get(vp, phs[j].off);
			if (!piece || !*piece)
				return csi_errorf(
					err, GRPC_STATUS_INVALID_ARGUMENT,
					"parameters.prefix: %s is used but "
					"parameter %s is not set",
					phs[j].ph, phs[j].param);
			pl = strlen(piece);
			s += strlen(phs[j].ph);
		} else {
			s++;
		}
		if (o + pl >= len)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "parameters.prefix: renders to more "
					  "than %zu bytes",
					  len - 1);
		memcpy(out + o, piece, pl);
		o += pl;
	}
	out[o] = '\0';
	/* check it whole, before csi_volume_make() may shorten it: every
	 * segment on its own (a segment may be longer than a prefix may) */
	char why[256];
	if (has_ctl(out) || strchr(out, '\\'))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "parameters.prefix: renders to a prefix "
				  "with a control byte or '\\'");
	for (const char *seg = out;;) {
		size_t sl = strcspn(seg, "/");
		char one[100];
		snprintf(one, sizeof(one), "%.*s", (int)sl, seg);
		if (csi_prefix_check(one, why, sizeof(why)) != 0)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "parameters.prefix: renders to "
					  "'%.60s', whose segment '%.40s' is "
					  "bad: %s",
					  out, one, why);
		if (!seg[sl])
			break;
		seg += sl + 1;
	}
	return GRPC_STATUS_OK;
}

/* --- capacity ------------------------------------------------------------ */

static grpc_status_code capacity_pick(const Csi__V1__CapacityRange *r,
				      int64_t *out, struct csi_error *err)
{
	int64_t req = r ? r->required_bytes : 0, lim = r ? r->limit_bytes : 0;
	if (req < 0 || lim < 0)
		return csi_errorf(err, GRPC_STATUS_OUT_OF_RANGE,
				  "capacity_range: bytes may not be negative");
	if (lim && req > lim)
		return csi_errorf(err, GRPC_STATUS_OUT_OF_RANGE,
				  "capacity_range: limit_bytes %" PRId64
				  " is below required_bytes %" PRId64,
				  lim, req);
	if (req)
		*out = req;
	else if (lim)
		*out = lim < DEFAULT_CAPACITY ? lim : DEFAULT_CAPACITY;
	else
		*out = DEFAULT_CAPACITY;
	return GRPC_STATUS_OK;
}

static int capacity_fits(const Csi__V1__CapacityRange *r, int64_t cap)
{
	if (!r)
		return 1;
	if (r->required_bytes && cap < r->required_bytes)
		return 0;
	if (r->limit_bytes && cap > r->limit_bytes)
		return 0;
	return 1;
}

/* --- response maps ----------------------------------------------------------
 */

struct kvlist {
	struct csi_map_entry **v;
	size_t n;
	const ProtobufCMessageDescriptor *desc;
};

static void kv_add(struct kvlist *l, const char *k, const char *v)
{
	assert(l->desc->sizeof_message == sizeof(struct csi_map_entry));
	struct csi_map_entry **nv = realloc(l->v, (l->n + 1) * sizeof(*nv));
	if (!nv) {
		fprintf(stderr, "tierfs-csi: out of memory\n");
		abort();
	}
	l->v = nv;
	struct csi_map_entry *e = csi_calloc(1, l->desc->sizeof_message);
	protobuf_c_message_init(l->desc, e);
	e->key = csi_strdup(k);
	e->value = csi_strdup(v);
	l->v[l->n++] = e;
}

/* The volume_context keys the node needs, from a marker. */
static void context_from_marker(struct kvlist *l, const char *marker)
{
	char v[300];
	for (size_t i = 0; i < N_OPTIONS; i++)
		if (options[i].ctx &&
		    csi_kv_get(marker, options[i].key, v, sizeof(v)) == 0)
			kv_add(l, options[i].key, v);
	/* as CreateVolume first answered: expansion changes "capacity" */
	if (csi_kv_get(marker, "context_capacity", v, sizeof(v)) == 0 ||
	    csi_kv_get(marker, "capacity", v, sizeof(v)) == 0)
		kv_add(l, "capacity", v);
}

static int64_t marker_capacity(const char *marker)
{
	char v[32];
	if (csi_kv_get(marker, "capacity", v, sizeof(v)) != 0 || !all_digits(v))
		return 0;
	return (int64_t)strtoll(v, NULL, 10);
}

static Csi__V1__Volume *volume_msg(const char *id, const char *marker)
{
	Csi__V1__Volume *vol = csi_calloc(1, sizeof(*vol));
	csi__v1__volume__init(vol);
	vol->volume_id = csi_strdup(id);
	vol->capacity_bytes = marker_capacity(marker);
	struct kvlist l = {
		.desc = &csi__v1__volume__volume_context_entry__descriptor};
	context_from_marker(&l, marker);
	vol->n_volume_context = l.n;
	vol->volume_context = (Csi__V1__Volume__VolumeContextEntry **)l.v;
	char src[CSI_VOLUME_ID_MAX + 1];
	if (csi_kv_get(marker, "source", src, sizeof(src)) == 0) {
		Csi__V1__VolumeContentSource *cs = csi_calloc(1, sizeof(*cs));
		csi__v1__volume_content_source__init(cs);
		cs->type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
		cs->snapshot = csi_calloc(1, sizeof(*cs->snapshot));
		csi__v1__volume_content_source__snapshot_source__init(
			cs->snapshot);
		cs->snapshot->snapshot_id = csi_strdup(src);
		vol->content_source = cs;
	}
	return vol;
}

/* --- S3 objects of a volume ------------------------------------------------
 */

/* GETs the marker at v's prefix, whichever volume wrote it: 0, -ENOENT,
 * or another -errno. */
static int marker_get(s3_client *c, const struct csi_volume_ref *v, char *buf,
		      struct s3_error *e)
{
	char key[KEY_MAX];
	rel_key(key, v->prefix, MARKER_REL);
	return csi_s3_get_text(c, v->bucket, key, buf, TEXT_MAX, e);
}

/* The marker's generation into v->gen ("" when it has none, or a bad one,
 * which no id can name). */
static void gen_from_marker(struct csi_volume_ref *v, const char *marker)
{
	char g[32], id[CSI_VOLUME_ID_MAX + 1];
	v->gen[0] = '\0';
	if (csi_kv_get(marker, "generation", g, sizeof(g)) == 0 &&
	    csi_volume_gen_ok(g)) {
		memcpy(v->gen, g, CSI_GEN_HEX + 1);
		if (csi_volume_id(v, id) != 0) /* too long to carry it */
			v->gen[0] = '\0';
	}
}

/* Whether the marker is the one of the volume v names (its generation). */
static int marker_is_of(const struct csi_volume_ref *v, const char *marker)
{
	char g[32];
	if (csi_kv_get(marker, "generation", g, sizeof(g)) != 0)
		g[0] = '\0';
	return csi_volume_gen_matches(v, g);
}

/* GETs the marker of the volume v names: 0; -ENOENT when there is none,
 * or when it is another volume's (a generation other than v's: the volume
 * was deleted and one made again at its prefix); or another -errno. */
static int marker_read(s3_client *c, const struct csi_volume_ref *v, char *buf,
		       struct s3_error *e)
{
	int rc = marker_get(c, v, buf, e);
	if (rc == 0 && !marker_is_of(v, buf))
		rc = -ENOENT;
	return rc;
}

struct lease_view {
	int present;
	char owner[80];
	char host[200];
	long long renewed;
};

static int lease_read(s3_client *c, const struct csi_volume_ref *v,
		      struct lease_view *lv, struct s3_error *e)
{
	memset(lv, 0, sizeof(*lv));
	char key[KEY_MAX], text[TEXT_MAX], t[32];
	rel_key(key, v->prefix, LEASE_REL);
	int rc = csi_s3_get_text(c, v->bucket, key, text, sizeof(text), e);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	lv->present = 1;
	(void)csi_kv_get(text, "owner", lv->owner, sizeof(lv->owner));
	(void)csi_kv_get(text, "host", lv->host, sizeof(lv->host));
	if (csi_kv_get(text, "renewed", t, sizeof(t)) == 0 && all_digits(t))
		lv->renewed = strtoll(t, NULL, 10);
	return 0;
}

static int lease_live(const struct lease_view *lv)
{
	return lv->present &&
	       (long long)time(NULL) - lv->renewed < LEASE_LIVE_S;
}

/* A volume mounted read-write somewhere (a live lease, not a grant) may
 * hold writes its node has not uploaded yet. Before a snapshot copies the
 * prefix, the holder is asked to send them: a request object with a fresh
 * token, answered (cache/index.c) by an object carrying the same token
 * once everything is in S3. So a snapshot holds every write made before
 * CreateSnapshot. UNAVAILABLE (the snapshotter retries) when the holder
 * does not answer within FLUSH_WAIT_S. */
static grpc_status_code flush_holder(s3_client *c,
				     const struct csi_volume_ref *v,
				     struct csi_error *err)
{
	struct lease_view lv;
	struct s3_error e = {0};
	int rc = lease_read(c, v, &lv, &e);
	if (rc)
		return csi_s3_status(rc, &e, err, "reading the volume's lease");
	if (!lease_live(&lv) || strcmp(lv.owner, "grant") == 0)
		return GRPC_STATUS_OK; /* nobody writes it: S3 has it all */
	unsigned char raw[8];
	char token[2 * sizeof(raw) + 1], body[128], got[TEXT_MAX], t[64];
	char key[KEY_MAX], done_key[KEY_MAX];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return csi_errorf(err, GRPC_STATUS_INTERNAL,
				  "no random bytes for a flush token");
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(token + 2 * i, 3, "%02x", raw[i]);
	rel_key(key, v->prefix, FLUSH_REL);
	rel_key(done_key, v->prefix, FLUSHED_REL);
	snprintf(body, sizeof(body), "token=%s\nrequested=%lld\n", token,
		 (long long)time(NULL));
	rc = csi_s3_put_text(c, v->bucket, key, body, &e);
	if (rc)
		return csi_s3_status(rc, &e, err, "asking the holder to flush");
	for (time_t end = time(NULL) + FLUSH_WAIT_S; time(NULL) < end;) {
		struct timespec ts = {0, 500 * 1000000L};
		nanosleep(&ts, NULL);
		rc = csi_s3_get_text(c, v->bucket, done_key, got, sizeof(got),
				     &e);
		if (rc == 0 && csi_kv_get(got, "token", t, sizeof(t)) == 0 &&
		    strcmp(t, token) == 0)
			return GRPC_STATUS_OK;
		if (rc && rc != -ENOENT)
			return csi_s3_status(rc, &e, err,
					     "waiting for the holder's flush");
	}
	return csi_errorf(err, GRPC_STATUS_UNAVAILABLE,
			  "node '%.100s' has the volume mounted and did not "
			  "send its pending writes within %d s; no snapshot "
			  "was taken (try again)",
			  lv.host, FLUSH_WAIT_S);
}

/* Copies every object under src_prefix (ending in "/") to the same
 * relative key under dst_prefix (ending in "/"), but those whose relative
 * key is in skip. Adds the bytes copied to *bytes. */
static int copy_tree(s3_client *c, const char *sb, const char *src_prefix,
		     const char *db, const char *dst_prefix,
		     const char *const *skip, uint64_t *bytes, size_t *count,
		     struct s3_error *e)
{
	struct csi_keys k;
	int rc = csi_s3_list(c, sb, src_prefix, &k, e);
	if (rc)
		return rc;
	size_t pl = strlen(src_prefix);
	for (size_t i = 0; rc == 0 && i < k.n; i++) {
		const char *rel = k.v[i].key + pl;
		int skipped = 0;
		for (const char *const *s = skip; *s; s++)
			if (strcmp(rel, *s) == 0)
				skipped = 1;
		if (skipped)
			continue;
		char dst[KEY_MAX * 2];
		snprintf(dst, sizeof(dst), "%s%s", dst_prefix, rel);
		if (strlen(dst) > S3_MAX_KEY_LEN) {
			rc = -ENAMETOOLONG;
			break;
		}
		rc = csi_s3_copy(c, sb, k.v[i].key, k.v[i].size, db, dst, e);
		*bytes += k.v[i].size;
		(*count)++;
	}
	csi_keys_free(&k);
	return rc;
}

/* --- CreateVolume ----------------------------------------------------------
 */

static void marker_build(char *out, size_t len, const char *name, int64_t cap,
			 const struct csi_volume_ref *v,
			 const struct vparams *vp, const char *source)
{
	size_t o =
		(size_t)snprintf(out, len,
				 "format=" MARKER_FORMAT "\nname=%s\n"
				 "generation=%s\ncapacity=%" PRId64
				 "\ncontext_capacity=%" PRId64 "\nprefix=%s\n",
				 name, v->gen, cap, cap, v->prefix);
	for (size_t i = 0; i < N_OPTIONS && o < len; i++) {
		const char *val = vp_get(vp, options[i].off);
		if (!val && strcmp(options[i].key, "onDelete") == 0)
			val = "delete";
		if (val)
			o += (size_t)snprintf(out + o, len - o, "%s=%s\n",
					      options[i].key, val);
	}
	if (source && o < len)
		o += (size_t)snprintf(out + o, len - o, "source=%s\n", source);
	if (o < len)
		snprintf(out + o, len - o, "created=%lld\n",
			 (long long)time(NULL));
}

/* NULL when an existing marker matches the request, else what differs. */
static const char *marker_mismatch(const char *marker, const char *name,
				   const Csi__V1__CapacityRange *range,
				   const struct vparams *vp, const char *source)
{
	char v[300];
	if (csi_kv_get(marker, "name", v, sizeof(v)) != 0 ||
	    strcmp(v, name) != 0)
		return "its prefix belongs to a volume of another name";
	if (!capacity_fits(range, marker_capacity(marker)))
		return "its capacity is outside the requested capacity_range";
	for (size_t i = 0; i < N_OPTIONS; i++) {
		const char *want = vp_get(vp, options[i].off);
		if (!want && strcmp(options[i].key, "onDelete") == 0)
			want = "delete";
		int have =
			csi_kv_get(marker, options[i].key, v, sizeof(v)) == 0;
		if ((want != NULL) != have || (want && strcmp(want, v) != 0))
			return options[i].key;
	}
	int have = csi_kv_get(marker, "source", v, sizeof(v)) == 0;
	if ((source != NULL) != have || (source && strcmp(source, v) != 0))
		return "volume_content_source";
	return NULL;
}

static grpc_status_code create_volume(void *ctx, const ProtobufCMessage *req,
				      ProtobufCMessage **resp,
				      struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__CreateVolumeRequest *r =
		(const Csi__V1__CreateVolumeRequest *)req;
	if (!r->name || !*r->name)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "name is required");
	if (strlen(r->name) > NAME_MAX_LEN || has_ctl(r->name))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "name: must be at most %d bytes with no "
				  "control bytes",
				  NAME_MAX_LEN);
	grpc_status_code st =
		caps_check("volume_capabilities", r->n_volume_capabilities,
			   r->volume_capabilities, err);
	if (st)
		return st;
	struct vparams vp;
	st = params_parse(CSI_MAP(r, parameters), &vp, err);
	if (st)
		return st;
	if (!vp.bucket || !*vp.bucket)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "parameters.bucket is required");
	char why[256];
	if (csi_bucket_check(vp.bucket, why, sizeof(why)) != 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "parameters.bucket: %s", why);
	int64_t cap;
	st = capacity_pick(r->capacity_range, &cap, err);
	if (st)
		return st;
	struct snap_ref snap = {0};
	const char *source = NULL;
	int foreign = 0;
	if (r->volume_content_source) {
		const Csi__V1__VolumeContentSource *cs =
			r->volume_content_source;
		if (cs->type_case ==
		    CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "volume_content_source.volume: "
					  "cloning is not supported (use a "
					  "snapshot)");
		if (cs->type_case !=
		    CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "volume_content_source: no type set");
		source = cs->snapshot->snapshot_id;
		st = snap_ref_parse("volume_content_source.snapshot."
				    "snapshot_id",
				    source, &snap, &foreign, err);
		if (st)
			return st;
		if (foreign)
			return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
					  "snapshot '%.128s' does not exist",
					  source);
	}
	char prefix[1024];
	st = render_prefix(&vp, r->name, prefix, sizeof(prefix), err);
	if (st)
		return st;
	struct csi_volume_ref v;
	char id[CSI_VOLUME_ID_MAX + 1];
	if (csi_volume_make(vp.bucket, prefix, &v, why, sizeof(why)) != 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "parameters.prefix: %s", why);
	csi_volume_id(&v, id); /* without its generation, for messages */

	s3_client *c;
	st = csi_s3_from_secrets(p, vp.endpoint, vp.region, CSI_MAP(r, secrets),
				 &c, err);
	if (st)
		return st;
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	int rc = s3_head_bucket(c, v.bucket, &e);
	if (rc == -ENOENT) {
		st = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				"parameters.bucket '%s': no such bucket",
				v.bucket);
		goto out;
	}
	if (rc) {
		st = csi_s3_status(rc, &e, err, "parameters.bucket");
		goto out;
	}
	rc = marker_get(c, &v, marker, &e);
	if (rc == 0) {
		gen_from_marker(&v, marker);
		(void)csi_volume_id(&v, id);
		const char *diff = marker_mismatch(
			marker, r->name, r->capacity_range, &vp, source);
		if (diff) {
			st = csi_errorf(err, GRPC_STATUS_ALREADY_EXISTS,
					"volume '%s' exists with other "
					"settings: %s",
					id, diff);
			goto out;
		}
	} else if (rc != -ENOENT) {
		st = csi_s3_status(rc, &e, err, "reading the volume marker");
		goto out;
	} else {
		if (source) {
			char key[KEY_MAX], snap_marker[TEXT_MAX];
			snprintf(key, sizeof(key), "%s%s", snap.dir,
				 SNAP_MARKER_REL);
			rc = csi_s3_get_text(c, snap.bucket, key, snap_marker,
					     sizeof(snap_marker), &e);
			if (rc == -ENOENT) {
				st = csi_errorf(err, GRPC_STATUS_NOT_FOUND,
						"snapshot '%s' does not exist",
						source);
				goto out;
			}
			if (rc) {
				st = csi_s3_status(rc, &e, err,
						   "reading the snapshot");
				goto out;
			}
			static const char *const skip[] = {SNAP_MARKER_REL,
							   MARKER_REL,
							   RELEASED_REL,
							   LEASE_REL,
							   FLUSH_REL,
							   FLUSHED_REL,
							   NULL};
			char dst[KEY_MAX];
			snprintf(dst, sizeof(dst), "%s/", v.prefix);
			uint64_t bytes = 0;
			size_t count = 0;
			rc = copy_tree(c, snap.bucket, snap.dir, v.bucket, dst,
				       skip, &bytes, &count, &e);
			if (rc) {
				st = csi_s3_status(rc, &e, err,
						   "copying the snapshot");
				goto out;
			}
		}
		if (csi_volume_gen(v.gen) != 0) {
			st = csi_errorf(err, GRPC_STATUS_INTERNAL,
					"no random bytes for a generation");
			goto out;
		}
		marker_build(marker, TEXT_MAX, r->name, cap, &v, &vp, source);
		char key[KEY_MAX];
		rel_key(key, v.prefix, MARKER_REL);
		rc = csi_s3_put_text(c, v.bucket, key, marker, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err,
					   "writing the volume marker");
			goto out;
		}
	}
	Csi__V1__CreateVolumeResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__create_volume_response__init(out);
	csi_volume_id(&v, id);
	out->volume = volume_msg(id, marker);
	*resp = &out->base;
	st = GRPC_STATUS_OK;
out:
	free(marker);
	s3_client_destroy(c);
	return st;
}

/* --- DeleteVolume ------------------------------------------------------------
 */

static grpc_status_code delete_volume(void *ctx, const ProtobufCMessage *req,
				      ProtobufCMessage **resp,
				      struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__DeleteVolumeRequest *r =
		(const Csi__V1__DeleteVolumeRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st =
		vol_ref("volume_id", r->volume_id, &v, &foreign, err);
	if (st)
		return st;
	Csi__V1__DeleteVolumeResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__delete_volume_response__init(out);
	if (foreign) {
		*resp = &out->base;
		return GRPC_STATUS_OK;
	}
	s3_client *c;
	st = csi_s3_from_secrets(p, NULL, NULL, CSI_MAP(r, secrets), &c, err);
	if (st) {
		free(out);
		return st;
	}
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	char key[KEY_MAX], val[32];
	struct lease_view lv;
	int rc = marker_read(c, &v, marker, &e);
	if (rc == -ENOENT) /* never made, or deleted already */
		goto ok;
	if (rc) {
		st = csi_s3_status(rc, &e, err, "reading the volume marker");
		goto fail;
	}
	rc = lease_read(c, &v, &lv, &e);
	if (rc) {
		st = csi_s3_status(rc, &e, err, "reading the lease");
		goto fail;
	}
	if (lease_live(&lv) && strcmp(lv.owner, "grant") != 0) {
		st = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
				"volume '%s' is in use: mounted for writing "
				"on '%.100s'",
				r->volume_id, lv.host);
		goto fail;
	}
	if (csi_kv_get(marker, "onDelete", val, sizeof(val)) == 0 &&
	    strcmp(val, "retain") == 0) {
		/* the data stays; the volume is gone for the CO */
		char rel[KEY_MAX];
		rel_key(rel, v.prefix, RELEASED_REL);
		size_t ml = strlen(marker);
		snprintf(marker + ml, TEXT_MAX - ml, "released=%lld\n",
			 (long long)time(NULL));
		rc = csi_s3_put_text(c, v.bucket, rel, marker, &e);
		rel_key(key, v.prefix, LEASE_REL);
		if (!rc)
			rc = s3_delete_object(c, v.bucket, key, &e);
		rel_key(key, v.prefix, MARKER_REL);
		if (!rc)
			rc = s3_delete_object(c, v.bucket, key, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err, "releasing the volume");
			goto fail;
		}
		goto ok;
	}
	/* every object, the marker last: a retry after a failure finds the
	 * volume still there and finishes the job */
	snprintf(key, sizeof(key), "%s/", v.prefix);
	struct csi_keys k;
	rc = csi_s3_list(c, v.bucket, key, &k, &e);
	if (rc) {
		st = csi_s3_status(rc, &e, err, "listing the volume");
		goto fail;
	}
	rel_key(key, v.prefix, MARKER_REL);
	for (size_t i = 0; i < k.n; i++)
		if (strcmp(k.v[i].key, key) == 0) {
			free(k.v[i].key);
			k.v[i] = k.v[--k.n];
			break;
		}
	rc = csi_s3_delete_keys(c, v.bucket, &k, &e);
	csi_keys_free(&k);
	if (!rc)
		rc = s3_delete_object(c, v.bucket, key, &e);
	if (rc) {
		st = csi_s3_status(rc, &e, err,
				   "deleting the volume's objects");
		goto fail;
	}
ok:
	free(marker);
	s3_client_destroy(c);
	*resp = &out->base;
	return GRPC_STATUS_OK;
fail:
	free(marker);
	free(out);
	s3_client_destroy(c);
	return st;
}

/* --- ValidateVolumeCapabilities ----------------------------------------------
 */

/* A client from the request's secrets, or the controller's own when the
 * request has none (calls the CO may send without secrets). */
static grpc_status_code client_for(const struct csi_plugin *p, size_t n,
				   const struct csi_map_entry *const *secrets,
				   s3_client **c, struct csi_error *err)
{
	if (csi_s3_has_secrets(n, secrets))
		return csi_s3_from_secrets(p, NULL, NULL, n, secrets, c, err);
	grpc_status_code st = csi_s3_own(p, c, err);
	if (st == GRPC_STATUS_OK && !*c)
		return csi_s3_from_secrets(p, NULL, NULL, n, secrets, c, err);
	return st;
}

static void *copy_msg(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t *buf = csi_calloc(1, n);
	protobuf_c_message_pack(m, buf);
	void *out = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
	free(buf);
	if (!out) {
		fprintf(stderr, "tierfs-csi: out of memory\n");
		abort();
	}
	return out;
}

static grpc_status_code validate_caps(void *ctx, const ProtobufCMessage *req,
				      ProtobufCMessage **resp,
				      struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ValidateVolumeCapabilitiesRequest *r =
		(const Csi__V1__ValidateVolumeCapabilitiesRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st =
		vol_ref("volume_id", r->volume_id, &v, &foreign, err);
	if (st)
		return st;
	if (r->n_volume_capabilities == 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capabilities is required");
	if (foreign)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume '%s' does not exist", r->volume_id);
	s3_client *c;
	st = client_for(p, CSI_MAP(r, secrets), &c, err);
	if (st)
		return st;
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	int rc = marker_read(c, &v, marker, &e);
	s3_client_destroy(c);
	free(marker);
	if (rc == -ENOENT)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume '%s' does not exist", r->volume_id);
	if (rc)
		return csi_s3_status(rc, &e, err, "reading the volume marker");

	Csi__V1__ValidateVolumeCapabilitiesResponse *out =
		csi_calloc(1, sizeof(*out));
	csi__v1__validate_volume_capabilities_response__init(out);
	char buf[64];
	const char *why = NULL;
	for (size_t i = 0; !why && i < r->n_volume_capabilities; i++)
		why = cap_problem(r->volume_capabilities[i], NULL, buf,
				  sizeof(buf));
	struct vparams vp;
	struct csi_error perr = {0};
	if (!why && params_parse(CSI_MAP(r, parameters), &vp, &perr))
		why = perr.msg;
	if (why) {
		out->message = csi_strdup(why);
		*resp = &out->base;
		return GRPC_STATUS_OK;
	}
	Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed *cf =
		csi_calloc(1, sizeof(*cf));
	csi__v1__validate_volume_capabilities_response__confirmed__init(cf);
	cf->volume_capabilities =
		csi_calloc(r->n_volume_capabilities, sizeof(VolCap *));
	for (size_t i = 0; i < r->n_volume_capabilities; i++)
		cf->volume_capabilities[i] =
			copy_msg(&r->volume_capabilities[i]->base);
	cf->n_volume_capabilities = r->n_volume_capabilities;
	struct kvlist ctxl = {
		.desc = &csi__v1__validate_volume_capabilities_response__confirmed__volume_context_entry__descriptor};
	for (size_t i = 0; i < r->n_volume_context; i++)
		kv_add(&ctxl, r->volume_context[i]->key,
		       r->volume_context[i]->value);
	cf->n_volume_context = ctxl.n;
	cf->volume_context =
		(Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__VolumeContextEntry
			 **)ctxl.v;
	struct kvlist pl = {
		.desc = &csi__v1__validate_volume_capabilities_response__confirmed__parameters_entry__descriptor};
	for (size_t i = 0; i < r->n_parameters; i++)
		kv_add(&pl, r->parameters[i]->key, r->parameters[i]->value);
	cf->n_parameters = pl.n;
	cf->parameters =
		(Csi__V1__ValidateVolumeCapabilitiesResponse__Confirmed__ParametersEntry
			 **)pl.v;
	out->confirmed = cf;
	*resp = &out->base;
	return GRPC_STATUS_OK;
}

/* --- pagination
 * ---------------------------------------------------------------- */

/* Tokens are the decimal index of the next entry. */
static grpc_status_code page_bounds(int32_t max_entries, const char *token,
				    size_t total, size_t *start, size_t *end,
				    struct csi_error *err)
{
	if (max_entries < 0)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "max_entries may not be negative");
	*start = 0;
	if (token && *token) {
		if (!all_digits(token) || strlen(token) > 18 ||
		    strtoull(token, NULL, 10) > total)
			return csi_errorf(err, GRPC_STATUS_ABORTED,
					  "starting_token '%.40s' is not one "
					  "this plugin gave (or the list "
					  "shrank past it)",
					  has_ctl(token) ? "?" : token);
		*start = (size_t)strtoull(token, NULL, 10);
	}
	*end = total;
	if (max_entries > 0 && total - *start > (size_t)max_entries)
		*end = *start + (size_t)max_entries;
	return GRPC_STATUS_OK;
}

static char *token_str(size_t next, size_t total)
{
	if (next >= total)
		return NULL;
	char t[32];
	snprintf(t, sizeof(t), "%zu", next);
	return csi_strdup(t);
}

/* --- ListVolumes
 * ---------------------------------------------------------------- */

/* Every volume marker in the --list-bucket buckets, as "BUCKET/PREFIX"
 * ids in ks (key) and bucket index in size. */
static int list_volume_ids(s3_client *c, const struct csi_plugin *p,
			   struct csi_keys *ids, struct s3_error *e)
{
	memset(ids, 0, sizeof(*ids));
	size_t ml = strlen("/" MARKER_REL);
	for (size_t b = 0; b < p->n_list_buckets; b++) {
		struct csi_keys k;
		int rc = csi_s3_list(c, p->list_buckets[b], "", &k, e);
		if (rc) {
			csi_keys_free(ids);
			return rc;
		}
		for (size_t i = 0; i < k.n; i++) {
			const char *key = k.v[i].key;
			size_t kl = strlen(key);
			if (kl <= ml || strcmp(key + kl - ml, "/" MARKER_REL))
				continue;
			if (strncmp(key, CSI_SNAPSHOT_DIR "/",
				    strlen(CSI_SNAPSHOT_DIR) + 1) == 0)
				continue;
			char id[KEY_MAX + 80], why[128];
			snprintf(id, sizeof(id), "%s/%.*s", p->list_buckets[b],
				 (int)(kl - ml), key);
			struct csi_volume_ref v;
			if (csi_volume_parse(id, &v, why, sizeof(why)) != 0)
				continue;
			if (ids->n == ids->cap) {
				size_t cap = ids->cap ? 2 * ids->cap : 32;
				struct csi_key *nv =
					realloc(ids->v, cap * sizeof(*nv));
				if (!nv) {
					csi_keys_free(&k);
					csi_keys_free(ids);
					return -ENOMEM;
				}
				ids->v = nv;
				ids->cap = cap;
			}
			ids->v[ids->n].key = csi_strdup(id);
			ids->v[ids->n].size = b;
			ids->n++;
		}
		csi_keys_free(&k);
	}
	return 0;
}

static grpc_status_code list_volumes(void *ctx, const ProtobufCMessage *req,
				     ProtobufCMessage **resp,
				     struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ListVolumesRequest *r =
		(const Csi__V1__ListVolumesRequest *)req;
	s3_client *c = NULL;
	grpc_status_code st = GRPC_STATUS_OK;
	struct csi_keys ids = {0};
	struct s3_error e = {0};
	if (p->n_list_buckets) {
		st = csi_s3_own(p, &c, err);
		if (st)
			return st;
	}
	if (c) {
		int rc = list_volume_ids(c, p, &ids, &e);
		if (rc) {
			s3_client_destroy(c);
			return csi_s3_status(rc, &e, err, "listing volumes");
		}
	}
	size_t start, end;
	st = page_bounds(r->max_entries, r->starting_token, ids.n, &start, &end,
			 err);
	if (st)
		goto out;
	Csi__V1__ListVolumesResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__list_volumes_response__init(out);
	out->entries = csi_calloc(end - start, sizeof(*out->entries));
	char *marker = csi_calloc(1, TEXT_MAX);
	for (size_t i = start; i < end; i++) {
		struct csi_volume_ref v;
		char why[128];
		if (csi_volume_parse(ids.v[i].key, &v, why, sizeof(why)))
			continue;
		int rc = marker_get(c, &v, marker, &e);
		if (rc == -ENOENT)
			continue; /* deleted since the listing */
		if (rc) {
			free(marker);
			protobuf_c_message_free_unpacked(&out->base, NULL);
			st = csi_s3_status(rc, &e, err, "reading a marker");
			goto out;
		}
		Csi__V1__ListVolumesResponse__Entry *en =
			csi_calloc(1, sizeof(*en));
		csi__v1__list_volumes_response__entry__init(en);
		char id[CSI_VOLUME_ID_MAX + 1];
		gen_from_marker(&v, marker);
		if (csi_volume_id(&v, id) != 0)
			continue;
		en->volume = volume_msg(id, marker);
		out->entries[out->n_entries++] = en;
	}
	free(marker);
	char *tok = token_str(end, ids.n);
	if (tok)
		out->next_token = tok;
	*resp = &out->base;
out:
	csi_keys_free(&ids);
	if (c)
		s3_client_destroy(c);
	return st;
}

/* --- GetCapacity
 * ------------------------------------------------------------------ */

/* S3 has no capacity of its own: what is left is --capacity-available,
 * or unlimited (INT64_MAX); 0 for capabilities tierfs cannot serve. */
static grpc_status_code get_capacity(void *ctx, const ProtobufCMessage *req,
				     ProtobufCMessage **resp,
				     struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__GetCapacityRequest *r =
		(const Csi__V1__GetCapacityRequest *)req;
	struct vparams vp;
	grpc_status_code st = params_parse(CSI_MAP(r, parameters), &vp, err);
	if (st)
		return st;
	Csi__V1__GetCapacityResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__get_capacity_response__init(out);
	out->available_capacity = p->capacity_available
					  ? (int64_t)p->capacity_available
					  : INT64_MAX;
	char buf[64];
	for (size_t i = 0; i < r->n_volume_capabilities; i++)
		if (cap_problem(r->volume_capabilities[i], NULL, buf,
				sizeof(buf)))
			out->available_capacity = 0;
	*resp = &out->base;
	return GRPC_STATUS_OK;
}

/* --- ControllerExpandVolume --------------------------------------------------
 */

/* Replaces the capacity= line of a marker. */
static void marker_set_capacity(char *marker, int64_t cap)
{
	char *copy = csi_strdup(marker);
	size_t o = 0;
	o += (size_t)snprintf(marker, TEXT_MAX, "capacity=%" PRId64 "\n", cap);
	for (char *line = copy; line && *line;) {
		char *end = strchr(line, '\n');
		size_t ll = end ? (size_t)(end - line) : strlen(line);
		if (strncmp(line, "capacity=", 9) != 0 && o + ll + 2 < TEXT_MAX)
			o += (size_t)snprintf(marker + o, TEXT_MAX - o,
					      "%.*s\n", (int)ll, line);
		line = end ? end + 1 : NULL;
	}
	free(copy);
}

static grpc_status_code expand_volume(void *ctx, const ProtobufCMessage *req,
				      ProtobufCMessage **resp,
				      struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ControllerExpandVolumeRequest *r =
		(const Csi__V1__ControllerExpandVolumeRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st =
		vol_ref("volume_id", r->volume_id, &v, &foreign, err);
	if (st)
		return st;
	const Csi__V1__CapacityRange *cr = r->capacity_range;
	if (!cr || (cr->required_bytes == 0 && cr->limit_bytes == 0))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "capacity_range is required");
	int64_t want;
	st = capacity_pick(cr, &want, err);
	if (st)
		return st;
	char buf[64];
	const char *why = r->volume_capability
				  ? cap_problem(r->volume_capability, NULL, buf,
						sizeof(buf))
				  : NULL;
	if (why)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability: %s", why);
	if (foreign)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume '%s' does not exist", r->volume_id);
	s3_client *c;
	st = csi_s3_from_secrets(p, NULL, NULL, CSI_MAP(r, secrets), &c, err);
	if (st)
		return st;
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	int rc = marker_read(c, &v, marker, &e);
	if (rc == -ENOENT) {
		st = csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				"volume '%s' does not exist", r->volume_id);
		goto out;
	}
	if (rc) {
		st = csi_s3_status(rc, &e, err, "reading the volume marker");
		goto out;
	}
	int64_t have = marker_capacity(marker);
	if (cr->limit_bytes && have > cr->limit_bytes) {
		st = csi_errorf(err, GRPC_STATUS_OUT_OF_RANGE,
				"capacity_range: limit_bytes %" PRId64
				" is below the volume's %" PRId64
				" bytes (volumes do not shrink)",
				cr->limit_bytes, have);
		goto out;
	}
	if (want > have) { /* never shrinks: a smaller request keeps it */
		marker_set_capacity(marker, want);
		char key[KEY_MAX];
		rel_key(key, v.prefix, MARKER_REL);
		rc = csi_s3_put_text(c, v.bucket, key, marker, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err,
					   "writing the volume marker");
			goto out;
		}
		have = want;
	}
	Csi__V1__ControllerExpandVolumeResponse *out =
		csi_calloc(1, sizeof(*out));
	csi__v1__controller_expand_volume_response__init(out);
	out->capacity_bytes = have;
	out->node_expansion_required = 1;
	*resp = &out->base;
	st = GRPC_STATUS_OK;
out:
	free(marker);
	s3_client_destroy(c);
	return st;
}

/* --- ControllerPublishVolume / ControllerUnpublishVolume
 * ---------------------- */

static grpc_status_code check_node_id(const char *node_id, int required,
				      struct csi_error *err)
{
	if (required && (!node_id || !*node_id))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "node_id is required");
	if (node_id && (strlen(node_id) > NAME_MAX_LEN || has_ctl(node_id) ||
			strchr(node_id, '=')))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "node_id: must be at most %d bytes, with "
				  "no control bytes or '='",
				  NAME_MAX_LEN);
	return GRPC_STATUS_OK;
}

static grpc_status_code publish(void *ctx, const ProtobufCMessage *req,
				ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ControllerPublishVolumeRequest *r =
		(const Csi__V1__ControllerPublishVolumeRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st =
		vol_ref("volume_id", r->volume_id, &v, &foreign, err);
	if (st)
		return st;
	st = check_node_id(r->node_id, 1, err);
	if (st)
		return st;
	if (!r->volume_capability)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability is required");
	enum access acc;
	char buf[64];
	const char *why =
		cap_problem(r->volume_capability, &acc, buf, sizeof(buf));
	if (why)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "volume_capability: %s", why);
	if (foreign)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "volume '%s' does not exist", r->volume_id);
	/* --mode all is the one node there is (see the top of this file) */
	if ((p->mode & CSI_MODE_NODE) && strcmp(r->node_id, p->node_id) != 0)
		return csi_errorf(
			err, GRPC_STATUS_NOT_FOUND,
			"node_id '%s' does not exist (this --mode all "
			"plugin is node '%.100s' and serves no other)",
			r->node_id, p->node_id);
	const char *endpoint =
		csi_map_get(CSI_MAP(r, volume_context), "endpoint");
	const char *region = csi_map_get(CSI_MAP(r, volume_context), "region");
	s3_client *c;
	st = csi_s3_from_secrets(p, endpoint, region, CSI_MAP(r, secrets), &c,
				 err);
	if (st)
		return st;
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	int rc = marker_read(c, &v, marker, &e);
	if (rc == -ENOENT) {
		st = csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				"volume '%s' does not exist", r->volume_id);
		goto out;
	}
	if (rc) {
		st = csi_s3_status(rc, &e, err, "reading the volume marker");
		goto out;
	}
	/* Only a single-node writer is fenced: read-only publishes take no
	 * lease, and RWX is last-writer-wins with no lease at all. */
	if (!r->readonly && acc == ACC_RWO) {
		struct lease_view lv;
		rc = lease_read(c, &v, &lv, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err, "reading the lease");
			goto out;
		}
		if (lv.present && strcmp(lv.host, r->node_id) == 0)
			goto ok; /* granted to, or held by, this node */
		if (lease_live(&lv)) {
			st = csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION,
					"volume '%s' is published for writing "
					"to node '%.100s' (lease renewed %llds "
					"ago)",
					r->volume_id, lv.host,
					(long long)time(NULL) - lv.renewed);
			goto out;
		}
		char key[KEY_MAX], body[300];
		rel_key(key, v.prefix, LEASE_REL);
		snprintf(body, sizeof(body),
			 "owner=grant\nhost=%s\nrenewed=%lld\n", r->node_id,
			 (long long)time(NULL));
		rc = csi_s3_put_text(c, v.bucket, key, body, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err, "writing the lease");
			goto out;
		}
	} else if (r->readonly || acc == ACC_RO) {
		/* read-only where it is published read-write (this node's
		 * grant, or its live lease) is incompatible, not idempotent */
		struct lease_view lv;
		rc = lease_read(c, &v, &lv, &e);
		if (rc) {
			st = csi_s3_status(rc, &e, err, "reading the lease");
			goto out;
		}
		if (lv.present && strcmp(lv.host, r->node_id) == 0 &&
		    (strcmp(lv.owner, "grant") == 0 || lease_live(&lv))) {
			st = csi_errorf(
				err, GRPC_STATUS_ALREADY_EXISTS,
				"volume '%s' is published read-write to "
				"node '%.100s'; readonly or a read-only "
				"access_mode asks for it read-only there",
				r->volume_id, r->node_id);
			goto out;
		}
	}
ok:;
	Csi__V1__ControllerPublishVolumeResponse *out =
		csi_calloc(1, sizeof(*out));
	csi__v1__controller_publish_volume_response__init(out);
	struct kvlist l = {
		.desc = &csi__v1__controller_publish_volume_response__publish_context_entry__descriptor};
	kv_add(&l, PUBLISHED_TO, r->node_id);
	out->n_publish_context = l.n;
	out->publish_context =
		(Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *
			 *)l.v;
	*resp = &out->base;
	st = GRPC_STATUS_OK;
out:
	free(marker);
	s3_client_destroy(c);
	return st;
}

static grpc_status_code unpublish(void *ctx, const ProtobufCMessage *req,
				  ProtobufCMessage **resp,
				  struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ControllerUnpublishVolumeRequest *r =
		(const Csi__V1__ControllerUnpublishVolumeRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st =
		vol_ref("volume_id", r->volume_id, &v, &foreign, err);
	if (st)
		return st;
	st = check_node_id(r->node_id, 0, err);
	if (st)
		return st;
	if (!foreign) {
		s3_client *c;
		st = csi_s3_from_secrets(p, NULL, NULL, CSI_MAP(r, secrets), &c,
					 err);
		if (st)
			return st;
		struct s3_error e = {0};
		struct lease_view lv;
		char *marker = csi_calloc(1, TEXT_MAX);
		int rc = marker_get(c, &v, marker, &e);
		/* another volume at the prefix now: this one is unpublished */
		int gone = rc == 0 && !marker_is_of(&v, marker);
		free(marker);
		if (rc == -ENOENT || gone)
			rc = 0;
		if (!rc)
			rc = lease_read(c, &v, &lv, &e);
		/* an empty node_id: unpublish from every node */
		if (rc == 0 && !gone && lv.present &&
		    (!*r->node_id || strcmp(lv.host, r->node_id) == 0)) {
			char key[KEY_MAX];
			rel_key(key, v.prefix, LEASE_REL);
			rc = s3_delete_object(c, v.bucket, key, &e);
		}
		s3_client_destroy(c);
		if (rc && rc != -ENOENT)
			return csi_s3_status(rc, &e, err, "removing the lease");
	}
	Csi__V1__ControllerUnpublishVolumeResponse *out =
		csi_calloc(1, sizeof(*out));
	csi__v1__controller_unpublish_volume_response__init(out);
	*resp = &out->base;
	return GRPC_STATUS_OK;
}

/* --- snapshots
 * ------------------------------------------------------------------ */

static Csi__V1__Snapshot *snapshot_msg(const char *id, const char *marker)
{
	Csi__V1__Snapshot *s = csi_calloc(1, sizeof(*s));
	csi__v1__snapshot__init(s);
	char v[CSI_VOLUME_ID_MAX + 1];
	s->snapshot_id = csi_strdup(id);
	if (csi_kv_get(marker, "source", v, sizeof(v)) == 0)
		s->source_volume_id = csi_strdup(v);
	if (csi_kv_get(marker, "size", v, sizeof(v)) == 0 && all_digits(v))
		s->size_bytes = strtoll(v, NULL, 10);
	s->creation_time = csi_calloc(1, sizeof(*s->creation_time));
	google__protobuf__timestamp__init(s->creation_time);
	if (csi_kv_get(marker, "created", v, sizeof(v)) == 0 && all_digits(v))
		s->creation_time->seconds = strtoll(v, NULL, 10);
	s->ready_to_use = 1;
	return s;
}

static grpc_status_code create_snapshot(void *ctx, const ProtobufCMessage *req,
					ProtobufCMessage **resp,
					struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__CreateSnapshotRequest *r =
		(const Csi__V1__CreateSnapshotRequest *)req;
	struct csi_volume_ref v;
	int foreign;
	grpc_status_code st = vol_ref("source_volume_id", r->source_volume_id,
				      &v, &foreign, err);
	if (st)
		return st;
	if (!r->name || !*r->name)
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "name is required");
	if (strlen(r->name) > NAME_MAX_LEN || has_ctl(r->name))
		return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
				  "name: must be at most %d bytes with no "
				  "control bytes",
				  NAME_MAX_LEN);
	/* no parameters of ours; the snapshotter's own keys are fine */
	for (size_t i = 0; i < r->n_parameters; i++)
		if (strncmp(r->parameters[i]->key, K8S_PARAM_PREFIX,
			    strlen(K8S_PARAM_PREFIX)) != 0)
			return csi_errorf(err, GRPC_STATUS_INVALID_ARGUMENT,
					  "parameters: unknown key '%.40s' "
					  "(snapshots take no parameters)",
					  has_ctl(r->parameters[i]->key)
						  ? "?"
						  : r->parameters[i]->key);
	if (foreign)
		return csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				  "source volume '%s' does not exist",
				  r->source_volume_id);
	struct snap_ref sr = {0};
	char id[CSI_VOLUME_ID_MAX + 1];
	snap_make(v.bucket, r->name, &sr, id);

	s3_client *c;
	st = csi_s3_from_secrets(p, NULL, NULL, CSI_MAP(r, secrets), &c, err);
	if (st)
		return st;
	struct s3_error e = {0};
	char *marker = csi_calloc(1, TEXT_MAX);
	char key[KEY_MAX], val[CSI_VOLUME_ID_MAX + 1];
	snprintf(key, sizeof(key), "%s%s", sr.dir, SNAP_MARKER_REL);
	int rc = csi_s3_get_text(c, sr.bucket, key, marker, TEXT_MAX, &e);
	if (rc == 0) {
		if (csi_kv_get(marker, "source", val, sizeof(val)) != 0 ||
		    strcmp(val, r->source_volume_id) != 0 ||
		    csi_kv_get(marker, "name", val, sizeof(val)) != 0 ||
		    strcmp(val, r->name) != 0) {
			st = csi_errorf(err, GRPC_STATUS_ALREADY_EXISTS,
					"snapshot '%s' exists, of another "
					"source volume",
					r->name);
			goto out;
		}
		goto ok;
	}
	if (rc != -ENOENT) {
		st = csi_s3_status(rc, &e, err, "reading the snapshot marker");
		goto out;
	}
	rc = marker_read(c, &v, marker, &e);
	if (rc == -ENOENT) {
		st = csi_errorf(err, GRPC_STATUS_NOT_FOUND,
				"source volume '%s' does not exist",
				r->source_volume_id);
		goto out;
	}
	if (rc) {
		st = csi_s3_status(rc, &e, err, "reading the volume marker");
		goto out;
	}
	st = flush_holder(c, &v, err);
	if (st)
		goto out;
	char src[KEY_MAX];
	snprintf(src, sizeof(src), "%s/", v.prefix);
	static const char *const skip[] = {LEASE_REL, FLUSH_REL, FLUSHED_REL,
					   NULL};
	uint64_t bytes = 0;
	size_t count = 0;
	rc = copy_tree(c, v.bucket, src, sr.bucket, sr.dir, skip, &bytes,
		       &count, &e);
	if (rc) {
		st = csi_s3_status(rc, &e, err, "copying the volume");
		goto out;
	}
	snprintf(marker, TEXT_MAX,
		 "format=" MARKER_FORMAT "\nname=%s\nsource=%s\n"
		 "size=%" PRIu64 "\nobjects=%zu\ncreated=%lld\n",
		 r->name, r->source_volume_id, bytes, count,
		 (long long)time(NULL));
	rc = csi_s3_put_text(c, sr.bucket, key, marker, &e);
	if (rc) {
		st = csi_s3_status(rc, &e, err, "writing the snapshot marker");
		goto out;
	}
ok:;
	Csi__V1__CreateSnapshotResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__create_snapshot_response__init(out);
	out->snapshot = snapshot_msg(id, marker);
	*resp = &out->base;
	st = GRPC_STATUS_OK;
out:
	free(marker);
	s3_client_destroy(c);
	return st;
}

static grpc_status_code delete_snapshot(void *ctx, const ProtobufCMessage *req,
					ProtobufCMessage **resp,
					struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__DeleteSnapshotRequest *r =
		(const Csi__V1__DeleteSnapshotRequest *)req;
	struct snap_ref sr = {0};
	int foreign;
	grpc_status_code st = snap_ref_parse("snapshot_id", r->snapshot_id, &sr,
					     &foreign, err);
	if (st)
		return st;
	if (!foreign) {
		s3_client *c;
		st = csi_s3_from_secrets(p, NULL, NULL, CSI_MAP(r, secrets), &c,
					 err);
		if (st)
			return st;
		struct s3_error e = {0};
		struct csi_keys k;
		int rc = csi_s3_list(c, sr.bucket, sr.dir, &k, &e);
		if (rc == 0) {
			/* the marker last, as for volumes */
			char key[KEY_MAX];
			snprintf(key, sizeof(key), "%s%s", sr.dir,
				 SNAP_MARKER_REL);
			for (size_t i = 0; i < k.n; i++)
				if (strcmp(k.v[i].key, key) == 0) {
					free(k.v[i].key);
					k.v[i] = k.v[--k.n];
					break;
				}
			rc = csi_s3_delete_keys(c, sr.bucket, &k, &e);
			csi_keys_free(&k);
			if (rc == 0)
				rc = s3_delete_object(c, sr.bucket, key, &e);
		}
		s3_client_destroy(c);
		if (rc && rc != -ENOENT)
			return csi_s3_status(rc, &e, err,
					     "deleting the snapshot");
	}
	Csi__V1__DeleteSnapshotResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__delete_snapshot_response__init(out);
	*resp = &out->base;
	return GRPC_STATUS_OK;
}

/* Adds the snapshots of bucket (matching source, when set) to ids (key:
 * the id) and markers (key: the marker text). */
static int collect_snapshots(s3_client *c, const char *bucket,
			     const char *source, struct csi_keys *ids,
			     struct csi_keys *markers, struct s3_error *e)
{
	struct csi_keys dirs;
	int rc = csi_s3_list_dirs(c, bucket, CSI_SNAPSHOT_DIR "/", &dirs, e);
	if (rc)
		return rc == -ENOENT ? 0 : rc;
	char *text = csi_calloc(1, TEXT_MAX);
	for (size_t i = 0; rc == 0 && i < dirs.n; i++) {
		char key[KEY_MAX], src[CSI_VOLUME_ID_MAX + 1];
		snprintf(key, sizeof(key), "%s%s", dirs.v[i].key,
			 SNAP_MARKER_REL);
		rc = csi_s3_get_text(c, bucket, key, text, TEXT_MAX, e);
		if (rc == -ENOENT) { /* being made, or being deleted */
			rc = 0;
			continue;
		}
		if (rc)
			break;
		if (source && (csi_kv_get(text, "source", src, sizeof(src)) ||
			       strcmp(src, source) != 0))
			continue;
		char id[KEY_MAX + 80];
		size_t dl = strlen(dirs.v[i].key);
		snprintf(id, sizeof(id), "%s/%.*s", bucket, (int)(dl - 1),
			 dirs.v[i].key);
		struct csi_keys *lists[2] = {ids, markers};
		const char *vals[2] = {id, text};
		for (int j = 0; j < 2; j++) {
			struct csi_keys *l = lists[j];
			if (l->n == l->cap) {
				size_t cap = l->cap ? 2 * l->cap : 32;
				struct csi_key *nv =
					realloc(l->v, cap * sizeof(*nv));
				if (!nv) {
					rc = -ENOMEM;
					break;
				}
				l->v = nv;
				l->cap = cap;
			}
			l->v[l->n].key = csi_strdup(vals[j]);
			l->v[l->n].size = 0;
			l->n++;
		}
	}
	free(text);
	csi_keys_free(&dirs);
	return rc;
}

static grpc_status_code list_snapshots(void *ctx, const ProtobufCMessage *req,
				       ProtobufCMessage **resp,
				       struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	const Csi__V1__ListSnapshotsRequest *r =
		(const Csi__V1__ListSnapshotsRequest *)req;
	struct snap_ref sr = {0};
	struct csi_volume_ref v;
	int want_snap = r->snapshot_id && *r->snapshot_id;
	int want_src = r->source_volume_id && *r->source_volume_id;
	int none = 0, foreign = 0;
	grpc_status_code st;
	struct csi_error ignored = {0};
	/* a filter naming something tierfs never made matches nothing */
	if (want_snap && (snap_ref_parse("snapshot_id", r->snapshot_id, &sr,
					 &foreign, &ignored) ||
			  foreign))
		none = 1;
	if (want_src && (vol_ref("source_volume_id", r->source_volume_id, &v,
				 &foreign, &ignored) ||
			 foreign))
		none = 1;
	struct csi_keys ids = {0}, markers = {0};
	struct s3_error e = {0};
	s3_client *c = NULL;
	if (!none && (want_snap || want_src || p->n_list_buckets)) {
		st = csi_s3_has_secrets(CSI_MAP(r, secrets))
			     ? csi_s3_from_secrets(p, NULL, NULL,
						   CSI_MAP(r, secrets), &c, err)
			     : csi_s3_own(p, &c, err);
		if (st)
			return st;
	}
	int rc = 0;
	if (c && want_snap) {
		const char *b = sr.bucket;
		if (want_src && strcmp(v.bucket, b) != 0)
			b = NULL;
		if (b)
			rc = collect_snapshots(
				c, b, want_src ? r->source_volume_id : NULL,
				&ids, &markers, &e);
		/* keep only the one asked for */
		for (size_t i = 0; rc == 0 && i < ids.n;) {
			if (strcmp(ids.v[i].key, r->snapshot_id) != 0) {
				free(ids.v[i].key);
				free(markers.v[i].key);
				ids.v[i] = ids.v[--ids.n];
				markers.v[i] = markers.v[--markers.n];
			} else {
				i++;
			}
		}
	} else if (c && want_src) {
		rc = collect_snapshots(c, v.bucket, r->source_volume_id, &ids,
				       &markers, &e);
	} else if (c) {
		for (size_t b = 0; rc == 0 && b < p->n_list_buckets; b++)
			rc = collect_snapshots(c, p->list_buckets[b], NULL,
					       &ids, &markers, &e);
	}
	if (c)
		s3_client_destroy(c);
	if (rc) {
		st = csi_s3_status(rc, &e, err, "listing snapshots");
		goto out;
	}
	size_t start, end;
	st = page_bounds(r->max_entries, r->starting_token, ids.n, &start, &end,
			 err);
	if (st)
		goto out;
	Csi__V1__ListSnapshotsResponse *out = csi_calloc(1, sizeof(*out));
	csi__v1__list_snapshots_response__init(out);
	out->entries = csi_calloc(end - start, sizeof(*out->entries));
	for (size_t i = start; i < end; i++) {
		Csi__V1__ListSnapshotsResponse__Entry *en =
			csi_calloc(1, sizeof(*en));
		csi__v1__list_snapshots_response__entry__init(en);
		en->snapshot = snapshot_msg(ids.v[i].key, markers.v[i].key);
		out->entries[out->n_entries++] = en;
	}
	char *tok = token_str(end, ids.n);
	if (tok)
		out->next_token = tok;
	*resp = &out->base;
out:
	csi_keys_free(&ids);
	csi_keys_free(&markers);
	return st;
}

/* --- ControllerGetCapabilities
 * ---------------------------------------------------- */

/* Each capability tierfs means to offer (issue 5) and the RPCs it needs. */
static const struct {
	Csi__V1__ControllerServiceCapability__RPC__Type type;
	const char *rpcs[3];
} controller_caps[] = {
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME,
	 {"CreateVolume", "DeleteVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME,
	 {"ControllerPublishVolume", "ControllerUnpublishVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES,
	 {"ListVolumes"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY,
	 {"GetCapacity"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT,
	 {"CreateSnapshot", "DeleteSnapshot"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS,
	 {"ListSnapshots"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	 {"ControllerExpandVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_READONLY,
	 {"ControllerPublishVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER,
	 {"CreateVolume"}},
};

static int rpcs_implemented(const char *const *rpcs, size_t n)
{
	for (size_t i = 0; i < n && rpcs[i]; i++)
		if (!csi_has_handler(csi_controller_handlers, rpcs[i]))
			return 0;
	return 1;
}

static grpc_status_code get_capabilities(void *ctx, const ProtobufCMessage *req,
					 ProtobufCMessage **resp,
					 struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	size_t max = sizeof(controller_caps) / sizeof(controller_caps[0]);
	Csi__V1__ControllerGetCapabilitiesResponse *r =
		csi_calloc(1, sizeof(*r));
	csi__v1__controller_get_capabilities_response__init(r);
	r->capabilities = csi_calloc(max, sizeof(*r->capabilities));
	for (size_t i = 0; i < max; i++) {
		if (!rpcs_implemented(
			    controller_caps[i].rpcs,
			    sizeof(controller_caps[i].rpcs) /
				    sizeof(controller_caps[i].rpcs[0])))
			continue;
		Csi__V1__ControllerServiceCapability *c =
			csi_calloc(1, sizeof(*c));
		csi__v1__controller_service_capability__init(c);
		c->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
		c->rpc = csi_calloc(1, sizeof(*c->rpc));
		csi__v1__controller_service_capability__rpc__init(c->rpc);
		c->rpc->type = controller_caps[i].type;
		r->capabilities[r->n_capabilities++] = c;
	}
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

const struct csi_handler csi_controller_handlers[] = {
	{"ControllerGetCapabilities", get_capabilities},
	{"CreateVolume", create_volume},
	{"DeleteVolume", delete_volume},
	{"ValidateVolumeCapabilities", validate_caps},
	{"ListVolumes", list_volumes},
	{"GetCapacity", get_capacity},
	{"ControllerExpandVolume", expand_volume},
	{"ControllerPublishVolume", publish},
	{"ControllerUnpublishVolume", unpublish},
	{"CreateSnapshot", create_snapshot},
	{"DeleteSnapshot", delete_snapshot},
	{"ListSnapshots", list_snapshots},
	{NULL, NULL},
};
