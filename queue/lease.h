/* The trainer lease: at most one trainer writes to a run's queue.
 *
 * Two keys: cpt:{run}:trainer_lease holds "TOKEN HOLDER" with a TTL (PX), and cpt:{run}:trainer_fence holds the
 * newest token ever issued (an INCR counter that never expires). A trainer takes the lease when it is free
 * (getting a new token), renews it from a thread of its own every ttl/3, and gives it back on a clean exit; a
 * trainer killed with -9 leaves it to expire.
 *
 * Writes that matter (the weights announcement, prompt adds, the checkpoint switch) carry the token and are
 * refused when trainer_fence names a newer one: a trainer that was paused or cut off past its TTL while another
 * took over finds itself fenced off at its next write, which fails with an error reply starting "FENCED", and
 * writes nothing. A lease that expired with nobody taking it is taken back by its holder's next renewal. */
#ifndef CPT_QUEUE_LEASE_H
#define CPT_QUEUE_LEASE_H

#include <signal.h>
#include <stdint.h>

#include "core/error.h"
#include "queue/redis.h"

#define CPT_LEASE_HOLDER_MAX 128
#define CPT_LEASE_KEY_MAX 160

/* The two keys of run's lease. */
void cpt_lease_keys(const char *run, char lease_key[CPT_LEASE_KEY_MAX], char fence_key[CPT_LEASE_KEY_MAX]);

/* "HOST:PID": what a holder calls itself, for messages. */
void cpt_lease_default_holder(char *out, size_t cap);

/* One attempt to take the lease. 1: taken, *token set; 0: someone holds it (*other gets "TOKEN HOLDER" and
 * *other_ttl_ms its remaining time; either may be NULL); -1: error. */
int cpt_lease_try(cpt_redis *r, const char *run, const char *holder, int ttl_ms, int64_t *token, char *other,
                  size_t other_cap, long long *other_ttl_ms, cpt_err *err);
/* Takes the lease over from a holder known to be gone, if its value is still `seen` ("TOKEN HOLDER"): 1 with a new
 * *token, 0 when it changed meanwhile, -1. cpt_lease_acquire does it for a holder of this host whose process no
 * longer exists (a trainer killed with -9), instead of waiting for the lease to expire. */
int cpt_lease_take_over(cpt_redis *r, const char *run, const char *seen, const char *holder, int ttl_ms,
                        int64_t *token, cpt_err *err);
/* Extends the lease of token by ttl_ms (taking it back if it expired and nobody else took it). 1: renewed;
 * 0: fenced off (a newer token exists); -1: error. */
int cpt_lease_renew(cpt_redis *r, const char *run, int64_t token, const char *holder, int ttl_ms, cpt_err *err);
/* 0 when token is still the newest; -1 with "fenced off ..." (or a Redis error) otherwise. */
int cpt_lease_check(cpt_redis *r, const char *run, int64_t token, cpt_err *err);
/* Deletes the lease if token still holds it (the fence counter stays). 1: deleted, 0: not ours, -1: error. */
int cpt_lease_give_back(cpt_redis *r, const char *run, int64_t token, cpt_err *err);

/* An error reply from a fenced write ("FENCED ..."), as left in r->server_error. */
int cpt_lease_is_fenced_reply(const cpt_redis *r);

/* A held lease with its renewal thread (on a connection of its own). */
typedef struct cpt_lease cpt_lease;

typedef struct cpt_lease_opts {
    const char *url, *password_file; /* the queue's */
    const char *tls_ca;              /* rediss://: the CA of the server's certificate; NULL or "": the system's */
    const char *run;
    const char *holder;  /* NULL: cpt_lease_default_holder */
    int ttl_ms;          /* > 0 */
    double wait_s;       /* how long to wait for a held lease to be given back or expire */
    volatile sig_atomic_t *stop; /* optional: ends the wait */
} cpt_lease_opts;

/* Takes the lease, waiting up to wait_s while another holder has it, and starts renewing it. NULL with a message
 * naming the holder when it stays taken. */
cpt_lease *cpt_lease_acquire(const cpt_lease_opts *o, cpt_err *err);
int64_t cpt_lease_token(const cpt_lease *l);
/* 1 once a renewal found a newer token: the holder must stop writing and exit. */
int cpt_lease_lost(const cpt_lease *l);
/* Stops renewing and gives the lease back if still ours; NULL is fine. */
void cpt_lease_release(cpt_lease *l);

#endif
