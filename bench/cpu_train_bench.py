#!/usr/bin/env python3
"""The PyTorch side of bench/cpu_train_bench.c: the same train step (forward + backward of mean next-token cross
entropy, B sequences of T tokens, fp32, CPU) on a transformers Qwen2ForCausalLM of the same shape (QKV bias, GQA,
untied), with torch limited to the given thread count.

usage: cpu_train_bench.py THREADS [--hidden 256 --layers 4 --vocab 1024 --heads 8 --kv-heads 4
                                    --intermediate 768 --batch 4 --seq 256 --steps 10 --warmup 2 --attn sdpa]
prints one line: torch threads=N ... tokens_per_s=...
"""
import argparse
import time

import torch
import transformers


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("threads", type=int)
    for k, v in dict(hidden=256, layers=4, vocab=1024, heads=8, kv_heads=4, intermediate=768, batch=4, seq=256,
                     steps=10, warmup=2).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--attn", default="sdpa")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, tie_word_embeddings=False, use_cache=False,
                                   max_position_embeddings=4096)
    cfg._attn_implementation = a.attn
    model = transformers.Qwen2ForCausalLM(cfg).float().train()
    ids = torch.randint(0, a.vocab, (a.batch, a.seq))
    n = a.batch * a.seq
    t0 = 0.0
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            t0 = time.perf_counter()
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    dt = (time.perf_counter() - t0) / a.steps
    params = sum(p.numel() for p in model.parameters())
    print("torch threads=%d attn=%s params=%d tokens_per_step=%d step_ms=%.1f tokens_per_s=%.0f loss=%.4f torch=%s"
          % (torch.get_num_threads(), a.attn, params, n, dt * 1e3, n / dt, loss.item(), torch.__version__))


if __name__ == "__main__":
    main()
