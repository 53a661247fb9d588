/* A reward plugin for the tests of failed groups (tests/e2e/test_run_dead_groups.sh): it scores a completion 1 if
 * it holds a digit, else 0, and misbehaves on the prompts its config names ("KEY=VALUE;KEY=VALUE"):
 *   crash_on=TEXT   segfaults on a batch whose prompt contains TEXT (the group can never be scored)
 *   value=X         every completion of a prompt containing value_on scores X (e.g. 1e39)
 *   value_on=TEXT   (default: every prompt) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/plugin_abi.h"

typedef struct {
    char crash_on[256], value_on[256];
    int has_value;
    double value;
} poison_state;

int cpt_reward_plugin_abi(void) { return CPT_REWARD_PLUGIN_ABI; }

static void take(const char *config, const char *key, char *out, size_t cap) {
    const char *p = strstr(config, key);
    if (!p) return;
    p += strlen(key);
    size_t n = strcspn(p, ";");
    if (n >= cap) n = cap - 1;
    memcpy(out, p, n);
    out[n] = 0;
}

void *cpt_reward_plugin_init(const char *config, char *err, size_t err_len) {
    poison_state *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    char v[64] = "";
    take(config, "crash_on=", s->crash_on, sizeof s->crash_on);
    take(config, "value_on=", s->value_on, sizeof s->value_on);
    take(config, "value=", v, sizeof v);
    if (v[0]) {
        s->has_value = 1;
        s->value = strtod(v, NULL);
    }
    return s;
}

void cpt_reward_plugin_free(void *state) { free(state); }

int cpt_reward_plugin_score_batch(void *state, int n, const char *const *prompts, const char *const *completions,
                                  const char *const *extras, double *scores, char *err, size_t err_len) {
    (void)extras;
    (void)err;
    (void)err_len;
    poison_state *s = state;
    for (int i = 0; i < n; i++) {
        if (s->crash_on[0] && strstr(prompts[i], s->crash_on)) raise(SIGSEGV);
        scores[i] = strpbrk(completions[i], "0123456789") ? 1.0 : 0.0;
        if (s->has_value && (!s->value_on[0] || strstr(prompts[i], s->value_on))) scores[i] = s->value;
    }
    return n;
}
