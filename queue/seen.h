/* A set of group ids a consumer has finished, to drop duplicates: a retried XADD after a lost connection, or a
 * group issued again after a resume, may arrive twice; the second copy is acked and dropped. Open addressing
 * over (epoch, index) pairs; it grows, it never forgets (16 bytes per group). */
#ifndef CPT_QUEUE_SEEN_H
#define CPT_QUEUE_SEEN_H

#include <stddef.h>
#include <stdint.h>

#include "queue/schema.h"

typedef struct cpt_seen {
    cpt_group_id *slots;
    uint8_t *used;
    size_t cap, n;
} cpt_seen;

void cpt_seen_init(cpt_seen *s);
void cpt_seen_free(cpt_seen *s);
int cpt_seen_has(const cpt_seen *s, cpt_group_id id);
/* 1: added, 0: already there, -1: out of memory. */
int cpt_seen_add(cpt_seen *s, cpt_group_id id);

#endif
