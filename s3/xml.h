/* xml.h: S3's XML responses, parsed with expat into a small element tree.
 *
 * Thread-safe (no shared state). Every parser takes the raw body and its
 * length, and returns 0, -EPROTO for malformed, truncated or unexpected
 * XML, or -ENOMEM; on failure nothing is left allocated in the output.
 * DTDs and entity declarations are refused. Trees nest at most
 * XML_MAX_DEPTH deep.
 */
#ifndef TIERFS_XML_H
#define TIERFS_XML_H

#include <stddef.h>
#include <time.h>

#include "s3.h"

#define XML_MAX_DEPTH 32

struct xml_node {
	char *name; /* owned; the element's name without namespace */
	char *text; /* owned; its text content, "" when none */
	size_t text_len;
	struct xml_node *child; /* owned; first child */
	struct xml_node *next;	/* owned; next sibling */
};

int xml_parse(const char *data, size_t len, struct xml_node **root_out);
void xml_free(struct xml_node *root);
/* First child named name, or NULL. */
const struct xml_node *xml_child(const struct xml_node *n, const char *name);
/* Text of the first child named name, or NULL when absent. */
const char *xml_child_text(const struct xml_node *n, const char *name);
/* "2009-10-12T17:50:30.000Z" -> time; -EINVAL when not of that form. */
int xml_parse_time(const char *s, time_t *out);

/* <Error><Code/><Message/><RequestId/></Error> into err's text fields. */
int xml_parse_error(const char *data, size_t len, struct s3_error *err);
/* ListObjectsV2 (ListBucketResult). Keys are URL-decoded when the response
 * says EncodingType=url. */
int xml_parse_list(const char *data, size_t len, struct s3_list_page *out);
/* ListMultipartUploadsResult. */
int xml_parse_uploads(const char *data, size_t len, struct s3_upload_list *out);
/* InitiateMultipartUploadResult: *upload_id is malloc'ed. */
int xml_parse_initiate(const char *data, size_t len, char **upload_id);
/* CopyObjectResult, CopyPartResult or CompleteMultipartUploadResult: the
 * root must be named root and hold an ETag, copied into etag. */
int xml_parse_etag_result(const char *data, size_t len, const char *root,
			  char etag[S3_ETAG_MAX]);
/* DeleteResult: the number of <Error> entries other than NoSuchKey; the
 * first is described in err (key in message). */
int xml_parse_delete_result(const char *data, size_t len, size_t *nerrors,
			    struct s3_error *err);

#endif
