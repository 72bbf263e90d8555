/* server.c: the CSI gRPC server: unix socket, method table, thread pool.
 *
 * Every method of every service in the config is registered with the C
 * core (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, so a call arrives with
 * its request). One "slot" per method is always posted on the shared
 * notification queue `cq`; the pool's threads all wait on `cq`. A thread
 * that gets a call first posts a fresh slot for that method, so the next
 * call of the same method can be taken by another thread at once, then
 * serves the call to the end. Calls of any other path (an unknown service)
 * come through a generic slot and get UNIMPLEMENTED.
 *
 * A slot's states:
 *   POSTED --call arrives--> SERVING --reply sent--> freed
 *   POSTED --server shuts down (event with success=0)--> freed
 * Each slot has its own pluck queue for its call's batch, so the serving
 * thread can wait for just that batch while others use `cq`.
 *
 * Shutdown: csi_server_run() sigwait()s for a stop signal, then
 * grpc_server_shutdown_and_notify() + grpc_server_cancel_all_calls(). The
 * shutdown tag arrives on `cq` once no call is left (a handler that is
 * still running finishes first); the thread that sees it shuts `cq` down,
 * and every thread leaves when `cq` reports GRPC_QUEUE_SHUTDOWN.
 */
#include "server.h"

#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define CSI_UNIX_PREFIX "unix://"
#define CSI_PATH_MAX 108 /* sizeof(sockaddr_un.sun_path) */
#define CSI_LOG_ID_MAX 128

struct csi_method {
	char path[256]; /* "/csi.v1.Identity/Probe" */
	const ProtobufCMessageDescriptor *input;
	csi_handler_fn fn; /* NULL: UNIMPLEMENTED */
	int service_off;   /* the whole service is off in this mode */
	void *registered;  /* from grpc_server_register_method */
};

struct csi_slot {
	struct csi_method *method;	/* NULL: the generic slot */
	grpc_completion_queue *call_cq; /* owned; pluck queue for this call */
	grpc_call *call;
	gpr_timespec deadline;
	grpc_metadata_array md;
	grpc_byte_buffer *payload; /* registered slots only */
	grpc_call_details details; /* generic slot only */
};

struct csi_server {
	grpc_server *server;
	grpc_completion_queue *cq; /* shared notification queue */
	char sock_path[CSI_PATH_MAX];
	void *ctx;
	unsigned threads;
	struct csi_method *methods; /* owned */
	size_t n_methods;
	pthread_mutex_t lock; /* protects stopping */
	int stopping;	      /* no more slots are posted once set */
};

static const char *const status_names[] = {
	"OK",
	"CANCELLED",
	"UNKNOWN",
	"INVALID_ARGUMENT",
	"DEADLINE_EXCEEDED",
	"NOT_FOUND",
	"ALREADY_EXISTS",
	"PERMISSION_DENIED",
	"RESOURCE_EXHAUSTED",
	"FAILED_PRECONDITION",
	"ABORTED",
	"OUT_OF_RANGE",
	"UNIMPLEMENTED",
	"INTERNAL",
	"UNAVAILABLE",
	"DATA_LOSS",
	"UNAUTHENTICATED",
};

/* The tag of the shutdown notification: any address no slot can have. */
static const char shutdown_tag;

const char *csi_status_name(grpc_status_code code)
{
	if ((unsigned)code < sizeof(status_names) / sizeof(status_names[0]))
		return status_names[code];
	return "UNKNOWN";
}

grpc_status_code csi_errorf(struct csi_error *err, grpc_status_code code,
			    const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	return code;
}

void *csi_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p) {
		fprintf(stderr, "tierfs-csi: out of memory\n");
		abort();
	}
	return p;
}

char *csi_strdup(const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = csi_calloc(1, n);
	memcpy(p, s, n);
	return p;
}

const char *csi_endpoint_path(const char *endpoint, char *why, size_t len)
{
	size_t plen = strlen(CSI_UNIX_PREFIX);
	if (!endpoint || strncmp(endpoint, CSI_UNIX_PREFIX, plen) != 0) {
		snprintf(why, len,
			 "--endpoint '%s': must be unix:///absolute/path.sock",
			 endpoint ? endpoint : "");
		return NULL;
	}
	const char *path = endpoint + plen;
	if (path[0] != '/') {
		snprintf(why, len,
			 "--endpoint '%s': the socket path must be absolute "
			 "(unix:///...)",
			 endpoint);
		return NULL;
	}
	if (strlen(path) >= CSI_PATH_MAX) {
		snprintf(why, len,
			 "--endpoint '%s': socket path longer than %d bytes",
			 endpoint, CSI_PATH_MAX - 1);
		return NULL;
	}
	if (path[strlen(path) - 1] == '/') {
		snprintf(why, len, "--endpoint '%s': names a directory",
			 endpoint);
		return NULL;
	}
	return path;
}

/* mkdir -p of the socket's directory. */
static int make_parent_dirs(const char *sock_path)
{
	char dir[CSI_PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", sock_path);
	char *slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return 0; /* the socket sits in / */
	*slash = '\0';
	for (char *p = dir + 1;; p++) {
		if (*p != '/' && *p != '\0')
			continue;
		char c = *p;
		*p = '\0';
		if (mkdir(dir, 0750) != 0 && errno != EEXIST)
			return -errno;
		*p = c;
		if (c == '\0')
			break;
	}
	struct stat st;
	if (stat(dir, &st) != 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

/* A socket left by an earlier run would make the bind fail, so it goes;
 * but one that still answers belongs to a live plugin (-EADDRINUSE), and
 * anything that is not a socket is left alone (-EEXIST). */
static int remove_stale_socket(const char *path)
{
	struct stat st;
	if (lstat(path, &st) != 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISSOCK(st.st_mode))
		return -EEXIST;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	if (close(fd) != 0)
		return -errno;
	if (live)
		return -EADDRINUSE;
	if (unlink(path) != 0 && errno != ENOENT)
		return -errno;
	return 0;
}

static csi_handler_fn find_handler(const struct csi_handler *handlers,
				   const char *method)
{
	if (!handlers)
		return NULL;
	for (const struct csi_handler *h = handlers; h->method; h++)
		if (strcmp(h->method, method) == 0)
			return h->fn;
	return NULL;
}

int csi_has_handler(const struct csi_handler *handlers, const char *method)
{
	return find_handler(handlers, method) != NULL;
}

/* Every handler must name a method of its service: a typo would otherwise
 * leave the method silently UNIMPLEMENTED. */
static int check_handlers(const struct csi_service *svc, char *why, size_t len)
{
	if (!svc->handlers)
		return 0;
	for (const struct csi_handler *h = svc->handlers; h->method; h++) {
		if (!protobuf_c_service_descriptor_get_method_by_name(
			    svc->desc, h->method)) {
			snprintf(why, len, "handler '%s': no such method in %s",
				 h->method, svc->desc->name);
			return -EINVAL;
		}
	}
	return 0;
}

static int build_methods(struct csi_server *s,
			 const struct csi_server_config *cfg, char *why,
			 size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < cfg->n_services; i++) {
		int rc = check_handlers(&cfg->services[i], why, len);
		if (rc)
			return rc;
		n += cfg->services[i].desc->n_methods;
	}
	s->methods = csi_calloc(n, sizeof(*s->methods));
	s->n_methods = n;
	size_t k = 0;
	for (size_t i = 0; i < cfg->n_services; i++) {
		const struct csi_service *svc = &cfg->services[i];
		for (unsigned j = 0; j < svc->desc->n_methods; j++) {
			const ProtobufCMethodDescriptor *md =
				&svc->desc->methods[j];
			struct csi_method *m = &s->methods[k++];
			snprintf(m->path, sizeof(m->path), "/%s/%s",
				 svc->desc->name, md->name);
			m->input = md->input;
			m->fn = find_handler(svc->handlers, md->name);
			m->service_off = svc->handlers == NULL;
			m->registered = grpc_server_register_method(
				s->server, m->path, NULL,
				GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER, 0);
			if (!m->registered) {
				snprintf(why, len, "registering %s failed",
					 m->path);
				return -EINVAL;
			}
		}
	}
	return 0;
}

int csi_server_create(const struct csi_server_config *cfg,
		      struct csi_server **out, char *why, size_t len)
{
	const char *path = csi_endpoint_path(cfg->endpoint, why, len);
	if (!path)
		return -EINVAL;
	struct csi_server *s = csi_calloc(1, sizeof(*s));
	snprintf(s->sock_path, sizeof(s->sock_path), "%s", path);
	s->ctx = cfg->ctx;
	s->threads = cfg->threads ? cfg->threads : CSI_SERVER_DEFAULT_THREADS;
	int rc = pthread_mutex_init(&s->lock, NULL);
	if (rc) {
		free(s);
		snprintf(why, len, "pthread_mutex_init: %s", strerror(rc));
		return -rc;
	}

	rc = make_parent_dirs(s->sock_path);
	if (rc) {
		snprintf(why, len,
			 "--endpoint: creating the directory of %s: %s",
			 s->sock_path, strerror(-rc));
		goto fail_lock;
	}
	rc = remove_stale_socket(s->sock_path);
	if (rc) {
		snprintf(why, len, "--endpoint: %s: %s", s->sock_path,
			 rc == -EEXIST	     ? "exists and is not a socket"
			 : rc == -EADDRINUSE ? "another process serves it"
					     : strerror(-rc));
		goto fail_lock;
	}

	grpc_init();
	s->server = grpc_server_create(NULL, NULL);
	s->cq = grpc_completion_queue_create_for_next(NULL);
	grpc_server_register_completion_queue(s->server, s->cq, NULL);
	rc = build_methods(s, cfg, why, len);
	if (rc)
		goto fail_server;

	char addr[CSI_PATH_MAX + 8];
	snprintf(addr, sizeof(addr), "unix:%s", s->sock_path);
	grpc_server_credentials *creds =
		grpc_insecure_server_credentials_create();
	int port = grpc_server_add_http2_port(s->server, addr, creds);
	grpc_server_credentials_release(creds);
	if (port == 0) {
		snprintf(why, len, "--endpoint: cannot listen on %s",
			 s->sock_path);
		rc = -EADDRNOTAVAIL;
		goto fail_server;
	}
	*out = s;
	return 0;

fail_server:
	/* never started: no calls, so shutdown completes at once */
	grpc_server_shutdown_and_notify(s->server, s->cq,
					(void *)&shutdown_tag);
	grpc_completion_queue_pluck(s->cq, (void *)&shutdown_tag,
				    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	grpc_server_destroy(s->server);
	grpc_completion_queue_shutdown(s->cq);
	while (grpc_completion_queue_next(
		       s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
		       .type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(s->cq);
	grpc_shutdown();
	free(s->methods);
	unlink(s->sock_path);
fail_lock:
	pthread_mutex_destroy(&s->lock);
	free(s);
	return rc;
}

static void slot_free(struct csi_slot *slot)
{
	if (slot->call)
		grpc_call_unref(slot->call);
	if (slot->payload)
		grpc_byte_buffer_destroy(slot->payload);
	grpc_metadata_array_destroy(&slot->md);
	if (!slot->method)
		grpc_call_details_destroy(&slot->details);
	grpc_completion_queue_shutdown(slot->call_cq);
	while (grpc_completion_queue_pluck(slot->call_cq, NULL,
					   gpr_inf_past(GPR_CLOCK_REALTIME),
					   NULL)
		       .type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(slot->call_cq);
	free(slot);
}

/* Posts a slot for `m` (NULL: the generic slot). Once stopping, nothing is
 * posted. The lock is held across the request so that a post either comes
 * before grpc_server_shutdown_and_notify() (which then fails it) or sees
 * `stopping`: a request after the queue is shut down would be a bug. */
static void post_slot(struct csi_server *s, struct csi_method *m)
{
	pthread_mutex_lock(&s->lock);
	if (s->stopping) {
		pthread_mutex_unlock(&s->lock);
		return;
	}
	struct csi_slot *slot = csi_calloc(1, sizeof(*slot));
	slot->method = m;
	slot->call_cq = grpc_completion_queue_create_for_pluck(NULL);
	grpc_metadata_array_init(&slot->md);
	grpc_call_error e;
	if (m) {
		e = grpc_server_request_registered_call(
			s->server, m->registered, &slot->call, &slot->deadline,
			&slot->md, &slot->payload, slot->call_cq, s->cq, slot);
	} else {
		grpc_call_details_init(&slot->details);
		e = grpc_server_request_call(s->server, &slot->call,
					     &slot->details, &slot->md,
					     slot->call_cq, s->cq, slot);
	}
	pthread_mutex_unlock(&s->lock);
	if (e != GRPC_CALL_OK) {
		fprintf(stderr, "tierfs-csi: requesting a call for %s: %d\n",
			m ? m->path : "(generic)", (int)e);
		slot_free(slot);
	}
}

static double ms_since(const struct timespec *t0)
{
	struct timespec t1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) * 1e3 +
	       (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Copies an id for the log, with bytes that could forge or break a log
 * line (controls, quotes, non-ASCII) escaped, and cut to a sane length. */
static void log_id(char *out, size_t len, const char *in)
{
	size_t o = 0;
	for (size_t i = 0; in[i] && o + 5 < len; i++) {
		unsigned char c = (unsigned char)in[i];
		if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\')
			o += (size_t)snprintf(out + o, len - o, "\\x%02x", c);
		else
			out[o++] = (char)c;
		if (i + 1 >= CSI_LOG_ID_MAX) {
			snprintf(out + o, len - o, "...");
			return;
		}
	}
	out[o] = '\0';
}

/* The request's volume id, when its type has one: "volume_id", or the
 * "source_volume_id" of CreateSnapshot. Nothing else of a request is ever
 * logged; in particular no secrets map and no mount_flags. */
static const char *request_volume_id(const ProtobufCMessage *req)
{
	static const char *const names[] = {"volume_id", "source_volume_id"};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field_by_name(
				req->descriptor, names[i]);
		if (f && f->type == PROTOBUF_C_TYPE_STRING &&
		    f->label != PROTOBUF_C_LABEL_REPEATED) {
			const char *v =
				*(const char *const *)((const char *)req +
						       f->offset);
			if (v && *v)
				return v;
		}
	}
	return NULL;
}

static void log_call(const char *path, const ProtobufCMessage *req,
		     const struct timespec *t0, grpc_status_code code,
		     const char *msg)
{
	char vol[CSI_LOG_ID_MAX * 4 + 8] = "-";
	const char *v = req ? request_volume_id(req) : NULL;
	if (v)
		log_id(vol, sizeof(vol), v);
	fprintf(stderr, "tierfs-csi: %s volume=%s%s%s %.1fms %s%s%s\n", path,
		v ? "\"" : "", vol, v ? "\"" : "", ms_since(t0),
		csi_status_name(code), msg && *msg ? ": " : "", msg ? msg : "");
}

static int varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
	*v = 0;
	for (int shift = 0; shift < 64 && *p < end; shift += 7) {
		uint8_t b = *(*p)++;
		*v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			return 0;
	}
	return -1;
}

/* protobuf-c ends a string at its first NUL, so "vol/a\0b" would reach a
 * handler as "vol/a". This walks the wire form and returns the name of
 * the first string field (at any depth, map entries included) that holds
 * a NUL, or NULL. Malformed input is left for protobuf-c to refuse. */
static const char *string_with_nul(const ProtobufCMessageDescriptor *d,
				   const uint8_t *p, size_t n, int depth)
{
	const uint8_t *end = p + n;
	while (p < end && depth < 32) {
		uint64_t tag, len;
		if (varint(&p, end, &tag))
			return NULL;
		switch (tag & 7) {
		case 0:
			if (varint(&p, end, &len))
				return NULL;
			continue;
		case 1:
		case 5: {
			size_t w = (tag & 7) == 1 ? 8 : 4;
			if ((size_t)(end - p) < w)
				return NULL;
			p += w;
			continue;
		}
		case 2:
			break;
		default:
			return NULL;
		}
		if (varint(&p, end, &len) || len > (uint64_t)(end - p))
			return NULL;
		const ProtobufCFieldDescriptor *f =
			protobuf_c_message_descriptor_get_field(
				d, (unsigned)(tag >> 3));
		if (f && f->type == PROTOBUF_C_TYPE_STRING &&
		    memchr(p, 0, (size_t)len))
			return f->name;
		if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
			const char *bad = string_with_nul(
				f->descriptor, p, (size_t)len, depth + 1);
			if (bad)
				return bad;
		}
		p += len;
	}
	return NULL;
}

/* Unpacks the request from the byte buffer the core read for us; NULL when
 * it is not a valid message, or (with *nul_field set) when a string in it
 * holds a NUL byte. */
static ProtobufCMessage *unpack(const ProtobufCMessageDescriptor *desc,
				grpc_byte_buffer *bb, const char **nul_field)
{
	*nul_field = NULL;
	if (!bb)
		return NULL;
	grpc_byte_buffer_reader r;
	if (!grpc_byte_buffer_reader_init(&r, bb))
		return NULL;
	grpc_slice all = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*nul_field = string_with_nul(desc, GRPC_SLICE_START_PTR(all),
				     GRPC_SLICE_LENGTH(all), 0);
	ProtobufCMessage *m =
		*nul_field
			? NULL
			: protobuf_c_message_unpack(desc, NULL,
						    GRPC_SLICE_LENGTH(all),
						    GRPC_SLICE_START_PTR(all));
	grpc_slice_unref(all);
	return m;
}

static grpc_byte_buffer *pack(const ProtobufCMessage *m)
{
	size_t n = protobuf_c_message_get_packed_size(m);
	grpc_slice sl = grpc_slice_malloc(n);
	protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(sl));
	grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&sl, 1);
	grpc_slice_unref(sl);
	return bb;
}

/* Sends the reply and waits for it on the slot's own queue. */
static void reply(struct csi_slot *slot, grpc_status_code code, const char *msg,
		  grpc_byte_buffer *resp)
{
	grpc_op ops[4];
	int cancelled = 0;
	size_t n = 0;
	grpc_slice details = grpc_slice_from_copied_string(msg ? msg : "");
	memset(ops, 0, sizeof(ops));
	ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[n++].data.send_initial_metadata.count = 0;
	if (resp) {
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n++].data.send_message.send_message = resp;
	}
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.trailing_metadata_count = 0;
	ops[n].data.send_status_from_server.status = code;
	ops[n++].data.send_status_from_server.status_details =
		code == GRPC_STATUS_OK ? NULL : &details;
	ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[n++].data.recv_close_on_server.cancelled = &cancelled;
	grpc_call_error e =
		grpc_call_start_batch(slot->call, ops, n, slot, NULL);
	if (e == GRPC_CALL_OK)
		grpc_completion_queue_pluck(slot->call_cq, slot,
					    gpr_inf_future(GPR_CLOCK_REALTIME),
					    NULL);
	else
		fprintf(stderr, "tierfs-csi: sending a reply: error %d\n",
			(int)e);
	grpc_slice_unref(details);
}

static void serve_call(struct csi_server *s, struct csi_slot *slot)
{
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct csi_method *m = slot->method;
	struct csi_error err;
	err.msg[0] = '\0';

	if (!m) {
		/* an unregistered path: not a CSI method tierfs knows */
		char path[256];
		size_t n = GRPC_SLICE_LENGTH(slot->details.method);
		if (n >= sizeof(path))
			n = sizeof(path) - 1;
		memcpy(path, GRPC_SLICE_START_PTR(slot->details.method), n);
		path[n] = '\0';
		char esc[sizeof(path) * 4];
		log_id(esc, sizeof(esc), path);
		csi_errorf(&err, GRPC_STATUS_UNIMPLEMENTED, "unknown method %s",
			   esc);
		log_call(esc, NULL, &t0, GRPC_STATUS_UNIMPLEMENTED, err.msg);
		reply(slot, GRPC_STATUS_UNIMPLEMENTED, err.msg, NULL);
		return;
	}

	const char *nul_field;
	ProtobufCMessage *req = unpack(m->input, slot->payload, &nul_field);
	ProtobufCMessage *resp = NULL;
	grpc_status_code code;
	if (!m->fn) {
		code = csi_errorf(
			&err, GRPC_STATUS_UNIMPLEMENTED,
			m->service_off ? "%s: service not served in this --mode"
				       : "%s: not implemented",
			m->path);
	} else if (nul_field) {
		code = csi_errorf(&err, GRPC_STATUS_INVALID_ARGUMENT,
				  "%s: a NUL byte is not allowed", nul_field);
	} else if (!req) {
		code = csi_errorf(&err, GRPC_STATUS_INVALID_ARGUMENT,
				  "the request is not a valid %s",
				  m->input->name);
	} else {
		code = m->fn(s->ctx, req, &resp, &err);
		if (code == GRPC_STATUS_OK && !resp)
			code = csi_errorf(&err, GRPC_STATUS_INTERNAL,
					  "%s: handler gave no response",
					  m->path);
	}
	grpc_byte_buffer *bb = NULL;
	if (code == GRPC_STATUS_OK)
		bb = pack(resp);
	/* logged before the reply leaves, so a caller that has its answer
	 * finds the line already written */
	log_call(m->path, req, &t0, code, err.msg);
	reply(slot, code, err.msg, bb);
	if (bb)
		grpc_byte_buffer_destroy(bb);
	if (resp)
		protobuf_c_message_free_unpacked(resp, NULL);
	if (req)
		protobuf_c_message_free_unpacked(req, NULL);
}

static void *worker(void *arg)
{
	struct csi_server *s = arg;
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(
			s->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		if (ev.tag == &shutdown_tag) {
			/* no call is left: let every thread drain out */
			grpc_completion_queue_shutdown(s->cq);
			continue;
		}
		struct csi_slot *slot = ev.tag;
		if (!ev.success) { /* the server is shutting down */
			slot_free(slot);
			continue;
		}
		post_slot(s, slot->method);
		serve_call(s, slot);
		slot_free(slot);
	}
	return NULL;
}

int csi_server_run(struct csi_server *s, const sigset_t *stop)
{
	grpc_server_start(s->server);
	for (size_t i = 0; i < s->n_methods; i++)
		post_slot(s, &s->methods[i]);
	post_slot(s, NULL);

	pthread_t *tids = csi_calloc(s->threads, sizeof(*tids));
	unsigned started = 0;
	for (; started < s->threads; started++) {
		int rc = pthread_create(&tids[started], NULL, worker, s);
		if (rc) {
			fprintf(stderr,
				"tierfs-csi: starting thread %u: %s; serving "
				"with %u\n",
				started, strerror(rc), started);
			break;
		}
	}
	fprintf(stderr, "tierfs-csi: serving on unix://%s (%u threads)\n",
		s->sock_path, started);

	int sig = 0;
	if (started > 0) {
		int rc = sigwait(stop, &sig);
		if (rc)
			fprintf(stderr, "tierfs-csi: sigwait: %s\n",
				strerror(rc));
	}
	fprintf(stderr, "tierfs-csi: %s: shutting down\n",
		sig ? strsignal(sig) : "no threads");

	pthread_mutex_lock(&s->lock);
	s->stopping = 1;
	grpc_server_shutdown_and_notify(s->server, s->cq,
					(void *)&shutdown_tag);
	pthread_mutex_unlock(&s->lock);
	grpc_server_cancel_all_calls(s->server);
	if (started == 0)
		worker(s); /* nobody else drains the queue */
	for (unsigned i = 0; i < started; i++)
		pthread_join(tids[i], NULL);
	free(tids);
	return 0;
}

void csi_server_destroy(struct csi_server *s)
{
	if (!s)
		return;
	grpc_server_destroy(s->server);
	grpc_completion_queue_destroy(s->cq);
	grpc_shutdown();
	if (unlink(s->sock_path) != 0 && errno != ENOENT)
		fprintf(stderr, "tierfs-csi: removing %s: %s\n", s->sock_path,
			strerror(errno));
	free(s->methods);
	pthread_mutex_destroy(&s->lock);
	free(s);
}
