#include "trainer/export.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "model/model.h"
#include "trainer/checkpoint.h"

/* 1 if dir exists and holds nothing, 0 if it does not exist, -1 if it exists with content (or is not a folder). */
static int dir_state(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    struct dirent *e;
    int empty = 1;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    closedir(d);
    return empty ? 1 : -1;
}

int cpt_export_hf(const char *checkpoint, const char *out_dir, int bf16, uint64_t max_shard_bytes, cpt_err *err) {
    char ckpt[CPT_CKPT_PATH_MAX], model_dir[CPT_CKPT_PATH_MAX + 16], tmp[CPT_CKPT_PATH_MAX + 32];
    if (cpt_ckpt_resolve(checkpoint, ckpt, sizeof ckpt, err)) return cpt_err_prefix(err, "export");
    int st = dir_state(out_dir);
    if (st < 0) return cpt_errf(err, "export: %s exists and is not an empty folder (refusing to overwrite)", out_dir);
    snprintf(model_dir, sizeof model_dir, "%s/model", ckpt);
    cpt_model *m = cpt_model_load(model_dir, err);
    if (!m) return cpt_err_prefix(err, "export: loading %s", model_dir);
    size_t ol = strlen(out_dir);
    while (ol > 1 && out_dir[ol - 1] == '/') ol--;
    snprintf(tmp, sizeof tmp, "%.*s.tmp-%ld", (int)ol, out_dir, (long)getpid());
    /* The first missing folder above OUT_DIR: the save creates it (mkdir -p), a failed export removes it again. */
    char made[CPT_CKPT_PATH_MAX + 32] = "", up[CPT_CKPT_PATH_MAX + 32];
    snprintf(up, sizeof up, "%.*s", (int)ol, out_dir);
    for (char *slash; (slash = strrchr(up, '/')) && slash != up;) {
        *slash = '\0';
        if (cpt_path_exists(up)) break;
        snprintf(made, sizeof made, "%s", up);
    }
    int rc = -1;
    /* A folder of that name is a crashed export's (the same pid again, as in containers): its files would be
     * shipped with this export's (a stale model.safetensors beside new shards is what a loader opens first). */
    if (cpt_path_exists(tmp) && cpt_remove_tree(tmp, err)) {
        cpt_err_prefix(err, "removing %s, left by an interrupted export", tmp);
        goto out;
    }
    if (cpt_model_save_hf_sharded(m, tmp, bf16, max_shard_bytes, err)) goto out;
    char tok[CPT_CKPT_PATH_MAX + 32];
    snprintf(tok, sizeof tok, "%s/tokenizer.json", model_dir);
    if (cpt_path_exists(tok) && cpt_copy_tokenizer_files(model_dir, tmp, err)) goto out;
    if (cpt_fsync_dir(tmp, err)) goto out;
    if (st == 1 && rmdir(out_dir) != 0) { cpt_errno(err, "%s: remove empty folder", out_dir); goto out; }
    if (rename(tmp, out_dir) != 0) { cpt_errno(err, "rename %s -> %s", tmp, out_dir); goto out; }
    rc = 0;
out:
    cpt_model_free(m);
    if (rc) {
        cpt_err e2;
        cpt_remove_tree(tmp, &e2);
        if (made[0]) cpt_remove_tree(made, &e2);
        return cpt_err_prefix(err, "export");
    }
    return 0;
}
