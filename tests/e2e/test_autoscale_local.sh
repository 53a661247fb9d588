#!/usr/bin/env bash
# The rollout autoscaler with `cpt run` (scheduler/autoscale.h), tiny model of grpo_small.sh, decisions every second:
#  1. grow: rollouts made deliberately slow (one sequence at a time, long completions, the trainer sees 16 tokens of
#     each): the run starts with 1 fixed rollout worker, `cpt-scale rollout=auto:1-3` as typed (the live run found
#     through the registry) hands the count to the autoscaler, which grows it 1 -> 2 -> 3, logging the trainer's wait
#     and the prompts backlog; `cpt-scale` and `cpt-queue stats` show the mode and the last change while it runs.
#  2. shrink: fast rollouts and a trainer with 8 optimizer passes a batch (its staleness bound holds the prompts back),
#     roles.rollout_auto = true from the config: 3 -> 2 -> 1, the rollouts idle with the prompts stream empty.
# Both runs end with exact counts (every group trained once, nothing outstanding), draining included; the shrunk
# run resumed starts with the 1 worker the autoscaler had reached.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-autoscale-XXXXXX)
pg=
trap '[ -n "$pg" ] && kill "$pg" 2>/dev/null; sleep 0.3; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log "$T"/*.out; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done >&2; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1 XDG_STATE_HOME="$T/state"
unset CPT_RUN
make_tiny_model "$T" || fail "tiny model"
step_of() { grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
wait_step() { for _ in $(seq 1 900); do s=$(step_of "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0; sleep 0.1; done
              fail "$1 never reached step $2"; }
wait_log() { for _ in $(seq 1 900); do grep -q "$2" "$1" && return 0; sleep 0.1; done; fail "no '$2' in $1"; }
auto=(roles.autoscale_period_s=1 roles.autoscale_periods=2 roles.autoscale_cooldown_s=1)

# 1. grow, switched on live; stopped with Ctrl-C after the checks (a run of fixed length could end before them)
G="$T/grow"
"$CPT" run "${GRPO_ARGS[@]}" run.dir="$G" train.steps=100000 checkpoint.every=100000 async.mode=async async.max_staleness=2 \
  train.groups_per_step=2 rollout.group_size=16 rollout.slots=1 sampling.max_new_tokens=110 train.max_seq_len=16 \
  rollout.stop_on_eos=false roles.rollout=1 "${auto[@]}" 2> "$T/grow.log" & pg=$!
wait_step "$G" 2
grep -q "cpt: autoscale" "$T/grow.log" && fail "the autoscaler acted before it was asked to"
(cd / && "$BUILD/cpt-scale" rollout=auto:1-3) > "$T/scale_set.out" 2>&1 || fail "cpt-scale rollout=auto:1-3"
grep -q "^desired: rollout_mode=auto rollout_min=1 rollout_max=3" "$T/scale_set.out" || fail "cpt-scale did not say what it set"
wait_log "$T/grow.log" "cpt: autoscale rollout on: 1..3 workers"
wait_log "$T/grow.log" "cpt: autoscale rollout 1 -> 2: trainer starved for 2 periods: trainer waited"
wait_log "$T/grow.log" "cpt: autoscale rollout 2 -> 3: trainer starved"
wait_log "$T/grow.log" "cpt: started rollout-2"
(cd / && "$BUILD/cpt-scale") > "$T/scale_show.out" 2>&1 || fail "cpt-scale (show) failed"
grep -Eq "^rollout +[0-9]+ +3 " "$T/scale_show.out" || fail "cpt-scale does not show 3 desired rollout workers"
grep -q "^rollout mode: auto 1-3; last change 2 -> 3: trainer starved for 2 periods: trainer waited .* prompts backlog" \
  "$T/scale_show.out" || fail "cpt-scale does not show the mode and the last change"
(cd / && "$BUILD/cpt-queue" stats) > "$T/stats.out" 2>&1 || fail "cpt-queue stats failed"
grep -q "^rollout workers: auto 1-3, desired 3; last change: 2 -> 3: trainer starved" "$T/stats.out" ||
  fail "cpt-queue stats does not show the autoscaler"
kill -INT "$pg"
rc=0; wait "$pg" || rc=$?; pg=
[ "$rc" = 3 ] || fail "the grow run: exit status $rc after SIGINT, expected 3"
grep "cpt: autoscale rollout" "$T/grow.log" | head -3
n=$(grep -c "cpt: autoscale rollout [0-9]" "$T/grow.log")
[ "$n" -le 3 ] || fail "$n autoscale changes in the grow run: flapping"
stopped=$(grep -o 'stopping at step [0-9]*' "$G/logs/trainer.log" | awk '{print $4}')
[ -n "$stopped" ] || fail "the grow run's trainer did not stop at a step boundary"
check_groups_ahead "$G" "$stopped" 2 || fail "grow run: group counts"

# 2. shrink, from the config; stopped with Ctrl-C (SIGINT) once at the minimum, so the load of the machine does not decide
#    whether the run lasts long enough
S="$T/shrink"
"$CPT" run "${GRPO_ARGS[@]}" run.dir="$S" train.steps=100000 checkpoint.every=100000 async.mode=async \
  async.max_staleness=1 train.groups_per_step=2 rollout.group_size=16 sampling.max_new_tokens=8 train.ppo_epochs=8 \
  roles.rollout=3 roles.rollout_auto=true roles.rollout_min=1 roles.rollout_max=3 "${auto[@]}" 2> "$T/shrink.log" & pg=$!
wait_log "$T/shrink.log" "cpt: autoscale rollout 3 -> 2: rollouts idle for 2 periods: trainer waited .* prompts backlog 0 -> 0 (min 0, max 0)"
wait_log "$T/shrink.log" "cpt: autoscale rollout 2 -> 1: rollouts idle"
sleep 4 # a few more periods at the minimum
kill -INT "$pg"
rc=0; wait "$pg" || rc=$?; pg=
[ "$rc" = 3 ] || fail "the shrink run: exit status $rc after SIGINT, expected 3"
grep "cpt: autoscale rollout" "$T/shrink.log"
grep -q "cpt: autoscale rollout [0-9] -> [0-9]: trainer starved" "$T/shrink.log" && fail "the shrink run also grew: flapping"
grep -q "cpt: autoscale rollout 1 -> 0" "$T/shrink.log" && fail "shrank below roles.rollout_min"
stopped=$(grep -o 'stopping at step [0-9]*' "$S/logs/trainer.log" | awk '{print $4}')
[ -n "$stopped" ] || fail "the trainer did not stop at a step boundary"
check_groups_ahead "$S" "$stopped" 2 || fail "shrink run: group counts"
# a resumed run in auto mode starts where the autoscaler was (1), not at roles.rollout (3)
"$CPT" run --resume "$S" 2> "$T/resume.log" & pg=$!
wait_log "$T/resume.log" "cpt: resuming $S from step $stopped .*rollout=1 reward=1"
wait_step "$S" $((stopped + 3))
kill -INT "$pg"
rc=0; wait "$pg" || rc=$?; pg=
[ "$rc" = 3 ] || fail "the resumed run: exit status $rc after SIGINT, expected 3"
grep -q "cpt: started rollout-1" "$T/resume.log" && fail "the resumed run started 2 rollout workers"
echo "OK: grow 1 -> 3 on a starved trainer (switched on live), shrink 3 -> 1 on idle rollouts, exact counts"
