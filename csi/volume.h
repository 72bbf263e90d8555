/* volume.h: tierfs volume ids, and the checks every CSI call runs on them.
 *
 * A volume is an S3 prefix; its id says where: "BUCKET/PREFIX", e.g.
 * "homes/jhub/claim-alice". The id is at most CSI_VOLUME_ID_MAX bytes (the
 * CSI spec's limit for a string field), so a prefix rendered from a long
 * namespace and claim name is shortened deterministically: cut, then "-"
 * and 12 hex digits of the SHA-256 of the whole prefix, so the same name
 * always gives the same id.
 * What is refused, everywhere: an empty or oversized id, a bucket name S3
 * would refuse, and a prefix with an empty, "." or ".." segment, a NUL or
 * control byte, a backslash, or a leading/trailing "/"; the prefix may not
 * reach into tierfs' own ".tierfs" folders either.
 * (".tierfs-snapshots", CSI_SNAPSHOT_DIR, is where snapshots are kept.)
 * Threading: none; every function is pure.
 */
#ifndef TIERFS_CSI_VOLUME_H
#define TIERFS_CSI_VOLUME_H

#include <stddef.h>

#define CSI_VOLUME_ID_MAX 128 /* CSI: string fields are at most 128 bytes */
#define CSI_BUCKET_MAX 63
#define CSI_SNAPSHOT_DIR ".tierfs-snapshots"

struct csi_volume_ref {
	char bucket[CSI_BUCKET_MAX + 1];
	char prefix[CSI_VOLUME_ID_MAX];
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
/* Builds the id of bucket + prefix, shortening the prefix (see above) when
 * the id would exceed CSI_VOLUME_ID_MAX; out->prefix is the prefix used.
 * 0, or -EINVAL with why when bucket or prefix fails its check. */
int csi_volume_make(const char *bucket, const char *prefix,
		    struct csi_volume_ref *out, char id[CSI_VOLUME_ID_MAX + 1],
		    char *why, size_t len);

#endif
