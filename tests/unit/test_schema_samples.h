/* Sample queue messages shared by the schema tests, the queue integration tests and the bench. Owned by the
 * caller's stack: the arrays live in the sample struct. */
#ifndef CPT_TESTS_SCHEMA_SAMPLES_H
#define CPT_TESTS_SCHEMA_SAMPLES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue/schema.h"

typedef struct sample_prompt {
    cpt_prompt_group m;
    int32_t prompt[64];
    int32_t stop_ids[2];
    char *stop_strs[2];
    char s0[8], s1[8];
    char extra[64];
} sample_prompt;

static inline void sample_prompt_init(sample_prompt *s, const char *run, uint64_t epoch, uint64_t index,
                                      uint32_t n_prompt) {
    memset(s, 0, sizeof *s);
    if (n_prompt > 64) n_prompt = 64;
    snprintf(s->m.run, sizeof s->m.run, "%s", run);
    s->m.id.epoch = epoch;
    s->m.id.index = index;
    for (uint32_t i = 0; i < n_prompt; i++) s->prompt[i] = (int32_t)(index * 7 + i * 13) % 151000;
    s->m.prompt = s->prompt;
    s->m.n_prompt = n_prompt;
    s->m.n_samples = 4;
    s->m.sampling.temperature = 0.75f;
    s->m.sampling.top_p = 0.9f;
    s->m.sampling.top_k = 50;
    s->m.sampling.min_p = 0.05f;
    s->m.sampling.max_new_tokens = 256;
    s->m.sampling.seed = 0xfeedface12345ull + index;
    s->stop_ids[0] = 151643;
    s->stop_ids[1] = 151645;
    s->m.sampling.stop_ids = s->stop_ids;
    s->m.sampling.n_stop_ids = 2;
    snprintf(s->s0, sizeof s->s0, "</s>");
    snprintf(s->s1, sizeof s->s1, "\n\n");
    s->stop_strs[0] = s->s0;
    s->stop_strs[1] = s->s1;
    s->m.sampling.stop_strs = s->stop_strs;
    s->m.sampling.n_stop_strs = 2;
    s->m.min_version = 3;
    snprintf(s->extra, sizeof s->extra, "{\"answer\": \"%llu\"}", (unsigned long long)index);
    s->m.extra = s->extra;
}

/* A rollout group with n completions of `tokens` tokens each; scored adds rewards, two parts and teacher
 * logprobs on completion 0. Free with sample_group_free. */
static inline cpt_rollout_group sample_group(const char *run, uint64_t epoch, uint64_t index, uint32_t n,
                                             uint32_t tokens, int scored) {
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    snprintf(g.run, sizeof g.run, "%s", run);
    g.id.epoch = epoch;
    g.id.index = index;
    g.n_prompt = 5;
    g.prompt = malloc(5 * sizeof(int32_t));
    for (int i = 0; i < 5; i++) g.prompt[i] = 100 + i + (int32_t)index;
    g.n_completions = n;
    g.completions = calloc(n, sizeof *g.completions);
    for (uint32_t c = 0; c < n; c++) {
        cpt_completion *k = &g.completions[c];
        k->n_tokens = tokens + c;
        k->tokens = malloc((k->n_tokens + 1) * sizeof(int32_t));
        k->logprobs = malloc((k->n_tokens + 1) * sizeof(float));
        for (uint32_t i = 0; i < k->n_tokens; i++) {
            k->tokens[i] = (int32_t)((i * 31 + c * 17 + index) % 150000);
            k->logprobs[i] = -0.001f * (float)(i % 97) - 0.01f * (float)c;
        }
        k->finish = (cpt_finish)(c % 3);
        if (scored && c == 0) {
            k->teacher_logprobs = malloc((k->n_tokens + 1) * sizeof(float));
            for (uint32_t i = 0; i < k->n_tokens; i++) k->teacher_logprobs[i] = -0.5f - 0.001f * (float)i;
        }
    }
    g.weight_version = 7;
    snprintf(g.worker, sizeof g.worker, "rollout-%u@node1", (unsigned)(index % 3));
    g.timings.started = 1764670000.25;
    g.timings.gen_s = 1.5;
    g.timings.queue_s = 0.125;
    g.extra = strdup("{\"answer\": \"42\"}");
    if (scored) {
        g.has_rewards = 1;
        g.rewards = malloc(n * sizeof(double));
        for (uint32_t c = 0; c < n; c++) g.rewards[c] = c % 2 ? 1.0 : -0.25 * c;
        g.n_parts = 2;
        g.part_names = malloc(2 * sizeof(char *));
        g.part_names[0] = strdup("math");
        g.part_names[1] = strdup("format");
        g.part_values = malloc(2 * n * sizeof(double));
        for (uint32_t c = 0; c < n; c++) {
            g.part_values[c] = c % 2;
            g.part_values[n + c] = 0.5 * c;
        }
    }
    return g;
}

static inline void sample_group_free(cpt_rollout_group *g) { cpt_rollout_group_free(g); }

#endif
