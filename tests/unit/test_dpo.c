/* The DPO loop on a tiny random model: cached reference logprobs equal a direct forward of the initial model over
 * exactly the answer tokens; the held-out margin starts at 0 (policy = reference) and rises when trained on the
 * same pairs; 3 steps + resume + 3 steps give bit-identical weights to 6 steps in one go; bad data is refused. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/chat_template.h"
#include "core/config.h"
#include "core/fs.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "tests/check.h"
#include "trainer/dpo.h"
#include "trainer/dpo_data.h"
#include "weights/model_init.h"

static char dir[64];

static const char *pairs =
    "{\"prompt\":\"What is 1 + 1?\",\"chosen\":\"1 + 1 = 2\\n#### 2\",\"rejected\":\"1 + 1 = 3\\n#### 3\"}\n"
    "{\"prompt\":\"What is 2 + 5?\",\"chosen\":\"2 + 5 = 7\\n#### 7\",\"rejected\":\"2 + 5 = 7\"}\n"
    "{\"prompt\":\"What is 9 - 4?\",\"chosen\":\"9 - 4 = 5\\n#### 5\",\"rejected\":\"9 - 4 = 5\\n#### 6\"}\n"
    "{\"prompt\":\"What is 3 * 3?\",\"chosen\":\"3 * 3 = 9\\n#### 9\",\"rejected\":\"3 * 3 = 6\\n#### 6\"}\n"
    "{\"prompt\":[{\"role\":\"user\",\"content\":\"What is 8 + 8?\"}],\"chosen\":\"8 + 8 = 16\\n#### 16\",\"rejected\":\"8 + 8 = 16\"}\n"
    "{\"prompt\":\"What is 6 - 1?\",\"chosen\":\"6 - 1 = 5\\n#### 5\",\"rejected\":\"6 - 1 = 4\\n#### 4\"}\n";

static cpt_config *config(const char *run, const char *extra_ov) {
    char text[2048];
    snprintf(text, sizeof text,
             "[run]\ndir = \"%s/%s\"\nseed = 7\n[algo]\ntype = \"dpo\"\ndpo_beta = 0.5\n"
             "[model]\ninit = \"random\"\nhidden_size = 32\nintermediate_size = 64\nnum_layers = 1\nnum_heads = 2\n"
             "max_position_embeddings = 128\n[tokenizer]\npath = \"examples/tiny-tokenizer\"\n"
             "[data]\ntrain = \"%s/pairs.jsonl\"\neval = \"%s/pairs.jsonl\"\nchat_template = \"chatml\"\nshuffle = true\n"
             "[dpo]\npairs_per_step = 4\n[train]\nsteps = 6\ntokens_per_micro_batch = 128\nmax_seq_len = 64\nthreads = 1\n"
             "log_every = 1\n[optim]\nlr = 0.01\nschedule = \"constant\"\n[checkpoint]\nkeep_last = 2\n",
             dir, run, dir, dir);
    char *ov[1] = {(char *)extra_ov};
    cpt_err err;
    cpt_config *cfg = cpt_config_load_text(text, strlen(text), "test", extra_ov ? 1 : 0, ov, &err);
    if (!cfg) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    return cfg;
}

static double log_softmax_at(const float *row, int vocab, int tok) {
    double mx = row[0];
    for (int v = 1; v < vocab; v++) mx = row[v] > mx ? row[v] : mx;
    double s = 0;
    for (int v = 0; v < vocab; v++) s += exp(row[v] - mx);
    return row[tok] - mx - log(s);
}

static void test_reference(void) {
    cpt_config *cfg = config("ref", NULL);
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    cpt_chat_template tpl;
    CHECK_EQ_INT(cpt_chat_template_by_name("chatml", &tpl, &err), 0);
    cpt_dpo_data_opts o = {.tok = tok, .tpl = &tpl, .eos_id = -1, .max_seq_len = 64};
    char path[128];
    snprintf(path, sizeof path, "%s/pairs.jsonl", dir);
    cpt_dpo_data d;
    CHECK_MSG(cpt_dpo_data_load(path, cfg, &o, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT((int)d.n, 6);
    cpt_model *m = cpt_model_from_config(cfg, cpt_tokenizer_vocab_size(tok), -1, -1, &err);
    CHECK(m != NULL);
    CHECK_EQ_INT(cpt_dpo_data_reference(&d, m, 128, &err), 0);
    int vocab = cpt_model_cfg(m)->vocab_size;
    double max_diff = 0;
    for (size_t i = 0; i < d.n; i++)
        for (int j = 0; j < 2; j++) {
            const cpt_dpo_seq *s = &d.pairs[i].s[j];
            /* the masked targets are exactly the answer and the end-of-turn token */
            int32_t tg[64];
            int nt = 0;
            for (int t = 0; t + 1 < s->n; t++)
                if (s->mask[t] > 0) tg[nt++] = s->ids[t + 1];
            size_t len;
            char *txt = cpt_tokenizer_decode(tok, tg, (size_t)nt, 0, &len, &err);
            char want[128];
            const char *ans[6][2] = {{"1 + 1 = 2\n#### 2", "1 + 1 = 3\n#### 3"}, {"2 + 5 = 7\n#### 7", "2 + 5 = 7"},
                                     {"9 - 4 = 5\n#### 5", "9 - 4 = 5\n#### 6"}, {"3 * 3 = 9\n#### 9", "3 * 3 = 6\n#### 6"},
                                     {"8 + 8 = 16\n#### 16", "8 + 8 = 16"}, {"6 - 1 = 5\n#### 5", "6 - 1 = 4\n#### 4"}};
            snprintf(want, sizeof want, "%s<|im_end|>", ans[i][j]);
            CHECK_MSG(txt && !strncmp(txt, want, strlen(want)) && strlen(txt) <= strlen(want) + 1,
                      "pair %zu seq %d: masked targets \"%s\"", i, j, txt ? txt : "");
            free(txt);
            /* cached reference = log_softmax of a direct forward at every position */
            float *logits = malloc((size_t)s->n * (size_t)vocab * sizeof *logits);
            int32_t *tgt = malloc((size_t)s->n * sizeof *tgt);
            for (int t = 0; t < s->n; t++) tgt[t] = -1;
            int32_t ss[2] = {0, s->n};
            cpt_batch b = {.n_tokens = s->n, .n_seqs = 1, .tokens = s->ids, .seq_start = ss, .targets = tgt};
            cpt_forward_out fo = {.logits = logits};
            CHECK_EQ_INT(cpt_model_forward(m, &b, &fo, 0, &err), 0);
            for (int t = 0; t + 1 < s->n; t++) {
                double d0 = fabs(log_softmax_at(logits + (size_t)t * (size_t)vocab, vocab, s->ids[t + 1]) - s->ref[t]);
                max_diff = d0 > max_diff ? d0 : max_diff;
            }
            free(logits);
            free(tgt);
        }
    CHECK_NEAR(max_diff, 0, 1e-4);
    cpt_model_free(m);
    cpt_dpo_data_free(&d);

    /* without a chat template: prompt + answer + eos, the loss on the answer and the eos */
    int32_t eos = cpt_tokenizer_token_id(tok, "<|endoftext|>");
    CHECK(eos >= 0);
    cpt_dpo_data_opts raw = {.tok = tok, .tpl = NULL, .eos_id = eos, .max_seq_len = 64};
    CHECK_MSG(cpt_dpo_data_load(path, cfg, &raw, &d, &err) < 0, "a messages prompt without a template must fail");
    CHECK(strstr(err.msg, ":5:") != NULL); /* names the line */
    raw.max_pairs = 4;
    CHECK_MSG(cpt_dpo_data_load(path, cfg, &raw, &d, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT((int)d.n, 4);
    for (size_t i = 0; i < d.n; i++) {
        const cpt_dpo_seq *s = &d.pairs[i].s[1];
        int32_t *ids = NULL;
        const char *rej[4] = {"1 + 1 = 3\n#### 3", "2 + 5 = 7", "9 - 4 = 5\n#### 6", "3 * 3 = 6\n#### 6"};
        long na = cpt_tokenizer_encode(tok, rej[i], strlen(rej[i]), &ids, &err);
        float cnt = 0;
        for (int t = 0; t < s->n; t++) cnt += s->mask[t];
        CHECK_EQ_INT((int)cnt, (int)na + 1);
        CHECK_EQ_INT(s->ids[s->n - 1], eos);
        CHECK(s->mask[s->n - 2] == 1 && s->mask[s->n - 1] == 0);
        free(ids);
    }
    cpt_dpo_data_free(&d);
    cpt_chat_template_free(&tpl);
    cpt_tokenizer_free(tok);
    cpt_config_free(cfg);
}

static cpt_model *final_model(const char *run, int step) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s/checkpoints/step-%d/model", dir, run, step);
    cpt_err err;
    cpt_model *m = cpt_model_load(p, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    return m;
}

static void test_train_and_resume(void) {
    cpt_err err;
    cpt_dpo_result r;
    cpt_config *a = config("a", NULL);
    CHECK_MSG(cpt_dpo_run(a, NULL, &r, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT((int)r.steps_done, 6);
    CHECK_NEAR(r.eval_margin_start, 0, 1e-6); /* policy = reference at the start */
    CHECK(r.eval_margin > 0.5);                /* trained on these pairs: the margin rises */
    CHECK(r.eval_loss < log(2.0) - 0.1);
    CHECK(r.eval_accuracy >= 5.0 / 6.0);
    fprintf(stderr, "dpo test: margin 0 -> %.4f, loss %.4f, accuracy %.3f\n", r.eval_margin, r.eval_loss, r.eval_accuracy);
    cpt_config_free(a);

    cpt_config *b1 = config("b", "train.max_steps_this_run=3");
    CHECK_EQ_INT(cpt_dpo_run(b1, NULL, &r, &err), 0);
    CHECK_EQ_INT((int)r.steps_done, 3);
    cpt_config_free(b1);
    cpt_config *b2 = config("b", NULL);
    CHECK_EQ_INT(cpt_dpo_run(b2, NULL, &r, &err), 0);
    CHECK_EQ_INT((int)r.steps_done, 6);
    cpt_config_free(b2);
    cpt_model *ma = final_model("a", 6), *mb = final_model("b", 6);
    CHECK(ma && mb);
    if (ma && mb) {
        CHECK_EQ_INT((int)cpt_model_numel(ma), (int)cpt_model_numel(mb));
        CHECK(memcmp(cpt_model_data(ma), cpt_model_data(mb), cpt_model_numel(ma) * sizeof(float)) == 0);
    }
    cpt_model_free(ma);
    cpt_model_free(mb);

    /* a stop request: checkpoint, then 1 */
    volatile sig_atomic_t stop = 1;
    cpt_config *c = config("c", NULL);
    CHECK_EQ_INT(cpt_dpo_run(c, &stop, &r, &err), 1);
    CHECK(r.interrupted);
    CHECK_EQ_INT((int)r.steps_done, 0);
    cpt_config_free(c);

    /* ipo runs and its loss falls too */
    cpt_config *ipo = config("ipo", "algo.dpo_loss=ipo");
    CHECK_EQ_INT(cpt_dpo_run(ipo, NULL, &r, &err), 0);
    CHECK(r.eval_margin > 0);
    cpt_config_free(ipo);
}

static void test_bad_data(void) {
    char p[128];
    snprintf(p, sizeof p, "%s/rl.jsonl", dir);
    const char *rl = "{\"prompt\":\"What is 1 + 1?\",\"answer\":\"2\"}\n";
    cpt_err err;
    CHECK_EQ_INT(cpt_write_file_atomic(p, rl, strlen(rl), &err), 0);
    char ov[160];
    snprintf(ov, sizeof ov, "data.train=%s", p);
    cpt_config *c = config("bad", ov);
    CHECK(cpt_dpo_run(c, NULL, NULL, &err) < 0);
    CHECK_MSG(strstr(err.msg, "preference") != NULL, "%s", err.msg);
    cpt_config_free(c);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/cpt-dpo-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    char p[128];
    snprintf(p, sizeof p, "%s/pairs.jsonl", dir);
    cpt_err err;
    if (cpt_write_file_atomic(p, pairs, strlen(pairs), &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    test_reference();
    test_train_and_resume();
    test_bad_data();
    cpt_remove_tree(dir, &err);
    return check_summary("dpo");
}
