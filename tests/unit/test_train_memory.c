/* The trainer's memory arithmetic (trainer/train_memory.h) for the shapes of issue 24, without a GPU:
 *  - cpt_model_config_numel equals the parameters a built model holds (qwen2 tied and untied, qwen3, llama with an
 *    o_proj bias, a value head), and the published counts of Qwen2.5-3B and Qwen2.5-7B;
 *  - the bytes per parameter on the GPU and the host, plain, offloaded and ZeRO-sharded;
 *  - the verdicts on an H200 (143771 MiB) and an 80 GiB GPU with a 128 GiB host: 7B plain is tight on the H200 and
 *    does not fit 80 GiB, both naming train.optimizer_offload; 7B offloaded fits both; a small host refuses the
 *    offloaded state; 3B plain fits the H200;
 *  - train.optimizer_offload with train.device = cpu is refused by the trainer's placement, naming the key. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cli/config_keys.h"
#include "model/model.h"
#include "tests/tiny_model.h"
#include "trainer/optim.h"
#include "trainer/train_memory.h"

#define GIB (1ull << 30)
#define H200 (143771ull << 20)

static void same_numel(cpt_model_config c, int value_head, const char *what) {
    cpt_err err;
    cpt_model *m = cpt_model_new_random(&c, 1, &err);
    CHECK_MSG(m != NULL, "%s: %s", what, err.msg);
    if (!m) return;
    if (value_head) CHECK(cpt_model_add_value_head(m, 2, &err) == 0);
    CHECK_MSG(cpt_model_config_numel(&c, value_head) == cpt_model_numel(m), "%s: counted %llu, built %zu", what,
              (unsigned long long)cpt_model_config_numel(&c, value_head), cpt_model_numel(m));
    cpt_model_free(m);
}

static cpt_model_config qwen25(int hidden, int layers, int heads, int kv, int inter, int tied, int vocab) {
    cpt_model_config c = tiny_model_config(vocab, layers);
    c.hidden_size = hidden, c.num_heads = heads, c.num_kv_heads = kv, c.head_dim = hidden / heads;
    c.intermediate_size = inter, c.tie_word_embeddings = tied;
    return c;
}

int main(void) {
    cpt_model_config c = tiny_model_config(64, 2);
    same_numel(c, 0, "qwen2 tied");
    c.tie_word_embeddings = 0;
    same_numel(c, 0, "qwen2 untied");
    same_numel(c, 1, "qwen2 untied + value head");
    c.arch = CPT_ARCH_QWEN3, c.qkv_bias = 0, c.qk_norm = 1;
    same_numel(c, 0, "qwen3");
    c.arch = CPT_ARCH_LLAMA, c.qk_norm = 0, c.o_bias = 1;
    same_numel(c, 0, "llama with o_proj bias");

    cpt_model_config b3 = qwen25(2048, 36, 16, 2, 11008, 1, 151936), b7 = qwen25(3584, 28, 28, 4, 18944, 0, 152064);
    uint64_t n3 = cpt_model_config_numel(&b3, 0), n7 = cpt_model_config_numel(&b7, 0);
    CHECK_EQ_INT((long long)n3, 3085938688LL);
    CHECK_EQ_INT((long long)n7, 7615616512LL);

    cpt_train_memory p7, o7, z7, p3;
    cpt_train_memory_estimate(n7, 0, 1, &p7);
    cpt_train_memory_estimate(n7, 1, 1, &o7);
    cpt_train_memory_estimate(n7, 0, 4, &z7);
    cpt_train_memory_estimate(n3, 0, 1, &p3);
    CHECK_EQ_INT((long long)p7.gpu_total, 18LL * (long long)n7);
    CHECK_EQ_INT((long long)p7.host_total, 4LL * (long long)n7);
    CHECK_EQ_INT((long long)o7.gpu_total, 6LL * (long long)n7 + 2LL * 3 * (long long)CPT_ADAMW_OFFLOAD_CHUNK * 4);
    CHECK_EQ_INT((long long)o7.host_total, 12LL * (long long)n7);
    CHECK_EQ_INT((long long)o7.master_gpu + (long long)o7.moments_gpu, 0);
    CHECK_EQ_INT((long long)z7.moments_gpu, 8LL * (long long)(n7 / 4));
    printf("7B: %.1f GiB on the GPU plain, %.1f offloaded (+ %.1f GiB pinned host), %.1f with ZeRO-1 over 4\n",
           (double)p7.gpu_total / GIB, (double)o7.gpu_total / GIB, (double)o7.host_total / GIB,
           (double)z7.gpu_total / GIB);

    char msg[512];
    cpt_mem_verdict v = cpt_train_memory_check(&p7, H200, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_TIGHT && strstr(msg, "train.optimizer_offload = true"), "7B plain on an H200: %d %s", v, msg);
    printf("7B plain, H200: %s\n", msg);
    v = cpt_train_memory_check(&p7, 80 * GIB, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_NO_FIT && strstr(msg, "train.optimizer_offload = true"), "7B plain on 80 GiB: %d %s", v, msg);
    printf("7B plain, 80 GiB: %s\n", msg);
    v = cpt_train_memory_check(&o7, H200, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_FITS, "7B offloaded on an H200: %d %s", v, msg);
    v = cpt_train_memory_check(&o7, 80 * GIB, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_FITS, "7B offloaded on 80 GiB: %d %s", v, msg);
    v = cpt_train_memory_check(&o7, H200, 64 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_NO_FIT && strstr(msg, "host memory"), "7B offloaded, 64 GiB host: %d %s", v, msg);
    printf("7B offloaded, 64 GiB host: %s\n", msg);
    v = cpt_train_memory_check(&p3, H200, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_FITS, "3B plain on an H200: %d %s", v, msg);
    /* ZeRO over 4 ranks of 80 GiB: 7B does not fit; the hint is more ranks, not offload with ZeRO (refused) */
    v = cpt_train_memory_check(&z7, 80 * GIB, 128 * GIB, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_NO_FIT && strstr(msg, "more trainer ranks") && strstr(msg, "at train.zero = 0"),
              "7B, ZeRO over 4 ranks, on 80 GiB: %d %s", v, msg);
    v = cpt_train_memory_check(&p7, 0, 0, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_FITS && strstr(msg, "needs: GPU 127.7 GiB (the GPU's memory not read here)") &&
                  strstr(msg, "(the host's memory not read here)"),
              "unknown memories are not checked, and said so: %d %s", v, msg);
    v = cpt_train_memory_check(&p3, H200, 0, msg, sizeof msg);
    CHECK_MSG(v == CPT_MEM_FITS && strstr(msg, "fits: GPU 51.7 of 140.4 GiB, host 11.5 GiB ") &&
                  strstr(msg, "(the host's memory not read here)"),
              "a known GPU and an unknown host: %d %s", v, msg);

    /* the key on a CPU trainer is refused where the model is placed */
    cpt_err err;
    char *ov[] = {"train.device=cpu", "train.optimizer_offload=true"};
    cpt_config *cfg = cpt_config_load(NULL, 2, ov, &err);
    CHECK_MSG(cfg != NULL, "%s", err.msg);
    cpt_model *m = cpt_model_new_random(&c, 1, &err);
    CHECK(m != NULL);
    if (cfg && m) {
        int rc = cpt_trainer_place_model(cfg, m, "policy", &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, "train.optimizer_offload"), "rc %d: %s", rc, err.msg);
    }
    cpt_model_free(m);
    cpt_config_free(cfg);
    return check_summary("test_train_memory");
}
