#!/usr/bin/env bash
# Train-inference agreement on the CPU (trainer/online_agree.h): a short sync GRPO run on grpo_small.sh's tiny model
# reports agree/* every step, over every model token of the step (sync: every group is of the trainer's version;
# agree/tokens = response_len/mean x the step's completions), and with fp32 logits on both sides (the CPU trainer's
# forward, the CPU rollout engine's decode) the per-token gap agree/logprob_delta_max stays below 1e-4. With mpirun,
# the same run on two trainer ranks reports the same tokens and a gap as small (the logprobs gathered over ranks).
# Last, tests/gpu/logprob_agreement.sh (the GPU session's measurement) in its --cpu-smoke form, so it cannot rot
# between device sessions: its table, with the gap below 1e-4.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-agree-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
cd "$SRC"
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T"
STEPS=3
args=("${GRPO_ARGS[@]}" train.steps=$STEPS checkpoint.every=0 train.threads=1 rollout.threads=1 train.log_every=1)

# check RUN_DIR: every step's agree/* printed and asserted
check() {
  python3 - "$1/metrics.jsonl" "$STEPS" <<'PY'
import json, sys
rows = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "reward/mean" in r]
steps = int(sys.argv[2])
if len(rows) != steps: sys.exit(f"{len(rows)} step rows, expected {steps}")
worst = 0.0
for r in rows:
    want = round(r["response_len/mean"] * 32)  # 4 groups x 8 completions, all of the trainer's version (sync)
    print(f"  step {r['step']}: agree/tokens {r['agree/tokens']} (model tokens {want}), "
          f"logprob_delta_mean {r['agree/logprob_delta_mean']:.3g}, logprob_delta_max {r['agree/logprob_delta_max']:.3g}, "
          f"prob_delta_frac10 {r['agree/prob_delta_frac10']:.3g}")
    if r["agree/tokens"] != want: sys.exit(f"step {r['step']}: agree/tokens {r['agree/tokens']}, expected {want}")
    if r["agree/prob_delta_frac10"] != 0: sys.exit(f"step {r['step']}: tokens off by over 10% in probability")
    worst = max(worst, r["agree/logprob_delta_max"])
if not worst < 1e-4: sys.exit(f"agree/logprob_delta_max {worst:.3g}: fp32 trainer and fp32 rollout disagree")
print(f"  max over the run: {worst:.3g} (< 1e-4)")
PY
}

"$BUILD/cpt" run "${args[@]}" run.dir="$T/one" 2> "$T/one.log" || { cat "$T/one.log"; tail -n 30 "$T/one/logs/"*.log; fail "the run failed"; }
echo "one trainer rank:"
check "$T/one" || fail "agree/* of the one-rank run"
if command -v mpirun > /dev/null && [ -f "$BUILD/libcpt-coll-mpi.so" ]; then
  "$BUILD/cpt" run "${args[@]}" slurm.trainer_tasks=2 run.dir="$T/two" 2> "$T/two.log" ||
    { cat "$T/two.log" "$T/two/logs/trainer"*.log; fail "the two-rank run failed"; }
  echo "two trainer ranks:"
  check "$T/two" || fail "agree/* of the two-rank run"
else
  echo "two trainer ranks: not checked (no mpirun, or cpt built without MPI)"
fi
OUT="$T/smoke" tests/gpu/logprob_agreement.sh --cpu-smoke "$BUILD" > "$T/smoke.log" 2>&1 || { cat "$T/smoke.log"; fail "tests/gpu/logprob_agreement.sh --cpu-smoke"; }
grep -A1 '^case (shape' "$T/smoke.log"
grep -Eq '^tiny:cpu:cpu +3 +[1-9]' "$T/smoke.log" || fail "no figures in the script's table"
echo "logprob agreement: ok"
