#!/usr/bin/env bash
# Makes examples/models/tiny-arith-sft: a tiny Qwen2-style model (hidden 128, 2 layers, the 709-token tiny
# tokenizer) SFT'd by cpt itself on the synthetic arithmetic task in its chat form ("What is 47 + 38?" ->
# "47 + 38 = 85\n#### 85" through ChatML), stopped early on purpose: it knows the format and gets part of the
# answers right, which leaves GRPO (examples/grpo_arithmetic.toml) something to improve.
#   scripts/make_example_model.sh [BUILD_DIR]     (default: build)
# Deterministic for a given build (fixed seeds; 2 OpenMP threads). Writes BF16 weights (~1 MB).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-${CPT_BUILD:-$SRC/build}}
STEPS=${STEPS:-300}
OUT=$SRC/examples/models/tiny-arith-sft
T=$(mktemp -d /tmp/cpt-make-model-XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=2

"$BUILD/cpt" data gen arithmetic --format sft --split train --n 20000 --seed 1 > "$T/train.jsonl"
"$BUILD/cpt" data gen arithmetic --format sft --split eval --n 200 --seed 2 > "$T/eval.jsonl"
"$BUILD/cpt-train" "$SRC/examples/sft_arithmetic.toml" run.dir="$T/run" data.train="$T/train.jsonl" \
  data.eval="$T/eval.jsonl" data.chat_template=chatml tokenizer.path="$SRC/examples/tiny-tokenizer" \
  train.max_seq_len=96 train.steps="$STEPS" train.eval_every=0 train.eval_generate=200 train.log_every=50 \
  checkpoint.every=0 2> "$T/log" || { cat "$T/log"; exit 1; }
grep -E "sft done|exact match" "$T/log" | tail -2
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
"$BUILD/cpt" export "$T/run" "$OUT" --bf16
du -sh "$OUT"
echo "wrote $OUT"
