/* Handing a gone consumer's work to the others at once: every entry it holds pending in a stream's group is made to
 * look idle past queue.claim_idle_ms (XCLAIM to itself with IDLE, JUSTID: the delivery count stays), so the next
 * consumer that looks for abandoned work (every claim_idle_ms / 4, at most 1 s) takes it, instead of after
 * claim_idle_ms. The launcher calls it for a satellite whose job ended (preempted, killed, past its time limit):
 * its worker may not have handed back what it held. Exactly-once is unaffected: an entry is acked once, and a
 * result forwarded twice is dropped downstream as a duplicate. */
#ifndef CPT_QUEUE_RELEASE_H
#define CPT_QUEUE_RELEASE_H

#include "core/error.h"
#include "queue/redis.h"

/* Returns how many entries of consumer were released in key's group (entries already idle past claim_idle_ms, which
 * the worker handed back itself, are left as they are and not counted), or -1 with err. */
long cpt_queue_release_consumer(cpt_redis *r, const char *key, const char *group, const char *consumer,
                                long long claim_idle_ms, cpt_err *err);

#endif
