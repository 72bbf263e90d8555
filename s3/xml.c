/* xml.c: S3's XML responses, parsed with expat into a small element tree.
 *
 * The tree is built by three expat callbacks with an explicit stack of open
 * elements; text is appended to the innermost open element. Any parse
 * error, a depth past XML_MAX_DEPTH, or a DTD stops the parser, and the
 * half-built tree is freed.
 */
#include "xml.h"

#include <errno.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uri.h"

struct builder {
	XML_Parser parser;
	struct xml_node *root;
	struct xml_node *stack[XML_MAX_DEPTH]; /* open elements */
	struct xml_node *last_child[XML_MAX_DEPTH];
	int depth;
	int err; /* 0, -EPROTO or -ENOMEM */
};

static void fail(struct builder *b, int err)
{
	if (!b->err)
		b->err = err;
	XML_StopParser(b->parser, XML_FALSE);
}

static void on_start(void *ctx, const XML_Char *name, const XML_Char **attrs)
{
	struct builder *b = ctx;
	(void)attrs;
	if (b->err)
		return;
	if (b->depth >= XML_MAX_DEPTH || (b->depth == 0 && b->root)) {
		fail(b, -EPROTO);
		return;
	}
	struct xml_node *n = calloc(1, sizeof(*n));
	const char *colon = strchr(name, ':');
	if (n)
		n->name = strdup(colon ? colon + 1 : name);
	if (n)
		n->text = calloc(1, 1);
	if (!n || !n->name || !n->text) {
		if (n) {
			free(n->name);
			free(n->text);
			free(n);
		}
		fail(b, -ENOMEM);
		return;
	}
	if (b->depth == 0) {
		b->root = n;
	} else {
		struct xml_node *parent = b->stack[b->depth - 1];
		struct xml_node *prev = b->last_child[b->depth - 1];
		if (prev)
			prev->next = n;
		else
			parent->child = n;
		b->last_child[b->depth - 1] = n;
	}
	b->stack[b->depth] = n;
	b->last_child[b->depth] = NULL;
	b->depth++;
}

static void on_end(void *ctx, const XML_Char *name)
{
	struct builder *b = ctx;
	(void)name;
	if (b->err)
		return;
	b->depth--;
}

static void on_text(void *ctx, const XML_Char *s, int len)
{
	struct builder *b = ctx;
	if (b->err || b->depth == 0)
		return;
	struct xml_node *n = b->stack[b->depth - 1];
	char *t = realloc(n->text, n->text_len + (size_t)len + 1);
	if (!t) {
		fail(b, -ENOMEM);
		return;
	}
	memcpy(t + n->text_len, s, (size_t)len);
	n->text_len += (size_t)len;
	t[n->text_len] = '\0';
	n->text = t;
}

static void on_doctype(void *ctx, const XML_Char *name, const XML_Char *sysid,
		       const XML_Char *pubid, int has_internal_subset)
{
	(void)name;
	(void)sysid;
	(void)pubid;
	(void)has_internal_subset;
	fail(ctx, -EPROTO);
}

void xml_free(struct xml_node *n)
{
	while (n) {
		struct xml_node *next = n->next;
		xml_free(n->child);
		free(n->name);
		free(n->text);
		free(n);
		n = next;
	}
}

int xml_parse(const char *data, size_t len, struct xml_node **root_out)
{
	struct builder b = {0};
	*root_out = NULL;
	if (len > (size_t)0x7fffffff)
		return -EPROTO;
	b.parser = XML_ParserCreate("UTF-8");
	if (!b.parser)
		return -ENOMEM;
	XML_SetUserData(b.parser, &b);
	XML_SetElementHandler(b.parser, on_start, on_end);
	XML_SetCharacterDataHandler(b.parser, on_text);
	XML_SetStartDoctypeDeclHandler(b.parser, on_doctype);
	enum XML_Status st = XML_Parse(b.parser, data, (int)len, XML_TRUE);
	if (st != XML_STATUS_OK && !b.err)
		b.err = -EPROTO;
	if (!b.err && (!b.root || b.depth != 0))
		b.err = -EPROTO;
	XML_ParserFree(b.parser);
	if (b.err) {
		xml_free(b.root);
		return b.err;
	}
	*root_out = b.root;
	return 0;
}

const struct xml_node *xml_child(const struct xml_node *n, const char *name)
{
	for (const struct xml_node *c = n ? n->child : NULL; c; c = c->next)
		if (strcmp(c->name, name) == 0)
			return c;
	return NULL;
}

const char *xml_child_text(const struct xml_node *n, const char *name)
{
	const struct xml_node *c = xml_child(n, name);
	return c ? c->text : NULL;
}

/* Reads exactly n decimal digits. */
static int digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return -EINVAL;
		v = v * 10 + (**p - '0');
	}
	*out = v;
	return 0;
}

static int expect(const char **p, char c)
{
	return *(*p)++ == c ? 0 : -EINVAL;
}

int xml_parse_time(const char *s, time_t *out)
{
	static const int mdays[] = {31, 29, 31, 30, 31, 30,
				    31, 31, 30, 31, 30, 31};
	struct tm tm = {0};
	const char *p = s;
	int frac;
	if (!s || digits(&p, 4, &tm.tm_year) || expect(&p, '-') ||
	    digits(&p, 2, &tm.tm_mon) || expect(&p, '-') ||
	    digits(&p, 2, &tm.tm_mday) || expect(&p, 'T') ||
	    digits(&p, 2, &tm.tm_hour) || expect(&p, ':') ||
	    digits(&p, 2, &tm.tm_min) || expect(&p, ':') ||
	    digits(&p, 2, &tm.tm_sec))
		return -EINVAL;
	if (*p == '.') { /* fractional seconds: any number of digits */
		p++;
		if (digits(&p, 1, &frac))
			return -EINVAL;
		while (*p >= '0' && *p <= '9')
			p++;
	}
	if (*p != '\0' && strcmp(p, "Z") != 0) /* UTC only; offsets refused */
		return -EINVAL;
	if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
	    tm.tm_mday > mdays[tm.tm_mon - 1] || tm.tm_hour > 23 ||
	    tm.tm_min > 59 || tm.tm_sec > 60)
		return -EINVAL;
	int leap = (tm.tm_year % 4 == 0 && tm.tm_year % 100 != 0) ||
		   tm.tm_year % 400 == 0;
	if (tm.tm_mon == 2 && tm.tm_mday == 29 && !leap)
		return -EINVAL;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	*out = timegm(&tm);
	return 0;
}

static void copy_field(char *dst, size_t cap, const char *src)
{
	snprintf(dst, cap, "%s", src ? src : "");
}

/* Parses data and checks the root element's name. */
static int parse_root(const char *data, size_t len, const char *root_name,
		      struct xml_node **root)
{
	int rc = xml_parse(data, len, root);
	if (rc)
		return rc;
	if (strcmp((*root)->name, root_name) != 0) {
		xml_free(*root);
		*root = NULL;
		return -EPROTO;
	}
	return 0;
}

int xml_parse_error(const char *data, size_t len, struct s3_error *err)
{
	struct xml_node *root;
	int rc = parse_root(data, len, "Error", &root);
	if (rc)
		return rc;
	const char *code = xml_child_text(root, "Code");
	if (!code || !*code) {
		xml_free(root);
		return -EPROTO;
	}
	copy_field(err->code, sizeof(err->code), code);
	copy_field(err->message, sizeof(err->message),
		   xml_child_text(root, "Message"));
	copy_field(err->request_id, sizeof(err->request_id),
		   xml_child_text(root, "RequestId"));
	xml_free(root);
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	if (!s || *s < '0' || *s > '9') /* no sign, no leading space */
		return -EPROTO;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end)
		return -EPROTO;
	*out = v;
	return 0;
}

/* strdup, URL-decoding when the listing was url-encoded. */
static char *dup_key(const char *s, int url_encoded, int *rc)
{
	char *k = strdup(s ? s : "");
	if (!k) {
		*rc = -ENOMEM;
		return NULL;
	}
	if (url_encoded && uri_decode(k, 1)) {
		free(k);
		*rc = -EPROTO;
		return NULL;
	}
	return k;
}

static size_t count_children(const struct xml_node *n, const char *name)
{
	size_t count = 0;
	for (const struct xml_node *c = n->child; c; c = c->next)
		count += strcmp(c->name, name) == 0;
	return count;
}

static int parse_bool(const char *s)
{
	return s && strcmp(s, "true") == 0;
}

int xml_parse_list(const char *data, size_t len, struct s3_list_page *out)
{
	struct xml_node *root;
	memset(out, 0, sizeof(*out));
	int rc = parse_root(data, len, "ListBucketResult", &root);
	if (rc)
		return rc;
	const char *enc = xml_child_text(root, "EncodingType");
	int url = enc && strcmp(enc, "url") == 0;
	size_t ne = count_children(root, "Contents");
	size_t np = count_children(root, "CommonPrefixes");
	out->entries = calloc(ne ? ne : 1, sizeof(*out->entries));
	out->common_prefixes = calloc(np ? np : 1, sizeof(char *));
	if (!out->entries || !out->common_prefixes)
		rc = -ENOMEM;
	for (const struct xml_node *c = root->child; c && !rc; c = c->next) {
		if (strcmp(c->name, "Contents") == 0) {
			struct s3_list_entry *e = &out->entries[out->nentries];
			const char *key = xml_child_text(c, "Key");
			if (!key) {
				rc = -EPROTO;
				break;
			}
			e->key = dup_key(key, url, &rc);
			if (!e->key)
				break;
			out->nentries++;
			rc = parse_u64(xml_child_text(c, "Size"), &e->size);
			copy_field(e->etag, sizeof(e->etag),
				   xml_child_text(c, "ETag"));
			const char *lm = xml_child_text(c, "LastModified");
			if (!rc && lm && xml_parse_time(lm, &e->last_modified))
				rc = -EPROTO;
		} else if (strcmp(c->name, "CommonPrefixes") == 0) {
			const char *p = xml_child_text(c, "Prefix");
			if (!p) {
				rc = -EPROTO;
				break;
			}
			char *k = dup_key(p, url, &rc);
			if (!k)
				break;
			out->common_prefixes[out->nprefixes++] = k;
		}
	}
	if (!rc) {
		out->truncated =
			parse_bool(xml_child_text(root, "IsTruncated"));
		const char *tok = xml_child_text(root, "NextContinuationToken");
		if (out->truncated) {
			if (!tok || !*tok)
				rc = -EPROTO;
			else if (!(out->next_token = strdup(tok)))
				rc = -ENOMEM;
		}
	}
	xml_free(root);
	if (rc)
		s3_list_page_free(out);
	return rc;
}

int xml_parse_uploads(const char *data, size_t len, struct s3_upload_list *out)
{
	struct xml_node *root;
	memset(out, 0, sizeof(*out));
	int rc = parse_root(data, len, "ListMultipartUploadsResult", &root);
	if (rc)
		return rc;
	const char *enc = xml_child_text(root, "EncodingType");
	int url = enc && strcmp(enc, "url") == 0;
	size_t n = count_children(root, "Upload");
	out->uploads = calloc(n ? n : 1, sizeof(*out->uploads));
	if (!out->uploads)
		rc = -ENOMEM;
	for (const struct xml_node *c = root->child; c && !rc; c = c->next) {
		if (strcmp(c->name, "Upload") != 0)
			continue;
		struct s3_upload *u = &out->uploads[out->nuploads];
		const char *key = xml_child_text(c, "Key");
		const char *id = xml_child_text(c, "UploadId");
		if (!key || !id || !*id) {
			rc = -EPROTO;
			break;
		}
		u->key = dup_key(key, url, &rc);
		u->upload_id = u->key ? strdup(id) : NULL;
		if (u->key && !u->upload_id)
			rc = -ENOMEM;
		if (!u->key || !u->upload_id) {
			free(u->key);
			break;
		}
		out->nuploads++;
		const char *t = xml_child_text(c, "Initiated");
		if (t && xml_parse_time(t, &u->initiated))
			rc = -EPROTO;
	}
	if (!rc) {
		out->truncated =
			parse_bool(xml_child_text(root, "IsTruncated"));
		const char *km = xml_child_text(root, "NextKeyMarker");
		const char *um = xml_child_text(root, "NextUploadIdMarker");
		if (km && !(out->next_key_marker = dup_key(km, url, &rc)))
			rc = rc ? rc : -ENOMEM;
		if (!rc && um && !(out->next_upload_id_marker = strdup(um)))
			rc = -ENOMEM;
	}
	xml_free(root);
	if (rc)
		s3_upload_list_free(out);
	return rc;
}

int xml_parse_initiate(const char *data, size_t len, char **upload_id)
{
	struct xml_node *root;
	*upload_id = NULL;
	int rc = parse_root(data, len, "InitiateMultipartUploadResult", &root);
	if (rc)
		return rc;
	const char *id = xml_child_text(root, "UploadId");
	if (!id || !*id)
		rc = -EPROTO;
	else if (!(*upload_id = strdup(id)))
		rc = -ENOMEM;
	xml_free(root);
	return rc;
}

int xml_parse_etag_result(const char *data, size_t len, const char *root_name,
			  char etag[S3_ETAG_MAX])
{
	struct xml_node *root;
	int rc = parse_root(data, len, root_name, &root);
	if (rc)
		return rc;
	const char *e = xml_child_text(root, "ETag");
	if (!e || !*e || strlen(e) >= S3_ETAG_MAX)
		rc = -EPROTO;
	else
		copy_field(etag, S3_ETAG_MAX, e);
	xml_free(root);
	return rc;
}

int xml_parse_delete_result(const char *data, size_t len, size_t *nerrors,
			    struct s3_error *err)
{
	struct xml_node *root;
	*nerrors = 0;
	int rc = parse_root(data, len, "DeleteResult", &root);
	if (rc)
		return rc;
	for (const struct xml_node *c = root->child; c; c = c->next) {
		if (strcmp(c->name, "Error") != 0)
			continue;
		const char *code = xml_child_text(c, "Code");
		if (code && strcmp(code, "NoSuchKey") == 0)
			continue;
		if (*nerrors == 0 && err) {
			copy_field(err->code, sizeof(err->code), code);
			snprintf(err->message, sizeof(err->message),
				 "key '%s': %s", xml_child_text(c, "Key") ?: "",
				 xml_child_text(c, "Message") ?: "");
		}
		(*nerrors)++;
	}
	xml_free(root);
	return 0;
}
