/* Synthetic tasks for examples and tests, each instance verified by the generator and reproducible from a seed.
 *
 *   arithmetic  "What is 47 + 38?" with +, - (never negative) and * of small numbers; answer: the integer.
 *   arithmetic-1digit  "What is 647 + 8?": a number of 10-999 plus or minus a one-digit one (never negative): a
 *               tiny model learns it in minutes on a CPU, and its ~18k questions are too many to memorise (the
 *               main online example's task).
 *   multiply-2digit  "What is 47 * 86?": two numbers of 10-99 multiplied: a tiny model cannot compute it, but can
 *               call a calculator and copy its answer (the tool-learning task, docs/env.md).
 *   countdown   2-4 numbers and a target reachable with + - * / and parentheses, each number used at most once
 *               (the reference solution uses every number once, every step a positive integer, division exact).
 *
 * Output records (one JSON line each):
 *   sft  {"messages": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content": REPLY}]}
 *        REPLY = "47 + 38 = 85\n#### 85" (arithmetic), "(50 - 25) * 7 = 175\n#### (50 - 25) * 7" (countdown):
 *        the final answer always follows "#### " on the last line.
 *   rl   {"prompt": PROMPT, "answer": "85"}; countdown adds "numbers": [...], "target": T, "solution": "EXPR"
 *        (answer = the target as text).
 *   tool-sft  (arithmetic tasks) {"prompt": PROMPT, "answer": "4042", "segments": [{"text": T, "train": B}, ...]}:
 *        raw-text SFT transcripts (trainer/sft_data.h) in which half of the questions (by a hash of the prompt)
 *        call the calculator, "<tool_call>47*86</tool_call>", get its answer as an untrained segment formatted like
 *        the rollout's observation for chat_template = "none" ("\n<tool_response>4042</tool_response>\n") and
 *        copy it ("#### 4042"); the others answer directly ("#### 4042").
 * A split keeps the instances whose prompt hashes into it, so files of different splits never share a question
 * whatever their seeds: eval gets 1 in 10 prompts, train the other 9, which are divided into rl (2 in 10: prompts
 * for online RL) and sft (7 in 10: supervised data), so an RL run's prompts are new to a model SFT'd on sft. */
#ifndef CPT_CORE_SYNTH_H
#define CPT_CORE_SYNTH_H

#include <stdint.h>
#include <stdio.h>

#include "core/error.h"
#include "core/rng.h"

typedef enum {
    CPT_SYNTH_ARITHMETIC,
    CPT_SYNTH_COUNTDOWN,
    CPT_SYNTH_ARITHMETIC_1DIGIT,
    CPT_SYNTH_MULTIPLY_2DIGIT
} cpt_synth_task;
typedef enum { CPT_SYNTH_SFT, CPT_SYNTH_RL, CPT_SYNTH_TOOL_SFT } cpt_synth_format;
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

/* "arithmetic" | "arithmetic-1digit" | "multiply-2digit" | "countdown" */
int cpt_synth_task_parse(const char *name, cpt_synth_task *out);
int cpt_synth_format_parse(const char *name, cpt_synth_format *out); /* "sft" | "rl" | "tool-sft" */
int cpt_synth_split_parse(const char *name, cpt_synth_split *out);   /* "all" | "train" | "eval" | "sft" | "rl" */

/* Draws one verified instance of a task. */
int cpt_synth_arithmetic(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);
int cpt_synth_arithmetic_1digit(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);
int cpt_synth_multiply_2digit(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);
int cpt_synth_countdown(cpt_rng *rng, cpt_synth_item *it, cpt_err *err);

/* The tool markup of tool-sft transcripts: the defaults of env.call_start / env.call_end and the observation
 * template of chat_template = "none" (docs/env.md). */
#define CPT_SYNTH_CALL_START "<tool_call>"
#define CPT_SYNTH_CALL_END "</tool_call>"
#define CPT_SYNTH_OBS_BEFORE "\n<tool_response>"
#define CPT_SYNTH_OBS_AFTER "</tool_response>\n"
/* 1 when the tool-sft transcript of this prompt calls the tool (half of the prompts, by a hash). */
int cpt_synth_uses_tool(const char *prompt);

/* Evaluates expr (integers, + - * /, parentheses) with exact rational arithmetic. When numbers is not NULL,
 * every integer in expr must come from numbers, each used at most once. On success *num / *den is the value
 * (den > 0, reduced). Errors: syntax, division by zero, overflow, a number not given or used twice. */
int cpt_synth_eval(const char *expr, const int *numbers, int n_numbers, int64_t *num, int64_t *den, cpt_err *err);

/* Writes n instances as JSONL to out: instance i of the stream comes from (seed, task). */
int cpt_synth_write(FILE *out, cpt_synth_task task, cpt_synth_format format, cpt_synth_split split, long n,
                    uint64_t seed, cpt_err *err);

#endif
