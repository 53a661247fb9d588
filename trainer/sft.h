/* The SFT training loop (algo.type = "sft"): tokenizer, model, data, AdamW, packed micro-batches with gradient
 * accumulation, eval, metrics, checkpoints and exact resume. docs/training.md describes the run from the outside. */
#ifndef CPT_TRAINER_SFT_H
#define CPT_TRAINER_SFT_H

#include "core/config.h"
#include "core/error.h"
#include "model/model.h"

/* A run stopped early by SIGUSR1/SIGTERM after checkpointing exits CPT_EXIT_STOPPED (the scheduler requeues it). */
#include "core/exit_status.h"

typedef struct cpt_sft_result {
    int64_t steps_done;     /* step reached (including steps before a resume) */
    double last_loss;       /* train loss of the last step */
    double eval_loss;       /* final held-out loss; NaN without eval data */
    double exact_match;     /* final greedy exact-match share; NaN when not run */
    int interrupted;        /* stopped by a signal (checkpoint written) */
    double seconds;
} cpt_sft_result;

/* Runs the job described by cfg. */
int cpt_sft_run(const cpt_config *cfg, cpt_sft_result *res, cpt_err *err);

#endif
