#include "rollout/model_source.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fs.h"
#include "weights/checkpoint_dir.h"

cpt_model *cpt_rollout_load_model(const char *arg, char *hf_dir_out, size_t cap, cpt_err *err) {
    char p[CPT_CKPT_PATH_MAX + 64], dir[CPT_CKPT_PATH_MAX + 16];
    if (!arg || !arg[0]) {
        cpt_errf(err, "no model given");
        return NULL;
    }
    snprintf(p, sizeof p, "%s/config.json", arg);
    if (cpt_path_exists(p)) {
        snprintf(dir, sizeof dir, "%s", arg);
    } else {
        char ck[CPT_CKPT_PATH_MAX];
        struct stat sb;
        if (stat(arg, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            cpt_errf(err, "%s: not a model folder (no config.json) nor a checkpoint", arg);
            return NULL;
        }
        if (cpt_ckpt_resolve(arg, ck, sizeof ck, err)) {
            cpt_err_prefix(err, "%s: no config.json, and as a checkpoint", arg);
            return NULL;
        }
        snprintf(dir, sizeof dir, "%s/model", ck);
    }
    if (hf_dir_out) snprintf(hf_dir_out, cap, "%s", dir);
    return cpt_model_load(dir, err);
}

cpt_tokenizer *cpt_rollout_load_tokenizer(const char *path, int required, cpt_err *err) {
    char p[4200];
    struct stat sb;
    err->msg[0] = 0;
    if (!path || !path[0]) {
        if (required) cpt_errf(err, "a tokenizer is needed (--tokenizer)");
        return NULL;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(p, sizeof p, "%s/tokenizer.json", path);
        if (!cpt_path_exists(p)) {
            if (required) cpt_errf(err, "%s: no tokenizer.json in this folder", path);
            return NULL;
        }
        return cpt_tokenizer_load(p, err);
    }
    return cpt_tokenizer_load(path, err);
}

int cpt_rollout_eos_ids(const cpt_model *m, const cpt_tokenizer *tok, int32_t out[2]) {
    int n = 0, V = cpt_model_cfg(m)->vocab_size;
    int32_t a = cpt_model_cfg(m)->eos_token_id, b = tok ? cpt_tokenizer_eos_id(tok) : -1;
    if (a >= 0 && a < V) out[n++] = a;
    if (b >= 0 && b < V && b != a) out[n++] = b;
    return n;
}
