/* Synthetic tasks for examples and tests, each instance verified by the generator and reproducible from a seed.
 *
 *   arithmetic  "What is 47 + 38?" with +, - (never negative) and * of small numbers; answer: the integer.
 *   arithmetic-1digit  "What is 647 + 8?": a number of 10-999 plus or minus a one-digit one (never negative): a
 *               tiny model learns it in minutes on a CPU, and its ~18k questions are too many to memorise (the
 *               main online example's task).
 *   countdown   2-4 numbers and a target reachable with + - * / and parentheses, each number used at most once
 *               (the reference solution uses every number once, every step a positive integer, division exact).
 *
 * Output records (one JSON line each):
 *   sft  {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": REPLY}]}
 *        REPLY = "47 + 38 = 85\n#### 85" (arithmetic), "(50 - 25) * 7 = 175\n#### (50 - 25) * 7" (countdown):
 *        the final answer always follows "#### " on the last line.
 *   rl   {"prompt": PROMPT, "answer": "85"}; countdown adds "numbers": [...], "target": T, "solution": "EXPR"
 *        (answer = the target as text).
 * A split keeps the instances whose prompt hashes into it, so files of different splits never share a question
 * whatever their seeds: eval gets 1 in 10 prompts, train the other 9, which are divided into rl (2 in 10: prompts
 * for online RL) and sft (7 in 10: supervised data), so an RL run's prompts are new to a model SFT'd on sft. */
#ifndef CPT_CORE_SYNTH_H
#define CPT_CORE_SYNTH_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/rng.h"

typedef enum { CPT_SYNTH_ARITHMETIC, CPT_SYNTH_COUNTDOWN, CPT_SYNTH_ARITHMETIC_1DIGIT } cpt_synth_task;
typedef enum { CPT_SYNTH_SFT, CPT_SYNTH_RL } cpt_synth_format;
typedef enum { CPT_SYNTH_ALL, CPT_SYNTH_TRAIN, CPT_SYNTH_EVAL, CPT_SYNTH_SFT_PART, CPT_SYNTH_RL_PART } cpt_synth_split;

#define CPT_SYNTH_MAX_NUMBERS 4

typedef struct cpt_synth_item {
    char prompt[256];
    char reply[256];    /* the assistant's reply for sft */
    char answer[64];    /* arithmetic: the result; countdown: the target */
    char solution[128]; /* the expression that gives the answer */
    int numbers[CPT_SYNTH_MAX_NUMBERS];
    int n_numbers;      /* countdown: 2-4; arithmetic: the 2 operands */
    int64_t target;     /* the value of solution */
} cpt_synth_item;

int cpt_synth_task_parse(const char *name, cpt_synth_task *out); /* "arithmetic" | "arithmetic-1digit" | "countdown" */
int cpt_synth_format_parse(const char *name, cpt_synth_format *out); /* "sft" | "rl" */
int cpt_synth_split_parse(const char *name, cpt_synth_split *out);   /* "all" | "train" | "eval" | "sft" | "rl" */

/* Draws one verified instance of a task. */
int cpt_synth_arithmetic(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);
int cpt_synth_arithmetic_1digit(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);
int cpt_synth_countdown(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);

/* Evaluates expr (integers, + - * /, parentheses) with exact rational arithmetic. When numbers is not NULL,
 * every integer in expr must come from numbers, each used at most once. On success *num / *den is the value
 * (den > 0, reduced). Errors: syntax, division by zero, overflow, a number not given or used twice. */
int cpt_synth_eval(const char *expr, const int *numbers, int n_numbers, int64_t *num, int64_t *den, cpt_err *err);

/* Writes n instances as JSONL to out: instance i of the stream comes from (seed, task). */
int cpt_synth_write(FILE *out, cpt_synth_task task, cpt_synth_format format, cpt_synth_split split, long n,
                    uint64_t seed, cpt_err *err);

#endif
