/* The engine's KV block accounting (rollout/engine.c) on the CPU decoder:
 *  - the samples of a request share its prompt blocks (the prompt runs once) and copy the partly filled one on write:
 *    every sample's recorded logprobs equal the packed forward's over its prompt + completion, and every block is
 *    free again once the engine is idle;
 *  - a pool too small to admit everyone at once still finishes every request, with the same tokens as a pool that
 *    holds everyone (admission waits for blocks, nothing leaks);
 *  - a request that could never fit is refused at submit; cpt_engine_clear in the middle frees everything;
 *  - options out of range are refused, naming them; without CUDA the inference placement says so. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "rollout/engine.h"
#include "tests/tiny_model.h"

enum { V = 64, NP = 6, NEW = 10, NREQ = 4, NS = 3 };

/* Worst |recorded - forward| logprob over one sample's completion. */
static double logprob_gap(cpt_model *m, const int32_t *prompt, const cpt_gen_sample *s) {
    int n = NP + s->n_tokens;
    int32_t tok[NP + NEW], tgt[NP + NEW], st[2] = {0, n};
    float lp[NP + NEW];
    memcpy(tok, prompt, sizeof(int32_t) * NP);
    memcpy(tok + NP, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
    cpt_batch b = {n, 1, tok, st, tgt};
    cpt_forward_out out = {.logprobs = lp};
    cpt_err err;
    if (cpt_model_forward(m, &b, &out, 0, &err)) return 1e9;
    double worst = 0;
    for (int k = 0; k < s->n_tokens; k++) worst = fmax(worst, fabs((double)s->logprobs[k] - lp[NP - 1 + k]));
    return worst;
}

static void requests(int32_t prompts[NREQ][NP], cpt_gen_request *r) {
    for (int q = 0; q < NREQ; q++) {
        for (int i = 0; i < NP; i++) prompts[q][i] = (int32_t)((q * 17 + i * 5 + 3) % V);
        r[q] = (cpt_gen_request){.prompt = prompts[q], .n_prompt = NP, .n_samples = NS, .seed = 100 + (uint64_t)q,
                                 .max_new_tokens = NEW, .sp = {1.0f, 0, 1.0f, 0.0f}};
    }
}

static int same_results(const cpt_gen_result *a, const cpt_gen_result *b) {
    if (a->n_samples != b->n_samples) return 0;
    for (int k = 0; k < a->n_samples; k++)
        if (a->samples[k].n_tokens != b->samples[k].n_tokens ||
            memcmp(a->samples[k].tokens, b->samples[k].tokens, sizeof(int32_t) * (size_t)a->samples[k].n_tokens) ||
            memcmp(a->samples[k].logprobs, b->samples[k].logprobs, sizeof(float) * (size_t)a->samples[k].n_tokens))
            return 0;
    return 1;
}

int main(void) {
    cpt_model *m = tiny_model_new(V, 2, 5);
    cpt_err err;
    int32_t prompts[NREQ][NP];
    cpt_gen_request req[NREQ];
    requests(prompts, req);

    /* a roomy pool: blocks of 4 positions, so each prompt's second block (positions 4, 5) is shared partly filled */
    cpt_engine_opts big = {.slots = 6, .max_len = 24, .block_size = 4};
    cpt_engine *e = cpt_engine_new(m, &big, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return check_summary("test_engine_blocks");
    CHECK_EQ_INT(cpt_engine_kv_blocks(e), 7 * 6); /* every slot's context and one more */
    cpt_gen_result ref[NREQ];
    CHECK_MSG(cpt_engine_generate(e, req, NREQ, ref, &err) == 0, "%s", err.msg);
    double gap = 0;
    for (int q = 0; q < NREQ; q++)
        for (int k = 0; k < ref[q].n_samples; k++) gap = fmax(gap, logprob_gap(m, prompts[q], &ref[q].samples[k]));
    const cpt_engine_stats *st = cpt_engine_get_stats(e);
    printf("shared prompts: %ld prefills, %ld shared, logprobs vs forward %.2g, %d of %d blocks free\n", st->prefills,
           st->shared_prefills, gap, cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
    CHECK_MSG(gap < 1e-5, "logprobs vs forward %g", gap);
    CHECK_EQ_INT(st->prefills, NREQ);
    CHECK_EQ_INT(st->shared_prefills, NREQ * (NS - 1));
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
    cpt_engine_free(e);

    /* a pool of 7 blocks: one context of 24 positions (6 blocks) and one more. A sample needs 4 blocks (6 + 10
     * positions), the first of a request 2 more to hold the prompt for the others: samples wait for blocks. */
    cpt_engine_opts small = big;
    small.kv_blocks = 7;
    small.kv_admission = CPT_KV_ADMIT_RESERVE_FULL; /* whole completions (optimistic: test_engine_preempt) */
    e = cpt_engine_new(m, &small, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return check_summary("test_engine_blocks");
    cpt_gen_result got[NREQ];
    CHECK_MSG(cpt_engine_generate(e, req, NREQ, got, &err) == 0, "%s", err.msg);
    int same = 1;
    for (int q = 0; q < NREQ; q++) same &= same_results(&got[q], &ref[q]);
    st = cpt_engine_get_stats(e);
    printf("small pool: %ld decode steps, occupancy %.2f, %d of %d blocks free\n", st->decode_steps,
           (double)st->slot_steps / ((double)st->decode_steps * 6), cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
    CHECK_MSG(same, "a small pool gave other tokens than a roomy one");
    CHECK(st->slot_steps < 2 * st->decode_steps); /* at most one sample at a time (4 + 4 blocks > 7) */
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), 7);
    for (int q = 0; q < NREQ; q++) cpt_gen_result_free(&got[q]);

    /* could never fit: 2 samples of a 6-token prompt to the context's end need 6 + 2 blocks */
    cpt_gen_request huge = req[0];
    huge.max_new_tokens = 100;
    huge.n_samples = 2;
    CHECK(cpt_engine_submit(e, &huge, &err) == -1 && strstr(err.msg, "needs 8 KV blocks, the pool has 7"));
    huge.n_samples = 1; /* alone it fits */
    CHECK(cpt_engine_submit(e, &huge, &err) >= 0);
    /* cleared in the middle (a weight change): nothing held */
    CHECK(cpt_engine_submit(e, &req[1], &err) >= 0);
    for (int i = 0; i < 3; i++) CHECK(cpt_engine_step(e, &err) >= 0);
    CHECK(cpt_engine_kv_free_blocks(e) < 7);
    cpt_engine_clear(e);
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), 7);
    CHECK(cpt_engine_idle(e) && cpt_engine_pending(e) == 0 && cpt_engine_active(e) == 0);
    cpt_engine_free(e);
    for (int q = 0; q < NREQ; q++) cpt_gen_result_free(&ref[q]);

    /* options */
    cpt_engine_opts bad = small;
    bad.kv_blocks = 5;
    CHECK(cpt_engine_new(m, &bad, &err) == NULL && strstr(err.msg, "5 blocks cannot hold one context of 24"));
    bad = small;
    bad.block_size = -1;
    CHECK(cpt_engine_new(m, &bad, &err) == NULL && strstr(err.msg, "block_size -1"));
#ifndef CPT_HAVE_CUDA
    CHECK(cpt_model_use_cuda_infer(m, 0, &err) == -1 && strstr(err.msg, "built without CUDA"));
#endif
    cpt_model_free(m);
    return check_summary("test_engine_blocks");
}
