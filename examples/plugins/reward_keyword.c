/* Example reward plugin (ABI: reward/plugin_abi.h): the share of configured keywords that a completion contains,
 * case-insensitive. Config: a comma-separated keyword list, e.g. reward.plugin_config = "because,therefore".
 *
 * Build outside the tree: cc -shared -fPIC -I/path/to/cpt -o libreward_keyword.so reward_keyword.c
 * (the cpt build makes build/plugins/libreward_keyword.so). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reward/plugin_abi.h"

#define MAX_KEYWORDS 64

typedef struct {
    int n;
    char *words[MAX_KEYWORDS];
} keyword_state;

int cpt_reward_plugin_abi(void) { return CPT_REWARD_PLUGIN_ABI; }

void cpt_reward_plugin_free(void *state) {
    keyword_state *k = state;
    if (!k) return;
    for (int i = 0; i < k->n; i++) free(k->words[i]);
    free(k);
}

void *cpt_reward_plugin_init(const char *config, char *err, size_t err_len) {
    keyword_state *k = calloc(1, sizeof *k);
    if (!k) {
        snprintf(err, err_len, "out of memory");
        return NULL;
    }
    const char *p = config;
    while (*p) {
        while (*p == ',' || *p == ' ') p++;
        const char *e = p;
        while (*e && *e != ',') e++;
        size_t n = (size_t)(e - p);
        while (n && p[n - 1] == ' ') n--;
        if (n) {
            if (k->n == MAX_KEYWORDS) {
                snprintf(err, err_len, "more than %d keywords", MAX_KEYWORDS);
                cpt_reward_plugin_free(k);
                return NULL;
            }
            char *w = malloc(n + 1);
            if (!w) {
                cpt_reward_plugin_free(k);
                return NULL;
            }
            for (size_t i = 0; i < n; i++) w[i] = (char)tolower((unsigned char)p[i]);
            w[n] = 0;
            k->words[k->n++] = w;
        }
        p = e;
    }
    if (k->n == 0) {
        snprintf(err, err_len, "no keywords: set reward.plugin_config to a comma-separated list");
        cpt_reward_plugin_free(k);
        return NULL;
    }
    return k;
}

/* Case-insensitive substring test. */
static int contains(const char *hay, const char *word) {
    size_t m = strlen(word);
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < m && h[i] && tolower((unsigned char)h[i]) == word[i]) i++;
        if (i == m) return 1;
    }
    return 0;
}

int cpt_reward_plugin_score_batch(void *state, int n, const char *const *prompts, const char *const *completions,
                                  const char *const *extras, double *scores, char *err, size_t err_len) {
    (void)prompts;
    (void)extras;
    (void)err;
    (void)err_len;
    keyword_state *k = state;
    for (int i = 0; i < n; i++) {
        int hits = 0;
        for (int j = 0; j < k->n; j++) hits += contains(completions[i], k->words[j]);
        scores[i] = (double)hits / k->n;
    }
    return n;
}
