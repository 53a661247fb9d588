#!/usr/bin/env bash
# Chaos on a local GRPO run (`cpt run`, sync mode, 2 rollout and 2 reward workers): kill -9 of random rollout, reward
# and trainer processes and of redis-server itself while it runs. The launcher restarts each (redis-server on the
# same append-only file), the run finishes, and every group is trained exactly once: the final checkpoint's data
# cursor is steps x groups_per_step + skipped groups past the start with nothing outstanding (tests/e2e/grpo_small.sh).
# Meanwhile, the faults of a hostile or clumsy user (docs/operations.md "What survives what"): the data holds a prompt
# that crashes the reward plugin, one whose reward is 1e39 (over reward.max_abs) and one longer than the context
# (each group skipped after its retries); forged and garbage messages are added to every stream; a second `cpt run`
# on the same run directory is refused and changes nothing; a garbage control value is ignored. Then the run is
# continued for more steps and its launcher is hung up (SIGHUP: an orderly stop) and killed (kill -9) in turn: each
# time no process of the run is left, and the last resume finishes with the same exactly-once counts.
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
PLUGIN="$BUILD/plugins/libreward_poison_test.so"
[ -f "$PLUGIN" ] || fail "no $PLUGIN (build the reward_poison_test target)"
# the example's prompts, 3 of them poisoned: the plugin segfaults on one, scores one 1e39, one exceeds the context
python3 - "$T/data.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open("examples/data/arithmetic_rl_train.jsonl")]
rows[100]["prompt"] = "POISON " + rows[100]["prompt"]
rows[200]["prompt"] = "HUGE " + rows[200]["prompt"]
rows[300]["prompt"] = "What is 1 + 1? " * 60 + rows[300]["prompt"]
with open(sys.argv[1], "w") as f:
    for r in rows: f.write(json.dumps(r) + "\n")
PY
GRPO_ARGS+=(data.train="$T/data.jsonl" reward.type=plugin reward.plugin_path="$PLUGIN"
  'reward.plugin_config=crash_on=POISON;value=1e39;value_on=HUGE' queue.group_retries=1 queue.max_deliveries=2)
# every process of the run: its roles and redis-server name RUN_DIR on their command lines
left_of() { pgrep -f "$R/" || true; }
no_process_left() { # WHAT: within 10 s, nothing of the run runs
  for _ in $(seq 1 50); do [ -z "$(left_of)" ] && return 0; sleep 0.2; done
  ps -o pid,args -p "$(left_of | paste -sd, -)" >&2 || true
  fail "processes of the run left after $1"
}

step_of() { grep -o '"step":[0-9]*' "$R/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
t0=$SECONDS
"$CPT" run "${GRPO_ARGS[@]}" run.dir="$R" train.steps=$STEPS train.groups_per_step=$G roles.rollout=2 roles.reward=2 \
  queue.claim_idle_ms=2000 2> "$T/run.log" &
pid=$!
for _ in $(seq 1 600); do s=$(step_of); [ -n "$s" ] && [ "$s" -ge 10 ] && break; sleep 0.2; done
[ -n "$(step_of)" ] || fail "the run never reached step 10"

# a second launch on the live run directory is refused and writes nothing into it
cp "$R/config.toml" "$T/config.before"
if "$CPT" run "${GRPO_ARGS[@]}" run.dir="$R" train.steps=20 2> "$T/second.log"; then fail "a second launch ran"; fi
cmp -s "$R/config.toml" "$T/config.before" || fail "a refused second launch rewrote config.toml"
# forged and garbage messages in every stream, and a garbage control value
RC=(redis-cli -s "$R/redis.sock")
for st in prompts rollouts scored; do
  "${RC[@]}" XADD "cpt:grpo-arithmetic:$st" '*' m "$(head -c 64 /dev/urandom | base64 -w0)" > /dev/null
  "${RC[@]}" XADD "cpt:grpo-arithmetic:$st" '*' x y > /dev/null
done
"${RC[@]}" HSET cpt:grpo-arithmetic:control rollout garbage > /dev/null

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
    # the launcher's own children: a reward worker's plugin runs in a forked child with the same command line
    trainer) vp=$(pgrep -P "$pid" -f "cpt-train $R/config.toml" | head -1 || true) ;;
    *) vp=$(pgrep -P "$pid" -f "cpt-$v $R/config.toml --worker-id" | shuf -n1 || true) ;;
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
no_process_left "the run finished"
# what was refused, each with its reason
grep -q "$R is in use by another launcher (pid [0-9]* holds" "$T/second.log" ||
  fail "the second launch's refusal does not say why: $(tail -1 "$T/second.log")"
grep -q 'ignoring cpt:grpo-arithmetic:control field rollout = "garbage"' "$T/run.log" ||
  fail "the garbage control value was not reported"
skipped=$(grep -o '"groups/skipped":[0-9]*' "$R/metrics.jsonl" | tail -1 | cut -d: -f2)
[ "${skipped:-0}" -ge 3 ] || fail "groups/skipped = ${skipped:-none}: the 3 poisoned prompts were not all skipped"
for why in "scoring failed" "exceeds the context" "exceeds reward.max_abs"; do
  grep -h "skipped after 2 failed attempts" "$T/run.log" "$R/logs/trainer.log" | grep -q "$why" ||
    fail "no skip logged for: $why"
done
echo "chaos: $summary; $skipped skipped; second launch refused; garbage control value ignored"

# the launcher itself: hung up, killed, resumed; each time nothing is left and the counts hold
S2=$((STEPS + 60))
launch() { "$CPT" run --resume "$R" train.steps=$S2 2>> "$T/run.log" & pid=$!; }
wait_step() { # STEP: until the run passes it
  for _ in $(seq 1 600); do s=$(step_of); [ -n "$s" ] && [ "$s" -ge "$1" ] && return 0; sleep 0.1; done
  fail "the resumed run never reached step $1"
}
launch; wait_step $((STEPS + 15))
kill -HUP "$pid"; rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 3 ] || fail "SIGHUP of the launcher: status $rc, want 3 (stopped after a checkpoint)"
no_process_left "SIGHUP of the launcher"
launch; wait_step $((STEPS + 35))
kill -9 "$pid"; wait "$pid" 2>/dev/null || true; pid=
no_process_left "kill -9 of the launcher"
launch; rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 0 ] || fail "the last resume ended with status $rc"
summary2=$(check_groups "$R" $S2 $G) || fail "exactly-once after the launcher faults: $summary2"
no_process_left "the resumed run finished"
echo "test_chaos: ok ($STEPS steps x $G groups in ${dt}s; ${#killed[@]} kills: ${killed[*]}; $summary;" \
     "SIGHUP, kill -9 of the launcher, resumed to $S2: $summary2; nothing left; $((SECONDS - t0)) s in all)"
