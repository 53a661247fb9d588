/* Evaluation of a model on rl_prompt records with a reward: accuracy, mean reward and pass@k.
 *
 * For every record the prompt is rendered (chat template with the generation prompt, or the raw prompt text
 * without one), K samples are generated (rollout/engine.h; temperature 0 is greedy; sample j of record i is
 * seeded (seed + i, j), so results do not depend on batching), decoded (special tokens dropped) and scored with
 * the reward: prompt = the rendered prompt text, extra = the record's extra fields plus "answer" and "n_tokens".
 *
 * Definitions:
 *   correct      a sample whose reward is > correct_above (default 0.5: a 0/1 reward's 1, countdown's solved)
 *   accuracy     correct samples / all samples (with K = 1, the share of prompts answered correctly)
 *   mean_reward  mean reward over all samples
 *   pass@k       mean over prompts of the unbiased estimator 1 - C(n - c, k) / C(n, k) (Chen et al. 2021), with n
 *                = K samples of which c are correct; reported for k = 1, 2, 4, ... < K and k = K.
 * With tools (env.type other than "none": cpt_eval_tools_open), generation goes through the turn driver
 * (rollout/turns.h): a sample that stops on env.call_end gets the tool's answer in-process (reward/env.h) as its
 * observation and goes on, so accuracy counts tool use; the reward sees the whole completion, observations
 * included, and n_tokens counts the model's tokens only.
 *   tool_use     share of samples that called the tool at least once
 *   tool_calls   mean tool calls per sample
 * cpt eval (cli/cmd_eval.c) prints these; the online trainer calls cpt_eval_run for the val/ metrics. */
#ifndef CPT_REWARD_EVAL_H
#define CPT_REWARD_EVAL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/config.h"
#include "core/dataset.h"
#include "core/error.h"
#include "core/metrics.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "reward/env.h"
#include "reward/reward.h"
#include "rollout/turns.h"

#define CPT_EVAL_MAX_K 16

/* The tools of an evaluation: the env.* keys' turn options and the environment, open when env.type is not
 * "none" (enabled = 1). */
typedef struct cpt_eval_tools {
    int enabled;
    cpt_turn_opts turns;
    cpt_env *env;
} cpt_eval_tools;

/* Reads env.* from cfg (tok_path: the tokenizer folder, for the default observation template); env.type "none"
 * leaves t disabled. */
int cpt_eval_tools_open(const cpt_config *cfg, const char *tok_path, cpt_eval_tools *t, cpt_err *err);
void cpt_eval_tools_close(cpt_eval_tools *t);

typedef struct cpt_eval_opts {
    int samples;          /* K >= 1 */
    int max_new_tokens;
    float temperature;    /* 0: greedy */
    uint64_t seed;
    const cpt_chat_template *tpl; /* NULL: the raw prompt */
    size_t max_records;   /* 0: all */
    double correct_above;
    int slots;            /* engine slots; 0: 16 */
    int verbose;          /* log the first few generations */
    cpt_eval_tools *tools; /* NULL or not enabled: single-turn generation */
    /* NULL, or a stop request (a trainer's SIGTERM flag): checked before each chunk of prompts, so a preempted
     * trainer leaves a long validation within a chunk's time and still checkpoints in its grace */
    volatile sig_atomic_t *stop;
} cpt_eval_opts;

typedef struct cpt_eval_results {
    size_t n_prompts;
    int samples;
    double accuracy, mean_reward, mean_tokens;
    int with_tools;       /* tools were on: tool_use and tool_calls mean something */
    double tool_use, tool_calls;
    int n_k;
    int k[CPT_EVAL_MAX_K];
    double pass_at_k[CPT_EVAL_MAX_K];
    double seconds;
    int interrupted;      /* the stop request came first: nothing above is filled */
    double *rewards;      /* [n_prompts * samples], row per prompt (malloc'd) */
    int *n_tokens;        /* [n_prompts * samples] */
} cpt_eval_results;

void cpt_eval_opts_default(cpt_eval_opts *o);
/* validation.samples, .max_new_tokens, .temperature, .max_records and run.seed. */
void cpt_eval_opts_from_config(const cpt_config *cfg, cpt_eval_opts *o);

/* Returns 0 with res->interrupted set when o->stop was raised before the last chunk (the results are then empty). */
int cpt_eval_run(cpt_model *m, const cpt_tokenizer *tok, const cpt_dataset *records, cpt_reward *reward,
                 const cpt_eval_opts *o, cpt_eval_results *res, cpt_err *err);
void cpt_eval_results_free(cpt_eval_results *r);

/* Unbiased pass@k for n samples with c correct (0 <= c <= n, 1 <= k <= n). */
double cpt_pass_at_k(int n, int c, int k);

/* Adds prefix/accuracy, prefix/reward_mean, prefix/response_len and prefix/pass@k (and with tools
 * prefix/tool_use and prefix/tool_calls) to an open metrics record (between cpt_metrics_begin and _end); prefix
 * e.g. "val". */
void cpt_eval_add_metrics(cpt_metrics *m, const char *prefix, const cpt_eval_results *r);

#endif
