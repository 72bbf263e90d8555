/* test_xml.c: S3 XML responses: the expat tree, every parser, hostile input. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "../../s3/buf.h"
#include "../../s3/s3.h"
#include "../../s3/xml.h"

#define XML_DECL "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
#define S3_NS "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\""
#define OWNER                                                                  \
	"<Owner><ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6cae"  \
	"a54ba06a</ID><DisplayName>webfile</DisplayName></Owner>"

/* A ListObjectsV2 page with encoding-type=url, as AWS sends it. */
static const char list_v2[] = XML_DECL
	"<ListBucketResult " S3_NS ">"
	"<Name>example-bucket</Name>"
	"<Prefix>photos%2F</Prefix>"
	"<KeyCount>3</KeyCount>"
	"<MaxKeys>3</MaxKeys>"
	"<Delimiter>%2F</Delimiter>"
	"<EncodingType>url</EncodingType>"
	"<IsTruncated>true</IsTruncated>"
	"<NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM="
	"</NextContinuationToken>"
	"<Contents>"
	"<Key>photos/a%20b%2Bc</Key>"
	"<LastModified>2009-10-12T17:50:30.000Z</LastModified>"
	"<ETag>&quot;fba9dede5f27731c9771645a39863328&quot;</ETag>"
	"<Size>434234</Size>"
	"<StorageClass>STANDARD</StorageClass>" OWNER "</Contents>"
	"<Contents>"
	"<Key>photos/caf%C3%A9+menu.txt</Key>"
	"<LastModified>2010-11-10T20:48:33.000Z</LastModified>"
	"<ETag>&quot;3858f62230ac3c915f300c664312c11f-9&quot;</ETag>"
	"<Size>18446744073709551615</Size>"
	"<StorageClass>STANDARD</StorageClass>"
	"</Contents>"
	"<Contents>"
	"<Key>photos/empty</Key>"
	"<LastModified>2023-01-31T08:15:00.000Z</LastModified>"
	"<ETag>&quot;d41d8cd98f00b204e9800998ecf8427e&quot;</ETag>"
	"<Size>0</Size>"
	"</Contents>"
	"<CommonPrefixes><Prefix>photos/2006/</Prefix></CommonPrefixes>"
	"<CommonPrefixes><Prefix>photos/with%20space/</Prefix></CommonPrefixes>"
	"</ListBucketResult>\n";

static const char uploads_xml[] = XML_DECL
	"<ListMultipartUploadsResult " S3_NS ">"
	"<Bucket>bucket</Bucket>"
	"<KeyMarker></KeyMarker>"
	"<UploadIdMarker></UploadIdMarker>"
	"<NextKeyMarker>my-movie.m2ts</NextKeyMarker>"
	"<NextUploadIdMarker>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ"
	"</NextUploadIdMarker>"
	"<MaxUploads>2</MaxUploads>"
	"<IsTruncated>true</IsTruncated>"
	"<Upload>"
	"<Key>my-divisor</Key>"
	"<UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw</UploadId>"
	"<Initiator><ID>arn:aws:iam::111122223333:user/user1-11111a31-17b5-4fb7"
	"-9df5-b111111f13de</ID>"
	"<DisplayName>user1</DisplayName></Initiator>" OWNER
	"<StorageClass>STANDARD</StorageClass>"
	"<Initiated>2010-11-10T20:48:33.000Z</Initiated>"
	"</Upload>"
	"<Upload>"
	"<Key>my-movie.m2ts</Key>"
	"<UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
	"</UploadId>"
	"<StorageClass>STANDARD</StorageClass>"
	"<Initiated>2010-11-10T20:48:34.000Z</Initiated>"
	"</Upload>"
	"</ListMultipartUploadsResult>\n";

static const char initiate_xml[] = XML_DECL
	"<InitiateMultipartUploadResult " S3_NS ">"
	"<Bucket>example-bucket</Bucket>"
	"<Key>example-object</Key>"
	"<UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA"
	"</UploadId>"
	"</InitiateMultipartUploadResult>";

static const char error_xml[] =
	XML_DECL "<Error>"
		 "<Code>NoSuchKey</Code>"
		 "<Message>The resource you requested does not exist</Message>"
		 "<Resource>/mybucket/myfoto.jpg</Resource>"
		 "<RequestId>4442587FB7D0A2F9</RequestId>"
		 "<HostId>eftixk72aD6Ap51TnqcoF8eFidJG9Z/"
		 "2mkiDFu8yU9AS1ed4OpIszj7UDNEHGran</HostId>"
		 "</Error>";

static const char delete_xml[] =
	XML_DECL "<DeleteResult " S3_NS ">"
		 "<Deleted><Key>sample1.txt</Key></Deleted>"
		 "<Error><Key>gone.txt</Key><Code>NoSuchKey</Code>"
		 "<Message>The specified key does not exist.</Message></Error>"
		 "<Error><Key>locked.txt</Key><Code>AccessDenied</Code>"
		 "<Message>Access Denied</Message></Error>"
		 "<Deleted><Key>sample2.txt</Key></Deleted>"
		 "<Error><Key>other.txt</Key><Code>InternalError</Code>"
		 "<Message>We encountered an internal error. Please try again."
		 "</Message></Error>"
		 "</DeleteResult>";

#define LEN(s) (sizeof(s) - 1)

/* A heap copy of exactly len bytes, no NUL after them, so that ASan catches
 * any read past the end. */
static char *exact_copy(const char *s, size_t len)
{
	char *p = malloc(len ? len : 1);
	assert_non_null(p);
	memcpy(p, s, len);
	return p;
}

static int parse_list_str(const char *s, struct s3_list_page *page)
{
	return xml_parse_list(s, strlen(s), page);
}

static int is_space_only(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t')
			return 0;
	return 1;
}

static void assert_page_empty(const struct s3_list_page *p)
{
	assert_null(p->entries);
	assert_null(p->common_prefixes);
	assert_null(p->next_token);
	assert_int_equal(p->nentries, 0);
	assert_int_equal(p->nprefixes, 0);
	assert_int_equal(p->truncated, 0);
}

static void assert_pages_equal(const struct s3_list_page *a,
			       const struct s3_list_page *b)
{
	assert_int_equal(a->nentries, b->nentries);
	assert_int_equal(a->nprefixes, b->nprefixes);
	assert_int_equal(a->truncated, b->truncated);
	for (size_t i = 0; i < a->nentries; i++) {
		assert_string_equal(a->entries[i].key, b->entries[i].key);
		assert_int_equal(a->entries[i].size, b->entries[i].size);
		assert_string_equal(a->entries[i].etag, b->entries[i].etag);
		assert_int_equal(a->entries[i].last_modified,
				 b->entries[i].last_modified);
	}
	for (size_t i = 0; i < a->nprefixes; i++)
		assert_string_equal(a->common_prefixes[i],
				    b->common_prefixes[i]);
	if (a->next_token || b->next_token)
		assert_string_equal(a->next_token, b->next_token);
}

/* --- xml_parse: the tree ------------------------------------------------- */

static void test_parse_builds_tree_with_text_and_siblings(void **state)
{
	(void)state;
	static const char doc[] =
		"<r a=\"1\"><x>one</x><y/><x>two</x><z>a&amp;b&lt;&gt;&apos;"
		"&quot;&#233;<![CDATA[<raw>&amp;]]></z></r>";
	struct xml_node *root;

	assert_int_equal(xml_parse(doc, LEN(doc), &root), 0);
	assert_non_null(root);
	assert_string_equal(root->name, "r");
	assert_null(root->next);
	const struct xml_node *x = xml_child(root, "x");
	assert_non_null(x);
	assert_string_equal(x->text, "one");
	assert_int_equal(x->text_len, 3);
	assert_string_equal(x->next->name, "y");
	assert_string_equal(x->next->text, "");
	assert_int_equal(x->next->text_len, 0);
	assert_string_equal(x->next->next->text, "two");
	assert_string_equal(xml_child_text(root, "x"), "one");
	assert_string_equal(xml_child_text(root, "y"), "");
	assert_string_equal(xml_child_text(root, "z"),
			    "a&b<>'\"\xc3\xa9<raw>&amp;");
	assert_null(xml_child(root, "missing"));
	assert_null(xml_child_text(root, "missing"));
	assert_null(xml_child(NULL, "x"));
	assert_null(xml_child_text(NULL, "x"));
	xml_free(root);
	xml_free(NULL);
}

static void test_parse_strips_namespace_prefixes(void **state)
{
	(void)state;
	static const char doc[] =
		"<s3:Error "
		"xmlns:s3=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<s3:Code>SlowDown</s3:Code></s3:Error>";
	struct xml_node *root;

	assert_int_equal(xml_parse(doc, LEN(doc), &root), 0);
	assert_string_equal(root->name, "Error");
	assert_string_equal(xml_child_text(root, "Code"), "SlowDown");
	xml_free(root);
}

static void test_parse_of_empty_input_is_eproto(void **state)
{
	(void)state;
	struct xml_node *root = (struct xml_node *)&root;

	assert_int_equal(xml_parse("", 0, &root), -EPROTO);
	assert_null(root);
	root = (struct xml_node *)&root;
	assert_int_equal(xml_parse(NULL, 0, &root), -EPROTO);
	assert_null(root);
	assert_int_equal(xml_parse("   \n", 4, &root), -EPROTO);
	assert_int_equal(xml_parse(XML_DECL, LEN(XML_DECL), &root), -EPROTO);
	assert_null(root);
}

static void test_parse_of_garbage_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"not xml at all",
		"<html><body>502 Bad Gateway</body>",
		"<a><b></a></b>",
		"<a>unclosed",
		"</a>",
		"<a/>trailing junk",
		"<a>&undefined;</a>",
		"<a>&#0;</a>",
		"<a b=\"1\" b=\"2\"/>",
		"<1a/>",
		"<a>\xff\xfe</a>",
		"<a>\xc3</a>",
		"\xef\xbb\xbf\xef\xbb\xbf<a/>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct xml_node *root = (struct xml_node *)&root;
		size_t len = strlen(bad[i]);
		char *copy = exact_copy(bad[i], len);
		int rc = xml_parse(copy, len, &root);
		if (rc != -EPROTO)
			fail_msg("'%s': rc %d, want -EPROTO", bad[i], rc);
		assert_null(root);
		free(copy);
	}
}

static void test_parse_of_random_bytes_never_crashes(void **state)
{
	(void)state;
	uint64_t x = 0x853c49e6748fea9bull;
	char data[256];

	for (int round = 0; round < 3000; round++) {
		size_t len = (size_t)(x % sizeof(data));
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			/* Mostly markup characters, to get past the first
			 * byte now and then. */
			static const char alpha[] = "<>/a=\"&;! ?x";
			data[i] = (x & 0x100) ? alpha[x % (sizeof(alpha) - 1)]
					      : (char)x;
		}
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		char *copy = exact_copy(data, len);
		struct xml_node *root;
		int rc = xml_parse(copy, len, &root);
		assert_true(rc == 0 || rc == -EPROTO);
		if (rc == 0) {
			assert_non_null(root);
			xml_free(root);
		} else {
			assert_null(root);
		}
		free(copy);
	}
}

static void test_parse_of_two_root_elements_is_eproto(void **state)
{
	(void)state;
	static const char doc[] = "<a>1</a><b>2</b>";
	static const char doc2[] = "<Error><Code>X</Code></Error>\n"
				   "<Error><Code>Y</Code></Error>";
	struct xml_node *root;

	assert_int_equal(xml_parse(doc, LEN(doc), &root), -EPROTO);
	assert_null(root);
	assert_int_equal(xml_parse(doc2, LEN(doc2), &root), -EPROTO);
	assert_null(root);
}

static void test_parse_refuses_doctype_and_entity_declarations(void **state)
{
	(void)state;
	static const char *const bad[] = {
		/* billion laughs */
		"<?xml version=\"1.0\"?>\n"
		"<!DOCTYPE lolz [\n"
		" <!ENTITY lol \"lol\">\n"
		" <!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">\n"
		" <!ENTITY lol2"
		" \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;\">\n"
		" <!ENTITY lol3"
		" \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">\n"
		" <!ENTITY lol4"
		" \"&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;\">\n"
		" <!ENTITY lol5"
		" \"&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;\">\n"
		" <!ENTITY lol6"
		" \"&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;\">\n"
		" <!ENTITY lol7"
		" \"&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;\">\n"
		" <!ENTITY lol8"
		" \"&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;\">\n"
		" <!ENTITY lol9"
		" \"&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;\">\n"
		"]>\n"
		"<Error><Code>&lol9;</Code></Error>",
		/* external entity */
		"<!DOCTYPE Error [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>"
		"<Error><Code>&xxe;</Code></Error>",
		/* a harmless-looking internal entity */
		"<!DOCTYPE Error [<!ENTITY c \"NoSuchKey\">]>"
		"<Error><Code>&c;</Code></Error>",
		/* a DOCTYPE with no internal subset */
		"<!DOCTYPE Error><Error><Code>NoSuchKey</Code></Error>",
		"<!DOCTYPE Error SYSTEM \"http://example.com/e.dtd\">"
		"<Error><Code>NoSuchKey</Code></Error>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct xml_node *root = (struct xml_node *)&root;
		struct s3_error err = {0};
		if (xml_parse(bad[i], strlen(bad[i]), &root) != -EPROTO)
			fail_msg("document %zu was not refused", i);
		assert_null(root);
		assert_int_equal(xml_parse_error(bad[i], strlen(bad[i]), &err),
				 -EPROTO);
		assert_string_equal(err.code, "");
	}
}

/* n nested <e> elements, the innermost holding "x". */
static char *nested(int n)
{
	struct buf b = BUF_INIT;
	for (int i = 0; i < n; i++)
		assert_int_equal(buf_puts(&b, "<e>"), 0);
	assert_int_equal(buf_putc(&b, 'x'), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(buf_puts(&b, "</e>"), 0);
	return buf_steal(&b);
}

static void test_parse_accepts_nesting_up_to_max_depth(void **state)
{
	(void)state;
	char *doc = nested(XML_MAX_DEPTH);
	struct xml_node *root;

	assert_int_equal(xml_parse(doc, strlen(doc), &root), 0);
	const struct xml_node *n = root;
	int depth = 1;
	while (n->child) {
		n = n->child;
		depth++;
	}
	assert_int_equal(depth, XML_MAX_DEPTH);
	assert_string_equal(n->text, "x");
	xml_free(root);
	free(doc);
}

static void test_parse_refuses_nesting_deeper_than_max_depth(void **state)
{
	(void)state;
	static const int depths[] = {XML_MAX_DEPTH + 1, XML_MAX_DEPTH + 2, 1000,
				     100000};
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		char *doc = nested(depths[i]);
		struct xml_node *root = (struct xml_node *)&root;
		assert_int_equal(xml_parse(doc, strlen(doc), &root), -EPROTO);
		assert_null(root);
		free(doc);
	}
	/* Unclosed deep nesting (a truncated hostile body) too. */
	char *doc = nested(XML_MAX_DEPTH + 1);
	struct xml_node *root;
	assert_int_equal(xml_parse(doc, strlen(doc) / 2, &root), -EPROTO);
	assert_null(root);
	free(doc);
}

/* --- xml_parse_time ------------------------------------------------------ */

static void test_time_parses_s3_timestamps_exactly(void **state)
{
	(void)state;
	static const struct {
		const char *s;
		long long t;
	} cases[] = {
		{"2009-10-12T17:50:30.000Z", 1255369830},
		{"2009-10-12T17:50:30Z", 1255369830},
		{"2009-10-12T17:50:30.123456Z", 1255369830},
		{"2009-10-28T22:32:00", 1256769120}, /* CopyObjectResult */
		{"1970-01-01T00:00:00.000Z", 0},
		{"2000-02-29T23:59:59.000Z", 951868799},
		{"2038-01-19T03:14:08.000Z", 2147483648LL},
		{"2016-12-31T23:59:60.000Z", 1483228800}, /* leap second */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		time_t t = 12345;
		int rc = xml_parse_time(cases[i].s, &t);
		if (rc != 0)
			fail_msg("'%s' rejected: %d", cases[i].s, rc);
		if ((long long)t != cases[i].t)
			fail_msg("'%s': %lld, want %lld", cases[i].s,
				 (long long)t, cases[i].t);
	}
}

static void test_time_rejects_malformed_and_out_of_range(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"",
		"garbage",
		"2009-10-12",
		"2009-10-12T17:50",
		"2009-10-12 17:50:30.000Z",
		"2009/10/12T17:50:30.000Z",
		"2009-00-12T17:50:30.000Z",
		"2009-13-12T17:50:30.000Z",
		"2009-10-00T17:50:30.000Z",
		"2009-10-32T17:50:30.000Z",
		"2009-10-12T24:00:00.000Z",
		"2009-10-12T17:60:30.000Z",
		"2009-10-12T17:50:61.000Z",
		"Mon, 12 Oct 2009 17:50:30 GMT",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		time_t t = 12345;
		if (xml_parse_time(bad[i], &t) != -EINVAL)
			fail_msg("'%s' was accepted", bad[i]);
		assert_int_equal(t, 12345);
	}
	time_t t = 12345;
	assert_int_equal(xml_parse_time(NULL, &t), -EINVAL);
	assert_int_equal(t, 12345);
}

/* The fields are range-checked only from above: sscanf's %2d reads "-1",
 * so a negative hour, minute or second slips through and timegm()
 * normalizes it into a different, valid-looking time. */
static void test_time_rejects_negative_fields(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"2009-10-12T-1:50:30.000Z",
		"2009-10-12T17:-5:30.000Z",
		"2009-10-12T17:50:-1.000Z",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		time_t t = 12345;
		int rc = xml_parse_time(bad[i], &t);
		if (rc != -EINVAL)
			fail_msg("'%s' was accepted as %lld", bad[i],
				 (long long)t);
	}
}

/* Only a fraction and/or "Z" may follow the seconds: a zone offset would be
 * silently read as UTC, and trailing junk means it is not a timestamp. */
static void test_time_rejects_trailing_offset_or_junk(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"2009-10-12T17:50:30+02:00",
		"2009-10-12T17:50:30.000-07:00",
		"2009-10-12T17:50:30.000Zjunk",
		"2009-10-12T17:50:30 and more",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		time_t t = 12345;
		int rc = xml_parse_time(bad[i], &t);
		if (rc != -EINVAL)
			fail_msg("'%s' was accepted as %lld", bad[i],
				 (long long)t);
	}
}

/* --- xml_parse_list ------------------------------------------------------ */

static void test_list_v2_page_is_parsed_and_keys_url_decoded(void **state)
{
	(void)state;
	struct s3_list_page p;

	assert_int_equal(xml_parse_list(list_v2, LEN(list_v2), &p), 0);
	assert_int_equal(p.nentries, 3);
	assert_string_equal(p.entries[0].key, "photos/a b+c");
	assert_int_equal(p.entries[0].size, 434234);
	assert_string_equal(p.entries[0].etag,
			    "\"fba9dede5f27731c9771645a39863328\"");
	assert_int_equal(p.entries[0].last_modified, 1255369830);
	assert_string_equal(p.entries[1].key, "photos/caf\xc3\xa9 menu.txt");
	assert_true(p.entries[1].size == UINT64_MAX);
	assert_string_equal(p.entries[1].etag,
			    "\"3858f62230ac3c915f300c664312c11f-9\"");
	assert_int_equal(p.entries[1].last_modified, 1289422113);
	assert_string_equal(p.entries[2].key, "photos/empty");
	assert_int_equal(p.entries[2].size, 0);
	assert_int_equal(p.entries[2].last_modified, 1675152900);
	assert_int_equal(p.nprefixes, 2);
	assert_string_equal(p.common_prefixes[0], "photos/2006/");
	assert_string_equal(p.common_prefixes[1], "photos/with space/");
	assert_true(p.truncated);
	assert_string_equal(p.next_token,
			    "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
	s3_list_page_free(&p);
	assert_page_empty(&p);
}

static void test_list_without_encoding_type_keeps_keys_verbatim(void **state)
{
	(void)state;
	struct s3_list_page p;

	assert_int_equal(
		parse_list_str("<ListBucketResult><Name>b</Name>"
			       "<IsTruncated>false</IsTruncated>"
			       "<Contents><Key>a%20b+c &amp; d</Key>"
			       "<Size>5</Size><ETag>\"e\"</ETag></Contents>"
			       "<CommonPrefixes><Prefix>p%2F+/</Prefix>"
			       "</CommonPrefixes>"
			       "</ListBucketResult>",
			       &p),
		0);
	assert_int_equal(p.nentries, 1);
	assert_string_equal(p.entries[0].key, "a%20b+c & d");
	assert_string_equal(p.entries[0].etag, "\"e\"");
	assert_int_equal(p.entries[0].last_modified, 0);
	assert_string_equal(p.common_prefixes[0], "p%2F+/");
	assert_false(p.truncated);
	assert_null(p.next_token);
	s3_list_page_free(&p);
}

static void test_list_last_page_has_no_token(void **state)
{
	(void)state;
	struct s3_list_page p;

	assert_int_equal(parse_list_str("<ListBucketResult>"
					"<Name>b</Name><KeyCount>0</KeyCount>"
					"<IsTruncated>false</IsTruncated>"
					"</ListBucketResult>",
					&p),
			 0);
	assert_int_equal(p.nentries, 0);
	assert_int_equal(p.nprefixes, 0);
	assert_false(p.truncated);
	assert_null(p.next_token);
	s3_list_page_free(&p);

	/* A token on a last page is ignored. */
	assert_int_equal(parse_list_str("<ListBucketResult>"
					"<IsTruncated>false</IsTruncated>"
					"<NextContinuationToken>t"
					"</NextContinuationToken>"
					"</ListBucketResult>",
					&p),
			 0);
	assert_false(p.truncated);
	assert_null(p.next_token);
	s3_list_page_free(&p);
}

static void test_list_truncated_without_token_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"<ListBucketResult><IsTruncated>true</IsTruncated>"
		"<Contents><Key>k</Key><Size>1</Size></Contents>"
		"</ListBucketResult>",
		"<ListBucketResult><IsTruncated>true</IsTruncated>"
		"<NextContinuationToken></NextContinuationToken>"
		"<Contents><Key>k</Key><Size>1</Size></Contents>"
		"</ListBucketResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_list_page p;
		assert_int_equal(parse_list_str(bad[i], &p), -EPROTO);
		assert_page_empty(&p);
	}
}

static void test_list_bad_size_is_eproto(void **state)
{
	(void)state;
	static const char *const sizes[] = {
		"<Size>12a</Size>",
		"<Size>abc</Size>",
		"<Size></Size>",
		"<Size>-1</Size>",
		"<Size>1.5</Size>",
		"<Size>18446744073709551616</Size>",
		"<Size>99999999999999999999999</Size>",
		"", /* missing */
	};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char doc[512];
		struct s3_list_page p;
		/* The bad entry comes after a good one, so the page is
		 * half-built when the error is found. */
		snprintf(doc, sizeof(doc),
			 "<ListBucketResult><IsTruncated>false</IsTruncated>"
			 "<Contents><Key>ok</Key><Size>1</Size></Contents>"
			 "<CommonPrefixes><Prefix>d/</Prefix></CommonPrefixes>"
			 "<Contents><Key>bad</Key>%s</Contents>"
			 "<Contents><Key>later</Key><Size>1</Size></Contents>"
			 "</ListBucketResult>",
			 sizes[i]);
		int rc = parse_list_str(doc, &p);
		if (rc != -EPROTO)
			fail_msg("'%s': rc %d, want -EPROTO", sizes[i], rc);
		assert_page_empty(&p);
	}
}

/* strtoull() skips leading white space and then accepts a minus sign, so
 * " -1" passes the "no leading '-'" check and becomes UINT64_MAX. */
static void test_list_negative_size_behind_space_is_eproto(void **state)
{
	(void)state;
	struct s3_list_page p;
	int rc = parse_list_str("<ListBucketResult>"
				"<Contents><Key>k</Key><Size> -1</Size>"
				"</Contents></ListBucketResult>",
				&p);
	if (rc == 0) {
		unsigned long long size = p.entries[0].size;
		s3_list_page_free(&p);
		fail_msg("size ' -1' accepted as %llu", size);
	}
	assert_int_equal(rc, -EPROTO);
	assert_page_empty(&p);
}

static void test_list_missing_key_or_prefix_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"<ListBucketResult><Contents><Size>1</Size></Contents>"
		"</ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>1</Size>"
		"</Contents><CommonPrefixes></CommonPrefixes>"
		"</ListBucketResult>",
		"<ListBucketResult><Contents><Key>a</Key><Size>1</Size>"
		"<LastModified>yesterday</LastModified></Contents>"
		"</ListBucketResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_list_page p;
		assert_int_equal(parse_list_str(bad[i], &p), -EPROTO);
		assert_page_empty(&p);
	}
}

static void test_list_bad_url_escape_in_key_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"<ListBucketResult><EncodingType>url</EncodingType>"
		"<Contents><Key>ok</Key><Size>1</Size></Contents>"
		"<Contents><Key>a%zz</Key><Size>1</Size></Contents>"
		"</ListBucketResult>",
		"<ListBucketResult><EncodingType>url</EncodingType>"
		"<Contents><Key>ok</Key><Size>1</Size></Contents>"
		"<CommonPrefixes><Prefix>p%</Prefix></CommonPrefixes>"
		"</ListBucketResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_list_page p;
		assert_int_equal(parse_list_str(bad[i], &p), -EPROTO);
		assert_page_empty(&p);
	}
}

static void test_list_wrong_root_is_eproto(void **state)
{
	(void)state;
	struct s3_list_page p;

	assert_int_equal(xml_parse_list(error_xml, LEN(error_xml), &p),
			 -EPROTO);
	assert_page_empty(&p);
	assert_int_equal(xml_parse_list(uploads_xml, LEN(uploads_xml), &p),
			 -EPROTO);
	assert_page_empty(&p);
	/* ListObjects V1 and V2 share the root name; a bucket listing
	 * (ListAllMyBucketsResult) does not. */
	assert_int_equal(parse_list_str("<ListAllMyBucketsResult>"
					"</ListAllMyBucketsResult>",
					&p),
			 -EPROTO);
	assert_page_empty(&p);
}

/* Every proper prefix of a listing is malformed, except the one that only
 * drops trailing white space, which must parse to the same page. */
static void test_list_truncated_at_every_offset_fails_cleanly(void **state)
{
	(void)state;
	struct s3_list_page full;
	size_t len = LEN(list_v2);
	size_t ok = 0;

	assert_int_equal(xml_parse_list(list_v2, len, &full), 0);
	for (size_t i = 0; i < len; i++) {
		char *copy = exact_copy(list_v2, i);
		struct s3_list_page p;
		int rc = xml_parse_list(copy, i, &p);
		if (rc == 0) {
			if (!is_space_only(list_v2 + i, len - i))
				fail_msg("prefix of %zu bytes parsed", i);
			assert_pages_equal(&p, &full);
			s3_list_page_free(&p);
			ok++;
		} else {
			if (rc != -EPROTO)
				fail_msg("prefix of %zu bytes: rc %d", i, rc);
			assert_page_empty(&p);
		}
		free(copy);
	}
	assert_int_equal(ok, 1); /* only the one without the final '\n' */
	s3_list_page_free(&full);
}

static void test_tree_truncated_at_every_offset_fails_cleanly(void **state)
{
	(void)state;
	static const char *const docs[] = {uploads_xml, initiate_xml, error_xml,
					   delete_xml};
	for (size_t d = 0; d < sizeof(docs) / sizeof(docs[0]); d++) {
		size_t len = strlen(docs[d]);
		for (size_t i = 0; i < len; i++) {
			char *copy = exact_copy(docs[d], i);
			struct xml_node *root = (struct xml_node *)&root;
			int rc = xml_parse(copy, i, &root);
			if (rc == 0) {
				assert_true(
					is_space_only(docs[d] + i, len - i));
				xml_free(root);
			} else {
				assert_int_equal(rc, -EPROTO);
				assert_null(root);
			}
			free(copy);
		}
	}
}

/* --- xml_parse_uploads --------------------------------------------------- */

static void test_uploads_are_parsed(void **state)
{
	(void)state;
	struct s3_upload_list l;

	assert_int_equal(xml_parse_uploads(uploads_xml, LEN(uploads_xml), &l),
			 0);
	assert_int_equal(l.nuploads, 2);
	assert_string_equal(l.uploads[0].key, "my-divisor");
	assert_string_equal(l.uploads[0].upload_id,
			    "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVj"
			    "aw");
	assert_int_equal(l.uploads[0].initiated, 1289422113);
	assert_string_equal(l.uploads[1].key, "my-movie.m2ts");
	assert_int_equal(l.uploads[1].initiated, 1289422114);
	assert_true(l.truncated);
	assert_string_equal(l.next_key_marker, "my-movie.m2ts");
	assert_string_equal(l.next_upload_id_marker,
			    "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ");
	s3_upload_list_free(&l);
	assert_null(l.uploads);
	assert_int_equal(l.nuploads, 0);
}

static void test_uploads_url_encoded_keys_and_marker_are_decoded(void **state)
{
	(void)state;
	static const char doc[] =
		"<ListMultipartUploadsResult>"
		"<EncodingType>url</EncodingType>"
		"<IsTruncated>false</IsTruncated>"
		"<NextKeyMarker>dir/a%20b%2Bc</NextKeyMarker>"
		"<Upload><Key>dir/a%20b%2Bc</Key><UploadId>id1</UploadId>"
		"</Upload>"
		"</ListMultipartUploadsResult>";
	struct s3_upload_list l;

	assert_int_equal(xml_parse_uploads(doc, LEN(doc), &l), 0);
	assert_int_equal(l.nuploads, 1);
	assert_string_equal(l.uploads[0].key, "dir/a b+c");
	assert_string_equal(l.uploads[0].upload_id, "id1");
	assert_int_equal(l.uploads[0].initiated, 0);
	assert_string_equal(l.next_key_marker, "dir/a b+c");
	assert_null(l.next_upload_id_marker);
	assert_false(l.truncated);
	s3_upload_list_free(&l);
}

static void test_uploads_empty_listing(void **state)
{
	(void)state;
	static const char doc[] = "<ListMultipartUploadsResult " S3_NS ">"
				  "<Bucket>b</Bucket>"
				  "<IsTruncated>false</IsTruncated>"
				  "</ListMultipartUploadsResult>";
	struct s3_upload_list l;

	assert_int_equal(xml_parse_uploads(doc, LEN(doc), &l), 0);
	assert_int_equal(l.nuploads, 0);
	assert_false(l.truncated);
	assert_null(l.next_key_marker);
	s3_upload_list_free(&l);
}

static void test_uploads_bad_entries_are_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		/* no UploadId */
		"<Upload><Key>b</Key></Upload>",
		/* empty UploadId */
		"<Upload><Key>b</Key><UploadId></UploadId></Upload>",
		/* no Key */
		"<Upload><UploadId>x</UploadId></Upload>",
		/* bad time */
		"<Upload><Key>b</Key><UploadId>x</UploadId>"
		"<Initiated>soon</Initiated></Upload>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char doc[512];
		struct s3_upload_list l;
		snprintf(doc, sizeof(doc),
			 "<ListMultipartUploadsResult>"
			 "<Upload><Key>a</Key><UploadId>ida</UploadId></Upload>"
			 "%s"
			 "</ListMultipartUploadsResult>",
			 bad[i]);
		assert_int_equal(xml_parse_uploads(doc, strlen(doc), &l),
				 -EPROTO);
		assert_null(l.uploads);
		assert_int_equal(l.nuploads, 0);
		assert_null(l.next_key_marker);
	}
	/* A bad url escape in the marker, and a wrong root. */
	static const char marker[] =
		"<ListMultipartUploadsResult><EncodingType>url</EncodingType>"
		"<NextKeyMarker>%g1</NextKeyMarker>"
		"</ListMultipartUploadsResult>";
	struct s3_upload_list l;
	assert_int_equal(xml_parse_uploads(marker, LEN(marker), &l), -EPROTO);
	assert_null(l.uploads);
	assert_int_equal(xml_parse_uploads(list_v2, LEN(list_v2), &l), -EPROTO);
	assert_null(l.uploads);
}

/* --- xml_parse_initiate -------------------------------------------------- */

static void test_initiate_returns_upload_id(void **state)
{
	(void)state;
	char *id = NULL;

	assert_int_equal(
		xml_parse_initiate(initiate_xml, LEN(initiate_xml), &id), 0);
	assert_string_equal(id, "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5t"
				"MnRzIHVwbG9hZA");
	free(id);
}

static void test_initiate_without_upload_id_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>k</Key>"
		"</InitiateMultipartUploadResult>",
		"<InitiateMultipartUploadResult><UploadId></UploadId>"
		"</InitiateMultipartUploadResult>",
		"<InitiateMultipartUploadResult><UploadId/>"
		"</InitiateMultipartUploadResult>",
		"<CopyObjectResult><UploadId>x</UploadId></CopyObjectResult>",
		error_xml,
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *id = (char *)bad[i];
		assert_int_equal(
			xml_parse_initiate(bad[i], strlen(bad[i]), &id),
			-EPROTO);
		assert_null(id);
	}
}

/* --- xml_parse_etag_result ----------------------------------------------- */

static void test_etag_result_for_copy_part_and_complete(void **state)
{
	(void)state;
	static const char copy[] = XML_DECL
		"<CopyObjectResult " S3_NS ">"
		"<LastModified>2009-10-28T22:32:00</LastModified>"
		"<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>"
		"</CopyObjectResult>";
	static const char part[] =
		"<CopyPartResult>"
		"<LastModified>2011-04-11T20:34:56.000Z</LastModified>"
		"<ETag>\"9b2cf535f27731c974343645a3985328\"</ETag>"
		"</CopyPartResult>";
	static const char complete[] =
		XML_DECL "<CompleteMultipartUploadResult " S3_NS ">"
			 "<Location>http://Example-Bucket.s3.amazonaws.com/"
			 "Example-Object</Location>"
			 "<Bucket>Example-Bucket</Bucket>"
			 "<Key>Example-Object</Key>"
			 "<ETag>\"3858f62230ac3c915f300c664312c11f-9\"</ETag>"
			 "</CompleteMultipartUploadResult>";
	char etag[S3_ETAG_MAX];

	assert_int_equal(xml_parse_etag_result(copy, LEN(copy),
					       "CopyObjectResult", etag),
			 0);
	assert_string_equal(etag, "\"9b2cf535f27731c974343645a3985328\"");
	assert_int_equal(
		xml_parse_etag_result(part, LEN(part), "CopyPartResult", etag),
		0);
	assert_string_equal(etag, "\"9b2cf535f27731c974343645a3985328\"");
	assert_int_equal(xml_parse_etag_result(complete, LEN(complete),
					       "CompleteMultipartUploadResult",
					       etag),
			 0);
	assert_string_equal(etag, "\"3858f62230ac3c915f300c664312c11f-9\"");
}

static void test_etag_result_with_wrong_root_is_eproto(void **state)
{
	(void)state;
	static const char part[] =
		"<CopyPartResult><ETag>\"abc\"</ETag></CopyPartResult>";
	char etag[S3_ETAG_MAX] = "untouched";

	assert_int_equal(xml_parse_etag_result(part, LEN(part),
					       "CopyObjectResult", etag),
			 -EPROTO);
	/* A 200 response whose body is an <Error> (S3 does this for copy
	 * and complete). */
	assert_int_equal(xml_parse_etag_result(error_xml, LEN(error_xml),
					       "CompleteMultipartUploadResult",
					       etag),
			 -EPROTO);
	assert_string_equal(etag, "untouched");
}

static void
test_etag_result_missing_empty_or_oversized_etag_is_eproto(void **state)
{
	(void)state;
	char doc[512], etag[S3_ETAG_MAX] = "untouched";
	char long_etag[S3_ETAG_MAX + 1];

	static const char *const bad[] = {
		"<CopyObjectResult><LastModified>2009-10-28T22:32:00"
		"</LastModified></CopyObjectResult>",
		"<CopyObjectResult><ETag></ETag></CopyObjectResult>",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(xml_parse_etag_result(bad[i], strlen(bad[i]),
						       "CopyObjectResult",
						       etag),
				 -EPROTO);

	/* S3_ETAG_MAX - 1 characters fit with the NUL; S3_ETAG_MAX do not. */
	memset(long_etag, 'e', S3_ETAG_MAX - 1);
	long_etag[S3_ETAG_MAX - 1] = '\0';
	snprintf(doc, sizeof(doc),
		 "<CopyObjectResult><ETag>%s</ETag></CopyObjectResult>",
		 long_etag);
	assert_int_equal(xml_parse_etag_result(doc, strlen(doc),
					       "CopyObjectResult", etag),
			 0);
	assert_string_equal(etag, long_etag);

	strcpy(etag, "untouched");
	memset(long_etag, 'e', S3_ETAG_MAX);
	long_etag[S3_ETAG_MAX] = '\0';
	snprintf(doc, sizeof(doc),
		 "<CopyObjectResult><ETag>%s</ETag></CopyObjectResult>",
		 long_etag);
	assert_int_equal(xml_parse_etag_result(doc, strlen(doc),
					       "CopyObjectResult", etag),
			 -EPROTO);
	assert_string_equal(etag, "untouched");
}

/* --- xml_parse_delete_result --------------------------------------------- */

static void test_delete_result_counts_errors_except_no_such_key(void **state)
{
	(void)state;
	struct s3_error err = {0};
	size_t n = 99;

	assert_int_equal(
		xml_parse_delete_result(delete_xml, LEN(delete_xml), &n, &err),
		0);
	assert_int_equal(n, 2);
	/* The first counted error is described. */
	assert_string_equal(err.code, "AccessDenied");
	assert_non_null(strstr(err.message, "locked.txt"));
	assert_non_null(strstr(err.message, "Access Denied"));
	assert_null(strstr(err.message, "other.txt"));
	assert_null(strstr(err.message, "gone.txt"));

	n = 99;
	assert_int_equal(
		xml_parse_delete_result(delete_xml, LEN(delete_xml), &n, NULL),
		0);
	assert_int_equal(n, 2);
}

static void
test_delete_result_all_deleted_or_missing_is_zero_errors(void **state)
{
	(void)state;
	static const char *const docs[] = {
		"<DeleteResult><Deleted><Key>a</Key></Deleted>"
		"<Deleted><Key>b</Key></Deleted></DeleteResult>",
		"<DeleteResult><Error><Key>a</Key><Code>NoSuchKey</Code>"
		"<Message>gone</Message></Error></DeleteResult>",
		"<DeleteResult/>",
	};
	for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++) {
		struct s3_error err = {0};
		size_t n = 99;
		assert_int_equal(xml_parse_delete_result(
					 docs[i], strlen(docs[i]), &n, &err),
				 0);
		assert_int_equal(n, 0);
		assert_string_equal(err.code, "");
		assert_string_equal(err.message, "");
	}
}

static void test_delete_result_error_without_code_is_counted(void **state)
{
	(void)state;
	static const char doc[] = "<DeleteResult><Error><Key>k</Key></Error>"
				  "</DeleteResult>";
	struct s3_error err = {0};
	size_t n = 0;

	assert_int_equal(xml_parse_delete_result(doc, LEN(doc), &n, &err), 0);
	assert_int_equal(n, 1);
	assert_string_equal(err.code, "");
	assert_non_null(strstr(err.message, "'k'"));
}

static void test_delete_result_wrong_root_or_malformed_is_eproto(void **state)
{
	(void)state;
	struct s3_error err = {0};
	size_t n = 99;

	assert_int_equal(
		xml_parse_delete_result(error_xml, LEN(error_xml), &n, &err),
		-EPROTO);
	assert_int_equal(n, 0);
	assert_int_equal(xml_parse_delete_result(delete_xml,
						 LEN(delete_xml) - 5, &n, &err),
			 -EPROTO);
	assert_int_equal(n, 0);
	assert_string_equal(err.code, "");
}

/* --- xml_parse_error ----------------------------------------------------- */

static void test_error_body_fills_code_message_and_request_id(void **state)
{
	(void)state;
	struct s3_error err = {.http_status = 404, .attempts = 3};

	assert_int_equal(xml_parse_error(error_xml, LEN(error_xml), &err), 0);
	assert_string_equal(err.code, "NoSuchKey");
	assert_string_equal(err.message,
			    "The resource you requested does not exist");
	assert_string_equal(err.request_id, "4442587FB7D0A2F9");
	/* Only the text fields come from the body. */
	assert_int_equal(err.http_status, 404);
	assert_int_equal(err.attempts, 3);
}

static void test_error_without_message_or_request_id_gives_empty(void **state)
{
	(void)state;
	static const char doc[] = "<Error><Code>SlowDown</Code></Error>";
	struct s3_error err;

	memset(&err, 'x', sizeof(err));
	assert_int_equal(xml_parse_error(doc, LEN(doc), &err), 0);
	assert_string_equal(err.code, "SlowDown");
	assert_string_equal(err.message, "");
	assert_string_equal(err.request_id, "");
}

static void test_error_long_fields_are_truncated_and_terminated(void **state)
{
	(void)state;
	struct buf doc = BUF_INIT;
	struct s3_error err;

	assert_int_equal(buf_puts(&doc, "<Error><Code>"), 0);
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_putc(&doc, 'C'), 0);
	assert_int_equal(buf_puts(&doc, "</Code><Message>"), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(buf_putc(&doc, 'M'), 0);
	assert_int_equal(buf_puts(&doc, "</Message><RequestId>"), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(buf_putc(&doc, 'R'), 0);
	assert_int_equal(buf_puts(&doc, "</RequestId></Error>"), 0);

	memset(&err, 'x', sizeof(err));
	assert_int_equal(xml_parse_error(doc.data, doc.len, &err), 0);
	assert_int_equal(strlen(err.code), sizeof(err.code) - 1);
	assert_int_equal(strlen(err.message), sizeof(err.message) - 1);
	assert_int_equal(strlen(err.request_id), sizeof(err.request_id) - 1);
	assert_int_equal(err.message[0], 'M');
	buf_free(&doc);
}

static void test_error_without_code_or_wrong_root_is_eproto(void **state)
{
	(void)state;
	static const char *const bad[] = {
		"<Error><Message>m</Message></Error>",
		"<Error><Code></Code></Error>",
		"<html><head><title>503</title></head></html>",
		"<Error><Code>NoSuchKey</Code>", /* truncated */
		"",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_error err = {0};
		assert_int_equal(xml_parse_error(bad[i], strlen(bad[i]), &err),
				 -EPROTO);
		assert_string_equal(err.code, "");
		assert_string_equal(err.message, "");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_builds_tree_with_text_and_siblings),
		cmocka_unit_test(test_parse_strips_namespace_prefixes),
		cmocka_unit_test(test_parse_of_empty_input_is_eproto),
		cmocka_unit_test(test_parse_of_garbage_is_eproto),
		cmocka_unit_test(test_parse_of_random_bytes_never_crashes),
		cmocka_unit_test(test_parse_of_two_root_elements_is_eproto),
		cmocka_unit_test(
			test_parse_refuses_doctype_and_entity_declarations),
		cmocka_unit_test(test_parse_accepts_nesting_up_to_max_depth),
		cmocka_unit_test(
			test_parse_refuses_nesting_deeper_than_max_depth),
		cmocka_unit_test(test_time_parses_s3_timestamps_exactly),
		cmocka_unit_test(test_time_rejects_malformed_and_out_of_range),
		cmocka_unit_test(test_time_rejects_negative_fields),
		cmocka_unit_test(test_time_rejects_trailing_offset_or_junk),
		cmocka_unit_test(
			test_list_v2_page_is_parsed_and_keys_url_decoded),
		cmocka_unit_test(
			test_list_without_encoding_type_keeps_keys_verbatim),
		cmocka_unit_test(test_list_last_page_has_no_token),
		cmocka_unit_test(test_list_truncated_without_token_is_eproto),
		cmocka_unit_test(test_list_bad_size_is_eproto),
		cmocka_unit_test(
			test_list_negative_size_behind_space_is_eproto),
		cmocka_unit_test(test_list_missing_key_or_prefix_is_eproto),
		cmocka_unit_test(test_list_bad_url_escape_in_key_is_eproto),
		cmocka_unit_test(test_list_wrong_root_is_eproto),
		cmocka_unit_test(
			test_list_truncated_at_every_offset_fails_cleanly),
		cmocka_unit_test(
			test_tree_truncated_at_every_offset_fails_cleanly),
		cmocka_unit_test(test_uploads_are_parsed),
		cmocka_unit_test(
			test_uploads_url_encoded_keys_and_marker_are_decoded),
		cmocka_unit_test(test_uploads_empty_listing),
		cmocka_unit_test(test_uploads_bad_entries_are_eproto),
		cmocka_unit_test(test_initiate_returns_upload_id),
		cmocka_unit_test(test_initiate_without_upload_id_is_eproto),
		cmocka_unit_test(test_etag_result_for_copy_part_and_complete),
		cmocka_unit_test(test_etag_result_with_wrong_root_is_eproto),
		cmocka_unit_test(
			test_etag_result_missing_empty_or_oversized_etag_is_eproto),
		cmocka_unit_test(
			test_delete_result_counts_errors_except_no_such_key),
		cmocka_unit_test(
			test_delete_result_all_deleted_or_missing_is_zero_errors),
		cmocka_unit_test(
			test_delete_result_error_without_code_is_counted),
		cmocka_unit_test(
			test_delete_result_wrong_root_or_malformed_is_eproto),
		cmocka_unit_test(
			test_error_body_fills_code_message_and_request_id),
		cmocka_unit_test(
			test_error_without_message_or_request_id_gives_empty),
		cmocka_unit_test(
			test_error_long_fields_are_truncated_and_terminated),
		cmocka_unit_test(
			test_error_without_code_or_wrong_root_is_eproto),
	};
	return cmocka_run_group_tests_name("xml", tests, NULL, NULL);
}
