/* Host side of reward plugins (the ABI is in reward/plugin_abi.h): the plugin runs in a forked child process that
 * dlopens it; requests and scores travel over a socket pair with a deadline. A crash, hang, bad count or non-finite
 * score becomes an error naming the reason; the caller lives on and the next call starts a fresh child. Not
 * thread-safe: one call at a time per handle. */
#ifndef CPT_REWARD_PLUGIN_H
#define CPT_REWARD_PLUGIN_H

#include "core/error.h"

typedef struct cpt_plugin cpt_plugin;

/* Starts the child, loads path and runs init(config); waits up to timeout_ms for it. */
cpt_plugin *cpt_plugin_open(const char *path, const char *config, int timeout_ms, cpt_err *err);

/* Scores n items (extras[i] may be NULL: "{}" is sent). scores[0..n) are written only on success. */
int cpt_plugin_score_batch(cpt_plugin *p, int n, const char *const *prompts, const char *const *completions,
                           const char *const *extras, double *scores, cpt_err *err);

/* Changes the per-batch deadline (init keeps the one given to open). */
void cpt_plugin_set_timeout(cpt_plugin *p, int timeout_ms);

/* Children started so far (1 after open; each restart after a failure adds one). */
int cpt_plugin_starts(const cpt_plugin *p);

/* Asks the child to free the plugin and exit; kills it if it does not within a second. */
void cpt_plugin_close(cpt_plugin *p);

#endif
