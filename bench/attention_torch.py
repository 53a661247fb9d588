"""PyTorch's flash SDPA at the shapes tests/gpu/test_cuda_attention.c times (CPT_CUDA_BENCH=1): bf16, causal,
batch 8 x 2048, (H14, KV2, D64) and (H12, KV2, D128). Forward and forward+backward, CUDA events, median of 20
after warm-up. GQA through enable_gqa when the flash backend takes it, else kv heads repeated (said in the output).
Run on the GPU machine: python3 bench/attention_torch.py"""
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, reps=20, warm=5):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    return statistics.median(ts)


def bench(B, T, H, KV, D):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, KV, T, D, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn(B, H, T, D, device="cuda", dtype=torch.bfloat16, generator=g)
    mode = "enable_gqa"

    def fwd_gqa():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd_rep():
        r = H // KV
        return F.scaled_dot_product_attention(q, k.repeat_interleave(r, 1), v.repeat_interleave(r, 1), is_causal=True)

    fwd = fwd_gqa
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        try:
            fwd_gqa()
        except RuntimeError:
            fwd, mode = fwd_rep, "repeated kv"
        t_f = timed(lambda: fwd())

        def fb():
            o = fwd()
            o.backward(do)

        t_fb = timed(fb)
    flops = 4.0 * B * (T * (T + 1) / 2) * D * H
    print(f"torch sdpa flash {B}x{T} H{H} KV{KV} D{D} ({mode}): fwd {t_f:.3f} ms {flops / t_f / 1e9:.1f} TFLOP/s | "
          f"fwd+bwd {t_fb:.3f} ms, bwd ~{t_fb - t_f:.3f} ms {2.5 * flops / (t_fb - t_f) / 1e9:.1f} TFLOP/s "
          f"(torch {torch.__version__}, {torch.cuda.get_device_name()})")


if __name__ == "__main__":
    for shape in [(14, 2, 64), (12, 2, 128)]:
        bench(8, 2048, *shape)
