#!/bin/sh
# Rollout decode throughput on the CPU (KV cache, continuous batching) at batch 1, 8 and 32 for one small model:
# qwen2 shape, hidden 256, 4 layers, 4 heads (MHA, head_dim 64), MLP 688, vocab 1024, tied embeddings; each
# sequence has a 64-token random prompt and generates 128 tokens (no stop), temperature 1.
# Usage: bench/rollout_cpu_bench.sh [BUILD_DIR] [THREADS]   (prints one line per batch size)
set -eu
BUILD=${1:-build}
THREADS=${2:-}
CFG=hidden=256,layers=4,vocab=1024,heads=4,kv_heads=4,inter=688
for B in 1 8 32; do
    if [ -n "$THREADS" ]; then
        "$BUILD/cpt" generate --bench --bench-config "$CFG" --batch "$B" --prompt-len 64 --max-new-tokens 128 --threads "$THREADS"
    else
        "$BUILD/cpt" generate --bench --bench-config "$CFG" --batch "$B" --prompt-len 64 --max-new-tokens 128
    fi
done
