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

# Two rollout workers, one given up on (rollout-0 cannot start, rollout-1 is the real one): the run goes on with
# rollout-1, `running` counts only it, and `cpt-scale rollout=1` takes the given-up worker out of the count instead
# of draining the working one (which ended the run: every rollout worker failed).
rm -f "$T/bin/cpt-rollout"
printf '#!/bin/sh\ncase " $* " in *" --worker-id rollout-0 "*) echo "cpt-rollout: cannot start (test)" >&2; exit 1 ;; esac\nexec "%s/cpt-rollout" "$@"\n' \
  "$BUILD" > "$T/bin/cpt-rollout"
chmod +x "$T/bin/cpt-rollout"
R2="$T/run2"
CPT_BIN="$T/bin" "$T/bin/cpt" run "${GRPO_ARGS[@]}" run.dir="$R2" roles.rollout=2 train.steps=1000000 \
  > "$T/run2.log" 2>&1 &
pid=$!
fail2() { echo "FAIL: $*" >&2; tail -n 25 "$T/run2.log" >&2 || true; exit 1; }
step_of() { awk 'match($0, /"step":[0-9]+/) { s = substr($0, RSTART + 7, RLENGTH - 7) } END { print s + 0 }' \
  "$R2/metrics.jsonl" 2>/dev/null || echo 0; }
for _ in $(seq 1 600); do grep -q "rollout-0 failed .* giving up" "$T/run2.log" && break; sleep 0.1; done
grep -q "rollout-0 failed .* giving up" "$T/run2.log" || fail2 "rollout-0 was not given up on"
for _ in $(seq 1 600); do [ "$(step_of)" -ge 3 ] && break; sleep 0.1; done
[ "$(step_of)" -ge 3 ] || fail2 "no training with rollout-1"
# the control hash is written every 2 s
for _ in $(seq 1 50); do
  "$BUILD/cpt-scale" --run "$R2" > "$T/table" || fail2 "cpt-scale --run"
  grep -Eq "^rollout +1 +2 +2 " "$T/table" && break; sleep 0.2
done
grep -Eq "^rollout +1 +2 +2 " "$T/table" || { cat "$T/table"; fail2 "cpt-scale: running should be 1 (2 desired, 2 places)"; }
"$BUILD/cpt-scale" --run "$R2" rollout=1 > /dev/null || fail2 "cpt-scale rollout=1"
for _ in $(seq 1 100); do grep -q "rollout-0 (given up on) leaves the count" "$T/run2.log" && break; sleep 0.1; done
grep -q "rollout-0 (given up on) leaves the count" "$T/run2.log" || fail2 "the given-up worker did not leave the count"
s0=$(step_of)
for _ in $(seq 1 300); do [ "$(step_of)" -ge $((s0 + 3)) ] && break; sleep 0.1; done
[ "$(step_of)" -ge $((s0 + 3)) ] || fail2 "training stopped after the scale-down (step $s0 -> $(step_of))"
kill -0 "$pid" 2> /dev/null || fail2 "cpt run ended after the scale-down"
! grep -q "draining rollout-1" "$T/run2.log" || fail2 "the working worker was drained"
! grep -q "every rollout worker failed" "$T/run2.log" || fail2 "the run was stopped for want of rollout workers"
kill -INT "$pid"
rc2=0
wait "$pid" || rc2=$?
pid=""
[ "$rc2" -eq 3 ] || fail2 "cpt run after SIGINT: status $rc2, expected 3 (stopped)"
echo "test_run_worker_gives_up: cpt run ended with status $rc in ${secs}s, one rollout worker started; with one of" \
     "two given up on, rollout=1 kept the working one (steps $s0 -> $(step_of))"
