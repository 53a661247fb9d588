/* Host side of environment plugins (the ABI is in reward/env_abi.h): every call runs the plugin in a sandboxed child
 * (reward/env_sandbox.h) that loads it, inits it and answers. Nothing of the plugin ever runs in the caller. */
#ifndef CPT_REWARD_ENV_PLUGIN_H
#define CPT_REWARD_ENV_PLUGIN_H

#include <stddef.h>

#include "core/error.h"
#include "reward/env_sandbox.h"

typedef struct cpt_env_plugin cpt_env_plugin;

/* Checks a plugin file without loading it: env.plugin resolves (a bare name in the plugins folder beside the cpt
 * programs, as reward plugins), is a regular file, an ELF shared object of this machine exporting the required
 * functions of reward/env_abi.h. */
int cpt_env_plugin_check(const char *path, cpt_err *err);

/* Checks path, then loads and inits it once in a sandboxed child to see that it starts (and learn which sandbox it
 * asks for). lim's timeout and memory apply to every call; its strict flag is the plugin's choice. */
cpt_env_plugin *cpt_env_plugin_open(const char *path, const char *config, const cpt_env_limits *lim, cpt_err *err);

/* 1 when the plugin runs in seccomp strict mode. */
int cpt_env_plugin_strict(const cpt_env_plugin *p);

/* Answers one call in a fresh sandboxed child (see cpt_env_sandbox_run). */
int cpt_env_plugin_answer(cpt_env_plugin *p, const char *call, const char *extra, char *obs, size_t cap, int *ok,
                          cpt_err *err);

void cpt_env_plugin_close(cpt_env_plugin *p);

#endif
