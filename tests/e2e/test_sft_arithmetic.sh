#!/usr/bin/env bash
# Learning check: examples/sft_arithmetic.toml (a tiny random Qwen2-style model and the tiny tokenizer) trained with
# SFT on the synthetic arithmetic task ("What is 47 + 38?" -> "85") on 2 CPU threads must reach a held-out greedy
# exact match of at least MIN_EM on 200 questions never seen in training, within MAX_SECONDS.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
MIN_EM=${MIN_EM:-0.50}
MAX_SECONDS=${MAX_SECONDS:-420}
T=$(mktemp -d /tmp/cpt-sft-arith-XXXXXX)
trap 'rm -rf "$T"' EXIT
export OMP_NUM_THREADS=2

"$BUILD/cpt" data gen arithmetic --format rl --split train --n 30000 --seed 1 > "$T/train.jsonl"
"$BUILD/cpt" data gen arithmetic --format rl --split eval --n 200 --seed 2 > "$T/eval.jsonl"
start=$(date +%s)
"$BUILD/cpt-train" "$SRC/examples/sft_arithmetic.toml" run.dir="$T/run" data.train="$T/train.jsonl" \
  data.eval="$T/eval.jsonl" tokenizer.path="$SRC/examples/tiny-tokenizer" 2> "$T/log" || { cat "$T/log"; exit 1; }
secs=$(( $(date +%s) - start ))
tail -n 8 "$T/log"
em=$(grep -o 'exact match [0-9.]*' "$T/log" | tail -1 | awk '{print $3}')
steps=$(grep -o 'sft done: step [0-9]*' "$T/log" | awk '{print $4}')
echo "test_sft_arithmetic: exact match $em after $steps steps in ${secs}s (need >= $MIN_EM within ${MAX_SECONDS}s)"
[ -n "$em" ] || { echo "FAIL: no exact-match result"; exit 1; }
awk -v e="$em" -v m="$MIN_EM" 'BEGIN { exit !(e >= m) }' || { echo "FAIL: exact match $em < $MIN_EM"; exit 1; }
[ "$secs" -le "$MAX_SECONDS" ] || { echo "FAIL: took ${secs}s > ${MAX_SECONDS}s"; exit 1; }
# the checkpoint exports to a Hugging Face folder
"$BUILD/cpt" export "$T/run" "$T/hf"
for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
  test -s "$T/hf/$f" || { echo "FAIL: export lacks $f"; exit 1; }
done
echo "test_sft_arithmetic: ok"
