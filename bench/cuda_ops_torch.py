"""PyTorch timings of the ops tests/gpu/test_cuda_ops.c times with CPT_CUDA_BENCH=1, same shapes, bf16.

Median of CUDA-event timings after a warm-up. token stats: PyTorch's log_softmax in fp32 (what a plain training
loop does), then logsumexp and entropy from it."""
import torch


def bench(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def main():
    torch.manual_seed(0)
    dev = "cuda"
    N, C, OC, V, nl = 8192, 1536, 8960, 151936, 512
    x = torch.randn(N, C, device=dev, dtype=torch.bfloat16)
    w = torch.randn(OC, C, device=dev, dtype=torch.bfloat16) * 0.05
    ms = bench(lambda: torch.nn.functional.linear(x, w))
    print(f"torch matmul_fwd {N}x{OC}x{C}: {ms:.3f} ms, {2 * N * OC * C / ms / 1e9:.0f} TFLOP/s")
    g = torch.randn(C, device=dev, dtype=torch.bfloat16)
    ms = bench(lambda: torch.nn.functional.rms_norm(x, (C,), g, 1e-6))
    print(f"torch rmsnorm_fwd [{N}, {C}]: {ms:.3f} ms, {2 * N * C * 2 / ms / 1e6:.0f} GB/s")
    z = torch.randn(nl, V, device=dev, dtype=torch.bfloat16) * 3

    def stats():
        lp = torch.log_softmax(z.float(), dim=-1)
        lse = torch.logsumexp(z.float(), dim=-1)
        ent = -(lp.exp() * lp).sum(-1)
        return lse, ent

    ms = bench(stats)
    print(f"torch token_stats_fwd [{nl}, {V}] (fp32 log_softmax): {ms:.3f} ms, {2 * nl * V / ms / 1e6:.0f} GB/s")


if __name__ == "__main__":
    main()
