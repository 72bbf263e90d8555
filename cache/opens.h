/* opens.h: the kernel's open regular files, kept where a worker that
 * takes over the mount finds them (CACHE_DIR/opens).
 *
 * With FUSE passthrough the kernel reads and writes an open file's cache
 * file itself, and remembers how each inode is open: all of its opens in
 * passthrough, on one backing file, or none. A worker that takes over a
 * live mount must know both, or it would evict a cache file the kernel
 * still writes, or answer an OPEN in the other mode (the kernel then
 * fails the open with EIO). So each record is written in place, in a
 * shared mapping of the file, as the handler changes it: a kill -9 loses
 * nothing already stored, and the page cache keeps it for the next
 * worker. A new mount starts from an empty file (mount.c unlinks it with
 * the saved INIT).
 *
 * A record is valid while its ino is not 0, which is stored last when it
 * is made and first when it goes. An OPEN counted here whose reply the
 * killed worker never sent is counted again when the kernel resends it:
 * the record then counts one open too many, and the file stays held (not
 * evicted) until unmount. That errs on the safe side.
 *
 * Threading: none inside; the caller serialises calls (fs->lock).
 */
#ifndef TIERFS_OPENS_H
#define TIERFS_OPENS_H

#include <stdint.h>

#define OPENS_SLOTS (1u << 16)

struct opens_rec {
	uint64_t ino;	  /* 0: a free slot */
	int32_t backing;  /* passthrough backing id; 0: none */
	uint32_t opens;	  /* OPENs and CREATEs not yet RELEASEd */
	uint32_t pt;	  /* of them, in passthrough */
	uint32_t writers; /* of those, with write access */
	uint64_t reserved;
};

struct opens;

/* Maps path (made, 0600, when absent). */
int opens_map(const char *path, struct opens **out);
void opens_unmap(struct opens *t);
/* Stores r in slot (*slot < 0: a free one, which *slot then names;
 * r->opens 0 frees it). -ENOSPC when no slot is free. */
int opens_store(struct opens *t, int *slot, const struct opens_rec *r);
/* Calls fn on each valid record, in slot order. */
void opens_each(struct opens *t,
		void (*fn)(void *ctx, int slot, const struct opens_rec *r),
		void *ctx);

#endif
