/* opens.c: the kernel's open regular files; see opens.h. */
#include "opens.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct opens {
	struct opens_rec *v; /* OPENS_SLOTS records, shared */
	uint64_t used[OPENS_SLOTS / 64];
	unsigned hint; /* where the search for a free slot starts */
};

int opens_map(const char *path, struct opens **out)
{
	const size_t len = OPENS_SLOTS * sizeof(struct opens_rec);
	struct opens *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	struct stat st;
	int rc = fd < 0 || fstat(fd, &st) ? -errno : 0;
	if (!rc && (size_t)st.st_size < len && ftruncate(fd, (off_t)len))
		rc = -errno;
	if (!rc) {
		t->v = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
			    0);
		if (t->v == MAP_FAILED)
			rc = -errno;
	}
	if (fd >= 0)
		close(fd);
	if (rc) {
		free(t);
		return rc;
	}
	for (unsigned i = 0; i < OPENS_SLOTS; i++)
		if (__atomic_load_n(&t->v[i].ino, __ATOMIC_ACQUIRE))
			t->used[i / 64] |= 1ull << (i % 64);
	*out = t;
	return 0;
}

void opens_unmap(struct opens *t)
{
	if (!t)
		return;
	munmap(t->v, OPENS_SLOTS * sizeof(struct opens_rec));
	free(t);
}

static int take_slot(struct opens *t)
{
	for (unsigned k = 0; k < OPENS_SLOTS / 64; k++) {
		unsigned w = (t->hint + k) % (OPENS_SLOTS / 64);
		if (t->used[w] != UINT64_MAX) {
			unsigned b = (unsigned)__builtin_ctzll(~t->used[w]);
			t->used[w] |= 1ull << b;
			t->hint = w;
			return (int)(w * 64 + b);
		}
	}
	return -ENOSPC;
}

int opens_store(struct opens *t, int *slot, const struct opens_rec *r)
{
	if (r->opens == 0) {
		if (*slot >= 0) {
			struct opens_rec *p = &t->v[*slot];
			__atomic_store_n(&p->ino, 0, __ATOMIC_RELEASE);
			memset(p, 0, sizeof(*p));
			t->used[*slot / 64] &= ~(1ull << (*slot % 64));
		}
		*slot = -1;
		return 0;
	}
	int fresh = *slot < 0;
	if (fresh && (*slot = take_slot(t)) < 0) {
		*slot = -1;
		return -ENOSPC;
	}
	struct opens_rec *p = &t->v[*slot];
	p->backing = r->backing;
	p->opens = r->opens;
	p->pt = r->pt;
	p->writers = r->writers;
	if (fresh) /* valid from here: its counts are in place */
		__atomic_store_n(&p->ino, r->ino, __ATOMIC_RELEASE);
	return 0;
}

void opens_each(struct opens *t,
		void (*fn)(void *ctx, int slot, const struct opens_rec *r),
		void *ctx)
{
	for (unsigned i = 0; i < OPENS_SLOTS; i++) {
		struct opens_rec r = t->v[i];
		if (r.ino)
			fn(ctx, (int)i, &r);
	}
}
