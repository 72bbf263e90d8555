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
 * Splice is never asked for (fs.c's init leaves it off), so every request
 * arrives in memory and its header can be read here.
 */
#include "serve.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef FUSE_UNIQUE_RESEND
#define FUSE_UNIQUE_RESEND (1ULL << 63) /* Linux 6.9, protocol 7.40 */
#endif
#define SERVE_NOTIFY_RESEND 7 /* FUSE_NOTIFY_RESEND, Linux 6.9 */
#define SERVE_INIT_MAX 4096

static sem_t stop_sem;
static volatile sig_atomic_t stopping;
static __thread int resent;

void serve_stop(void)
{
	stopping = 1;
	sem_post(&stop_sem);
}

int serve_request_resent(void)
{
	return resent;
}

static void on_wake(int sig)
{
	(void)sig; /* only interrupts a blocked read() */
}

static void process(struct fuse_session *se, const struct fuse_buf *buf)
{
	const struct fuse_in_header *h = buf->mem;
	resent = !(buf->flags & FUSE_BUF_IS_FD) && buf->size >= sizeof(*h) &&
		 (h->unique & FUSE_UNIQUE_RESEND);
	fuse_session_process_buf(se, buf);
	resent = 0;
}

static void *serve_thread(void *arg)
{
	struct fuse_session *se = arg;
	struct fuse_buf buf;
	memset(&buf, 0, sizeof(buf));
	while (!stopping) {
		int n = fuse_session_receive_buf(se, &buf);
		if (n == -EINTR || n == -EAGAIN)
			continue;
		if (n <= 0) { /* 0: the kernel ended the connection */
			if (n < 0)
				fprintf(stderr,
					"tierfs: reading /dev/fuse: %s\n",
					strerror(-n));
			serve_stop();
			break;
		}
		process(se, &buf);
	}
	free(buf.mem);
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
static int first_init(struct fuse_session *se, const char *path)
{
	struct fuse_buf buf;
	char tmp[4096];
	int n;
	memset(&buf, 0, sizeof(buf));
	do
		n = fuse_session_receive_buf(se, &buf);
	while (n == -EINTR || n == -EAGAIN);
	if (n <= 0) {
		free(buf.mem);
		return n < 0 ? n : -ENODEV;
	}
	const struct fuse_in_header *h = buf.mem;
	int rc = 0;
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
		rc = write_all(fd, buf.mem, (size_t)n);
	if (fd >= 0 && close(fd) != 0 && !rc)
		rc = -errno;
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	if (rc)
		fprintf(stderr,
			"tierfs: keeping the INIT request in %s: %s; a crash "
			"of this worker will not be survived\n",
			path, strerror(-rc));
	if (rc != -EPROTO)
		process(se, &buf);
	free(buf.mem);
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
	int takeover = access(cfg->init_path, F_OK) == 0;
	int rc = takeover ? takeover_init(se, cfg->init_path)
			  : first_init(se, cfg->init_path);
	if (rc)
		return rc;
	if (cfg->ready)
		cfg->ready(cfg->ready_ctx, takeover);
	pthread_t *tids = calloc((size_t)threads, sizeof(*tids));
	int started = 0;
	for (; tids && started < threads && !stopping; started++)
		if (pthread_create(&tids[started], NULL, serve_thread, se))
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
