/* The turn driver (rollout/turns.h) on the CPU engine with the tiny tokenizer and a random model, env.call_end
 * set to "e" (the last byte of one token in ten) so that calls happen:
 *  - text helpers: the observation template, the call text (from the last call_start, or the whole turn), the
 *    default templates (chatml, none);
 *  - with a synchronous callback: every completion is model turns and observations in turn; each call's text is
 *    the bytes of its turn; each observation is the tokenized template with the answer (mask 0, logprob 0); the
 *    model's logprobs equal a forward pass over the whole sequence; max_turns and max_new_tokens hold; the same
 *    requests and answers give the same tokens again; a callback that fails gives the timeout observation;
 *  - answered by the caller (the rollout worker's way): calls handed out once, a duplicate or unknown answer
 *    dropped, a call not answered in time gets the timeout observation and the group finishes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rollout/turns.h"
#include "tests/tiny_model.h"

enum { NP = 6, NEW = 72, NG = 4, NS = 4, MAXT = 2 };
static const char *TPL = "\n<tool_response>{observation}</tool_response>\n";

static cpt_tokenizer *tok;
static cpt_model *model;

/* ---- text helpers ---- */

static void test_text(void) {
    char *s = cpt_turn_format_observation("a{observation}b{observation}", "XY");
    CHECK_EQ_STR(s, "aXYbXY");
    free(s);
    s = cpt_turn_format_observation("none", "XY");
    CHECK_EQ_STR(s, "none");
    free(s);
    char *call;
    const char *t1 = "think <tool_call>1</tool_call> then <tool_call>{\"a\": 2}</tool_call>";
    CHECK_EQ_INT(cpt_turn_extract_call(t1, strlen(t1), "<tool_call>", "</tool_call>", 1024, &call), 1);
    CHECK_EQ_STR(call, "<tool_call>{\"a\": 2}</tool_call>");
    free(call);
    CHECK_EQ_INT(cpt_turn_extract_call(t1, strlen(t1), "", "</tool_call>", 1024, &call), 1);
    CHECK_EQ_STR(call, t1);
    free(call);
    CHECK_EQ_INT(cpt_turn_extract_call(t1, strlen(t1), "<call>", "</tool_call>", 10, &call), 1);
    CHECK_EQ_STR(call, "tool_call>"); /* at most 10 bytes, the end kept */
    free(call);
    const char t2[] = "x\0y</c>";
    CHECK_EQ_INT(cpt_turn_extract_call(t2, sizeof t2 - 1, "", "</c>", 64, &call), 1);
    CHECK_EQ_STR(call, "xy</c>"); /* NUL dropped */
    free(call);
    CHECK_EQ_INT(cpt_turn_extract_call("no call here", 12, "", "</c>", 64, &call), 0);
    CHECK(call == NULL);
    CHECK_EQ_INT(cpt_turn_extract_call("</c>x", 5, "", "</c>", 64, &call), 0);

    cpt_err err;
    char *d = cpt_turn_default_template(NULL, &err);
    CHECK_EQ_STR(d, TPL);
    free(d);
    cpt_chat_template ct;
    CHECK_EQ_INT(cpt_chat_template_by_name("chatml", &ct, &err), 0);
    d = cpt_turn_default_template(&ct, &err);
    CHECK_EQ_STR(d, "<|im_end|>\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n");
    free(d);
    cpt_chat_template_free(&ct);
    CHECK_EQ_INT(cpt_chat_template_by_name("qwen3", &ct, &err), 0);
    d = cpt_turn_default_template(&ct, &err);
    CHECK_EQ_STR(d, "<|im_end|>\n<|im_start|>user\n<tool_response>\n{observation}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n");
    free(d);
    cpt_chat_template_free(&ct);
    CHECK_EQ_INT(cpt_chat_template_by_name("llama3", &ct, &err), 0);
    d = cpt_turn_default_template(&ct, &err);
    CHECK_EQ_STR(d, "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n<tool_response>\n{observation}\n"
                    "</tool_response><|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
    free(d);
    cpt_chat_template_free(&ct);
}

/* ---- the driver ---- */

typedef struct answers {
    int n, fail;
    char calls[64][256];
} answers;

static int answer_fn(void *ctx, const char *call, const char *extra, char *obs, size_t cap, int *ok) {
    answers *a = ctx;
    if (a->n < 64) snprintf(a->calls[a->n], sizeof a->calls[a->n], "%s", call);
    CHECK_EQ_STR(extra, "{\"k\":1}");
    a->n++;
    *ok = 1;
    if (a->fail) return -1;
    snprintf(obs, cap, "r%d", a->n);
    return 0;
}

static cpt_engine *engine(void) {
    cpt_engine_opts eo = {.slots = 3, .tok = tok};
    cpt_err err;
    cpt_engine *e = cpt_engine_new(model, &eo, &err);
    CHECK_MSG(e != NULL, "%s", err.msg);
    return e;
}

static cpt_turn_opts opts(double timeout_s) {
    cpt_turn_opts o = {.max_turns = MAXT, .call_start = "", .call_end = "e", .observation_template = (char *)TPL,
                       .reply_timeout_s = timeout_s};
    return o;
}

static int32_t prompts[NG][NP];
static cpt_gen_request reqs[NG];
static const char *extras[NG] = {"{\"k\":1}", "{\"k\":1}", "{\"k\":1}", "{\"k\":1}"};

static void make_requests(void) {
    for (int q = 0; q < NG; q++) {
        for (int i = 0; i < NP; i++) prompts[q][i] = (int32_t)((q * 131 + i * 37 + 11) % 700);
        reqs[q] = (cpt_gen_request){.prompt = prompts[q], .n_prompt = NP, .n_samples = NS, .seed = 7 + (uint64_t)q,
                                    .max_new_tokens = NEW, .sp = {1.0f, 0, 1.0f, 0.0f}};
    }
}

/* The model's logprobs of a sample's mask-1 tokens against a forward pass over prompt + all its tokens. */
static double logprob_gap(const int32_t *prompt, const cpt_turn_sample *s) {
    int n = NP + s->n_tokens;
    int32_t tk[NP + NEW], tgt[NP + NEW], st[2] = {0, n};
    float lp[NP + NEW];
    memcpy(tk, prompt, sizeof(int32_t) * NP);
    memcpy(tk + NP, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
    for (int i = 0; i < n; i++) tgt[i] = i + 1 < n ? tk[i + 1] : -1;
    cpt_batch b = {n, 1, tk, st, tgt};
    cpt_forward_out out = {.logprobs = lp};
    cpt_err err;
    if (cpt_model_forward(model, &b, &out, 0, &err)) return 1e9;
    double worst = 0;
    for (int k = 0; k < s->n_tokens; k++)
        if (s->mask[k]) worst = fmax(worst, fabs((double)s->logprobs[k] - lp[NP - 1 + k]));
    return worst;
}

/* The raw bytes of ids (NUL bytes dropped, as in a call text), NUL-terminated. */
static char *bytes_of(const int32_t *ids, int n) {
    size_t total = 0, len;
    for (int i = 0; i < n; i++) total += cpt_tokenizer_id_bytes(tok, ids[i], &len) ? len : 0;
    char *out = malloc(total + 1), *w = out;
    for (int i = 0; i < n; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, ids[i], &len);
        for (size_t j = 0; b && j < len; j++)
            if (b[j]) *w++ = b[j];
    }
    *w = 0;
    return out;
}

/* Checks one sample's structure; answer_of(i) is the text the i-th call of this sample got. Returns its calls. */
static int check_sample(const int32_t *prompt, const cpt_turn_sample *s, const char *const *answer_of,
                        const char *const *call_of) {
    CHECK(s->n_tokens <= NEW);
    CHECK(s->n_calls <= MAXT);
    CHECK_MSG(logprob_gap(prompt, s) < 1e-4, "logprob gap %g", logprob_gap(prompt, s));
    int i = 0, call = 0, n_model = 0;
    while (i < s->n_tokens) {
        int j = i;
        while (j < s->n_tokens && s->mask[j]) j++;
        n_model += j - i;
        if (j == s->n_tokens) break;
        /* a model turn that ends in the call (its bytes are the call text), then an observation */
        char *turn = bytes_of(s->tokens + i, j - i);
        CHECK_MSG(turn && j > i && turn[strlen(turn) - 1] == 'e', "turn \"%s\"", turn ? turn : "");
        if (call_of && call_of[call]) CHECK_EQ_STR(turn, call_of[call]);
        free(turn);
        int k = j;
        for (; k < s->n_tokens && !s->mask[k]; k++) CHECK(s->logprobs[k] == 0.0f);
        char *want = cpt_turn_format_observation(TPL, answer_of[call]);
        int32_t *ids;
        cpt_err err;
        long nw = cpt_tokenizer_encode(tok, want, strlen(want), &ids, &err);
        free(want);
        if (k - j < nw) CHECK(k == s->n_tokens && s->finish == CPT_FINISH_LENGTH); /* cut at the budget */
        else CHECK_EQ_INT(k - j, nw);
        CHECK(!memcmp(s->tokens + j, ids, sizeof(int32_t) * (size_t)(k - j)));
        free(ids);
        call++;
        i = k;
    }
    CHECK_EQ_INT(call, s->n_calls);
    CHECK_EQ_INT(n_model, s->n_model);
    return call;
}

static void test_sync(void) {
    answers a = {0};
    cpt_engine *e = engine();
    cpt_turn_opts o = opts(30);
    cpt_err err;
    cpt_turns *t = cpt_turns_new(e, tok, &o, &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    if (!t || !e) return;
    cpt_turns_set_answer(t, answer_fn, &a);
    cpt_turn_result res[NG], again[NG];
    CHECK_MSG(cpt_turns_generate(t, reqs, extras, NG, res, &err) == 0, "%s", err.msg);
    /* calls are answered in the order they are made: rebuild each sample's answers from the log */
    int total = 0, two = 0, ended_at_max = 0;
    for (int q = 0; q < NG; q++)
        for (int k = 0; k < NS; k++) total += res[q].samples[k].n_calls;
    CHECK_EQ_INT(total, a.n);
    CHECK_MSG(total >= NG * NS / 2, "only %d calls", total);
    /* every call text is one of the logged ones, and each answer "rN" names its call: check the structure with
     * the answers found in the tokens themselves */
    for (int q = 0; q < NG; q++)
        for (int k = 0; k < NS; k++) {
            const cpt_turn_sample *s = &res[q].samples[k];
            const char *ans[MAXT] = {0}, *calls[MAXT] = {0};
            char buf[MAXT][16];
            int c = 0;
            for (int i = 0; i < s->n_tokens && c < MAXT;) {
                if (s->mask[i]) { i++; continue; }
                int j = i;
                while (j < s->n_tokens && !s->mask[j]) j++;
                char *obs = bytes_of(s->tokens + i, j - i);
                int num = 0;
                const char *p = obs ? strstr(obs, ">r") : NULL;
                if (p) num = atoi(p + 2);
                int cut = j == s->n_tokens && s->finish == CPT_FINISH_LENGTH;
                CHECK_MSG((num >= 1 && num <= a.n) || (cut && !p), "observation \"%s\"", obs ? obs : "");
                snprintf(buf[c], sizeof buf[c], "r%d", num);
                ans[c] = buf[c];
                calls[c] = !cut && num >= 1 && num <= a.n ? a.calls[num - 1] : NULL; /* cut: the number may be too */
                c++;
                free(obs);
                i = j;
            }
            for (; c < MAXT; c++) ans[c] = calls[c] = "";
            int n = check_sample(prompts[q], s, ans, calls);
            two += n == 2;
            if (n == MAXT && s->finish == CPT_FINISH_STOP) {
                /* after max_turns calls a turn that ends on call_end is not a call */
                char *all = bytes_of(s->tokens, s->n_tokens);
                ended_at_max += all && all[strlen(all) - 1] == 'e';
                free(all);
            }
        }
    CHECK_MSG(two > 0, "no sample made %d calls", MAXT);
    CHECK_MSG(ended_at_max > 0, "no sample stopped on call_end after %d calls", MAXT);
    CHECK_EQ_INT(cpt_engine_kv_free_blocks(e), cpt_engine_kv_blocks(e));

    /* the same again: the same tokens */
    answers b = {0};
    cpt_turns_set_answer(t, answer_fn, &b);
    CHECK_MSG(cpt_turns_generate(t, reqs, extras, NG, again, &err) == 0, "%s", err.msg);
    for (int q = 0; q < NG; q++)
        for (int k = 0; k < NS; k++) {
            const cpt_turn_sample *x = &res[q].samples[k], *y = &again[q].samples[k];
            CHECK(x->n_tokens == y->n_tokens && !memcmp(x->tokens, y->tokens, sizeof(int32_t) * (size_t)x->n_tokens) &&
                  !memcmp(x->mask, y->mask, (size_t)x->n_tokens) && x->finish == y->finish);
        }
    for (int q = 0; q < NG; q++) cpt_turn_result_free(&again[q]);

    /* a callback without an answer: the timeout observation */
    answers f = {.fail = 1};
    cpt_turns_set_answer(t, answer_fn, &f);
    CHECK_MSG(cpt_turns_generate(t, reqs, extras, 1, again, &err) == 0, "%s", err.msg);
    int seen = 0;
    for (int k = 0; k < NS; k++) {
        const cpt_turn_sample *s = &again[0].samples[k];
        const char *ans[MAXT] = {CPT_TURN_TIMEOUT_OBS, CPT_TURN_TIMEOUT_OBS};
        seen += check_sample(prompts[0], s, ans, NULL);
    }
    CHECK(seen > 0 && seen == f.n);
    /* the plain engine result of the same */
    int n0 = again[0].samples[1].n_tokens;
    int32_t last = n0 ? again[0].samples[1].tokens[n0 - 1] : -1;
    cpt_gen_result gr;
    CHECK_EQ_INT(cpt_turn_result_to_gen(&again[0], &gr), 0);
    CHECK(gr.n_samples == NS && gr.samples[1].n_tokens == n0 && (!n0 || gr.samples[1].tokens[n0 - 1] == last));
    CHECK(again[0].samples == NULL);
    cpt_gen_result_free(&gr);
    cpt_turn_result_free(&again[0]);
    for (int q = 0; q < NG; q++) cpt_turn_result_free(&res[q]);
    cpt_turns_free(t);
    cpt_engine_free(e);
}

static void test_async(void) {
    cpt_engine *e = engine();
    cpt_turn_opts o = opts(5);
    cpt_err err;
    cpt_turns *t = cpt_turns_new(e, tok, &o, &err);
    if (!t || !e) return;
    int64_t h = cpt_turns_submit(t, &reqs[1], extras[1], &err);
    CHECK(h >= 0);
    double now = 1000; /* the driver's clock is the caller's */
    int answered = 0, dup = 0, timed_out = 0, steps = 0;
    cpt_turn_result r = {0};
    int got = 0;
    while (!got && steps++ < 100000) {
        CHECK(cpt_turns_step(t, now, &err) >= 0);
        cpt_turn_call c;
        while (cpt_turns_next_call(t, &c)) {
            CHECK_EQ_INT(c.handle, h);
            CHECK_EQ_STR(c.extra, extras[1]);
            CHECK(c.turn >= 1 && c.turn <= MAXT && c.call[strlen(c.call) - 1] == 'e');
            if (c.sample == 0 && c.turn == 1) continue; /* never answered: times out */
            char obs[32];
            snprintf(obs, sizeof obs, "s%dt%d", c.sample, c.turn);
            int s = c.sample, tn = c.turn;
            CHECK_EQ_INT(cpt_turns_answer(t, h, s, tn, obs, 1, &err), 0);
            answered++;
            /* the same reply again (a redelivered request): dropped */
            CHECK_EQ_INT(cpt_turns_answer(t, h, s, tn, "dup", 1, &err), 1);
            dup++;
        }
        CHECK_EQ_INT(cpt_turns_answer(t, h + 99, 0, 1, "x", 1, &err), 1);
        CHECK_EQ_INT(cpt_turns_answer(t, h, NS, 1, "x", 1, &err), 1);
        if (cpt_engine_idle(e) && cpt_turns_waiting(t)) {
            now += 6; /* past reply_timeout_s */
            timed_out++;
        }
        got = cpt_turns_take(t, &r);
    }
    CHECK(got);
    CHECK(answered > 0 && dup == answered);
    CHECK_EQ_INT(cpt_turns_groups(t), 0);
    if (got) {
        const cpt_turn_sample *s0 = &r.samples[0];
        CHECK_MSG(s0->n_calls >= 1, "sample 0 made no call: %d tokens", s0->n_tokens);
        CHECK(timed_out > 0);
        for (int k = 0; k < NS; k++) {
            const cpt_turn_sample *s = &r.samples[k];
            char a1[32], a2[32];
            snprintf(a1, sizeof a1, "s%dt1", k);
            snprintf(a2, sizeof a2, "s%dt2", k);
            const char *ans[MAXT] = {k == 0 ? CPT_TURN_TIMEOUT_OBS : a1, a2};
            check_sample(prompts[1], s, ans, NULL);
        }
        cpt_turn_result_free(&r);
    }
    cpt_turns_free(t);
    cpt_engine_free(e);
}

int main(void) {
    cpt_err err;
    tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    if (!tok) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    model = tiny_model_new(cpt_tokenizer_vocab_size(tok), 2, 3);
    test_text();
    make_requests();
    test_sync();
    test_async();
    cpt_model_free(model);
    cpt_tokenizer_free(tok);
    return check_summary("test_turns");
}
