/* acl.h: POSIX ACLs in their xattr form, for a mount with FUSE_POSIX_ACL.
 * With it the kernel enforces and caches ACLs, and leaves to tierfs what
 * a local filesystem's ACL code does: keeping the mode in step with the
 * access ACL, chmod rewriting it, and a new node taking its directory's
 * default ACL (with the umask applied only where there is none).
 * Threading: pure functions on caller-owned buffers; no state.
 */
#ifndef TIERFS_ACL_H
#define TIERFS_ACL_H

#include <stddef.h>
#include <sys/types.h>

#define ACL_XATTR_ACCESS "system.posix_acl_access"
#define ACL_XATTR_DEFAULT "system.posix_acl_default"

/* 0 when [v, v + n) is a well-formed ACL (version 2, entries in the
 * kernel's order, each required entry once, a mask when there are named
 * entries), else -EINVAL. Every other function here expects one. */
int acl_check(const void *v, size_t n);

/* The permission bits (0777) the ACL gives; returns 1 when it holds only
 * the three entries a mode can say (it is equivalent to *perm), else 0. */
int acl_mode(const void *v, size_t n, mode_t *perm);

/* chmod: the owner, group class (the mask, or the group entry when there
 * is no mask) and other entries take mode's permission bits, in place. */
void acl_chmod(void *v, size_t n, mode_t mode);

/* A new node's access ACL from its directory's default ACL (a copy, in
 * place): each class is cut to what the requested *mode allows, and
 * *mode's permission bits to what the ACL allows. Returns 1 when the
 * result is equivalent to *mode (no ACL needs storing), else 0. */
int acl_inherit(void *v, size_t n, mode_t *mode);

#endif
