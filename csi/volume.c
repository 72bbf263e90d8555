/* volume.c: tierfs volume ids (see volume.h). */
#include "volume.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

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
		if (c == '#') /* it starts an id's generation */
			return fail(why, len, "prefix may not hold '#'%s", "");
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

int csi_volume_gen_ok(const char *g)
{
	if (strlen(g) != CSI_GEN_HEX)
		return 0;
	for (; *g; g++)
		if (!((*g >= '0' && *g <= '9') || (*g >= 'a' && *g <= 'f')))
			return 0;
	return 1;
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
			    "volume id is not BUCKET/PREFIX#GEN (a tierfs "
			    "volume id)%s",
			    "");
	memcpy(out->bucket, id, (size_t)(slash - id));
	out->bucket[slash - id] = '\0';
	int rc = csi_bucket_check(out->bucket, why, len);
	if (rc)
		return rc;
	const char *hash = strchr(slash + 1, '#');
	size_t pl = hash ? (size_t)(hash - slash - 1) : strlen(slash + 1);
	memcpy(out->prefix, slash + 1, pl); /* pl < n <= the id's max */
	out->prefix[pl] = '\0';
	out->gen[0] = '\0';
	if (hash) {
		if (!csi_volume_gen_ok(hash + 1))
			return fail(why, len,
				    "volume id's generation (after '#') must "
				    "be %s lower-case hex digits",
				    "8");
		memcpy(out->gen, hash + 1, CSI_GEN_HEX + 1);
	}
	return csi_prefix_check(out->prefix, why, len);
}

int csi_volume_never_made(const char *id)
{
	for (const char *s = id; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f || *s == '\\')
			return 0;
	return !strchr(id, '/') && strlen(id) <= CSI_VOLUME_ID_MAX &&
	       !strstr(id, "..");
}

int csi_volume_make(const char *bucket, const char *prefix,
		    struct csi_volume_ref *out, char *why, size_t len)
{
	int rc = csi_bucket_check(bucket, why, len);
	if (rc)
		return rc;
	size_t bl = strlen(bucket), pl = strlen(prefix);
	/* for the prefix: the id less "BUCKET/" and "#GEN" */
	size_t room = CSI_VOLUME_ID_MAX - bl - 1 - 1 - CSI_GEN_HEX;
	snprintf(out->bucket, sizeof(out->bucket), "%s", bucket);
	out->gen[0] = '\0';
	if (pl <= room) {
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
	return csi_prefix_check(out->prefix, why, len);
}

int csi_volume_id(const struct csi_volume_ref *v,
		  char id[CSI_VOLUME_ID_MAX + 1])
{
	size_t bl = strlen(v->bucket), pl = strlen(v->prefix),
	       gl = strlen(v->gen);
	id[0] = '\0';
	if (bl + 1 + pl + (gl ? 1 + gl : 0) > CSI_VOLUME_ID_MAX)
		return -ENAMETOOLONG;
	memcpy(id, v->bucket, bl);
	id[bl] = '/';
	memcpy(id + bl + 1, v->prefix, pl);
	char *o = id + bl + 1 + pl;
	if (gl) {
		*o++ = '#';
		memcpy(o, v->gen, gl);
		o += gl;
	}
	*o = '\0';
	return 0;
}

int csi_volume_gen(char gen[CSI_GEN_HEX + 1])
{
	unsigned char r[CSI_GEN_HEX / 2];
	if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
		return -EIO;
	for (size_t i = 0; i < sizeof(r); i++)
		snprintf(gen + 2 * i, 3, "%02x", r[i]);
	return 0;
}

int csi_volume_gen_matches(const struct csi_volume_ref *v,
			   const char *marker_gen)
{
	return !v->gen[0] || strcmp(v->gen, marker_gen ? marker_gen : "") == 0;
}
