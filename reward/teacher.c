#include "reward/teacher.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "weights/checkpoint_dir.h"
#include "weights/devices.h"

int cpt_model_dir_resolve(const char *path, char *out, size_t cap, cpt_err *err) {
    if (!path || !*path) return cpt_errf(err, "no model path given");
    char cfgp[CPT_CKPT_PATH_MAX + 32];
    struct stat st;
    snprintf(cfgp, sizeof cfgp, "%s/config.json", path);
    if (stat(cfgp, &st) == 0) {
        if ((size_t)snprintf(out, cap, "%s", path) >= cap) return cpt_errf(err, "%s: path too long", path);
        return 0;
    }
    char ck[CPT_CKPT_PATH_MAX];
    if (cpt_ckpt_resolve(path, ck, sizeof ck, err))
        return cpt_err_prefix(err, "%s: neither an HF folder (no config.json) nor a checkpoint", path);
    if ((size_t)snprintf(out, cap, "%s/model", ck) >= cap) return cpt_errf(err, "%s: path too long", ck);
    return 0;
}

cpt_model *cpt_frozen_model_load(const char *path, cpt_err *err) {
    char dir[CPT_CKPT_PATH_MAX + 16];
    if (cpt_model_dir_resolve(path, dir, sizeof dir, err)) return NULL;
    cpt_model *m = cpt_model_load(dir, err);
    if (!m) cpt_err_prefix(err, "%s", dir);
    return m;
}

int cpt_frozen_model_place(cpt_model *m, const char *key, const char *device, int gpu, const char **where,
                           cpt_err *err) {
    *where = "cpu";
    int seen = cpt_gpus_visible();
    const char *d = cpt_device_pick(device, seen);
    if (!d) return cpt_errf(err, "%s = \"%s\": expected auto, cpu or cuda", key, device);
    if (!strcmp(d, "cpu")) return 0;
    if (seen < 1) return cpt_errf(err, "%s = \"cuda\": this process sees no GPU", key);
    if (gpu < 0 || gpu >= seen) gpu = 0; /* a GPU index of the trainer's machine that this process does not see */
    cpt_err e;
    cpt_err_clear(&e);
    if (cpt_model_set_host_master(m, 1, &e) == 0 && cpt_model_use_cuda(m, gpu, &e) == 0) {
        *where = "cuda";
        return 0;
    }
    cpt_err ignored;
    cpt_model_set_host_master(m, 0, &ignored); /* not placed: the weights are in ordinary host memory again */
    if (!strcmp(device, "cuda")) return cpt_errf(err, "%s = \"cuda\": %s", key, e.msg);
    cpt_warn("%s = \"%s\": %s; the model runs on the CPU", key, device, e.msg);
    return 0;
}

int cpt_check_ids(const cpt_model *m, const int32_t *ids, int n, const char *what, cpt_err *err) {
    int v = cpt_model_cfg(m)->vocab_size;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= v)
            return cpt_errf(err, "%s[%d]: token id %d outside the model's vocabulary (%d)", what, i, ids[i], v);
    return 0;
}

/* Runs completions [first, last) packed behind copies of the prompt and scatters their logprobs. */
static int run_pack(cpt_model *m, const int32_t *prompt, int n_prompt, int first, int last,
                    const int32_t *const *tokens, const int *n_tokens, float *const *out, cpt_err *err) {
    int n_seqs = last - first, total = 0;
    for (int c = first; c < last; c++) total += n_prompt + n_tokens[c];
    int32_t *tok = malloc((size_t)total * sizeof *tok), *tgt = malloc((size_t)total * sizeof *tgt);
    int32_t *ss = malloc((size_t)(n_seqs + 1) * sizeof *ss);
    float *lp = malloc((size_t)total * sizeof *lp);
    int rc = -1;
    if (!tok || !tgt || !ss || !lp) {
        cpt_errf(err, "out of memory (%d tokens)", total);
        goto done;
    }
    int p = 0;
    for (int c = first; c < last; c++) {
        ss[c - first] = p;
        int n = n_prompt + n_tokens[c];
        memcpy(tok + p, prompt, (size_t)n_prompt * sizeof *tok);
        memcpy(tok + p + n_prompt, tokens[c], (size_t)n_tokens[c] * sizeof *tok);
        for (int i = 0; i < n; i++) tgt[p + i] = i + 1 < n ? tok[p + i + 1] : -1;
        p += n;
    }
    ss[n_seqs] = p;
    cpt_batch b = {.n_tokens = total, .n_seqs = n_seqs, .tokens = tok, .seq_start = ss, .targets = tgt};
    cpt_forward_out fo = {.logprobs = lp};
    if (cpt_model_forward(m, &b, &fo, 0, err)) goto done;
    for (int c = first; c < last; c++) {
        const float *src = lp + ss[c - first] + n_prompt - 1;
        memcpy(out[c], src, (size_t)n_tokens[c] * sizeof(float));
    }
    rc = 0;
done:
    free(tok);
    free(tgt);
    free(ss);
    free(lp);
    return rc;
}

int cpt_teacher_logprobs(cpt_model *m, const int32_t *prompt, int n_prompt, int n_completions,
                         const int32_t *const *tokens, const int *n_tokens, float *const *out, cpt_err *err) {
    if (n_prompt < 1) return cpt_errf(err, "teacher: empty prompt (the first completion token needs a context)");
    if (cpt_check_ids(m, prompt, n_prompt, "prompt", err)) return -1;
    int maxpos = cpt_model_cfg(m)->max_position_embeddings;
    for (int c = 0; c < n_completions; c++) {
        char what[48];
        snprintf(what, sizeof what, "completions[%d].tokens", c);
        if (cpt_check_ids(m, tokens[c], n_tokens[c], what, err)) return -1;
        if (maxpos > 0 && n_prompt + n_tokens[c] > maxpos)
            return cpt_errf(err, "completions[%d]: %d prompt + %d completion tokens exceed the teacher's context %d", c,
                            n_prompt, n_tokens[c], maxpos);
    }
    int first = 0;
    while (first < n_completions) {
        int last = first, used = 0;
        while (last < n_completions && (last == first || used + n_prompt + n_tokens[last] <= CPT_FROZEN_BATCH_TOKENS))
            used += n_prompt + n_tokens[last++];
        /* empty completions need no forward */
        if (run_pack(m, prompt, n_prompt, first, last, tokens, n_tokens, out, err)) return -1;
        first = last;
    }
    return 0;
}
