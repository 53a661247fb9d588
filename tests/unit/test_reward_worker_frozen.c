/* The frozen models of the reward worker: the reward model's score equals the value head's output at the last
 * token computed directly; the OPD teacher's logprobs equal log_softmax of the model's logits at each completion
 * token; cpt_reward_score_group fills rewards, parts and teacher_logprobs with those numbers; loading through an
 * HF folder keeps the value head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/tokenizer.h"
#include "model/model.h"
#include "queue/schema.h"
#include "reward/reward_model.h"
#include "reward/teacher.h"
#include "reward/worker.h"
#include "tests/check.h"
#include "tests/tiny_model.h"

static cpt_model *tiny_model(int vocab, int value_head) {
    cpt_model *m = tiny_model_new(vocab, 2, 42);
    if (value_head) tiny_model_add_value_head(m, 7);
    return m;
}

/* Direct: forward of one sequence with logits and values. */
static void direct(cpt_model *m, const int32_t *ids, int n, float *logits, float *values) {
    int32_t *tgt = malloc((size_t)n * sizeof *tgt);
    for (int i = 0; i < n; i++) tgt[i] = -1;
    int32_t ss[2] = {0, n};
    cpt_batch b = {.n_tokens = n, .n_seqs = 1, .tokens = ids, .seq_start = ss, .targets = tgt};
    cpt_forward_out fo = {.logits = logits, .values = values};
    cpt_err err;
    CHECK_EQ_INT(cpt_model_forward(m, &b, &fo, 0, &err), 0);
    free(tgt);
}

static double log_softmax_at(const float *row, int vocab, int tok) {
    double mx = row[0];
    for (int v = 1; v < vocab; v++) mx = row[v] > mx ? row[v] : mx;
    double s = 0;
    for (int v = 0; v < vocab; v++) s += exp(row[v] - mx);
    return row[tok] - mx - log(s);
}

static int32_t *enc(const cpt_tokenizer *tok, const char *s, int *n) {
    cpt_err err;
    int32_t *ids = NULL;
    long k = cpt_tokenizer_encode(tok, s, strlen(s), &ids, &err);
    if (k < 0) { fprintf(stderr, "%s\n", err.msg); exit(1); }
    *n = (int)k;
    return ids;
}


/* What the rewards see of a group: a NUL byte in a completion (the byte-level token for 0x00) does not hide the rest
 * of it (a length rule is not dodged), and an extra that is not a JSON object with distinct keys reaches the reward
 * as it came, refused with the reward's own reason instead of being read as {}. */
static void nul_and_bad_extra(const cpt_tokenizer *tok) {
    cpt_err err;
    int nul = -1;
    size_t nb;
    for (int i = 0; i < cpt_tokenizer_vocab_size(tok) && nul < 0; i++) {
        const char *b = cpt_tokenizer_id_bytes(tok, i, &nb);
        if (b && nb == 1 && b[0] == 0) nul = i;
    }
    CHECK_MSG(nul >= 0, "the tiny tokenizer has no token for byte 0x00");
    if (nul < 0) return;
    int na;
    int32_t *ids = enc(tok, "hello world ", &na);
    int nc = 1 + 20 * na;
    int32_t *comp = malloc(sizeof(int32_t) * (size_t)nc);
    comp[0] = nul;
    for (int r = 0; r < 20; r++) memcpy(comp + 1 + r * na, ids, sizeof(int32_t) * (size_t)na);
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    o.length_target = 100, o.length_penalty = 0.01, o.length_max_penalty = 1.0;
    cpt_reward *len = cpt_reward_builtin("length", &o, &err);
    cpt_reward *math = cpt_reward_builtin("math", &o, &err);
    CHECK(len && math);
    cpt_completion c = {.n_tokens = (uint32_t)nc, .tokens = comp};
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    g.n_prompt = 1, g.prompt = ids, g.n_completions = 1, g.completions = &c;
    cpt_reward_scorer sc = {.reward = len, .tok = tok};
    CHECK_MSG(len && cpt_reward_score_group(&sc, &g, &err) == 0, "%s", err.msg);
    /* 241 characters against a target of 100: the penalty, capped at 1 */
    CHECK_MSG(g.has_rewards && g.rewards[0] < -0.5, "a NUL first: length reward %g", g.has_rewards ? g.rewards[0] : 0);
    free(g.rewards);
    for (uint32_t k = 0; k < g.n_parts; k++) free(g.part_names[k]);
    free(g.part_names), free(g.part_values);
    const char *bad[] = {"{\"answer\": \"72\"", "{\"answer\": 72, \"answer\": 5}", "[1, 2]"};
    for (int k = 0; k < 3; k++) {
        memset(&g, 0, sizeof g);
        g.n_prompt = 1, g.prompt = ids, g.n_completions = 1, g.completions = &c;
        g.extra = (char *)bad[k];
        sc.reward = math;
        CHECK_EQ_INT(math ? cpt_reward_score_group(&sc, &g, &err) : 0, -1);
        CHECK_MSG(!strstr(err.msg, "has no 'answer'"), "extra %s: read as another object: %s", bad[k], err.msg);
    }
    cpt_reward_free(len);
    cpt_reward_free(math);
    free(comp);
    free(ids);
}

int main(void) {
    cpt_err err;
    cpt_tokenizer *tok = cpt_tokenizer_load("examples/tiny-tokenizer", &err);
    if (!tok) { fprintf(stderr, "%s\n", err.msg); return 1; }
    int vocab = cpt_tokenizer_vocab_size(tok);
    const char *prompt = "<|im_start|>user\nWhat is 2 + 3?<|im_end|>\n<|im_start|>assistant\n";
    const char *comps[3] = {"2 + 3 = 5\n#### 5", "#### 6", "5"};
    int np, nc[3];
    int32_t *p = enc(tok, prompt, &np), *c[3];
    for (int i = 0; i < 3; i++) c[i] = enc(tok, comps[i], &nc[i]);

    /* ---- reward model: value at the last token ---- */
    cpt_model *rm = tiny_model(vocab, 1);
    double scores[3];
    const int32_t *cc[3] = {c[0], c[1], c[2]};
    CHECK_EQ_INT(cpt_reward_model_score_ids(rm, p, np, 3, cc, nc, scores, &err), 0);
    for (int i = 0; i < 3; i++) {
        int n = np + nc[i];
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        memcpy(ids, p, (size_t)np * sizeof *ids);
        memcpy(ids + np, c[i], (size_t)nc[i] * sizeof *ids);
        float *val = malloc((size_t)n * sizeof *val);
        direct(rm, ids, n, NULL, val);
        CHECK_NEAR(scores[i], val[n - 1], 1e-6);
        free(ids);
        free(val);
    }
    CHECK(fabs(scores[0] - scores[1]) > 1e-6); /* different completions, different scores */

    /* through an HF folder: the value head survives, the text provider gives the same scores */
    char dir[] = "/tmp/cpt-rm-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    CHECK_EQ_INT(cpt_model_save_hf(rm, dir, 0, &err), 0);
    cpt_reward *r = cpt_reward_model_load(dir, "examples/tiny-tokenizer", &err);
    CHECK_MSG(r != NULL, "%s", err.msg);
    if (r) {
        for (int i = 0; i < 3; i++) {
            cpt_reward_result res;
            CHECK_EQ_INT(cpt_reward_score(r, prompt, comps[i], NULL, &res, &err), 0);
            CHECK_NEAR(res.value, scores[i], 1e-6);
            CHECK_EQ_INT(res.n_parts, 1);
            CHECK_EQ_STR(res.parts[0].name, "model");
        }
        cpt_reward_free(r);
    }
    /* a model without a value head is refused */
    cpt_model *plain = tiny_model(vocab, 0);
    CHECK(cpt_reward_model_score_ids(plain, p, np, 3, cc, nc, scores, &err) < 0);
    CHECK(strstr(err.msg, "value head") != NULL);

    /* ---- teacher: logprob of each completion token given prompt + previous tokens ---- */
    cpt_model *teacher = plain;
    float *tl[3];
    for (int i = 0; i < 3; i++) tl[i] = malloc((size_t)nc[i] * sizeof(float));
    CHECK_EQ_INT(cpt_teacher_logprobs(teacher, p, np, 3, cc, nc, tl, &err), 0);
    double max_diff = 0;
    for (int i = 0; i < 3; i++) {
        int n = np + nc[i];
        int32_t *ids = malloc((size_t)n * sizeof *ids);
        memcpy(ids, p, (size_t)np * sizeof *ids);
        memcpy(ids + np, c[i], (size_t)nc[i] * sizeof *ids);
        float *logits = malloc((size_t)n * (size_t)vocab * sizeof *logits);
        direct(teacher, ids, n, logits, NULL);
        for (int j = 0; j < nc[i]; j++) {
            double want = log_softmax_at(logits + (size_t)(np - 1 + j) * (size_t)vocab, vocab, c[i][j]);
            double d = fabs(want - tl[i][j]);
            max_diff = d > max_diff ? d : max_diff;
            CHECK(tl[i][j] <= 0);
        }
        free(ids);
        free(logits);
    }
    CHECK_NEAR(max_diff, 0, 1e-4);
    /* a token outside the vocabulary is an error naming it */
    int32_t bad[2] = {1, vocab + 5};
    const int32_t *bb[1] = {bad};
    int nb[1] = {2};
    float bo[2];
    float *bop[1] = {bo};
    CHECK(cpt_teacher_logprobs(teacher, p, np, 1, bb, nb, bop, &err) < 0);
    CHECK(strstr(err.msg, "completions[0].tokens[1]") != NULL);

    /* ---- a whole group: math reward + teacher ---- */
    cpt_rollout_group g;
    memset(&g, 0, sizeof g);
    g.prompt = malloc((size_t)np * sizeof *g.prompt);
    memcpy(g.prompt, p, (size_t)np * sizeof *p);
    g.n_prompt = (uint32_t)np;
    g.n_completions = 3;
    g.completions = calloc(3, sizeof *g.completions);
    for (int i = 0; i < 3; i++) {
        g.completions[i].n_tokens = (uint32_t)nc[i];
        g.completions[i].tokens = malloc((size_t)nc[i] * sizeof(int32_t));
        memcpy(g.completions[i].tokens, c[i], (size_t)nc[i] * sizeof(int32_t));
        g.completions[i].logprobs = calloc((size_t)nc[i], sizeof(float));
    }
    g.extra = strdup("{\"answer\": \"5\"}");
    snprintf(g.run, sizeof g.run, "t");
    snprintf(g.worker, sizeof g.worker, "rollout-0");
    cpt_reward_options o;
    cpt_reward_options_default(&o);
    cpt_reward *math = cpt_reward_builtin("math", &o, &err);
    CHECK(math != NULL);
    cpt_reward_scorer sc = {.reward = math, .tok = tok, .teacher = teacher};
    CHECK_EQ_INT(cpt_reward_score_group(&sc, &g, &err), 0);
    CHECK(g.has_rewards);
    CHECK_NEAR(g.rewards[0], 1, 0);
    CHECK_NEAR(g.rewards[1], 0, 0);
    CHECK_NEAR(g.rewards[2], 0, 0); /* a bare "5" has no #### or \\boxed: not an answer */
    for (int i = 0; i < 3; i++) {
        CHECK(g.completions[i].teacher_logprobs != NULL);
        for (int j = 0; j < nc[i] && g.completions[i].teacher_logprobs; j++)
            CHECK_NEAR(g.completions[i].teacher_logprobs[j], tl[i][j], 0);
    }
    /* the scored group encodes and decodes with its teacher logprobs */
    cpt_buf buf;
    CHECK_MSG(cpt_rollout_group_encode(&g, &buf, &err) == 0, "%s", err.msg);
    cpt_rollout_group back;
    CHECK_EQ_INT(cpt_rollout_group_decode(buf.data, buf.len, CPT_MSG_SCORED_GROUP, &back, &err), 0);
    CHECK_EQ_INT((int)back.n_parts, (int)g.n_parts);
    CHECK(back.completions && back.completions[2].teacher_logprobs &&
          back.completions[2].teacher_logprobs[0] == tl[2][0]);
    cpt_rollout_group_free(&back);
    cpt_buf_free(&buf);

    cpt_rollout_group_free(&g);
    cpt_reward_free(math);
    nul_and_bad_extra(tok);
    for (int i = 0; i < 3; i++) {
        free(tl[i]);
        free(c[i]);
    }
    free(p);
    cpt_model_free(rm);
    cpt_model_free(plain);
    cpt_remove_tree(dir, &err);
    cpt_tokenizer_free(tok);
    return check_summary("reward_worker_frozen");
}
