#!/usr/bin/env bash
# `cpt-scale` and `cpt-queue stats` as typed (no --run, no CPT_RUN), from another directory, find the user's live run
# through the registry of live launchers ($XDG_STATE_HOME/cpt/runs, scheduler/run_registry.h): with one live GRPO run
# (tiny model) they use it and say which; with two they list both and exit 1; --run picks one; a launcher killed
# with kill -9 leaves a stale entry that is ignored and removed; a stopped launcher removes its own.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-discovery-XXXXXX)
pa= pb=
trap 'for p in $pa $pb; do kill "$p" 2>/dev/null || true; done; sleep 0.5; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log "$T"/*.err; do [ -f "$f" ] && { echo "== $f"; tail -15 "$f"; }; done >&2; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1 XDG_STATE_HOME="$T/state"
unset CPT_RUN
make_tiny_model "$T" || fail "tiny model"
A="$T/a" B="$T/b"
args=("${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 train.steps=1000000 checkpoint.every=100000)
step_of() { grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
wait_step() { for _ in $(seq 1 600); do s=$(step_of "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0; sleep 0.1; done
              fail "$1 never reached step $2"; }
elsewhere() { (cd / && "$@"); } # as typed, from a directory that is not the run's nor the source's

"$CPT" run "${args[@]}" run.dir="$A" 2> "$T/a.log" & pa=$!
wait_step "$A" 2
[ "$(ls "$T/state/cpt/runs" | wc -l)" = 1 ] || fail "the registry does not hold one entry: $(ls "$T/state/cpt/runs")"
elsewhere "$BUILD/cpt-scale" rollout=2 > "$T/scale1.out" 2> "$T/scale1.err" || fail "cpt-scale rollout=2 without --run"
grep -q "^desired: rollout=2" "$T/scale1.out" || fail "cpt-scale did not set rollout=2"
grep -q "cpt-scale: using the live run $A (job -, host $(hostname -s), pid $pa, started " "$T/scale1.err" ||
  fail "cpt-scale did not say which run it used"
for _ in $(seq 1 100); do grep -q "scale rollout 1 -> 2" "$T/a.log" && break; sleep 0.1; done
grep -q "scale rollout 1 -> 2" "$T/a.log" || fail "the run did not follow the scale request"
elsewhere "$BUILD/cpt-queue" stats > "$T/stats1.out" 2> "$T/stats1.err" || fail "cpt-queue stats without --run"
grep -q "cpt-queue: using the live run $A " "$T/stats1.err" || fail "cpt-queue did not say which run it used"
grep -q "rollout-1" "$T/stats1.out" || { cat "$T/stats1.out"; fail "cpt-queue stats does not show run a's workers"; }

"$CPT" run "${args[@]}" run.dir="$B" 2> "$T/b.log" & pb=$!
wait_step "$B" 1
rc=0; elsewhere "$BUILD/cpt-scale" > "$T/scale2.out" 2> "$T/scale2.err" || rc=$?
[ "$rc" = 1 ] || fail "cpt-scale with two live runs exited $rc"
grep -q "^  $A  (job -, host " "$T/scale2.err" && grep -q "^  $B  (job -, host " "$T/scale2.err" ||
  fail "cpt-scale did not list both runs"
grep -q "2 live runs (listed above): pass --run RUN_DIR or --job JOBID" "$T/scale2.err" || fail "no --run/--job hint"
rc=0; elsewhere "$BUILD/cpt-queue" stats > /dev/null 2> "$T/stats2.err" || rc=$?
[ "$rc" = 1 ] && grep -q "2 live runs" "$T/stats2.err" || fail "cpt-queue stats with two live runs (status $rc)"
elsewhere "$BUILD/cpt-scale" --run "$B" reward=2 | grep -q "^desired: reward=2" || fail "cpt-scale --run B"

kill -9 "$pb"; wait "$pb" 2>/dev/null || true; pb=
for _ in $(seq 1 50); do [ -z "$(pgrep -f "$B/" || true)" ] && break; sleep 0.2; done
elsewhere "$BUILD/cpt-scale" > /dev/null 2> "$T/scale3.err" || fail "cpt-scale after run b was killed"
grep -q "cpt-scale: using the live run $A " "$T/scale3.err" || fail "the killed run's entry was not ignored"
[ "$(ls "$T/state/cpt/runs" | wc -l)" = 1 ] || fail "the killed run's stale entry was not removed"

kill -INT "$pa"; rc=0; wait "$pa" || rc=$?; pa=
[ "$rc" = 3 ] || fail "run a ended $rc after SIGINT"
[ -z "$(ls "$T/state/cpt/runs")" ] || fail "run a's entry outlived its launcher"
rc=0; elsewhere "$BUILD/cpt-scale" rollout=1 2> "$T/scale4.err" || rc=$?
[ "$rc" = 1 ] && grep -q "no live cpt run found" "$T/scale4.err" || fail "no 'no live run' message (status $rc)"
echo "test_run_discovery: ok (one live run used from /, two listed with status 1, --run picks one, a kill -9'd" \
     "launcher's entry removed, a stopped one removes its own)"
