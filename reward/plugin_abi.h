/* The C ABI of a cpt reward plugin: a shared object that scores completions, loaded by path
 * (reward.type = "plugin", reward.plugin_path = "/path/libmyreward.so", reward.plugin_config = "any string"; a bare
 * file name is looked up in the plugins folder beside the cpt programs: reward/plugin.h cpt_plugin_resolve). Before
 * loading, and in `cpt preflight` instead of loading, the file is checked to be an ELF shared object of this machine
 * that exports the four functions below.
 *
 * A plugin exports these four functions with C linkage (plain C types only, so any language with a C ABI works):
 *
 *   int   cpt_reward_plugin_abi(void);
 *       Returns CPT_REWARD_PLUGIN_ABI, the version it was built against; another value refuses the plugin.
 *
 *   void *cpt_reward_plugin_init(const char *config, char *err, size_t err_len);
 *       Called once with reward.plugin_config (never NULL; "" when unset). Returns the plugin's state, or NULL
 *       with a message in err (NUL-terminated, at most err_len bytes) to refuse to start.
 *
 *   int   cpt_reward_plugin_score_batch(void *state, int n, const char *const *prompts,
 *                                       const char *const *completions, const char *const *extras,
 *                                       double *scores, char *err, size_t err_len);
 *       Scores n completions: prompts[i] and completions[i] are UTF-8 text, extras[i] the item's extra JSON
 *       object as text ("{}" when it has none; e.g. {"answer": "42"}). Writes scores[0..n) and returns n, or
 *       returns -1 with a message in err. Scores must be finite.
 *
 *   void  cpt_reward_plugin_free(void *state);
 *       Releases the state; called once at shutdown.
 *
 * Isolation: cpt runs the plugin in a child process of its own (fork, then dlopen there) and talks to it over a
 * socket, so a plugin that crashes, hangs past reward.plugin_timeout_ms, returns the wrong count or a NaN turns
 * into an error with that reason (the group goes to the `dead` stream) and the reward worker lives on; a crashed
 * or killed plugin process is started again (init runs again) on the next batch. A plugin may keep state between
 * batches but must not rely on it surviving a restart. Calls come one at a time from one thread.
 *
 * examples/plugins/reward_keyword.c is a complete example; docs/rewards.md shows how to build one. */
#ifndef CPT_REWARD_PLUGIN_ABI_H
#define CPT_REWARD_PLUGIN_ABI_H

#include <stddef.h>

#define CPT_REWARD_PLUGIN_ABI 1

typedef int (*cpt_reward_plugin_abi_fn)(void);
typedef void *(*cpt_reward_plugin_init_fn)(const char *config, char *err, size_t err_len);
typedef int (*cpt_reward_plugin_score_batch_fn)(void *state, int n, const char *const *prompts,
                                                const char *const *completions, const char *const *extras,
                                                double *scores, char *err, size_t err_len);
typedef void (*cpt_reward_plugin_free_fn)(void *state);

#endif
