/* Checkpoint folders on disk (weights/checkpoint_dir.h). */
#include "weights/checkpoint_dir.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/checksum.h"
#include "core/fs.h"
#include "core/json_util.h"

#define MANIFEST_FORMAT "cpt-checkpoint-1"

static const char *const required_files[] = {"trainer_state.json", "model/config.json"};

static json_t *hex64(uint64_t v) {
    char hex[CPT_CHECKSUM_HEX_LEN + 1];
    return json_string(cpt_checksum_hex(v, hex));
}

static int get_hex(json_t *v, uint64_t *out, const char *path, const char *field, cpt_err *err) {
    if (!json_is_string(v)) return cpt_errf(err, "%s: field '%s' missing or not a hex string", path, field);
    if (cpt_checksum_parse_hex(json_string_value(v), out, err)) return cpt_err_prefix(err, "%s: field '%s'", path, field);
    return 0;
}

/* ---------------- manifest ---------------- */

/* Regular files of dir/sub (sub "" or "model"), as "sub/name", appended to a JSON manifest object. */
static int manifest_add_dir(json_t *files, const char *root, const char *sub, cpt_err *err) {
    char dir[CPT_CKPT_PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s%s%s", root, *sub ? "/" : "", sub);
    DIR *d = opendir(dir);
    if (!d) return cpt_errno(err, "%s: open folder", dir);
    struct dirent *e;
    int rc = 0;
    while (!rc && (e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "manifest.json")) continue;
        char rel[512], full[CPT_CKPT_PATH_MAX + 600];
        snprintf(rel, sizeof rel, "%s%s%s", sub, *sub ? "/" : "", e->d_name);
        snprintf(full, sizeof full, "%s/%s", root, rel);
        struct stat sb;
        if (stat(full, &sb) != 0) { rc = cpt_errno(err, "%s", full); break; }
        if (S_ISDIR(sb.st_mode)) continue; /* only model/ is descended, by the caller */
        uint64_t sum, bytes;
        if (cpt_checksum_file(full, &sum, &bytes, err)) { rc = -1; break; }
        json_t *ent = json_object();
        json_object_set_new(ent, "bytes", json_integer((json_int_t)bytes));
        json_object_set_new(ent, "xxh64", hex64(sum));
        json_object_set_new(files, rel, ent);
    }
    closedir(d);
    return rc;
}

int cpt_ckpt_write_manifest(const char *dir, int64_t step, cpt_err *err) {
    json_t *m = json_object(), *files = json_object();
    json_object_set_new(m, "format", json_string(MANIFEST_FORMAT));
    json_object_set_new(m, "step", json_integer(step));
    json_object_set_new(m, "files", files);
    int rc = manifest_add_dir(files, dir, "", err);
    if (!rc) rc = manifest_add_dir(files, dir, "model", err);
    char *text = rc ? NULL : json_dumps(m, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(m);
    if (rc) return -1;
    if (!text) return cpt_errf(err, "%s: out of memory", dir);
    char path[CPT_CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    rc = cpt_write_file_atomic(path, text, strlen(text), err);
    free(text);
    return rc;
}

int cpt_ckpt_verify(const char *ckpt_dir, cpt_err *err) {
    char path[CPT_CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/manifest.json", ckpt_dir);
    if (!cpt_path_exists(path)) return cpt_errf(err, "%s: missing (partial checkpoint)", path);
    json_t *m = cpt_json_load_file(path, 0, err);
    if (!m) return -1;
    int rc = -1;
    json_t *fmt = json_object_get(m, "format"), *files = json_object_get(m, "files");
    if (!json_is_string(fmt) || strcmp(json_string_value(fmt), MANIFEST_FORMAT) || !json_is_object(files)) {
        cpt_errf(err, "%s: not a cpt checkpoint manifest (format \"%s\" with a 'files' object expected)", path,
                 MANIFEST_FORMAT);
        goto out;
    }
    for (size_t i = 0; i < sizeof required_files / sizeof required_files[0]; i++)
        if (!json_object_get(files, required_files[i])) {
            cpt_errf(err, "%s: required file '%s' not listed", path, required_files[i]);
            goto out;
        }
    /* the weights: one file, or shards with their index (the manifest lists every shard: the loop checks each) */
    if (!json_object_get(files, "model/model.safetensors") &&
        !json_object_get(files, "model/model.safetensors.index.json")) {
        cpt_errf(err, "%s: required file 'model/model.safetensors' (or 'model/model.safetensors.index.json') not listed",
                 path);
        goto out;
    }
    const char *rel;
    json_t *ent;
    json_object_foreach(files, rel, ent) {
        char full[CPT_CKPT_PATH_MAX + 600];
        if (strstr(rel, "..") || rel[0] == '/') { cpt_errf(err, "%s: bad file name '%s'", path, rel); goto out; }
        snprintf(full, sizeof full, "%s/%s", ckpt_dir, rel);
        json_t *jb = json_object_get(ent, "bytes");
        uint64_t want_sum, sum, bytes;
        if (!json_is_integer(jb)) { cpt_errf(err, "%s: '%s' has no 'bytes'", path, rel); goto out; }
        if (get_hex(json_object_get(ent, "xxh64"), &want_sum, path, rel, err)) goto out;
        if (!cpt_path_exists(full)) { cpt_errf(err, "%s: missing (listed in the manifest)", full); goto out; }
        if (cpt_checksum_file(full, &sum, &bytes, err)) goto out;
        if ((json_int_t)bytes != json_integer_value(jb)) {
            cpt_errf(err, "%s: %" PRIu64 " bytes, the manifest says %" JSON_INTEGER_FORMAT " (truncated or partial)",
                     full, bytes, json_integer_value(jb));
            goto out;
        }
        if (sum != want_sum) {
            char a[CPT_CHECKSUM_HEX_LEN + 1], b[CPT_CHECKSUM_HEX_LEN + 1];
            cpt_errf(err, "%s: checksum %s, the manifest says %s (corrupt)", full, cpt_checksum_hex(sum, a),
                     cpt_checksum_hex(want_sum, b));
            goto out;
        }
    }
    rc = 0;
out:
    json_decref(m);
    return rc;
}

/* ---------------- step folders ---------------- */

int64_t cpt_ckpt_step_of(const char *name) {
    if (strncmp(name, "step-", 5)) return -1;
    const char *p = name + 5;
    if (!*p) return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT64_MAX / 10 - 10) return -1;
        v = v * 10 + (*p - '0');
    }
    return v;
}

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int cpt_ckpt_list_steps(const char *dir, int64_t **steps, size_t *n, int remove_tmp, cpt_err *err) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT) return 0;
        return cpt_errno(err, "%s: open folder", dir);
    }
    size_t cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (remove_tmp && !strncmp(e->d_name, "step-", 5) && strstr(e->d_name, ".tmp-")) {
            char p[CPT_CKPT_PATH_MAX + 300];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            cpt_err ignored;
            cpt_remove_tree(p, &ignored);
            continue;
        }
        int64_t s = cpt_ckpt_step_of(e->d_name);
        if (s < 0) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            int64_t *ns = realloc(*steps, cap * sizeof *ns);
            if (!ns) { closedir(d); free(*steps); *steps = NULL; return cpt_errf(err, "out of memory"); }
            *steps = ns;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (*n) qsort(*steps, *n, sizeof **steps, cmp_desc);
    return 0;
}

int64_t cpt_ckpt_read_latest(const char *ckdir) {
    char path[CPT_CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/latest", ckdir);
    cpt_err e;
    char *text = cpt_read_file(path, NULL, &e);
    if (!text) return -1;
    size_t l = strlen(text);
    while (l && (text[l - 1] == '\n' || text[l - 1] == ' ')) text[--l] = '\0';
    int64_t s = cpt_ckpt_step_of(text);
    free(text);
    return s;
}

int cpt_ckpt_refuse_restart(const char *run_dir, cpt_err *err) {
    char ckdir[CPT_CKPT_PATH_MAX];
    if (snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir) >= (int)sizeof ckdir)
        return cpt_errf(err, "%s: path too long", run_dir);
    int64_t latest = cpt_ckpt_read_latest(ckdir);
    if (latest < 0) return 0;
    return cpt_errf(err, "train.resume = false, but %s holds checkpoints up to step %" PRId64 " (latest): a run from "
                    "step 0 would overwrite them; use another run.dir, pass run.fresh=true to `cpt run` (the earlier "
                    "run is moved aside, nothing deleted), or leave train.resume = true to continue it", ckdir, latest);
}

int cpt_ckpt_find_latest(const char *run_dir, char *out, size_t out_cap, cpt_err *err) {
    char ckdir[CPT_CKPT_PATH_MAX];
    if (snprintf(ckdir, sizeof ckdir, "%s/checkpoints", run_dir) >= (int)sizeof ckdir)
        return cpt_errf(err, "%s: path too long", run_dir);
    int64_t *steps;
    size_t n;
    if (cpt_ckpt_list_steps(ckdir, &steps, &n, 0, err)) return -1;
    if (!n) { free(steps); return 0; }
    int64_t latest = cpt_ckpt_read_latest(ckdir);
    int refused = 0;
    char first_reason[CPT_ERR_MAX] = "";
    for (size_t i = 0; i < n; i++) {
        /* Folders newer than `latest` were never committed. Without a latest file, every folder is a candidate. */
        if (latest >= 0 && steps[i] > latest) continue;
        char dir[CPT_CKPT_PATH_MAX + 64];
        snprintf(dir, sizeof dir, "%s/step-%" PRId64, ckdir, steps[i]);
        cpt_err e;
        if (cpt_ckpt_verify(dir, &e) == 0) {
            free(steps);
            if (refused) cpt_warn("checkpoint: using %s, the newest good checkpoint", dir);
            snprintf(out, out_cap, "%s", dir);
            return 1;
        }
        cpt_warn("checkpoint refused: %s", e.msg);
        if (!refused++) snprintf(first_reason, sizeof first_reason, "%s", e.msg);
    }
    free(steps);
    if (!refused) return 0;
    return cpt_errf(err, "%s: no good checkpoint (%d refused; newest: %s)", ckdir, refused, first_reason);
}

int cpt_ckpt_resolve(const char *arg, char *out, size_t out_cap, cpt_err *err) {
    char p[CPT_CKPT_PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/manifest.json", arg);
    if (cpt_path_exists(p) || cpt_ckpt_step_of(strrchr(arg, '/') ? strrchr(arg, '/') + 1 : arg) >= 0) {
        if (cpt_ckpt_verify(arg, err)) return -1;
        snprintf(out, out_cap, "%s", arg);
        return 0;
    }
    /* A checkpoints/ folder holds `latest`; a run folder holds checkpoints/. */
    char run[CPT_CKPT_PATH_MAX];
    snprintf(p, sizeof p, "%s/latest", arg);
    if (cpt_path_exists(p)) {
        snprintf(run, sizeof run, "%s/..", arg);
    } else {
        snprintf(run, sizeof run, "%s", arg);
    }
    int rc = cpt_ckpt_find_latest(run, out, out_cap, err);
    if (rc == 0) return cpt_errf(err, "%s: no checkpoint found (expected a step-N folder or a run folder)", arg);
    return rc < 0 ? -1 : 0;
}
