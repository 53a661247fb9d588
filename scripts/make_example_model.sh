#!/usr/bin/env bash
# Makes examples/models/tiny-arith1-sft, the model the main job (examples/grpo_arithmetic.toml, ./run.sh) starts
# from: a tiny Qwen2-style model (hidden 128, 2 layers, the 709-token tiny tokenizer) SFT'd by cpt itself
# (examples/sft_arithmetic.toml: raw prompt -> answer, no chat template) on the arithmetic-1digit task with answers
# in the math reward's format ("What is 647 + 8?" -> "#### 655"), 400 steps at lr 1e-3: it knows the format and
# gets a few of the held-out questions right (greedy exact match ~0.08-0.10), which leaves GRPO room.
# The SFT data is the task's sft split; GRPO's prompts (examples/data/arithmetic1_rl_train.jsonl) are its rl split
# and the evaluation questions its eval split: no question is in two of them (scripts/check_splits.py,
# tests/e2e/test_data_splits.sh).
#   scripts/make_example_model.sh [BUILD_DIR]                  (default: $CPT_BUILD or build)
#   scripts/make_example_model.sh --data-only DIR [BUILD_DIR]  writes only the SFT data, DIR/train.jsonl and eval.jsonl
# MODEL=tiny-tool-sft makes examples/models/tiny-tool-sft, the tool-learning run's start (examples/grpo_tool.toml,
# bench/tool_learning.sh): the same shape SFT'd on the multiply-2digit task's sft split as tool-sft transcripts
# ("What is 47 * 86?" -> "<tool_call>47*86</tool_call>", the observation not trained, "#### 4042"; or "#### 4042"
# directly, half and half), so it sometimes calls the calculator and sometimes guesses.
# MODEL=tiny-arith-sft remakes the older model of the full arithmetic task (the PPO and OPD examples' teacher/start:
# 400 + 800 + 2000 steps at lr 5e-3, held-out exact match ~0.14; its SFT data is that task's whole train split).
# Fixed seeds, 2 OpenMP threads. Writes BF16 weights (~1 MB) and the tokenizer files.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
DATA_ONLY=
if [ "${1:-}" = --data-only ]; then DATA_ONLY=${2:?--data-only DIR}; shift 2; fi
BUILD=${1:-${CPT_BUILD:-$SRC/build}}
MODEL=${MODEL:-tiny-arith1-sft}
case $MODEL in
  tiny-arith1-sft) TASK=arithmetic-1digit SPLIT=sft STAGES=${STAGES:-400} LR=1e-3 WARMUP=20 ;;
  # the transcripts run to 71 tokens (the tiny tokenizer spells the markup out)
  tiny-tool-sft) TASK=multiply-2digit SPLIT=sft FORMAT=tool-sft STAGES=${STAGES:-600} LR=3e-3 WARMUP=30 SEQ=80 \
    TOKENS=2048 ;;
  # The run is extended in stages (each resumes the last and stretches the cosine schedule): this is how that
  # model was made, and it ends better than one 2000-step schedule (held-out exact match ~0.14 vs ~0.09).
  tiny-arith-sft) TASK=arithmetic SPLIT=train STAGES=${STAGES:-"400 800 2000"} LR=5e-3 WARMUP=40 ;;
  *) echo "make_example_model.sh: MODEL is tiny-arith1-sft, tiny-tool-sft or tiny-arith-sft, got '$MODEL'" >&2
    exit 2 ;;
esac
OUT=$SRC/examples/models/$MODEL
export OMP_NUM_THREADS=2

FORMAT=${FORMAT:-rl} SEQ=${SEQ:-32} TOKENS=${TOKENS:-1024}

# rl records train as prompt -> answer: the answer gets the math reward's marker; tool-sft segments carry it
with_marker() { if [ "$FORMAT" = rl ]; then sed 's/"answer":"\([^"]*\)"/"answer":"#### \1"/'; else cat; fi; }
sft_data() { # DIR: the SFT data and its held-out questions
  "$BUILD/cpt" data gen $TASK --format $FORMAT --split $SPLIT --n 30000 --seed 1 | with_marker > "$1/train.jsonl"
  "$BUILD/cpt" data gen $TASK --format $FORMAT --split eval --n 200 --seed 2 | with_marker > "$1/eval.jsonl"
}
if [ -n "$DATA_ONLY" ]; then
  mkdir -p "$DATA_ONLY"
  sft_data "$DATA_ONLY"
  exit 0
fi
T=$(mktemp -d /tmp/cpt-make-model-XXXXXX)
trap 'rm -rf "$T"' EXIT
sft_data "$T"
for STEPS in $STAGES; do
  "$BUILD/cpt-train" "$SRC/examples/sft_arithmetic.toml" run.dir="$T/run" data.train="$T/train.jsonl" \
    data.eval="$T/eval.jsonl" tokenizer.path="$SRC/examples/tiny-tokenizer" train.steps="$STEPS" \
    optim.lr=$LR optim.warmup_steps=$WARMUP train.max_seq_len=$SEQ train.tokens_per_micro_batch=$TOKENS \
    train.eval_every=0 train.eval_max_new_tokens=12 checkpoint.every=0 2> "$T/log" || { cat "$T/log"; exit 1; }
  grep -E "sft done" "$T/log" | tail -1
done
rm -rf "$OUT"
mkdir -p "$(dirname "$OUT")"
"$BUILD/cpt" export "$T/run" "$OUT" --bf16
du -sh "$OUT"
echo "wrote $OUT"
