/* cpt_eval_run on a tiny random model whose greedy outputs are computed here first (trainer/greedy.h, an
 * independent full-forward decoder): a reward that checks the record's "want" string gives exactly the accuracy,
 * mean reward and pass@k the test expects; sampled runs are reproducible and their pass@k matches the unbiased
 * estimator over the returned rewards; cpt_pass_at_k against hand-computed values. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/chat_template.h"
#include "core/dataset.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "reward/eval.h"
#include "tests/check.h"
#include "tests/tiny_model.h"
#include "trainer/greedy.h"

/* 1 when the completion equals extra.want, else 0. */
static int want_score(void *st, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    (void)st;
    for (int i = 0; i < n; i++) {
        json_error_t je;
        json_t *o = json_loads(items[i].extra, 0, &je);
        const char *w = o ? json_string_value(json_object_get(o, "want")) : NULL;
        if (!w || !json_object_get(o, "answer") || !json_object_get(o, "n_tokens")) {
            json_decref(o);
            return cpt_errf(err, "item %d: extra lacks want/answer/n_tokens: %s", i, items[i].extra);
        }
        memset(&out[i], 0, sizeof out[i]);
        out[i].value = strcmp(items[i].completion, w) == 0;
        json_decref(o);
    }
    return 0;
}
static void no_free(void *st) { (void)st; }
static const cpt_reward_ops want_ops = {.score_batch = want_score, .free = no_free};

/* 1 when the completion's first byte is odd: a reward that sampling hits sometimes. */
static int odd_score(void *st, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    (void)st;
    (void)err;
    for (int i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].value = items[i].completion[0] ? (unsigned char)items[i].completion[0] % 2 : 0;
    }
    return 0;
}
static const cpt_reward_ops odd_ops = {.score_batch = odd_score, .free = no_free};


static void test_pass_at_k(void) {
    CHECK_NEAR(cpt_pass_at_k(4, 1, 2), 0.5, 1e-12);
    CHECK_NEAR(cpt_pass_at_k(5, 2, 1), 0.4, 1e-12);
    CHECK_NEAR(cpt_pass_at_k(10, 0, 3), 0.0, 1e-12);
    CHECK_NEAR(cpt_pass_at_k(3, 3, 2), 1.0, 1e-12);
    CHECK_NEAR(cpt_pass_at_k(10, 3, 5), 1.0 - 21.0 / 252.0, 1e-12); /* 1 - C(7,5)/C(10,5) */
    CHECK_NEAR(cpt_pass_at_k(8, 7, 2), 1.0, 1e-12);                 /* n - c < k */
    CHECK(isnan(cpt_pass_at_k(2, 1, 3)));
}

int main(void) {
    test_pass_at_k();
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    if (!tok) { fprintf(stderr, "%s\n", err.msg); return 1; }
    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_by_name("chatml", &tpl, &err), 0);
    cpt_model *m = tiny_model_new(cpt_tokenizer_vocab_size(tok), 2, 5);
    const char *qs[4] = {"What is 1 + 1?", "What is 7 * 3?", "What is 9 - 4?", "What is 50 + 50?"};
    int32_t stops[2] = {cpt_tokenizer_token_id(tok, "<|im_end|>"), cpt_tokenizer_token_id(tok, "<|endoftext|>")};
    int n_stops = stops[1] >= 0 ? 2 : 1;
    const int max_new = 6;

    /* the greedy outputs, computed independently */
    char *greedy[4];
    for (int i = 0; i < 4; i++) {
        cpt_chat_message msg = {.role = "user", .content = qs[i], .content_len = strlen(qs[i])};
        cpt_chat_options co = {.add_generation_prompt = 1};
        cpt_chat_rendered r;
        CHECK_EQ_INT(cpt_chat_render(&tpl, tok, &msg, 1, &co, &r, &err), 0);
        int32_t out[16];
        int g = cpt_greedy_generate(m, r.ids, (int)r.n_ids, max_new, stops, n_stops, out, &err);
        CHECK(g > 0);
        size_t len;
        greedy[i] = cpt_tokenizer_decode(tok, out, (size_t)(g > 0 ? g : 0), 1, &len, &err);
        cpt_chat_rendered_free(&r);
    }
    /* records 0 and 1 want what the model says, 2 and 3 something else */
    json_t *lines = json_array();
    char *text = NULL;
    size_t tl = 0;
    FILE *mem = open_memstream(&text, &tl);
    for (int i = 0; i < 4; i++) {
        json_t *o = json_pack("{s:s, s:s, s:s}", "prompt", qs[i], "answer", "x", "want", i < 2 ? greedy[i] : "\x01no");
        char *s = json_dumps(o, JSON_COMPACT);
        fprintf(mem, "%s\n", s);
        free(s);
        json_decref(o);
    }
    fclose(mem);
    json_decref(lines);
    cpt_dataset_opts dopt = {.format = CPT_DATA_RL_PROMPT};
    cpt_dataset *ds = cpt_dataset_load_text(text, tl, "records", &dopt, &err);
    CHECK_MSG(ds != NULL, "%s", err.msg);

    cpt_reward *want = cpt_reward_new("want", &want_ops, NULL, &err);
    cpt_eval_opts o;
    cpt_eval_opts_default(&o);
    o.tpl = &tpl;
    o.max_new_tokens = max_new;
    o.samples = 1;
    cpt_eval_results res;
    CHECK_MSG(cpt_eval_run(m, tok, ds, want, &o, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT((int)res.n_prompts, 4);
    CHECK_NEAR(res.accuracy, 0.5, 1e-12);
    CHECK_NEAR(res.mean_reward, 0.5, 1e-12);
    CHECK_EQ_INT(res.n_k, 1);
    CHECK_EQ_INT(res.k[0], 1);
    CHECK_NEAR(res.pass_at_k[0], 0.5, 1e-12);
    for (int i = 0; i < 4; i++) CHECK_NEAR(res.rewards[i], i < 2 ? 1 : 0, 0);
    CHECK_EQ_INT(res.interrupted, 0);
    cpt_eval_results_free(&res);

    /* a stop request (a trainer's SIGTERM flag) before the first chunk: no error, nothing evaluated, so a
     * preempted trainer goes on to its checkpoint instead of finishing a long validation */
    volatile sig_atomic_t stop = 1;
    o.stop = &stop;
    CHECK_MSG(cpt_eval_run(m, tok, ds, want, &o, &res, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(res.interrupted, 1);
    CHECK_EQ_INT((int)res.n_prompts, 0);
    CHECK(res.rewards == NULL);
    cpt_eval_results_free(&res);
    stop = 0; /* lowered: the same call runs to the end */
    CHECK_EQ_INT(cpt_eval_run(m, tok, ds, want, &o, &res, &err), 0);
    CHECK_EQ_INT(res.interrupted, 0);
    CHECK_NEAR(res.accuracy, 0.5, 1e-12);
    cpt_eval_results_free(&res);
    o.stop = NULL;

    /* greedy with K = 4: four identical samples, so pass@k = accuracy for every k */
    o.samples = 4;
    CHECK_EQ_INT(cpt_eval_run(m, tok, ds, want, &o, &res, &err), 0);
    CHECK_EQ_INT(res.n_k, 3); /* k = 1, 2, 4 */
    CHECK_EQ_INT(res.k[2], 4);
    for (int i = 0; i < res.n_k; i++) CHECK_NEAR(res.pass_at_k[i], 0.5, 1e-12);
    CHECK_NEAR(res.accuracy, 0.5, 1e-12);
    cpt_eval_results_free(&res);

    /* sampled: reproducible, numbers consistent with the returned rewards */
    cpt_reward *odd = cpt_reward_new("odd", &odd_ops, NULL, &err);
    o.samples = 6;
    o.temperature = 1.5f;
    o.seed = 99;
    cpt_eval_results a, b;
    CHECK_EQ_INT(cpt_eval_run(m, tok, ds, odd, &o, &a, &err), 0);
    CHECK_EQ_INT(cpt_eval_run(m, tok, ds, odd, &o, &b, &err), 0);
    CHECK_EQ_INT(a.n_k, 4); /* 1, 2, 4, 6 */
    CHECK_EQ_INT(a.k[3], 6);
    double acc = 0;
    int any_diff = 0;
    for (int i = 0; i < 24; i++) {
        acc += a.rewards[i] > 0.5;
        any_diff |= a.rewards[i] != b.rewards[i];
    }
    CHECK(!any_diff);
    CHECK_NEAR(a.accuracy, acc / 24, 1e-12);
    CHECK_NEAR(a.mean_reward, acc / 24, 1e-12);
    for (int j = 0; j < a.n_k; j++) {
        double s = 0;
        for (int i = 0; i < 4; i++) {
            int c = 0;
            for (int t = 0; t < 6; t++) c += a.rewards[i * 6 + t] > 0.5;
            /* the estimator by its definition: 1 - C(n-c, k) / C(n, k) */
            int n = 6, k = a.k[j];
            double num = 1, den = 1;
            for (int t = 0; t < k; t++) {
                num *= (n - c - t) > 0 ? (double)(n - c - t) : 0;
                den *= (double)(n - t);
            }
            s += 1 - num / den;
        }
        CHECK_NEAR(a.pass_at_k[j], s / 4, 1e-12);
        if (j) CHECK(a.pass_at_k[j] >= a.pass_at_k[j - 1]);
    }
    CHECK(acc > 0 && acc < 24); /* the reward is hit sometimes, not always: the check above is not vacuous */
    cpt_eval_results_free(&a);
    cpt_eval_results_free(&b);

    /* bad input: a preference file is refused with its format named */
    const char *pref = "{\"prompt\":\"a\",\"chosen\":\"b\",\"rejected\":\"c\"}\n";
    cpt_dataset *pd = cpt_dataset_load_text(pref, strlen(pref), "pref", NULL, &err);
    CHECK(pd != NULL);
    o.samples = 1;
    if (pd) {
        CHECK(cpt_eval_run(m, tok, pd, odd, &o, &res, &err) < 0);
        CHECK(strstr(err.msg, "preference") != NULL);
        cpt_dataset_free(pd);
    }
    o.samples = 0;
    CHECK(cpt_eval_run(m, tok, ds, odd, &o, &res, &err) < 0);

    cpt_reward_free(want);
    cpt_reward_free(odd);
    cpt_dataset_free(ds);
    free(text);
    for (int i = 0; i < 4; i++) free(greedy[i]);
    cpt_model_free(m);
    cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    return check_summary("eval");
}
