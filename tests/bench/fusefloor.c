/* fusefloor.c: the cost of one FUSE request on this machine, for `make bench`.
 *
 * A FUSE server that does nothing: its root is an empty directory, a name
 * looked up in it is not there (ENOENT, not cached, so each lookup is sent
 * again) and it has no extended attributes (ENODATA). Whatever a request to
 * it costs is the kernel's and the machine's, with no filesystem behind it:
 * the floor under every FUSE filesystem's metadata operation, tierfs's and
 * its peers' alike (tests/bench/report.py puts it beside the DESIGN §8 bars).
 *
 *   build/fuse-floor MOUNTPOINT     serves, in the foreground, until the
 *                                   mount goes (umount) or SIGTERM
 *
 * One thread, libfuse's own loop: the fewest context switches a request can
 * take. The handlers touch no shared state, so the file has none.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void floor_root(struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = FUSE_ROOT_ID;
	st->st_mode = S_IFDIR | 0755;
	st->st_nlink = 2;
}

static void floor_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent;
	(void)name;
	fuse_reply_err(req, ENOENT); /* an error reply is never cached */
}

static void floor_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	(void)fi;
	if (ino != FUSE_ROOT_ID) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	struct stat st;
	floor_root(&st);
	fuse_reply_attr(req, &st, 0);
}

static void floor_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			   size_t size)
{
	(void)ino;
	(void)name;
	(void)size;
	fuse_reply_err(req, ENODATA);
}

static void floor_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	(void)ino;
	(void)size;
	(void)off;
	(void)fi;
	fuse_reply_buf(req, NULL, 0); /* empty; the kernel adds nothing */
}

static const struct fuse_lowlevel_ops floor_ops = {
	.lookup = floor_lookup,
	.getattr = floor_getattr,
	.getxattr = floor_getxattr,
	.readdir = floor_readdir,
};

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s MOUNTPOINT\n", argv[0]);
		return 2;
	}
	char *fargv[] = {argv[0], "-o", "fsname=fusefloor,subtype=fusefloor",
			 NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_session *se =
		fuse_session_new(&args, &floor_ops, sizeof(floor_ops), NULL);
	if (!se) {
		fprintf(stderr, "fuse-floor: cannot start a FUSE session\n");
		return 1;
	}
	int rc = 1;
	if (fuse_set_signal_handlers(se) != 0) {
		fprintf(stderr, "fuse-floor: cannot set signal handlers\n");
		goto fail_session;
	}
	if (fuse_session_mount(se, argv[1]) != 0) {
		fprintf(stderr, "fuse-floor: cannot mount %s\n", argv[1]);
		goto fail_handlers;
	}
	rc = fuse_session_loop(se) == 0 ? 0 : 1;
	fuse_session_unmount(se);
fail_handlers:
	fuse_remove_signal_handlers(se);
fail_session:
	fuse_session_destroy(se);
	return rc;
}
