/* ZeRO-1 over the flat host buffers of a model: the sharded AdamW step and its per-rank checkpoint (see zero.h). */
#include "trainer/zero.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fs.h"
#include "core/safetensors.h"
#include "model/cuda_model.h"
#ifdef CPT_HAVE_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

#define ZERO_FORMAT "cpt-zero1-1"

static int sum_double(cpt_dp *dp, double *x, cpt_err *err);

void cpt_zero_free(cpt_zero *z) {
    if (!z) return;
    if (z->cuda_ctx) {
#ifdef CPT_HAVE_CUDA
        cpt_cuda_free(z->m);
        cpt_cuda_free(z->v);
        cpt_cuda_free(z->g);
        cpt_cuda_free(z->pad);
        cpt_cuda_free(z->dev_norm);
#endif
    } else {
        free(z->m);
        free(z->v);
        free(z->g);
        free(z->pad);
    }
    free(z->host_m);
    free(z->host_v);
    free(z->kind);
    free(z);
}

#ifdef CPT_HAVE_CUDA
static cpt_tensor dev_f32(float *p, size_t n) { return cpt_cuda_tensor(p, CPT_DT_F32, 1, (int64_t)n, 0); }

/* The model's flat device buffers: fp32 weights, fp32 gradients, bf16 weights (one allocation each, host order). */
static int device_bases(cpt_zero *z, float **w, float **g, uint16_t **wb, cpt_err *err) {
    cpt_param *p0 = cpt_model_param(z->model, 0);
    cpt_cuda_param_view v;
    if (cpt_model_cuda_param(z->model, p0, &v)) return cpt_errf(err, "zero: the model is not on the GPU");
    size_t off = (size_t)(p0->data - cpt_model_data(z->model));
    *w = v.data - off;
    *g = v.grad - off;
    *wb = (uint16_t *)v.data_bf16 - off;
    z->cuda_ctx = v.ctx;
    return 0;
}

static int device_alloc(cpt_zero *z, cpt_err *err) {
    float *w, *g;
    uint16_t *wb;
    if (device_bases(z, &w, &g, &wb, err)) return -1;
    size_t b = z->shard * sizeof(float);
    if (!(z->m = cpt_cuda_malloc(b, "ZeRO first moments", err)) ||
        !(z->v = cpt_cuda_malloc(b, "ZeRO second moments", err)) ||
        !(z->g = cpt_cuda_malloc(b, "ZeRO gradient slice", err)) ||
        !(z->dev_norm = cpt_cuda_malloc(sizeof(double), "ZeRO norm", err)))
        return -1;
    if (z->shard * (size_t)z->world != z->numel &&
        !(z->pad = cpt_cuda_malloc(z->shard * (size_t)z->world * sizeof(float), "ZeRO padded staging", err)))
        return -1;
    return cpt_cuda_memset(z->cuda_ctx, z->m, 0, b, err) || cpt_cuda_memset(z->cuda_ctx, z->v, 0, b, err) ? -1 : 0;
}

/* The step of zero.h on the device. One rank without NCCL copies instead of the collectives. */
static int device_step(cpt_zero *z, double lr, double max_norm, double *norm, cpt_err *err) {
    float *w, *g;
    uint16_t *wb;
    if (device_bases(z, &w, &g, &wb, err)) return -1; /* also makes a deferred zero_grad real */
    cpt_cuda_ctx *ctx = z->cuda_ctx;
    int coll = cpt_dp_uses_nccl(z->dp);
    size_t full = z->shard * (size_t)z->world;
    const float *src = g;
    if (z->pad) {
        if (cpt_cuda_memcpy_d2d(ctx, z->pad, g, z->numel * sizeof(float), err) ||
            cpt_cuda_memset(ctx, z->pad + z->numel, 0, (full - z->numel) * sizeof(float), err))
            return -1;
        src = z->pad;
    }
    if (coll ? cpt_dp_reduce_scatter(z->dp, src, z->g, z->shard, 1, err)
             : cpt_cuda_memcpy_d2d(ctx, z->g, src, z->shard * sizeof(float), err))
        return cpt_err_prefix(err, "zero step: ");

    double ss = 0;
    if (z->valid) {
        cpt_cuda_sumsq(ctx, z->dev_norm, dev_f32(z->g, z->valid));
        if (cpt_cuda_memcpy_d2h(ctx, &ss, z->dev_norm, sizeof ss, err)) return -1;
    }
    if (sum_double(z->dp, &ss, err)) return cpt_err_prefix(err, "zero step, gradient norm: ");
    *norm = sqrt(ss);
    if (max_norm > 0 && z->valid) {
        double coef = max_norm / (*norm + 1e-6);
        if (coef < 1) cpt_cuda_scale(ctx, dev_f32(z->g, z->valid), (float)coef);
    }

    z->step++;
    cpt_cuda_adamw_args a = {lr, z->hp.beta1, z->hp.beta2, z->hp.eps, z->hp.weight_decay, z->step, 0};
    const float *base = cpt_model_data(z->model);
    for (size_t i = 0; i < cpt_model_num_params(z->model); i++) {
        const cpt_param *p = cpt_model_param(z->model, i);
        size_t pa = (size_t)(p->data - base), pb = pa + p->numel;
        size_t s = pa > z->lo ? pa : z->lo, e = pb < z->lo + z->valid ? pb : z->lo + z->valid;
        if (s >= e) continue;
        size_t n = e - s, k = s - z->lo;
        a.no_decay = p->no_decay;
        cpt_cuda_adamw(ctx, dev_f32(w + s, n), cpt_cuda_tensor(wb + s, CPT_DT_BF16, 1, (int64_t)n, 0),
                       dev_f32(z->g + k, n), dev_f32(z->m + k, n), dev_f32(z->v + k, n), &a);
    }
    if (!coll) return 0;

    if (!z->pad) {
        if (cpt_dp_all_gather(z->dp, w + z->lo, w, z->shard, err)) return cpt_err_prefix(err, "zero step: ");
    } else {
        if (cpt_cuda_memcpy_d2d(ctx, z->pad + z->lo, w + z->lo, z->valid * sizeof(float), err) ||
            cpt_dp_all_gather(z->dp, z->pad + z->lo, z->pad, z->shard, err) ||
            cpt_cuda_memcpy_d2d(ctx, w, z->pad, z->numel * sizeof(float), err))
            return cpt_err_prefix(err, "zero step: ");
    }
    /* the other ranks' slices of the bf16 copy the forward reads */
    cpt_cuda_cast_bf16(ctx, cpt_cuda_tensor(wb, CPT_DT_BF16, 1, (int64_t)z->numel, 0), dev_f32(w, z->numel));
    return 0;
}

static int host_copies(cpt_zero *z, cpt_err *err) {
    size_t b = z->shard * sizeof(float);
    if (!z->host_m) z->host_m = malloc(b);
    if (!z->host_v) z->host_v = malloc(b);
    return z->host_m && z->host_v ? 0 : cpt_errf(err, "zero: out of memory for the host copy of the moments");
}

/* Device moments <-> the host copies save and load go through. */
static int device_moments(cpt_zero *z, int to_host, cpt_err *err) {
    size_t b = z->shard * sizeof(float);
    if (host_copies(z, err)) return -1;
    if (to_host)
        return cpt_cuda_memcpy_d2h(z->cuda_ctx, z->host_m, z->m, b, err) ||
               cpt_cuda_memcpy_d2h(z->cuda_ctx, z->host_v, z->v, b, err) ? -1 : 0;
    return cpt_cuda_memcpy_h2d(z->cuda_ctx, z->m, z->host_m, b, err) ||
           cpt_cuda_memcpy_h2d(z->cuda_ctx, z->v, z->host_v, b, err) ? -1 : 0;
}
#endif

cpt_zero *cpt_zero_new(cpt_model *m, cpt_dp *dp, const cpt_adamw_hparams *hp, cpt_err *err) {
#ifndef CPT_HAVE_CUDA
    if (cpt_model_on_cuda(m)) {
        cpt_errf(err, "zero: a model on the GPU in a build without CUDA");
        return NULL;
    }
#endif
    if (!(hp->beta1 >= 0 && hp->beta1 < 1) || !(hp->beta2 >= 0 && hp->beta2 < 1) || !(hp->eps > 0) ||
        !(hp->weight_decay >= 0)) {
        cpt_errf(err, "zero: bad AdamW hyperparameters (beta1 %g, beta2 %g, eps %g, weight_decay %g)", hp->beta1,
                 hp->beta2, hp->eps, hp->weight_decay);
        return NULL;
    }
    if (cpt_model_host_master(m)) {
        cpt_errf(err, "zero: train.zero = 1 with train.optimizer_offload = true is not supported (the sharded step "
                      "updates device master weights): use one of them");
        return NULL;
    }
    cpt_zero *z = calloc(1, sizeof *z);
    if (!z) goto oom;
    z->hp = *hp;
    z->dp = dp;
    z->model = m;
    z->rank = cpt_dp_rank(dp);
    z->world = cpt_dp_size(dp);
    z->numel = cpt_model_numel(m);
    if (z->numel == 0) {
        cpt_errf(err, "zero: the model has no parameters");
        cpt_zero_free(z);
        return NULL;
    }
    z->shard = cpt_dp_shard_floats(dp, z->numel);
    z->lo = (size_t)z->rank * z->shard;
    z->valid = z->lo >= z->numel ? 0 : z->numel - z->lo < z->shard ? z->numel - z->lo : z->shard;
    z->kind = calloc(z->shard, 1);
    if (!z->kind) goto oom;
#ifdef CPT_HAVE_CUDA
    if (cpt_model_on_cuda(m)) {
        if (device_alloc(z, err)) {
            cpt_zero_free(z);
            return NULL;
        }
    } else
#endif
    {
        z->m = calloc(z->shard, sizeof *z->m);
        z->v = calloc(z->shard, sizeof *z->v);
        z->g = calloc(z->shard, sizeof *z->g);
        if (!z->m || !z->v || !z->g) goto oom;
        if (z->shard * (size_t)z->world != z->numel && !(z->pad = calloc(z->shard * (size_t)z->world, sizeof(float))))
            goto oom;
    }
    /* Which floats of the slice belong to which kind of parameter (the flat buffer may hold gaps). */
    const float *base = cpt_model_data(m);
    for (size_t i = 0; i < cpt_model_num_params(m); i++) {
        const cpt_param *p = cpt_model_param(m, i);
        size_t a = (size_t)(p->data - base), b = a + p->numel;
        size_t s = a > z->lo ? a : z->lo, e = b < z->lo + z->shard ? b : z->lo + z->shard;
        for (size_t j = s; j < e; j++) z->kind[j - z->lo] = p->no_decay ? 2 : 1;
    }
    return z;
oom:
    cpt_zero_free(z);
    cpt_errf(err, "zero: out of memory for the optimizer shard");
    return NULL;
}

size_t cpt_zero_state_bytes(const cpt_zero *z) { return 2 * z->shard * sizeof(float); }

/* A double summed over the ranks through float collectives: its float part and the rest, each summed. */
static int sum_double(cpt_dp *dp, double *x, cpt_err *err) {
    float hl[2];
    hl[0] = (float)*x;
    hl[1] = (float)(*x - (double)hl[0]);
    if (cpt_dp_sum_floats(dp, hl, 2, err)) return -1;
    *x = (double)hl[0] + (double)hl[1];
    return 0;
}

int cpt_zero_step(cpt_zero *z, double lr, double max_norm, double *norm, cpt_err *err) {
#ifdef CPT_HAVE_CUDA
    if (z->cuda_ctx) return device_step(z, lr, max_norm, norm, err);
#endif
    float *grads = cpt_model_grads(z->model), *w = cpt_model_data(z->model);
    size_t full = z->shard * (size_t)z->world;
    const float *src = grads;
    if (z->pad) { /* the padding is zero, so it adds nothing to the norm and its moments stay zero */
        memcpy(z->pad, grads, z->numel * sizeof(float));
        memset(z->pad + z->numel, 0, (full - z->numel) * sizeof(float));
        src = z->pad;
    }
    if (cpt_dp_reduce_scatter(z->dp, src, z->g, z->shard, 1, err)) return cpt_err_prefix(err, "zero step: ");

    double ss = 0;
    for (size_t j = 0; j < z->valid; j++) ss += (double)z->g[j] * z->g[j];
    if (sum_double(z->dp, &ss, err)) return cpt_err_prefix(err, "zero step, gradient norm: ");
    *norm = sqrt(ss);
    if (max_norm > 0) {
        double coef = max_norm / (*norm + 1e-6);
        if (coef < 1) {
            float c = (float)coef;
            for (size_t j = 0; j < z->valid; j++) z->g[j] *= c;
        }
    }

    z->step++;
    const double b1 = z->hp.beta1, b2 = z->hp.beta2;
    const double bc1 = 1 - pow(b1, (double)z->step), bc2 = 1 - pow(b2, (double)z->step);
    const float step_size = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2), eps = (float)z->hp.eps;
    const float fb1 = (float)b1, fb2 = (float)b2, one_b1 = (float)(1 - b1), one_b2 = (float)(1 - b2);
    const float decay = (float)(1 - lr * z->hp.weight_decay);
    float *ws = w + z->lo;
    /* The same arithmetic, element by element, as cpt_adamw_step: a rank's slice updates as the whole would. */
    for (size_t j = 0; j < z->valid; j++) {
        if (!z->kind[j]) continue;
        float gj = z->g[j];
        if (z->kind[j] == 1) ws[j] *= decay;
        z->m[j] = fb1 * z->m[j] + one_b1 * gj;
        z->v[j] = fb2 * z->v[j] + one_b2 * gj * gj;
        float denom = sqrtf(z->v[j]) / bc2_sqrt + eps;
        ws[j] -= step_size * z->m[j] / denom;
    }

    if (!z->pad) {
        if (cpt_dp_all_gather(z->dp, w + z->lo, w, z->shard, err)) return cpt_err_prefix(err, "zero step: ");
        return 0;
    }
    memcpy(z->pad + z->lo, w + z->lo, z->valid * sizeof(float));
    if (cpt_dp_all_gather(z->dp, z->pad + z->lo, z->pad, z->shard, err)) return cpt_err_prefix(err, "zero step: ");
    memcpy(w, z->pad, z->numel * sizeof(float));
    return 0;
}

void cpt_zero_shard_name(char *buf, size_t cap, int rank, int world) {
    snprintf(buf, cap, "optimizer-rank-%d-of-%d.safetensors", rank, world);
}

int cpt_zero_save(const cpt_zero *z, const char *path, cpt_err *err) {
    const float *hm = z->m, *hv = z->v;
#ifdef CPT_HAVE_CUDA
    if (z->cuda_ctx) {
        if (device_moments((cpt_zero *)z, 1, err)) return cpt_err_prefix(err, "saving the optimizer shard %s: ", path);
        hm = z->host_m, hv = z->host_v;
    }
#endif
    cpt_st_writer *w = cpt_st_writer_new();
    if (!w) return cpt_errf(err, "%s: out of memory", path);
    int64_t shape[1] = {(int64_t)z->shard};
    char v[4][32];
    snprintf(v[0], sizeof v[0], "%" PRId64, z->step);
    snprintf(v[1], sizeof v[1], "%d", z->rank);
    snprintf(v[2], sizeof v[2], "%d", z->world);
    snprintf(v[3], sizeof v[3], "%zu", z->numel);
    if (cpt_st_writer_add(w, "exp_avg", CPT_DT_F32, 1, shape, hm, err) ||
        cpt_st_writer_add(w, "exp_avg_sq", CPT_DT_F32, 1, shape, hv, err) ||
        cpt_st_writer_meta(w, "format", ZERO_FORMAT, err) || cpt_st_writer_meta(w, "step", v[0], err) ||
        cpt_st_writer_meta(w, "rank", v[1], err) || cpt_st_writer_meta(w, "world_size", v[2], err) ||
        cpt_st_writer_meta(w, "numel", v[3], err)) {
        cpt_st_writer_free(w);
        return cpt_err_prefix(err, "saving the optimizer shard %s: ", path);
    }
    if (cpt_st_writer_finish(w, path, err)) return cpt_err_prefix(err, "saving the optimizer shard: ");
    return 0;
}

static long long meta_num(const cpt_st_file *f, const char *key) {
    const char *s = cpt_st_metadata(f, key);
    char *end = NULL;
    long long x = s ? strtoll(s, &end, 10) : -1;
    return s && *s && !*end ? x : -1;
}

/* 1 when name is exactly a shard's file name (cpt_zero_shard_name), with its rank and world; a temporary file of an
 * interrupted write ("...safetensors.tmp.PID") is not one. */
static int shard_name_parse(const char *name, int *rank, int *world) {
    int r, w, end = -1;
    if (sscanf(name, "optimizer-rank-%d-of-%d.safetensors%n", &r, &w, &end) != 2 || end < 0 || name[end] ||
        w <= 0 || r < 0 || r >= w)
        return 0;
    *rank = r, *world = w;
    return 1;
}

int cpt_zero_shards_world(const char *dir) {
    DIR *d = opendir(dir);
    int world = 0, r, w;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));)
        if (shard_name_parse(e->d_name, &r, &w)) {
            if (world && w != world) {
                world = -1;
                break;
            }
            world = w;
        }
    closedir(d);
    return world;
}

/* Rank 0, once every rank has written its shard: the staging folder keeps only this save's shards. A folder that
 * an interrupted save of another attempt left (killed after its ranks staged, before rank 0 committed) may hold
 * shards of another number of ranks, or temporary files; committed beside this save's, a resume could read them. */
static int prune_staging(const cpt_zero *z, const char *dir, cpt_err *err) {
    DIR *d = opendir(dir);
    if (!d) return cpt_errno(err, "opendir %s", dir);
    int rc = 0, r, w;
    char path[4096 + 300];
    for (struct dirent *e; !rc && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (shard_name_parse(e->d_name, &r, &w) && w == z->world) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0) rc = cpt_errno(err, "removing %s, left by an interrupted checkpoint", path);
        else cpt_warn("zero: removed %s, left by an interrupted checkpoint of another attempt", path);
    }
    closedir(d);
    return rc;
}

int cpt_zero_save_all(const cpt_zero *z, const char *dir, cpt_err *err) {
    char name[96], path[4096 + 128];
    cpt_zero_shard_name(name, sizeof name, z->rank, z->world);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    cpt_err mine = {0};
    int ok = cpt_mkdir_p(dir, 0700, &mine) == 0 && cpt_zero_save(z, path, &mine) == 0;
    float failed = ok ? 0.0f : 1.0f;
    /* a collective after every rank's write: past it no rank is writing into dir */
    if (cpt_dp_sum_floats(z->dp, &failed, 1, err)) return -1;
    if (!ok) {
        *err = mine;
        return -1;
    }
    if (failed > 0) return cpt_errf(err, "%s: %g other rank(s) could not write their optimizer shard", dir, failed);
    if (z->rank == 0 && prune_staging(z, dir, err)) return -1;
    return 0;
}

/* The floats [a, b) of the flat moments from the shards of `world` ranks in dir (a re-shard when world is not this
 * run's): each file that holds some of them is opened and checked; dm / dv start at float a. With a == b (a slice of
 * padding only) rank 0's file gives the step. */
static int read_shards(const cpt_zero *z, const char *dir, int world, size_t a, size_t b, float *dm, float *dv,
                       int64_t *step, cpt_err *err) {
    size_t oshard = (z->numel + (size_t)world - 1) / (size_t)world;
    *step = -1;
    /* only the files that hold [a, b): a folder's file names say `world`, which may be anything */
    size_t r0 = a < b ? a / oshard : 0, r1 = a < b ? (b - 1) / oshard : 0;
    for (size_t r = r0; r <= r1 && r < (size_t)world; r++) {
        size_t ra = r * oshard, rb = ra + oshard;
        char name[96], path[4096 + 128];
        cpt_zero_shard_name(name, sizeof name, (int)r, world);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        if (!cpt_path_exists(path))
            return cpt_errf(err, "%s: the optimizer shard %s of %d ranks is missing", dir, name, world);
        cpt_st_file *f = cpt_st_open(path, err);
        if (!f) return cpt_err_prefix(err, "loading the optimizer shard: ");
        const cpt_st_tensor *m = cpt_st_find(f, "exp_avg"), *v = cpt_st_find(f, "exp_avg_sq");
        const char *fmt = cpt_st_metadata(f, "format");
        long long s = meta_num(f, "step");
        int rc = -1;
        if (!fmt || strcmp(fmt, ZERO_FORMAT) || s < 0)
            cpt_errf(err, "%s: not a ZeRO optimizer shard (format %s)", path, fmt ? fmt : "missing");
        else if (meta_num(f, "world_size") != world || meta_num(f, "rank") != (long long)r)
            cpt_errf(err, "%s: says rank %lld of %lld, its name rank %zu of %d", path, meta_num(f, "rank"),
                     meta_num(f, "world_size"), r, world);
        else if (meta_num(f, "numel") != (long long)z->numel)
            cpt_errf(err, "%s: written for a model of %lld floats, this one has %zu", path, meta_num(f, "numel"),
                     z->numel);
        else if (!m || !v || m->dtype != CPT_DT_F32 || v->dtype != CPT_DT_F32 || m->nbytes != oshard * sizeof(float) ||
                 v->nbytes != oshard * sizeof(float))
            cpt_errf(err, "%s: exp_avg / exp_avg_sq missing or not %zu F32 floats", path, oshard);
        else if (*step >= 0 && s != *step)
            cpt_errf(err, "%s: at step %lld, another shard of the folder at %" PRId64, path, s, *step);
        else {
            *step = s;
            size_t s0 = ra > a ? ra : a, s1 = rb < b ? rb : b;
            if (s0 < s1) {
                memcpy(dm + (s0 - a), (const float *)m->data + (s0 - ra), (s1 - s0) * sizeof(float));
                memcpy(dv + (s0 - a), (const float *)v->data + (s0 - ra), (s1 - s0) * sizeof(float));
            }
            rc = 0;
        }
        cpt_st_close(f);
        if (rc) return -1;
    }
    return 0;
}

/* The floats [a, b) of the flat moments from a whole optimizer file (train.zero = 0: one tensor per parameter). */
static int read_whole(const cpt_zero *z, const char *path, size_t a, size_t b, float *dm, float *dv, int64_t *step,
                      cpt_err *err) {
    cpt_st_file *f = cpt_st_open(path, err);
    if (!f) return cpt_err_prefix(err, "loading the optimizer state: ");
    int rc = 0;
    long long s = meta_num(f, "step");
    if (s < 0) rc = cpt_errf(err, "%s: metadata 'step' missing or not a count", path);
    *step = s;
    const float *base = cpt_model_data(z->model);
    for (size_t i = 0; i < cpt_model_num_params(z->model) && !rc; i++) {
        const cpt_param *p = cpt_model_param(z->model, i);
        size_t pa = (size_t)(p->data - base), pb = pa + p->numel;
        size_t s0 = pa > a ? pa : a, s1 = pb < b ? pb : b;
        if (s0 >= s1) continue;
        for (int k = 0; k < 2 && !rc; k++) {
            char name[512];
            snprintf(name, sizeof name, "%s.%s", k ? "exp_avg_sq" : "exp_avg", p->name);
            const cpt_st_tensor *t = cpt_st_find(f, name);
            if (!t || t->dtype != CPT_DT_F32 || t->nbytes != p->numel * sizeof(float))
                rc = cpt_errf(err, "%s: tensor '%s' missing or not %zu F32 floats", path, name, p->numel);
            else
                memcpy((k ? dv : dm) + (s0 - a), (const float *)t->data + (s0 - pa), (s1 - s0) * sizeof(float));
        }
    }
    cpt_st_close(f);
    return rc;
}

int cpt_zero_load(cpt_zero *z, const char *ckpt_dir, int *from_world, cpt_err *err) {
    char whole[4096 + 32];
    snprintf(whole, sizeof whole, "%s/optimizer.safetensors", ckpt_dir);
    int world = cpt_zero_shards_world(ckpt_dir);
    if (world < 0)
        return cpt_errf(err, "%s holds optimizer shards of more than one number of ranks (optimizer-rank-*-of-*): "
                        "not a checkpoint one save wrote; resume from another step", ckpt_dir);
    if (!world && !cpt_path_exists(whole))
        return cpt_errf(err, "%s holds no optimizer state (neither optimizer-rank-*-of-*.safetensors nor "
                        "optimizer.safetensors)", ckpt_dir);
    float *dm = z->m, *dv = z->v;
#ifdef CPT_HAVE_CUDA
    if (z->cuda_ctx) {
        if (host_copies(z, err)) return -1;
        dm = z->host_m, dv = z->host_v;
    }
#endif
    /* into zeroed scratch first: a bad file leaves the optimizer as it was */
    float *m = calloc(z->shard ? z->shard : 1, sizeof *m), *v = calloc(z->shard ? z->shard : 1, sizeof *v);
    int64_t step = -1;
    int rc = !m || !v ? cpt_errf(err, "zero: out of memory loading the optimizer shard")
             : world  ? read_shards(z, ckpt_dir, world, z->lo, z->lo + z->valid, m, v, &step, err)
                      : read_whole(z, whole, z->lo, z->lo + z->valid, m, v, &step, err);
    if (!rc) {
        memcpy(dm, m, z->shard * sizeof(float));
        memcpy(dv, v, z->shard * sizeof(float));
        z->step = step;
#ifdef CPT_HAVE_CUDA
        if (z->cuda_ctx) rc = device_moments(z, 0, err);
#endif
    }
    free(m);
    free(v);
    if (!rc && from_world) *from_world = world;
    return rc;
}

int cpt_zero_resume(cpt_zero *z, const char *ckpt_dir, int64_t train_step, int updates_per_step, const char *what,
                    cpt_err *err) {
    int from = 0;
    if (cpt_zero_load(z, ckpt_dir, &from, err)) return -1;
    if (z->step != train_step * updates_per_step)
        return cpt_errf(err, "%s: optimizer step %" PRId64 " differs from trainer step %" PRId64 " x %d optimizer "
                        "updates per step", ckpt_dir, z->step, train_step, updates_per_step);
    if (from == z->world) return 0;
    char src[64];
    if (from > 0) snprintf(src, sizeof src, "the shards of %d rank%s", from, from == 1 ? "" : "s");
    else snprintf(src, sizeof src, "optimizer.safetensors (train.zero = 0)");
    cpt_info("ZeRO-1 rank %d re-sharded the %s optimizer state of %s (%s) for %d ranks", z->rank, what, ckpt_dir, src,
             z->world);
    return 0;
}
