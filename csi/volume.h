/* volume.h: tierfs volume ids, and the checks every CSI call runs on them.
 *
 * A volume is an S3 prefix; its id says where, and which volume made
 * there: "BUCKET/PREFIX#GEN", e.g. "homes/jhub/claim-alice#3f9a1c0b".
 * GEN is CSI_GEN_HEX hex digits drawn when CreateVolume first writes the
 * prefix's marker (PREFIX/.tierfs/volume, "generation="). A PVC deleted
 * and made again under the same name renders the same prefix, but gets a
 * new GEN: a late DeleteVolume (or unpublish) retried for the old id finds
 * another generation in the marker and leaves the new volume alone.
 * An id without "#GEN" names whatever volume is at its prefix: a static
 * PersistentVolume an admin writes by hand (deploy/jupyterhub's
 * shared-data-ro), or an id made before generations.
 *
 * The id is at most CSI_VOLUME_ID_MAX bytes (the CSI spec's limit for a
 * string field), so a prefix rendered from a long namespace and claim name
 * is shortened deterministically: cut, then "-" and 12 hex digits of the
 * SHA-256 of the whole prefix, so the same name always gives the same
 * prefix.
 *
 * What is refused, everywhere: an empty or oversized id, a bucket name S3
 * would refuse, a prefix with an empty, "." or ".." segment, a NUL or
 * control byte, a backslash or '#', or a leading/trailing "/", and a GEN
 * that is not CSI_GEN_HEX lower-case hex digits. The prefix may not reach
 * into tierfs' own ".tierfs" folders either (".tierfs-snapshots",
 * CSI_SNAPSHOT_DIR, is where snapshots are kept).
 *
 * Threading: none; every function but csi_volume_gen() is pure.
 */
#ifndef TIERFS_CSI_VOLUME_H
#define TIERFS_CSI_VOLUME_H

#include <stddef.h>

#define CSI_VOLUME_ID_MAX 128 /* CSI: string fields are at most 128 bytes */
#define CSI_BUCKET_MAX 63
#define CSI_SNAPSHOT_DIR ".tierfs-snapshots"
#define CSI_GEN_HEX 8

struct csi_volume_ref {
	char bucket[CSI_BUCKET_MAX + 1];
	char prefix[CSI_VOLUME_ID_MAX];
	char gen[CSI_GEN_HEX + 1]; /* "" in an id made before generations */
};

/* Checks a bucket name (S3's rules: 3-63 of [a-z0-9.-], starting and
 * ending with a letter or digit, no ".."). 0, or -EINVAL with why. */
int csi_bucket_check(const char *bucket, char *why, size_t len);
/* Checks a prefix (see the top of this file). 0, or -EINVAL with why. */
int csi_prefix_check(const char *prefix, char *why, size_t len);
/* Splits and checks an id. 0, or -EINVAL with why naming what is wrong
 * (never echoing more than a short, escaped piece of the id). */
int csi_volume_parse(const char *id, struct csi_volume_ref *out, char *why,
		     size_t len);
/* Checks bucket and prefix into out, shortening the prefix (see above)
 * so that "BUCKET/PREFIX#GEN" fits CSI_VOLUME_ID_MAX; out->prefix is the
 * prefix used, out->gen is "". 0, or -EINVAL with why when bucket or
 * prefix fails its check. */
int csi_volume_make(const char *bucket, const char *prefix,
		    struct csi_volume_ref *out, char *why, size_t len);
/* v's id: "BUCKET/PREFIX#GEN", or "BUCKET/PREFIX" when v->gen is "".
 * 0, or -ENAMETOOLONG (id "") when it would exceed CSI_VOLUME_ID_MAX,
 * which a ref from csi_volume_make() or csi_volume_parse() never does. */
int csi_volume_id(const struct csi_volume_ref *v,
		  char id[CSI_VOLUME_ID_MAX + 1]);
/* An id tierfs never made but that is harmless: no '/' at all (e.g.
 * csi-sanity's "fake-vol-id-..."), at most CSI_VOLUME_ID_MAX bytes, with
 * no control byte, backslash or "..". Calls answer it NOT_FOUND, or OK
 * where the spec says a missing object is success. 1 or 0. */
int csi_volume_never_made(const char *id);
/* Whether g is a generation: CSI_GEN_HEX lower-case hex digits. 1 or 0. */
int csi_volume_gen_ok(const char *g);
/* A fresh generation: CSI_GEN_HEX hex digits from getrandom(). 0 or
 * -errno. */
int csi_volume_gen(char gen[CSI_GEN_HEX + 1]);
/* Whether a marker's "generation" value (NULL or "" when it has none) is
 * v's, or v has none: 1 or 0. */
int csi_volume_gen_matches(const struct csi_volume_ref *v,
			   const char *marker_gen);

#endif
