/* A misbehaving environment plugin for tests/unit/test_env_sandbox.c that asks for the limits-only sandbox (system
 * calls allowed); the call names the behaviour:
 *   "ok"      reads /etc/hostname's first byte and answers "read" (allowed here)
 *   "alloc"   allocates 1 GiB: past env.memory_mb the allocation fails and it answers "error: out of memory"
 *   "loop"    spins forever
 *   "orphan"  forks a grandchild that sleeps, and sleeps itself: both must be gone after the timeout; the
 *             grandchild's pid is written to the file named by the config first */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reward/env_abi.h"

static char pidfile[256];

int cpt_env_plugin_abi(void) { return CPT_ENV_PLUGIN_ABI; }

int cpt_env_plugin_sandbox(void) { return CPT_ENV_SANDBOX_LIMITS; }

void *cpt_env_plugin_init(const char *config, char *err, size_t err_len) {
    (void)err;
    (void)err_len;
    snprintf(pidfile, sizeof pidfile, "%s", config);
    return pidfile;
}

int cpt_env_plugin_answer(void *s, const char *call, const char *extra, char *obs, size_t cap) {
    (void)s;
    (void)extra;
    if (!strcmp(call, "ok")) {
        int fd = open("/etc/hostname", O_RDONLY);
        if (fd >= 0) close(fd);
        return snprintf(obs, cap, "read"), 1;
    }
    if (!strcmp(call, "alloc")) {
        size_t n = (size_t)1 << 30;
        char *p = malloc(n);
        if (!p) return snprintf(obs, cap, "error: out of memory"), 0;
        memset(p, 1, n);
        free(p);
        return snprintf(obs, cap, "allocated 1 GiB"), 1;
    }
    if (!strcmp(call, "loop")) {
        volatile unsigned long n = 0;
        for (;;) n++;
    }
    if (!strcmp(call, "orphan")) {
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) pause();
        }
        FILE *f = fopen(pidfile, "w");
        if (f) {
            fprintf(f, "%d\n", (int)pid);
            fclose(f);
        }
        for (;;) pause();
    }
    return snprintf(obs, cap, "error: unknown behaviour"), 0;
}
