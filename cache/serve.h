/* serve.h: serving a FUSE session from our own threads, so that a new
 * worker process can take over a live mount from one that died.
 *
 * The kernel sends FUSE_INIT once per mount, and libfuse rejects every
 * request until its session has processed one. The first worker saves the
 * raw INIT request to a file before it processes it; a worker that takes
 * over feeds that saved INIT to its own session (the kernel rejects the
 * reply with ENOENT, which libfuse ignores), then writes a
 * FUSE_NOTIFY_RESEND notification (Linux >= 6.9), so the kernel queues
 * again every request the dead worker had read and not answered. Those
 * arrive with FUSE_UNIQUE_RESEND set in their unique id, which
 * serve_request_resent() reports to the handler, so that operations that
 * are not idempotent by nature (create, unlink, rename...) can recognise
 * their own earlier effect.
 * Threading: serve_run() runs cfg->threads threads that each read and
 * process requests; serve_stop() may be called from a signal handler.
 * One serve_run() per process.
 */
#ifndef TIERFS_SERVE_H
#define TIERFS_SERVE_H

#define FUSE_USE_VERSION 35
#include <fuse3/fuse_lowlevel.h>

#define SERVE_DEFAULT_THREADS 16
#define SERVE_DEFAULT_MAX_WRITE (1u << 20)

struct serve_config {
	int threads;
	/* the max_write the filesystem's init asks for (0: the default);
	 * each thread's buffer holds one WRITE of that size */
	size_t max_write;
	const char *init_path; /* where the INIT request is kept (0600) */
	/* called once INIT is processed, before the threads start */
	void (*ready)(void *ctx, int takeover);
	void *ready_ctx;
};

/* Makes se serve the /dev/fuse descriptor fd (closed with the session),
 * writing through serve.c so that the INIT reply asks for
 * FUSE_HANDLE_KILLPRIV_V2. 0 or -errno. */
int serve_attach(struct fuse_session *se, int fd);
/* Serves se until the kernel ends the connection (unmount) or
 * serve_stop(). Takes over (replays cfg->init_path and asks for a resend)
 * when that file exists, else saves the first request there. 0 on unmount
 * or stop, else -errno. */
int serve_run(struct fuse_session *se, const struct serve_config *cfg);
/* Ends serve_run(); async-signal-safe. */
void serve_stop(void);
/* 1 when the request this thread is handling was resent by the kernel
 * after a worker died: its effect may already be in the store. */
int serve_request_resent(void);
/* The kernel's id of the request this thread is handling (0: none): it
 * is the same when the request is sent again, and no other request of
 * the mount has it. */
uint64_t serve_request_unique(void);
/* 1 when the request this thread is handling (a WRITE or a SETATTR) asks
 * the filesystem to clear set-user-ID, and set-group-ID when the group
 * may execute (FUSE_HANDLE_KILLPRIV_V2): the caller lacks CAP_FSETID, or
 * it is a chown. */
int serve_request_kill_suidgid(void);
/* 1 when the request this thread is handling sets an access ACL that must
 * clear set-group-ID (FUSE_SETXATTR_ACL_KILL_SGID, see serve.c). */
int serve_request_kill_sgid(void);

/* FUSE passthrough (see serve.c). serve_offers_passthrough(): the INIT
 * being processed offers it (for the filesystem's init);
 * serve_want_passthrough(): its reply is to ask for it;
 * serve_passthrough(): it did. */
int serve_offers_passthrough(void);
void serve_want_passthrough(void);
int serve_passthrough(void);
/* In a worker that takes over: 1 or 0, what the mount's INIT reply said
 * of passthrough (the kernel keeps that); -1 in the first worker, or
 * when that is not known. */
int serve_kept_passthrough(void);
/* Registers fd (a cache file) with the kernel for passthrough: its
 * backing id (> 0), or -errno (-EPERM without CAP_SYS_ADMIN). The id
 * stays until serve_backing_close(); files the kernel opened on it keep
 * it alive after that. */
int serve_backing_open(int fd);
void serve_backing_close(int id);
/* The OPEN or CREATE reply this thread sends next is a passthrough open
 * of backing_id. */
void serve_reply_passthrough(int backing_id);

#endif
