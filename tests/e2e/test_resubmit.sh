#!/usr/bin/env bash
# `cpt run CONFIG` again into a run directory that holds a run (GRPO, sync mode, tiny model; tests/e2e/grpo_small.sh):
# a stopped run resumes and says what it carried over (the step of checkpoints/latest, the worker counts cpt-scale
# set in the last run, read back from the queue's control hash); a finished run is refused before anything starts
# (status 1, the message names the step, nothing in the folder changes); run.fresh=true sets the finished run aside
# in RUN_DIR/previous-<UTC time>/ and trains again from step 0.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-resubmit-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; sleep 0.5; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do echo "== $f"; tail -15 "$f"; done >&2; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T" || fail "tiny model"
R="$T/run"
args=("${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 checkpoint.every=100000 run.dir="$R")
step_of() { grep -o '"step":[0-9]*' "$R/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }

# 1. a run stopped after cpt-scale rollout=2
"$CPT" run "${args[@]}" train.steps=100000 2> "$T/first.log" & pid=$!
for _ in $(seq 1 600); do s=$(step_of); [ -n "$s" ] && [ "$s" -ge 2 ] && break; sleep 0.1; done
"$BUILD/cpt-scale" --run "$R" rollout=2 > /dev/null || fail "cpt-scale rollout=2"
for _ in $(seq 1 100); do grep -q "scale rollout 1 -> 2" "$T/first.log" && break; sleep 0.1; done
kill -INT "$pid" || fail "the first run ended by itself"
rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" = 3 ] || fail "the first run ended $rc, not 3 (stopped)"
stopped=$(tr -dc '0-9' < "$R/checkpoints/latest")
[ -n "$stopped" ] || fail "no stop checkpoint"
STEPS=$((stopped + 10)) # the resubmission trains 10 more steps (a raised train.steps is a continuation)
args+=(train.steps=$STEPS)

# 2. submitted again: it resumes and says so
"$CPT" run "${args[@]}" 2> "$T/second.log" || fail "the second run failed"
grep -q "cpt: resuming $R from step $stopped (checkpoint $R/checkpoints/step-$stopped); scale counts from the last run: rollout=2 reward=1" \
  "$T/second.log" || fail "the resumed run did not say what it carried over"
grep -q "cpt: started rollout-1" "$T/second.log" || fail "the resumed run did not start the second rollout worker"
[ "$(tr -dc '0-9' < "$R/checkpoints/latest")" = $STEPS ] || fail "the resumed run did not finish"

# 3. submitted once more: a finished run is refused and nothing changes
sum_before=$(cat "$R/metrics.jsonl" "$R/logs/trainer.log" "$R/config.toml" | md5sum)
rc=0; "$CPT" run "${args[@]}" 2> "$T/third.log" || rc=$?
[ "$rc" = 1 ] || fail "a finished run was submitted again with status $rc"
grep -q "run.dir $R holds a finished run (step $STEPS of $STEPS); choose another run.dir, or pass run.fresh=true" \
  "$T/third.log" || fail "no finished-run message"
! grep -q "cpt: run grpo" "$T/third.log" || fail "the refused submission started the run"
[ "$(cat "$R/metrics.jsonl" "$R/logs/trainer.log" "$R/config.toml" | md5sum)" = "$sum_before" ] ||
  fail "the refused submission changed the run directory"

# 4. run.fresh=true: the finished run moves aside, training starts at step 0
"$CPT" run "${args[@]}" run.fresh=true 2> "$T/fresh.log" || fail "the fresh run failed"
prev=$(ls -d "$R"/previous-* | head -1)
[ -f "$prev/checkpoints/step-$STEPS/manifest.json" ] || fail "the finished run was not set aside in $prev"
grep -q "cpt: run.fresh=true: the earlier run in $R moved to $prev" "$T/fresh.log" || fail "no set-aside line"
! grep -q "cpt: resuming" "$T/fresh.log" || fail "the fresh run resumed"
[ "$(grep -o '"step":[0-9]*' "$R/metrics.jsonl" | head -1)" = '"step":1' ] || fail "the fresh run did not start at step 1"
grep -q "^fresh = false" "$R/config.toml" || fail "the resolved config keeps run.fresh=true (a restart would set aside again)"
[ "$(tr -dc '0-9' < "$R/checkpoints/latest")" = $STEPS ] || fail "the fresh run did not finish"
echo "test_resubmit: ok (stopped at step $stopped with rollout=2, resumed with it and finished; a finished run" \
     "refused, nothing changed; run.fresh=true set it aside in $(basename "$prev") and trained from step 1)"
