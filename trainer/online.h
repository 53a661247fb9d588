/* The online trainer (algo.type = grpo | ppo | opd): the trainer side of docs/architecture.md "Online data flow".
 *
 * It owns the data cursor over the shuffled rl_prompt dataset and issues prompt groups (chat-templated prompt ids,
 * rollout.group_size samples, sampling.* params, the minimum weight version, the record's extra JSON with its
 * answer) to cpt:{run}:prompts; takes scored groups from cpt:{run}:scored (consumer group "trainer"); drops groups
 * too stale for async.max_staleness and issues them again; trains each group exactly once by id
 * (trainer/online_book.h); runs the objective and AdamW (trainer/online_step.h); publishes weight version v+1 through
 * the file transport (weights/weights_pub.h); checkpoints with the data cursor and outstanding ids; and logs
 * RUN_DIR/metrics.jsonl. docs/online.md describes it from the outside.
 *
 * async.mode = sync issues exactly the groups of the next step with min_version = the current version and waits for
 * all of them: every step trains on samples of the current weights (on-policy; deterministic on CPU with fixed
 * seeds). async keeps up to groups_per_step * (max_staleness + 1) groups in flight with min_version = version -
 * max_staleness.
 *
 * With several trainer ranks (slurm.trainer_tasks) rank 0 is all of the above and the other ranks follow it step by
 * step, training on their share of each batch (trainer/online_ranks.h, trainer/online_step.h). */
#ifndef CPT_TRAINER_ONLINE_H
#define CPT_TRAINER_ONLINE_H

#include <signal.h>

#include "core/config.h"
#include "core/error.h"

/* Runs an online job. *stop (set by the caller's SIGTERM/SIGUSR1 handler; may be NULL) ends it at the next step
 * boundary with a checkpoint. Returns the exit status: 0 finished (train.steps reached), 3 (CPT_EXIT_STOPPED)
 * stopped after a checkpoint, 1 failed (err says why; with other trainer ranks rank 0 logs it itself before it tells
 * them, since mpirun or srun may end it as soon as one of them exits, and err is then empty). config_path names the
 * config in messages. */
int cpt_online_train(const cpt_config *cfg, const char *config_path, volatile sig_atomic_t *stop, cpt_err *err);

/* 1 if algo.type is trained by cpt_online_train. */
int cpt_online_is_online(const char *algo_type);

#endif
