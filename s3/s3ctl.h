/* s3ctl.h: the `tierfsctl s3` subcommand (see s3ctl.c for its commands).
 * Single-threaded entry point; argv[0] is "s3". Returns the exit status.
 */
#ifndef TIERFS_S3CTL_H
#define TIERFS_S3CTL_H

int s3ctl_main(int argc, char **argv);

#endif
