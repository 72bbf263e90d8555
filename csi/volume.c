/* volume.c: tierfs volume ids (see volume.h). */
#include "volume.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>

#define HASH_HEX 12 /* of the SHA-256 that ends a shortened prefix */

static int fail(char *why, size_t len, const char *fmt, const char *what)
{
	snprintf(why, len, fmt, what);
	return -EINVAL;
}

int csi_bucket_check(const char *bucket, char *why, size_t len)
{
	size_t n = strlen(bucket);
	if (n < 3 || n > CSI_BUCKET_MAX)
		return fail(why, len, "bucket name must be 3 to 63 bytes%s",
			    "");
	for (size_t i = 0; i < n; i++) {
		char c = bucket[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
		if (!alnum && c != '.' && c != '-')
			return fail(why, len,
				    "bucket name may hold only a-z, 0-9, '.' "
				    "and '-'%s",
				    "");
		if (!alnum && (i == 0 || i == n - 1))
			return fail(why, len,
				    "bucket name must start and end with a "
				    "letter or digit%s",
				    "");
	}
	if (strstr(bucket, ".."))
		return fail(why, len, "bucket name may not hold '..'%s", "");
	return 0;
}

int csi_prefix_check(const char *prefix, char *why, size_t len)
{
	size_t n = strlen(prefix);
	if (n == 0)
		return fail(why, len, "prefix is empty%s", "");
	if (n >= CSI_VOLUME_ID_MAX)
		return fail(why, len, "prefix is longer than %s bytes", "127");
	if (prefix[0] == '/' || prefix[n - 1] == '/')
		return fail(why, len, "prefix may not start or end with '/'%s",
			    "");
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)prefix[i];
		if (c < 0x20 || c == 0x7f)
			return fail(why, len,
				    "prefix may not hold control bytes%s", "");
		if (c == '\\')
			return fail(why, len, "prefix may not hold '\\'%s", "");
	}
	for (const char *seg = prefix; seg; seg = strchr(seg, '/')) {
		if (*seg == '/')
			seg++;
		size_t sl = strcspn(seg, "/");
		if (sl == 0)
			return fail(why, len,
				    "prefix may not hold an empty segment "
				    "('//')%s",
				    "");
		if ((sl == 1 && seg[0] == '.') ||
		    (sl == 2 && seg[0] == '.' && seg[1] == '.'))
			return fail(why, len,
				    "prefix may not hold a '.' or '..' "
				    "segment%s",
				    "");
		if (sl >= 7 && strncmp(seg, ".tierfs", 7) == 0)
			return fail(why, len,
				    "prefix may not reach into tierfs' own "
				    "'%s' folders",
				    ".tierfs");
	}
	return 0;
}

int csi_volume_parse(const char *id, struct csi_volume_ref *out, char *why,
		     size_t len)
{
	size_t n = id ? strnlen(id, CSI_VOLUME_ID_MAX + 1) : 0;
	if (n == 0)
		return fail(why, len, "volume id is empty%s", "");
	if (n > CSI_VOLUME_ID_MAX)
		return fail(why, len, "volume id is longer than %s bytes",
			    "128");
	const char *slash = strchr(id, '/');
	if (!slash || (size_t)(slash - id) > CSI_BUCKET_MAX)
		return fail(why, len,
			    "volume id is not BUCKET/PREFIX (a tierfs volume "
			    "id)%s",
			    "");
	memcpy(out->bucket, id, (size_t)(slash - id));
	out->bucket[slash - id] = '\0';
	int rc = csi_bucket_check(out->bucket, why, len);
	if (rc)
		return rc;
	snprintf(out->prefix, sizeof(out->prefix), "%s", slash + 1);
	return csi_prefix_check(out->prefix, why, len);
}

int csi_volume_make(const char *bucket, const char *prefix,
		    struct csi_volume_ref *out, char id[CSI_VOLUME_ID_MAX + 1],
		    char *why, size_t len)
{
	int rc = csi_bucket_check(bucket, why, len);
	if (rc)
		return rc;
	size_t bl = strlen(bucket), pl = strlen(prefix);
	size_t room = CSI_VOLUME_ID_MAX - bl - 1; /* for the prefix */
	snprintf(out->bucket, sizeof(out->bucket), "%s", bucket);
	if (pl <= room) {
		if (pl >= sizeof(out->prefix))
			return fail(why, len, "prefix is too long%s", "");
		memcpy(out->prefix, prefix, pl + 1);
	} else {
		unsigned char md[SHA256_DIGEST_LENGTH];
		SHA256((const unsigned char *)prefix, pl, md);
		size_t keep = room - 1 - HASH_HEX;
		while (keep > 0 && ((unsigned char)prefix[keep] & 0xc0) == 0x80)
			keep--; /* not inside a UTF-8 character */
		while (keep > 0 && prefix[keep - 1] == '/')
			keep--; /* no "/-hash": that would be a bad segment */
		memcpy(out->prefix, prefix, keep);
		out->prefix[keep] = '-';
		for (size_t i = 0; i < HASH_HEX / 2; i++)
			snprintf(out->prefix + keep + 1 + 2 * i, 3, "%02x",
				 md[i]);
	}
	rc = csi_prefix_check(out->prefix, why, len);
	if (rc)
		return rc;
	size_t ol = strlen(out->prefix);
	if (bl + 1 + ol > CSI_VOLUME_ID_MAX) /* cannot happen: room above */
		return fail(why, len, "volume id is too long%s", "");
	memcpy(id, out->bucket, bl);
	id[bl] = '/';
	memcpy(id + bl + 1, out->prefix, ol + 1);
	return 0;
}
