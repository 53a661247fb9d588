/* Environment plugins in sandboxed children (see env_plugin.h, env_abi.h). */
#include "reward/env_plugin.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reward/env_abi.h"
#include "reward/plugin.h"


struct cpt_env_plugin {
    char file[PATH_MAX + 64];
    char *config;
    cpt_env_limits lim;
};

static const char *const REQUIRED[3] = {"cpt_env_plugin_abi", "cpt_env_plugin_init", "cpt_env_plugin_answer"};

int cpt_env_plugin_check(const char *path, cpt_err *err) {
    char file[PATH_MAX + 64];
    if (!path || !*path) return cpt_errf(err, "env plugin: env.plugin is empty (env.type = \"plugin\" needs it)");
    int found[3];
    if (cpt_plugin_elf_symbols("env plugin", path, REQUIRED, 3, found, file, sizeof file, err)) return -1;
    for (int i = 0; i < 3; i++)
        if (!found[i])
            return cpt_errf(err, "env plugin %s: does not export %s (see reward/env_abi.h; C++ needs extern \"C\")",
                            file, REQUIRED[i]);
    return 0;
}

/* ---- in the child ---- */

typedef struct {
    const cpt_env_plugin *p;
    const char *call, *extra;
    cpt_env_plugin_answer_fn answer;
    void *state;
    int sandbox; /* what the plugin asks for */
} child_ctx;

/* dlopen, the ABI version, init: before the sandbox closes. */
static int child_load(void *vctx, char *obs, size_t cap) {
    child_ctx *c = vctx;
    void *h = dlopen(c->p->file, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(obs, cap, "error: the env plugin does not load: %s", dlerror());
        return -1;
    }
    cpt_env_plugin_abi_fn abi = (cpt_env_plugin_abi_fn)dlsym(h, "cpt_env_plugin_abi");
    cpt_env_plugin_init_fn init = (cpt_env_plugin_init_fn)dlsym(h, "cpt_env_plugin_init");
    cpt_env_plugin_sandbox_fn sandbox = (cpt_env_plugin_sandbox_fn)dlsym(h, "cpt_env_plugin_sandbox");
    c->answer = (cpt_env_plugin_answer_fn)dlsym(h, "cpt_env_plugin_answer");
    if (!abi || !init || !c->answer) {
        snprintf(obs, cap, "error: the env plugin lacks %s (see reward/env_abi.h)",
                 !abi ? "cpt_env_plugin_abi" : !init ? "cpt_env_plugin_init" : "cpt_env_plugin_answer");
        return -1;
    }
    int v = abi();
    if (v != CPT_ENV_PLUGIN_ABI) {
        snprintf(obs, cap, "error: env plugin ABI version %d, this cpt speaks %d", v, CPT_ENV_PLUGIN_ABI);
        return -1;
    }
    c->sandbox = sandbox ? sandbox() : CPT_ENV_SANDBOX_STRICT;
    if (c->sandbox != CPT_ENV_SANDBOX_STRICT && c->sandbox != CPT_ENV_SANDBOX_LIMITS) {
        snprintf(obs, cap, "error: cpt_env_plugin_sandbox returned %d (CPT_ENV_SANDBOX_STRICT or _LIMITS expected)",
                 c->sandbox);
        return -1;
    }
    char err[512] = "";
    c->state = init(c->p->config, err, sizeof err);
    err[sizeof err - 1] = 0;
    if (!c->state) {
        snprintf(obs, cap, "error: the env plugin's init failed: %s", err[0] ? err : "(no message)");
        return -1;
    }
    return 0;
}

static int child_answer(void *vctx, char *obs, size_t cap) {
    child_ctx *c = vctx;
    int rc = c->answer(c->state, c->call, c->extra, obs, cap);
    if (rc != 0 && rc != 1) {
        snprintf(obs, cap, "error: the env plugin's answer returned %d", rc);
        return 0;
    }
    return rc;
}

static int child_report_sandbox(void *vctx, char *obs, size_t cap) {
    child_ctx *c = vctx;
    snprintf(obs, cap, "%d", c->sandbox);
    return 1;
}

/* ---- the host ---- */

cpt_env_plugin *cpt_env_plugin_open(const char *path, const char *config, const cpt_env_limits *lim, cpt_err *err) {
    if (cpt_env_plugin_check(path, err)) return NULL;
    cpt_env_plugin *p = calloc(1, sizeof *p);
    if (!p || !(p->config = strdup(config ? config : ""))) {
        free(p);
        cpt_errf(err, "env plugin: out of memory");
        return NULL;
    }
    if (cpt_plugin_resolve(path, p->file, sizeof p->file, err)) {
        cpt_env_plugin_close(p);
        return NULL;
    }
    p->lim = *lim;
    p->lim.strict = 0;
    child_ctx c = {.p = p};
    char obs[1024];
    int ok = 0;
    if (cpt_env_sandbox_run(&p->lim, child_load, child_report_sandbox, &c, obs, sizeof obs, &ok, err)) {
        cpt_env_plugin_close(p);
        return NULL;
    }
    if (!ok) {
        cpt_errf(err, "env plugin %s: %s", p->file, obs);
        cpt_env_plugin_close(p);
        return NULL;
    }
    p->lim.strict = atoi(obs) == CPT_ENV_SANDBOX_STRICT;
    return p;
}

int cpt_env_plugin_strict(const cpt_env_plugin *p) { return p->lim.strict; }

int cpt_env_plugin_answer(cpt_env_plugin *p, const char *call, const char *extra, char *obs, size_t cap, int *ok,
                          cpt_err *err) {
    child_ctx c = {.p = p, .call = call ? call : "", .extra = extra && *extra ? extra : "{}"};
    return cpt_env_sandbox_run(&p->lim, child_load, child_answer, &c, obs, cap, ok, err);
}

void cpt_env_plugin_close(cpt_env_plugin *p) {
    if (!p) return;
    free(p->config);
    free(p);
}
