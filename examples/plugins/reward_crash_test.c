/* A deliberately misbehaving reward plugin for tests/unit/test_plugin.c: the config names the failure.
 *   "ok"        scores every completion by its length (a working plugin)
 *   "crash"     segfaults while scoring          "abort"   calls abort()
 *   "exit"      exits with status 7              "hang"    sleeps forever
 *   "nan"       returns NaN for the second item  "inf"     returns +inf for the first item
 *   "count"     returns one score fewer          "error"   returns -1 with a message
 *   "initfail"  refuses to start                 "inithang" hangs in init
 *   "crash_after:N" works for N batches, then segfaults (restart test)
 *   "spawnhang:FILE" starts a process of its own (its pid written to FILE), then hangs while scoring */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reward/plugin_abi.h"

typedef struct {
    char mode[64];
    int crash_after, batches;
} crash_state;

int cpt_reward_plugin_abi(void) { return CPT_REWARD_PLUGIN_ABI; }

void *cpt_reward_plugin_init(const char *config, char *err, size_t err_len) {
    if (!strcmp(config, "initfail")) {
        snprintf(err, err_len, "refusing to start as asked");
        return NULL;
    }
    if (!strcmp(config, "inithang"))
        for (;;) pause();
    crash_state *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    snprintf(s->mode, sizeof s->mode, "%s", config);
    if (!strncmp(config, "crash_after:", 12)) s->crash_after = atoi(config + 12);
    return s;
}

void cpt_reward_plugin_free(void *state) { free(state); }

int cpt_reward_plugin_score_batch(void *state, int n, const char *const *prompts, const char *const *completions,
                                  const char *const *extras, double *scores, char *err, size_t err_len) {
    (void)prompts;
    (void)extras;
    crash_state *s = state;
    s->batches++;
    const char *m = s->mode;
    if (!strcmp(m, "crash") || (s->crash_after && s->batches > s->crash_after)) raise(SIGSEGV);
    if (!strcmp(m, "abort")) abort();
    if (!strcmp(m, "exit")) _exit(7);
    if (!strcmp(m, "hang"))
        for (;;) pause();
    if (!strncmp(m, "spawnhang:", 10)) {
        pid_t kid = fork();
        if (kid == 0)
            for (;;) pause();
        FILE *f = fopen(m + 10, "w");
        if (f) fprintf(f, "%d\n", (int)kid), fclose(f);
        for (;;) pause();
    }
    if (!strcmp(m, "error")) {
        snprintf(err, err_len, "the judge is unavailable");
        return -1;
    }
    for (int i = 0; i < n; i++) scores[i] = (double)strlen(completions[i]);
    if (!strcmp(m, "nan") && n > 1) scores[1] = NAN;
    if (!strcmp(m, "inf")) scores[0] = INFINITY;
    if (!strcmp(m, "count")) return n - 1;
    return n;
}
