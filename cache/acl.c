/* acl.c: POSIX ACLs in their xattr form (see acl.h).
 *
 * The form (linux/posix_acl_xattr.h): a little-endian u32 version (2),
 * then entries of {u16 tag, u16 perm, u32 id}. A valid ACL lists its
 * entries in tag order: the owner, named users, the owning group, named
 * groups, the mask, other; the owner, owning group and other once each,
 * and a mask whenever there is a named entry. The mask, when present,
 * stands for the group class of the mode; otherwise the owning group
 * does. The rules here are those of the kernel's posix_acl.c (equiv_mode,
 * chmod, create_masq), which ext4 relies on.
 */
#include "acl.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>

#define ACL_VERSION 2
#define ACL_HEADER 4
#define ACL_ENTRY 8

#define TAG_USER_OBJ 0x01
#define TAG_USER 0x02
#define TAG_GROUP_OBJ 0x04
#define TAG_GROUP 0x08
#define TAG_MASK 0x10
#define TAG_OTHER 0x20

static unsigned get16(const unsigned char *p)
{
	return (unsigned)p[0] | (unsigned)p[1] << 8;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void put16(unsigned char *p, unsigned v)
{
	p[0] = (unsigned char)(v & 0xff);
	p[1] = (unsigned char)(v >> 8);
}

static size_t count_of(size_t n)
{
	return (n - ACL_HEADER) / ACL_ENTRY;
}

static unsigned char *entry(const void *v, size_t i)
{
	return (unsigned char *)v + ACL_HEADER + i * ACL_ENTRY;
}

int acl_check(const void *v, size_t n)
{
	if (!v || n < ACL_HEADER + ACL_ENTRY || (n - ACL_HEADER) % ACL_ENTRY ||
	    get32(v) != ACL_VERSION)
		return -EINVAL;
	/* tags must come in this order; USER and GROUP may repeat */
	unsigned last = 0, named = 0, seen = 0;
	for (size_t i = 0; i < count_of(n); i++) {
		const unsigned char *e = entry(v, i);
		unsigned tag = get16(e), perm = get16(e + 2);
		if (perm & ~7u)
			return -EINVAL;
		switch (tag) {
		case TAG_USER_OBJ:
		case TAG_GROUP_OBJ:
		case TAG_MASK:
		case TAG_OTHER:
			if (tag <= last)
				return -EINVAL;
			break;
		case TAG_USER:
		case TAG_GROUP:
			if (tag < last)
				return -EINVAL;
			named = 1;
			break;
		default:
			return -EINVAL;
		}
		last = tag;
		seen |= tag;
	}
	unsigned need = TAG_USER_OBJ | TAG_GROUP_OBJ | TAG_OTHER;
	if ((seen & need) != need || (named && !(seen & TAG_MASK)))
		return -EINVAL;
	return 0;
}

int acl_mode(const void *v, size_t n, mode_t *perm)
{
	mode_t mode = 0;
	int equiv = 1;
	for (size_t i = 0; i < count_of(n); i++) {
		const unsigned char *e = entry(v, i);
		mode_t p = (mode_t)get16(e + 2);
		switch (get16(e)) {
		case TAG_USER_OBJ:
			mode |= p << 6;
			break;
		case TAG_GROUP_OBJ:
			mode |= p << 3;
			break;
		case TAG_OTHER:
			mode |= p;
			break;
		case TAG_MASK: /* comes after the owning group: overrides it */
			mode = (mode & ~(mode_t)S_IRWXG) | p << 3;
			equiv = 0;
			break;
		default: /* named users and groups */
			equiv = 0;
			break;
		}
	}
	*perm = mode;
	return equiv;
}

/* The entry that stands for the group class: the mask, else the group. */
static unsigned char *group_class(void *v, size_t n)
{
	unsigned char *group = NULL;
	for (size_t i = 0; i < count_of(n); i++) {
		unsigned char *e = entry(v, i);
		if (get16(e) == TAG_MASK)
			return e;
		if (get16(e) == TAG_GROUP_OBJ)
			group = e;
	}
	return group;
}

void acl_chmod(void *v, size_t n, mode_t mode)
{
	for (size_t i = 0; i < count_of(n); i++) {
		unsigned char *e = entry(v, i);
		if (get16(e) == TAG_USER_OBJ)
			put16(e + 2, (mode & S_IRWXU) >> 6);
		else if (get16(e) == TAG_OTHER)
			put16(e + 2, mode & S_IRWXO);
	}
	put16(group_class(v, n) + 2, (mode & S_IRWXG) >> 3);
}

int acl_inherit(void *v, size_t n, mode_t *mode)
{
	mode_t m = *mode, p;
	for (size_t i = 0; i < count_of(n); i++) {
		unsigned char *e = entry(v, i);
		unsigned tag = get16(e);
		p = (mode_t)get16(e + 2);
		if (tag == TAG_USER_OBJ) {
			p &= (m & S_IRWXU) >> 6;
			m = (m & ~(mode_t)S_IRWXU) | p << 6;
		} else if (tag == TAG_OTHER) {
			p &= m & S_IRWXO;
			m = (m & ~(mode_t)S_IRWXO) | p;
		} else
			continue;
		put16(e + 2, p);
	}
	unsigned char *g = group_class(v, n);
	p = (mode_t)get16(g + 2) & ((m & S_IRWXG) >> 3);
	put16(g + 2, p);
	m = (m & ~(mode_t)S_IRWXG) | p << 3;
	*mode = m;
	mode_t equiv;
	return acl_mode(v, n, &equiv);
}
