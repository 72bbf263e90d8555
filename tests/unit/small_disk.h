/* small_disk.h: a small tmpfs inside a test's directory, for the tests of
 * a full disk (test_data, test_meta, test_walbuf). Mounting needs root:
 * without it small_disk_mount() says so and the test skips. Include after
 * <cmocka.h>. */
#ifndef TIERFS_TEST_SMALL_DISK_H
#define TIERFS_TEST_SMALL_DISK_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Makes DIR/small (its path in out) and mounts a tmpfs of size ("4m")
 * on it: 0, or -1 when none can be mounted here. */
static inline int small_disk_mount(const char *dir, const char *size, char *out,
				   size_t outlen)
{
	char opts[32];
	snprintf(out, outlen, "%s/small", dir);
	snprintf(opts, sizeof(opts), "size=%s", size);
	assert_int_equal(mkdir(out, 0700), 0);
	return mount("tmpfs", out, "tmpfs", 0, opts) == 0 ? 0 : -1;
}

/* For a teardown: the tmpfs a failed test left on DIR/small, if any, is
 * unmounted (the directory stays). */
static inline void small_disk_drop(const char *dir)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/small", dir);
	(void)umount2(path, MNT_DETACH);
}

/* Writes to path until the disk is full. */
static inline void small_disk_fill(const char *path)
{
	static char chunk[16 << 10];
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	while (write(fd, chunk, sizeof(chunk)) > 0)
		;
	assert_int_equal(errno, ENOSPC);
	close(fd);
}

#endif
