/* KV-cache decode (model/decode.c) against the full forward on the committed fixture models: two sequences
 * prefilled in one call, then decoded a token at a time with uneven interleaving (a step may hold one slot or
 * both), a prefix copied into a third slot and continued; every position's logits must match the packed forward.
 * Also: misuse is refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core/rng.h"
#include "model/kv_cache.h"

static const char *FIXTURES[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};

static double max_rel(const float *a, const float *b, int n) {
    double worst = 0, scale = 1e-6;
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs((double)a[i] - b[i]) / scale);
    return worst;
}

static void one(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/model/%s", name);
    cpt_err err;
    cpt_model *m = cpt_model_load(dir, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (!m) return;
    int V = cpt_model_cfg(m)->vocab_size;
    enum { LA = 9, LB = 14 };
    int32_t tok[LA + LB], start[3] = {0, LA, LA + LB};
    cpt_rng rng;
    cpt_rng_seed(&rng, 7, 0);
    for (int i = 0; i < LA + LB; i++) tok[i] = (int32_t)cpt_rng_below(&rng, (uint64_t)V);
    float *ref = malloc(sizeof(float) * (LA + LB) * V);
    cpt_batch b = {LA + LB, 2, tok, start, NULL};
    cpt_forward_out out = {.logits = ref};
    CHECK_MSG(cpt_model_forward(m, &b, &out, 0, &err) == 0, "%s", err.msg);

    cpt_kv_cache c;
    cpt_decode_work w = {0};
    CHECK(cpt_kv_cache_init(&c, cpt_model_cfg(m), 3, 64, &err) == 0);
    float *lg = malloc(sizeof(float) * (LA + LB) * V), *last = malloc(sizeof(float) * 2 * V);
    double worst = 0;
    /* prefill A[0..4) into slot 0 and B[0..6) into slot 1 in one call, every position's logits */
    int32_t pre[10];
    memcpy(pre, tok, 4 * sizeof(int32_t));
    memcpy(pre + 4, tok + LA, 6 * sizeof(int32_t));
    cpt_decode_seg segs[2] = {{0, 0, 4}, {1, 4, 6}};
    CHECK_MSG(cpt_model_decode(m, &c, pre, 10, segs, 2, last, lg, &w, &err) == 0, "%s", err.msg);
    worst = fmax(worst, max_rel(lg, ref, 4 * V));
    worst = fmax(worst, max_rel(lg + 4 * V, ref + LA * V, 6 * V));
    worst = fmax(worst, max_rel(last, ref + 3 * V, V));
    worst = fmax(worst, max_rel(last + V, ref + (LA + 5) * V, V));
    CHECK_EQ_INT(c.slots[0].len, 4);
    CHECK_EQ_INT(c.slots[1].len, 6);
    /* slot 2 = B's first 6 positions, then continue B there while slot 1 continues too: both must agree */
    CHECK(cpt_kv_cache_copy_prefix(&c, 2, 1, 6, &err) == 0);
    int pa = 4, pb = 6, pc = 6;
    for (int step = 0; pa < LA || pb < LB; step++) {
        int32_t t[3];
        cpt_decode_seg s[3];
        int n = 0, at[3], which[3];
        if (pa < LA && step % 3 != 1) t[n] = tok[pa], s[n] = (cpt_decode_seg){0, n, 1}, at[n] = pa, which[n++] = 0;
        if (pb < LB) t[n] = tok[LA + pb], s[n] = (cpt_decode_seg){1, n, 1}, at[n] = LA + pb, which[n++] = 1;
        if (pc < LB && step % 2 == 0) t[n] = tok[LA + pc], s[n] = (cpt_decode_seg){2, n, 1}, at[n] = LA + pc, which[n++] = 2;
        if (!n) {
            t[n] = tok[LA + pc], s[n] = (cpt_decode_seg){2, n, 1}, at[n] = LA + pc, which[n++] = 2;
        }
        CHECK_MSG(cpt_model_decode(m, &c, t, n, s, n, lg, NULL, &w, &err) == 0, "%s", err.msg);
        for (int k = 0; k < n; k++) {
            worst = fmax(worst, max_rel(lg + k * V, ref + at[k] * V, V));
            if (which[k] == 0) pa++;
            else if (which[k] == 1) pb++;
            else pc++;
        }
    }
    printf("%s: decode vs forward, worst logits error %.3g (relative to max |logit|)\n", name, worst);
    CHECK_MSG(worst < 1e-5, "%s: %g", name, worst);
    CHECK_EQ_INT(c.slots[0].len, LA);
    CHECK_EQ_INT(c.slots[1].len, LB);

    /* misuse */
    int32_t bad = V;
    cpt_decode_seg s0 = {0, 0, 1};
    CHECK(cpt_model_decode(m, &c, &bad, 1, &s0, 1, lg, NULL, &w, &err) == -1 && strstr(err.msg, "vocabulary"));
    int32_t two[2] = {1, 2};
    cpt_decode_seg dup[2] = {{0, 0, 1}, {0, 1, 1}};
    CHECK(cpt_model_decode(m, &c, two, 2, dup, 2, lg, NULL, &w, &err) == -1 && strstr(err.msg, "two segments"));
    cpt_decode_seg gap[1] = {{0, 0, 1}};
    CHECK(cpt_model_decode(m, &c, two, 2, gap, 1, lg, NULL, &w, &err) == -1 && strstr(err.msg, "cover"));
    int32_t many[64] = {0};
    cpt_decode_seg full = {2, 0, 64};
    CHECK(cpt_model_decode(m, &c, many, 64, &full, 1, lg, NULL, &w, &err) == -1 && strstr(err.msg, "context"));
    CHECK_EQ_INT(c.slots[2].len, pc); /* a refused call changes nothing */
    cpt_kv_cache_reset(&c, 1);
    CHECK(cpt_kv_cache_copy_prefix(&c, 2, 1, 3, &err) == -1);

    cpt_kv_cache_free(&c);
    cpt_decode_work_free(&w);
    free(ref), free(lg), free(last);
    cpt_model_free(m);
}

int main(void) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) one(FIXTURES[i]);
    return check_summary("test_decode");
}
