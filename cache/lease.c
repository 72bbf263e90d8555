/* lease.c: the volume's write lease (see lease.h).
 *
 * The object's body is text, one "name=value" per line: owner (the cache
 * dir's id), host, pid and renewed (Unix seconds). Unknown lines are
 * ignored, so later versions can add fields. A grant (lease.h) has owner
 * LEASE_GRANT_OWNER and no pid.
 */
#include "lease.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "layout.h"

#define LEASE_BODY_MAX 1024

static int read_or_make_owner(const char *cache_dir, char *owner)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/owner", cache_dir);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, owner, LEASE_OWNER_LEN);
		close(fd);
		if (n == LEASE_OWNER_LEN) {
			owner[LEASE_OWNER_LEN] = '\0';
			return 0;
		}
	}
	unsigned char raw[LEASE_OWNER_LEN / 2];
	if (getrandom(raw, sizeof(raw), 0) != (ssize_t)sizeof(raw))
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(owner + 2 * i, 3, "%02x", raw[i]);
	char tmp[4096 + 8];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	int rc =
		write(fd, owner, LEASE_OWNER_LEN) == LEASE_OWNER_LEN ? 0 : -EIO;
	if (fsync(fd) != 0 && !rc)
		rc = -errno;
	close(fd);
	if (!rc && rename(tmp, path) != 0)
		rc = -errno;
	return rc;
}

int lease_init(struct lease *l, s3_client *s3, const char *bucket,
	       const char *prefix, const char *cache_dir, const char *host)
{
	memset(l, 0, sizeof(*l));
	l->s3 = s3;
	if (host &&
	    (!*host || strlen(host) >= sizeof(l->host) || strchr(host, '\n')))
		return -EINVAL;
	int rc = read_or_make_owner(cache_dir, l->owner);
	if (rc)
		return rc;
	if (host)
		snprintf(l->host, sizeof(l->host), "%s", host);
	else if (gethostname(l->host, sizeof(l->host)) != 0)
		snprintf(l->host, sizeof(l->host), "unknown");
	l->host[sizeof(l->host) - 1] = '\0';
	l->bucket = strdup(bucket);
	if (*prefix)
		rc = asprintf(&l->key, "%s/%s/lease", prefix,
			      LAYOUT_PRIVATE_DIR) < 0;
	else
		rc = asprintf(&l->key, "%s/lease", LAYOUT_PRIVATE_DIR) < 0;
	if (rc)
		l->key = NULL;
	if (!l->bucket || !l->key) {
		lease_free(l);
		return -ENOMEM;
	}
	return 0;
}

void lease_free(struct lease *l)
{
	free(l->bucket);
	free(l->key);
	l->bucket = NULL;
	l->key = NULL;
}

struct holder {
	char owner[LEASE_OWNER_LEN + 1];
	char host[64];
	long long renewed;
};

static void field(const char *body, const char *name, char *out, size_t len)
{
	size_t nl = strlen(name);
	out[0] = '\0';
	for (const char *p = body; p && *p;
	     p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, name, nl) == 0 && p[nl] == '=') {
			const char *v = p + nl + 1;
			size_t n = strcspn(v, "\n");
			if (n >= len)
				n = len - 1;
			memcpy(out, v, n);
			out[n] = '\0';
			return;
		}
	}
}

/* -ENOENT when there is no lease. */
static int read_holder(struct lease *l, struct holder *h)
{
	char body[LEASE_BODY_MAX + 1], when[32];
	struct s3_error e;
	ssize_t n = s3_get_buf(l->s3, l->bucket, l->key, 0, S3_TO_END, body,
			       LEASE_BODY_MAX, NULL, NULL, &e);
	if (n < 0)
		return (int)n;
	body[n] = '\0';
	field(body, "owner", h->owner, sizeof(h->owner));
	field(body, "host", h->host, sizeof(h->host));
	field(body, "renewed", when, sizeof(when));
	h->renewed = strtoll(when, NULL, 10);
	return 0;
}

static int write_ours(struct lease *l)
{
	char body[LEASE_BODY_MAX];
	struct s3_error e;
	int n = snprintf(body, sizeof(body),
			 "owner=%s\nhost=%s\npid=%d\nrenewed=%lld\n", l->owner,
			 l->host, (int)getpid(), (long long)time(NULL));
	struct s3_put_opts o = {"text/plain", NULL, 0};
	return s3_put_buf(l->s3, l->bucket, l->key, body, (size_t)n, &o, NULL,
			  &e);
}

static int is_grant(const struct holder *h)
{
	return strcmp(h->owner, LEASE_GRANT_OWNER) == 0;
}

/* Whether h leaves the lease to l: ours already, or granted to our host. */
static int is_for_us(const struct lease *l, const struct holder *h)
{
	return strcmp(h->owner, l->owner) == 0 ||
	       (is_grant(h) && strcmp(h->host, l->host) == 0);
}

static void describe(const struct holder *h, char *why, size_t len)
{
	long long age = (long long)time(NULL) - h->renewed;
	if (is_grant(h)) {
		snprintf(why, len, "granted to node '%s' %lld s ago",
			 h->host[0] ? h->host : "?", age);
		return;
	}
	snprintf(why, len,
		 "held by host '%s' (cache id %.8s), last renewed %lld s ago",
		 h->host[0] ? h->host : "?", h->owner, age);
}

int lease_claim(struct lease *l, int take_over, char *why, size_t len)
{
	struct holder h;
	int rc = read_holder(l, &h);
	if (rc == 0 && !is_for_us(l, &h) && !take_over) {
		describe(&h, why, len);
		return -EBUSY;
	}
	if (rc && rc != -ENOENT)
		return rc;
	rc = write_ours(l);
	if (!rc)
		clock_gettime(CLOCK_MONOTONIC, &l->claimed);
	return rc;
}

int lease_confirm(struct lease *l, char *why, size_t len)
{
	/* no conditional PUT on Swift: of two racing, the last PUT wins and
	 * the other one sees it here */
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	long long waited = (now.tv_sec - l->claimed.tv_sec) * 1000LL +
			   (now.tv_nsec - l->claimed.tv_nsec) / 1000000;
	if (waited < LEASE_SETTLE_MS)
		usleep((useconds_t)(LEASE_SETTLE_MS - waited) * 1000);
	struct holder h;
	int rc = read_holder(l, &h);
	if (rc == 0 && strcmp(h.owner, l->owner) != 0) {
		describe(&h, why, len);
		return -EBUSY;
	}
	return rc;
}

void lease_describe(struct lease *l, char *why, size_t len)
{
	struct holder h;
	int rc = read_holder(l, &h);
	if (rc == 0)
		describe(&h, why, len);
	else
		snprintf(why, len, "unreadable (%s)", strerror(-rc));
}

int lease_renew(struct lease *l, char *why, size_t len)
{
	struct holder h;
	int rc = read_holder(l, &h);
	/* a grant to our host (the controller published here again) is
	 * ours to take; one to another host fences us */
	if (rc == 0 && !is_for_us(l, &h)) {
		describe(&h, why, len);
		return -EBUSY;
	}
	if (rc && rc != -ENOENT)
		return rc;
	return write_ours(l);
}

int lease_release(struct lease *l)
{
	struct holder h;
	struct s3_error e;
	int rc = read_holder(l, &h);
	if (rc == -ENOENT)
		return 0;
	if (rc)
		return rc;
	if (strcmp(h.owner, l->owner) != 0)
		return 0; /* taken over: not ours to delete */
	return s3_delete_object(l->s3, l->bucket, l->key, &e);
}
