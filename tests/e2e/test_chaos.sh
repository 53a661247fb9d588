#!/usr/bin/env bash
# Chaos on a local GRPO run (`cpt run`, sync mode, 2 rollout and 2 reward workers): kill -9 of random rollout, reward
# and trainer processes and of redis-server itself while it runs. The launcher restarts each (redis-server on the
# same append-only file), the run finishes, and every group is trained exactly once: the final checkpoint's data
# cursor is steps x groups_per_step past the start with nothing outstanding (tests/e2e/grpo_small.sh).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-chaos-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; sleep 1; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; tail -40 "$T/run.log" >&2 || true; tail -30 "$T/run/logs/trainer.log" >&2 || true; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T" || fail "tiny model"
STEPS=400 G=4
R="$T/run"

step_of() { grep -o '"step":[0-9]*' "$R/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
t0=$SECONDS
"$CPT" run "${GRPO_ARGS[@]}" run.dir="$R" train.steps=$STEPS train.groups_per_step=$G roles.rollout=2 roles.reward=2 \
  queue.claim_idle_ms=2000 2> "$T/run.log" &
pid=$!
for _ in $(seq 1 600); do s=$(step_of); [ -n "$s" ] && [ "$s" -ge 10 ] && break; sleep 0.2; done
[ -n "$(step_of)" ] || fail "the run never reached step 10"

# each kind at least once, in a random order, spread over the run by step (not by time: a fast machine finished the
# run before the last kills of a time schedule landed); a kill waits at most 60 s for its step
victims=(trainer rollout reward redis rollout reward trainer redis)
killed=()
k=0
for v in $(printf '%s\n' "${victims[@]}" | shuf); do
  at=$((20 + k * (STEPS - 60) / ${#victims[@]})); k=$((k + 1))
  for _ in $(seq 1 300); do s=$(step_of); [ -n "$s" ] && [ "$s" -ge "$at" ] && break; kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null || break
  case $v in
    redis) vp=$(cat "$R/redis.pid" 2>/dev/null || true) ;;
    trainer) vp=$(pgrep -f "cpt-train $R/config.toml" | head -1 || true) ;;
    *) vp=$(pgrep -f "cpt-$v $R/config.toml --worker-id" | shuf -n1 || true) ;;
  esac
  if [ -n "$vp" ] && kill -9 "$vp" 2>/dev/null; then killed+=("$v@$(step_of)"); fi
  sleep 1
done
echo "killed: ${killed[*]}"
# a run that stops making progress is a failure, not a hang until the ctest timeout
last=$(step_of); still=0
while kill -0 "$pid" 2>/dev/null; do
  sleep 1
  now=$(step_of)
  if [ "$now" = "$last" ]; then still=$((still + 1)); else still=0; last=$now; fi
  if [ "$still" -ge 120 ]; then
    for k in prompts rollouts scored; do
      echo "$k: $(redis-cli -s "$R/redis.sock" XLEN "cpt:grpo-arithmetic:$k" 2>/dev/null) messages" >&2
    done
    kill -INT "$pid"; wait "$pid" || true; pid=
    fail "no progress for 120 s at step $now after chaos (${killed[*]})"
  fi
done
rc=0; wait "$pid" || rc=$?; pid=
dt=$((SECONDS - t0))
[ "$rc" -eq 0 ] || fail "the run ended with status $rc after chaos"
n_killed=${#killed[@]}
[ "$n_killed" -ge 6 ] || fail "only $n_killed kills landed (${killed[*]})"
for v in trainer rollout reward; do
  if printf '%s\n' "${killed[@]}" | grep -q "^$v@"; then
    grep -Eq "$v(-[0-9]+)? exited with status 137" "$T/run.log" || fail "the launcher did not restart the $v"
  fi
done
if printf '%s\n' "${killed[@]}" | grep -q '^redis@'; then
  grep -q "redis-server exited (signal 9); restarting it" "$T/run.log" || fail "redis-server was not restarted"
fi
grep -q "run finished" "$T/run.log" || fail "no 'run finished'"
summary=$(check_groups "$R" $STEPS $G) || fail "exactly-once: $summary"
echo "test_chaos: ok ($STEPS steps x $G groups in ${dt}s; ${#killed[@]} kills: ${killed[*]}; $summary)"
