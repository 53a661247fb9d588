/* The C ABI of a cpt environment plugin: a shared object that answers tool calls, loaded by path (env.type =
 * "plugin", env.plugin = "/path/libmytool.so" or a bare file name looked up in the plugins folder beside the cpt
 * programs, env.plugin_config = "any string"). Before loading, and in `cpt preflight`, the file is checked to be an
 * ELF shared object of this machine that exports the required functions below.
 *
 * A plugin exports, with C linkage and plain C types only:
 *
 *   int   cpt_env_plugin_abi(void);
 *       Returns CPT_ENV_PLUGIN_ABI, the version it was built against; another value refuses the plugin.
 *
 *   void *cpt_env_plugin_init(const char *config, char *err, size_t err_len);
 *       Called with env.plugin_config ("" when unset) before the sandbox closes, so it may read files (a table, a
 *       dictionary). Returns the plugin's state, or NULL with a message in err (NUL-terminated, at most err_len
 *       bytes) to refuse to start.
 *
 *   int   cpt_env_plugin_answer(void *state, const char *call, const char *extra, char *obs, size_t cap);
 *       Answers one tool call: call is the call's payload (the text between env.call_start and env.call_end,
 *       trimmed: Qwen's JSON {"name": ..., "arguments": {...}} or whatever the model wrote), extra the prompt
 *       group's extra JSON object as text ("{}" when it has none). Writes the observation (UTF-8, NUL-terminated, at
 *       most cap bytes) and returns 1 when the tool succeeded, 0 when it failed (the observation says why: the model
 *       sees it). Any other value, or a crash, is a failure the host describes.
 *
 *   int   cpt_env_plugin_sandbox(void);   (optional)
 *       CPT_ENV_SANDBOX_STRICT (the default when absent): answer runs in seccomp strict mode, where only read,
 *       write, _exit and sigreturn exist: no files, network, processes, clocks or new memory from the kernel (a
 *       small heap is kept ready: malloc of up to half of env.memory_mb, at most 16 MiB, works). A plugin that
 *       needs more returns CPT_ENV_SANDBOX_LIMITS: answer then runs under the memory, CPU and wall-clock limits only.
 *
 * Isolation: every call runs in a fresh child process (fork; then dlopen, init, the sandbox, answer, exit), so a
 * plugin keeps no state between calls, and a crash, a hang past env.timeout_ms, an allocation past env.memory_mb
 * or a forbidden system call becomes a failed call (ok = false, the observation says why) while the cpt-env worker
 * lives on. Calls never overlap within one child.
 *
 * examples/plugins/env_echo.c is a complete example; docs/env.md shows how to build one. */
#ifndef CPT_REWARD_ENV_ABI_H
#define CPT_REWARD_ENV_ABI_H

#include <stddef.h>

#define CPT_ENV_PLUGIN_ABI 1

#define CPT_ENV_SANDBOX_STRICT 0
#define CPT_ENV_SANDBOX_LIMITS 1

typedef int (*cpt_env_plugin_abi_fn)(void);
typedef void *(*cpt_env_plugin_init_fn)(const char *config, char *err, size_t err_len);
typedef int (*cpt_env_plugin_answer_fn)(void *state, const char *call, const char *extra, char *obs, size_t cap);
typedef int (*cpt_env_plugin_sandbox_fn)(void);

#endif
