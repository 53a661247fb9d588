/* GPU weight transports on the device (label gpu; built into tests/gpu/device_all.sh's carry folder, stage xport).
 *
 * 1. sum64 on the device equals cpt_weights_sum64 on the host (a 64 MiB prefix copied back), for odd lengths too.
 * 2. cuda_ipc between two processes on one GPU: the parent (trainer role) exports a buffer of the bf16 bytes of the
 *    0.5B and 1.5B shapes, filled on the device; the child (worker role, forked before any CUDA call) opens the
 *    handle, copies device to device into its own buffer (5 timed syncs), and checks the copy's sum64 against the
 *    parent's. Prints seconds per sync and GB/s.
 * 3. nccl broadcast, 2 ranks (2 processes, GPUs 0 and 1) of the same sizes in weights.bucket_mb = 64 buckets,
 *    sum64 checked on rank 1. With fewer than 2 GPUs visible this part cannot run: the test runs the others and
 *    then exits 77 (a skip, not a pass) with the reason, unless one of them failed. */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/exit_status.h"
#include "core/fs.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/nccl_dp.h"
#include "kernels/cuda/weights_ipc.h"
#include "weights/weights_ann.h"

static int fails = 0;
#define EXPECT(c, ...)                                                     \
    do {                                                                   \
        if (!(c)) {                                                        \
            fails++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #c);   \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
        }                                                                  \
    } while (0)

static const struct { const char *name; size_t bytes; } SHAPES[] = {
    {"0.5B", (size_t)494032768 * 2}, /* Qwen2.5-0.5B params (tied), bf16 */
    {"1.5B", (size_t)1543714304 * 2}, /* Qwen2.5-1.5B params (tied), bf16 */
};

static int visible_gpus(void) {
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v && *v) {
        int n = 1;
        for (const char *p = v; *p; p++) n += *p == ',';
        return n;
    }
    int n = 0;
    DIR *d = opendir("/dev");
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (!strncmp(de->d_name, "nvidia", 6) && de->d_name[6] >= '0' && de->d_name[6] <= '9') n++;
    if (d) closedir(d);
    return n;
}

static void test_sum64(void) {
    cpt_err err;
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(0, &err);
    if (!ctx) { fails++; fprintf(stderr, "ctx: %s\n", err.msg); return; }
    size_t n = 64u << 20;
    void *d = cpt_cuda_malloc(n, "sum64 test", &err);
    unsigned char *h = malloc(n);
    cpt_cuda_fill_normal_bf16(ctx, d, n / 2, 0.0f, 1.0f, 7);
    EXPECT(cpt_cuda_memcpy_d2h(ctx, h, d, n, &err) == 0, "%s", err.msg);
    size_t lens[] = {n, n - 3, 8, 13, 1};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint64_t g = 0;
        EXPECT(cpt_cuda_sum64(ctx, d, lens[i], &g, &err) == 0, "%s", err.msg);
        EXPECT(g == cpt_weights_sum64(h, lens[i]), "len %zu: device %016" PRIx64 " host %016" PRIx64, lens[i], g,
               cpt_weights_sum64(h, lens[i]));
    }
    printf("sum64: device == host over %zu byte lengths\n", sizeof lens / sizeof lens[0]);
    cpt_cuda_free(d);
    free(h);
    cpt_cuda_ctx_free(ctx);
}

/* The second process (worker role): forked before this process touches CUDA (CUDA is not fork-safe), then driven
 * through pipes. */
typedef struct cmd {
    int kind; /* 1 cuda_ipc copy, 2 nccl rank 1 receive, 0 quit */
    size_t bytes;
    unsigned char handle[CPT_CUDA_IPC_HANDLE_BYTES];
    unsigned char uid[CPT_NCCL_ID_BYTES];
    uint64_t sum;
} cmd;
typedef struct res {
    double per;
    int ok;
} res;

static int rd(int fd, void *p, size_t n) { return read(fd, p, n) == (ssize_t)n ? 0 : -1; }
static int wr(int fd, const void *p, size_t n) { return write(fd, p, n) == (ssize_t)n ? 0 : -1; }

static res child_ipc(const cmd *m) {
    res r = {-1, 0};
    cpt_err err = {{0}};
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(0, &err);
    void *src = NULL, *dst = NULL;
    if (ctx && !cpt_cuda_ipc_open(ctx, m->handle, &src, &err) && (dst = cpt_cuda_malloc(m->bytes, "ipc dst", &err))) {
        cpt_cuda_memcpy_d2d(ctx, dst, src, m->bytes, &err); /* warm-up */
        cpt_cuda_sync(ctx, &err);
        double t0 = cpt_now();
        for (int i = 0; i < 5; i++) cpt_cuda_memcpy_d2d(ctx, dst, src, m->bytes, &err);
        cpt_cuda_sync(ctx, &err);
        r.per = (cpt_now() - t0) / 5;
        uint64_t s = 0;
        r.ok = cpt_cuda_sum64(ctx, dst, m->bytes, &s, &err) == 0 && s == m->sum;
        if (!r.ok) fprintf(stderr, "ipc child: sum64 %016" PRIx64 " want %016" PRIx64 " (%s)\n", s, m->sum, err.msg);
    } else {
        fprintf(stderr, "ipc child: %s\n", err.msg);
    }
    cpt_cuda_free(dst);
    cpt_cuda_ipc_close(src);
    cpt_cuda_ctx_free(ctx);
    return r;
}

/* rank r of 2 on GPU r, in 64 MiB buckets as weights.bucket_mb: rank 0 fills, sends its sum64 to rank 1 (sum_fd)
 * and broadcasts; rank 1 receives, then compares its sum64 with the one read from sum_fd. */
static res nccl_rank(int rank, const unsigned char id[CPT_NCCL_ID_BYTES], size_t bytes, int sum_fd) {
    res r = {-1, 0};
    cpt_err err = {{0}};
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(rank, &err);
    cpt_nccl *c = ctx ? cpt_nccl_new(ctx, id, rank, 2, 120, rank ? "rank 1/2" : "rank 0/2", &err) : NULL;
    void *buf = c ? cpt_cuda_malloc(bytes, "nccl buffer", &err) : NULL;
    uint64_t want = 0, s = 0;
    if (!buf) goto out;
    if (rank == 0) {
        cpt_cuda_fill_normal_bf16(ctx, buf, bytes / 2, 0.0f, 0.02f, 5);
        if (cpt_cuda_sum64(ctx, buf, bytes, &want, &err) || wr(sum_fd, &want, sizeof want)) goto out;
    } else if (cpt_cuda_memset(ctx, buf, 0, bytes, &err)) {
        goto out;
    }
    size_t bucket = 64u << 20;
    for (int it = -1; it < 3; it++) { /* -1: warm-up */
        double t0 = cpt_now();
        for (size_t off = 0; off < bytes; off += bucket)
            if (cpt_nccl_broadcast(c, (char *)buf + off, bytes - off < bucket ? bytes - off : bucket, 0, &err)) goto out;
        if (cpt_nccl_sync(c, &err)) goto out;
        if (it == 0) r.per = 0;
        if (it >= 0) r.per += (cpt_now() - t0) / 3;
    }
    if (cpt_cuda_sum64(ctx, buf, bytes, &s, &err)) goto out;
    if (rank == 0) r.ok = s == want;
    else r.ok = rd(sum_fd, &want, sizeof want) == 0 && s == want;
    if (!r.ok) snprintf(err.msg, sizeof err.msg, "sum64 %016" PRIx64 ", rank 0 sent %016" PRIx64, s, want);
out:
    if (!r.ok) fprintf(stderr, "nccl rank %d: %s\n", rank, err.msg);
    cpt_cuda_free(buf);
    cpt_nccl_free(c);
    cpt_cuda_ctx_free(ctx);
    return r;
}

static void child_loop(int cfd, int rfd) {
    cmd m;
    while (rd(cfd, &m, sizeof m) == 0 && m.kind) {
        res r = m.kind == 1 ? child_ipc(&m) : nccl_rank(1, m.uid, m.bytes, cfd);
        if (wr(rfd, &r, sizeof r)) _exit(3);
    }
    _exit(0);
}

static void test_ipc(int cfd, int rfd, double out_s[2]) {
    cpt_err err = {{0}};
    cpt_cuda_ctx *ctx = cpt_cuda_ctx_new(0, &err);
    if (!ctx) { fails++; fprintf(stderr, "%s\n", err.msg); return; }
    for (int k = 0; k < 2; k++) {
        cmd m = {.kind = 1, .bytes = SHAPES[k].bytes};
        void *buf = NULL;
        if (cpt_cuda_ipc_alloc(ctx, m.bytes, &buf, m.handle, &err)) { fails++; fprintf(stderr, "%s\n", err.msg); break; }
        cpt_cuda_fill_normal_bf16(ctx, buf, m.bytes / 2, 0.0f, 0.02f, 11 + (uint64_t)k);
        EXPECT(cpt_cuda_sum64(ctx, buf, m.bytes, &m.sum, &err) == 0, "%s", err.msg);
        res r = {-1, 0};
        EXPECT(wr(cfd, &m, sizeof m) == 0 && rd(rfd, &r, sizeof r) == 0, "pipe to the child");
        EXPECT(r.ok, "cuda_ipc %s: the child's copy did not match", SHAPES[k].name);
        out_s[k] = r.per;
        cpt_cuda_ipc_free(buf);
    }
    cpt_cuda_ctx_free(ctx);
}

/* Returns 1 when the part could not run here (fewer than 2 GPUs), else 0. */
static int test_nccl(int cfd, int rfd, double out_s[2]) {
    if (visible_gpus() < 2) {
        printf("nccl broadcast: SKIPPED (%d GPU visible; 2 needed)\n", visible_gpus());
        return 1;
    }
    for (int k = 0; k < 2; k++) {
        cmd m = {.kind = 2, .bytes = SHAPES[k].bytes};
        cpt_err err = {{0}};
        if (cpt_nccl_unique_id(m.uid, &err)) { fails++; fprintf(stderr, "%s\n", err.msg); return 0; }
        if (wr(cfd, &m, sizeof m)) { fails++; return 0; }
        res r0 = nccl_rank(0, m.uid, m.bytes, cfd), r1 = {-1, 0};
        EXPECT(rd(rfd, &r1, sizeof r1) == 0, "pipe from the child");
        EXPECT(r0.ok && r1.ok, "nccl %s: rank 1's bytes differ from rank 0's", SHAPES[k].name);
        out_s[k] = r0.per;
    }
    return 0;
}

int main(void) {
    double ipc_s[2] = {-1, -1}, nccl_s[2] = {-1, -1};
    int c2w[2], w2c[2];
    if (pipe(c2w) || pipe(w2c)) return 1;
    pid_t pid = fork(); /* before any CUDA call */
    if (pid < 0) return 1;
    if (pid == 0) child_loop(c2w[0], w2c[1]);
    test_ipc(c2w[1], w2c[0], ipc_s);
    test_sum64();
    int nccl_skipped = test_nccl(c2w[1], w2c[0], nccl_s);
    cmd quit = {.kind = 0};
    int st = 0;
    if (wr(c2w[1], &quit, sizeof quit) == 0) waitpid(pid, &st, 0);
    printf("\n%-6s %12s %10s %12s %10s %12s\n", "shape", "bf16 bytes", "ipc s", "ipc GB/s", "nccl s", "nccl GB/s");
    for (int k = 0; k < 2; k++)
        printf("%-6s %12zu %10.4f %12.1f %10.4f %12.1f\n", SHAPES[k].name, SHAPES[k].bytes, ipc_s[k],
               ipc_s[k] > 0 ? SHAPES[k].bytes / ipc_s[k] / 1e9 : 0, nccl_s[k], nccl_s[k] > 0 ? SHAPES[k].bytes / nccl_s[k] / 1e9 : 0);
    if (fails) {
        printf("test_weight_transports: FAILED\n");
        return 1;
    }
    if (nccl_skipped) {
        printf("test_weight_transports: SKIP (sum64 and cuda_ipc passed; nccl needs 2 GPUs, %d visible)\n",
               visible_gpus());
        return CPT_EXIT_SKIP;
    }
    printf("test_weight_transports: ok\n");
    return 0;
}
