/* tierfsctl.c: the tierfs admin CLI, a dispatcher over its subcommands.
 *
 * Subcommands: `s3` (raw S3 access and the S3 throughput benchmark).
 * Mount status, flush and health join as the filesystem lands.
 */
#include <stdio.h>
#include <string.h>

#include "../s3/s3ctl.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: tierfsctl s3 ls|head|get|put|rm|mb|bench ...\n"
		   "       tierfsctl s3 --help\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "s3") == 0)
		return s3ctl_main(argc - 1, argv + 1);
	if (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "tierfsctl: unknown command '%s'\n", argv[1]);
	usage(stderr);
	return 2;
}
