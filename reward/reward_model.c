#include "reward/reward_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/fs.h"
#include "reward/teacher.h"

int cpt_reward_model_score_ids(cpt_model *m, const int32_t *prompt, int n_prompt, int n_completions,
                               const int32_t *const *tokens, const int *n_tokens, double *scores, cpt_err *err) {
    if (!cpt_model_has_value_head(m)) return cpt_errf(err, "reward model: no value head (score.weight)");
    if (cpt_check_ids(m, prompt, n_prompt, "prompt", err)) return -1;
    for (int c = 0; c < n_completions; c++) {
        if (n_prompt + n_tokens[c] < 1) return cpt_errf(err, "reward model: completion %d: nothing to score", c);
        if (cpt_check_ids(m, tokens[c], n_tokens[c], "completion", err)) return cpt_err_prefix(err, "completion %d", c);
        int n = n_prompt + n_tokens[c];
        int32_t *tok = malloc((size_t)n * sizeof *tok), *tgt = malloc((size_t)n * sizeof *tgt);
        float *val = malloc((size_t)n * sizeof *val);
        int rc = -1;
        if (!tok || !tgt || !val) {
            cpt_errf(err, "out of memory");
        } else {
            memcpy(tok, prompt, (size_t)n_prompt * sizeof *tok);
            memcpy(tok + n_prompt, tokens[c], (size_t)n_tokens[c] * sizeof *tok);
            for (int i = 0; i < n; i++) tgt[i] = -1;
            int32_t ss[2] = {0, n};
            cpt_batch b = {.n_tokens = n, .n_seqs = 1, .tokens = tok, .seq_start = ss, .targets = tgt};
            cpt_forward_out fo = {.values = val};
            if (cpt_model_forward(m, &b, &fo, 0, err) == 0) {
                scores[c] = val[n - 1];
                rc = isfinite(scores[c]) ? 0 : cpt_errf(err, "reward model: completion %d: score is not finite", c);
            }
        }
        free(tok);
        free(tgt);
        free(val);
        if (rc) return -1;
    }
    return 0;
}

typedef struct rm_state {
    cpt_model *m;
    cpt_tokenizer *tok;
} rm_state;

static void rm_free(void *p) {
    rm_state *s = p;
    if (!s) return;
    cpt_model_free(s->m);
    cpt_tokenizer_free(s->tok);
    free(s);
}

static int rm_score(void *p, int n, const cpt_reward_item *items, cpt_reward_result *out, cpt_err *err) {
    rm_state *s = p;
    for (int i = 0; i < n; i++) {
        int32_t *pi = NULL, *ci = NULL;
        const char *pt = items[i].prompt ? items[i].prompt : "", *ct = items[i].completion ? items[i].completion : "";
        long np = cpt_tokenizer_encode(s->tok, pt, strlen(pt), &pi, err);
        long nc = np < 0 ? -1 : cpt_tokenizer_encode(s->tok, ct, strlen(ct), &ci, err);
        int rc = -1;
        double score = 0;
        if (np >= 0 && nc >= 0) {
            const int32_t *toks[1] = {ci};
            int nt[1] = {(int)nc};
            rc = cpt_reward_model_score_ids(s->m, pi, (int)np, 1, toks, nt, &score, err);
        }
        free(pi);
        free(ci);
        if (rc) return cpt_err_prefix(err, "item %d", i);
        memset(&out[i], 0, sizeof out[i]);
        out[i].value = score;
        cpt_reward_add_part(&out[i], "model", score);
    }
    return 0;
}

static const cpt_reward_ops rm_ops = {.score_batch = rm_score, .free = rm_free};

cpt_reward *cpt_reward_model_new(cpt_model *m, cpt_tokenizer *tok, cpt_err *err) {
    rm_state *s = calloc(1, sizeof *s);
    if (!s) {
        cpt_model_free(m);
        cpt_tokenizer_free(tok);
        cpt_errf(err, "out of memory");
        return NULL;
    }
    s->m = m;
    s->tok = tok;
    if (!cpt_model_has_value_head(m)) {
        rm_free(s);
        cpt_errf(err, "reward model: the model has no value head (score.weight)");
        return NULL;
    }
    return cpt_reward_new("model", &rm_ops, s, err);
}

cpt_reward *cpt_reward_model_load(const char *model_path, const char *tokenizer_path, cpt_err *err) {
    return cpt_reward_model_load_on(model_path, tokenizer_path, "cpu", 0, err);
}

cpt_reward *cpt_reward_model_load_on(const char *model_path, const char *tokenizer_path, const char *device, int gpu,
                                     cpt_err *err) {
    cpt_model *m = cpt_frozen_model_load(model_path, err);
    if (!m) return NULL;
    if (!cpt_model_has_value_head(m)) {
        cpt_model_free(m);
        cpt_errf(err, "reward model %s: no value head (the safetensors hold no score.weight)", model_path);
        return NULL;
    }
    const char *where;
    if (cpt_frozen_model_place(m, "reward.model_device", device, gpu, &where, err)) {
        cpt_model_free(m);
        return NULL;
    }
    const char *tp = tokenizer_path && *tokenizer_path ? tokenizer_path : model_path;
    cpt_tokenizer *tok = cpt_tokenizer_load(tp, err);
    if (!tok) {
        cpt_model_free(m);
        cpt_err_prefix(err, "reward model tokenizer %s", tp);
        return NULL;
    }
    return cpt_reward_model_new(m, tok, err);
}

cpt_reward *cpt_reward_with_model_from_config(const cpt_config *cfg, cpt_err *err) {
    const char *mp = cpt_cfg_str(cfg, "reward.model_path");
    if (!*mp) return cpt_reward_from_config(cfg, err);
    /* The reward model's own tokenizer when its folder has one (it may differ from the policy's). */
    char dir[4200], tj[4300];
    const char *tp = cpt_cfg_str(cfg, "tokenizer.path");
    if (cpt_model_dir_resolve(mp, dir, sizeof dir, err)) return NULL;
    snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
    if (cpt_path_exists(tj) || !*tp) tp = dir;
    cpt_reward *rm = cpt_reward_model_load_on(mp, tp, cpt_cfg_str(cfg, "reward.model_device"),
                                              (int)cpt_cfg_int(cfg, "train.cuda_device"), err);
    if (!rm) {
        cpt_err_prefix(err, "reward.model_path");
        return NULL;
    }
    if (cpt_cfg_bool(cfg, "reward.model_only")) return rm;
    cpt_reward *rule = cpt_reward_from_config(cfg, err);
    if (!rule) {
        cpt_reward_free(rm);
        return NULL;
    }
    cpt_reward *kids[2] = {rule, rm};
    double w[2] = {1.0, cpt_cfg_float(cfg, "reward.model_weight")};
    return cpt_reward_combined(2, kids, w, err);
}
