/* test_acl.c: POSIX ACLs in xattr form (cache/acl.c): the checks, and the
 * mode arithmetic, against what ext4 gives for the same ACLs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "../../cache/acl.h"

#define U_OBJ 0x01
#define U 0x02
#define G_OBJ 0x04
#define G 0x08
#define MASK 0x10
#define OTHER 0x20

struct ent {
	unsigned tag, perm;
	uint32_t id;
};

/* Encodes entries into buf; returns the size. */
static size_t encode(unsigned char *buf, const struct ent *e, size_t n)
{
	buf[0] = 2;
	buf[1] = buf[2] = buf[3] = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char *p = buf + 4 + 8 * i;
		p[0] = (unsigned char)e[i].tag;
		p[1] = 0;
		p[2] = (unsigned char)e[i].perm;
		p[3] = 0;
		memcpy(p + 4, &e[i].id, 4); /* little-endian host */
	}
	return 4 + 8 * n;
}

static unsigned perm_of(const unsigned char *buf, size_t i)
{
	return buf[4 + 8 * i + 2];
}

static void test_well_formed_acls_pass_and_others_are_refused(void **state)
{
	(void)state;
	unsigned char b[128];
	const struct ent minimal[] = {
		{U_OBJ, 6, 0}, {G_OBJ, 4, 0}, {OTHER, 4, 0}};
	assert_int_equal(acl_check(b, encode(b, minimal, 3)), 0);
	const struct ent named[] = {{U_OBJ, 7, 0}, {U, 5, 1000}, {U, 4, 1001},
				    {G_OBJ, 5, 0}, {G, 7, 100},	 {MASK, 7, 0},
				    {OTHER, 0, 0}};
	assert_int_equal(acl_check(b, encode(b, named, 7)), 0);
	/* a named entry without a mask */
	const struct ent nomask[] = {
		{U_OBJ, 7, 0}, {U, 5, 1000}, {G_OBJ, 5, 0}, {OTHER, 0, 0}};
	assert_int_equal(acl_check(b, encode(b, nomask, 4)), -EINVAL);
	/* out of order, twice the owner, a missing other */
	const struct ent order[] = {
		{G_OBJ, 5, 0}, {U_OBJ, 7, 0}, {OTHER, 0, 0}};
	assert_int_equal(acl_check(b, encode(b, order, 3)), -EINVAL);
	const struct ent twice[] = {
		{U_OBJ, 7, 0}, {U_OBJ, 7, 0}, {G_OBJ, 5, 0}, {OTHER, 0, 0}};
	assert_int_equal(acl_check(b, encode(b, twice, 4)), -EINVAL);
	assert_int_equal(acl_check(b, encode(b, minimal, 2)), -EINVAL);
	/* a bad permission, tag, version, size */
	const struct ent perm[] = {{U_OBJ, 8, 0}, {G_OBJ, 4, 0}, {OTHER, 4, 0}};
	assert_int_equal(acl_check(b, encode(b, perm, 3)), -EINVAL);
	const struct ent tag[] = {{U_OBJ, 6, 0}, {0x40, 4, 0}, {OTHER, 4, 0}};
	assert_int_equal(acl_check(b, encode(b, tag, 3)), -EINVAL);
	size_t n = encode(b, minimal, 3);
	assert_int_equal(acl_check(b, n - 1), -EINVAL);
	assert_int_equal(acl_check(b, 4), -EINVAL); /* no entries */
	b[0] = 1;
	assert_int_equal(acl_check(b, n), -EINVAL);
	assert_int_equal(acl_check(NULL, 0), -EINVAL);
}

static void
test_the_mode_of_an_acl_takes_the_mask_for_the_group_class(void **state)
{
	(void)state;
	unsigned char b[128];
	mode_t perm;
	const struct ent minimal[] = {
		{U_OBJ, 6, 0}, {G_OBJ, 4, 0}, {OTHER, 0, 0}};
	assert_int_equal(acl_mode(b, encode(b, minimal, 3), &perm), 1);
	assert_int_equal(perm, 0640);
	/* setfacl -m u:nobody:r on a 0600 file: ext4 shows 0640 */
	const struct ent named[] = {{U_OBJ, 6, 0},
				    {U, 4, 65534},
				    {G_OBJ, 0, 0},
				    {MASK, 4, 0},
				    {OTHER, 0, 0}};
	assert_int_equal(acl_mode(b, encode(b, named, 5), &perm), 0);
	assert_int_equal(perm, 0640);
	/* a mask alone is not equivalent to a mode either */
	const struct ent mask[] = {
		{U_OBJ, 7, 0}, {G_OBJ, 5, 0}, {MASK, 1, 0}, {OTHER, 4, 0}};
	assert_int_equal(acl_mode(b, encode(b, mask, 4), &perm), 0);
	assert_int_equal(perm, 0714);
}

static void test_chmod_rewrites_owner_group_class_and_other(void **state)
{
	(void)state;
	unsigned char b[128];
	const struct ent named[] = {{U_OBJ, 6, 0},
				    {U, 4, 65534},
				    {G_OBJ, 4, 0},
				    {MASK, 4, 0},
				    {OTHER, 0, 0}};
	size_t n = encode(b, named, 5);
	acl_chmod(b, n, 0751);
	assert_int_equal(perm_of(b, 0), 7);
	assert_int_equal(perm_of(b, 1), 4); /* named entries stay */
	assert_int_equal(perm_of(b, 2), 4); /* the group: the mask moved */
	assert_int_equal(perm_of(b, 3), 5);
	assert_int_equal(perm_of(b, 4), 1);
	const struct ent minimal[] = {
		{U_OBJ, 6, 0}, {G_OBJ, 4, 0}, {OTHER, 0, 0}};
	n = encode(b, minimal, 3);
	acl_chmod(b, n, 0705);
	assert_int_equal(perm_of(b, 0), 7);
	assert_int_equal(perm_of(b, 1), 0);
	assert_int_equal(perm_of(b, 2), 5);
	mode_t perm;
	assert_int_equal(acl_mode(b, n, &perm), 1);
	assert_int_equal(perm, 0705);
}

static void test_a_new_node_takes_the_default_acl_cut_to_its_mode(void **state)
{
	(void)state;
	unsigned char b[128];
	/* setfacl -d -m u:1000:rwx,g::rx,o::- on a directory; then open(0666)
	 * in it: ext4 gives rw-rw---- with the mask at rw- */
	const struct ent def[] = {{U_OBJ, 7, 0},
				  {U, 7, 1000},
				  {G_OBJ, 5, 0},
				  {MASK, 7, 0},
				  {OTHER, 0, 0}};
	size_t n = encode(b, def, 5);
	mode_t mode = S_IFREG | 0666;
	assert_int_equal(acl_inherit(b, n, &mode), 0);
	assert_int_equal(mode, S_IFREG | 0660);
	assert_int_equal(perm_of(b, 0), 6);
	assert_int_equal(perm_of(b, 1), 7); /* named: kept, the mask limits */
	assert_int_equal(perm_of(b, 2), 5);
	assert_int_equal(perm_of(b, 3), 6);
	assert_int_equal(perm_of(b, 4), 0);
	/* a default ACL of the three base entries: only a mode, no umask */
	const struct ent base[] = {{U_OBJ, 7, 0}, {G_OBJ, 7, 0}, {OTHER, 5, 0}};
	n = encode(b, base, 3);
	mode = S_IFDIR | S_ISGID | 0777;
	assert_int_equal(acl_inherit(b, n, &mode), 1);
	assert_int_equal(mode, S_IFDIR | S_ISGID | 0775);
	mode = S_IFREG | 0640;
	n = encode(b, base, 3);
	assert_int_equal(acl_inherit(b, n, &mode), 1);
	assert_int_equal(mode, S_IFREG | 0640);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			test_well_formed_acls_pass_and_others_are_refused),
		cmocka_unit_test(
			test_the_mode_of_an_acl_takes_the_mask_for_the_group_class),
		cmocka_unit_test(
			test_chmod_rewrites_owner_group_class_and_other),
		cmocka_unit_test(
			test_a_new_node_takes_the_default_acl_cut_to_its_mode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
