/* The online trainer's ranks (trainer/online.c with more than one trainer rank): rank 0 is the whole trainer (lease,
 * queue, bookkeeping, weights, metrics, checkpoints); the other ranks hold the same models and learner and follow it
 * step by step through the host collectives of trainer/dp.h.
 *
 * Between steps the other ranks wait for rank 0's next fixed-size header (cpt_ranks_send / cpt_ranks_recv):
 *   START   {step}: the step rank 0 resumed from (-1 fresh); the others load that checkpoint (model and optimizer).
 *   TRAIN   {step, groups, payload bytes} and the step's scored groups in the wire schema (queue/schema.h), decoded
 *           on every rank (rank 0 too, cpt_ranks_send_step), so every rank builds the same batch. Then every rank
 *           runs the sharded learner step (trainer/online_step.h) and cpt_ranks_agree_stop (a stop request seen by
 *           any rank stops all after this step), and at a checkpoint step cpt_ranks_check_replicas.
 *   FINISH  rank 0 leaves its loop: every rank runs cpt_ranks_check_replicas; rank 0 writes the final checkpoint.
 *   EXIT    {status}: every rank exits with it.
 *   FAIL    rank 0 failed between steps (its log says why): the others exit 1. */
#ifndef CPT_TRAINER_ONLINE_RANKS_H
#define CPT_TRAINER_ONLINE_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "model/model.h"
#include "queue/schema.h"
#include "trainer/dp.h"

enum { CPT_RANKS_START = 1, CPT_RANKS_TRAIN, CPT_RANKS_FINISH, CPT_RANKS_EXIT, CPT_RANKS_FAIL };

typedef struct cpt_ranks_header {
    int64_t command;       /* CPT_RANKS_* */
    int64_t step;          /* START: resumed from (-1 fresh); TRAIN: the 0-based step about to run; else reached */
    int64_t n_groups;      /* TRAIN */
    int64_t payload_bytes; /* TRAIN: the encoded groups, each as a u64 length and its bytes */
    int64_t status;        /* EXIT: the exit status of every rank */
} cpt_ranks_header;

/* The step's groups, decoded from the payload every rank received. */
typedef struct cpt_ranks_groups {
    cpt_rollout_group *g;
    size_t n;
} cpt_ranks_groups;
void cpt_ranks_groups_free(cpt_ranks_groups *gs);

/* Rank 0: header TRAIN and the n groups in[] to every rank; out gets them decoded from the payload. */
int cpt_ranks_send_step(cpt_dp *dp, int64_t step, const cpt_rollout_group *const *in, size_t n,
                        cpt_ranks_groups *out, cpt_err *err);
/* Other ranks: the next header, and for TRAIN the step's groups into out. */
int cpt_ranks_recv(cpt_dp *dp, cpt_ranks_header *h, cpt_ranks_groups *out, cpt_err *err);
/* Rank 0: a header without groups (START, FINISH, EXIT, FAIL). */
int cpt_ranks_send(cpt_dp *dp, int64_t command, int64_t step, int64_t status, cpt_err *err);

/* Sums the ranks' stop flags: *any = 1 when some rank's local_stop is set. */
int cpt_ranks_agree_stop(cpt_dp *dp, int local_stop, int *any, cpt_err *err);

/* The weights' checksum (XXH64 of the host weights of each model, after a sync from the GPU) must be the same on
 * every rank: 16-bit pieces of it are summed over the ranks and every rank checks the sum is world x its own, so
 * each rank knows whether all replicas are identical. -1 on every rank, naming the step, when they are not. */
int cpt_ranks_check_replicas(cpt_dp *dp, cpt_model *const *models, size_t n_models, int64_t step, cpt_err *err);

#endif
