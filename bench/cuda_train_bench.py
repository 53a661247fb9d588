#!/usr/bin/env python3
"""The PyTorch side of bench/cuda_train_bench.c: one full training step (forward, mean next-token cross entropy,
backward, AdamW) of transformers' Qwen2ForCausalLM on the GPU, random init, random tokens, B sequences of T tokens.

Shapes (Qwen2.5, tied embeddings, QKV bias, real vocab 151936):
  0.5b: hidden 896, 24 layers, 14 heads, 2 kv heads, intermediate 4864; default batch 8 x 2048
  1.5b: hidden 1536, 28 layers, 12 heads, 2 kv heads, intermediate 8960; default batch 4 x 2048
Precision modes:
  amp:  fp32 master weights, AdamW state and grads; forward/backward under torch.autocast(bfloat16). The same
        numerics as cpt (bf16 matmuls, fp32 master and optimizer state).
  bf16: pure bf16 weights, grads and AdamW state (what people run for speed; less memory, lossy updates).
Attention: attn_implementation="sdpa" (causal, no mask: PyTorch picks its flash kernel). Optimizer:
torch.optim.AdamW(fused=True). Loss: the model's own (labels=input_ids: shifted CE over fp32 logits).

Timing: CUDA events around each whole step (zero_grad through optimizer.step), median of --steps after --warmup.
MFU = (6 * N * tokens + 6 * layers * heads * head_dim * T^2 * B) / step_time / 989e12, N = parameters with the tied
embedding counted once (it is the lm_head matmul); the second term is causal attention (QK^T and PV, forward and
backward, half the T x T square). Peak memory: torch.cuda.max_memory_allocated (and reserved) over the whole run.

usage: cuda_train_bench.py [--shapes 0.5b,1.5b] [--modes amp,bf16] [--seq 2048] [--batch 0.5b=8,1.5b=4]
                           [--steps 10] [--warmup 3]
prints one line per (shape, mode): torch shape=... mode=... tokens_per_s=... mfu=... peak_alloc_gib=...
"""
import argparse
import statistics

import torch
import transformers

SHAPES = {
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960),
}
VOCAB = 151936
PEAK_FLOPS = 989e12  # H100/H200 SXM dense bf16, datasheet


def step_flops(shape, n_params, B, T):
    s = SHAPES[shape]
    head_dim = s["hidden_size"] // s["num_attention_heads"]
    return 6.0 * n_params * B * T + 6.0 * s["num_hidden_layers"] * s["num_attention_heads"] * head_dim * T * T * B


def run(shape, mode, B, T, steps, warmup):
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, tie_word_embeddings=True, use_cache=False,
                                   max_position_embeddings=32768, **SHAPES[shape])
    cfg._attn_implementation = "sdpa"
    torch.cuda.reset_peak_memory_stats()
    with torch.device("cuda"):
        model = transformers.Qwen2ForCausalLM(cfg)
    if mode == "bf16":
        model = model.to(torch.bfloat16)
    model.train()
    n_params = sum(p.numel() for p in model.parameters())  # tied: counted once
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    ids = torch.randint(0, VOCAB, (B, T), device="cuda")
    times = []
    loss = None
    for s in range(warmup + steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        opt.zero_grad(set_to_none=True)
        if mode == "amp":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
        else:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        end.record()
        torch.cuda.synchronize()
        if s >= warmup:
            times.append(start.elapsed_time(end) / 1e3)
    dt = statistics.median(times)
    tokens = B * T
    mfu = step_flops(shape, n_params, B, T) / dt / PEAK_FLOPS
    print("torch shape=%s mode=%s attn=%s params=%d batch=%dx%d step_ms=%.1f (min %.1f max %.1f) tokens_per_s=%.0f "
          "mfu=%.3f peak_alloc_gib=%.2f peak_reserved_gib=%.2f loss=%.4f torch=%s transformers=%s"
          % (shape, mode, model.config._attn_implementation, n_params, B, T, dt * 1e3, min(times) * 1e3,
             max(times) * 1e3, tokens / dt, mfu, torch.cuda.max_memory_allocated() / 2**30,
             torch.cuda.max_memory_reserved() / 2**30, loss.item(), torch.__version__, transformers.__version__),
          flush=True)
    del model, opt, ids, loss
    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0.5b,1.5b")
    ap.add_argument("--modes", default="amp,bf16")
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--batch", default="0.5b=8,1.5b=4")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    a = ap.parse_args()
    batch = dict(kv.split("=") for kv in a.batch.split(","))
    print("device: %s, torch %s, transformers %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                     transformers.__version__), flush=True)
    for shape in a.shapes.split(","):
        for mode in a.modes.split(","):
            try:
                run(shape, mode, int(batch[shape]), a.seq, a.steps, a.warmup)
            except torch.cuda.OutOfMemoryError as e:
                print("torch shape=%s mode=%s out of memory: %s" % (shape, mode, str(e).splitlines()[0]), flush=True)
                torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
