/* node.c: the CSI Node service: stage starts `tierfs mount`, publish
 * bind-mounts it into the pod.
 *
 * Today it answers NodeGetInfo and NodeGetCapabilities; every other RPC is
 * UNIMPLEMENTED (server.c answers for a method with no handler here). As in
 * controller.c, a capability is advertised only once the RPCs behind it
 * have handlers.
 */
#include "plugin.h"

#include "csi.pb-c.h"

/* Each capability tierfs means to offer (issue 5) and the RPC it needs. */
static const struct {
	Csi__V1__NodeServiceCapability__RPC__Type type;
	const char *rpc;
} node_caps[] = {
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME,
	 "NodeStageVolume"},
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS,
	 "NodeGetVolumeStats"},
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	 "NodeExpandVolume"},
	/* the condition rides on NodeGetVolumeStats */
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_CONDITION,
	 "NodeGetVolumeStats"},
	/* the group is applied when publishing */
	{CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__VOLUME_MOUNT_GROUP,
	 "NodePublishVolume"},
};

static grpc_status_code get_capabilities(void *ctx, const ProtobufCMessage *req,
					 ProtobufCMessage **resp,
					 struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	size_t max = sizeof(node_caps) / sizeof(node_caps[0]);
	Csi__V1__NodeGetCapabilitiesResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__node_get_capabilities_response__init(r);
	r->capabilities = csi_calloc(max, sizeof(*r->capabilities));
	for (size_t i = 0; i < max; i++) {
		if (!csi_has_handler(csi_node_handlers, node_caps[i].rpc))
			continue;
		Csi__V1__NodeServiceCapability *c = csi_calloc(1, sizeof(*c));
		csi__v1__node_service_capability__init(c);
		c->type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
		c->rpc = csi_calloc(1, sizeof(*c->rpc));
		csi__v1__node_service_capability__rpc__init(c->rpc);
		c->rpc->type = node_caps[i].type;
		r->capabilities[r->n_capabilities++] = c;
	}
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

static grpc_status_code get_info(void *ctx, const ProtobufCMessage *req,
				 ProtobufCMessage **resp, struct csi_error *err)
{
	const struct csi_plugin *p = ctx;
	(void)req;
	(void)err;
	Csi__V1__NodeGetInfoResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__node_get_info_response__init(r);
	r->node_id = csi_strdup(p->node_id);
	r->max_volumes_per_node = CSI_MAX_VOLUMES_PER_NODE;
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

const struct csi_handler csi_node_handlers[] = {
	{"NodeGetCapabilities", get_capabilities},
	{"NodeGetInfo", get_info},
	{NULL, NULL},
};
