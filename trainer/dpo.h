/* The DPO loop (algo.type = "dpo"): preference pairs through the chat template, reference logprobs from a frozen
 * copy of the initial model, the dpo / ipo objective (trainer/objective.h), AdamW, checkpoints and exact resume as
 * SFT (trainer/sft.h), metrics. docs/dpo.md describes the run from the outside.
 *
 * Data (data.train, data.eval; core/dataset.h's preference format): each record {"prompt": str | messages,
 * "chosen": str, "rejected": str} becomes two sequences, prompt + chosen and prompt + rejected: with a chat template
 * the conversation [prompt messages..., assistant: answer] and the loss covers the template's assistant tokens (end
 * token included); with data.chat_template = "none", encode(prompt) + encode(answer) + [eos] and the loss covers the
 * answer and the eos. Sequences are cut to train.max_seq_len; a pair with no loss token left is skipped (counted).
 *
 * Reference: the initial model (model.path, or the random init of run.seed) is run once over every pair before
 * training and its per-token logprobs are kept with the pair; it is then freed. A resumed run recomputes them from
 * the same initial model, so they are the same numbers.
 *
 * A step takes dpo.pairs_per_step pairs from the data cursor, packs them into micro-batches of at most
 * train.tokens_per_micro_batch tokens (whole pairs; chosen 2k, rejected 2k+1), and the loss is the mean over the
 * step's pairs. Metrics (RUN_DIR/metrics.jsonl): dpo/loss, dpo/margin (beta * (chosen log-ratio - rejected
 * log-ratio), mean over pairs), dpo/accuracy (share of pairs with margin > 0), dpo/reward_chosen,
 * dpo/reward_rejected, lr, grad_norm, perf/train_tok_s; on held-out pairs eval/dpo_loss, eval/dpo_margin,
 * eval/dpo_accuracy and eval/logp_margin (chosen minus rejected summed logprob, no reference). */
#ifndef CPT_TRAINER_DPO_H
#define CPT_TRAINER_DPO_H

#include <signal.h>
#include <stdint.h>

#include "core/config.h"
#include "core/error.h"

typedef struct cpt_dpo_result {
    int64_t steps_done;
    double last_loss;
    double eval_margin_start; /* held-out margin before the first step of this process (NaN without data.eval) */
    double eval_margin, eval_accuracy, eval_loss, eval_logp_margin; /* at the end */
    int interrupted;
    double seconds;
} cpt_dpo_result;

/* Runs the DPO job of cfg until train.steps (or train.max_steps_this_run, or *stop: then it checkpoints first).
 * Returns 0 when done, 1 when stopped by *stop (checkpoint written; cmd_train exits CPT_EXIT_STOPPED),
 * -1 on error. res may be NULL. */
int cpt_dpo_run(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_dpo_result *res, cpt_err *err);
int cpt_dpo_train(const cpt_config *cfg, volatile sig_atomic_t *stop, cpt_err *err);

#endif
