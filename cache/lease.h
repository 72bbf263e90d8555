/* lease.h: the volume's write lease, PREFIX/.tierfs/lease, so that an RWO
 * volume never has two silent writers.
 *
 * The lease names its holder: an owner id kept in the holder's cache dir
 * (so a remount of the same cache dir, on the same node, is the same
 * holder), the host name, and when it was last renewed. A read-write mount
 * takes it, renews it every LEASE_RENEW_S, and deletes it at a clean
 * unmount. A mount that finds another holder's lease is refused, however
 * old the lease is: taking over from a node that died is explicit
 * (--take-over, or the CSI controller's publish). The controller's publish
 * writes a grant, owner LEASE_GRANT_OWNER and host the node it publishes
 * to: a mount on that host (--node) takes it as if it were free; a mount
 * on any other host is refused as by a live holder. A holder that finds at
 * renewal that someone else took the lease is fenced: it stops writing to
 * S3.
 * Swift has no conditional PUT, so taking the lease is PUT then GET: of two
 * nodes racing, the one whose PUT landed last keeps it and the other is
 * refused. The GET comes LEASE_SETTLE_MS after the PUT; lease_claim() and
 * lease_confirm() split the two, so that a mount loads the volume in
 * between and writes nothing to S3 before the confirmation.
 * Threading: none inside; the caller serialises calls on one lease.
 */
#ifndef TIERFS_LEASE_H
#define TIERFS_LEASE_H

#include <stddef.h>
#include <time.h>

#include "../s3/s3.h"

#define LEASE_RENEW_S 30
#define LEASE_OWNER_LEN 32	  /* hex characters */
#define LEASE_GRANT_OWNER "grant" /* written by ControllerPublishVolume */
#define LEASE_SETTLE_MS 200	  /* a racing PUT lands within this */

struct lease {
	s3_client *s3; /* borrowed */
	char *bucket;  /* owned */
	char *key;     /* owned: PREFIX/.tierfs/lease */
	char owner[LEASE_OWNER_LEN + 1];
	char host[64];
	struct timespec claimed; /* CLOCK_MONOTONIC: our PUT, lease_claim() */
};

/* Reads (or makes, 0600) CACHE_DIR/owner and fills l; host is the name the
 * lease gives this node (the CSI node id), NULL for gethostname(); -errno,
 * -EINVAL when host does not fit. */
int lease_init(struct lease *l, s3_client *s3, const char *bucket,
	       const char *prefix, const char *cache_dir, const char *host);
void lease_free(struct lease *l);
/* Takes the lease, first half: it must be free, ours, or granted to our
 * host, else -EBUSY (why says who and since when) unless take_over; then
 * our PUT. Other -errno for S3 failures. */
int lease_claim(struct lease *l, int take_over, char *why, size_t len);
/* The second half: LEASE_SETTLE_MS after the claim's PUT, reads the lease
 * back; -EBUSY (why says who) when a racing PUT took it. Only then is it
 * ours. */
int lease_confirm(struct lease *l, char *why, size_t len);
/* Says who holds the lease now, into why. */
void lease_describe(struct lease *l, char *why, size_t len);
/* Renews it: -EBUSY (why says who) when someone else holds it now. */
int lease_renew(struct lease *l, char *why, size_t len);
/* Deletes it, if it is still ours. */
int lease_release(struct lease *l);

#endif
