/* Failed groups of an online run: the trainer reads the run's dead stream (cpt:{run}:dead, where every role puts a
 * message it cannot finish, with the reason and the original bytes: queue/stream.h) and its own in-flight
 * timeout, and turns each failure of a group it has in flight into a bounded re-issue and then a skip
 * (trainer/online_book.h cpt_book_failed). A run therefore never waits without end for a group that cannot be
 * completed. */
#ifndef CPT_TRAINER_ONLINE_DEAD_H
#define CPT_TRAINER_ONLINE_DEAD_H

#include "core/error.h"
#include "queue/stream.h"
#include "trainer/online_book.h"

typedef struct cpt_dead_reader {
    char cursor[CPT_STREAM_ID_MAX]; /* the last dead entry looked at */
    uint32_t max_retries;           /* queue.group_retries */
    double timeout_s;               /* queue.group_timeout_s; 0: no timeout */
} cpt_dead_reader;

/* Starts after the dead stream's current last entry: what was dead-lettered before this trainer start concerns
 * attempts of an earlier start, which its book does not issue again. */
int cpt_dead_reader_init(cpt_dead_reader *r, cpt_queue *q, uint32_t max_retries, double timeout_s, cpt_err *err);

/* Applies the dead entries added since the last call and the in-flight timeout (now on the clock of the book's
 * issued_at) to the book, logging each retry and skip with the reason. Non-blocking. Returns the number of groups
 * sent back for a re-issue or skipped, or -1. */
int cpt_dead_reader_poll(cpt_dead_reader *r, cpt_queue *q, cpt_online_book *b, double now, cpt_err *err);

#endif
