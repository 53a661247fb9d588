/* AdamW with the fp32 master weights and both moments in pinned host memory: the state streams through two device
 * staging buffers in chunks. Chunk k's upload (copy stream "up") overlaps chunk k-1's update (the context's stream,
 * the same kernel as cpt_cuda_adamw) and chunk k-2's download (copy stream "down"), so a step costs about the PCIe
 * traffic of the state, both directions at once. The bf16 weights are written on the device by the update. */
#include "kernels/cuda/cuda_internal.h"
#include "kernels/cuda/offload_plan.h"

struct cpt_cuda_offload {
    cpt_cuda_ctx *ctx;
    size_t chunk;      /* floats of one array in one staging buffer */
    float *buf[2];     /* device: w | m | v, chunk floats each */
    cudaStream_t up, down;
    cudaEvent_t loaded[2], updated[2], stored[2];
    cpt_offload_piece *pieces;
    size_t cap_pieces;
};

void cpt_cuda_offload_free(cpt_cuda_offload *o) {
    if (!o) return;
    cudaSetDevice(o->ctx->device);
    if (o->up) cudaStreamSynchronize(o->up);
    if (o->down) cudaStreamSynchronize(o->down);
    for (int b = 0; b < 2; b++) {
        if (o->buf[b]) cudaFree(o->buf[b]);
        if (o->loaded[b]) cudaEventDestroy(o->loaded[b]);
        if (o->updated[b]) cudaEventDestroy(o->updated[b]);
        if (o->stored[b]) cudaEventDestroy(o->stored[b]);
    }
    if (o->up) cudaStreamDestroy(o->up);
    if (o->down) cudaStreamDestroy(o->down);
    free(o->pieces);
    free(o);
}

static int offload_init(cpt_cuda_offload *o, cpt_err *err) {
    CUDA_OR_ERR(cudaSetDevice(o->ctx->device), "the offloaded optimizer");
    CUDA_OR_ERR(cudaStreamCreateWithFlags(&o->up, cudaStreamNonBlocking), "the offload upload stream");
    CUDA_OR_ERR(cudaStreamCreateWithFlags(&o->down, cudaStreamNonBlocking), "the offload download stream");
    for (int b = 0; b < 2; b++) {
        CUDA_OR_ERR(cudaMalloc((void **)&o->buf[b], 3 * o->chunk * sizeof(float)), "an offload staging buffer");
        CUDA_OR_ERR(cudaEventCreateWithFlags(&o->loaded[b], cudaEventDisableTiming), "an offload event");
        CUDA_OR_ERR(cudaEventCreateWithFlags(&o->updated[b], cudaEventDisableTiming), "an offload event");
        CUDA_OR_ERR(cudaEventCreateWithFlags(&o->stored[b], cudaEventDisableTiming), "an offload event");
        CUDA_OR_ERR(cudaEventRecord(o->stored[b], o->down), "an offload event"); /* both buffers start free */
    }
    return 0;
}

cpt_cuda_offload *cpt_cuda_offload_new(cpt_cuda_ctx *ctx, size_t chunk_floats, cpt_err *err) {
    cpt_cuda_offload *o = (cpt_cuda_offload *)calloc(1, sizeof *o);
    if (!o) {
        cpt_cuda_err(err, "out of memory");
        return NULL;
    }
    o->ctx = ctx;
    o->chunk = chunk_floats ? chunk_floats : 1;
    if (offload_init(o, err)) {
        cudaGetLastError();
        cpt_cuda_offload_free(o);
        return NULL;
    }
    return o;
}

static size_t seg_len(const void *ud, size_t i) { return ((const cpt_cuda_offload_seg *)ud)[i].n; }

int cpt_cuda_adamw_offload(cpt_cuda_offload *o, const cpt_cuda_offload_seg *segs, size_t n_segs,
                           const cpt_cuda_adamw_args *args, cpt_err *err) {
    if (n_segs + 1 > o->cap_pieces) {
        free(o->pieces);
        o->cap_pieces = 0;
        if (!(o->pieces = (cpt_offload_piece *)malloc(sizeof *o->pieces * (n_segs + 1))))
            return cpt_cuda_err(err, "out of memory for the offload pieces");
        o->cap_pieces = n_segs + 1;
    }
    CUDA_OR_ERR(cudaSetDevice(o->ctx->device), "the offloaded optimizer");
    cpt_cuda_adamw_args a = *args;
    const size_t C = o->chunk;
    const char *up = "the offload upload", *down = "the offload download";
    size_t si = 0, so = 0;
    for (int k = 0; si < n_segs; k++) {
        int b = k & 1;
        size_t np = cpt_offload_plan_next(seg_len, segs, n_segs, C, &si, &so, o->pieces);
        if (np == 0) break;
        float *w = o->buf[b], *m = w + C, *v = m + C;
        /* upload into buffer b once chunk k-2's download from it is done */
        CUDA_OR_ERR(cudaStreamWaitEvent(o->up, o->stored[b], 0), "the offload upload");
        for (size_t i = 0; i < np; i++) {
            const cpt_offload_piece &p = o->pieces[i];
            const cpt_cuda_offload_seg &s = segs[p.seg];
            size_t bytes = p.len * sizeof(float);
            CUDA_OR_ERR(cudaMemcpyAsync(w + p.pos, s.w + p.off, bytes, cudaMemcpyHostToDevice, o->up), up);
            CUDA_OR_ERR(cudaMemcpyAsync(m + p.pos, s.m + p.off, bytes, cudaMemcpyHostToDevice, o->up), up);
            CUDA_OR_ERR(cudaMemcpyAsync(v + p.pos, s.v + p.off, bytes, cudaMemcpyHostToDevice, o->up), up);
        }
        CUDA_OR_ERR(cudaEventRecord(o->loaded[b], o->up), "the offload upload");
        /* update on the context's stream (after the backward that made the gradients) */
        CUDA_OR_ERR(cudaStreamWaitEvent(o->ctx->stream, o->loaded[b], 0), "the offload update");
        for (size_t i = 0; i < np; i++) {
            const cpt_offload_piece &p = o->pieces[i];
            const cpt_cuda_offload_seg &s = segs[p.seg];
            int64_t n = (int64_t)p.len;
            a.no_decay = s.no_decay;
            cpt_tensor wb = s.w_bf16 ? cpt_cuda_tensor((uint16_t *)s.w_bf16 + p.off, CPT_DT_BF16, 1, n, 0)
                                     : cpt_tensor_none();
            cpt_cuda_adamw(o->ctx, cpt_cuda_tensor(w + p.pos, CPT_DT_F32, 1, n, 0), wb,
                           cpt_cuda_tensor((float *)s.grad + p.off, CPT_DT_F32, 1, n, 0),
                           cpt_cuda_tensor(m + p.pos, CPT_DT_F32, 1, n, 0),
                           cpt_cuda_tensor(v + p.pos, CPT_DT_F32, 1, n, 0), &a);
        }
        CUDA_OR_ERR(cudaEventRecord(o->updated[b], o->ctx->stream), "the offload update");
        /* download the updated state */
        CUDA_OR_ERR(cudaStreamWaitEvent(o->down, o->updated[b], 0), "the offload download");
        for (size_t i = 0; i < np; i++) {
            const cpt_offload_piece &p = o->pieces[i];
            const cpt_cuda_offload_seg &s = segs[p.seg];
            size_t bytes = p.len * sizeof(float);
            CUDA_OR_ERR(cudaMemcpyAsync(s.w + p.off, w + p.pos, bytes, cudaMemcpyDeviceToHost, o->down), down);
            CUDA_OR_ERR(cudaMemcpyAsync(s.m + p.off, m + p.pos, bytes, cudaMemcpyDeviceToHost, o->down), down);
            CUDA_OR_ERR(cudaMemcpyAsync(s.v + p.off, v + p.pos, bytes, cudaMemcpyDeviceToHost, o->down), down);
        }
        CUDA_OR_ERR(cudaEventRecord(o->stored[b], o->down), "the offload download");
    }
    /* the host state is the truth between steps (checkpoints, weight publishing read it): wait for it */
    CUDA_OR_ERR(cudaStreamSynchronize(o->down), "the offload download");
    return 0;
}
