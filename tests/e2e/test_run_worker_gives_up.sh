#!/usr/bin/env bash
# A rollout worker that fails at every start (here a cpt-rollout that exits 1 at once, as a worker built from other
# sources or missing a library would): the supervisor gives up on it after its quick failures, the launcher does not
# start replacements for it forever, and `cpt run` ends non-zero within seconds naming the worker and its log, with
# the trainer stopped through its checkpoint path and no process of the run left.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
T=$(mktemp -d /tmp/cpt-gives-up-XXXXXX)
pid=""
cleanup() { [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true; pkill -9 -f "$T/" 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -n 25 "$T/run.log" >&2 || true; exit 1; }
export OMP_NUM_THREADS=1
source tests/e2e/grpo_small.sh
make_tiny_model "$T" || fail "tiny model"
# the real programs, but a rollout worker that cannot start
mkdir -p "$T/bin"
for p in "$BUILD"/cpt*; do [ -x "$p" ] && [ -f "$p" ] && ln -s "$p" "$T/bin/"; done
rm -f "$T/bin/cpt-rollout"
printf '#!/bin/sh\necho "cpt-rollout: cannot start (test)" >&2\nexit 1\n' > "$T/bin/cpt-rollout"
chmod +x "$T/bin/cpt-rollout"
t0=$(date +%s)
CPT_BIN="$T/bin" "$T/bin/cpt" run "${GRPO_ARGS[@]}" run.dir="$T/run" train.steps=20 > "$T/run.log" 2>&1 &
pid=$!
rc=0
for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid" 2>/dev/null && fail "cpt run still running after 60 s with a worker that cannot start"
wait "$pid" || rc=$?
pid=""
secs=$(( $(date +%s) - t0 ))
[ "$rc" -ne 0 ] || fail "cpt run exited 0"
grep -q "every rollout worker failed (rollout-0: exit status 1" "$T/run.log" || fail "no error naming rollout-0"
grep -q "logs/rollout-0.log" "$T/run.log" || fail "the error does not name the worker's log"
starts=$(grep -c "started rollout-" "$T/run.log" || true)
[ "$starts" -le 1 ] || fail "$starts rollout workers started: replacements of a worker given up on"
[ "$(ls "$T/run/logs" | grep -c '^rollout-')" -eq 1 ] || fail "more than one rollout log: $(ls "$T/run/logs")"
grep -q "trainer stopped" "$T/run.log" || fail "the trainer was not stopped by the launcher"
sleep 0.5
if pgrep -f "$T/run" > /dev/null; then fail "processes of the run left: $(pgrep -af "$T/run")"; fi
echo "test_run_worker_gives_up: cpt run ended with status $rc in ${secs}s, one rollout worker started"
