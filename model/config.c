/* HF config.json <-> cpt_model_config for Qwen2ForCausalLM, Qwen3ForCausalLM and LlamaForCausalLM.
 *
 * The structural sizes are required; everything else defaults as the transformers config classes do. Both the
 * transformers 5 layout (rope_parameters {rope_type, rope_theta, ...}) and the older one (rope_theta,
 * rope_scaling) are read. Features the kernels do not implement (sliding windows, MLP biases, other rope types,
 * other activations) are refused by name rather than silently computed wrong. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fs.h"
#include "core/json_util.h"
#include "model/model_internal.h"

static const struct {
    const char *arch, *model_type;
    cpt_arch id;
} ARCHES[] = {
    {"Qwen2ForCausalLM", "qwen2", CPT_ARCH_QWEN2},
    {"Qwen3ForCausalLM", "qwen3", CPT_ARCH_QWEN3},
    {"LlamaForCausalLM", "llama", CPT_ARCH_LLAMA},
};
#define N_ARCHES (sizeof ARCHES / sizeof ARCHES[0])

static int get_int(json_t *o, const char *key, int required, int dflt, int *out, const char *path, cpt_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        if (required) return cpt_errf(err, "%s: missing field \"%s\"", path, key);
        *out = dflt;
        return 0;
    }
    if (!json_is_integer(v)) return cpt_errf(err, "%s: field \"%s\" must be an integer", path, key);
    json_int_t x = json_integer_value(v);
    if (x < -1 || x > 100000000) return cpt_errf(err, "%s: field \"%s\" = %lld is out of range", path, key, (long long)x);
    *out = (int)x;
    return 0;
}

static int get_float(json_t *o, const char *key, float dflt, float *out, const char *path, cpt_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_number(v)) return cpt_errf(err, "%s: field \"%s\" must be a number", path, key);
    double x = json_number_value(v);
    if (!isfinite(x) || fabs(x) > 3e38) return cpt_errf(err, "%s: field \"%s\" is not a finite float", path, key);
    *out = (float)x;
    return 0;
}

static int get_bool(json_t *o, const char *key, int dflt, int *out, const char *path, cpt_err *err) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v)) return cpt_errf(err, "%s: field \"%s\" must be true or false", path, key);
    *out = json_is_true(v);
    return 0;
}

/* bos/eos: an integer, null, or a list (llama 3 lists several eos ids: the first is kept). */
static int get_token_id(json_t *o, const char *key, int *out, const char *path, cpt_err *err) {
    json_t *v = json_object_get(o, key);
    *out = -1;
    if (!v || json_is_null(v)) return 0;
    if (json_is_array(v)) v = json_array_size(v) ? json_array_get(v, 0) : NULL;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 100000000)
        return cpt_errf(err, "%s: field \"%s\" must be a token id", path, key);
    *out = (int)json_integer_value(v);
    return 0;
}

static int parse_rope(json_t *root, cpt_model_config *c, const char *path, cpt_err *err) {
    json_t *rp = json_object_get(root, "rope_parameters");
    json_t *rs = json_object_get(root, "rope_scaling");
    const char *rp_name = "rope_parameters";
    if (!rp || json_is_null(rp)) {
        rp = rs;
        rp_name = "rope_scaling";
    }
    if (rp && !json_is_null(rp) && !json_is_object(rp)) return cpt_errf(err, "%s: \"%s\" must be an object", path, rp_name);
    if (get_float(root, "rope_theta", 10000.0f, &c->rope_theta, path, err)) return -1;
    c->rope_llama3 = 0;
    if (!rp || json_is_null(rp)) return 0;
    char where[600];
    snprintf(where, sizeof where, "%s: %s", path, rp_name);
    if (get_float(rp, "rope_theta", c->rope_theta, &c->rope_theta, where, err)) return -1;
    json_t *t = json_object_get(rp, "rope_type");
    if (!t) t = json_object_get(rp, "type");
    const char *type = t && json_is_string(t) ? json_string_value(t) : "default";
    if (!strcmp(type, "default")) return 0;
    if (strcmp(type, "llama3") != 0)
        return cpt_errf(err, "%s: rope type \"%s\" is not supported (default and llama3 are)", where, type);
    c->rope_llama3 = 1;
    if (get_float(rp, "factor", 8.0f, &c->rope_factor, where, err) ||
        get_float(rp, "low_freq_factor", 1.0f, &c->rope_low_freq_factor, where, err) ||
        get_float(rp, "high_freq_factor", 4.0f, &c->rope_high_freq_factor, where, err) ||
        get_int(rp, "original_max_position_embeddings", 1, 0, &c->rope_original_max_pos, where, err))
        return -1;
    return 0;
}

static int config_from_json(json_t *root, cpt_model_config *c, const char *path, cpt_err *err) {
    memset(c, 0, sizeof *c);
    if (!json_is_object(root)) return cpt_errf(err, "%s: not a JSON object", path);
    const char *arch = NULL;
    json_t *archs = json_object_get(root, "architectures");
    if (json_is_array(archs) && json_array_size(archs) > 0 && json_is_string(json_array_get(archs, 0)))
        arch = json_string_value(json_array_get(archs, 0));
    json_t *mt = json_object_get(root, "model_type");
    const char *model_type = json_is_string(mt) ? json_string_value(mt) : NULL;
    int found = 0;
    for (size_t i = 0; i < N_ARCHES && !found; i++)
        if ((arch && !strcmp(arch, ARCHES[i].arch)) || (!arch && model_type && !strcmp(model_type, ARCHES[i].model_type))) {
            c->arch = ARCHES[i].id;
            found = 1;
        }
    if (!found)
        return cpt_errf(err, "%s: unknown architecture \"%s\" (supported: Qwen2ForCausalLM, Qwen3ForCausalLM, LlamaForCausalLM)",
                        path, arch ? arch : model_type ? model_type : "(none given)");

    if (get_int(root, "vocab_size", 1, 0, &c->vocab_size, path, err) ||
        get_int(root, "hidden_size", 1, 0, &c->hidden_size, path, err) ||
        get_int(root, "intermediate_size", 1, 0, &c->intermediate_size, path, err) ||
        get_int(root, "num_hidden_layers", 1, 0, &c->num_layers, path, err) ||
        get_int(root, "num_attention_heads", 1, 0, &c->num_heads, path, err) ||
        get_int(root, "num_key_value_heads", 0, c->num_heads, &c->num_kv_heads, path, err))
        return -1;
    int default_hd = c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
    if (get_int(root, "head_dim", 0, default_hd, &c->head_dim, path, err) ||
        get_float(root, "rms_norm_eps", 1e-6f, &c->rms_norm_eps, path, err) ||
        get_bool(root, "tie_word_embeddings", 0, &c->tie_word_embeddings, path, err) ||
        get_int(root, "max_position_embeddings", 0, 4096, &c->max_position_embeddings, path, err) ||
        get_token_id(root, "bos_token_id", &c->bos_token_id, path, err) ||
        get_token_id(root, "eos_token_id", &c->eos_token_id, path, err) || parse_rope(root, c, path, err))
        return -1;
    int attention_bias = 0, mlp_bias = 0, sliding = 0;
    if (get_bool(root, "attention_bias", 0, &attention_bias, path, err) ||
        get_bool(root, "mlp_bias", 0, &mlp_bias, path, err) ||
        get_bool(root, "use_sliding_window", 0, &sliding, path, err))
        return -1;
    if (mlp_bias) return cpt_errf(err, "%s: \"mlp_bias\": true is not supported", path);
    if (sliding) return cpt_errf(err, "%s: \"use_sliding_window\": true is not supported", path);
    json_t *act = json_object_get(root, "hidden_act");
    if (act && !json_is_null(act) && !(json_is_string(act) && !strcmp(json_string_value(act), "silu")))
        return cpt_errf(err, "%s: \"hidden_act\" must be \"silu\"", path);
    switch (c->arch) {
    case CPT_ARCH_QWEN2: c->qkv_bias = 1; c->o_bias = 0; c->qk_norm = 0; break;
    case CPT_ARCH_QWEN3: c->qkv_bias = c->o_bias = attention_bias; c->qk_norm = 1; break;
    case CPT_ARCH_LLAMA: c->qkv_bias = c->o_bias = attention_bias; c->qk_norm = 0; break;
    }
    return cpt_model_config_check(c, path, err);
}

int cpt_model_config_check(const cpt_model_config *c, const char *where, cpt_err *err) {
#define RANGE(field, lo, hi)                                                                                   \
    if (c->field < (lo) || c->field > (hi))                                                                    \
        return cpt_errf(err, "%s: %s = %d is outside [%d, %d]", where, #field, (int)c->field, (int)(lo), (int)(hi));
    RANGE(vocab_size, 1, 16777216)
    RANGE(hidden_size, 1, 65536)
    RANGE(intermediate_size, 1, 262144)
    RANGE(num_layers, 1, 1024)
    RANGE(num_heads, 1, 1024)
    RANGE(num_kv_heads, 1, 1024)
    RANGE(head_dim, 2, 1024)
#undef RANGE
    if (c->num_heads % c->num_kv_heads)
        return cpt_errf(err, "%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where,
                        c->num_heads, c->num_kv_heads);
    if (c->head_dim % 2) return cpt_errf(err, "%s: head_dim %d must be even for rope", where, c->head_dim);
    if (!(c->rms_norm_eps > 0)) return cpt_errf(err, "%s: rms_norm_eps must be positive", where);
    if (!(c->rope_theta > 1)) return cpt_errf(err, "%s: rope_theta must be > 1", where);
    if (c->rope_llama3 && !(c->rope_factor > 0 && c->rope_low_freq_factor > 0 &&
                            c->rope_high_freq_factor > c->rope_low_freq_factor && c->rope_original_max_pos > 0))
        return cpt_errf(err, "%s: llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                             "original_max_position_embeddings > 0", where);
    return 0;
}

int cpt_model_config_load(const char *hf_dir, cpt_model_config *cfg, cpt_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    json_t *root = cpt_json_load_file(path, 0, err);
    if (!root) return -1;
    int rc = config_from_json(root, cfg, path, err);
    json_decref(root);
    return rc;
}

int cpt_model_config_parse(const char *json, size_t len, const char *name, cpt_model_config *cfg, cpt_err *err) {
    json_t *root = cpt_json_loadb(json, len, 0, name, err);
    if (!root) return -1;
    int rc = config_from_json(root, cfg, name, err);
    json_decref(root);
    return rc;
}

/* A float as the short decimal a person wrote (1e-06, not 9.99999997e-07). */
static json_t *jfloat(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)f);
    return json_real(strtod(buf, NULL));
}

int cpt_model_config_save(const cpt_model_config *c, const char *path, cpt_err *err) {
    return cpt_model_config_write(c, path, "float32", err);
}

int cpt_model_config_write(const cpt_model_config *c, const char *path, const char *dtype, cpt_err *err) {
    if (cpt_model_config_check(c, path, err)) return -1;
    const char *arch = NULL, *mt = NULL;
    for (size_t i = 0; i < N_ARCHES; i++)
        if (ARCHES[i].id == c->arch) arch = ARCHES[i].arch, mt = ARCHES[i].model_type;
    if (!arch) return cpt_errf(err, "%s: unknown architecture id %d", path, (int)c->arch);
    json_t *o = json_object();
    json_object_set_new(o, "architectures", json_pack("[s]", arch));
    json_object_set_new(o, "model_type", json_string(mt));
    json_object_set_new(o, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(o, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(o, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(o, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(o, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(o, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(c->head_dim));
    json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "rms_norm_eps", jfloat(c->rms_norm_eps));
    json_object_set_new(o, "max_position_embeddings", json_integer(c->max_position_embeddings > 0 ? c->max_position_embeddings : 4096));
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    if (c->arch != CPT_ARCH_QWEN2) json_object_set_new(o, "attention_bias", json_boolean(c->qkv_bias));
    json_object_set_new(o, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    json_t *rp = json_object();
    json_object_set_new(rp, "rope_theta", jfloat(c->rope_theta));
    if (c->rope_llama3) {
        json_object_set_new(rp, "rope_type", json_string("llama3"));
        json_object_set_new(rp, "factor", jfloat(c->rope_factor));
        json_object_set_new(rp, "low_freq_factor", jfloat(c->rope_low_freq_factor));
        json_object_set_new(rp, "high_freq_factor", jfloat(c->rope_high_freq_factor));
        json_object_set_new(rp, "original_max_position_embeddings", json_integer(c->rope_original_max_pos));
    } else {
        json_object_set_new(rp, "rope_type", json_string("default"));
    }
    json_object_set_new(o, "rope_parameters", rp);
    json_object_set_new(o, "dtype", json_string(dtype));
    json_object_set_new(o, "use_cache", json_true());
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(10));
    json_decref(o);
    if (!text) return cpt_errf(err, "%s: out of memory writing config", path);
    size_t len = strlen(text);
    int rc = cpt_write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

uint64_t cpt_model_config_numel(const cpt_model_config *c, int with_value_head) {
    uint64_t C = (uint64_t)c->hidden_size, V = (uint64_t)c->vocab_size, I = (uint64_t)c->intermediate_size;
    uint64_t D = (uint64_t)c->head_dim, HD = (uint64_t)c->num_heads * D, KD = (uint64_t)c->num_kv_heads * D;
    uint64_t layer = C + (HD + 2 * KD) * C + HD * C + C + 3 * I * C; /* norms, q|k|v, o, gate|up|down */
    if (c->qkv_bias) layer += HD + 2 * KD;
    if (c->qk_norm) layer += 2 * D;
    if (c->o_bias) layer += C;
    uint64_t n = V * C + (uint64_t)c->num_layers * layer + C;
    if (!c->tie_word_embeddings) n += V * C;
    if (with_value_head) n += C;
    return n;
}
