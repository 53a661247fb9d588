/* Tools for multi-turn rollouts (the protocol: docs/env.md): one interface over the environments, the backend
 * chosen once from env.type when opened.
 *
 *   calculator  the call is a Python arithmetic expression (reward/env_expr.h); the observation is its value
 *   countdown   the call is an expression over the prompt's numbers (extra {"numbers": [...], "target": N}); the
 *               observation is its value, the numbers it used and whether it reaches the target
 *   plugin      a shared object answers (reward/env_abi.h)
 *
 * A call is the text the model wrote between env.call_start and env.call_end (the markup itself is stripped when
 * present), trimmed: Qwen's JSON {"name": "calculator", "arguments": {"expression": "12*34"}} or a bare expression.
 * Every call runs in a sandboxed child (reward/env_sandbox.h) under env.timeout_ms and env.memory_mb. The
 * observation is cut to env.max_observation bytes (ending in "..."). Synchronous and usable in-process: the cpt-env
 * worker, `cpt eval` and tests call it alike. Not thread-safe: one call at a time per handle. */
#ifndef CPT_REWARD_ENV_H
#define CPT_REWARD_ENV_H

#include <stddef.h>

#include "core/config.h"
#include "core/error.h"

typedef struct cpt_env cpt_env;

/* Opens the environment of cfg's env.type ("none" is an error: there is nothing to answer). A plugin is checked and
 * loaded once in a sandboxed child here, so a broken plugin fails now, not at the first call. */
cpt_env *cpt_env_open(const cpt_config *cfg, cpt_err *err);

/* The environment's name ("calculator", "countdown", "plugin"). */
const char *cpt_env_name(const cpt_env *env);

/* Answers one call. extra_json: the prompt group's extra JSON (NULL or "" when none). Writes the observation
 * (NUL-terminated, at most cap bytes and env.max_observation) and sets *ok: 1 when the tool succeeded, 0 when it
 * failed (the observation then says why, e.g. "error: division by zero"). Returns -1 only when no sandbox could run
 * (fork or pipe failed); then err says why. */
int cpt_env_answer(cpt_env *env, const char *call, const char *extra_json, char *obs, size_t cap, int *ok,
                   cpt_err *err);

void cpt_env_close(cpt_env *env);

#endif
