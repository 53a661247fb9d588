/* Checkpoints: atomic layout, manifest verification, `latest`, keep-last-K, exact restore of weights, optimizer
 * moments, data cursor, outstanding group ids and RNG states; a corrupt or truncated newest checkpoint is refused
 * and the previous good one is chosen; temporary and uncommitted folders are never chosen. Tiny random model. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/fs.h"
#include "tests/check.h"
#include "trainer/checkpoint.h"

static cpt_model *tiny(uint64_t seed) {
    cpt_model_config mc = {.arch = CPT_ARCH_QWEN2, .vocab_size = 32, .hidden_size = 16, .intermediate_size = 24,
                           .num_layers = 1, .num_heads = 2, .num_kv_heads = 1, .head_dim = 8, .rms_norm_eps = 1e-6f,
                           .rope_theta = 10000.0f, .tie_word_embeddings = 1, .qkv_bias = 1,
                           .max_position_embeddings = 64, .bos_token_id = -1, .eos_token_id = -1};
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&mc, seed, &err);
    if (!m) fprintf(stderr, "cpt_model_new_random: %s\n", err.msg);
    return m;
}

/* Deterministic fake gradients and one AdamW step. */
static void fake_step(cpt_param **ps, size_t n, cpt_adamw *o, int t) {
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < ps[i]->numel; j++) ps[i]->grad[j] = (float)(((j * 7 + i * 3 + (size_t)t) % 11) - 5) * 0.01f;
    cpt_adamw_step(o, 1e-2);
}

static int same_weights(cpt_model *a, cpt_model *b) {
    size_t n = cpt_model_num_params(a);
    if (n != cpt_model_num_params(b)) return 0;
    for (size_t i = 0; i < n; i++) {
        cpt_param *pa = cpt_model_param(a, i), *pb = cpt_model_param(b, i);
        if (pa->numel != pb->numel || memcmp(pa->data, pb->data, pa->numel * sizeof(float))) return 0;
    }
    return 1;
}

static void flip_byte(const char *path, long off) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x40, f);
    fclose(f);
}

static int fence_calls, fence_fail_at;
static int fake_fence(void *arg, cpt_err *err) {
    (void)arg;
    if (++fence_calls == fence_fail_at) return cpt_errf(err, "fenced off: test");
    return 0;
}

/* Whole-run totals and the lease token round-trip (an old state without them reads zeros); a fenced-off writer
 * leaves no step folder and does not move `latest`; the run-folder lock refuses a second writer. */
static void totals_fence_lock(cpt_model *m) {
    cpt_err err = {{0}};
    char run[] = "/tmp/cpt-test-ckpt3-XXXXXX";
    CHECK(mkdtemp(run) != NULL);
    cpt_train_state st = {0}, back;
    st.step = 2;
    CHECK_EQ_INT(cpt_train_state_set_total(&st, "groups/trained", 40, &err), 0);
    CHECK_EQ_INT(cpt_train_state_set_total(&st, "groups/dropped_stale", 3, &err), 0);
    CHECK_EQ_INT(cpt_train_state_set_total(&st, "groups/trained", 41, &err), 0);
    st.lease_token = 7;
    st.world_size = 3;
    char p[512], dir[CPT_CKPT_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/state.json", run);
    CHECK_EQ_INT(cpt_train_state_write(&st, p, &err), 0);
    CHECK_MSG(cpt_train_state_read(p, &back, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(cpt_train_state_total(&back, "groups/trained"), 41);
    CHECK_EQ_INT(cpt_train_state_total(&back, "groups/dropped_stale"), 3);
    CHECK_EQ_INT(cpt_train_state_total(&back, "groups/unknown"), 0);
    CHECK_EQ_INT(back.lease_token, 7);
    CHECK_EQ_INT(back.world_size, 3);
    cpt_train_state_free(&back);
    const char *old = "{\"format\": \"cpt-trainer-state-1\", \"step\": 3, \"weight_version\": 3, "
                      "\"data_cursor\": {\"epoch\": 0, \"index\": 5}, \"outstanding_group_ids\": [], \"rng\": {}, "
                      "\"config_hash\": \"0000000000000001\"}";
    CHECK_MSG(cpt_train_state_parse(old, strlen(old), "old.json", &back, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(back.n_totals, 0);
    CHECK_EQ_INT(cpt_train_state_total(&back, "groups/trained"), 0);
    CHECK_EQ_INT(back.lease_token, 0);
    CHECK_EQ_INT(back.world_size, 0);
    cpt_train_state_free(&back);
    const char *bad_ws = "{\"format\": \"cpt-trainer-state-1\", \"step\": 3, \"weight_version\": 3, "
                         "\"data_cursor\": {\"epoch\": 0, \"index\": 5}, \"outstanding_group_ids\": [], "
                         "\"rng\": {}, \"config_hash\": \"0000000000000001\", \"world_size\": 0}";
    CHECK_EQ_INT(cpt_train_state_parse(bad_ws, strlen(bad_ws), "bad.json", &back, &err), -1);
    CHECK(strstr(err.msg, "bad.json: field 'world_size' is not a positive integer") != NULL);
    cpt_train_state_free(&back);

    cpt_ckpt_save_args a = {.run_dir = run, .model = m, .state = &st, .keep_last = 3, .before_commit = fake_fence};
    fence_calls = 0;
    fence_fail_at = 0;
    CHECK_MSG(cpt_ckpt_save(&a, dir, sizeof dir, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(fence_calls, 3); /* before anything, before the folder rename, before `latest` */
    for (int fail_at = 1; fail_at <= 3; fail_at++) {
        st.step = 2 + fail_at;
        fence_calls = 0;
        fence_fail_at = fail_at;
        CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), -1);
        CHECK_MSG(strstr(err.msg, "fenced off") != NULL, "%s", err.msg);
        snprintf(p, sizeof p, "%s/checkpoints/latest", run);
        char *latest = cpt_read_file(p, NULL, &err);
        CHECK_EQ_STR(latest, "step-2\n");
        free(latest);
        snprintf(p, sizeof p, "%s/checkpoints/step-%d", run, 2 + fail_at);
        if (fail_at < 3) CHECK(!cpt_path_exists(p)); /* the third check comes after the folder is in place */
    }
    char found[CPT_CKPT_PATH_MAX];
    CHECK_EQ_INT(cpt_ckpt_find_latest(run, found, sizeof found, &err), 1);
    CHECK(strstr(found, "step-2") != NULL);

    int fd = cpt_ckpt_lock(run, &err);
    CHECK_MSG(fd >= 0, "%s", err.msg);
    CHECK_EQ_INT(cpt_ckpt_lock(run, &err), -1);
    char pid[32];
    snprintf(pid, sizeof pid, "pid %ld", (long)getpid());
    CHECK_MSG(strstr(err.msg, "another trainer") && strstr(err.msg, pid), "%s", err.msg);
    cpt_ckpt_unlock(fd);
    fd = cpt_ckpt_lock(run, &err);
    CHECK_MSG(fd >= 0, "%s", err.msg);
    cpt_ckpt_unlock(fd);
    CHECK_EQ_INT(cpt_ckpt_find_latest(run, found, sizeof found, &err), 1); /* the lock file is no checkpoint */
    cpt_train_state_free(&st);
    cpt_remove_tree(run, &err);
}

/* issue 24: a model past max_shard_bytes is checkpointed as shards + index; model and optimizer resume bitwise, and
 * a damaged shard is refused by name (the manifest covers each shard). */
static void check_sharded_resume(void) {
    cpt_err err;
    char run[] = "/tmp/cpt-test-ckpt-shards-XXXXXX";
    CHECK(mkdtemp(run) != NULL);
    cpt_model *m = tiny(5), *m2 = tiny(77);
    if (!m || !m2) return;
    size_t n, n2;
    cpt_param **ps = cpt_model_param_list(m, &n, &err), **ps2 = cpt_model_param_list(m2, &n2, &err);
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    cpt_adamw *o = cpt_adamw_new(ps, n, &hp, &err), *o2 = cpt_adamw_new(ps2, n2, &hp, &err);
    fake_step(ps, n, o, 1);
    fake_step(ps, n, o, 2);
    cpt_train_state st = {.step = 2, .weight_version = 2}, st2;
    cpt_ckpt_save_args a = {.run_dir = run, .model = m, .opt = o, .state = &st, .keep_last = 1,
                            .max_shard_bytes = 600};
    char dir[CPT_CKPT_PATH_MAX + 64], p[CPT_CKPT_PATH_MAX + 128];
    CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), 0);
    snprintf(p, sizeof p, "%s/model/model.safetensors", dir);
    CHECK(!cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/model/model.safetensors.index.json", dir);
    CHECK(cpt_path_exists(p));
    CHECK_EQ_INT(cpt_ckpt_load(dir, m2, o2, &st2, &err), 0);
    CHECK(same_weights(m, m2));
    int moments_same = o2->step == 2;
    for (size_t i = 0; i < n; i++)
        moments_same &= !memcmp(o->m[i], o2->m[i], ps[i]->numel * 4) && !memcmp(o->v[i], o2->v[i], ps[i]->numel * 4);
    CHECK(moments_same);
    cpt_train_state_free(&st2);
    /* one byte of the second shard changed: refused, naming it */
    snprintf(p, sizeof p, "%s/model/model-00002-of-", dir);
    char shard[CPT_CKPT_PATH_MAX + 128] = "";
    for (int k = 2; k < 100 && !shard[0]; k++) {
        snprintf(shard, sizeof shard, "%s%05d.safetensors", p, k);
        if (!cpt_path_exists(shard)) shard[0] = 0;
    }
    CHECK_MSG(shard[0], "no second shard in %s/model", dir);
    FILE *f = shard[0] ? fopen(shard, "r+b") : NULL;
    if (f) {
        fseek(f, -2, SEEK_END);
        fputc('x', f);
        fclose(f);
        CHECK_EQ_INT(cpt_ckpt_load(dir, m2, o2, &st2, &err), -1);
        CHECK_MSG(strstr(err.msg, "model-00002-of-") && strstr(err.msg, "checksum"), "%s", err.msg);
    }
    free(ps);
    free(ps2);
    cpt_adamw_free(o);
    cpt_adamw_free(o2);
    cpt_model_free(m);
    cpt_model_free(m2);
    cpt_remove_tree(run, &err);
}

int main(void) {
    cpt_err err;
    check_sharded_resume();
    char run[] = "/tmp/cpt-test-ckpt-XXXXXX";
    CHECK(mkdtemp(run) != NULL);
    cpt_model *m = tiny(5);
    if (!m) return check_summary("test_checkpoint");
    size_t n;
    cpt_param **ps = cpt_model_param_list(m, &n, &err);
    cpt_adamw_hparams hp = {.beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1};
    cpt_adamw *o = cpt_adamw_new(ps, n, &hp, &err);

    cpt_train_state st = {0};
    st.data_epoch = 1;
    st.config_hash = 0xfedcba9876543210ULL;
    st.n_outstanding = 2;
    st.outstanding = calloc(2, sizeof *st.outstanding);
    st.outstanding[0] = (cpt_group_id){0, 3};
    st.outstanding[1] = (cpt_group_id){1, 4};
    cpt_rng rng;
    cpt_rng_seed(&rng, 9, 2);
    cpt_rng_u64(&rng);
    CHECK_EQ_INT(cpt_train_state_set_rng(&st, "sampling", &rng, &err), 0);

    char dir[CPT_CKPT_PATH_MAX + 64], p[CPT_CKPT_PATH_MAX + 128];
    cpt_ckpt_save_args a = {.run_dir = run, .model = m, .opt = o, .state = &st, .config_text = "[run]\nname = \"t\"\n",
                            .keep_last = 2};
    float saved3[8];
    for (int t = 1; t <= 3; t++) {
        fake_step(ps, n, o, t);
        st.step = st.weight_version = t;
        st.data_index = 10 * t;
        CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), 0);
        if (t == 3) memcpy(saved3, ps[0]->data, sizeof saved3);
    }
    snprintf(p, sizeof p, "%s/checkpoints/step-3", run);
    CHECK_EQ_STR(dir, p);
    snprintf(p, sizeof p, "%s/checkpoints/latest", run);
    char *latest = cpt_read_file(p, NULL, &err);
    CHECK_EQ_STR(latest, "step-3\n");
    free(latest);
    /* keep_last = 2: step-1 removed */
    snprintf(p, sizeof p, "%s/checkpoints/step-1", run);
    CHECK(!cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/step-2/manifest.json", run);
    CHECK(cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/step-3/model/config.json", run);
    CHECK(cpt_path_exists(p));
    CHECK_EQ_INT(cpt_ckpt_verify(dir, &err), 0);

    /* exact restore into a differently initialised model and a fresh optimizer */
    char found[CPT_CKPT_PATH_MAX];
    CHECK_EQ_INT(cpt_ckpt_find_latest(run, found, sizeof found, &err), 1);
    CHECK_EQ_STR(found, dir);
    cpt_model *m2 = tiny(77);
    size_t n2;
    cpt_param **ps2 = cpt_model_param_list(m2, &n2, &err);
    cpt_adamw *o2 = cpt_adamw_new(ps2, n2, &hp, &err);
    CHECK(!same_weights(m, m2));
    cpt_train_state st2;
    CHECK_EQ_INT(cpt_ckpt_load(found, m2, o2, &st2, &err), 0);
    CHECK(same_weights(m, m2));
    CHECK(memcmp(ps2[0]->data, saved3, sizeof saved3) == 0);
    CHECK_EQ_INT(o2->step, 3);
    int moments_same = 1;
    for (size_t i = 0; i < n; i++)
        moments_same &= !memcmp(o->m[i], o2->m[i], ps[i]->numel * 4) && !memcmp(o->v[i], o2->v[i], ps[i]->numel * 4);
    CHECK(moments_same);
    CHECK_EQ_INT(st2.step, 3);
    CHECK_EQ_INT(st2.weight_version, 3);
    CHECK_EQ_INT(st2.data_epoch, 1);
    CHECK_EQ_INT(st2.data_index, 30);
    CHECK_EQ_INT(st2.n_outstanding, 2);
    CHECK_EQ_INT(st2.outstanding[1].epoch, 1);
    CHECK_EQ_INT(st2.outstanding[1].index, 4);
    CHECK(st2.config_hash == 0xfedcba9876543210ULL);
    cpt_rng r2;
    CHECK_EQ_INT(cpt_train_state_get_rng(&st2, "sampling", &r2, &err), 0);
    CHECK(cpt_rng_u64(&r2) == cpt_rng_u64(&rng));
    CHECK_EQ_INT(cpt_train_state_get_rng(&st2, "nope", &r2, &err), -1);
    cpt_train_state_free(&st2);

    /* two optimizer updates per trainer step (PPO's ppo_epochs): the step-3 optimizer is trainer step 3 x 1 only */
    CHECK_EQ_INT(cpt_ckpt_load_steps(found, m2, o2, 1, &st2, &err), 0);
    cpt_train_state_free(&st2);
    CHECK_EQ_INT(cpt_ckpt_load_steps(found, m2, o2, 2, &st2, &err), -1);
    CHECK(strstr(err.msg, "optimizer step 3 differs from trainer step 3 x 2") != NULL);
    st.step = 1; /* the same optimizer (3 updates) as trainer step 1 of 3 updates each */
    char run3[] = "/tmp/cpt-test-ckpt3-XXXXXX";
    CHECK(mkdtemp(run3) != NULL);
    cpt_ckpt_save_args a3 = a;
    a3.run_dir = run3;
    char dir3[CPT_CKPT_PATH_MAX + 64];
    CHECK_EQ_INT(cpt_ckpt_save(&a3, dir3, sizeof dir3, &err), 0);
    CHECK_EQ_INT(cpt_ckpt_load_steps(dir3, m2, o2, 3, &st2, &err), 0);
    CHECK_EQ_INT(o2->step, 3);
    CHECK_EQ_INT(st2.step, 1);
    cpt_train_state_free(&st2);
    CHECK_EQ_INT(cpt_ckpt_load(dir3, m2, o2, &st2, &err), -1);
    cpt_remove_tree(run3, &err);
    st.step = 3;

    /* corrupt the newest: refused (checksum, naming the file), the previous one is used */
    snprintf(p, sizeof p, "%s/checkpoints/step-3/model/model.safetensors", run);
    flip_byte(p, 200);
    CHECK_EQ_INT(cpt_ckpt_verify(dir, &err), -1);
    CHECK(strstr(err.msg, "model/model.safetensors") && strstr(err.msg, "checksum"));
    CHECK_EQ_INT(cpt_ckpt_find_latest(run, found, sizeof found, &err), 1);
    snprintf(p, sizeof p, "%s/checkpoints/step-2", run);
    CHECK_EQ_STR(found, p);
    CHECK_EQ_INT(cpt_ckpt_load(dir, m2, o2, &st2, &err), -1); /* loading the corrupt one directly fails too */

    /* a truncated file: refused with the sizes; with no good checkpoint left, find_latest is an error */
    snprintf(p, sizeof p, "%s/checkpoints/step-2/optimizer.safetensors", run);
    CHECK_EQ_INT(truncate(p, 100), 0);
    snprintf(p, sizeof p, "%s/checkpoints/step-2", run);
    CHECK_EQ_INT(cpt_ckpt_verify(p, &err), -1);
    CHECK(strstr(err.msg, "optimizer.safetensors") && strstr(err.msg, "bytes"));
    CHECK_EQ_INT(cpt_ckpt_find_latest(run, found, sizeof found, &err), -1);
    CHECK(strstr(err.msg, "no good checkpoint") != NULL);

    /* a partial folder (no manifest) and a temporary folder are never chosen; an uncommitted newer folder is
     * ignored while `latest` names an older one */
    char run2[] = "/tmp/cpt-test-ckpt2-XXXXXX";
    CHECK(mkdtemp(run2) != NULL);
    a.run_dir = run2;
    st.step = 4;
    CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), 0);
    snprintf(p, sizeof p, "%s/checkpoints/step-6.tmp-99999", run2);
    CHECK_EQ_INT(cpt_mkdir_p(p, 0755, &err), 0);
    snprintf(p, sizeof p, "%s/checkpoints/step-5/model", run2);
    CHECK_EQ_INT(cpt_mkdir_p(p, 0755, &err), 0);
    CHECK_EQ_INT(cpt_ckpt_find_latest(run2, found, sizeof found, &err), 1);
    CHECK_EQ_STR(found, dir);
    snprintf(p, sizeof p, "%s/checkpoints/step-5", run2);
    CHECK_EQ_INT(cpt_ckpt_verify(p, &err), -1);
    CHECK(strstr(err.msg, "manifest.json") && strstr(err.msg, "partial"));
    /* the next save replaces the uncommitted step-5 and sweeps the temporary folder */
    st.step = 5;
    CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), 0);
    CHECK_EQ_INT(cpt_ckpt_verify(dir, &err), 0);
    snprintf(p, sizeof p, "%s/checkpoints/step-6.tmp-99999", run2);
    CHECK(!cpt_path_exists(p));
    /* a leftover uncommitted folder past the new checkpoint is removed by retention */
    snprintf(p, sizeof p, "%s/checkpoints/step-9/model", run2);
    CHECK_EQ_INT(cpt_mkdir_p(p, 0755, &err), 0);
    /* and so is a ZeRO staging folder of an interrupted save (with a shard in it) */
    snprintf(p, sizeof p, "%s/checkpoints/" CPT_CKPT_STAGING_PREFIX "3", run2);
    CHECK_EQ_INT(cpt_mkdir_p(p, 0755, &err), 0);
    snprintf(p, sizeof p, "%s/checkpoints/" CPT_CKPT_STAGING_PREFIX "3/optimizer-rank-1-of-2.safetensors", run2);
    CHECK_EQ_INT(cpt_write_file_atomic(p, "x", 1, &err), 0);
    st.step = 6;
    char dir6[CPT_CKPT_PATH_MAX + 64];
    CHECK_EQ_INT(cpt_ckpt_save(&a, dir6, sizeof dir6, &err), 0);
    snprintf(p, sizeof p, "%s/checkpoints/step-9", run2);
    CHECK(!cpt_path_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/" CPT_CKPT_STAGING_PREFIX "3", run2);
    CHECK(!cpt_path_exists(p));
    CHECK(cpt_path_exists(dir)); /* step-5 kept (keep_last 2) */
    st.step = 5;
    /* resolve: a run folder, its checkpoints folder, or a step folder */
    CHECK_EQ_INT(cpt_ckpt_resolve(run2, found, sizeof found, &err), 0);
    CHECK_EQ_STR(found, dir6);
    snprintf(p, sizeof p, "%s/checkpoints", run2);
    CHECK_EQ_INT(cpt_ckpt_resolve(p, found, sizeof found, &err), 0);
    CHECK(strstr(found, "step-6") != NULL);
    CHECK_EQ_INT(cpt_ckpt_resolve(dir, found, sizeof found, &err), 0);
    CHECK_EQ_STR(found, dir);
    CHECK_EQ_INT(cpt_ckpt_resolve("/nonexistent/cpt-run", found, sizeof found, &err), -1);
    /* saving a step that is already the latest is refused (saves only move forward) */
    st.step = 6;
    CHECK_EQ_INT(cpt_ckpt_save(&a, dir, sizeof dir, &err), -1);
    CHECK(strstr(err.msg, "already exists") != NULL);

    /* trainer_state.json errors name the file and the field */
    snprintf(p, sizeof p, "%s/bad_state.json", run2);
    const char *bad = "{\"format\": \"cpt-trainer-state-1\", \"step\": 3}";
    CHECK_EQ_INT(cpt_write_file_atomic(p, bad, strlen(bad), &err), 0);
    CHECK_EQ_INT(cpt_train_state_read(p, &st2, &err), -1);
    CHECK(strstr(err.msg, "bad_state.json") && strstr(err.msg, "weight_version"));

    totals_fence_lock(m);
    cpt_train_state_free(&st);
    cpt_adamw_free(o);
    cpt_adamw_free(o2);
    free(ps);
    free(ps2);
    cpt_model_free(m);
    cpt_model_free(m2);
    cpt_remove_tree(run, &err);
    cpt_remove_tree(run2, &err);
    return check_summary("test_checkpoint");
}
