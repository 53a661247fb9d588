#!/usr/bin/env bash
# metrics.tensorboard = true: every trainer writes RUN_DIR/tensorboard/events.out.tfevents.* beside metrics.jsonl
# (core/tfevents.h). tests/e2e/tfevents_read.py reads the files back with its own TFRecord and protobuf decoder
# (both CRCs checked) and compares every scalar, step and time with metrics.jsonl, for SFT, DPO and GRPO (`cpt run`,
# whose trainer stops after 2 steps and is resumed: the second attempt's own file carries on; with train.mini_batches
# = 2, so train/optimizer_steps must read 2 per step across the restart). Off by default: no
# tensorboard folder. TB_OUT=DIR keeps the three runs' files for tests/gpu/tensorboard_check.py.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-tfevents-XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
small=(model.hidden_size=32 model.intermediate_size=64 model.num_layers=1 model.num_heads=2 model.num_kv_heads=1
       train.threads=1)

# SFT: 5 steps with a held-out eval at step 3 (a line of its own keys at a step that also has training figures) and
# checkpoints at 2, 4 and 5
sft_data=(data.train=examples/data/arithmetic_rl_train.jsonl data.eval=examples/data/arithmetic_rl_eval.jsonl)
"$BUILD/cpt-train" examples/sft_arithmetic.toml run.dir="$T/sft" train.steps=5 train.log_every=1 train.eval_every=3 \
  checkpoint.every=2 checkpoint.keep_last=5 "${sft_data[@]}" train.eval_max_examples=8 train.eval_generate=0 metrics.tensorboard=true "${small[@]}" 2> "$T/sft.log" ||
  { cat "$T/sft.log"; fail "sft run"; }
python3 tests/e2e/tfevents_read.py "$T/sft" || fail "sft events"
# a lost attempt: back to the step-2 checkpoint, and the next attempt trains step 3 only; its file's START at step 3
# drops the first file's steps 3..5 (as metrics.jsonl loses their lines), so none may be left over
rm -rf "$T/sft/checkpoints/step-4" "$T/sft/checkpoints/step-5"
echo step-2 > "$T/sft/checkpoints/latest"
rc=0
"$BUILD/cpt-train" examples/sft_arithmetic.toml run.dir="$T/sft" train.steps=5 train.log_every=1 train.eval_every=3 \
  "${sft_data[@]}" train.eval_max_examples=8 train.eval_generate=0 metrics.tensorboard=true "${small[@]}" \
  train.max_steps_this_run=1 2> "$T/sft2.log" || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || { cat "$T/sft2.log"; fail "the resumed sft attempt exited $rc"; }
grep -q "resumed from .*step-2" "$T/sft2.log" || fail "the sft attempt did not resume from step 2"
python3 tests/e2e/tfevents_read.py "$T/sft" | tee "$T/sft.check" || fail "sft events after a lost attempt"
grep -q '2 file(s).*steps 1\.\.3' "$T/sft.check" || fail "expected 2 event files covering steps 1..3"

# DPO: 3 steps
"$BUILD/cpt-train" examples/dpo_arithmetic.toml run.dir="$T/dpo" train.steps=3 train.eval_every=2 metrics.tensorboard=true \
  "${small[@]}" 2> "$T/dpo.log" || { cat "$T/dpo.log"; fail "dpo run"; }
python3 tests/e2e/tfevents_read.py "$T/dpo" || fail "dpo events"

# GRPO: a trainer that stops after 2 steps (exit 3) is restarted by `cpt run` and resumes from the step-2
# checkpoint: one event file per attempt, together steps 1..4; a --resume of the finished run trains nothing and
# adds no file
make_tiny_model "$T"
"$BUILD/cpt" run "${GRPO_ARGS[@]}" train.steps=4 checkpoint.every=2 train.threads=1 metrics.tensorboard=true \
  train.mini_batches=2 run.dir="$T/grpo" train.max_steps_this_run=2 2> "$T/grpo1.log" ||
  { cat "$T/grpo1.log"; fail "grpo run"; }
grep -q "resumed from .*step-2" "$T/grpo/logs/trainer.log" || fail "the grpo trainer did not resume from step 2"
# train.mini_batches = 2: two optimizer updates a step, across the restart (the checkpoint's optimizer holds 4)
opt=$(grep -o '"step":[0-9]*,.*"train/optimizer_steps":[0-9]*' "$T/grpo/metrics.jsonl" |
      sed -E 's/"step":([0-9]+),.*"train\/optimizer_steps":([0-9]+)/\1:\2/' | tr '\n' ' ')
[ "$opt" = "1:2 2:4 3:6 4:8 " ] || fail "train/optimizer_steps by step: '$opt', expected 1:2 2:4 3:6 4:8"
python3 tests/e2e/tfevents_read.py "$T/grpo" | tee "$T/grpo.check" || fail "grpo events"
grep -q '2 file(s).*steps 1\.\.4' "$T/grpo.check" || fail "expected 2 event files covering steps 1..4"
"$BUILD/cpt" run --resume "$T/grpo" 2> "$T/grpo2.log" || { cat "$T/grpo2.log"; fail "grpo --resume"; }
n=$(ls "$T/grpo/tensorboard" | grep -c '^events\.out\.tfevents\.')
[ "$n" -eq 2 ] || fail "$n event files after a --resume that trained nothing, expected 2"

# off by default
"$BUILD/cpt-train" examples/sft_arithmetic.toml run.dir="$T/off" train.steps=1 train.eval_generate=0 "${sft_data[@]}" \
  "${small[@]}" \
  2> "$T/off.log" || { cat "$T/off.log"; fail "sft run without tensorboard"; }
[ ! -e "$T/off/tensorboard" ] || fail "a tensorboard folder without metrics.tensorboard"
# TB_OUT=DIR keeps the runs' metrics and events for tests/gpu/tensorboard_check.py (TensorBoard's own reader)
if [ -n "${TB_OUT:-}" ]; then
  for r in sft dpo grpo; do
    rm -rf "${TB_OUT:?}/$r" && mkdir -p "$TB_OUT/$r" && cp -r "$T/$r/metrics.jsonl" "$T/$r/tensorboard" "$TB_OUT/$r/"
  done
fi
echo "test_tensorboard: ok"
