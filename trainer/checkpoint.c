#include "trainer/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/checksum.h"
#include "core/config.h"
#include "core/fs.h"
#include "core/json_util.h"
#include "core/safetensors.h"
#include "trainer/zero.h"

#define STATE_FORMAT "cpt-trainer-state-1"

/* ---------------- trainer state ---------------- */

void cpt_train_state_free(cpt_train_state *st) {
    free(st->outstanding);
    st->outstanding = NULL;
    st->n_outstanding = 0;
}

int cpt_train_state_set_rng(cpt_train_state *st, const char *name, const cpt_rng *rng, cpt_err *err) {
    if (strlen(name) >= sizeof st->rng_names[0]) return cpt_errf(err, "rng name '%s' too long", name);
    int i = 0;
    while (i < st->n_rngs && strcmp(st->rng_names[i], name)) i++;
    if (i == st->n_rngs) {
        if (st->n_rngs == CPT_CKPT_MAX_RNGS) return cpt_errf(err, "too many rng states (max %d)", CPT_CKPT_MAX_RNGS);
        snprintf(st->rng_names[st->n_rngs++], sizeof st->rng_names[0], "%s", name);
    }
    cpt_rng_save(rng, st->rng[i]);
    return 0;
}

int cpt_train_state_get_rng(const cpt_train_state *st, const char *name, cpt_rng *rng, cpt_err *err) {
    for (int i = 0; i < st->n_rngs; i++)
        if (!strcmp(st->rng_names[i], name)) {
            if (cpt_rng_restore(rng, st->rng[i])) return cpt_errf(err, "rng state '%s' is all zero", name);
            return 0;
        }
    return cpt_errf(err, "rng state '%s' missing from the trainer state", name);
}

static json_t *hex64(uint64_t v) {
    char hex[CPT_CHECKSUM_HEX_LEN + 1];
    return json_string(cpt_checksum_hex(v, hex));
}

int64_t cpt_train_state_total(const cpt_train_state *st, const char *name) {
    for (int i = 0; i < st->n_totals; i++)
        if (!strcmp(st->total_names[i], name)) return st->totals[i];
    return 0;
}

int cpt_train_state_set_total(cpt_train_state *st, const char *name, int64_t value, cpt_err *err) {
    int i = 0;
    while (i < st->n_totals && strcmp(st->total_names[i], name)) i++;
    if (i == st->n_totals) {
        if (st->n_totals == CPT_CKPT_MAX_TOTALS || strlen(name) >= sizeof st->total_names[0])
            return cpt_errf(err, "trainer state: too many totals or name '%s' too long", name);
        snprintf(st->total_names[st->n_totals++], sizeof st->total_names[0], "%s", name);
    }
    st->totals[i] = value;
    return 0;
}

int cpt_train_state_write(const cpt_train_state *st, const char *path, cpt_err *err) {
    json_t *o = json_object(), *cur = json_object(), *outs = json_array(), *rngs = json_object();
    json_object_set_new(o, "format", json_string(STATE_FORMAT));
    json_object_set_new(o, "step", json_integer(st->step));
    json_object_set_new(o, "weight_version", json_integer(st->weight_version));
    json_object_set_new(cur, "epoch", json_integer(st->data_epoch));
    json_object_set_new(cur, "index", json_integer(st->data_index));
    json_object_set_new(o, "data_cursor", cur);
    for (size_t i = 0; i < st->n_outstanding; i++)
        json_array_append_new(outs, json_pack("[II]", (json_int_t)st->outstanding[i].epoch,
                                              (json_int_t)st->outstanding[i].index));
    json_object_set_new(o, "outstanding_group_ids", outs);
    for (int i = 0; i < st->n_rngs; i++) {
        json_t *words = json_array();
        for (int w = 0; w < CPT_RNG_STATE_WORDS; w++) json_array_append_new(words, hex64(st->rng[i][w]));
        json_object_set_new(rngs, st->rng_names[i], words);
    }
    json_object_set_new(o, "rng", rngs);
    json_object_set_new(o, "config_hash", hex64(st->config_hash));
    json_t *totals = json_object();
    for (int i = 0; i < st->n_totals; i++) json_object_set_new(totals, st->total_names[i], json_integer(st->totals[i]));
    json_object_set_new(o, "totals", totals);
    json_object_set_new(o, "lease_token", json_integer(st->lease_token));
    if (st->world_size > 0) json_object_set_new(o, "world_size", json_integer(st->world_size));
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(o);
    if (!text) return cpt_errf(err, "%s: out of memory", path);
    size_t len = strlen(text);
    text[len] = '\0';
    int rc = cpt_write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

static int get_int(json_t *o, const char *key, int64_t *out, const char *path, cpt_err *err) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return cpt_errf(err, "%s: field '%s' missing or not an integer", path, key);
    *out = json_integer_value(v);
    return 0;
}

static int get_hex(json_t *v, uint64_t *out, const char *path, const char *field, cpt_err *err) {
    if (!json_is_string(v)) return cpt_errf(err, "%s: field '%s' missing or not a hex string", path, field);
    if (cpt_checksum_parse_hex(json_string_value(v), out, err)) return cpt_err_prefix(err, "%s: field '%s'", path, field);
    return 0;
}

int cpt_train_state_read(const char *path, cpt_train_state *st, cpt_err *err) {
    memset(st, 0, sizeof *st);
    size_t len;
    char *text = cpt_read_file(path, &len, err);
    if (!text) return -1;
    int rc = cpt_train_state_parse(text, len, path, st, err);
    free(text);
    return rc;
}

/* Fields added after the format's first version: absent in older checkpoints, which read as zeros. */
static int read_optional_fields(json_t *o, cpt_train_state *st, const char *path, cpt_err *err) {
    json_t *totals = json_object_get(o, "totals");
    if (totals && !json_is_object(totals)) return cpt_errf(err, "%s: field 'totals' is not an object", path);
    const char *name;
    json_t *v;
    json_object_foreach(totals, name, v) {
        if (!json_is_integer(v)) return cpt_errf(err, "%s: totals.%s is not an integer", path, name);
        if (cpt_train_state_set_total(st, name, json_integer_value(v), err)) return cpt_err_prefix(err, "%s", path);
    }
    json_t *tok = json_object_get(o, "lease_token");
    if (tok && !json_is_integer(tok)) return cpt_errf(err, "%s: field 'lease_token' is not an integer", path);
    st->lease_token = tok ? json_integer_value(tok) : 0;
    json_t *ws = json_object_get(o, "world_size");
    if (ws && (!json_is_integer(ws) || json_integer_value(ws) < 1))
        return cpt_errf(err, "%s: field 'world_size' is not a positive integer", path);
    st->world_size = ws ? json_integer_value(ws) : 0;
    return 0;
}

int cpt_train_state_parse(const char *text, size_t len, const char *path, cpt_train_state *st, cpt_err *err) {
    memset(st, 0, sizeof *st);
    json_t *o = cpt_json_loadb(text, len, 0, path, err);
    if (!o) return -1;
    int rc = -1;
    json_t *fmt = json_object_get(o, "format");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), STATE_FORMAT)) {
        cpt_errf(err, "%s: field 'format' is not \"%s\"", path, STATE_FORMAT);
        goto out;
    }
    if (get_int(o, "step", &st->step, path, err) || get_int(o, "weight_version", &st->weight_version, path, err)) goto out;
    json_t *cur = json_object_get(o, "data_cursor");
    if (!json_is_object(cur)) { cpt_errf(err, "%s: field 'data_cursor' missing", path); goto out; }
    if (get_int(cur, "epoch", &st->data_epoch, path, err) || get_int(cur, "index", &st->data_index, path, err)) goto out;
    if (st->step < 0 || st->data_epoch < 0 || st->data_index < 0) {
        cpt_errf(err, "%s: negative step or data cursor", path);
        goto out;
    }
    json_t *outs = json_object_get(o, "outstanding_group_ids");
    if (!json_is_array(outs)) { cpt_errf(err, "%s: field 'outstanding_group_ids' missing", path); goto out; }
    st->n_outstanding = json_array_size(outs);
    if (st->n_outstanding) {
        st->outstanding = calloc(st->n_outstanding, sizeof *st->outstanding);
        if (!st->outstanding) { cpt_errf(err, "%s: out of memory", path); goto out; }
    }
    for (size_t i = 0; i < st->n_outstanding; i++) {
        json_t *g = json_array_get(outs, i);
        if (!json_is_array(g) || json_array_size(g) != 2 || !json_is_integer(json_array_get(g, 0)) ||
            !json_is_integer(json_array_get(g, 1))) {
            cpt_errf(err, "%s: outstanding_group_ids[%zu] is not [epoch, index]", path, i);
            goto out;
        }
        st->outstanding[i].epoch = json_integer_value(json_array_get(g, 0));
        st->outstanding[i].index = json_integer_value(json_array_get(g, 1));
    }
    json_t *rngs = json_object_get(o, "rng");
    if (!json_is_object(rngs)) { cpt_errf(err, "%s: field 'rng' missing", path); goto out; }
    const char *name;
    json_t *words;
    json_object_foreach(rngs, name, words) {
        if (st->n_rngs == CPT_CKPT_MAX_RNGS || strlen(name) >= sizeof st->rng_names[0]) {
            cpt_errf(err, "%s: too many rng states or name '%s' too long", path, name);
            goto out;
        }
        if (!json_is_array(words) || json_array_size(words) != CPT_RNG_STATE_WORDS) {
            cpt_errf(err, "%s: rng '%s' is not %d hex words", path, name, CPT_RNG_STATE_WORDS);
            goto out;
        }
        for (int w = 0; w < CPT_RNG_STATE_WORDS; w++)
            if (get_hex(json_array_get(words, w), &st->rng[st->n_rngs][w], path, name, err)) goto out;
        snprintf(st->rng_names[st->n_rngs++], sizeof st->rng_names[0], "%s", name);
    }
    if (get_hex(json_object_get(o, "config_hash"), &st->config_hash, path, "config_hash", err)) goto out;
    if (read_optional_fields(o, st, path, err)) goto out;
    rc = 0;
out:
    json_decref(o);
    if (rc) cpt_train_state_free(st);
    return rc;
}

/* ---------------- files ---------------- */

static int copy_file(const char *src, const char *dst, cpt_err *err) {
    size_t len;
    char *data = cpt_read_file(src, &len, err);
    if (!data) return -1;
    int rc = cpt_write_file_atomic(dst, data, len, err);
    free(data);
    return rc;
}

static int is_dir(const char *p) {
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int cpt_copy_tokenizer_files(const char *tokenizer_path, const char *dir, cpt_err *err) {
    static const char *const names[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                        "vocab.json", "merges.txt", "chat_template.jinja", "generation_config.json"};
    char src_dir[CPT_CKPT_PATH_MAX];
    if (is_dir(tokenizer_path)) {
        snprintf(src_dir, sizeof src_dir, "%s", tokenizer_path);
    } else {
        snprintf(src_dir, sizeof src_dir, "%s", tokenizer_path);
        char *slash = strrchr(src_dir, '/');
        if (slash) *slash = '\0';
        else snprintf(src_dir, sizeof src_dir, ".");
    }
    int copied = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char src[CPT_CKPT_PATH_MAX + 64], dst[CPT_CKPT_PATH_MAX + 64];
        snprintf(src, sizeof src, "%s/%s", src_dir, names[i]);
        if (!cpt_path_exists(src)) continue;
        snprintf(dst, sizeof dst, "%s/%s", dir, names[i]);
        if (copy_file(src, dst, err)) return cpt_err_prefix(err, "copying tokenizer files");
        copied++;
    }
    if (!is_dir(tokenizer_path)) {
        /* a tokenizer file with another name: copy it as tokenizer.json */
        const char *base = strrchr(tokenizer_path, '/');
        base = base ? base + 1 : tokenizer_path;
        if (strcmp(base, "tokenizer.json")) {
            char dst[CPT_CKPT_PATH_MAX + 64];
            snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
            if (copy_file(tokenizer_path, dst, err)) return cpt_err_prefix(err, "copying tokenizer files");
            copied++;
        }
    }
    if (!copied) return cpt_errf(err, "%s: no tokenizer files found", tokenizer_path);
    return 0;
}

int cpt_ckpt_check_writable(const char *run_dir, cpt_err *err) {
    char ckdir[CPT_CKPT_PATH_MAX], probe[CPT_CKPT_PATH_MAX + 64];
    if (snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir) >= (int)sizeof ckdir)
        return cpt_errf(err, "%s: path too long", run_dir);
    snprintf(probe, sizeof probe, "%s/.write-probe-%ld", ckdir, (long)getpid());
    int fd = -1;
    if (cpt_mkdir_p(ckdir, 0700, err) == 0) fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    else errno = EACCES;
    int ok = fd >= 0 && write(fd, "", 1) == 1;
    int e = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (fd >= 0) unlink(probe);
    if (!ok) {
        errno = e;
        return cpt_errno(err, "cannot write into the checkpoints folder %s (every step trained would be lost; not "
                         "training)", ckdir);
    }
    return 0;
}

/* Moves every file of src into dst, then removes src (empty by then). */
static int move_files(const char *src, const char *dst, cpt_err *err) {
    DIR *d = opendir(src);
    if (!d) return cpt_errno(err, "opendir %s", src);
    char a[CPT_CKPT_PATH_MAX + 320], b[CPT_CKPT_PATH_MAX + 320];
    int rc = 0;
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dst, e->d_name);
        if (rename(a, b) != 0) rc = cpt_errno(err, "rename %s -> %s", a, b);
    }
    closedir(d);
    if (!rc && rmdir(src) != 0) rc = cpt_errno(err, "rmdir %s", src);
    return rc;
}

int cpt_ckpt_max_shard_bytes(const cpt_config *cfg, uint64_t *out, cpt_err *err) {
    if (cpt_parse_byte_size(cpt_cfg_str(cfg, "export.max_shard_size"), out, err))
        return cpt_err_prefix(err, "config key export.max_shard_size");
    return 0;
}

void cpt_ckpt_staging_dir(const char *run_dir, int64_t step, char *out, size_t cap) {
    snprintf(out, cap, "%s/checkpoints/" CPT_CKPT_STAGING_PREFIX "%" PRId64, run_dir, step);
}

/* Staging folders left by an interrupted save (this save's own was moved and removed): only one trainer writes a
 * run's checkpoints, and its ranks stage the next step's files only after this save (a collective with rank 0). */
static void remove_stale_staging(const char *ckdir) {
    DIR *d = opendir(ckdir);
    if (!d) return;
    const size_t k = strlen(CPT_CKPT_STAGING_PREFIX);
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, CPT_CKPT_STAGING_PREFIX, k)) continue;
        char p[CPT_CKPT_PATH_MAX + 300];
        snprintf(p, sizeof p, "%s/%s", ckdir, e->d_name);
        cpt_err e2;
        if (cpt_remove_tree(p, &e2)) cpt_warn("checkpoint: removing a leftover staging folder: %s", e2.msg);
        else cpt_warn("checkpoint: removed %s, left by an interrupted checkpoint", p);
    }
    closedir(d);
}

int cpt_ckpt_save(const cpt_ckpt_save_args *a, char *out_dir, size_t out_cap, cpt_err *err) {
    char ckdir[CPT_CKPT_PATH_MAX], tmp[CPT_CKPT_PATH_MAX + 64], fin[CPT_CKPT_PATH_MAX + 64];
    char p[CPT_CKPT_PATH_MAX + 128];
    if (snprintf(ckdir, sizeof ckdir, "%s/checkpoints", a->run_dir) >= (int)sizeof ckdir)
        return cpt_errf(err, "%s: path too long", a->run_dir);
    int64_t step = a->state->step;
    snprintf(tmp, sizeof tmp, "%s/step-%" PRId64 ".tmp-%ld", ckdir, step, (long)getpid());
    snprintf(fin, sizeof fin, "%s/step-%" PRId64, ckdir, step);
    /* before anything is written or cleaned up: a fenced-off trainer must not touch the live one's folders */
    if (a->before_commit && a->before_commit(a->commit_arg, err)) return cpt_err_prefix(err, "checkpoint %s", fin);
    if (cpt_mkdir_p(ckdir, 0700, err)) return cpt_err_prefix(err, "checkpoint");
    int64_t *steps;
    size_t n;
    if (cpt_ckpt_list_steps(ckdir, &steps, &n, 1, err)) return cpt_err_prefix(err, "checkpoint");
    free(steps);
    if (cpt_mkdir_p(tmp, 0700, err)) return cpt_err_prefix(err, "checkpoint");

    snprintf(p, sizeof p, "%s/model", tmp);
    if (cpt_model_save_hf_sharded(a->model, p, 0, a->max_shard_bytes, err)) goto fail;
    if (a->tokenizer_path && *a->tokenizer_path && cpt_copy_tokenizer_files(a->tokenizer_path, p, err)) goto fail;
    if (a->opt) {
        snprintf(p, sizeof p, "%s/optimizer.safetensors", tmp);
        if (cpt_adamw_save(a->opt, p, err)) goto fail;
    }
    if (a->extra_dir && move_files(a->extra_dir, tmp, err)) goto fail;
    snprintf(p, sizeof p, "%s/trainer_state.json", tmp);
    if (cpt_train_state_write(a->state, p, err)) goto fail;
    if (a->config_text) {
        snprintf(p, sizeof p, "%s/config.toml", tmp);
        if (cpt_write_file_atomic(p, a->config_text, strlen(a->config_text), err)) goto fail;
    }
    if (cpt_ckpt_write_manifest(tmp, step, err)) goto fail;
    snprintf(p, sizeof p, "%s/model", tmp);
    if (cpt_fsync_dir(p, err) || cpt_fsync_dir(tmp, err)) goto fail;

    /* A step folder of the same number is either uncommitted (a run crashed before switching `latest`) or a
     * corrupt one that resume refused: both are replaced. A good committed one means a step was saved twice. */
    if (a->before_commit && a->before_commit(a->commit_arg, err)) goto fail;
    if (cpt_path_exists(fin)) {
        cpt_err ignored;
        if (cpt_ckpt_read_latest(ckdir) == step && cpt_ckpt_verify(fin, &ignored) == 0) {
            cpt_errf(err, "%s already exists and is the latest checkpoint", fin);
            goto fail;
        }
        if (cpt_remove_tree(fin, err)) goto fail;
    }
    if (rename(tmp, fin) != 0) {
        cpt_errno(err, "rename %s -> %s", tmp, fin);
        goto fail;
    }
    if (cpt_fsync_dir(ckdir, err)) return cpt_err_prefix(err, "checkpoint");
    char latest[64];
    int ll = snprintf(latest, sizeof latest, "step-%" PRId64 "\n", step);
    snprintf(p, sizeof p, "%s/latest", ckdir);
    if (a->before_commit && a->before_commit(a->commit_arg, err)) return cpt_err_prefix(err, "checkpoint %s", fin);
    if (cpt_write_file_atomic(p, latest, (size_t)ll, err)) return cpt_err_prefix(err, "checkpoint: switching latest");
    if (out_dir) snprintf(out_dir, out_cap, "%s", fin);

    /* Retention: keep the newest keep_last step folders up to this one. Folders past it were never committed (a
     * run that crashed after a later save than the one it resumed from) and are removed too. */
    if (cpt_ckpt_list_steps(ckdir, &steps, &n, 0, err)) return cpt_err_prefix(err, "checkpoint retention");
    int keep = a->keep_last < 1 ? 1 : a->keep_last, kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (steps[i] <= step && kept < keep) {
            kept++;
            continue;
        }
        snprintf(p, sizeof p, "%s/step-%" PRId64, ckdir, steps[i]);
        cpt_err e2;
        if (cpt_remove_tree(p, &e2)) cpt_warn("checkpoint retention: %s", e2.msg);
    }
    free(steps);
    remove_stale_staging(ckdir);
    return 0;
fail:
    {
        cpt_err e2;
        cpt_remove_tree(tmp, &e2);
    }
    return cpt_err_prefix(err, "checkpoint step %" PRId64, step);
}

int cpt_ckpt_load(const char *ckpt_dir, cpt_model *model, cpt_adamw *opt, cpt_train_state *state, cpt_err *err) {
    return cpt_ckpt_load_steps(ckpt_dir, model, opt, 1, state, err);
}

int cpt_ckpt_load_steps(const char *ckpt_dir, cpt_model *model, cpt_adamw *opt, int64_t opt_steps_per_step,
                        cpt_train_state *state, cpt_err *err) {
    char p[CPT_CKPT_PATH_MAX + 64];
    if (cpt_ckpt_verify(ckpt_dir, err)) return -1;
    snprintf(p, sizeof p, "%s/trainer_state.json", ckpt_dir);
    if (cpt_train_state_read(p, state, err)) return -1;
    snprintf(p, sizeof p, "%s/model", ckpt_dir); /* model.safetensors or its shards' index */
    if (cpt_model_load_weights(model, p, err)) goto fail;
    if (opt) {
        snprintf(p, sizeof p, "%s/optimizer.safetensors", ckpt_dir);
        int shards = cpt_path_exists(p) ? 0 : cpt_zero_shards_world(ckpt_dir);
        if (shards < 0) {
            cpt_errf(err, "optimizer shards of more than one number of ranks and no optimizer.safetensors: not a "
                     "checkpoint one save wrote");
            goto fail;
        }
        if (shards) {
            cpt_errf(err, "written with train.zero = 1 by %d ranks (optimizer-rank-*-of-%d, no optimizer.safetensors): "
                     "resume with train.zero = 1, at any number of ranks", shards, shards);
            goto fail;
        }
        if (cpt_adamw_load(opt, p, err)) goto fail;
        if (opt->step != state->step * opt_steps_per_step) {
            cpt_errf(err, "%s: optimizer step %" PRId64 " differs from trainer step %" PRId64 " x %" PRId64
                     " optimizer updates per step", ckpt_dir, opt->step, state->step, opt_steps_per_step);
            goto fail;
        }
    }
    return 0;
fail:
    cpt_train_state_free(state);
    return cpt_err_prefix(err, "loading checkpoint %s", ckpt_dir);
}

int cpt_ckpt_lock(const char *run_dir, cpt_err *err) {
    char dir[CPT_CKPT_PATH_MAX], path[CPT_CKPT_PATH_MAX + 16];
    if (snprintf(dir, sizeof dir, "%s/checkpoints", run_dir) >= (int)sizeof dir)
        return cpt_errf(err, "%s: path too long", run_dir);
    if (cpt_mkdir_p(dir, 0700, err)) return -1;
    snprintf(path, sizeof path, "%s/lock", dir);
    long pid = 0;
    int fd = cpt_lock_file(path, &pid, err);
    if (fd != -2) return fd;
    if (pid)
        return cpt_errf(err, "%s is locked by another trainer (pid %ld) writing checkpoints into %s; stop it first",
                        path, pid, run_dir);
    return cpt_errf(err, "%s is locked by another trainer writing checkpoints into %s; stop it first", path, run_dir);
}

void cpt_ckpt_unlock(int fd) {
    if (fd >= 0) close(fd);
}
