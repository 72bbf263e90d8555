/* server.h: the gRPC server under tierfs-csi, on the gRPC C core.
 *
 * Threading: csi_server_run() blocks its caller until a stop signal and
 * serves calls on a pool of CSI_SERVER_DEFAULT_THREADS threads, so handlers
 * run concurrently and must be thread-safe; a slow one holds only its own
 * thread. Ownership: the request a handler gets belongs to the server and
 * lives until the handler returns. The response it sets belongs to the
 * server too, which frees it with protobuf_c_message_free_unpacked(): every
 * string, array and sub-message in it must be malloc'd (see csi_strdup());
 * strings left at the value *__init() gave them are not freed.
 */
#ifndef TIERFS_CSI_SERVER_H
#define TIERFS_CSI_SERVER_H

#include <grpc/status.h>
#include <protobuf-c/protobuf-c.h>
#include <signal.h>
#include <stddef.h>

#define CSI_SERVER_DEFAULT_THREADS 16
#define CSI_ERROR_MAX 512

/* What a failing handler tells the caller. The text goes into the gRPC
 * status message and the log line: never put a secret in it. */
struct csi_error {
	char msg[CSI_ERROR_MAX];
};

/* A handler: validates req, sets *resp on GRPC_STATUS_OK, or fills err and
 * returns another status. `ctx` is csi_server_config.ctx. */
typedef grpc_status_code (*csi_handler_fn)(void *ctx,
					   const ProtobufCMessage *req,
					   ProtobufCMessage **resp,
					   struct csi_error *err);

/* One RPC of a service, by its name in the .proto ("Probe"). */
struct csi_handler {
	const char *method;
	csi_handler_fn fn;
};

/* A service as served: every method of `desc` is registered; those with no
 * entry in `handlers` answer UNIMPLEMENTED. handlers == NULL serves the
 * whole service as UNIMPLEMENTED (a mode that does not offer it). */
struct csi_service {
	const ProtobufCServiceDescriptor *desc; /* borrowed, static */
	const struct csi_handler *handlers;	/* borrowed; NULL-terminated */
};

struct csi_server_config {
	const char *endpoint; /* "unix:///csi/csi.sock" */
	unsigned threads;     /* 0: CSI_SERVER_DEFAULT_THREADS */
	void *ctx;	      /* passed to every handler; borrowed */
	const struct csi_service
		*services; /* borrowed, for the server's life */
	size_t n_services;
};

struct csi_server;

/* Checks an endpoint and returns the socket path inside it, or NULL with a
 * reason in why. */
const char *csi_endpoint_path(const char *endpoint, char *why, size_t len);

/* Binds the socket (making its directory, replacing a stale socket) and
 * registers every method. Returns 0 or -errno with a reason in why. */
int csi_server_create(const struct csi_server_config *cfg,
		      struct csi_server **out, char *why, size_t len);

/* Serves until one of `stop` arrives (the caller blocked them in every
 * thread before creating any), then stops taking calls, cancels those in
 * flight, waits for their handlers and removes the socket. Returns 0. */
int csi_server_run(struct csi_server *s, const sigset_t *stop);

void csi_server_destroy(struct csi_server *s);

/* Helpers for handlers. */
grpc_status_code csi_errorf(struct csi_error *err, grpc_status_code code,
			    const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
char *csi_strdup(const char *s);	 /* aborts on out-of-memory */
void *csi_calloc(size_t n, size_t size); /* aborts on out-of-memory */
const char *csi_status_name(grpc_status_code code);
/* Whether `method` has an entry in a NULL-terminated handler table. */
int csi_has_handler(const struct csi_handler *handlers, const char *method);

#endif
