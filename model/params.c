/* The parameter table: HF names, shapes and places in one flat allocation for weights and one for gradients;
 * random init, loading from safetensors, saving an HF folder, and the value head. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "model/backend.h"
#include "model/model_internal.h"

typedef struct table {
    cpt_model *m;
    size_t cap;
    int64_t off;
} table;

static int64_t add(table *t, const char *name, int ndim, int64_t d0, int64_t d1, int no_decay, cpt_err *err) {
    cpt_model *m = t->m;
    if (m->n_params == t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        cpt_param *p = realloc(m->params, cap * sizeof *p);
        if (p) m->params = p;
        int64_t *o = realloc(m->offsets, cap * sizeof *o);
        if (o) m->offsets = o;
        char **nm = realloc(m->names, cap * sizeof *nm);
        if (nm) m->names = nm;
        if (!p || !o || !nm) return cpt_errf(err, "out of memory building the parameter table");
        t->cap = cap;
    }
    size_t i = m->n_params++;
    cpt_param *p = &m->params[i];
    memset(p, 0, sizeof *p);
    m->names[i] = strdup(name);
    if (!m->names[i]) return cpt_errf(err, "out of memory");
    p->name = m->names[i];
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 0;
    p->numel = (size_t)(d0 * (ndim == 2 ? d1 : 1));
    p->no_decay = no_decay;
    p->model = m;
    m->offsets[i] = t->off;
    int64_t off = t->off;
    t->off += (int64_t)p->numel;
    return off;
}

#define ADD(name, nd, a, b, nodecay)                                  \
    do {                                                              \
        last = add(&t, name, nd, a, b, nodecay, err);                 \
        if (last < 0) return -1;                                      \
    } while (0)

int cpt_model_build_params(cpt_model *m, int with_value_head, cpt_err *err) {
    const cpt_model_config *c = &m->cfg;
    table t = {m, 0, 0};
    int64_t last;
    int64_t C = c->hidden_size, V = c->vocab_size, I = c->intermediate_size, D = c->head_dim;
    int64_t HD = (int64_t)c->num_heads * D, KD = (int64_t)c->num_kv_heads * D;
    char name[256];
    m->layer = calloc((size_t)c->num_layers, sizeof *m->layer);
    if (!m->layer) return cpt_errf(err, "out of memory");
    ADD("model.embed_tokens.weight", 2, V, C, 0);
    m->off_embed = last;
    for (int l = 0; l < c->num_layers; l++) {
        layer_offsets *lo = &m->layer[l];
        lo->bqkv = lo->q_norm = lo->k_norm = lo->bo = -1;
#define LNAME(suffix) (snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix), name)
        ADD(LNAME("input_layernorm.weight"), 1, C, 0, 1);
        lo->ln1 = last;
        ADD(LNAME("self_attn.q_proj.weight"), 2, HD, C, 0);
        lo->wqkv = last;
        ADD(LNAME("self_attn.k_proj.weight"), 2, KD, C, 0);
        ADD(LNAME("self_attn.v_proj.weight"), 2, KD, C, 0);
        if (c->qkv_bias) {
            ADD(LNAME("self_attn.q_proj.bias"), 1, HD, 0, 1);
            lo->bqkv = last;
            ADD(LNAME("self_attn.k_proj.bias"), 1, KD, 0, 1);
            ADD(LNAME("self_attn.v_proj.bias"), 1, KD, 0, 1);
        }
        if (c->qk_norm) {
            ADD(LNAME("self_attn.q_norm.weight"), 1, D, 0, 1);
            lo->q_norm = last;
            ADD(LNAME("self_attn.k_norm.weight"), 1, D, 0, 1);
            lo->k_norm = last;
        }
        ADD(LNAME("self_attn.o_proj.weight"), 2, C, HD, 0);
        lo->wo = last;
        if (c->o_bias) {
            ADD(LNAME("self_attn.o_proj.bias"), 1, C, 0, 1);
            lo->bo = last;
        }
        ADD(LNAME("post_attention_layernorm.weight"), 1, C, 0, 1);
        lo->ln2 = last;
        ADD(LNAME("mlp.gate_proj.weight"), 2, I, C, 0);
        lo->wgu = last;
        ADD(LNAME("mlp.up_proj.weight"), 2, I, C, 0);
        ADD(LNAME("mlp.down_proj.weight"), 2, C, I, 0);
        lo->wdown = last;
#undef LNAME
    }
    ADD("model.norm.weight", 1, C, 0, 1);
    m->off_norm = last;
    m->off_lm_head = m->off_embed;
    if (!c->tie_word_embeddings) {
        ADD("lm_head.weight", 2, V, C, 0);
        m->off_lm_head = last;
    }
    m->off_score = -1;
    if (with_value_head) {
        ADD("score.weight", 2, 1, C, 0);
        m->off_score = last;
    }
    m->numel = (size_t)t.off;
    m->data = calloc(m->numel, sizeof(float));
    m->grad = calloc(m->numel, sizeof(float));
    if (!m->data || !m->grad)
        return cpt_errf(err, "out of memory for %zu parameters (%.1f MB each for weights and gradients)", m->numel,
                        m->numel * 4.0 / 1e6);
    for (size_t i = 0; i < m->n_params; i++) {
        m->params[i].data = m->data + m->offsets[i];
        m->params[i].grad = m->grad + m->offsets[i];
    }
    return 0;
}

static cpt_model *model_alloc(const cpt_model_config *cfg, int with_value_head, const char *where, cpt_err *err) {
    if (cpt_model_config_check(cfg, where, err)) return NULL;
    cpt_model *m = calloc(1, sizeof *m);
    if (!m) {
        cpt_errf(err, "out of memory");
        return NULL;
    }
    m->cfg = *cfg;
    m->be = &cpt_backend_cpu;
    m->kept_tokens = -1;
    m->inv_freq = malloc(sizeof(float) * (size_t)(cfg->head_dim / 2));
    if (!m->inv_freq || cpt_model_build_params(m, with_value_head, err)) {
        if (!m->inv_freq) cpt_errf(err, "out of memory");
        cpt_model_free(m);
        return NULL;
    }
    cpt_rope_cfg rc = {cfg->head_dim, cfg->rope_theta, cfg->rope_llama3, cfg->rope_factor, cfg->rope_low_freq_factor,
                       cfg->rope_high_freq_factor, cfg->rope_original_max_pos};
    cpt_rope_inv_freq(&rc, m->inv_freq);
    return m;
}

/* HF-like init: linear and embedding weights N(0, 0.02), norm weights 1, biases 0. */
static void init_param(cpt_param *p, cpt_rng *rng) {
    size_t len = strlen(p->name);
    if (len > 11 && !strcmp(p->name + len - 11, "norm.weight")) {
        for (size_t i = 0; i < p->numel; i++) p->data[i] = 1.0f;
    } else if (p->ndim == 1) {
        memset(p->data, 0, p->numel * sizeof(float));
    } else {
        cpt_rng_fill_normal(rng, p->data, p->numel, 0.0f, 0.02f);
    }
}

cpt_model *cpt_model_new_random(const cpt_model_config *cfg, uint64_t seed, cpt_err *err) {
    cpt_model *m = model_alloc(cfg, 0, "model config", err);
    if (!m) return NULL;
    cpt_rng rng;
    cpt_rng_seed(&rng, seed, 1);
    for (size_t i = 0; i < m->n_params; i++) init_param(&m->params[i], &rng);
    return m;
}

cpt_model *cpt_model_new_zeros(const cpt_model_config *cfg, cpt_err *err) {
    return model_alloc(cfg, 0, "model config", err);
}

static int read_param(cpt_param *p, const cpt_st_file *f, const char *where, cpt_err *err) {
    const cpt_st_tensor *t = cpt_st_find(f, p->name);
    if (!t) return cpt_errf(err, "%s: missing tensor \"%s\"", where, p->name);
    int ok = t->ndim == p->ndim && t->shape[0] == p->shape[0] && (p->ndim == 1 || t->shape[1] == p->shape[1]);
    if (!ok) {
        char got[128] = "", want[64];
        size_t len = 0;
        for (int d = 0; d < t->ndim && len < sizeof got - 24; d++)
            len += (size_t)snprintf(got + len, sizeof got - len, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        if (p->ndim == 1)
            snprintf(want, sizeof want, "%lld", (long long)p->shape[0]);
        else
            snprintf(want, sizeof want, "%lld, %lld", (long long)p->shape[0], (long long)p->shape[1]);
        return cpt_errf(err, "%s: tensor \"%s\" has shape [%s], the config implies [%s]", where, p->name, got, want);
    }
    if (cpt_st_read_f32(t, p->data, p->numel, err)) return cpt_err_prefix(err, "%s: tensor \"%s\": ", where, p->name);
    for (size_t i = 0; i < p->numel; i++)
        if (!isfinite(p->data[i])) return cpt_errf(err, "%s: tensor \"%s\" holds a non-finite value at %zu", where, p->name, i);
    return 0;
}

cpt_model *cpt_model_load(const char *hf_dir, cpt_err *err) {
    cpt_model_config cfg;
    if (cpt_model_config_load(hf_dir, &cfg, err)) return NULL;
    cpt_st_file *f = cpt_st_open(hf_dir, err);
    if (!f) {
        cpt_err_prefix(err, "loading %s: ", hf_dir);
        return NULL;
    }
    cpt_model *m = model_alloc(&cfg, cpt_st_find(f, "score.weight") != NULL, hf_dir, err);
    if (!m) {
        cpt_st_close(f);
        return NULL;
    }
    for (size_t i = 0; i < m->n_params; i++)
        if (read_param(&m->params[i], f, hf_dir, err)) {
            cpt_st_close(f);
            cpt_model_free(m);
            return NULL;
        }
    /* tensors the model does not use: tied lm_head copies and rotary buffers are expected; others are reported */
    for (size_t i = 0; i < cpt_st_count(f); i++) {
        const char *n = cpt_st_at(f, i)->name;
        if (cpt_model_find_param(m, n) || !strcmp(n, "lm_head.weight") || strstr(n, "rotary_emb")) continue;
        cpt_warn("%s: ignoring tensor \"%s\", which the model does not use", hf_dir, n);
    }
    cpt_st_close(f);
    return m;
}

int cpt_model_load_weights(cpt_model *m, const char *safetensors_path, cpt_err *err) {
    cpt_st_file *f = cpt_st_open(safetensors_path, err);
    if (!f) return -1;
    /* read into a copy first, so a bad file leaves the model unchanged */
    float *keep = malloc(m->numel * sizeof(float));
    if (!keep) {
        cpt_st_close(f);
        return cpt_errf(err, "out of memory");
    }
    memcpy(keep, m->data, m->numel * sizeof(float));
    int rc = 0;
    for (size_t i = 0; i < m->n_params && !rc; i++) rc = read_param(&m->params[i], f, safetensors_path, err);
    if (rc) memcpy(m->data, keep, m->numel * sizeof(float));
    free(keep);
    cpt_st_close(f);
    if (!rc) rc = cpt_model_sync_to_device(m, err); /* a placed model's device copy is the one that runs */
    return rc;
}

int cpt_model_save_hf(const cpt_model *m, const char *out_dir, int bf16, cpt_err *err) {
    return cpt_model_save_hf_sharded(m, out_dir, bf16, 0, err);
}

int cpt_model_save_hf_sharded(const cpt_model *m, const char *out_dir, int bf16, uint64_t max_shard_bytes,
                              cpt_err *err) {
    /* on a GPU the host copy is a mirror: refresh it (logically const: the weights do not change) */
    if (m->be->pull_weights && m->be->pull_weights((cpt_model *)m, err)) return -1;
    if (cpt_mkdir_p(out_dir, 0755, err)) return -1;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", out_dir);
    if (cpt_model_config_write(&m->cfg, path, bf16 ? "bfloat16" : "float32", err)) return -1;
    uint16_t *half = NULL;
    if (bf16) {
        half = malloc(m->numel * sizeof(uint16_t));
        if (!half) return cpt_errf(err, "out of memory");
        for (size_t i = 0; i < m->numel; i++) half[i] = cpt_f32_to_bf16(m->data[i]);
    }
    cpt_st_writer *w = cpt_st_writer_new();
    int rc = w ? 0 : cpt_errf(err, "out of memory");
    if (!rc) rc = cpt_st_writer_meta(w, "format", "pt", err);
    for (size_t i = 0; i < m->n_params && !rc; i++) {
        const cpt_param *p = &m->params[i];
        const void *data = bf16 ? (const void *)(half + m->offsets[i]) : (const void *)p->data;
        rc = cpt_st_writer_add(w, p->name, bf16 ? CPT_DT_BF16 : CPT_DT_F32, p->ndim, p->shape, data, err);
    }
    if (!rc) {
        rc = cpt_st_writer_finish_sharded(w, out_dir, max_shard_bytes, err);
        w = NULL;
    }
    if (w) cpt_st_writer_free(w);
    free(half);
    return rc;
}

int cpt_model_add_value_head(cpt_model *m, uint64_t seed, cpt_err *err) {
    if (m->off_score >= 0) return cpt_errf(err, "the model already has a value head (score.weight)");
    if (m->be != &cpt_backend_cpu)
        return cpt_errf(err, "add the value head before placing the model on the GPU (it is placed: %s)", m->be->name);
    /* rebuild the table with the head, then move the weights over (the head comes last, offsets are unchanged) */
    float *old = m->data;
    size_t old_n = m->numel;
    float *old_grad = m->grad;
    for (size_t i = 0; i < m->n_params; i++) free(m->names[i]);
    free(m->params), free(m->offsets), free(m->names), free(m->layer);
    m->params = NULL, m->offsets = NULL, m->names = NULL, m->layer = NULL, m->n_params = 0;
    int rc = cpt_model_build_params(m, 1, err);
    if (!rc) {
        memcpy(m->data, old, old_n * sizeof(float));
        memcpy(m->grad, old_grad, old_n * sizeof(float));
        cpt_rng rng;
        cpt_rng_seed(&rng, seed, 3);
        /* small init so a fresh critic starts near zero */
        cpt_rng_fill_normal(&rng, m->data + m->off_score, (size_t)m->cfg.hidden_size, 0.0f,
                            1.0f / sqrtf((float)m->cfg.hidden_size) * 0.1f);
    }
    free(old);
    free(old_grad);
    return rc;
}

int cpt_model_has_value_head(const cpt_model *m) { return m->off_score >= 0; }

void cpt_model_free(cpt_model *m) {
    if (!m) return;
    if (m->be && m->be->release) m->be->release(m);
    for (size_t i = 0; i < m->n_params; i++) free(m->names[i]);
    free(m->params);
    free(m->offsets);
    free(m->names);
    free(m->layer);
    free(m->data);
    free(m->grad);
    free(m->inv_freq);
    cpt_model_free_acts(m);
    free(m);
}

const cpt_model_config *cpt_model_cfg(const cpt_model *m) { return &m->cfg; }
size_t cpt_model_num_params(const cpt_model *m) { return m->n_params; }
cpt_param *cpt_model_param(cpt_model *m, size_t i) { return i < m->n_params ? &m->params[i] : NULL; }
size_t cpt_model_numel(const cpt_model *m) { return m->numel; }
float *cpt_model_data(cpt_model *m) { return m->data; }
float *cpt_model_grads(cpt_model *m) { return m->grad; }

cpt_param *cpt_model_find_param(cpt_model *m, const char *name) {
    for (size_t i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return &m->params[i];
    return NULL;
}

void cpt_cpu_zero_grad(cpt_model *m) { memset(m->grad, 0, m->numel * sizeof(float)); }
