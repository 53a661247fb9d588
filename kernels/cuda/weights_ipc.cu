/* IPC buffers and the device sum64 (kernels/cuda/weights_ipc.h). */
#include <string.h>

#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/weights_ipc.h"

static_assert(sizeof(cudaIpcMemHandle_t) == CPT_CUDA_IPC_HANDLE_BYTES, "cudaIpcMemHandle_t is 64 bytes");

static int fail(cpt_err *err, const char *what, cudaError_t e) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s: %s", what, cudaGetErrorString(e));
    cudaGetLastError();
    return -1;
}

int cpt_cuda_ipc_alloc(cpt_cuda_ctx *ctx, size_t bytes, void **dev, unsigned char handle[CPT_CUDA_IPC_HANDLE_BYTES],
                       cpt_err *err) {
    *dev = NULL;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) return fail(err, "cudaSetDevice", e);
    if ((e = cudaMalloc(dev, bytes ? bytes : 1)) != cudaSuccess) {
        *dev = NULL;
        return fail(err, "cudaMalloc of the cuda_ipc weight buffer", e);
    }
    cudaIpcMemHandle_t h;
    if ((e = cudaIpcGetMemHandle(&h, *dev)) != cudaSuccess) {
        cudaFree(*dev);
        *dev = NULL;
        return fail(err, "cudaIpcGetMemHandle", e);
    }
    memcpy(handle, &h, CPT_CUDA_IPC_HANDLE_BYTES);
    return 0;
}

void cpt_cuda_ipc_free(void *dev) {
    if (dev) cudaFree(dev);
}

int cpt_cuda_ipc_open(cpt_cuda_ctx *ctx, const unsigned char handle[CPT_CUDA_IPC_HANDLE_BYTES], void **dev,
                      cpt_err *err) {
    *dev = NULL;
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) return fail(err, "cudaSetDevice", e);
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, CPT_CUDA_IPC_HANDLE_BYTES);
    if ((e = cudaIpcOpenMemHandle(dev, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess) {
        *dev = NULL;
        return fail(err, "cudaIpcOpenMemHandle (the trainer must run on the same host, in another process)", e);
    }
    return 0;
}

void cpt_cuda_ipc_close(void *dev) {
    if (dev) cudaIpcCloseMemHandle(dev);
}

__device__ __forceinline__ unsigned long long mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Word i contributes mix64(w_i + (i + 1) * golden); the sum is order-free, so a grid-stride loop, a warp
 * reduction and one 64-bit atomic per warp give the host's value exactly (integer adds mod 2^64). */
__global__ void sum64_kernel(const unsigned long long *w, size_t n, unsigned long long tail, int has_tail,
                             unsigned long long *out) {
    unsigned long long s = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        s += mix64(w[i] + (unsigned long long)(i + 1) * 0x9E3779B97F4A7C15ull);
    if (has_tail && blockIdx.x == 0 && threadIdx.x == 0) s += mix64(tail + (unsigned long long)(n + 1) * 0x9E3779B97F4A7C15ull);
    for (int o = 16; o; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, s);
}

int cpt_cuda_sum64(cpt_cuda_ctx *ctx, const void *dev, size_t bytes, uint64_t *out, cpt_err *err) {
    cudaError_t e = cudaSetDevice(ctx->device);
    if (e != cudaSuccess) return fail(err, "cudaSetDevice", e);
    size_t n = bytes / 8;
    unsigned long long tail = 0;
    int has_tail = bytes % 8 != 0;
    if (has_tail && (e = cudaMemcpy(&tail, (const char *)dev + 8 * n, bytes % 8, cudaMemcpyDeviceToHost)) != cudaSuccess)
        return fail(err, "sum64: reading the tail", e);
    if ((uintptr_t)dev % 8) {
        if (err) snprintf(err->msg, sizeof err->msg, "sum64: the buffer is not 8-byte aligned");
        return -1;
    }
    unsigned long long *acc = NULL, h = 0;
    if ((e = cudaMalloc(&acc, sizeof *acc)) != cudaSuccess) return fail(err, "sum64: cudaMalloc", e);
    int blocks = ctx->num_sms > 0 ? 4 * ctx->num_sms : 528;
    if ((e = cudaMemsetAsync(acc, 0, sizeof *acc, ctx->stream)) == cudaSuccess) {
        sum64_kernel<<<blocks, 256, 0, ctx->stream>>>((const unsigned long long *)dev, n, tail, has_tail, acc);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(&h, acc, sizeof h, cudaMemcpyDeviceToHost, ctx->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(ctx->stream);
    cudaFree(acc);
    if (e != cudaSuccess) return fail(err, "sum64", e);
    *out = h;
    return 0;
}
