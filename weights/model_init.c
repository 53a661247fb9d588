/* The model a config asks for (weights/model_init.h). */
#include "weights/model_init.h"

#include <string.h>

cpt_model *cpt_model_from_config(const cpt_config *cfg, int vocab_size, int bos_id, int eos_id, cpt_err *err) {
    if (!strcmp(cpt_cfg_str(cfg, "model.init"), "load")) {
        const char *path = cpt_cfg_str(cfg, "model.path");
        if (!*path) {
            cpt_errf(err, "model.path is empty (set it to a Hugging Face folder, or model.init = \"random\")");
            return NULL;
        }
        cpt_model *m = cpt_model_load(path, err);
        if (!m) cpt_err_prefix(err, "model.path %s", path);
        return m;
    }
    cpt_model_config mc;
    memset(&mc, 0, sizeof mc);
    const char *arch = cpt_cfg_str(cfg, "model.arch");
    mc.arch = !strcmp(arch, "qwen3") ? CPT_ARCH_QWEN3 : !strcmp(arch, "llama") ? CPT_ARCH_LLAMA : CPT_ARCH_QWEN2;
    mc.vocab_size = cpt_cfg_int(cfg, "model.vocab_size") ? (int)cpt_cfg_int(cfg, "model.vocab_size") : vocab_size;
    mc.hidden_size = (int)cpt_cfg_int(cfg, "model.hidden_size");
    mc.intermediate_size = (int)cpt_cfg_int(cfg, "model.intermediate_size");
    mc.num_layers = (int)cpt_cfg_int(cfg, "model.num_layers");
    mc.num_heads = (int)cpt_cfg_int(cfg, "model.num_heads");
    mc.num_kv_heads = cpt_cfg_int(cfg, "model.num_kv_heads") ? (int)cpt_cfg_int(cfg, "model.num_kv_heads") : mc.num_heads;
    if (mc.hidden_size % mc.num_heads || mc.num_heads % mc.num_kv_heads) {
        cpt_errf(err, "model.hidden_size (%d) must divide by model.num_heads (%d), and that by model.num_kv_heads (%d)",
                 mc.hidden_size, mc.num_heads, mc.num_kv_heads);
        return NULL;
    }
    if (mc.vocab_size < vocab_size) {
        cpt_errf(err, "model.vocab_size %d is smaller than the tokenizer's %d", mc.vocab_size, vocab_size);
        return NULL;
    }
    mc.head_dim = mc.hidden_size / mc.num_heads;
    mc.rms_norm_eps = 1e-6f;
    mc.rope_theta = (float)cpt_cfg_float(cfg, "model.rope_theta");
    mc.tie_word_embeddings = cpt_cfg_bool(cfg, "model.tie_word_embeddings");
    mc.qkv_bias = mc.arch == CPT_ARCH_QWEN2;
    mc.qk_norm = mc.arch == CPT_ARCH_QWEN3;
    mc.max_position_embeddings = (int)cpt_cfg_int(cfg, "model.max_position_embeddings");
    mc.bos_token_id = bos_id;
    mc.eos_token_id = eos_id;
    return cpt_model_new_random(&mc, (uint64_t)cpt_cfg_int(cfg, "run.seed"), err);
}
