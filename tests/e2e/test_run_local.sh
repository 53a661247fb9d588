#!/usr/bin/env bash
# `cpt run` on one machine with the SFT example (small overrides): a straight run finishes; Ctrl-C (SIGINT) mid-run
# stops with status 3 after a checkpoint and `cpt run --resume` finishes it; a trainer killed with kill -9 is
# restarted by the launcher and resumes from `latest`. Both interrupted runs end bitwise equal to the straight one.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-run-local-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
export OMP_NUM_THREADS=1
STEPS=60
args=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
      data.eval=examples/data/arithmetic_rl_eval.jsonl train.steps=$STEPS train.log_every=1 train.eval_every=0
      train.eval_generate=0 train.eval_max_examples=16 train.threads=1 checkpoint.every=5 checkpoint.keep_last=3
      run.progress_every_s=1)

# the step of the newest metrics line (0 before the first)
step_of() { grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
wait_step() { # RUN_DIR STEP
  for _ in $(seq 1 1200); do
    s=$(step_of "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 never reached step $2"
}
final_model() { echo "$1/checkpoints/step-$STEPS/model/model.safetensors"; }

# 1. straight run
t0=$(date +%s.%N)
"$CPT" run "${args[@]}" run.dir="$T/a" 2> "$T/a.log" || { cat "$T/a.log"; fail "straight run failed"; }
ta=$(echo "$(date +%s.%N) - $t0" | bc)
grep -q "preflight: ok" "$T/a.log" || fail "cpt run did not run preflight"
grep -q "run finished" "$T/a.log" || fail "no 'run finished'"
grep -q "step $STEPS/$STEPS" "$T/a.log" || fail "no progress line reached step $STEPS"
test -f "$(final_model "$T/a")" || fail "no final checkpoint"

# 2. Ctrl-C mid-run: status 3 after a checkpoint, then --resume finishes
"$CPT" run "${args[@]}" run.dir="$T/b" 2> "$T/b.log" &
pid=$!; pids+=("$pid")
wait_step "$T/b" 12
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 3 ] || { cat "$T/b.log"; fail "SIGINT: exit status $rc, expected 3"; }
grep -q "cpt run --resume" "$T/b.log" || fail "no resume hint after SIGINT"
grep -q "stopping at step .* on signal" "$T/b/logs/trainer.log" || fail "the trainer did not stop at a step boundary"
stopped=$(grep -o 'stopping at step [0-9]*' "$T/b/logs/trainer.log" | awk '{print $4}')
test -f "$T/b/checkpoints/step-$stopped/manifest.json" || fail "no checkpoint at the stop step $stopped"
[ "$stopped" -lt "$STEPS" ] || fail "the run was not interrupted (stopped at $stopped)"
"$CPT" run --resume "$T/b" 2> "$T/b2.log" || { cat "$T/b2.log"; fail "--resume failed"; }
grep -q "resumed from .*step-$stopped" "$T/b/logs/trainer.log" || fail "--resume did not resume from step-$stopped"
cmp "$(final_model "$T/a")" "$(final_model "$T/b")" || fail "Ctrl-C + --resume differs from the straight run"

# 3. kill -9 of the trainer: the launcher restarts it and it resumes from latest
"$CPT" run "${args[@]}" run.dir="$T/c" 2> "$T/c.log" &
pid=$!; pids+=("$pid")
wait_step "$T/c" 22
tpid=$(pgrep -f "cpt-train $T/c/config.toml" | head -1) || true
[ -n "$tpid" ] || fail "no trainer process found for $T/c"
kill -9 "$tpid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 0 ] || { cat "$T/c.log"; fail "after kill -9 of the trainer: exit status $rc"; }
grep -q "trainer exited with status 137" "$T/c.log" || fail "the launcher did not see the trainer die"
resumed=$(grep -o 'resumed from [^ ]*step-[0-9]*' "$T/c/logs/trainer.log" | head -1)
[ -n "$resumed" ] || fail "the restarted trainer did not resume"
cmp "$(final_model "$T/a")" "$(final_model "$T/c")" || fail "kill -9 + restart differs from the straight run"

# 4. a bad config starts nothing
if "$CPT" run "${args[@]}" run.dir="$T/d" data.train="$T/missing.jsonl" 2> "$T/d.log"; then fail "bad config ran"; fi
grep -q "FAIL  data .*missing.jsonl" "$T/d.log" || fail "preflight did not name the missing file"
test ! -e "$T/d" || fail "a run directory was created for a config that failed preflight"

# 5. train.resume=false into a finished run's folder: refused before anything starts (it would overwrite its
#    checkpoints), the folder as it was
cp "$T/a/metrics.jsonl" "$T/a-metrics.before"
if "$CPT" run "${args[@]}" run.dir="$T/a" train.resume=false 2> "$T/e.log"; then fail "train.resume=false ran"; fi
grep -q "train.resume = false, but .*checkpoints holds checkpoints up to step $STEPS (latest)" "$T/e.log" ||
  { cat "$T/e.log"; fail "no refusal naming the latest step"; }
! grep -q "cpt: started" "$T/e.log" || fail "train.resume=false into a used folder started roles"
cmp -s "$T/a/metrics.jsonl" "$T/a-metrics.before" || fail "the refused run touched metrics.jsonl"

echo "test_run_local: ok (straight $STEPS steps in ${ta}s; SIGINT stopped at step $stopped, resumed and equal;" \
     "kill -9 of the trainer at step >= 22, $resumed, equal)"
