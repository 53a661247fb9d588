/* The CUDA context (stream, cuBLASLt, scratch), device memory helpers and host-side bf16 conversion. */
#include <dlfcn.h>
#include <string.h>

#include "kernels/cuda/cuda_internal.h"

static const char *dtname(cpt_dtype dt) {
    switch (dt) {
    case CPT_DT_F32: return "F32";
    case CPT_DT_BF16: return "BF16";
    case CPT_DT_F16: return "F16";
    case CPT_DT_I32: return "I32";
    case CPT_DT_I64: return "I64";
    case CPT_DT_U8: return "U8";
    case CPT_DT_F64: return "F64";
    }
    return "?";
}

void cpt_cuda_check(const char *op, const char *what, cpt_tensor t, cpt_dtype dt, int ndim) {
    CKCHECK(t.data != NULL, op, "%s is absent", what);
    CKCHECK(t.device == CPT_DEVICE_CUDA, op, "%s is on device %d, but this op runs on the CUDA backend", what,
            (int)t.device);
    CKCHECK(t.dtype == dt, op, "%s has dtype %s, want %s", what, dtname(t.dtype), dtname(dt));
    CKCHECK(t.ndim == ndim, op, "%s has %d dims, want %d", what, t.ndim, ndim);
}

cpt_tensor cpt_cuda_tensor(void *p, cpt_dtype dt, int ndim, int64_t d0, int64_t d1) {
    cpt_tensor t;
    memset(&t, 0, sizeof t);
    t.data = p;
    t.dtype = dt;
    t.device = CPT_DEVICE_CUDA;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = ndim > 1 ? d1 : 0;
    return t;
}

static int load_cublaslt(cpt_cublaslt_api *api, cpt_err *err) {
    const char *env = getenv("CPT_CUBLASLT_LIB");
    const char *names[] = {env, "libcublasLt.so.13", "/usr/local/cuda/lib64/libcublasLt.so.13"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !api->lib; i++)
        if (names[i] && *names[i]) api->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!api->lib)
        return cpt_cuda_err(err, "cannot load cuBLASLt (libcublasLt.so.13; set CPT_CUBLASLT_LIB to its path): %s",
                            dlerror());
#define SYM(field, name)                                                                      \
    do {                                                                                      \
        *(void **)&api->field = dlsym(api->lib, name);                                        \
        if (!api->field) return cpt_cuda_err(err, "cuBLASLt has no symbol %s", name);         \
    } while (0)
    SYM(create, "cublasLtCreate");
    SYM(destroy, "cublasLtDestroy");
    SYM(matmul, "cublasLtMatmul");
    SYM(desc_create, "cublasLtMatmulDescCreate");
    SYM(desc_destroy, "cublasLtMatmulDescDestroy");
    SYM(desc_set, "cublasLtMatmulDescSetAttribute");
    SYM(layout_create, "cublasLtMatrixLayoutCreate");
    SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
    SYM(pref_create, "cublasLtMatmulPreferenceCreate");
    SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
#undef SYM
    return 0;
}

cpt_cuda_ctx *cpt_cuda_ctx_new(int device, cpt_err *err) {
    cpt_cuda_ctx *ctx = (cpt_cuda_ctx *)calloc(1, sizeof *ctx);
    if (!ctx) {
        cpt_cuda_err(err, "out of memory for the CUDA context");
        return NULL;
    }
    ctx->device = device;
    cudaError_t e;
    int dev_count = 0;
    if ((e = cudaGetDeviceCount(&dev_count)) != cudaSuccess || device < 0 || device >= dev_count) {
        cpt_cuda_err(err, "cudaGetDeviceCount: %s; device %d requested, %d present", cudaGetErrorString(e), device,
                     dev_count);
        goto fail;
    }
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        cpt_cuda_err(err, "cudaSetDevice(%d) failed: %s", device, cudaGetErrorString(e));
        goto fail;
    }
    if ((e = cudaDeviceGetAttribute(&ctx->num_sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess) {
        cpt_cuda_err(err, "cudaDeviceGetAttribute(MultiProcessorCount) failed: %s", cudaGetErrorString(e));
        goto fail;
    }
    if ((e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        cpt_cuda_err(err, "cudaStreamCreate failed: %s", cudaGetErrorString(e));
        goto fail;
    }
    if (load_cublaslt(&ctx->lt, err)) goto fail;
    {
        cublasStatus_t st = ctx->lt.create(&ctx->lt_handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            cpt_cuda_err(err, "cublasLtCreate failed: status %d", (int)st);
            goto fail;
        }
    }
    ctx->lt_workspace_bytes = (size_t)32 << 20; /* Hopper kernels want 32 MiB */
    if (!(ctx->lt_workspace = cpt_cuda_malloc(ctx->lt_workspace_bytes, "cuBLASLt workspace", err))) goto fail;
    return ctx;
fail:
    cpt_cuda_ctx_free(ctx);
    return NULL;
}

void cpt_cuda_ctx_free(cpt_cuda_ctx *ctx) {
    if (!ctx) return;
    if (ctx->stream) cudaStreamSynchronize(ctx->stream);
    if (ctx->lt_handle) ctx->lt.destroy(ctx->lt_handle);
    cpt_cuda_free(ctx->lt_workspace);
    cpt_cuda_free(ctx->scratch);
    if (ctx->stream) cudaStreamDestroy(ctx->stream);
    if (ctx->lt.lib) dlclose(ctx->lt.lib);
    free(ctx);
}

int cpt_cuda_sync(cpt_cuda_ctx *ctx, cpt_err *err) {
    CUDA_OR_ERR(cudaStreamSynchronize(ctx->stream), "the op stream");
    CUDA_OR_ERR(cudaGetLastError(), "the last launch");
    return 0;
}

void *cpt_cuda_scratch(cpt_cuda_ctx *ctx, size_t bytes) {
    if (bytes <= ctx->scratch_bytes) return ctx->scratch;
    CUDA_OK(cudaStreamSynchronize(ctx->stream)); /* the old scratch may still be in use */
    CUDA_OK(cudaFree(ctx->scratch));
    ctx->scratch = NULL;
    ctx->scratch_bytes = 0;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
    CUDA_OK(cudaMalloc(&ctx->scratch, want));
    ctx->scratch_bytes = want;
    return ctx->scratch;
}

void *cpt_cuda_malloc(size_t bytes, const char *what, cpt_err *err) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cpt_cuda_err(err, "cudaMalloc of %zu bytes for %s failed: %s", bytes, what, cudaGetErrorString(e));
        cudaGetLastError(); /* an allocation failure is not sticky: clear it so no later check blames another call */
        return NULL;
    }
    return p;
}

void cpt_cuda_free(void *p) {
    if (p) cudaFree(p);
}

int cpt_cuda_memcpy_h2d(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx->stream), "a host-to-device copy");
    CUDA_OR_ERR(cudaStreamSynchronize(ctx->stream), "a host-to-device copy");
    return 0;
}

int cpt_cuda_memcpy_d2h(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream), "a device-to-host copy");
    CUDA_OR_ERR(cudaStreamSynchronize(ctx->stream), "a device-to-host copy");
    return 0;
}

int cpt_cuda_memcpy_d2d(cpt_cuda_ctx *ctx, void *dst, const void *src, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx->stream), "a device-to-device copy");
    return 0;
}

int cpt_cuda_memset(cpt_cuda_ctx *ctx, void *dst, int byte, size_t bytes, cpt_err *err) {
    CUDA_OR_ERR(cudaMemsetAsync(dst, byte, bytes, ctx->stream), "a device fill");
    return 0;
}

/* Local copies of core/safetensors.c's conversions (the backend links before the core library). */
static uint16_t f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                            /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

int cpt_cuda_upload_bf16(cpt_cuda_ctx *ctx, void *dst, const float *src, size_t n, cpt_err *err) {
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return cpt_cuda_err(err, "out of memory converting %zu values to bf16", n);
    for (size_t i = 0; i < n; i++) h[i] = f32_to_bf16(src[i]);
    int rc = cpt_cuda_memcpy_h2d(ctx, dst, h, n * 2, err);
    free(h);
    return rc;
}

int cpt_cuda_download_bf16(cpt_cuda_ctx *ctx, float *dst, const void *src, size_t n, cpt_err *err) {
    uint16_t *h = (uint16_t *)malloc(n * 2 + 2);
    if (!h) return cpt_cuda_err(err, "out of memory converting %zu bf16 values", n);
    int rc = cpt_cuda_memcpy_d2h(ctx, h, src, n * 2, err);
    if (rc == 0)
        for (size_t i = 0; i < n; i++) dst[i] = bf16_to_f32(h[i]);
    free(h);
    return rc;
}

int cpt_cuda_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear the sticky "no device" error */
        return 0;
    }
    return n;
}
