#!/usr/bin/env bash
# The SFT data, the RL prompts and the evaluation questions share no question: the committed examples/data files,
# and the example model's SFT data (regenerated exactly as scripts/make_example_model.sh makes it) against the main
# job's RL prompts and evaluation questions (examples/grpo_arithmetic.toml). The checker itself must catch an
# overlap: the task's whole train split (what the SFT data was drawn from before the rl split existed) shares
# questions with the RL prompts. The same for the tool-learning model (examples/models/tiny-tool-sft).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-splits-XXXXXX)
trap 'rm -rf "$T"' EXIT
cd "$SRC"
fail() { echo "FAIL: $*" >&2; exit 1; }
python3 scripts/check_splits.py > "$T/out" || { cat "$T/out"; fail "examples/data: a question in two splits"; }
cat "$T/out"
cfg() { awk -v s="[$1]" -v k="$2" '/^\[/ {sec = $0} sec == s && $1 == k {gsub(/"/, "", $3); print $3}' examples/grpo_arithmetic.toml; }
rl=$(cfg data train) val=$(cfg validation data)
scripts/make_example_model.sh --data-only "$T/sft" "$BUILD"
[ "$(wc -l < "$T/sft/train.jsonl")" -eq 30000 ] || fail "expected 30000 SFT records"
python3 scripts/check_splits.py sft="$T/sft/train.jsonl" eval="$T/sft/eval.jsonl" rl="$rl" eval="$val" > "$T/out" ||
  { cat "$T/out"; fail "the example model's SFT data shares questions with $rl or $val"; }
cat "$T/out"
# the main job's questions are the same task's: the check above compares like with like
grep -q '"What is [0-9]* [-+] [0-9]?"' "$rl" || fail "$rl: not the arithmetic-1digit task"
[ "$(grep -c '"What is [0-9]* [-+] [0-9]?"' "$rl")" -eq "$(wc -l < "$rl")" ] || fail "$rl: not only arithmetic-1digit"
"$BUILD/cpt" data gen arithmetic-1digit --format rl --split train --n 30000 --seed 1 > "$T/train_all.jsonl"
if python3 scripts/check_splits.py sft="$T/train_all.jsonl" rl="$rl" > "$T/out"; then
  cat "$T/out"; fail "the checker missed the overlap of the whole train split with the RL prompts"
fi
grep -q "FAIL, [0-9]* questions in two splits" "$T/out" || { cat "$T/out"; fail "unclear overlap report"; }
# the tool-learning model's transcripts against its run's RL prompts and evaluation questions (examples/grpo_tool.toml)
MODEL=tiny-tool-sft scripts/make_example_model.sh --data-only "$T/tool" "$BUILD"
grep -q '"segments":\[{"text":"<tool_call>' "$T/tool/train.jsonl" || fail "no tool call in the tool-sft transcripts"
python3 scripts/check_splits.py sft="$T/tool/train.jsonl" eval="$T/tool/eval.jsonl" \
  rl=examples/data/multiply2_rl_train.jsonl eval=examples/data/multiply2_rl_eval.jsonl > "$T/out" ||
  { cat "$T/out"; fail "the tool model's SFT data shares questions with its RL prompts or evaluation questions"; }
cat "$T/out"
echo "test_data_splits: ok"
