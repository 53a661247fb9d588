/* The reward worker (cpt-reward): consumes rollout groups, scores every completion, and forwards scored groups.
 *
 *   cpt_queue_next(rollouts, group "reward") -> decode prompt and completions with the tokenizer -> score them
 *   with the configured reward (rules, plugin, reward model) -> for OPD also the teacher's per-token logprobs ->
 *   cpt_queue_forward(scored), which adds the scored group and acks the rollout group atomically.
 *
 * A group that cannot be scored (a plugin crash or timeout, a non-finite score, token ids the tokenizer or teacher
 * does not know) goes to the dead stream with the reason and the worker carries on. Heartbeats go to the workers
 * hash every reward.heartbeat_s. On stop (SIGTERM) the worker finishes the group in hand, takes no more and
 * returns 0. */
#ifndef CPT_REWARD_WORKER_H
#define CPT_REWARD_WORKER_H

#include <signal.h>

#include "core/config.h"
#include "core/error.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "queue/schema.h"
#include "reward/reward.h"

typedef struct cpt_reward_scorer {
    cpt_reward *reward;         /* not owned */
    const cpt_tokenizer *tok;   /* not owned */
    cpt_model *teacher;         /* OPD: fills teacher_logprobs; NULL: none */
    double max_abs;             /* a score (or part) with a larger magnitude fails the group; 0: no bound */
} cpt_reward_scorer;

/* Scores g in place: sets has_rewards, rewards, parts (the union of the parts' names over the completions, in
 * order of first appearance; a part a completion lacks is 0) and, with a teacher, every completion's
 * teacher_logprobs. The reward items are: prompt = the decoded prompt (special tokens kept), completion = the
 * decoded completion (special tokens dropped), extra = the group's extra JSON with "n_tokens" set to the
 * completion's length. On failure g is unchanged apart from fields it already owned and err says why. */
int cpt_reward_score_group(const cpt_reward_scorer *s, cpt_rollout_group *g, cpt_err *err);

/* Statistics of a worker run (for tests and the final log line). */
typedef struct cpt_reward_worker_stats {
    long groups, completions, dead, tokens;
} cpt_reward_worker_stats;

/* The worker loop on the run of cfg (queue.url, else RUN_DIR/queue.json with RUN_DIR = $CPT_RUN or run.dir;
 * run id = run.name) until *stop. Returns 0 after a drain, -1 on a fatal error (no queue, no reward). */
int cpt_reward_worker_run(const cpt_config *cfg, const char *worker_id, volatile sig_atomic_t *stop,
                          cpt_reward_worker_stats *stats, cpt_err *err);

#endif
