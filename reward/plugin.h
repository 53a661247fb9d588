/* Host side of reward plugins (the ABI is in reward/plugin_abi.h): the plugin runs in a forked child process that
 * dlopens it; requests and scores travel over a socket pair with a deadline. A crash, hang, bad count or non-finite
 * score becomes an error naming the reason; the caller lives on and the next call starts a fresh child. Not
 * thread-safe: one call at a time per handle. */
#ifndef CPT_REWARD_PLUGIN_H
#define CPT_REWARD_PLUGIN_H

#include "core/error.h"

typedef struct cpt_plugin cpt_plugin;

/* Where reward.plugin_path points: a name without '/' is looked up in the plugins folder beside the cpt programs
 * ($CPT_BIN/plugins, else the running program's folder + /plugins, where the build puts examples/plugins); a path
 * with a '/' is used as written (a relative one from the working directory). Never the dynamic loader's search. */
int cpt_plugin_resolve(const char *path, char *out, size_t cap, cpt_err *err);
/* Resolves path (into file), reads the file (a regular file of at most 1 GiB) and checks it is an ELF shared object
 * of this machine exporting names[0..n-1] (found[i] set for each present). what names the kind in messages
 * ("reward plugin"). For the reward and env plugin checks. */
int cpt_plugin_elf_symbols(const char *what, const char *path, const char *const *names, int n, int *found,
                           char *file, size_t file_cap, cpt_err *err);

/* Checks a plugin file without loading it (nothing of it runs): it exists, is a regular file and an ELF shared
 * object of this machine that exports the four functions of reward/plugin_abi.h. path as given to resolve. */
int cpt_plugin_check(const char *path, cpt_err *err);

/* Resolves and checks path, then starts the child, loads it and runs init(config); waits up to timeout_ms. */
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
