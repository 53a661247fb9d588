/* The tool sandbox: runs one tool call in a forked child and brings back its observation.
 *
 * The child, in its own process group and killed if its caller dies: closes every inherited descriptor but its pipe
 * (stdin and stdout become /dev/null, stderr stays the caller's log), sets RLIMIT_AS (what the process maps already
 * plus memory_mb: a child of a large process such as `cpt eval` is not starved by its parent's mappings) and
 * RLIMIT_CPU, runs prepare (may open files: a plugin is loaded here), then with strict on enters
 * seccomp strict mode (only read, write, _exit and sigreturn are allowed: no file, network or process access; any
 * other system call kills it), runs the tool, writes its answer into the pipe and ends with SYS_exit.
 *
 * The parent reads the pipe with poll() until the child closes it or timeout_ms passes, then SIGKILLs the whole
 * process group and reaps the child: no zombie, no orphan. A child that dies, overruns or writes a malformed answer
 * gives ok = 0 and an observation that says why ("error: the tool did not finish within 2000 ms"); only a failure to
 * start the child (fork, pipe) is an error of the call itself. */
#ifndef CPT_REWARD_ENV_SANDBOX_H
#define CPT_REWARD_ENV_SANDBOX_H

#include <stddef.h>

#include "core/error.h"

typedef struct cpt_env_limits {
    int timeout_ms; /* wall clock, from fork to the answer */
    int memory_mb;  /* address space the child may add to what it inherits */
    int strict;     /* 1: seccomp strict mode before the tool runs */
} cpt_env_limits;

/* Runs in the child before the sandbox closes (strict off: the sandbox is the rlimits alone). Returns 0, or -1 with a
 * reason in obs (the call then fails with it). */
typedef int (*cpt_env_prepare_fn)(void *ctx, char *obs, size_t cap);
/* Runs in the child inside the sandbox: writes the observation (NUL-terminated, at most cap bytes) and returns 1 when
 * the tool succeeded, 0 when it failed (obs says why). */
typedef int (*cpt_env_tool_fn)(void *ctx, char *obs, size_t cap);

/* Runs prepare (may be NULL) and tool in a sandboxed child. 0 with obs and *ok set, or -1 when no child could run. */
int cpt_env_sandbox_run(const cpt_env_limits *lim, cpt_env_prepare_fn prepare, cpt_env_tool_fn tool, void *ctx,
                        char *obs, size_t cap, int *ok, cpt_err *err);

#endif
