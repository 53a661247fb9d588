/* trainer/dp.h without a GPU: the bucket plan (hand-worked cases and invariants over a real model's parameter
 * list), the one-rank group's bookkeeping (no NCCL loaded), misuse errors, and, where NCCL can be loaded, two
 * ranks exchanging the unique id through the file bootstrap. */
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/exit_status.h"
#include "model/model.h"
#include "tests/check.h"
#include "trainer/dp.h"

static cpt_err err;

static void check_hand_plan(void) {
    /* target 20 floats: from the back, [5] stops before the big param 4; [4] alone; [2,3] reach 20; [1] stops
     * before the big param 0; [0] alone. */
    size_t numel[] = {100, 10, 10, 10, 50, 5};
    cpt_dp_plan p;
    CHECK(cpt_dp_plan_buckets(numel, NULL, 6, 20 * sizeof(float), &p, &err) == 0);
    size_t want[][4] = {{5, 5, 180, 5}, {4, 4, 130, 50}, {2, 3, 110, 20}, {1, 1, 100, 10}, {0, 0, 0, 100}};
    CHECK_EQ_INT(p.n_buckets, 5);
    for (size_t b = 0; b < p.n_buckets && b < 5; b++) {
        CHECK_EQ_INT(p.buckets[b].first_param, want[b][0]);
        CHECK_EQ_INT(p.buckets[b].last_param, want[b][1]);
        CHECK_EQ_INT(p.buckets[b].offset, want[b][2]);
        CHECK_EQ_INT(p.buckets[b].count, want[b][3]);
    }
    CHECK_EQ_INT(p.bucket_of_param[3], 2);
    CHECK_EQ_INT(p.bucket_of_param[0], 4);
    cpt_dp_plan_free(&p);

    /* Explicit offsets with gaps (aligned params): a bucket spans the gaps between its params. */
    size_t off[] = {0, 128, 256, 384, 512, 640};
    CHECK(cpt_dp_plan_buckets(numel, off, 6, 20 * sizeof(float), &p, &err) == 0);
    CHECK_EQ_INT(p.n_buckets, 5);
    CHECK_EQ_INT(p.buckets[2].offset, 256);
    CHECK_EQ_INT(p.buckets[2].count, 384 + 10 - 256);
    cpt_dp_plan_free(&p);

    /* One bucket when the target exceeds everything. */
    CHECK(cpt_dp_plan_buckets(numel, NULL, 6, 1 << 20, &p, &err) == 0);
    CHECK_EQ_INT(p.n_buckets, 1);
    CHECK_EQ_INT(p.buckets[0].count, 185);
    cpt_dp_plan_free(&p);

    /* Errors. */
    CHECK(cpt_dp_plan_buckets(numel, NULL, 0, 64, &p, &err) != 0);
    size_t bad_off[] = {0, 50, 256, 384, 512, 640}; /* param 1 starts inside param 0 */
    CHECK(cpt_dp_plan_buckets(numel, bad_off, 6, 64, &p, &err) != 0);
    CHECK_MSG(strstr(err.msg, "param 1") != NULL, "%s", err.msg);
    size_t empty[] = {4, 0, 4};
    CHECK(cpt_dp_plan_buckets(empty, NULL, 3, 64, &p, &err) != 0);
    CHECK_MSG(strstr(err.msg, "param 1 is empty") != NULL, "%s", err.msg);
}

/* Invariants on a real parameter list: buckets tile the buffer back to front, each is a whole number of params,
 * each reaches the target unless the next param down is a big one or it is the last bucket, and none could drop
 * its first param and still reach the target. */
static void check_model_plan(void) {
    cpt_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = CPT_ARCH_QWEN2;
    c.hidden_size = 128, c.num_layers = 6, c.vocab_size = 3000, c.num_heads = 4, c.num_kv_heads = 2;
    c.intermediate_size = 352, c.head_dim = 32, c.rms_norm_eps = 1e-6f, c.rope_theta = 10000.0f;
    c.qkv_bias = 1, c.tie_word_embeddings = 1, c.max_position_embeddings = 512, c.bos_token_id = -1;
    c.eos_token_id = -1;
    cpt_model *m = cpt_model_new_random(&c, 7, &err);
    CHECK(m != NULL);
    if (!m) return;
    size_t n = cpt_model_num_params(m);
    size_t *numel = malloc(n * sizeof *numel), *off = malloc(n * sizeof *off);
    float *base = cpt_model_grads(m);
    for (size_t i = 0; i < n; i++) {
        numel[i] = cpt_model_param(m, i)->numel;
        off[i] = (size_t)(cpt_model_param(m, i)->grad - base);
    }
    size_t targets[] = {4, 1000, 40000, 200000, 1 << 30};
    for (size_t t = 0; t < sizeof targets / sizeof targets[0]; t++) {
        size_t target = targets[t];
        cpt_dp_plan p;
        CHECK(cpt_dp_plan_buckets(numel, off, n, target * sizeof(float), &p, &err) == 0);
        size_t expect_last = n - 1, end = cpt_model_numel(m);
        for (size_t b = 0; b < p.n_buckets; b++) {
            const cpt_dp_bucket *k = &p.buckets[b];
            CHECK_EQ_INT(k->last_param, expect_last);
            CHECK_EQ_INT(k->offset, off[k->first_param]);
            CHECK_EQ_INT(k->offset + k->count, end);
            for (size_t q = k->first_param; q <= k->last_param; q++) CHECK_EQ_INT(p.bucket_of_param[q], b);
            int is_last = b + 1 == p.n_buckets;
            if (!is_last && k->count < target) CHECK(numel[k->first_param - 1] >= target);
            if (k->first_param < k->last_param) CHECK(k->count - numel[k->first_param] < target);
            end = k->offset;
            expect_last = k->first_param - 1;
        }
        CHECK_EQ_INT(end, 0);
        CHECK_EQ_INT(p.buckets[p.n_buckets - 1].first_param, 0);
        cpt_dp_plan_free(&p);
    }
    free(numel), free(off);

    /* attach_model: one rank, CPU model: the plan is the model's, and the callback form reports readiness. */
    unsetenv("CPT_RANK"), unsetenv("CPT_WORLD_SIZE");
    cpt_dp_opts o = {.bootstrap = "file", .bucket_bytes = 40000 * sizeof(float)};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    CHECK(dp != NULL);
    if (dp) {
        CHECK(cpt_dp_attach_model(dp, m, &err) == 0);
        const cpt_dp_plan *p = cpt_dp_get_plan(dp);
        CHECK_EQ_INT(p->n_params, n);
        CHECK_EQ_INT(p->buckets[0].last_param, n - 1);
        CHECK_EQ_INT(p->buckets[p->n_buckets - 1].first_param, 0);
        for (size_t q = n; q-- > 0;) CHECK(cpt_dp_grads_ready_cb(dp, q, q, &err) == 0);
        CHECK(cpt_dp_finish(dp, &err) == 0);
        CHECK_EQ_INT(cpt_dp_buckets_overlapped(dp), p->n_buckets);
        cpt_dp_free(dp);
    }
    /* Forced NCCL with a CPU model is refused. In a child: drawing a unique id leaves NCCL's state behind, which a
     * leak checker in this process would report. */
    pid_t pid = fork();
    if (pid == 0) {
        cpt_dp_opts fo = {.bootstrap = "file", .force_nccl = 1};
        dp = cpt_dp_new(&fo, &err);
        if (!dp) _exit(strstr(err.msg, "cannot load NCCL") || strstr(err.msg, "without CUDA") ? 4 : 2);
        int refused = cpt_dp_attach_model(dp, m, &err) != 0 && strstr(err.msg, "needs the model on the GPU");
        if (!refused) fprintf(stderr, "attach_model with a CPU model and NCCL: %s\n", err.msg);
        _exit(refused ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK_MSG(WIFEXITED(st) && (WEXITSTATUS(st) == 0 || WEXITSTATUS(st) == 4), "status %d", st);
    cpt_model_free(m);
}

static int nccl_loaded(void) { return dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD) != NULL; }

static void check_world1(void) {
    unsetenv("CPT_RANK"), unsetenv("CPT_WORLD_SIZE"), unsetenv("PMIX_RANK"), unsetenv("PMIX_NAMESPACE");
    cpt_dp_opts o = {.bootstrap = "auto", .bucket_bytes = 20 * sizeof(float)};
    cpt_dp *dp = cpt_dp_new(&o, &err);
    CHECK(dp != NULL);
    if (!dp) return;
    CHECK_EQ_INT(cpt_dp_rank(dp), 0);
    CHECK_EQ_INT(cpt_dp_size(dp), 1);
    CHECK_EQ_STR(cpt_dp_bootstrap_name(dp), "file");
    CHECK_EQ_INT(cpt_dp_uses_nccl(dp), 0);
    size_t numel[] = {100, 10, 10, 10, 50, 5};
    /* No NCCL: the buffer is never touched, so none is needed. */
    CHECK(cpt_dp_attach(dp, NULL, NULL, numel, NULL, 6, &err) == 0);
    CHECK_EQ_INT(cpt_dp_get_plan(dp)->n_buckets, 5);
    /* A backward in reverse order: every bucket launches from grads_ready. */
    for (size_t p = 6; p-- > 0;) CHECK(cpt_dp_grads_ready(dp, p, p, &err) == 0);
    CHECK(cpt_dp_finish(dp, &err) == 0);
    CHECK_EQ_INT(cpt_dp_buckets_overlapped(dp), 5);
    /* Out of order: param 3 alone completes nothing (bucket 2 needs param 2 too, and bucket 0 comes first). */
    CHECK(cpt_dp_grads_ready(dp, 2, 3, &err) == 0);
    CHECK(cpt_dp_grads_ready(dp, 5, 5, &err) == 0);
    CHECK(cpt_dp_finish(dp, &err) == 0);
    CHECK_EQ_INT(cpt_dp_buckets_overlapped(dp), 1); /* only bucket 0 launched before finish */
    /* finish alone launches everything. */
    CHECK(cpt_dp_finish(dp, &err) == 0);
    CHECK_EQ_INT(cpt_dp_buckets_overlapped(dp), 0);
    /* Misuse. */
    CHECK(cpt_dp_grads_ready(dp, 4, 4, &err) == 0);
    CHECK(cpt_dp_grads_ready(dp, 4, 4, &err) != 0);
    CHECK_MSG(strstr(err.msg, "twice") != NULL, "%s", err.msg);
    CHECK(cpt_dp_grads_ready(dp, 3, 9, &err) != 0);
    CHECK(cpt_dp_grads_ready(dp, 3, 2, &err) != 0);
    CHECK(cpt_dp_finish(dp, &err) == 0);
    /* sync off (accumulation micro-batches): nothing is tracked, so reporting twice is fine. */
    cpt_dp_set_sync(dp, 0);
    CHECK(cpt_dp_grads_ready(dp, 4, 4, &err) == 0);
    CHECK(cpt_dp_grads_ready(dp, 4, 4, &err) == 0);
    CHECK(cpt_dp_finish(dp, &err) == 0);
    cpt_dp_set_sync(dp, 1);
    CHECK(cpt_dp_attach(dp, NULL, NULL, numel, NULL, 6, &err) != 0);
    CHECK_MSG(!nccl_loaded(), "a one-rank group loaded libnccl");
    cpt_dp_free(dp);

    /* Device choice: the local rank from Slurm, modulo what the process sees. */
    setenv("SLURM_LOCALID", "5", 1);
    dp = cpt_dp_new(&o, &err);
    CHECK(dp != NULL);
    if (dp) {
        CHECK_EQ_INT(cpt_dp_device(dp, 4), 1);
        CHECK_EQ_INT(cpt_dp_device(dp, 1), 0);
        cpt_dp_free(dp);
    }
    unsetenv("SLURM_LOCALID");

    /* Bad bootstraps. */
    cpt_dp_opts bad = {.bootstrap = "carrier-pigeon"};
    CHECK(cpt_dp_new(&bad, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "carrier-pigeon") != NULL, "%s", err.msg);
    setenv("CPT_RANK", "3", 1), setenv("CPT_WORLD_SIZE", "2", 1);
    cpt_dp_opts f = {.bootstrap = "file", .boot_dir = "/tmp"};
    CHECK(cpt_dp_new(&f, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "CPT_RANK=3") != NULL, "%s", err.msg);
    cpt_dp_opts r = {.bootstrap = "redis"};
    CHECK(cpt_dp_new(&r, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "CPT_RANK=3") != NULL, "%s", err.msg);
    unsetenv("CPT_RANK"), unsetenv("CPT_WORLD_SIZE");
}

/* Two ranks (processes) share rank 0's unique id through the file transport; no GPU is needed to draw one.
 * Returns 1 when a CUDA build cannot load NCCL here (the part could not run), else 0. */
static int check_two_rank_uid(void) {
#ifndef CPT_HAVE_CUDA
    printf("two-rank unique id exchange: not in this build (no CUDA, so no NCCL)\n");
#else
    char dir[] = "/tmp/cpt-dp-unit-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    int fds[2][2];
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        CHECK(pipe(fds[r]) == 0);
        pids[r] = fork();
        if (pids[r] == 0) {
            char rs[4];
            snprintf(rs, sizeof rs, "%d", r);
            setenv("CPT_RANK", rs, 1), setenv("CPT_WORLD_SIZE", "2", 1);
            cpt_dp_opts o = {.bootstrap = "file", .boot_dir = dir, .timeout_s = 30};
            cpt_dp *dp = cpt_dp_new(&o, &err);
            if (!dp && strstr(err.msg, "cannot load NCCL")) _exit(4);
            if (!dp) {
                fprintf(stderr, "rank %d: %s\n", r, err.msg);
                _exit(2);
            }
            const unsigned char *id = cpt_dp_unique_id(dp);
            size_t got = 128;
            ssize_t w = write(fds[r][1], id, got);
            (void)w;
            _exit(got == 128 && cpt_dp_size(dp) == 2 && cpt_dp_rank(dp) == r && cpt_dp_uses_nccl(dp) ? 0 : 3);
        }
        close(fds[r][1]);
    }
    unsigned char ids[2][128];
    int codes[2];
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        if (r == 0 && codes[0] == 4) kill(pids[1], SIGKILL); /* rank 1 would wait for an id that never comes */
        if (codes[0] != 4) {
            CHECK_MSG(codes[r] == 0, "rank %d exited with status %d", r, st);
            CHECK_EQ_INT(read(fds[r][0], ids[r], 128), 128);
        }
        close(fds[r][0]);
    }
    if (codes[0] == 4) {
        printf("two-rank unique id exchange: skipped (no libnccl.so.2 here)\n");
        return 1;
    }
    CHECK(memcmp(ids[0], ids[1], 128) == 0);
    int nonzero = 0;
    for (int i = 0; i < 128; i++) nonzero |= ids[0][i];
    CHECK(nonzero);
    printf("two-rank unique id exchange over the file bootstrap: ok\n");
#endif
    return 0;
}

int main(void) {
    check_hand_plan();
    check_world1(); /* first: it checks that nothing has loaded NCCL yet */
    check_model_plan();
    int no_nccl = check_two_rank_uid();
    if (no_nccl && !check_failures) {
        printf("test_dp_plan: SKIP (the plans passed; the unique id exchange needs libnccl.so.2)\n");
        return CPT_EXIT_SKIP;
    }
    return check_summary("test_dp_plan");
}
