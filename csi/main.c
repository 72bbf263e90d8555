/* main.c: tierfs-csi, the CSI plugin: flags, then the gRPC server.
 *
 * `--mode controller|node|all` picks the services this process serves; the
 * others are still registered and answer UNIMPLEMENTED, as the CSI spec
 * asks. SIGTERM and SIGINT are blocked in every thread from the start and
 * taken by csi_server_run() with sigwait(), so no handler code runs in
 * signal context.
 */
#include <getopt.h>
#include <limits.h>
#include <unistd.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../s3/units.h"
#include "csi.pb-c.h"
#include "plugin.h"
#include "volume.h"

enum {
	OPT_MODE = 256,
	OPT_ENDPOINT,
	OPT_NODE_ID,
	OPT_S3_ENDPOINT,
	OPT_S3_REGION,
	OPT_CACHE_ROOT,
	OPT_LIST_BUCKET,
	OPT_CREDENTIALS_FILE,
	OPT_CAPACITY_AVAILABLE,
	OPT_TIERFS_BIN,
};

static const struct option long_opts[] = {
	{"mode", required_argument, NULL, OPT_MODE},
	{"endpoint", required_argument, NULL, OPT_ENDPOINT},
	{"node-id", required_argument, NULL, OPT_NODE_ID},
	{"s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT},
	{"s3-region", required_argument, NULL, OPT_S3_REGION},
	{"cache-root", required_argument, NULL, OPT_CACHE_ROOT},
	{"list-bucket", required_argument, NULL, OPT_LIST_BUCKET},
	{"credentials-file", required_argument, NULL, OPT_CREDENTIALS_FILE},
	{"capacity-available", required_argument, NULL, OPT_CAPACITY_AVAILABLE},
	{"tierfs-bin", required_argument, NULL, OPT_TIERFS_BIN},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: tierfs-csi --mode controller|node|all --node-id ID\n"
		"                  [--endpoint " CSI_DEFAULT_ENDPOINT "]\n"
		"                  [--s3-endpoint URL] [--s3-region REGION]\n"
		"                  [--cache-root DIR] [--list-bucket NAME]...\n"
		"                  [--credentials-file FILE] "
		"[--capacity-available SIZE]\n"
		"                  [--tierfs-bin PATH]\n"
		"\n"
		"Serves the CSI Identity service, plus the Controller service "
		"(--mode\n"
		"controller), the Node service (--mode node) or both (--mode "
		"all),\n"
		"as driver " CSI_DRIVER_NAME
		" on a unix socket. --node-id is required\n"
		"when serving the Node service. S3 credentials come with each "
		"volume's\n"
		"secrets, never from the command line. Stops cleanly on "
		"SIGTERM/SIGINT.\n"
		"\n"
		"  --mode         which services to serve (required)\n"
		"  --endpoint     the socket, unix:///absolute/path (default "
		"%s)\n"
		"  --node-id      this node's id, as the CO knows it\n"
		"  --s3-endpoint  default S3 endpoint URL (default: AWS)\n"
		"  --s3-region    default S3 region\n"
		"  --cache-root   where per-volume cache dirs go (default "
		"%s)\n"
		"  --list-bucket  a bucket ListVolumes and ListSnapshots look "
		"in\n"
		"                 (repeatable; none: they list nothing)\n"
		"  --credentials-file  the controller's own S3 credentials for "
		"those\n"
		"                 listings (mode 0600; default: AWS_* "
		"variables)\n"
		"  --capacity-available  what GetCapacity reports, e.g. 10Ti\n"
		"                 (default: unlimited)\n"
		"  --tierfs-bin   the mount daemon (default: tierfs beside "
		"this binary)\n",
		CSI_DEFAULT_ENDPOINT, CSI_DEFAULT_CACHE_ROOT);
}

static int bad(const char *flag, const char *value, const char *why)
{
	fprintf(stderr, "tierfs-csi: %s '%s': %s\n", flag, value, why);
	return -1;
}

/* Returns 0, 1 for --help, or -1 after saying what is wrong. */
static int parse_args(int argc, char **argv, struct csi_plugin *p)
{
	int c, rc = 0;
	const char *mode = NULL;
	while (rc == 0 &&
	       (c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_MODE:
			mode = optarg;
			break;
		case OPT_ENDPOINT:
			p->endpoint = optarg;
			break;
		case OPT_NODE_ID:
			p->node_id = optarg;
			break;
		case OPT_S3_ENDPOINT:
			p->s3_endpoint = optarg;
			break;
		case OPT_S3_REGION:
			p->s3_region = optarg;
			break;
		case OPT_CACHE_ROOT:
			p->cache_root = optarg;
			break;
		case OPT_LIST_BUCKET: {
			char why[128];
			if (csi_bucket_check(optarg, why, sizeof(why)) != 0)
				return bad("--list-bucket", optarg, why);
			p->list_buckets[p->n_list_buckets++] = optarg;
			break;
		}
		case OPT_CREDENTIALS_FILE:
			p->credentials_file = optarg;
			break;
		case OPT_CAPACITY_AVAILABLE: {
			uint64_t v;
			if (units_parse_size(optarg, &v) != 0 || v == 0 ||
			    v > INT64_MAX)
				return bad("--capacity-available", optarg,
					   "expected a size such as 10Ti");
			p->capacity_available = v;
			break;
		}
		case OPT_TIERFS_BIN:
			p->tierfs_bin = optarg;
			break;
		case 'h':
			return 1;
		default: /* getopt has said what it did not like */
			return -1;
		}
	}
	if (optind < argc)
		return bad("argument", argv[optind], "unexpected");
	if (!mode) {
		fprintf(stderr, "tierfs-csi: --mode is required "
				"(controller, node or all)\n");
		return -1;
	}
	if (strcmp(mode, "controller") == 0)
		p->mode = CSI_MODE_CONTROLLER;
	else if (strcmp(mode, "node") == 0)
		p->mode = CSI_MODE_NODE;
	else if (strcmp(mode, "all") == 0)
		p->mode = CSI_MODE_ALL;
	else
		return bad("--mode", mode, "expected controller, node or all");
	if ((p->mode & CSI_MODE_NODE) && (!p->node_id || !*p->node_id)) {
		fprintf(stderr,
			"tierfs-csi: --node-id is required with --mode "
			"%s\n",
			mode);
		return -1;
	}
	if (p->node_id && strlen(p->node_id) > 128) /* CSI's string limit */
		return bad("--node-id", p->node_id, "longer than 128 bytes");
	if (p->cache_root && p->cache_root[0] != '/')
		return bad("--cache-root", p->cache_root,
			   "must be an absolute path");
	if (p->tierfs_bin && p->tierfs_bin[0] != '/')
		return bad("--tierfs-bin", p->tierfs_bin,
			   "must be an absolute path");
	char why[256];
	if (!csi_endpoint_path(p->endpoint, why, sizeof(why))) {
		fprintf(stderr, "tierfs-csi: %s\n", why);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct csi_plugin p = {
		.endpoint = CSI_DEFAULT_ENDPOINT,
		.cache_root = CSI_DEFAULT_CACHE_ROOT,
	};
	/* --list-bucket can be given at most argc times */
	const char **buckets = calloc((size_t)argc, sizeof(*buckets));
	if (!buckets) {
		fprintf(stderr, "tierfs-csi: out of memory\n");
		return 1;
	}
	p.list_buckets = buckets;
	int rc = parse_args(argc, argv, &p);
	if (rc == 1) {
		usage(stdout);
		free(buckets);
		return 0;
	}
	if (rc < 0) {
		fprintf(stderr, "(tierfs-csi --help lists the flags)\n");
		free(buckets);
		return 2;
	}
	/* the daemon beside this binary, unless told otherwise */
	char self[PATH_MAX], bin[PATH_MAX + 8];
	if (!p.tierfs_bin) {
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		snprintf(bin, sizeof(bin), "%s/tierfs", self);
		p.tierfs_bin = bin;
	}
	if ((p.mode & CSI_MODE_NODE) && csi_node_create(&p.node) != 0) {
		fprintf(stderr, "tierfs-csi: out of memory\n");
		return 1;
	}

	/* before any thread exists, so every thread inherits the mask */
	sigset_t stop;
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	rc = pthread_sigmask(SIG_BLOCK, &stop, NULL);
	if (rc) {
		fprintf(stderr, "tierfs-csi: pthread_sigmask: %s\n",
			strerror(rc));
		free(buckets);
		return 1;
	}

	const struct csi_service services[] = {
		{&csi__v1__identity__descriptor, csi_identity_handlers},
		{&csi__v1__controller__descriptor,
		 (p.mode & CSI_MODE_CONTROLLER) ? csi_controller_handlers
						: NULL},
		{&csi__v1__node__descriptor,
		 (p.mode & CSI_MODE_NODE) ? csi_node_handlers : NULL},
	};
	struct csi_server_config cfg = {
		.endpoint = p.endpoint,
		.ctx = &p,
		.services = services,
		.n_services = sizeof(services) / sizeof(services[0]),
	};
	struct csi_server *srv;
	char why[512];
	rc = csi_server_create(&cfg, &srv, why, sizeof(why));
	if (rc) {
		fprintf(stderr, "tierfs-csi: %s\n", why);
		free(buckets);
		csi_node_destroy(p.node);
		return 1;
	}
	fprintf(stderr, "tierfs-csi %s: driver %s, mode %s, node %s\n",
		CSI_PLUGIN_VERSION, CSI_DRIVER_NAME,
		p.mode == CSI_MODE_ALL	  ? "all"
		: p.mode == CSI_MODE_NODE ? "node"
					  : "controller",
		p.node_id ? p.node_id : "-");
	csi_server_run(srv, &stop);
	csi_server_destroy(srv);
	csi_node_destroy(p.node);
	fprintf(stderr, "tierfs-csi: stopped\n");
	free(buckets);
	return 0;
}
