/* Optimistic admission with preemption (rollout/engine.c) on the CPU decoder:
 *  - a pool so small that samples are preempted many times (their blocks freed, recomputed on re-admission in
 *    chunks) gives every sample the same tokens, logprobs and finish reasons as a roomy pool that never preempts:
 *    greedy and sampled requests of several samples, different prompt and completion lengths, stop strings;
 *  - the old admission (CPT_KV_ADMIT_RESERVE_FULL) never preempts; on the same small pool the optimistic one keeps
 *    more slots busy (occupancy printed for both);
 *  - nothing leaks: every block is free once idle, and after a clear in the middle of preemptions;
 *  - a request that cannot fit even alone is still refused at submit. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/tokenizer.h"
#include "rollout/engine.h"

enum { NREQ = 6, MAXP = 12, SLOTS = 6, MAX_LEN = 64, BS = 4 };

static int32_t prompts[NREQ][MAXP];
static const char *stops[1];

static void requests(cpt_gen_request *r) {
    static const int np[NREQ] = {5, 9, 3, 12, 7, 6}, nnew[NREQ] = {40, 24, 50, 12, 33, 45};
    static const int ns[NREQ] = {5, 1, 2, 3, 4, 1};
    static const float temp[NREQ] = {1.0f, 0.0f, 0.8f, 0.0f, 1.0f, 1.2f};
    for (int q = 0; q < NREQ; q++) {
        for (int i = 0; i < np[q]; i++) prompts[q][i] = (int32_t)(32 + (q * 37 + i * 11) % 90);
        r[q] = (cpt_gen_request){.prompt = prompts[q], .n_prompt = np[q], .n_samples = ns[q], .seed = 7 + (uint64_t)q,
                                 .max_new_tokens = nnew[q], .sp = {temp[q], q == 4 ? 20 : 0, q == 2 ? 0.9f : 1.0f, 0}};
        if (stops[0] && q % 2 == 0) r[q].stop_strs = stops, r[q].n_stop_strs = 1;
    }
}

static int same_results(const cpt_gen_result *a, const cpt_gen_result *b) {
    if (a->n_samples != b->n_samples) return 0;
    for (int k = 0; k < a->n_samples; k++)
        if (a->samples[k].n_tokens != b->samples[k].n_tokens || a->samples[k].finish != b->samples[k].finish ||
            memcmp(a->samples[k].tokens, b->samples[k].tokens, sizeof(int32_t) * (size_t)a->samples[k].n_tokens) ||
            memcmp(a->samples[k].logprobs, b->samples[k].logprobs, sizeof(float) * (size_t)a->samples[k].n_tokens))
            return 0;
    return 1;
}

/* Runs the workload on a fresh engine; fills res and the engine's stats. */
static int run(cpt_model *m, const cpt_tokenizer *tok, int kv_blocks, int admission, int reserve, cpt_gen_result *res,
               cpt_engine_stats *st) {
    cpt_err err;
    cpt_engine_opts o = {.slots = SLOTS, .max_len = MAX_LEN, .block_size = BS, .prefill_chunk = 8, .tok = tok,
                         .kv_blocks = kv_blocks, .kv_admission = admission, .kv_reserve_blocks = reserve};
    cpt_engine *e = cpt_engine_new(m, &o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return -1;
    cpt_gen_request req[NREQ];
    requests(req);
    int rc = cpt_engine_generate(e, req, NREQ, res, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    *st = *cpt_engine_get_stats(e);
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));
    cpt_engine_free(e);
    return rc;
}

static void free_all(cpt_gen_result *r) {
    for (int q = 0; q < NREQ; q++) cpt_gen_result_free(&r[q]);
}

static double occupancy(const cpt_engine_stats *st) {
    return (double)st->slot_steps / ((double)st->decode_steps * SLOTS);
}

int main(void) {
    cpt_err err;
    cpt_model *m = cpt_model_load("tests/fixtures/model/qwen2_untied", &err);
    cpt_tokenizer *tok = cpt_tokenizer_load("tests/fixtures/tokenizer/tiny_tokenizer.json", &err);
    CHECK_MSG(m && tok, "%s", err.msg);
    if (!m || !tok) return check_summary("test_engine_preempt");

    /* a stop string that occurs: the bytes of a token request 0 generates without one */
    cpt_gen_result ref[NREQ], got[NREQ];
    cpt_engine_stats rst, gst;
    if (run(m, tok, 0, CPT_KV_ADMIT_RESERVE_FULL, 0, ref, &rst)) return check_summary("test_engine_preempt");
    static char stop[16];
    for (int i = 6; i < ref[0].samples[0].n_tokens && !stop[0]; i++) {
        size_t n;
        const char *b = cpt_tokenizer_id_bytes(tok, ref[0].samples[0].tokens[i], &n);
        if (n > 0 && n < sizeof stop && !memchr(b, 0, n)) memcpy(stop, b, n);
    }
    CHECK(stop[0] != 0);
    stops[0] = stop;
    free_all(ref);

    /* the reference: a roomy pool (every slot's context), admission of whole completions: nothing preempted */
    if (run(m, tok, 0, CPT_KV_ADMIT_RESERVE_FULL, 0, ref, &rst)) return check_summary("test_engine_preempt");
    CHECK_EQ_INT(rst.preemptions, 0);
    int n_stop = 0, n_samples = 0;
    for (int q = 0; q < NREQ; q++)
        for (int k = 0; k < ref[q].n_samples; k++) n_stop += ref[q].samples[k].finish == CPT_FINISH_STOP, n_samples++;
    CHECK(n_stop > 0);

    /* one context (16 blocks of 4) for 6 slots: optimistic admission preempts and recomputes, same completions */
    const int small = MAX_LEN / BS;
    if (run(m, tok, small, CPT_KV_ADMIT_OPTIMISTIC, 0, got, &gst)) return check_summary("test_engine_preempt");
    int same = 1;
    for (int q = 0; q < NREQ; q++) same &= same_results(&got[q], &ref[q]);
    CHECK_MSG(same, "a preempting pool gave other tokens, logprobs or finishes than a roomy one");
    CHECK_MSG(gst.preemptions >= 10, "only %ld preemptions", gst.preemptions);
    CHECK(gst.recomputed_tokens > 0);
    CHECK_EQ_INT(gst.generated_tokens, rst.generated_tokens);
    free_all(got);

    /* a larger reserve admits fewer samples at once, preempts less, and changes no token either */
    cpt_engine_stats r3;
    if (run(m, tok, small, CPT_KV_ADMIT_OPTIMISTIC, 3, got, &r3)) return check_summary("test_engine_preempt");
    same = 1;
    for (int q = 0; q < NREQ; q++) same &= same_results(&got[q], &ref[q]);
    CHECK_MSG(same, "kv_reserve_blocks 3 gave other completions");
    printf("kv_reserve_blocks 3: %ld preemptions, %ld decode steps\n", r3.preemptions, r3.decode_steps);
    free_all(got);

    /* the same small pool with the old admission: nothing preempted, fewer slots busy */
    cpt_engine_stats fst;
    if (run(m, tok, small, CPT_KV_ADMIT_RESERVE_FULL, 0, got, &fst)) return check_summary("test_engine_preempt");
    same = 1;
    for (int q = 0; q < NREQ; q++) same &= same_results(&got[q], &ref[q]);
    CHECK(same);
    CHECK_EQ_INT(fst.preemptions, 0);
    printf("%d samples (%d stopped by a stop string), %ld tokens; pool of %d blocks, %d slots:\n", n_samples, n_stop,
           rst.generated_tokens, small, SLOTS);
    printf("  reserve_full: %ld decode steps, %ld slot_steps, occupancy %.2f\n", fst.decode_steps, fst.slot_steps,
           occupancy(&fst));
    printf("  optimistic:   %ld decode steps, %ld slot_steps, occupancy %.2f, %ld preemptions, %ld recomputed tokens\n",
           gst.decode_steps, gst.slot_steps, occupancy(&gst), gst.preemptions, gst.recomputed_tokens);
    printf("  roomy pool:   %ld decode steps, occupancy %.2f\n", rst.decode_steps, occupancy(&rst));
    CHECK(occupancy(&gst) > occupancy(&fst) && gst.decode_steps < fst.decode_steps);
    free_all(got);
    free_all(ref);

    /* cleared in the middle of preemptions: every block back; then a request that cannot fit alone is refused */
    cpt_engine_opts o = {.slots = SLOTS, .max_len = MAX_LEN, .block_size = BS, .tok = tok, .kv_blocks = small};
    cpt_engine *e = cpt_engine_new(m, &o, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    if (!e) return check_summary("test_engine_preempt");
    cpt_gen_request req[NREQ];
    requests(req);
    for (int q = 0; q < NREQ; q++) CHECK(cpt_engine_submit(e, &req[q], &err) >= 0);
    for (int i = 0; i < 60 && cpt_engine_get_stats(e)->preemptions < 3; i++) CHECK(cpt_engine_step(e, &err) >= 0);
    CHECK(cpt_engine_get_stats(e)->preemptions >= 3);
    cpt_engine_clear(e);
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), small);
    CHECK(cpt_engine_idle(e) && cpt_engine_waiting(e) == 0 && cpt_engine_active(e) == 0);
    cpt_gen_request huge = req[1];
    huge.max_new_tokens = MAX_LEN;
    huge.n_samples = 2; /* the context (16 blocks) and the held prompt (3) */
    CHECK(cpt_engine_submit(e, &huge, &err) == -1 && strstr(err.msg, "needs 19 KV blocks, the pool has 16"));
    huge.n_samples = 1;
    CHECK(cpt_engine_submit(e, &huge, &err) >= 0);
    cpt_engine_free(e);
    o.kv_admission = 7;
    CHECK(cpt_engine_new(m, &o, &err) == NULL && strstr(err.msg, "kv_admission 7"));

    cpt_tokenizer_free(tok);
    cpt_model_free(m);
    return check_summary("test_engine_preempt");
}
