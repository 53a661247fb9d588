"""transformers' generate on the decode bench's shapes (bench/decode_bench.c): Qwen2 with Qwen2.5-0.5B / 1.5B
shapes, random bf16 weights, sdpa attention, greedy, min_new_tokens = max_new_tokens so every row generates the
same number of tokens. One RESULT line per (shape, batch, cache).

  python3 bench/decode_torch.py [--shapes 0.5b,1.5b] [--batches 1,64,256] [--prompt 256] [--new 512]
                                [--new-b1 N] [--cache dynamic|static]
"""
import argparse
import time

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

SHAPES = {
    "0.5b": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864),
    "1.5b": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="0.5b,1.5b")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--new-b1", type=int, default=0, help="new tokens at batch 1 (0: --new)")
    ap.add_argument("--cache", default="dynamic")
    a = ap.parse_args()
    torch.manual_seed(0)
    for name in a.shapes.split(","):
        cfg = Qwen2Config(vocab_size=151936, max_position_embeddings=32768, rope_theta=1000000.0,
                          tie_word_embeddings=True, attn_implementation="sdpa", **SHAPES[name])
        torch.set_default_dtype(torch.bfloat16)
        with torch.device("cuda"):
            model = Qwen2ForCausalLM(cfg).eval()
        torch.set_default_dtype(torch.float32)
        model.generation_config.eos_token_id = None
        model.generation_config.pad_token_id = 0
        for b in [int(x) for x in a.batches.split(",")]:
            n_new = a.new_b1 if (b == 1 and a.new_b1) else a.new
            ids = torch.randint(0, cfg.vocab_size, (b, a.prompt), device="cuda")
            mask = torch.ones_like(ids)
            kw = dict(do_sample=False, attention_mask=mask)
            if a.cache == "static":
                kw["cache_implementation"] = "static"
            with torch.no_grad():
                model.generate(ids, max_new_tokens=8, min_new_tokens=8, **kw)  # warm-up
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                out = model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, **kw)
                torch.cuda.synchronize()
                dt = time.perf_counter() - t0
            gen = (out.shape[1] - a.prompt) * b
            print(f"RESULT hf shape={name} batch={b} prompt={a.prompt} new={out.shape[1] - a.prompt} "
                  f"cache={a.cache} seconds={dt:.3f} e2e_tok_s={gen / dt:.1f}", flush=True)
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
