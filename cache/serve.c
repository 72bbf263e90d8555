/* serve.c: the request loop of a worker, and taking over a live mount.
 *
 * States of one serve_run():
 *   START --init file absent--> read the first request (INIT), save it,
 *         process it                                  --> SERVING
 *   START --init file present--> process the saved INIT (its reply is
 *         refused with ENOENT: that INIT is long answered), write
 *         FUSE_NOTIFY_RESEND                          --> SERVING
 *   SERVING --read() says ENODEV (unmounted), or serve_stop()--> STOPPING:
 *         the threads are woken with SIGUSR1 (no SA_RESTART, so a blocked
 *         read() returns EINTR), finish what they hold and are joined.
 * Requests never arrive by splice (fs.c's init leaves FUSE_CAP_SPLICE_READ
 * off), so each is in memory and its header can be read here. Replies to
 * reads may leave by splice (io_splice_send()).
 *
 * FUSE_HANDLE_KILLPRIV_V2 (Linux 5.11), which libfuse 3.14 cannot ask
 * for: the session writes through serve_attach()'s writev, which adds that
 * flag to the INIT reply when the kernel offered it. With it the kernel
 * sets SB_NOSEC and stops asking GETXATTR "security.capability" before
 * every write; in return the filesystem clears set-user-ID and
 * set-group-ID itself when a request carries FUSE_WRITE_KILL_SUIDGID or
 * FATTR_KILL_SUIDGID, flags libfuse drops and process() keeps for
 * serve_request_kill_suidgid().
 *
 * FUSE_SETXATTR_EXT (Linux 5.16), which libfuse 3.14 cannot ask for
 * either, is added the same way: with it the kernel says when setting an
 * access ACL must clear set-group-ID (FUSE_SETXATTR_ACL_KILL_SGID: the
 * caller is outside the file's group and lacks CAP_FSETID). process()
 * keeps that flag for serve_request_kill_sgid() and cuts the request's
 * longer fuse_setxattr_in to the short form libfuse reads.
 *
 * FUSE passthrough (Linux 6.9, protocol 7.40), which libfuse 3.14 knows
 * nothing of: when the filesystem asks for it (serve_want_passthrough(),
 * from its init) and the kernel offers it, the INIT reply gains
 * FUSE_PASSTHROUGH and a max_stack_depth of 1; the kernel takes it only
 * without FUSE_WRITEBACK_CACHE. An OPEN or CREATE handler that called
 * serve_reply_passthrough() then has its reply carry FOPEN_PASSTHROUGH
 * and the backing id of a cache file (serve_backing_open()): the kernel
 * reads and writes that file itself, with no request for it here.
 * Debian's headers predate it: fuse_init_out's max_stack_depth is their
 * unused[0], fuse_open_out's backing_id their padding, and the flags and
 * ioctls are spelled out below.
 *
 * Each thread reads into a buffer of its own that is faulted in and
 * locked before the first read(). The kernel copies a request into that
 * buffer inside read(); when a page of it must be faulted in while a
 * SIGKILL is pending (the worker being killed), the copy fails and the
 * kernel ends the request with EIO instead of keeping it for
 * FUSE_NOTIFY_RESEND. For a write-back WRITE that is a write lost without
 * a trace. With every page present and locked the copy never faults.
 */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <semaphore.h>
#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef FUSE_UNIQUE_RESEND
#define FUSE_UNIQUE_RESEND (1ULL << 63) /* Linux 6.9, protocol 7.40 */
#endif
#define SERVE_NOTIFY_RESEND 7 /* FUSE_NOTIFY_RESEND, Linux 6.9 */
#define SERVE_INIT_MAX 4096
#define SERVE_HEADER_ROOM 4096 /* a request's headers ahead of its data */

static sem_t stop_sem;
static volatile sig_atomic_t stopping;
static __thread int resent;
static __thread uint64_t unique; /* without FUSE_UNIQUE_RESEND */
static __thread int kill_suidgid;
static __thread int kill_sgid;
static uint64_t init_unique;   /* of the INIT this worker processed */
static uint32_t init_offered;  /* that INIT's flags */
static uint32_t init_offered2; /* and its flags2 (with FUSE_INIT_EXT) */
static int passthrough_wanted;
static int passthrough_on;
static int passthrough_kept = -1; /* what the first worker's INIT said */
static int session_fd = -1;
static __thread int32_t reply_backing;

#define SERVE_INIT_EXT (1u << 30)	  /* FUSE_INIT_EXT, in flags */
#define SERVE_PASSTHROUGH2 (1u << 5)	  /* FUSE_PASSTHROUGH, bit 37 */
#define SERVE_FOPEN_PASSTHROUGH (1u << 7) /* in open_flags */
struct serve_backing_map {
	int32_t fd;
	uint32_t flags;
	uint64_t padding;
};
#define SERVE_IOC_BACKING_OPEN _IOW(229, 1, struct serve_backing_map)
#define SERVE_IOC_BACKING_CLOSE _IOW(229, 2, uint32_t)

void serve_stop(void)
{
	stopping = 1;
	sem_post(&stop_sem);
}

int serve_request_resent(void)
{
	return resent;
}

uint64_t serve_request_unique(void)
{
	return unique;
}

int serve_request_kill_suidgid(void)
{
	return kill_suidgid;
}

int serve_request_kill_sgid(void)
{
	return kill_sgid;
}

int serve_offers_passthrough(void)
{
	return (init_offered & SERVE_INIT_EXT) &&
	       (init_offered2 & SERVE_PASSTHROUGH2);
}

void serve_want_passthrough(void)
{
	passthrough_wanted = 1;
}

int serve_passthrough(void)
{
	return passthrough_on;
}

int serve_kept_passthrough(void)
{
	return passthrough_kept;
}

/* INIT_PATH.pt: whether the first worker's INIT reply asked for
 * passthrough, for a worker that takes over (whose own reply the kernel
 * refuses): the writeback cache or passthrough, whichever the mount has,
 * outlives a change of the conditions (a capacity set since). */
static void pt_path(char *out, size_t n, const char *init_path)
{
	snprintf(out, n, "%s.pt", init_path);
}

static void keep_passthrough(const char *init_path)
{
	char path[4096];
	pt_path(path, sizeof(path), init_path);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, passthrough_on ? "1" : "0", 1) != 1)
		fprintf(stderr, "tierfs: keeping %s: %s\n", path,
			strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void load_kept_passthrough(const char *init_path)
{
	char path[4096], c = 0;
	pt_path(path, sizeof(path), init_path);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && read(fd, &c, 1) == 1 && (c == '0' || c == '1'))
		passthrough_kept = c == '1';
	if (fd >= 0)
		close(fd);
}

int serve_backing_open(int fd)
{
	struct serve_backing_map m = {.fd = fd};
	int id = ioctl(session_fd, SERVE_IOC_BACKING_OPEN, &m);
	return id < 0 ? -errno : id > 0 ? id : -EIO;
}

void serve_backing_close(int id)
{
	uint32_t v = (uint32_t)id;
	if (ioctl(session_fd, SERVE_IOC_BACKING_CLOSE, &v) != 0)
		fprintf(stderr, "tierfs: closing backing file %d: %s\n", id,
			strerror(errno));
}

void serve_reply_passthrough(int backing_id)
{
	reply_backing = backing_id;
}

/* The INIT reply (fuse_init_out in full, as libfuse sends it to a
 * kernel of protocol 7.23 or later) asks for passthrough. */
static void init_add_passthrough(struct iovec *arg)
{
	struct fuse_init_out *out = arg->iov_base;
	if (passthrough_kept >= 0) { /* a takeover: the kernel's, as it is */
		passthrough_on = passthrough_kept;
		return;
	}
	if (!passthrough_wanted || !serve_offers_passthrough() ||
	    arg->iov_len < sizeof(*out) || (out->flags & FUSE_WRITEBACK_CACHE))
		return; /* the kernel takes passthrough only without it */
	out->flags |= SERVE_INIT_EXT;
	out->flags2 |= SERVE_PASSTHROUGH2;
	out->unused[0] = 1; /* max_stack_depth: the cache dir is no FUSE */
	passthrough_on = 1;
}

/* An OPEN reply (fuse_open_out) or CREATE reply (fuse_entry_out, then
 * fuse_open_out) of this thread's handler gets the backing id it asked
 * for. */
static void open_add_passthrough(const struct fuse_out_header *oh,
				 struct iovec *iov, int count)
{
	const size_t open_len = sizeof(struct fuse_open_out);
	int32_t id = reply_backing;
	reply_backing = 0;
	if (!id || count != 2 || oh->error != 0 ||
	    (iov[1].iov_len != open_len &&
	     iov[1].iov_len != sizeof(struct fuse_entry_out) + open_len))
		return;
	struct fuse_open_out out;
	char *at = (char *)iov[1].iov_base + iov[1].iov_len - open_len;
	memcpy(&out, at, open_len);
	out.open_flags |= SERVE_FOPEN_PASSTHROUGH;
	out.padding = (uint32_t)id; /* backing_id */
	memcpy(at, &out, open_len);
}

static ssize_t io_read(int fd, void *buf, size_t len, void *userdata)
{
	(void)userdata;
	return read(fd, buf, len);
}

/* The INIT flags tierfs adds to what libfuse asks for, when offered. */
#define SERVE_ADDED_FLAGS (FUSE_HANDLE_KILLPRIV_V2 | FUSE_SETXATTR_EXT)

/* Every reply and notification goes out here; the INIT reply gains
 * SERVE_ADDED_FLAGS (see the top of this file). libfuse sends a
 * reply as the header in iov[0] and its argument in iov[1]. */
static ssize_t io_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	const struct fuse_out_header *oh = iov[0].iov_base;
	int init_reply = init_unique && count == 2 &&
			 iov[0].iov_len == sizeof(*oh) &&
			 oh->unique == init_unique && oh->error == 0;
	if (init_reply) {
		struct fuse_init_out *out = iov[1].iov_base;
		if (iov[1].iov_len >=
		    offsetof(struct fuse_init_out, flags) + sizeof(uint32_t))
			out->flags |= init_offered & SERVE_ADDED_FLAGS;
		init_add_passthrough(&iov[1]);
	} else if (reply_backing) {
		open_add_passthrough(oh, iov, count);
	}
	return writev(fd, iov, count);
}

/* A reply libfuse sends by splice (fs.c's reply_placed()); without this
 * libfuse 3.14 never splices through a custom io. */
static ssize_t io_splice_send(int fdin, off_t *offin, int fdout, off_t *offout,
			      size_t len, unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int serve_attach(struct fuse_session *se, int fd)
{
	static const struct fuse_custom_io io = {io_writev, io_read, NULL,
						 io_splice_send};
	return fuse_session_custom_io(se, &io, fd) == 0 ? 0 : -EIO;
}

/* What libfuse drops of a request and its handler needs: whether the
 * kernel asks for set-user-ID and set-group-ID to be cleared. */
static int asks_kill_suidgid(const void *mem, size_t n)
{
	const struct fuse_in_header *h = mem;
	const char *arg = (const char *)mem + sizeof(*h);
	if (h->opcode == FUSE_WRITE &&
	    n >= sizeof(*h) + sizeof(struct fuse_write_in)) {
		const struct fuse_write_in *w = (const void *)arg;
		return (w->write_flags & FUSE_WRITE_KILL_SUIDGID) != 0;
	}
	if (h->opcode == FUSE_SETATTR &&
	    n >= sizeof(*h) + sizeof(struct fuse_setattr_in)) {
		const struct fuse_setattr_in *a = (const void *)arg;
		return (a->valid & FATTR_KILL_SUIDGID) != 0;
	}
	return 0;
}

/* Notes the INIT request about to be processed, for io_writev(). */
static void note_init(const void *mem, size_t n)
{
	const struct fuse_in_header *h = mem;
	if (n < sizeof(*h) + offsetof(struct fuse_init_in, flags) +
			sizeof(uint32_t))
		return;
	const struct fuse_init_in *in =
		(const void *)((const char *)mem + sizeof(*h));
	init_offered = in->flags;
	if (n >= sizeof(*h) + offsetof(struct fuse_init_in, flags2) +
			 sizeof(uint32_t))
		init_offered2 = in->flags2;
	init_unique = h->unique;
}

/* A SETXATTR in the FUSE_SETXATTR_EXT form: notes its kill-SGID flag and
 * cuts its fuse_setxattr_in to the FUSE_COMPAT_SETXATTR_IN_SIZE form,
 * moving the name and value up; returns the request's new size. A worker
 * that took over a mount whose INIT reply came from an older tierfs may
 * get the short form: there the bytes after size and flags are the
 * name's first ("user", "syst"...), never 0 or 1 and zero padding. */
static size_t cut_setxattr(char *mem, size_t n)
{
	struct fuse_in_header *h = (void *)mem;
	const size_t full = sizeof(struct fuse_setxattr_in);
	if (h->opcode != FUSE_SETXATTR || !(init_offered & FUSE_SETXATTR_EXT) ||
	    n < sizeof(*h) + full)
		return n;
	const struct fuse_setxattr_in *in = (const void *)(mem + sizeof(*h));
	if ((in->setxattr_flags & ~(uint32_t)FUSE_SETXATTR_ACL_KILL_SGID) ||
	    in->padding)
		return n;
	kill_sgid = (in->setxattr_flags & FUSE_SETXATTR_ACL_KILL_SGID) != 0;
	char *to = mem + sizeof(*h) + FUSE_COMPAT_SETXATTR_IN_SIZE;
	memmove(to, to + (full - FUSE_COMPAT_SETXATTR_IN_SIZE),
		n - sizeof(*h) - full);
	n -= full - FUSE_COMPAT_SETXATTR_IN_SIZE;
	h->len = (uint32_t)n;
	return n;
}

static void on_wake(int sig)
{
	(void)sig; /* only interrupts a blocked read() */
}

/* One thread's request buffer (see the top of this file). */
struct serve_buf {
	char *mem;
	size_t size;
};

static int buf_open(struct serve_buf *b, size_t max_write)
{
	static int warned;
	b->size = max_write + SERVE_HEADER_ROOM;
	b->mem = mmap(NULL, b->size, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
	if (b->mem == MAP_FAILED) {
		b->mem = NULL;
		return -errno;
	}
	/* not zeros: a page of zeros may be swapped for the shared zero
	 * page, which is not writable without a fault */
	memset(b->mem, 0xa5, b->size);
	if (mlock(b->mem, b->size) != 0 &&
	    !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		fprintf(stderr,
			"tierfs: cannot lock request buffers in memory (%s): "
			"a write in flight when a worker is killed may be "
			"lost\n",
			strerror(errno));
	return 0;
}

static void buf_close(struct serve_buf *b)
{
	if (b->mem)
		munmap(b->mem, b->size);
	b->mem = NULL;
}

/* Reads one request: its size, 0 when the kernel ended the connection,
 * -EINTR/-EAGAIN to try again, else -errno. */
static ssize_t receive(struct fuse_session *se, struct serve_buf *b)
{
	for (;;) {
		ssize_t n = read(fuse_session_fd(se), b->mem, b->size);
		if (n < 0 && errno == ENOENT)
			continue; /* interrupted before it was read */
		if (n < 0)
			return errno == ENODEV ? 0 : -errno;
		if (n == 0)
			return 0;
		if ((size_t)n < sizeof(struct fuse_in_header))
			return -EIO;
		return n;
	}
}

static void process(struct fuse_session *se, struct serve_buf *b, size_t n)
{
	struct fuse_buf buf;
	memset(&buf, 0, sizeof(buf));
	buf.mem = b->mem;
	buf.size = n;
	const struct fuse_in_header *h = buf.mem;
	resent = (h->unique & FUSE_UNIQUE_RESEND) != 0;
	unique = h->unique & ~FUSE_UNIQUE_RESEND;
	kill_suidgid = asks_kill_suidgid(buf.mem, n);
	buf.size = cut_setxattr(buf.mem, n);
	fuse_session_process_buf(se, &buf);
	resent = 0;
	unique = 0;
	kill_suidgid = 0;
	kill_sgid = 0;
}

struct serve_thread_arg {
	struct fuse_session *se;
	size_t max_write;
};

static void *serve_thread(void *arg)
{
	const struct serve_thread_arg *a = arg;
	struct serve_buf b;
	int rc = buf_open(&b, a->max_write);
	if (rc) {
		fprintf(stderr, "tierfs: request buffer: %s\n", strerror(-rc));
		serve_stop();
		return NULL;
	}
	while (!stopping) {
		ssize_t n = receive(a->se, &b);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0) { /* 0: the kernel ended the connection */
			if (n < 0)
				fprintf(stderr,
					"tierfs: reading /dev/fuse: %s\n",
					strerror((int)-n));
			serve_stop();
			break;
		}
		process(a->se, &b, (size_t)n);
	}
	buf_close(&b);
	return NULL;
}

static int write_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? -errno : -EIO;
		p = (const char *)p + w;
		n -= (size_t)w;
	}
	return 0;
}

/* The first worker: reads INIT, keeps a copy (written whole, then renamed,
 * so a takeover never reads half of one), processes it. */
static int first_init(struct fuse_session *se, const char *path,
		      size_t max_write)
{
	struct serve_buf b;
	char tmp[4096];
	ssize_t n;
	int rc = buf_open(&b, max_write);
	if (rc)
		return rc;
	do
		n = receive(se, &b);
	while (n == -EINTR || n == -EAGAIN);
	if (n <= 0) {
		buf_close(&b);
		return n < 0 ? (int)n : -ENODEV;
	}
	const struct fuse_in_header *h = (const void *)b.mem;
	if ((size_t)n < sizeof(*h) || h->opcode != FUSE_INIT ||
	    (size_t)n > SERVE_INIT_MAX) {
		fprintf(stderr, "tierfs: the first request is not INIT\n");
		rc = -EPROTO;
	}
	if (!rc &&
	    snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		rc = -ENAMETOOLONG;
	int fd = rc ? -1
		    : open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (!rc && fd < 0)
		rc = -errno;
	if (!rc)
		rc = write_all(fd, b.mem, (size_t)n);
	if (fd >= 0 && close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		fprintf(stderr,
			"tierfs: keeping the INIT request in %s: %s; a crash "
			"of this worker will not be survived\n",
			path, strerror(-rc));
	if (rc != -EPROTO) {
		note_init(b.mem, (size_t)n);
		process(se, &b, (size_t)n);
		keep_passthrough(path);
	}
	buf_close(&b);
	return rc == -EPROTO ? rc : 0;
}

/* A worker taking over: the saved INIT readies the session; then the
 * kernel is asked to resend what the dead worker had read. */
static int takeover_init(struct fuse_session *se, const char *path)
{
	char *mem = malloc(SERVE_INIT_MAX);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 && mem ? read(fd, mem, SERVE_INIT_MAX) : -1;
	if (fd >= 0)
		close(fd);
	if (n < (ssize_t)sizeof(struct fuse_in_header)) {
		free(mem);
		fprintf(stderr, "tierfs: unreadable INIT copy %s\n", path);
		return -EIO;
	}
	struct fuse_buf buf;
	memset(&buf, 0, sizeof(buf));
	buf.mem = mem;
	buf.size = (size_t)n;
	note_init(mem, (size_t)n);
	load_kept_passthrough(path);
	fuse_session_process_buf(se, &buf); /* its reply: ENOENT, ignored */
	free(mem);
	struct fuse_out_header oh = {
		.len = sizeof(oh), .error = SERVE_NOTIFY_RESEND, .unique = 0};
	int rc = write_all(fuse_session_fd(se), &oh, sizeof(oh));
	if (rc)
		fprintf(stderr,
			"tierfs: FUSE_NOTIFY_RESEND refused (%s; Linux >= 6.9 "
			"needed): requests the last worker held may hang\n",
			strerror(-rc));
	return 0;
}

int serve_run(struct fuse_session *se, const struct serve_config *cfg)
{
	int threads = cfg->threads > 0 ? cfg->threads : SERVE_DEFAULT_THREADS;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_wake; /* no SA_RESTART: read() returns EINTR */
	sigemptyset(&sa.sa_mask);
	if (sem_init(&stop_sem, 0, 0) != 0 || sigaction(SIGUSR1, &sa, NULL))
		return -errno;
	size_t max_write =
		cfg->max_write ? cfg->max_write : SERVE_DEFAULT_MAX_WRITE;
	struct serve_thread_arg arg = {se, max_write};
	session_fd = fuse_session_fd(se);
	int takeover = access(cfg->init_path, F_OK) == 0;
	int rc = takeover ? takeover_init(se, cfg->init_path)
			  : first_init(se, cfg->init_path, max_write);
	if (rc)
		return rc;
	if (cfg->ready)
		cfg->ready(cfg->ready_ctx, takeover);
	pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
	int started = 0;
	for (; tids && started < threads && !stopping; started++)
		if (pthread_create(&tids[started], NULL, serve_thread, &arg))
			break;
	if (started == 0) {
		free(tids);
		return -EAGAIN;
	}
	while (sem_wait(&stop_sem) != 0 && errno == EINTR)
		;
	stopping = 1;
	/* wake each thread until it is gone: one that was between its check
	 * and its read() when the first signal came gets the next one */
	for (int i = 0; i < started; i++) {
		for (;;) {
			pthread_kill(tids[i], SIGUSR1);
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_nsec += 100 * 1000000L;
			if (ts.tv_nsec >= 1000000000L) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000L;
			}
			if (pthread_timedjoin_np(tids[i], NULL, &ts) == 0)
				break;
		}
	}
	free(tids);
	return 0;
}
