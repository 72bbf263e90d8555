/* layout.h: the S3 object layout of a volume, s3fs-compatible (DESIGN §4).
 *
 * Maps paths to keys and attributes to x-amz-meta-* headers, and back, so
 * that tierfs, s3fs and plain S3 tools see the same tree. Pure functions,
 * thread-safe; nothing here does I/O. Strings the functions allocate are
 * owned by the caller (free(), or the matching *_free()).
 *
 * A regular file is PREFIX/path with its content as the body; a directory
 * is a zero-length PREFIX/path/ of type application/x-directory; a symlink
 * is an object whose body is the target and whose mode is S_IFLNK|0777.
 * Headers: mode (full st_mode), uid, gid (decimal), mtime and ctime as
 * SEC.NNNNNNNNN, xattr in s3fs's format (URL-encoded {"name":"base64"}).
 * PREFIX/.tierfs/ holds the volume's private data and is never shown.
 */
#ifndef TIERFS_LAYOUT_H
#define TIERFS_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "../s3/s3.h"

#define LAYOUT_PRIVATE_DIR ".tierfs"
#define LAYOUT_DIR_CONTENT_TYPE "application/x-directory"
#define LAYOUT_TIME_MAX 32
#define LAYOUT_MAX_HEADERS 6

/* Attributes for objects that carry no (or unreadable) headers, such as
 * those written by other S3 tools. Permission bits only, no type bits. */
struct layout_defaults {
	uint32_t uid;
	uint32_t gid;
	uint32_t file_mode; /* e.g. 0644 */
	uint32_t dir_mode;  /* e.g. 0755 */
};

/* Which attributes came from headers (the rest are defaults). */
#define LAYOUT_HAVE_MODE 0x01
#define LAYOUT_HAVE_UID 0x02
#define LAYOUT_HAVE_GID 0x04
#define LAYOUT_HAVE_MTIME 0x08
#define LAYOUT_HAVE_CTIME 0x10

struct layout_attrs {
	uint32_t mode; /* full st_mode */
	uint32_t uid;
	uint32_t gid;
	struct timespec mtime;
	struct timespec ctime;
	unsigned have; /* LAYOUT_HAVE_* */
};

struct layout_xattr {
	char *name;  /* owned */
	void *value; /* owned; may hold any bytes */
	size_t size;
};

/* The headers for one object, with their storage. */
struct layout_headers {
	struct s3_meta
		meta[LAYOUT_MAX_HEADERS]; /* point into the fields below */
	size_t nmeta;
	const char *content_type;
	char mode[16], uid[16], gid[16];
	char mtime[LAYOUT_TIME_MAX], ctime[LAYOUT_TIME_MAX];
	char *xattr; /* owned; NULL when there are no xattrs */
};

/* "1700000000.000000042": always nine fractional digits. */
void layout_format_time(struct timespec ts, char out[LAYOUT_TIME_MAX]);
/* Accepts "SEC" and "SEC.F" with 1..9 fractional digits (s3fs writes
 * whole seconds); -EINVAL for anything else. */
int layout_parse_time(const char *s, struct timespec *out);

/* The key of path ("a/b", "" for the root) under prefix ("" or "vol/x",
 * without a trailing '/'), with a trailing '/' for a directory. -EINVAL for
 * a path with empty, "." or ".." components or a leading '/'. */
int layout_key(const char *prefix, const char *path, int is_dir, char **key);
/* The path of a listed key relative to prefix. -ENOENT for keys outside
 * the prefix, the prefix's own marker, and private (.tierfs) keys;
 * -EINVAL for keys no filesystem path can name (empty components, "." or
 * ".."). *is_dir is set for keys ending in '/'; the returned path never
 * ends in '/'. *path is malloc'ed. */
int layout_path_of_key(const char *prefix, const char *key, char **path,
		       int *is_dir);
/* 1 when a volume-relative path is, or is under, the private directory. */
int layout_is_private(const char *path);

/* Attributes from an object's headers; missing or malformed headers give
 * the defaults (is_dir_key: the key ended in '/'), and mtime falls back to
 * Last-Modified. Never fails: a listing must show every object. */
void layout_attrs_from_info(const struct s3_object_info *info, int is_dir_key,
			    const struct layout_defaults *d,
			    struct layout_attrs *out);
/* Headers for attrs and xattrs; -ENOMEM. Release with
 * layout_headers_free(). */
int layout_headers_build(const struct layout_attrs *attrs,
			 const struct layout_xattr *xattrs, size_t nxattrs,
			 struct layout_headers *out);
void layout_headers_free(struct layout_headers *h);

/* S3's limit on an object's user metadata: the bytes of every x-amz-meta-
 * header's name and value, summed (AWS: 2 KiB; hack/s3-local.sh gives
 * the local Swift the same room). */
#define LAYOUT_META_MAX 2048

/* The user metadata h sends, measured as LAYOUT_META_MAX is (each name
 * with its "x-amz-meta-" prefix). */
size_t layout_headers_size(const struct layout_headers *h);
/* 0 when an object holding xattrs x fits LAYOUT_META_MAX whatever its
 * attributes (the widest mode, owner and times); -ENOSPC when it does
 * not, -EINVAL for a name the xattr header cannot carry, -ENOMEM. */
int layout_xattrs_fit(const struct layout_xattr *x, size_t n);

/* s3fs's xattr header value: URL-encoded {"name":"base64(value)",...}. */
int layout_xattr_encode(const struct layout_xattr *x, size_t n, char **out);
/* Parses that value; entries that are not name/base64 pairs make it
 * -EINVAL (nothing is returned half-parsed). */
int layout_xattr_decode(const char *s, struct layout_xattr **out, size_t *n);
void layout_xattrs_free(struct layout_xattr *x, size_t n);

#endif
