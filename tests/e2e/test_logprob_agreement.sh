#!/usr/bin/env bash
# Train-inference agreement on the CPU (trainer/online_agree.h): a short sync GRPO run on grpo_small.sh's tiny model
# reports agree/* every step, over every model token of the step (sync: every group is of the trainer's version;
# agree/tokens = response_len/mean x the step's completions), and with fp32 logits on both sides (the CPU trainer's
# forward, the CPU rollout engine's decode) the per-token gap agree/logprob_delta_max stays below 1e-4. With mpirun,
# the same run on two trainer ranks reports the same tokens and a gap as small (the logprobs gathered over ranks).
# An async run (max_staleness 2) counts only the groups of the trainer's version: every token at a step whose groups
# are all fresh (staleness/mean 0), none where all are 2 versions old, and wherever it measures the gap stays fp32's
# (a stale group counted would show the policy's change, far above 1e-4).
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
"$BUILD/cpt" run "${args[@]}" async.mode=async async.max_staleness=2 run.dir="$T/async" 2> "$T/async.log" ||
  { cat "$T/async.log"; tail -n 30 "$T/async/logs/"*.log; fail "the async run failed"; }
echo "async, max_staleness 2:"
python3 - "$T/async/metrics.jsonl" <<'PY' || fail "agree/* of the async run"
import json, sys
rows = [r for r in map(json.loads, filter(str.strip, open(sys.argv[1]))) if "reward/mean" in r]
excluded = 0
for r in rows:
    every, n, st = round(r["response_len/mean"] * 32), r["agree/tokens"], r["staleness/mean"]
    mx = r.get("agree/logprob_delta_max")
    print(f"  step {r['step']}: staleness/mean {st}, agree/tokens {n} of {every}, logprob_delta_max {mx}")
    if n > every: sys.exit(f"step {r['step']}: {n} tokens compared, the step has {every}")
    if st == 0 and n != every: sys.exit(f"step {r['step']}: every group fresh, yet {n} of {every} tokens compared")
    if st == 2 and n != 0: sys.exit(f"step {r['step']}: every group 2 versions old, yet {n} tokens compared")
    if n > 0 and not mx < 1e-4: sys.exit(f"step {r['step']}: agree/logprob_delta_max {mx} (a stale group counted?)")
    if n == 0 and mx is not None: sys.exit(f"step {r['step']}: no token compared, yet a max of {mx}")
    excluded += n < every
print(f"  {excluded} step(s) with stale groups left out")
PY
OUT="$T/smoke" tests/gpu/logprob_agreement.sh --cpu-smoke "$BUILD" > "$T/smoke.log" 2>&1 || { cat "$T/smoke.log"; fail "tests/gpu/logprob_agreement.sh --cpu-smoke"; }
grep -A1 '^case (shape' "$T/smoke.log"
grep -Eq '^tiny:cpu:cpu +3 +[1-9]' "$T/smoke.log" || fail "no figures in the script's table"
echo "logprob agreement: ok"
