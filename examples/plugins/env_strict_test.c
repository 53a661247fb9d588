/* A deliberately misbehaving environment plugin for tests/unit/test_env_sandbox.c, in seccomp strict mode; the
 * call names the behaviour:
 *   "ok"      answers "fine" (ok)          "fail"    answers "error: as asked" (the tool failed)
 *   "loop"    spins forever                "open"    opens a file (forbidden: seccomp kills it)
 *   "alloc"   allocates and touches 1 GiB  "small"   allocates 1 MiB from the reserved heap (allowed)
 *   "crash"   segfaults                    "badrc"   returns 7
 *   "extra"   answers with the extra JSON it was given
 * init refuses a config of "initfail". */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reward/env_abi.h"

static int state;

int cpt_env_plugin_abi(void) { return CPT_ENV_PLUGIN_ABI; }

void *cpt_env_plugin_init(const char *config, char *err, size_t err_len) {
    if (!strcmp(config, "initfail")) {
        snprintf(err, err_len, "refusing to start as asked");
        return NULL;
    }
    return &state;
}

int cpt_env_plugin_answer(void *s, const char *call, const char *extra, char *obs, size_t cap) {
    (void)s;
    if (!strcmp(call, "ok")) return snprintf(obs, cap, "fine"), 1;
    if (!strcmp(call, "fail")) return snprintf(obs, cap, "error: as asked"), 0;
    if (!strcmp(call, "extra")) return snprintf(obs, cap, "%s", extra), 1;
    if (!strcmp(call, "loop")) {
        volatile unsigned long n = 0;
        for (;;) n++;
    }
    if (!strcmp(call, "open")) {
        int fd = open("/etc/hostname", O_RDONLY);
        snprintf(obs, cap, "opened: %d", fd);
        return 1;
    }
    if (!strcmp(call, "alloc") || !strcmp(call, "small")) {
        size_t n = !strcmp(call, "alloc") ? (size_t)1 << 30 : (size_t)1 << 20;
        char *p = malloc(n);
        if (!p) return snprintf(obs, cap, "error: out of memory"), 0;
        memset(p, 1, n);
        snprintf(obs, cap, "allocated %zu bytes", n);
        free(p);
        return 1;
    }
    if (!strcmp(call, "crash")) {
        volatile int *np = NULL;
        *np = 1;
    }
    if (!strcmp(call, "badrc")) return 7;
    snprintf(obs, cap, "error: unknown behaviour");
    return 0;
}
