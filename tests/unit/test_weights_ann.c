/* cuda_ipc / nccl announcements (weights/weights_ann.h): format and strict parse round trip, the message through the
 * queue codec, the layout digest, sum64 against an independent recomputation, and the start checks of
 * weights.transport (weights/weights_tx.h). No GPU. */
#include <stdlib.h>
#include <string.h>

#include "cli/config_keys.h"
#include "core/config.h"
#include "check.h"
#include "tiny_model.h"
#include "weights/weights_ann.h"
#include "weights/weights_tx.h"
#include "weights/weights_rx.h"

static void test_ipc_round_trip(void) {
    cpt_weights_ann a = {.transport = CPT_WT_CUDA_IPC, .slot = 1, .device = 3, .pid = 4242,
                         .layout = {.digest = 0x0123456789abcdefull, .n_tensors = 291}};
    snprintf(a.host, sizeof a.host, "node-07");
    for (int i = 0; i < CPT_IPC_HANDLE_BYTES; i++) a.handle[i] = (unsigned char)(i * 37 + 1);
    char loc[CPT_MAX_LOCATION];
    cpt_err err;
    CHECK(cpt_weights_ann_format(&a, loc, sizeof loc, &err) == 0);
    const char *head = "ipc;slot=1;dev=3;pid=4242;host=node-07;layout=0123456789abcdef;tensors=291;handle=";
    CHECK(strncmp(loc, head, strlen(head)) == 0 && strlen(loc) == strlen(head) + 2 * CPT_IPC_HANDLE_BYTES);
    /* through the queue's weights message */
    cpt_weights_msg w = {.version = 17, .bytes = 988065792, .membership_epoch = 0};
    snprintf(w.run, sizeof w.run, "r1");
    snprintf(w.transport, sizeof w.transport, "cuda_ipc");
    snprintf(w.location, sizeof w.location, "%s", loc);
    cpt_weights_sum64_str(0xfeedfacecafebeefull, w.checksum, sizeof w.checksum);
    cpt_buf b;
    CHECK(cpt_weights_encode(&w, &b, &err) == 0);
    cpt_weights_msg d;
    CHECK(cpt_weights_decode(b.data, b.len, &d, &err) == 0);
    cpt_buf_free(&b);
    CHECK_EQ_STR(d.transport, "cuda_ipc");
    cpt_weights_ann p;
    CHECK(cpt_weights_ann_parse(d.transport, d.location, &p, &err) == 0);
    CHECK(p.slot == 1 && p.device == 3 && p.pid == 4242 && !strcmp(p.host, "node-07"));
    CHECK(p.layout.digest == a.layout.digest && p.layout.n_tensors == 291);
    CHECK(memcmp(p.handle, a.handle, sizeof a.handle) == 0);
    uint64_t h = 0;
    CHECK(cpt_weights_sum64_parse(d.checksum, &h) == 0 && h == 0xfeedfacecafebeefull);
}

static void test_nccl_round_trip(void) {
    cpt_weights_ann a = {.transport = CPT_WT_NCCL, .epoch = 9, .ranks = 5, .bucket_bytes = 64u << 20,
                         .layout = {.digest = 42, .n_tensors = 3}};
    for (int i = 0; i < CPT_WG_UID_BYTES; i++) a.uid[i] = (unsigned char)(255 - i);
    char loc[CPT_MAX_LOCATION];
    cpt_err err;
    CHECK(cpt_weights_ann_format(&a, loc, sizeof loc, &err) == 0);
    cpt_weights_ann p;
    CHECK(cpt_weights_ann_parse("nccl", loc, &p, &err) == 0);
    CHECK(p.epoch == 9 && p.ranks == 5 && p.bucket_bytes == (64u << 20) && p.layout.digest == 42);
    CHECK(memcmp(p.uid, a.uid, sizeof a.uid) == 0);
    /* the transport field must agree with the line */
    CHECK(cpt_weights_ann_parse("cuda_ipc", loc, &p, &err) == -1);
    CHECK(strstr(err.msg, "does not start with") != NULL);
}

static void test_parse_errors(void) {
    cpt_weights_ann p;
    cpt_err err;
    const char *uid = "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                      "00000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000"
                      "000000000000000000000000000000000000000000000000";
    char ok[1024];
    snprintf(ok, sizeof ok, "nccl;epoch=1;ranks=2;bucket=1024;layout=00000000000000aa;tensors=3;uid=%s", uid);
    CHECK(cpt_weights_ann_parse("nccl", ok, &p, &err) == 0);
    char bad[1200];
    snprintf(bad, sizeof bad, "%s;extra=1", ok);
    CHECK(cpt_weights_ann_parse("nccl", bad, &p, &err) == -1 && strstr(err.msg, "unknown key \"extra\""));
    snprintf(bad, sizeof bad, "nccl;epoch=1;epoch=2;ranks=2;bucket=1024;layout=00000000000000aa;tensors=3;uid=%s", uid);
    CHECK(cpt_weights_ann_parse("nccl", bad, &p, &err) == -1 && strstr(err.msg, "epoch twice"));
    snprintf(bad, sizeof bad, "nccl;epoch=0;ranks=2;bucket=1024;layout=00000000000000aa;tensors=3;uid=%s", uid);
    CHECK(cpt_weights_ann_parse("nccl", bad, &p, &err) == -1 && strstr(err.msg, "epoch"));
    snprintf(bad, sizeof bad, "nccl;epoch=1;ranks=2;bucket=1024;layout=00000000000000aa;tensors=3;uid=%.250s", uid);
    CHECK(cpt_weights_ann_parse("nccl", bad, &p, &err) == -1 && strstr(err.msg, "uid is not 256 hex digits"));
    CHECK(cpt_weights_ann_parse("nccl", "nccl;epoch=1", &p, &err) == -1 && strstr(err.msg, "missing"));
    CHECK(cpt_weights_ann_parse("file", "/x/v1.safetensors", &p, &err) == -1);
    /* the queue codec accepts the three transports and refuses others */
    cpt_weights_msg w = {.version = 1, .bytes = 2};
    snprintf(w.run, sizeof w.run, "r");
    snprintf(w.location, sizeof w.location, "x");
    snprintf(w.checksum, sizeof w.checksum, "sum64:0000000000000000");
    cpt_buf b;
    snprintf(w.transport, sizeof w.transport, "shm");
    CHECK(cpt_weights_encode(&w, &b, &err) == -1 && strstr(err.msg, "expected file, nccl or cuda_ipc"));
}

/* An independent sum64: per word, byte by byte. */
static uint64_t ref_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void test_sum64(void) {
    enum { N = 1003 };
    unsigned char buf[N];
    for (int i = 0; i < N; i++) buf[i] = (unsigned char)(i * 131 + 7);
    for (size_t len = 0; len <= N; len += len < 20 ? 1 : 97) {
        uint64_t want = 0;
        for (size_t i = 0; i * 8 < len; i++) {
            uint64_t w = 0;
            for (size_t k = 0; k < 8 && i * 8 + k < len; k++) w |= (uint64_t)buf[i * 8 + k] << (8 * k);
            want += ref_mix(w + (i + 1) * 0x9E3779B97F4A7C15ull);
        }
        CHECK_MSG(cpt_weights_sum64(buf, len) == want, "len %zu", len);
    }
    uint64_t h0 = cpt_weights_sum64(buf, N);
    buf[500] ^= 1;
    CHECK(cpt_weights_sum64(buf, N) != h0);
    buf[500] ^= 1;
    /* swapping two different words changes it (positions are mixed in) */
    unsigned char t[8];
    memcpy(t, buf, 8), memcpy(buf, buf + 8, 8), memcpy(buf + 8, t, 8);
    CHECK(cpt_weights_sum64(buf, N) != h0);
    char s[32];
    cpt_weights_sum64_str(0xabcull, s, sizeof s);
    CHECK_EQ_STR(s, "sum64:0000000000000abc");
}

static void test_layout(void) {
    cpt_err err;
    cpt_model *a = tiny_model_new(32, 2, 1), *b = tiny_model_new(32, 2, 2);
    cpt_weights_layout la, lb;
    cpt_weights_layout_of(a, &la);
    cpt_weights_layout_of(b, &lb); /* other values, same shape */
    CHECK(la.digest == lb.digest && la.n_tensors == cpt_model_num_params(a) && la.numel == cpt_model_numel(a));
    CHECK(cpt_weights_layout_check(&la, &lb, &err) == 0);
    lb.digest ^= 1;
    CHECK(cpt_weights_layout_check(&la, &lb, &err) == -1 && strstr(err.msg, "differ"));
    lb.n_tensors++;
    CHECK(cpt_weights_layout_check(&la, &lb, &err) == -1 && strstr(err.msg, "tensors announced"));
    cpt_model_free(a);
    cpt_model_free(b);
}

static void test_start_checks(void) {
    cpt_err err;
    char *ov1[] = {"weights.transport=cuda_ipc", "train.device=cpu", "rollout.device=cuda"};
    cpt_config *c = cpt_config_load(NULL, 3, ov1, &err);
    CHECK(c != NULL);
    if (c) {
        CHECK(cpt_weights_tx_check_config(c, &err) == -1);
#ifdef CPT_HAVE_CUDA
        CHECK_MSG(strstr(err.msg, "train.device = \"cpu\"") != NULL, "%s", err.msg);
#else
        CHECK_MSG(strstr(err.msg, "built without") != NULL, "%s", err.msg);
#endif
        cpt_config_free(c);
    }
    char *ov2[] = {"weights.transport=nccl", "train.device=cuda", "rollout.device=cpu"};
    c = cpt_config_load(NULL, 3, ov2, &err);
    if (c) {
        CHECK(cpt_weights_tx_check_config(c, &err) == -1);
#ifdef CPT_HAVE_CUDA
        CHECK_MSG(strstr(err.msg, "rollout.device = \"cpu\"") != NULL, "%s", err.msg);
#endif
        cpt_config_free(c);
    }
    char *ov3[] = {"weights.transport=file"};
    c = cpt_config_load(NULL, 1, ov3, &err);
    if (c) {
        CHECK(cpt_weights_tx_check_config(c, &err) == 0);
        cpt_config_free(c);
    }
    char *ov4[] = {"weights.transport=shm"};
    c = cpt_config_load(NULL, 1, ov4, &err);
    CHECK(c == NULL); /* the key's choices refuse it at load */
    cpt_config_free(c);
}

/* The worker's side refuses bad combinations before touching the queue. */
static void test_worker_checks(void) {
    cpt_err err;
    char *ov1[] = {"weights.transport=cuda_ipc", "rollout.device=cpu", "model.path=/nonexistent"};
    cpt_config *c = cpt_config_load(NULL, 3, ov1, &err);
    CHECK(c != NULL);
    if (c) {
        CHECK(cpt_weights_rx_new(c, "w1", NULL, &err) == NULL);
#ifdef CPT_HAVE_CUDA
        CHECK_MSG(strstr(err.msg, "rollout.device = \"cpu\"") != NULL, "%s", err.msg);
#else
        CHECK_MSG(strstr(err.msg, "built without") != NULL, "%s", err.msg);
#endif
        cpt_config_free(c);
    }
    char *ov2[] = {"weights.transport=nccl", "rollout.device=cuda", "model.init=random"};
    c = cpt_config_load(NULL, 3, ov2, &err);
    if (c) {
        CHECK(cpt_weights_rx_new(c, "w1", NULL, &err) == NULL);
#ifdef CPT_HAVE_CUDA
        CHECK_MSG(strstr(err.msg, "model.path") != NULL, "%s", err.msg);
#endif
        cpt_config_free(c);
    }
    char *ov3[] = {"weights.transport=file"};
    c = cpt_config_load(NULL, 1, ov3, &err);
    if (c) {
        cpt_weights_rx *rx = cpt_weights_rx_new(c, "w1", NULL, &err);
        CHECK(rx != NULL);
        cpt_weights_msg w = {.version = 1};
        snprintf(w.transport, sizeof w.transport, "file");
        CHECK(!cpt_weights_rx_handles(rx, &w)); /* the file transport stays in rollout/worker.c */
        snprintf(w.transport, sizeof w.transport, "cuda_ipc");
        CHECK(cpt_weights_rx_handles(rx, &w));
        CHECK(cpt_weights_rx_poll(rx, NULL, NULL, &w, &err) == 0); /* not nccl: nothing to do */
        cpt_weights_rx_free(rx);
        cpt_config_free(c);
    }
}

int main(void) {
    test_worker_checks();
    test_ipc_round_trip();
    test_nccl_round_trip();
    test_parse_errors();
    test_sum64();
    test_layout();
    test_start_checks();
    return check_summary("test_weights_ann");
}
