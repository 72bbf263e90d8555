/* layout.c: the S3 object layout of a volume, s3fs-compatible (DESIGN §4).
 *
 * Parsing is strict where tierfs writes (times, xattrs) and forgiving where
 * other tools write: a header that does not parse is treated as absent, so
 * one odd object never hides a directory listing.
 */
#include "layout.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <openssl/evp.h>

#include "../s3/buf.h"
#include "../s3/uri.h"

void layout_format_time(struct timespec ts, char out[LAYOUT_TIME_MAX])
{
	/* normalise so that tv_nsec is in [0, 1e9) */
	long long sec = (long long)ts.tv_sec + ts.tv_nsec / 1000000000L;
	long nsec = ts.tv_nsec % 1000000000L;
	if (nsec < 0) {
		nsec += 1000000000L;
		sec--;
	}
	if (sec < 0 && nsec > 0) /* {-2, 0.5 s} is -1.5 s */
		snprintf(out, LAYOUT_TIME_MAX, "-%lld.%09ld", -(sec + 1),
			 1000000000L - nsec);
	else
		snprintf(out, LAYOUT_TIME_MAX, "%lld.%09ld", sec, nsec);
}

int layout_parse_time(const char *s, struct timespec *out)
{
	const char *p = s;
	int neg = 0;
	long long sec = 0;
	long nsec = 0;
	if (!s)
		return -EINVAL;
	if (*p == '-') {
		neg = 1;
		p++;
	}
	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (int n = 0; *p >= '0' && *p <= '9'; p++, n++) {
		if (n >= 18)
			return -EINVAL; /* past any plausible time */
		sec = sec * 10 + (*p - '0');
	}
	if (*p == '.') {
		int digits = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, digits++) {
			if (digits >= 9)
				return -EINVAL;
			nsec = nsec * 10 + (*p - '0');
		}
		if (digits == 0)
			return -EINVAL;
		for (; digits < 9; digits++)
			nsec *= 10;
	}
	if (*p != '\0')
		return -EINVAL;
	if (neg) { /* -1.5 is 1.5 s before the epoch */
		sec = -sec;
		if (nsec) {
			sec--;
			nsec = 1000000000L - nsec;
		}
	}
	out->tv_sec = (time_t)sec;
	out->tv_nsec = nsec;
	return 0;
}

/* 0 when every '/'-separated component of path is a usable file name. */
static int check_components(const char *path)
{
	const char *p = path;
	while (*p) {
		size_t n = strcspn(p, "/");
		if (n == 0 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.') || n > 255)
			return -EINVAL;
		p += n;
		if (*p == '/')
			p++;
		if (*p == '\0' && p[-1] == '/')
			return -EINVAL; /* trailing '/' */
	}
	return 0;
}

int layout_key(const char *prefix, const char *path, int is_dir, char **key)
{
	struct buf b = BUF_INIT;
	*key = NULL;
	if (path[0] == '/' || check_components(path))
		return -EINVAL;
	int rc = buf_puts(&b, prefix);
	if (!rc && *prefix && *path)
		rc = buf_putc(&b, '/');
	if (!rc)
		rc = buf_puts(&b, path);
	if (!rc && is_dir && (*prefix || *path))
		rc = buf_putc(&b, '/');
	if (rc || b.len == 0) {
		buf_free(&b);
		return rc ? rc : -EINVAL; /* the root of an empty prefix */
	}
	*key = buf_steal(&b);
	return 0;
}

int layout_is_private(const char *path)
{
	size_t n = strlen(LAYOUT_PRIVATE_DIR);
	return strncmp(path, LAYOUT_PRIVATE_DIR, n) == 0 &&
	       (path[n] == '\0' || path[n] == '/');
}

int layout_path_of_key(const char *prefix, const char *key, char **path,
		       int *is_dir)
{
	size_t pl = strlen(prefix);
	*path = NULL;
	if (pl) {
		if (strncmp(key, prefix, pl) != 0 || key[pl] != '/')
			return -ENOENT;
		key += pl + 1;
	}
	size_t kl = strlen(key);
	*is_dir = kl > 0 && key[kl - 1] == '/';
	if (*is_dir)
		kl--;
	if (kl == 0)
		return -ENOENT; /* the volume's own marker */
	char *p = strndup(key, kl);
	if (!p)
		return -ENOMEM;
	if (layout_is_private(p)) {
		free(p);
		return -ENOENT;
	}
	if (check_components(p)) {
		free(p);
		return -EINVAL;
	}
	*path = p;
	return 0;
}

/* A decimal uint32 header, or -EINVAL. */
static int parse_u32(const char *s, uint32_t *out)
{
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v > UINT32_MAX)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

void layout_attrs_from_info(const struct s3_object_info *info, int is_dir_key,
			    const struct layout_defaults *d,
			    struct layout_attrs *out)
{
	memset(out, 0, sizeof(*out));
	int is_dir = is_dir_key ||
		     (info->content_type &&
		      strncasecmp(info->content_type, LAYOUT_DIR_CONTENT_TYPE,
				  strlen(LAYOUT_DIR_CONTENT_TYPE)) == 0);
	uint32_t v;
	if (parse_u32(s3_object_info_meta(info, "mode"), &v) == 0 &&
	    (v & ~(uint32_t)(S_IFMT | 07777)) == 0) {
		/* s3fs once wrote permission bits alone: add the type */
		if ((v & S_IFMT) == 0)
			v |= is_dir ? S_IFDIR : S_IFREG;
		out->mode = v;
		out->have |= LAYOUT_HAVE_MODE;
	} else {
		out->mode = is_dir ? (S_IFDIR | (d->dir_mode & 07777))
				   : (S_IFREG | (d->file_mode & 07777));
	}
	/* a key ending in '/' is a directory whatever its header says */
	if (is_dir_key && !S_ISDIR(out->mode))
		out->mode = S_IFDIR | (out->mode & 07777);
	if (parse_u32(s3_object_info_meta(info, "uid"), &v) == 0) {
		out->uid = v;
		out->have |= LAYOUT_HAVE_UID;
	} else {
		out->uid = d->uid;
	}
	if (parse_u32(s3_object_info_meta(info, "gid"), &v) == 0) {
		out->gid = v;
		out->have |= LAYOUT_HAVE_GID;
	} else {
		out->gid = d->gid;
	}
	if (layout_parse_time(s3_object_info_meta(info, "mtime"),
			      &out->mtime) == 0) {
		out->have |= LAYOUT_HAVE_MTIME;
	} else {
		out->mtime.tv_sec = info->last_modified;
		out->mtime.tv_nsec = 0;
	}
	if (layout_parse_time(s3_object_info_meta(info, "ctime"),
			      &out->ctime) == 0)
		out->have |= LAYOUT_HAVE_CTIME;
	else
		out->ctime = out->mtime;
}

int layout_headers_build(const struct layout_attrs *attrs,
			 const struct layout_xattr *xattrs, size_t nxattrs,
			 struct layout_headers *out)
{
	memset(out, 0, sizeof(*out));
	snprintf(out->mode, sizeof(out->mode), "%u", attrs->mode);
	snprintf(out->uid, sizeof(out->uid), "%u", attrs->uid);
	snprintf(out->gid, sizeof(out->gid), "%u", attrs->gid);
	layout_format_time(attrs->mtime, out->mtime);
	layout_format_time(attrs->ctime, out->ctime);
	const struct s3_meta m[] = {
		{"mode", out->mode},   {"uid", out->uid},     {"gid", out->gid},
		{"mtime", out->mtime}, {"ctime", out->ctime},
	};
	memcpy(out->meta, m, sizeof(m));
	out->nmeta = 5;
	if (nxattrs) {
		int rc = layout_xattr_encode(xattrs, nxattrs, &out->xattr);
		if (rc)
			return rc;
		out->meta[out->nmeta].name = "xattr";
		out->meta[out->nmeta].value = out->xattr;
		out->nmeta++;
	}
	out->content_type =
		S_ISDIR(attrs->mode) ? LAYOUT_DIR_CONTENT_TYPE : NULL;
	return 0;
}

void layout_headers_free(struct layout_headers *h)
{
	free(h->xattr);
	h->xattr = NULL;
}

size_t layout_headers_size(const struct layout_headers *h)
{
	size_t n = 0;
	for (size_t i = 0; i < h->nmeta; i++)
		n += strlen("x-amz-meta-") + strlen(h->meta[i].name) +
		     strlen(h->meta[i].value);
	return n;
}

int layout_xattrs_fit(const struct layout_xattr *x, size_t n)
{
	const struct timespec latest = {9999999999, 999999999};
	const struct layout_attrs widest = {UINT32_MAX, UINT32_MAX, UINT32_MAX,
					    latest,	latest,	    0};
	struct layout_headers h;
	int rc = layout_headers_build(&widest, x, n, &h);
	if (rc)
		return rc;
	if (layout_headers_size(&h) > LAYOUT_META_MAX)
		rc = -ENOSPC;
	layout_headers_free(&h);
	return rc;
}

int layout_xattr_encode(const struct layout_xattr *x, size_t n, char **out)
{
	struct buf json = BUF_INIT, enc = BUF_INIT;
	int rc = buf_putc(&json, '{');
	*out = NULL;
	for (size_t i = 0; i < n && rc == 0; i++) {
		/* a name with '"' or ',' could not be parsed back by s3fs */
		if (!x[i].name[0] || strpbrk(x[i].name, "\",:{}") ||
		    x[i].size > (1u << 20)) {
			rc = -EINVAL;
			break;
		}
		char *b64 = malloc(4 * ((x[i].size + 2) / 3) + 1);
		if (!b64) {
			rc = -ENOMEM;
			break;
		}
		EVP_EncodeBlock((unsigned char *)b64, x[i].value,
				(int)x[i].size);
		rc = buf_printf(&json, "%s\"%s\":\"%s\"", i ? "," : "",
				x[i].name, b64);
		free(b64);
	}
	if (!rc)
		rc = buf_putc(&json, '}');
	if (!rc)
		rc = uri_encode(&enc, json.data, json.len, 0);
	buf_free(&json);
	if (rc) {
		buf_free(&enc);
		return rc;
	}
	*out = buf_steal(&enc);
	return 0;
}

void layout_xattrs_free(struct layout_xattr *x, size_t n)
{
	for (size_t i = 0; x && i < n; i++) {
		free(x[i].name);
		free(x[i].value);
	}
	free(x);
}

/* Reads a "..." token at *p (no escapes: s3fs writes none). */
static char *quoted(const char **p)
{
	if (**p != '"')
		return NULL;
	const char *end = strchr(*p + 1, '"');
	if (!end)
		return NULL;
	char *s = strndup(*p + 1, (size_t)(end - *p - 1));
	*p = end + 1;
	return s;
}

static void skip_space(const char **p)
{
	while (**p == ' ' || **p == '\t' || **p == '\n' || **p == '\r')
		(*p)++;
}

/* Base64 into a new buffer; -EINVAL unless it is valid base64. */
static int base64_decode(const char *s, void **out, size_t *size)
{
	size_t len = strlen(s);
	if (len % 4)
		return -EINVAL;
	unsigned char *v = malloc(len / 4 * 3 + 1);
	if (!v)
		return -ENOMEM;
	int n = len ? EVP_DecodeBlock(v, (const unsigned char *)s, (int)len)
		    : 0;
	if (n < 0) {
		free(v);
		return -EINVAL;
	}
	/* EVP_DecodeBlock counts the padding's zero bytes too */
	if (len && s[len - 1] == '=')
		n--;
	if (len > 1 && s[len - 2] == '=')
		n--;
	*out = v;
	*size = (size_t)n;
	return 0;
}

int layout_xattr_decode(const char *s, struct layout_xattr **out, size_t *n)
{
	struct layout_xattr *x = NULL;
	size_t count = 0, cap = 0;
	char *text = strdup(s);
	int rc = text ? uri_decode(text, 0) : -ENOMEM;
	const char *p = text;
	*out = NULL;
	*n = 0;
	if (rc)
		goto out;
	skip_space(&p);
	if (*p++ != '{') {
		rc = -EINVAL;
		goto out;
	}
	skip_space(&p);
	while (*p != '}') {
		if (count == cap) {
			cap = cap ? cap * 2 : 4;
			struct layout_xattr *nx = realloc(x, cap * sizeof(*x));
			if (!nx) {
				rc = -ENOMEM;
				goto out;
			}
			x = nx;
		}
		if (count) {
			if (*p++ != ',') {
				rc = -EINVAL;
				goto out;
			}
			skip_space(&p);
		}
		char *name = quoted(&p);
		skip_space(&p);
		char *val = name && *p++ == ':' ? (skip_space(&p), quoted(&p))
						: NULL;
		if (!name || !val || !*name) {
			free(name);
			free(val);
			rc = -EINVAL;
			goto out;
		}
		x[count].name = name;
		rc = base64_decode(val, &x[count].value, &x[count].size);
		free(val);
		if (rc) {
			free(name);
			goto out;
		}
		count++;
		skip_space(&p);
	}
	p++;
	skip_space(&p);
	if (*p)
		rc = -EINVAL;
out:
	free(text);
	if (rc) {
		layout_xattrs_free(x, count);
		return rc;
	}
	*out = x;
	*n = count;
	return 0;
}
