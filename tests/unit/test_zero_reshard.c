/* ZeRO-1 checkpoints re-sharded (trainer/zero.h): the optimizer shards of W ranks, or a whole optimizer.safetensors
 * written with train.zero = 0, load into the slices of any other number of ranks; every float lands where the flat
 * moments had it, padding reads as zero, and a missing, inconsistent or foreign file is refused without touching
 * the optimizer; a slice reads only the files that hold it; a save leaves only its own world's shards in a staging
 * folder another attempt left, and a folder of two worlds is refused. The slices are made by hand here as
 * cpt_zero_new would make them (the save runs as a one-rank group without a library). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "model/model.h"
#include "tests/check.h"
#include "tests/tiny_model.h"
#include "trainer/dp.h"
#include "trainer/optim.h"
#include "trainer/zero.h"

#define STEP 7

/* The slice of rank r of world w, as cpt_zero_new lays it out, with its own moment buffers filled with junk. */
static cpt_zero slice(cpt_model *m, size_t numel, int r, int w) {
    cpt_zero z;
    memset(&z, 0, sizeof z);
    z.model = m;
    z.rank = r, z.world = w, z.numel = numel;
    z.shard = (numel + (size_t)w - 1) / (size_t)w;
    z.lo = (size_t)r * z.shard;
    z.valid = z.lo >= numel ? 0 : numel - z.lo < z.shard ? numel - z.lo : z.shard;
    z.m = malloc(z.shard * sizeof(float));
    z.v = malloc(z.shard * sizeof(float));
    for (size_t j = 0; j < z.shard; j++) z.m[j] = z.v[j] = 12345.0f;
    return z;
}

static void slice_free(cpt_zero *z) {
    free(z->m);
    free(z->v);
}

/* Writes the truth as the shards of w ranks into dir (step `step` for every rank but `odd`, which gets step + 1). */
static void write_shards(cpt_model *m, const float *tm, const float *tv, size_t numel, int w, const char *dir, int odd) {
    for (int r = 0; r < w; r++) {
        cpt_zero z = slice(m, numel, r, w);
        for (size_t j = 0; j < z.shard; j++) {
            z.m[j] = j < z.valid ? tm[z.lo + j] : 0;
            z.v[j] = j < z.valid ? tv[z.lo + j] : 0;
        }
        z.step = r == odd ? STEP + 1 : STEP;
        char name[96], path[512];
        cpt_zero_shard_name(name, sizeof name, r, w);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        cpt_err err;
        CHECK_MSG(cpt_zero_save(&z, path, &err) == 0, "%s", err.msg);
        slice_free(&z);
    }
}

/* Loads every rank of world w from dir and compares each slice with the truth; returns the mismatches. */
static int load_all(cpt_model *m, const float *tm, const float *tv, size_t numel, int w, const char *dir,
                    int want_from) {
    int bad = 0;
    for (int r = 0; r < w; r++) {
        cpt_zero z = slice(m, numel, r, w);
        cpt_err err;
        int from = -1;
        int rc = cpt_zero_load(&z, dir, &from, &err);
        CHECK_MSG(rc == 0, "world %d rank %d: %s", w, r, err.msg);
        CHECK_EQ_INT(from, want_from);
        CHECK_EQ_INT(z.step, STEP);
        for (size_t j = 0; j < z.shard && rc == 0; j++) {
            float em = j < z.valid ? tm[z.lo + j] : 0, ev = j < z.valid ? tv[z.lo + j] : 0;
            if (z.m[j] != em || z.v[j] != ev) bad++;
        }
        slice_free(&z);
    }
    return bad;
}

int main(void) {
    cpt_err err;
    cpt_model *m = tiny_model_new(24, 1, 7);
    size_t numel = cpt_model_numel(m);
    /* the truth: distinct values at every parameter float, zero in any gap of the flat buffer */
    float *tm = calloc(numel, sizeof *tm), *tv = calloc(numel, sizeof *tv);
    const float *base = cpt_model_data(m);
    size_t covered = 0;
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        const cpt_param *p = cpt_model_param(m, i);
        size_t a = (size_t)(p->data - base);
        for (size_t j = 0; j < p->numel; j++) {
            tm[a + j] = 0.5f + (float)(a + j) * 1e-3f;
            tv[a + j] = 2.0f + (float)(a + j) * 1e-4f;
        }
        covered += p->numel;
    }
    printf("model: %zu floats, %zu in parameters\n", numel, covered);
    char tmpl[] = "/tmp/cpt-zero-reshard-XXXXXX";
    char *root = mkdtemp(tmpl);
    CHECK(root != NULL);
    char dir[256];

    /* 1. the shards of W ranks into every W' (W' = W is the plain resume) */
    const int worlds[] = {1, 2, 3, 5};
    for (size_t a = 0; a < sizeof worlds / sizeof *worlds; a++) {
        snprintf(dir, sizeof dir, "%s/w%d", root, worlds[a]);
        CHECK(cpt_mkdir_p(dir, 0700, &err) == 0);
        write_shards(m, tm, tv, numel, worlds[a], dir, -1);
        CHECK_EQ_INT(cpt_zero_shards_world(dir), worlds[a]);
        for (int w2 = 1; w2 <= 4; w2++) {
            int bad = load_all(m, tm, tv, numel, w2, dir, worlds[a]);
            CHECK_MSG(bad == 0, "shards of %d ranks into %d: %d floats differ", worlds[a], w2, bad);
        }
    }
    printf("shards of 1, 2, 3, 5 ranks re-sharded into 1..4 ranks: every float in place\n");

    /* 2. a whole optimizer file (train.zero = 0) into slices */
    size_t np;
    cpt_param **ps = cpt_model_param_list(m, &np, &err);
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    cpt_adamw *o = cpt_adamw_new(ps, np, &hp, &err);
    CHECK(o != NULL);
    for (size_t i = 0; i < np; i++) {
        size_t a = (size_t)(ps[i]->data - base);
        memcpy(o->m[i], tm + a, ps[i]->numel * sizeof(float));
        memcpy(o->v[i], tv + a, ps[i]->numel * sizeof(float));
    }
    o->step = STEP;
    snprintf(dir, sizeof dir, "%s/whole", root);
    CHECK(cpt_mkdir_p(dir, 0700, &err) == 0);
    char path[512];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    CHECK_MSG(cpt_adamw_save(o, path, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cpt_zero_shards_world(dir), 0);
    for (int w2 = 1; w2 <= 4; w2++) {
        int bad = load_all(m, tm, tv, numel, w2, dir, 0);
        CHECK_MSG(bad == 0, "optimizer.safetensors into %d ranks: %d floats differ", w2, bad);
    }
    printf("optimizer.safetensors (train.zero = 0) into 1..4 ranks: every float in place\n");
    cpt_adamw_free(o);
    free(ps);

    /* 3. refusals, each leaving the slice untouched */
    struct {
        const char *what, *want;
    } cases[] = {{"missing", "optimizer-rank-1-of-3.safetensors of 3 ranks is missing"},
                 {"steps", "another shard of the folder at"},
                 {"empty", "holds no optimizer state"},
                 {"numel", "written for a model of"},
                 /* a file name's world size is read, not trusted: only the files of the slice are looked at */
                 {"huge", "says rank 0 of 1, its name rank 0 of 1000000000"}};
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        snprintf(dir, sizeof dir, "%s/bad-%s", root, cases[k].what);
        CHECK(cpt_mkdir_p(dir, 0700, &err) == 0);
        size_t n = numel;
        if (!strcmp(cases[k].what, "missing")) {
            write_shards(m, tm, tv, numel, 3, dir, -1);
            snprintf(path, sizeof path, "%s/optimizer-rank-1-of-3.safetensors", dir);
            unlink(path);
        } else if (!strcmp(cases[k].what, "steps")) {
            write_shards(m, tm, tv, numel, 3, dir, 2);
        } else if (!strcmp(cases[k].what, "huge")) {
            write_shards(m, tm, tv, numel, 1, dir, -1);
            char from[600];
            snprintf(from, sizeof from, "%s/optimizer-rank-0-of-1.safetensors", dir);
            snprintf(path, sizeof path, "%s/optimizer-rank-0-of-1000000000.safetensors", dir);
            CHECK_EQ_INT(rename(from, path), 0);
        } else if (!strcmp(cases[k].what, "numel")) {
            write_shards(m, tm, tv, numel, 2, dir, -1);
            n = numel - 1;
        }
        cpt_zero z = slice(m, n, 0, 1);
        int rc = cpt_zero_load(&z, dir, NULL, &err);
        CHECK_MSG(rc != 0 && strstr(err.msg, cases[k].want), "%s: rc %d, '%s'", cases[k].what, rc, rc ? err.msg : "");
        int touched = 0;
        for (size_t j = 0; j < z.shard; j++) touched += z.m[j] != 12345.0f || z.v[j] != 12345.0f;
        CHECK_MSG(touched == 0, "%s: %d floats of the slice changed by a refused load", cases[k].what, touched);
        printf("refused (%s): %s\n", cases[k].what, rc ? err.msg : "(loaded)");
        slice_free(&z);
    }

    /* 4. a slice reads only the files that hold it: rank 0 of 3 loads with the other two ranks' files gone */
    snprintf(dir, sizeof dir, "%s/only-own", root);
    CHECK(cpt_mkdir_p(dir, 0700, &err) == 0);
    write_shards(m, tm, tv, numel, 3, dir, -1);
    for (int r = 1; r < 3; r++) {
        snprintf(path, sizeof path, "%s/optimizer-rank-%d-of-3.safetensors", dir, r);
        CHECK_EQ_INT(unlink(path), 0);
    }
    {
        cpt_zero z = slice(m, numel, 0, 3);
        int rc = cpt_zero_load(&z, dir, NULL, &err);
        CHECK_MSG(rc == 0, "rank 0 of 3 with only its own file: %s", err.msg);
        int bad = 0;
        for (size_t j = 0; j < z.valid && rc == 0; j++) bad += z.m[j] != tm[z.lo + j] || z.v[j] != tv[z.lo + j];
        CHECK_EQ_INT(bad, 0);
        slice_free(&z);
    }

    /* 5. a staging folder an interrupted save of another attempt left: shards of 4 ranks and a temporary file. This
     * save (one rank) keeps only its own shard in it; a step folder holding shards of two worlds is refused. */
    snprintf(dir, sizeof dir, "%s/staging", root);
    CHECK(cpt_mkdir_p(dir, 0700, &err) == 0);
    write_shards(m, tm, tv, numel, 4, dir, -1);
    snprintf(path, sizeof path, "%s/optimizer-rank-0-of-2.safetensors.tmp.4242", dir);
    CHECK(cpt_write_file_atomic(path, "x", 1, &err) == 0);
    CHECK_EQ_INT(cpt_zero_shards_world(dir), 4);
    {
        cpt_zero z = slice(m, numel, 0, 1);
        for (size_t j = 0; j < z.shard; j++) z.m[j] = tm[j] + 1.0f, z.v[j] = tv[j] + 1.0f;
        z.step = STEP;
        /* mixed: this save's shard beside the other attempt's, as a commit without the pruning would hold */
        char mixed[300], mpath[600];
        snprintf(mixed, sizeof mixed, "%s/mixed", root);
        CHECK(cpt_mkdir_p(mixed, 0700, &err) == 0);
        write_shards(m, tm, tv, numel, 4, mixed, -1);
        snprintf(mpath, sizeof mpath, "%s/optimizer-rank-0-of-1.safetensors", mixed);
        CHECK_MSG(cpt_zero_save(&z, mpath, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(cpt_zero_shards_world(mixed), -1);
        cpt_zero l = slice(m, numel, 0, 1);
        int rc = cpt_zero_load(&l, mixed, NULL, &err);
        CHECK_MSG(rc != 0 && strstr(err.msg, "more than one number of ranks"), "mixed folder: rc %d, '%s'", rc,
                  rc ? err.msg : "");
        slice_free(&l);
        /* the save itself: a one-rank group without a library */
        unsetenv("CPT_RANK"), unsetenv("CPT_WORLD_SIZE");
        cpt_dp_opts o = {.bootstrap = "file"};
        cpt_dp *dp = cpt_dp_new(&o, &err);
        CHECK_MSG(dp != NULL, "%s", err.msg);
        z.dp = dp;
        CHECK_MSG(dp && cpt_zero_save_all(&z, dir, &err) == 0, "%s", err.msg);
        int files = 0, own = 0;
        DIR *d = opendir(dir);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            files++;
            own += !strcmp(e->d_name, "optimizer-rank-0-of-1.safetensors");
        }
        if (d) closedir(d);
        CHECK_MSG(files == 1 && own == 1, "the staging folder holds %d files after the save (its own: %d)", files,
                  own);
        CHECK_EQ_INT(cpt_zero_shards_world(dir), 1);
        l = slice(m, numel, 0, 1);
        CHECK_MSG(cpt_zero_load(&l, dir, NULL, &err) == 0, "%s", err.msg);
        CHECK(l.m[0] == tm[0] + 1.0f && l.v[0] == tv[0] + 1.0f);
        slice_free(&l);
        slice_free(&z);
        cpt_dp_free(dp);
    }
    printf("a staging folder left by another attempt: only this save's shard stays; a mixed folder is refused\n");

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    free(tm);
    free(tv);
    cpt_model_free(m);
    return check_summary("test_zero_reshard");
}
