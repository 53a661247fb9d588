#include "trainer/optim.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/par.h"
#include "core/safetensors.h"
#include "model/cuda_model.h"
#include "weights/devices.h"

#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

/* ---- the device side: a model placed with cpt_model_use_cuda keeps grads, weights and moments on the GPU ---- */

/* The GPU model the params belong to, or NULL when they live on the host. Mixing is a programming error. */
static cpt_model *device_model(cpt_param *const *params, size_t n) {
    if (n == 0 || !params[0]->model || !cpt_model_on_cuda(params[0]->model)) return NULL;
    for (size_t i = 1; i < n; i++)
        if (params[i]->model != params[0]->model) {
            fprintf(stderr, "cpt optim: param '%s' belongs to another model than '%s' (one GPU model per list)\n",
                    params[i]->name, params[0]->name);
            abort();
        }
    return params[0]->model;
}

#ifdef CPT_HAVE_CUDA
static cpt_cuda_param_view view_of(cpt_model *m, const cpt_param *p) {
    cpt_cuda_param_view v;
    if (cpt_model_cuda_param(m, p, &v)) {
        fprintf(stderr, "cpt optim: param '%s' is not a parameter of the GPU model\n", p->name);
        abort();
    }
    return v;
}

static cpt_tensor dev_f32(float *p, size_t n) { return cpt_cuda_tensor(p, CPT_DT_F32, 1, (int64_t)n, 0); }

static void fail_cuda(const char *what, const cpt_err *e) {
    fprintf(stderr, "cpt optim: %s: %s\n", what, e->msg);
    abort();
}

static double device_norm(cpt_model *m, cpt_param *const *params, size_t n) {
    double *slots = cpt_model_cuda_norm_slots(m);
    if (n > cpt_model_num_params(m)) {
        fprintf(stderr, "cpt optim: %zu params listed, the model has %zu\n", n, cpt_model_num_params(m));
        abort();
    }
    cpt_cuda_ctx *ctx = NULL;
    for (size_t i = 0; i < n; i++) {
        cpt_cuda_param_view v = view_of(m, params[i]);
        ctx = v.ctx;
        cpt_cuda_sumsq(ctx, slots + i, dev_f32(v.grad, params[i]->numel));
    }
    double *h = malloc(sizeof(double) * (n ? n : 1)), total = 0;
    cpt_err e;
    if (!h) {
        fprintf(stderr, "cpt optim: out of memory\n");
        abort();
    }
    if (n && cpt_cuda_memcpy_d2h(ctx, h, slots, sizeof(double) * n, &e)) fail_cuda("gradient norm", &e);
    for (size_t i = 0; i < n; i++) total += h[i];
    free(h);
    return sqrt(total);
}

static void device_scale(cpt_model *m, cpt_param *const *params, size_t n, float c) {
    for (size_t i = 0; i < n; i++) {
        cpt_cuda_param_view v = view_of(m, params[i]);
        cpt_cuda_scale(v.ctx, dev_f32(v.grad, params[i]->numel), c);
    }
}
#else
static double device_norm(cpt_model *m, cpt_param *const *params, size_t n) {
    (void)m, (void)params, (void)n;
    abort(); /* unreachable: no model is on a GPU in a build without CUDA */
}
static void device_scale(cpt_model *m, cpt_param *const *params, size_t n, float c) {
    (void)m, (void)params, (void)n, (void)c;
    abort();
}
#endif

int cpt_lr_kind_parse(const char *name, cpt_lr_kind *kind, cpt_err *err) {
    if (!strcmp(name, "constant")) *kind = CPT_LR_CONSTANT;
    else if (!strcmp(name, "linear")) *kind = CPT_LR_LINEAR;
    else if (!strcmp(name, "cosine")) *kind = CPT_LR_COSINE;
    else return cpt_errf(err, "unknown lr schedule '%s' (expected constant, linear or cosine)", name);
    return 0;
}

double cpt_lr_at(const cpt_lr_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    if (step < s->warmup_steps) return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t span = s->total_steps - s->warmup_steps;
    if (span < 1) span = 1;
    double p = (double)(step - s->warmup_steps) / (double)span;
    if (p > 1) p = 1;
    double r = s->min_lr_ratio;
    switch (s->kind) {
    case CPT_LR_LINEAR: return s->base_lr * (r + (1 - r) * (1 - p));
    case CPT_LR_COSINE: return s->base_lr * (r + (1 - r) * 0.5 * (1 + cos(M_PI * p)));
    case CPT_LR_CONSTANT: break;
    }
    return s->base_lr;
}

double cpt_grad_global_norm(cpt_param *const *params, size_t n) {
    cpt_model *dm = device_model(params, n);
    if (dm) return device_norm(dm, params, n);
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        const float *g = params[i]->grad;
        double s = 0;
        for (size_t j = 0; j < params[i]->numel; j++) s += (double)g[j] * g[j];
        total += s;
    }
    return sqrt(total);
}

double cpt_clip_grad_norm(cpt_param *const *params, size_t n, double max_norm) {
    double norm = cpt_grad_global_norm(params, n);
    if (max_norm <= 0) return norm;
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
        float c = (float)coef;
        cpt_model *dm = device_model(params, n);
        if (dm) {
            device_scale(dm, params, n, c);
            return norm;
        }
        for (size_t i = 0; i < n; i++) {
            float *g = params[i]->grad;
            for (size_t j = 0; j < params[i]->numel; j++) g[j] *= c;
        }
    }
    return norm;
}

void cpt_adamw_free(cpt_adamw *o) {
    if (!o) return;
#ifdef CPT_HAVE_CUDA
    cpt_cuda_free(o->dev_m);
    cpt_cuda_free(o->dev_v);
    cpt_cuda_offload_free(o->offload);
    if (o->pinned_m) { /* m[i] and v[i] are views into the pinned arrays */
        cpt_cuda_host_free(o->pinned_m);
        cpt_cuda_host_free(o->pinned_v);
        o->pinned_m = o->pinned_v = NULL;
        for (size_t i = 0; i < o->n; i++) o->m[i] = o->v[i] = NULL;
    }
#endif
    free(o->segs);
    free(o->dev_off);
    for (size_t i = 0; o->m && o->v && i < o->n; i++) {
        free(o->m[i]);
        free(o->v[i]);
    }
    free(o->m);
    free(o->v);
    free(o->params);
    free(o);
}

/* Host moment arrays (zeroed); on a GPU only made when saving or loading. */
static int ensure_host(cpt_adamw *o) {
    for (size_t i = 0; i < o->n; i++) {
        size_t k = o->params[i]->numel ? o->params[i]->numel : 1;
        if (!o->m[i]) o->m[i] = calloc(k, sizeof(float));
        if (!o->v[i]) o->v[i] = calloc(k, sizeof(float));
        if (!o->m[i] || !o->v[i]) return -1;
    }
    return 0;
}

#ifdef CPT_HAVE_CUDA
/* The offloaded state: pinned host moments (filled from the host arrays when they exist, else zero) and the
 * streamer with its staging buffers on the model's device. */
static int ensure_offload(cpt_adamw *o, cpt_model *dm, size_t total, cpt_err *err) {
    size_t b = (total ? total : 1) * sizeof(float);
    if (!(o->pinned_m = cpt_cuda_host_alloc(b, "the AdamW first moments (offloaded)", err)) ||
        !(o->pinned_v = cpt_cuda_host_alloc(b, "the AdamW second moments (offloaded)", err)))
        return cpt_err_prefix(err, "adamw, train.optimizer_offload");
    memset(o->pinned_m, 0, b);
    memset(o->pinned_v, 0, b);
    for (size_t i = 0; i < o->n; i++) {
        size_t k = o->params[i]->numel * sizeof(float);
        if (o->m[i]) memcpy(o->pinned_m + o->dev_off[i], o->m[i], k);
        if (o->v[i]) memcpy(o->pinned_v + o->dev_off[i], o->v[i], k);
        free(o->m[i]);
        free(o->v[i]);
        o->m[i] = o->pinned_m + o->dev_off[i];
        o->v[i] = o->pinned_v + o->dev_off[i];
    }
    if (!(o->segs = calloc(o->n ? o->n : 1, sizeof(cpt_cuda_offload_seg)))) return cpt_errf(err, "adamw: out of memory");
    if (!o->offload_chunk) o->offload_chunk = CPT_ADAMW_OFFLOAD_CHUNK;
    cpt_cuda_param_view v = view_of(dm, o->params[0]);
    if (!(o->offload = cpt_cuda_offload_new(v.ctx, o->offload_chunk, err)))
        return cpt_err_prefix(err, "adamw, train.optimizer_offload: the staging buffers");
    o->dev_model = dm;
    return 0;
}
#endif

/* Moments on the device when the params' model is there: allocated on first need and filled from the host
 * arrays when they exist (an optimizer made, or loaded, before the model moved), else zero. A model that keeps
 * its master weights on the host gets the offloaded state instead. */
static int ensure_device(cpt_adamw *o, cpt_err *err) {
    cpt_model *dm = device_model(o->params, o->n);
    if (!dm || o->dev_model == dm) return 0;
#ifdef CPT_HAVE_CUDA
    if (o->dev_model) return cpt_errf(err, "adamw: the params moved to another GPU model");
    size_t total = 0;
    if (!(o->dev_off = malloc(sizeof(size_t) * (o->n ? o->n : 1)))) return cpt_errf(err, "adamw: out of memory");
    for (size_t i = 0; i < o->n; i++) o->dev_off[i] = total, total += o->params[i]->numel;
    if (cpt_model_host_master(dm)) return ensure_offload(o, dm, total, err);
    if (!(o->dev_m = cpt_cuda_malloc(total * sizeof(float), "AdamW first moments", err)) ||
        !(o->dev_v = cpt_cuda_malloc(total * sizeof(float), "AdamW second moments", err)))
        return -1;
    cpt_cuda_param_view v = view_of(dm, o->params[0]);
    cpt_cuda_ctx *ctx = v.ctx;
    if (cpt_cuda_memset(ctx, o->dev_m, 0, total * sizeof(float), err) ||
        cpt_cuda_memset(ctx, o->dev_v, 0, total * sizeof(float), err))
        return -1;
    for (size_t i = 0; i < o->n; i++) {
        size_t b = o->params[i]->numel * sizeof(float);
        if ((o->m[i] && cpt_cuda_memcpy_h2d(ctx, o->dev_m + o->dev_off[i], o->m[i], b, err)) ||
            (o->v[i] && cpt_cuda_memcpy_h2d(ctx, o->dev_v + o->dev_off[i], o->v[i], b, err)))
            return cpt_err_prefix(err, "adamw: uploading the moments");
    }
    o->dev_model = dm;
    return 0;
#else
    return cpt_errf(err, "adamw: built without CUDA");
#endif
}

/* Device moments -> host arrays (before a save). */
static int pull_moments(const cpt_adamw *o, cpt_err *err) {
#ifdef CPT_HAVE_CUDA
    if (!o->dev_model || o->pinned_m) return 0; /* offloaded: the host arrays are the state */
    if (ensure_host((cpt_adamw *)o)) return cpt_errf(err, "adamw: out of memory for the host copy of the moments");
    cpt_cuda_param_view v = view_of(o->dev_model, o->params[0]);
    for (size_t i = 0; i < o->n; i++) {
        size_t b = o->params[i]->numel * sizeof(float);
        if (cpt_cuda_memcpy_d2h(v.ctx, o->m[i], o->dev_m + o->dev_off[i], b, err) ||
            cpt_cuda_memcpy_d2h(v.ctx, o->v[i], o->dev_v + o->dev_off[i], b, err))
            return cpt_err_prefix(err, "adamw: copying the moments to the host");
    }
#else
    (void)o, (void)err;
#endif
    return 0;
}

cpt_adamw *cpt_adamw_new(cpt_param *const *params, size_t n, const cpt_adamw_hparams *hp, cpt_err *err) {
    if (!(hp->beta1 >= 0 && hp->beta1 < 1) || !(hp->beta2 >= 0 && hp->beta2 < 1) || !(hp->eps > 0) ||
        !(hp->weight_decay >= 0)) {
        cpt_errf(err, "adamw: bad hyperparameters (beta1 %g, beta2 %g: [0, 1); eps %g: > 0; weight_decay %g: >= 0)",
                 hp->beta1, hp->beta2, hp->eps, hp->weight_decay);
        return NULL;
    }
    cpt_adamw *o = calloc(1, sizeof *o);
    if (!o) goto oom;
    o->hp = *hp;
    o->n = n;
    o->params = calloc(n ? n : 1, sizeof *o->params);
    o->m = calloc(n ? n : 1, sizeof *o->m);
    o->v = calloc(n ? n : 1, sizeof *o->v);
    if (!o->params || !o->m || !o->v) goto oom;
    for (size_t i = 0; i < n; i++) o->params[i] = params[i];
    if (device_model(params, n)) {
        if (ensure_device(o, err)) {
            cpt_adamw_free(o);
            return NULL;
        }
        return o;
    }
    if (ensure_host(o)) goto oom;
    return o;
oom:
    cpt_adamw_free(o);
    cpt_errf(err, "adamw: out of memory for the optimizer state");
    return NULL;
}

int cpt_adamw_offloaded(const cpt_adamw *o) { return o->pinned_m != NULL; }

int cpt_adamw_set_offload_chunk(cpt_adamw *o, size_t floats, cpt_err *err) {
    if (floats == 0) return cpt_errf(err, "adamw: an offload chunk of 0 floats");
    o->offload_chunk = floats;
#ifdef CPT_HAVE_CUDA
    if (o->offload) {
        cpt_cuda_param_view v = view_of(o->dev_model, o->params[0]);
        cpt_cuda_offload_free(o->offload);
        if (!(o->offload = cpt_cuda_offload_new(v.ctx, floats, err)))
            return cpt_err_prefix(err, "adamw, train.optimizer_offload: the staging buffers");
    }
#endif
    return 0;
}

#ifdef CPT_HAVE_CUDA
/* The offloaded update: each param's host master weights and moments stream through the GPU (adamw_offload.cu). */
static void offload_step(cpt_adamw *o, const cpt_cuda_adamw_args *a) {
    cpt_cuda_offload_seg *segs = o->segs;
    for (size_t i = 0; i < o->n; i++) {
        cpt_param *p = o->params[i];
        cpt_cuda_param_view v = view_of(o->dev_model, p);
        segs[i] = (cpt_cuda_offload_seg){.w = p->data, .m = o->m[i], .v = o->v[i], .grad = v.grad,
                                         .w_bf16 = v.data_bf16, .n = p->numel, .no_decay = p->no_decay};
    }
    cpt_err e;
    if (cpt_cuda_adamw_offload(o->offload, segs, o->n, a, &e)) fail_cuda("adamw, train.optimizer_offload", &e);
}

static void device_step(cpt_adamw *o, double lr) {
    cpt_err e;
    if (ensure_device(o, &e)) fail_cuda("adamw", &e);
    cpt_cuda_adamw_args a = {lr, o->hp.beta1, o->hp.beta2, o->hp.eps, o->hp.weight_decay, o->step, 0};
    if (o->pinned_m) {
        offload_step(o, &a);
        return;
    }
    for (size_t i = 0; i < o->n; i++) {
        cpt_param *p = o->params[i];
        cpt_cuda_param_view v = view_of(o->dev_model, p);
        a.no_decay = p->no_decay;
        cpt_cuda_adamw(v.ctx, dev_f32(v.data, p->numel), cpt_cuda_tensor(v.data_bf16, CPT_DT_BF16, 1, (int64_t)p->numel, 0),
                       dev_f32(v.grad, p->numel), dev_f32(o->dev_m + o->dev_off[i], p->numel),
                       dev_f32(o->dev_v + o->dev_off[i], p->numel), &a);
    }
}
#endif

void cpt_adamw_step(cpt_adamw *o, double lr) {
    o->step++;
#ifdef CPT_HAVE_CUDA
    if (device_model(o->params, o->n)) {
        device_step(o, lr);
        return;
    }
#endif
    const double b1 = o->hp.beta1, b2 = o->hp.beta2;
    const double bc1 = 1 - pow(b1, (double)o->step), bc2 = 1 - pow(b2, (double)o->step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2), eps = (float)o->hp.eps;
    const float fb1 = (float)b1, fb2 = (float)b2, one_b1 = (float)(1 - b1), one_b2 = (float)(1 - b2);
    for (size_t i = 0; i < o->n; i++) {
        cpt_param *p = o->params[i];
        float *w = p->data, *m = o->m[i], *v = o->v[i];
        const float *g = p->grad;
        const float decay = p->no_decay ? 1.0f : (float)(1 - lr * o->hp.weight_decay);
        const long long numel = (long long)p->numel;
        /* Elementwise, so the result does not depend on the thread count. */
        CPT_PAR_FOR(cpt_par(numel, 65537),
            for (long long j = 0; j < numel; j++) {
                w[j] *= decay;
                m[j] = fb1 * m[j] + one_b1 * g[j];
                v[j] = fb2 * v[j] + one_b2 * g[j] * g[j];
                float denom = sqrtf(v[j]) / bc2_sqrt + eps;
                w[j] -= step_size * m[j] / denom;
            });
    }
}

int cpt_adamw_save(const cpt_adamw *o, const char *path, cpt_err *err) {
    if (pull_moments(o, err)) return -1;
    cpt_st_writer *w = cpt_st_writer_new();
    if (!w) return cpt_errf(err, "%s: out of memory", path);
    char name[512], step[32];
    for (size_t i = 0; i < o->n; i++) {
        const cpt_param *p = o->params[i];
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        if (cpt_st_writer_add(w, name, CPT_DT_F32, p->ndim, p->shape, o->m[i], err)) goto fail;
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        if (cpt_st_writer_add(w, name, CPT_DT_F32, p->ndim, p->shape, o->v[i], err)) goto fail;
    }
    snprintf(step, sizeof step, "%" PRId64, o->step);
    if (cpt_st_writer_meta(w, "step", step, err)) goto fail;
    if (cpt_st_writer_meta(w, "format", "cpt-adamw-1", err)) goto fail;
    if (cpt_st_writer_finish(w, path, err)) return cpt_err_prefix(err, "saving optimizer state");
    return 0;
fail:
    cpt_st_writer_free(w);
    return cpt_err_prefix(err, "saving optimizer state to %s", path);
}

static int load_moment(const cpt_st_file *f, const char *path, const char *prefix, const cpt_param *p, float *dst,
                       cpt_err *err) {
    char name[512];
    snprintf(name, sizeof name, "%s.%s", prefix, p->name);
    const cpt_st_tensor *t = cpt_st_find(f, name);
    if (!t) return cpt_errf(err, "%s: tensor '%s' missing", path, name);
    if (t->dtype != CPT_DT_F32) return cpt_errf(err, "%s: tensor '%s' is %s, expected F32", path, name, cpt_dtype_name(t->dtype));
    int same = t->ndim == p->ndim;
    for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
    if (!same) return cpt_errf(err, "%s: tensor '%s' has the wrong shape for the model", path, name);
    if (dst) memcpy(dst, t->data, p->numel * sizeof(float));
    return 0;
}

int cpt_adamw_load(cpt_adamw *o, const char *path, cpt_err *err) {
    cpt_st_file *f = cpt_st_open(path, err);
    if (!f) return cpt_err_prefix(err, "loading optimizer state");
    int rc = -1;
    const char *step = cpt_st_metadata(f, "step");
    char *end = NULL;
    long long s = step ? strtoll(step, &end, 10) : -1;
    if (!step || *end || s < 0) {
        cpt_errf(err, "%s: metadata 'step' missing or not a count", path);
        goto out;
    }
    if (cpt_st_count(f) != 2 * o->n) {
        cpt_errf(err, "%s: %zu tensors, expected %zu for this model", path, cpt_st_count(f), 2 * o->n);
        goto out;
    }
    if (o->dev_model && ensure_host(o)) {
        cpt_errf(err, "adamw: out of memory for the host copy of the moments");
        goto out;
    }
    /* Validate every tensor before copying any, so a bad file leaves the optimizer untouched. */
    for (size_t i = 0; i < o->n; i++) {
        if (load_moment(f, path, "exp_avg", o->params[i], NULL, err)) goto out;
        if (load_moment(f, path, "exp_avg_sq", o->params[i], NULL, err)) goto out;
    }
    for (size_t i = 0; i < o->n; i++) {
        if (load_moment(f, path, "exp_avg", o->params[i], o->m[i], err)) goto out;
        if (load_moment(f, path, "exp_avg_sq", o->params[i], o->v[i], err)) goto out;
    }
    o->step = s;
    rc = 0;
#ifdef CPT_HAVE_CUDA
    if (o->dev_model && !o->pinned_m) { /* offloaded: loaded in place into the pinned host state */
        cpt_cuda_param_view v = view_of(o->dev_model, o->params[0]);
        for (size_t i = 0; i < o->n && !rc; i++) {
            size_t b = o->params[i]->numel * sizeof(float);
            if (cpt_cuda_memcpy_h2d(v.ctx, o->dev_m + o->dev_off[i], o->m[i], b, err) ||
                cpt_cuda_memcpy_h2d(v.ctx, o->dev_v + o->dev_off[i], o->v[i], b, err))
                rc = cpt_err_prefix(err, "%s: uploading the moments", path);
        }
    }
#endif
out:
    cpt_st_close(f);
    return rc;
}

cpt_param **cpt_model_param_list(cpt_model *m, size_t *n, cpt_err *err) {
    *n = cpt_model_num_params(m);
    cpt_param **ps = calloc(*n ? *n : 1, sizeof *ps);
    if (!ps) { cpt_errf(err, "out of memory"); return NULL; }
    for (size_t i = 0; i < *n; i++) ps[i] = cpt_model_param(m, i);
    return ps;
}

int cpt_trainer_place_model(const cpt_config *cfg, cpt_model *m, const char *what, cpt_err *err) {
    const char *dev = cpt_device_resolve(cfg, "train.device");
    int offload = cpt_cfg_bool(cfg, "train.optimizer_offload");
    if (!strcmp(dev, "cpu")) {
        if (offload)
            return cpt_errf(err, "%s: train.optimizer_offload = true needs train.device = \"cuda\" (it moves the GPU's "
                                 "optimizer state to host memory; a CPU trainer's state is on the host already)", what);
        return 0;
    }
    if (strcmp(dev, "cuda")) return cpt_errf(err, "train.device is \"%s\" (expected auto, cpu or cuda)", dev);
    if (offload && cpt_cfg_int(cfg, "train.zero"))
        return cpt_errf(err, "%s: train.optimizer_offload = true with train.zero = 1 is not supported: use one of them", what);
    int d = (int)cpt_cfg_int(cfg, "train.cuda_device");
    if (offload && cpt_model_set_host_master(m, 1, err)) return cpt_err_prefix(err, "%s", what);
    if (cpt_model_use_cuda(m, d, err)) return cpt_err_prefix(err, "%s: train.device = \"cuda\"", what);
    cpt_model_set_recompute(m, cpt_cfg_bool(cfg, "train.recompute"));
    cpt_info("%s: on CUDA device %d%s", what, d, offload ? " (fp32 master weights and AdamW moments in host memory)" : "");
    return 0;
}
