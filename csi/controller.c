/* controller.c: the CSI Controller service: volumes as S3 prefixes.
 *
 * Today it answers ControllerGetCapabilities only; every other RPC is
 * UNIMPLEMENTED (server.c answers for a method with no handler here). A
 * capability is advertised only once the RPCs behind it have handlers, so
 * the list grows by itself as they land and never promises an RPC that
 * answers UNIMPLEMENTED.
 */
#include "plugin.h"

#include <string.h>

#include "csi.pb-c.h"

/* Each capability tierfs means to offer (issue 5) and the RPCs it needs. */
static const struct {
	Csi__V1__ControllerServiceCapability__RPC__Type type;
	const char *rpcs[3];
} controller_caps[] = {
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME,
	 {"CreateVolume", "DeleteVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME,
	 {"ControllerPublishVolume", "ControllerUnpublishVolume"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES,
	 {"ListVolumes"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY,
	 {"GetCapacity"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_SNAPSHOT,
	 {"CreateSnapshot", "DeleteSnapshot"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_SNAPSHOTS,
	 {"ListSnapshots"}},
	{CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
	 {"ControllerExpandVolume"}},
};

static int rpcs_implemented(const char *const *rpcs, size_t n)
{
	for (size_t i = 0; i < n && rpcs[i]; i++)
		if (!csi_has_handler(csi_controller_handlers, rpcs[i]))
			return 0;
	return 1;
}

static grpc_status_code get_capabilities(void *ctx, const ProtobufCMessage *req,
					 ProtobufCMessage **resp,
					 struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	size_t max = sizeof(controller_caps) / sizeof(controller_caps[0]);
	Csi__V1__ControllerGetCapabilitiesResponse *r =
		csi_calloc(1, sizeof(*r));
	csi__v1__controller_get_capabilities_response__init(r);
	r->capabilities = csi_calloc(max, sizeof(*r->capabilities));
	for (size_t i = 0; i < max; i++) {
		if (!rpcs_implemented(
			    controller_caps[i].rpcs,
			    sizeof(controller_caps[i].rpcs) /
				    sizeof(controller_caps[i].rpcs[0])))
			continue;
		Csi__V1__ControllerServiceCapability *c =
			csi_calloc(1, sizeof(*c));
		csi__v1__controller_service_capability__init(c);
		c->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
		c->rpc = csi_calloc(1, sizeof(*c->rpc));
		csi__v1__controller_service_capability__rpc__init(c->rpc);
		c->rpc->type = controller_caps[i].type;
		r->capabilities[r->n_capabilities++] = c;
	}
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

const struct csi_handler csi_controller_handlers[] = {
	{"ControllerGetCapabilities", get_capabilities},
	{NULL, NULL},
};
