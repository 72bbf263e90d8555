/* identity.c: the CSI Identity service: plugin name, capabilities, Probe.
 *
 * The plugin capabilities are those of tierfs as deployed, whatever part
 * this process serves (the spec asks every instance to report the same):
 * the Controller service, and online expansion (a tierfs volume grows by
 * raising its quota while mounted).
 */
#include "plugin.h"

#include "csi.pb-c.h"
#include "s3conn.h"

static grpc_status_code get_plugin_info(void *ctx, const ProtobufCMessage *req,
					ProtobufCMessage **resp,
					struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	Csi__V1__GetPluginInfoResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__get_plugin_info_response__init(r);
	r->name = csi_strdup(CSI_DRIVER_NAME);
	r->vendor_version = csi_strdup(CSI_PLUGIN_VERSION);
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

static Csi__V1__PluginCapability *service_cap(int type)
{
	Csi__V1__PluginCapability *c = csi_calloc(1, sizeof(*c));
	csi__v1__plugin_capability__init(c);
	c->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
	c->service = csi_calloc(1, sizeof(*c->service));
	csi__v1__plugin_capability__service__init(c->service);
	c->service->type = type;
	return c;
}

static Csi__V1__PluginCapability *expansion_cap(int type)
{
	Csi__V1__PluginCapability *c = csi_calloc(1, sizeof(*c));
	csi__v1__plugin_capability__init(c);
	c->type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
	c->volume_expansion = csi_calloc(1, sizeof(*c->volume_expansion));
	csi__v1__plugin_capability__volume_expansion__init(c->volume_expansion);
	c->volume_expansion->type = type;
	return c;
}

static grpc_status_code get_plugin_capabilities(void *ctx,
						const ProtobufCMessage *req,
						ProtobufCMessage **resp,
						struct csi_error *err)
{
	(void)ctx;
	(void)req;
	(void)err;
	Csi__V1__GetPluginCapabilitiesResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__get_plugin_capabilities_response__init(r);
	r->capabilities = csi_calloc(2, sizeof(*r->capabilities));
	r->capabilities[r->n_capabilities++] = service_cap(
		CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE);
	r->capabilities[r->n_capabilities++] = expansion_cap(
		CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE);
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

/* Ready once it serves and, when a default S3 endpoint is configured,
 * that endpoint answers: FAILED_PRECONDITION (unhealthy) saying why when
 * it does not. Credentials arrive with each volume's secrets, so only
 * reachability is checked. */
static grpc_status_code probe(void *ctx, const ProtobufCMessage *req,
			      ProtobufCMessage **resp, struct csi_error *err)
{
	(void)req;
	char why[CSI_ERROR_MAX - 64];
	if (csi_s3_reachable(ctx, why, sizeof(why)) != 0)
		return csi_errorf(err, GRPC_STATUS_FAILED_PRECONDITION, "%s",
				  why);
	Csi__V1__ProbeResponse *r = csi_calloc(1, sizeof(*r));
	csi__v1__probe_response__init(r);
	r->ready = csi_calloc(1, sizeof(*r->ready));
	google__protobuf__bool_value__init(r->ready);
	r->ready->value = 1;
	*resp = &r->base;
	return GRPC_STATUS_OK;
}

const struct csi_handler csi_identity_handlers[] = {
	{"GetPluginInfo", get_plugin_info},
	{"GetPluginCapabilities", get_plugin_capabilities},
	{"Probe", probe},
	{NULL, NULL},
};
