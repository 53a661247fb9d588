#!/usr/bin/env bash
# A stop request (Ctrl-C, Slurm's SIGTERM) that comes while the trainer validates: the trainer leaves the validation
# after the chunk of prompts in hand, writes its checkpoint and exits well inside the drain grace, instead of
# finishing thousands of prompts and being SIGKILLed without a checkpoint (seen on the GPU machine: a 500-prompt
# validation on a loaded host outlasted the grace and the run kept nothing of its last steps).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-stopval-XXXXXX)
pid=""
cleanup() { [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -n 20 "$T/run.log" "$T/run/logs/trainer.log" >&2 2>/dev/null || true; exit 1; }
export OMP_NUM_THREADS=1
source tests/e2e/grpo_small.sh
make_tiny_model "$T" || fail "tiny model"
# a validation set long enough to take minutes here (the evaluation questions, repeated)
for _ in $(seq 1 400); do cat examples/data/arithmetic_rl_eval.jsonl; done > "$T/val.jsonl"
"$BUILD/cpt" run "${GRPO_ARGS[@]}" run.dir="$T/run" train.steps=40 validation.data="$T/val.jsonl" \
  validation.before_training=false validation.every_steps=3 validation.max_new_tokens=32 roles.drain_grace_s=60 \
  > "$T/run.log" 2>&1 &
pid=$!
# the validation after step 3 has begun once step 3's metrics are written and no validation line follows
for _ in $(seq 1 1200); do
  grep -q '"step":3,' "$T/run/metrics.jsonl" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || fail "the run ended before step 3"
  sleep 0.1
done
sleep 1
grep -q 'validation at step 3' "$T/run/logs/trainer.log" && fail "the validation was over before the stop: make it longer"
t0=$(date +%s.%N)
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
pid=""
secs=$(echo "$(date +%s.%N) - $t0" | bc | xargs printf "%.1f")
[ "$rc" -eq 3 ] || fail "exit status $rc after the stop, expected 3"
grep -q 'validation at step 3 left after' "$T/run/logs/trainer.log" || fail "the trainer did not leave its validation"
grep -q 'SIGKILL' "$T/run.log" && fail "the trainer was SIGKILLed"
[ -f "$T/run/checkpoints/step-3/trainer_state.json" ] || fail "no checkpoint at step 3"
awk -v s="$secs" 'BEGIN { exit !(s < 30) }' || fail "the stop took ${secs}s"
echo "test_stop_during_validation: stopped in ${secs}s during the step-3 validation, checkpoint at step 3"
