/* plugin.h: what tierfs-csi is configured with, and its three services.
 *
 * One struct csi_plugin is built by main() from the flags, validated once,
 * and handed to every handler as its ctx; it is read-only while serving, so
 * handlers may read it from any thread. Strings are borrowed from argv.
 * The node service's own mutable state lives behind `node` (node.c), with
 * its own lock.
 */
#ifndef TIERFS_CSI_PLUGIN_H
#define TIERFS_CSI_PLUGIN_H

#include "server.h"

#define CSI_DRIVER_NAME "csi.tierfs.dev"
#ifndef CSI_PLUGIN_VERSION
#define CSI_PLUGIN_VERSION "0.1.0"
#endif
#define CSI_DEFAULT_ENDPOINT "unix:///csi/csi.sock"
#define CSI_DEFAULT_CACHE_ROOT "/var/lib/tierfs/cache"
#define CSI_MAX_VOLUMES_PER_NODE 0 /* 0: no limit of ours; the CO decides */

enum csi_mode {
	CSI_MODE_CONTROLLER = 1,
	CSI_MODE_NODE = 2,
	CSI_MODE_ALL = CSI_MODE_CONTROLLER | CSI_MODE_NODE,
};

struct csi_plugin {
	enum csi_mode mode;
	const char *endpoint;	 /* unix:///path.sock */
	const char *node_id;	 /* required when mode includes node */
	const char *s3_endpoint; /* NULL: AWS */
	const char *s3_region;	 /* NULL: the s3/ default */
	const char *cache_root;	 /* per-volume cache dirs live under it */
	/* Controller only: the buckets ListVolumes/ListSnapshots look in
	 * (--list-bucket, repeatable; array owned by main(), names borrowed
	 * from argv), the controller's own S3 credentials for those listings
	 * (--credentials-file, 0600; else AWS_* from the environment), and
	 * what GetCapacity reports (--capacity-available; 0: unlimited). */
	const char **list_buckets;
	size_t n_list_buckets;
	const char *credentials_file;
	unsigned long long capacity_available;
	const char *tierfs_bin; /* the mount daemon (--tierfs-bin) */
	struct csi_node *node;	/* owned; csi_node_destroy() (node.c) */
};

/* The Node service's state: the volumes with a call in progress. */
struct csi_node;
int csi_node_create(struct csi_node **out);
void csi_node_destroy(struct csi_node *n);

/* The handlers of each service, NULL-terminated (server.h). */
extern const struct csi_handler csi_identity_handlers[];
extern const struct csi_handler csi_controller_handlers[];
extern const struct csi_handler csi_node_handlers[];

#endif
