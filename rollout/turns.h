/* Multi-turn generation with tools (docs/rollout.md, "Multi-turn rollouts with tools"): the turn driver between a
 * caller and the engine (rollout/engine.h).
 *
 * A group is submitted like an engine request; the driver adds the stop string call_end. When a sample's turn
 * stops on it and the sample has made fewer than max_turns calls, the turn is a tool call: its call text is the
 * turn's bytes from the last call_start up to and including call_end (the whole turn when call_start is empty or
 * absent). The sample then waits for the call's answer while everything else decodes. An answer comes either from
 * a synchronous callback (cpt_turns_set_answer: `cpt eval`, tests) or, without one, from the caller, who takes the
 * calls with cpt_turns_next_call, sends them (the rollout worker: env requests) and hands back what comes with
 * cpt_turns_answer (an answer for an unknown group, sample or turn, or one already answered, is dropped). A call
 * not answered within reply_timeout_s gets the observation CPT_TURN_TIMEOUT_OBS. The observation is formatted with
 * observation_template ({observation} replaced), tokenized and appended to the sample with mask 0 and logprob 0;
 * generation continues from the whole sequence (prompt + everything so far, prefilled again) as a request of one
 * sample. The sample's completion (model and observation tokens together) stays within the group's
 * max_new_tokens: an observation that does not fit is cut and the sample finishes with finish = length. A group is
 * finished when every sample is: no turn decoding, no call waiting.
 *
 * The first turn runs as one engine request of n samples (the prompt is prefilled once and shared); a sample's
 * call goes out when its request has finished (all its samples), later turns are requests of their own.
 * Randomness: turn 1 draws with the group's seed as before; turn k > 1 of sample j with a seed mixed from (seed,
 * j, k), so the same group, seed and answers give the same tokens. */
#ifndef CPT_ROLLOUT_TURNS_H
#define CPT_ROLLOUT_TURNS_H

#include <stddef.h>
#include <stdint.h>

#include "core/chat_template.h"
#include "core/config.h"
#include "core/error.h"
#include "core/tokenizer.h"
#include "rollout/engine.h"

#define CPT_TURN_TIMEOUT_OBS "error: the tool did not answer"

typedef struct cpt_turn_opts {
    int max_turns;               /* tool calls per sample, 1..64 (queue/env_msg.h CPT_ENV_MAX_TURNS) */
    char *call_start;            /* may be "": the call is the whole turn */
    char *call_end;              /* non-empty: the stop string that ends a call */
    char *observation_template;  /* holds "{observation}" */
    double reply_timeout_s;
} cpt_turn_opts;

/* The env.* keys (rollout/env_keys.def). *enabled = 0 for env.type "none" (opts are then left empty). The default
 * observation template (env.observation_template empty) follows data.chat_template with the tokenizer at tok_path
 * (cpt_turn_default_template). */
int cpt_turn_opts_from_config(const cpt_config *cfg, const char *tok_path, cpt_turn_opts *o, int *enabled,
                              cpt_err *err);
void cpt_turn_opts_free(cpt_turn_opts *o);

/* What the chat template renders after an assistant turn for the user message
 * "<tool_response>\n{observation}\n</tool_response>" followed by the generation prompt; tpl NULL (no chat
 * template): "\n<tool_response>{observation}</tool_response>\n". malloc'd. */
char *cpt_turn_default_template(const cpt_chat_template *tpl, cpt_err *err);

/* tpl with every "{observation}" replaced by obs. malloc'd; NULL when out of memory. */
char *cpt_turn_format_observation(const char *tpl, const char *obs);

/* If the n bytes of a turn end with call_end, 1 and *call = the call text (malloc'd: from the last call_start,
 * or the whole turn; NUL bytes dropped; at most max_call bytes, keeping the end). Else 0. -1: out of memory. */
int cpt_turn_extract_call(const char *turn, size_t n, const char *call_start, const char *call_end, size_t max_call,
                          char **call);

/* A synchronous answer to a call: the observation into obs[cap] (NUL-terminated), *ok = 0 when the tool failed.
 * Returns 0, or -1 when there is no answer (the observation is then CPT_TURN_TIMEOUT_OBS). */
typedef int (*cpt_turn_answer_fn)(void *ctx, const char *call, const char *extra, char *obs, size_t cap, int *ok);

typedef struct cpt_turns cpt_turns;

/* Over engine e (not owned; the caller keeps stepping nothing else on it) and tokenizer tok (required). */
cpt_turns *cpt_turns_new(cpt_engine *e, const cpt_tokenizer *tok, const cpt_turn_opts *o, cpt_err *err);
void cpt_turns_free(cpt_turns *t);
void cpt_turns_set_answer(cpt_turns *t, cpt_turn_answer_fn fn, void *ctx);

/* Submits a group (r as for cpt_engine_submit; its stop strings are copied and call_end added; extra: the
 * group's JSON for the tools, copied, may be NULL). Returns its handle (>= 0), or -1 if the engine refuses it. */
int64_t cpt_turns_submit(cpt_turns *t, const cpt_gen_request *r, const char *extra, cpt_err *err);

/* One decode step of the engine (when it has work), then every finished turn is looked at (calls made, answered
 * at once with a callback, samples finished) and every call waiting past reply_timeout_s (now: cpt_now()) is
 * answered with the timeout observation. A sample that cannot go on (out of memory, a continuation the engine
 * refuses) is finished (finish = length or abort) and logged. Returns the groups in flight (submitted, not yet
 * taken), or -1 when the engine's step fails. */
int cpt_turns_step(cpt_turns *t, double now, cpt_err *err);

/* A call to send (no callback set). Pointers stay valid until the call is answered or its group is taken. */
typedef struct cpt_turn_call {
    int64_t handle;
    int sample, turn; /* turn: the sample's call number, 1-based */
    const char *call;
    const char *extra; /* NULL: none */
} cpt_turn_call;
/* The next call not handed out yet: 1 and *c filled (it now counts as sent), 0 when none. */
int cpt_turns_next_call(cpt_turns *t, cpt_turn_call *c);
/* The answer to call (handle, sample, turn): 0 when used; 1 when dropped (no such group, sample or call waiting:
 * answered already, timed out, or never made); -1 on error (out of memory, the engine refused the continuation:
 * the sample then finishes with finish = length and the error is returned once). */
int cpt_turns_answer(cpt_turns *t, int64_t handle, int sample, int turn, const char *obs, int ok, cpt_err *err);

typedef struct cpt_turn_sample {
    int n_tokens;
    int32_t *tokens;
    float *logprobs; /* 0 at observation tokens */
    uint8_t *mask;   /* 1 model token, 0 observation token */
    cpt_finish finish;
    int n_model;     /* tokens the model generated (mask 1) */
    int n_calls;     /* tool calls made */
} cpt_turn_sample;

typedef struct cpt_turn_result {
    int64_t handle;
    int n_samples;
    cpt_turn_sample *samples;
} cpt_turn_result;
void cpt_turn_result_free(cpt_turn_result *r);
/* Moves r's samples into a plain engine result (tokens, logprobs, finish; the mask and counts are dropped), for
 * callers written against cpt_engine_generate; r is left empty. -1 when out of memory (r untouched). */
int cpt_turn_result_to_gen(cpt_turn_result *r, cpt_gen_result *out);

/* Moves one finished group into *out (1), or 0 when none is finished. */
int cpt_turns_take(cpt_turns *t, cpt_turn_result *out);
int cpt_turns_groups(const cpt_turns *t);  /* groups in flight */
int cpt_turns_waiting(const cpt_turns *t); /* calls made and not answered (sent or not) */
/* Forgets every group (after cpt_engine_clear). */
void cpt_turns_clear(cpt_turns *t);

/* Convenience for in-process callers (cpt eval): submits reqs[0..n) with extras[i] (extras may be NULL), runs
 * them to the end answering calls through the callback (which must be set), and fills results[i]. */
int cpt_turns_generate(cpt_turns *t, const cpt_gen_request *reqs, const char *const *extras, int n,
                       cpt_turn_result *results, cpt_err *err);

#endif
