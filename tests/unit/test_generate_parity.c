/* The rollout engine against transformers and against the trainer's forward:
 *  - greedy generation (3 prompts x 20 tokens on 2 slots, so continuous batching refills a slot) is
 *    token-identical to tests/fixtures/generate/generate.json (make_generate_fixture.py), logprobs within 1e-4;
 *  - the recorded behaviour logprobs equal cpt_model_forward's logprobs of the same tokens (prompt + completion
 *    packed) within 1e-5, when sampling at temperature 1 without truncation and when greedy;
 *  - the same request and seed give the same tokens alone or in a busy batch; the n samples share one prefill;
 *  - stop ids, stop strings (through the tokenizer's bytes) and max_new_tokens end samples with the right reason. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rollout/engine.h"

static const char *FIXTURES[] = {"qwen2_tied", "qwen2_untied", "qwen3", "llama3"};

static cpt_gen_request greedy_req(const int32_t *p, int n, int max_new) {
    cpt_gen_request r = {.prompt = p, .n_prompt = n, .n_samples = 1, .max_new_tokens = max_new};
    r.sp = (cpt_sample_params){0.0f, 0, 1.0f, 0.0f};
    return r;
}

/* Worst |recorded - recomputed| logprob over the completion of one sample. */
static double logprob_gap(cpt_model *m, const int32_t *prompt, int np, const cpt_gen_sample *s, float temperature) {
    int n = np + s->n_tokens;
    int32_t *tok = malloc(sizeof(int32_t) * n), *tgt = malloc(sizeof(int32_t) * n), st[2] = {0, n};
    float *lp = malloc(sizeof(float) * n), *lg = temperature != 1.0f ? malloc(sizeof(float) * (size_t)n * cpt_model_cfg(m)->vocab_size) : NULL;
    memcpy(tok, prompt, sizeof(int32_t) * np);
    memcpy(tok + np, s->tokens, sizeof(int32_t) * s->n_tokens);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tok[i + 1] : -1;
    cpt_batch b = {n, 1, tok, st, tgt};
    cpt_forward_out out = {.logprobs = lp};
    cpt_err err;
    double worst = 0;
    if (cpt_model_forward(m, &b, &out, 0, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        worst = 1e9;
    }
    for (int k = 0; k < s->n_tokens; k++) worst = fmax(worst, fabs((double)s->logprobs[k] - lp[np - 1 + k]));
    free(tok), free(tgt), free(lp), free(lg);
    return worst;
}

static void parity(const char *name, json_t *fx) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/model/%s", name);
    cpt_err err;
    cpt_model *m = cpt_model_load(dir, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    json_t *cases = json_object_get(json_object_get(fx, "models"), name);
    CHECK_MSG(json_array_size(cases) == 3, "%s: fixture has %zu cases", name, json_array_size(cases));
    if (!m || json_array_size(cases) != 3) {
        cpt_model_free(m);
        return;
    }
    cpt_engine_opts o = {.slots = 2, .prefill_chunk = 4}; /* prompts of 5, 9, 13 tokens prefill in pieces */
    cpt_engine *e = cpt_engine_new(m, &o, &err);
    int32_t prompts[3][32];
    int np[3];
    cpt_gen_request req[3];
    for (int c = 0; c < 3; c++) {
        json_t *p = json_object_get(json_array_get(cases, c), "prompt");
        np[c] = (int)json_array_size(p);
        for (int i = 0; i < np[c]; i++) prompts[c][i] = (int32_t)json_integer_value(json_array_get(p, i));
        req[c] = greedy_req(prompts[c], np[c], 20);
        CHECK(json_is_true(json_object_get(json_array_get(cases, c), "generate_agrees")));
    }
    cpt_gen_result res[3];
    CHECK_MSG(cpt_engine_generate(e, req, 3, res, &err) == 0, "%s", err.msg);
    double lp_worst = 0, fwd_worst = 0;
    int mismatches = 0;
    for (int c = 0; c < 3; c++) {
        json_t *cs = json_array_get(cases, c), *want = json_object_get(cs, "tokens"), *wlp = json_object_get(cs, "logprobs");
        CHECK_EQ_INT(res[c].n_samples, 1);
        CHECK_EQ_INT(res[c].samples[0].n_tokens, 20);
        CHECK_EQ_INT(res[c].samples[0].finish, CPT_FINISH_LENGTH);
        for (int i = 0; i < 20 && i < res[c].samples[0].n_tokens; i++) {
            if (res[c].samples[0].tokens[i] != json_integer_value(json_array_get(want, i))) {
                mismatches++;
                fprintf(stderr, "%s prompt %d token %d: %d, transformers %lld\n", name, c, i, res[c].samples[0].tokens[i],
                        json_integer_value(json_array_get(want, i)));
                break;
            }
            lp_worst = fmax(lp_worst, fabs(res[c].samples[0].logprobs[i] - json_real_value(json_array_get(wlp, i))));
        }
        fwd_worst = fmax(fwd_worst, logprob_gap(m, prompts[c], np[c], &res[c].samples[0], 1.0f));
        cpt_gen_result_free(&res[c]);
    }
    CHECK_EQ_INT(mismatches, 0);
    CHECK_MSG(lp_worst < 1e-4, "%s: greedy logprobs vs transformers %g", name, lp_worst);
    CHECK_MSG(fwd_worst < 1e-5, "%s: greedy logprobs vs forward %g", name, fwd_worst);

    /* temperature 1, no truncation: 4 samples of one prompt, recorded vs recomputed logprobs; shared prefill */
    cpt_engine_free(e);
    o.slots = 4;
    o.prefill_chunk = 0;
    e = cpt_engine_new(m, &o, &err);
    cpt_gen_request r = greedy_req(prompts[1], np[1], 24);
    r.n_samples = 4;
    r.sp.temperature = 1.0f;
    r.seed = 99;
    cpt_gen_result one;
    CHECK_MSG(cpt_engine_generate(e, &r, 1, &one, &err) == 0, "%s", err.msg);
    double samp_worst = 0;
    int distinct = 0;
    for (int k = 0; k < one.n_samples; k++) {
        samp_worst = fmax(samp_worst, logprob_gap(m, prompts[1], np[1], &one.samples[k], 1.0f));
        if (k && memcmp(one.samples[k].tokens, one.samples[0].tokens, sizeof(int32_t) * 24)) distinct++;
    }
    CHECK_MSG(samp_worst < 1e-5, "%s: sampled logprobs vs forward %g", name, samp_worst);
    CHECK_MSG(distinct >= 2, "%s: samples of one prompt should differ (%d differ)", name, distinct);
    CHECK_EQ_INT(cpt_engine_get_stats(e)->prefills, 1);
    CHECK_EQ_INT(cpt_engine_get_stats(e)->shared_prefills, 3);
    printf("%s: greedy token-identical to transformers (logprob gap %.2g), greedy/sampled logprobs vs forward %.2g / %.2g\n",
           name, lp_worst, fwd_worst, samp_worst);

    /* same request and seed, alone on 1 slot vs among others on 3 slots: identical samples */
    cpt_engine_free(e);
    o.slots = 3;
    e = cpt_engine_new(m, &o, &err);
    cpt_gen_request mix[3] = {greedy_req(prompts[0], np[0], 30), r, greedy_req(prompts[2], np[2], 7)};
    mix[0].sp.temperature = 0.7f, mix[0].sp.top_k = 20, mix[0].seed = 5, mix[0].n_samples = 2;
    cpt_gen_result rm[3];
    CHECK_MSG(cpt_engine_generate(e, mix, 3, rm, &err) == 0, "%s", err.msg);
    int same = rm[1].n_samples == 4;
    for (int k = 0; same && k < 4; k++)
        same = rm[1].samples[k].n_tokens == one.samples[k].n_tokens &&
               !memcmp(rm[1].samples[k].tokens, one.samples[k].tokens, sizeof(int32_t) * one.samples[k].n_tokens) &&
               !memcmp(rm[1].samples[k].logprobs, one.samples[k].logprobs, sizeof(float) * one.samples[k].n_tokens);
    CHECK_MSG(same, "%s: the same request and seed gave other samples in another batch", name);
    CHECK(cpt_engine_get_stats(e)->slot_steps > cpt_engine_get_stats(e)->decode_steps); /* batched */
    for (int k = 0; k < 3; k++) cpt_gen_result_free(&rm[k]);

    /* 4 samples on 2 slots with blocks of 4 positions: samples 2 and 3 start after 0 and 1 finished, from the
     * prompt blocks the request held for them (the prompt ran once, in pieces of 3 rows; the partly filled last
     * block is copied on write); bitwise the same output */
    {
        cpt_engine_opts o2 = {.slots = 2, .prefill_chunk = 3, .block_size = 4};
        cpt_engine *e2 = cpt_engine_new(m, &o2, &err);
        cpt_gen_result two;
        CHECK_MSG(cpt_engine_generate(e2, &r, 1, &two, &err) == 0, "%s", err.msg);
        int eq = two.n_samples == 4;
        for (int k = 0; eq && k < 4; k++)
            eq = two.samples[k].n_tokens == one.samples[k].n_tokens &&
                 !memcmp(two.samples[k].tokens, one.samples[k].tokens, sizeof(int32_t) * one.samples[k].n_tokens) &&
                 !memcmp(two.samples[k].logprobs, one.samples[k].logprobs, sizeof(float) * one.samples[k].n_tokens);
        CHECK_MSG(eq, "%s: 4 samples on 2 slots differ from 4 slots", name);
        CHECK_EQ_INT(cpt_engine_get_stats(e2)->prefills, 1);
        CHECK_EQ_INT(cpt_engine_get_stats(e2)->shared_prefills, 3);
        CHECK_EQ_INT(cpt_engine_kv_free_blocks(e2), cpt_engine_kv_blocks(e2));
        cpt_gen_result_free(&two);
        cpt_engine_free(e2);
    }

    /* stop id: the 4th greedy token of prompt 0 (its first occurrence ends the sample) */
    json_t *want0 = json_object_get(json_array_get(cases, 0), "tokens");
    int32_t stop = (int32_t)json_integer_value(json_array_get(want0, 3));
    int first = 0;
    while (json_integer_value(json_array_get(want0, first)) != stop) first++;
    cpt_gen_request rs = greedy_req(prompts[0], np[0], 20);
    int32_t stops[2] = {255, stop};
    rs.stop_ids = stops, rs.n_stop_ids = 2;
    cpt_gen_result gs;
    CHECK_MSG(cpt_engine_generate(e, &rs, 1, &gs, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(gs.samples[0].n_tokens, first + 1);
    CHECK_EQ_INT(gs.samples[0].tokens[first], stop);
    CHECK_EQ_INT(gs.samples[0].finish, CPT_FINISH_STOP);
    cpt_gen_result_free(&gs);
    rs = greedy_req(prompts[0], np[0], 5);
    CHECK_MSG(cpt_engine_generate(e, &rs, 1, &gs, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(gs.samples[0].n_tokens, 5);
    CHECK_EQ_INT(gs.samples[0].finish, CPT_FINISH_LENGTH);
    cpt_gen_result_free(&gs);
    cpt_gen_result_free(&one);

    /* bad requests are refused with a reason */
    int32_t badp[1] = {100000};
    rs = greedy_req(badp, 1, 5);
    CHECK(cpt_engine_submit(e, &rs, &err) == -1 && strstr(err.msg, "vocabulary"));
    rs = greedy_req(prompts[0], np[0], 5);
    rs.sp.top_p = 0.0f;
    CHECK(cpt_engine_submit(e, &rs, &err) == -1 && strstr(err.msg, "top_p"));
    rs.sp.top_p = 1.0f;
    const char *ss[1] = {"x"};
    rs.stop_strs = ss, rs.n_stop_strs = 1;
    CHECK(cpt_engine_submit(e, &rs, &err) == -1 && strstr(err.msg, "tokenizer"));
    cpt_engine_free(e);
    cpt_model_free(m);
}

/* Stop strings over the tiny byte-level tokenizer (ids 0..255 are single bytes) on a 256-token model. */
static void stop_strings(void) {
    cpt_err err;
    cpt_model *m = cpt_model_load("tests/fixtures/model/qwen2_untied", &err);
    cpt_tokenizer *tok = cpt_tokenizer_load("tests/fixtures/tokenizer/tiny_tokenizer.json", &err);
    CHECK_MSG(m && tok, "%s", err.msg);
    if (!m || !tok) return;
    cpt_engine_opts o = {.slots = 2, .tok = tok};
    cpt_engine *e = cpt_engine_new(m, &o, &err);
    int32_t p[4] = {10, 20, 30, 40};
    cpt_gen_request r = greedy_req(p, 4, 20);
    cpt_gen_result g;
    CHECK(cpt_engine_generate(e, &r, 1, &g, &err) == 0);
    /* the bytes of tokens 6 and 7 as a stop string: expect the first k whose byte prefix ends with it */
    char text[256], stop[16];
    size_t at = 0, n, sl = 0;
    for (int i = 6; i < 8; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, g.samples[0].tokens[i], &n);
        memcpy(stop + sl, b, n), sl += n;
    }
    stop[sl] = 0;
    int expect = -1;
    for (int i = 0; i < 20 && expect < 0; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, g.samples[0].tokens[i], &n);
        memcpy(text + at, b, n), at += n;
        if (at >= sl && !memcmp(text + at - sl, stop, sl)) expect = i + 1;
    }
    CHECK(sl > 0 && strlen(stop) == sl && expect > 0 && expect <= 8);
    const char *ss[2] = {"never-in-bytes-0123456789", stop};
    r.stop_strs = ss, r.n_stop_strs = 2;
    cpt_gen_result g2;
    CHECK_MSG(cpt_engine_generate(e, &r, 1, &g2, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(g2.samples[0].n_tokens, expect);
    CHECK_EQ_INT(g2.samples[0].finish, CPT_FINISH_STOP);
    CHECK(!memcmp(g2.samples[0].tokens, g.samples[0].tokens, sizeof(int32_t) * (size_t)expect));
    /* an empty stop string is refused, naming it, and leaves nothing queued */
    const char *bad[2] = {stop, ""};
    r.stop_strs = bad, r.n_stop_strs = 2;
    CHECK(cpt_engine_submit(e, &r, &err) == -1 && strstr(err.msg, "stop string 1 is empty"));
    CHECK_EQ_INT(cpt_engine_pending(e), 0);
    cpt_gen_result_free(&g);
    cpt_gen_result_free(&g2);
    cpt_engine_free(e);
    cpt_tokenizer_free(tok);
    cpt_model_free(m);
}

int main(void) {
    json_error_t je;
    json_t *fx = json_load_file("tests/fixtures/generate/generate.json", 0, &je);
    CHECK_MSG(fx != NULL, "generate.json:%d: %s", je.line, je.text);
    if (!fx) return check_summary("test_generate_parity");
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) parity(FIXTURES[i], fx);
    stop_strings();
    json_decref(fx);
    return check_summary("test_generate_parity");
}
