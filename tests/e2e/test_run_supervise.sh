#!/usr/bin/env bash
# The launcher's supervision of an online run, with stand-in role programs (CPT_BIN points at shell scripts that
# behave like the roles: a trainer that logs metrics and stops with status 3 on TERM/USR1, workers that drain on
# TERM/USR1), so it tests cpt run itself, independent of the real roles:
#   redis-server killed -> restarted on the same append-only file (a key written before is still there);
#   cpt-scale rollout=2 / rollout=1 -> a worker started / drained, control hash updated;
#   a worker killed -> restarted; the trainer finishing -> the run ends 0 and redis-server is stopped;
#   a trainer that fails right at start -> given up after 3 tries, not backed off for minutes.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-supervise-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; sleep 0.5; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; cat "$T/run.log" >&2 || true; exit 1; }
source tests/e2e/grpo_small.sh
R="$T/run"
mkdir -p "$T/bin"
cat > "$T/bin/cpt-train" <<'SH'
#!/usr/bin/env bash
[ -f "$CPT_RUN/../fail_trainer" ] && { echo "stand-in trainer: failing at start" >&2; exit 1; }
trap 'echo "stopping at step $s on signal" >&2; exit ${FAKE_STOP_STATUS:-3}' TERM USR1
s=$(cat "$CPT_RUN/step" 2>/dev/null || echo 0)
echo "resumed at step $s" >&2
while [ "$s" -lt "${FAKE_STEPS:-60}" ]; do
  sleep 0.2 & wait $!
  s=$((s + 1)); echo "$s" > "$CPT_RUN/step"
  printf '{"step":%d,"reward/mean":%s}\n' "$s" "0.$s" >> "$CPT_RUN/metrics.jsonl"
done
SH
cat > "$T/bin/cpt-worker" <<'SH'
#!/usr/bin/env bash
trap 'echo "$CPT_ROLE: stopping: drained" >&2; exit 0' TERM USR1
echo "$CPT_ROLE: started ($*)" >&2
while :; do sleep 0.2 & wait $!; done
SH
cp "$T/bin/cpt-worker" "$T/bin/cpt-rollout"; mv "$T/bin/cpt-worker" "$T/bin/cpt-reward"
chmod +x "$T/bin"/*
export CPT_BIN="$T/bin" FAKE_STEPS=100

CPT_BIN="$T/bin" "$CPT" run "${GRPO_ARGS[@]}" run.dir="$R" queue.appendfsync=always run.progress_every_s=1 \
  2> "$T/run.log" &
pid=$!
wait_for() { # PATTERN FILE SECONDS
  for _ in $(seq 1 $(($3 * 10))); do grep -Eq "$1" "$2" 2>/dev/null && return 0; sleep 0.1; done
  fail "no '$1' in $2 after $3 s"
}
wait_for "run grpo-arithmetic in" "$T/run.log" 30
cli() { redis-cli -s "$R/redis.sock" "$@"; }
[ "$(cli SET cpt:test:marker 42)" = OK ] || fail "cannot write to the run's redis"

# redis-server killed: restarted on its AOF
rpid=$(cat "$R/redis.pid")
kill -9 "$rpid"
wait_for "redis-server exited \(signal 9\); restarting it" "$T/run.log" 10
for _ in $(seq 1 50); do [ "$(cli GET cpt:test:marker 2>/dev/null)" = 42 ] && break; sleep 0.1; done
[ "$(cli GET cpt:test:marker)" = 42 ] || fail "the restarted redis-server lost the key (AOF not reloaded)"
[ "$(cat "$R/redis.pid")" != "$rpid" ] || fail "redis-server has the old pid"

# scale up and down through the control hash
"$BUILD/cpt-scale" --run "$R" rollout=2 > /dev/null
wait_for "cpt: started rollout-1" "$T/run.log" 10
for _ in $(seq 1 50); do [ "$(cli HGET cpt:grpo-arithmetic:control running_rollout)" = 2 ] && break; sleep 0.1; done
[ "$(cli HGET cpt:grpo-arithmetic:control running_rollout)" = 2 ] || fail "running_rollout is not 2"
"$BUILD/cpt-scale" --run "$R" > "$T/table"
grep -Eq '^rollout +2 +2 +2 +0  -$' "$T/table" || { cat "$T/table"; fail "cpt-scale table"; }
"$BUILD/cpt-scale" --run "$R" rollout=1 > /dev/null
wait_for "cpt: draining rollout-1" "$T/run.log" 10
wait_for "rollout-1: stopping: drained" "$R/logs/rollout-1.log" 10
for _ in $(seq 1 50); do [ "$(cli HGET cpt:grpo-arithmetic:control running_rollout)" = 1 ] && break; sleep 0.1; done
[ "$(cli HGET cpt:grpo-arithmetic:control running_rollout)" = 1 ] || fail "running_rollout is not 1"

# a worker killed: restarted
wpid=$(pgrep -f "cpt-reward $R/config.toml --worker-id reward-0" | head -1)
kill -9 "$wpid"
wait_for "reward-0 exited with status 137 .*restarting" "$T/run.log" 10
[ "$(grep -c 'reward-0: started' "$R/logs/reward-0.log")" -ge 2 ] || sleep 1
[ "$(grep -c 'reward-0: started' "$R/logs/reward-0.log")" -ge 2 ] || fail "reward-0 was not started again"

rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 0 ] || fail "the run ended with $rc"
grep -q "run finished" "$T/run.log" || fail "no 'run finished'"
kill -0 "$(cat "$R/redis.pid" 2>/dev/null || echo 999999)" 2>/dev/null && fail "redis-server still runs after the run"
[ ! -S "$R/redis.sock" ] || fail "redis.sock left behind"

# a trainer that cannot start: given up quickly
touch "$T/fail_trainer"
t0=$SECONDS
rc=0; "$CPT" run "${GRPO_ARGS[@]}" run.dir="$T/run2" 2> "$T/run2.log" || rc=$?
[ "$rc" -eq 1 ] || fail "a failing trainer: status $rc"
grep -q "trainer failed 3 times in a row within 5 s of starting (status 1); giving up" "$T/run2.log" ||
  { cat "$T/run2.log"; fail "no quick give-up"; }
[ $((SECONDS - t0)) -lt 20 ] || fail "giving up took $((SECONDS - t0)) s"
rm -f "$T/fail_trainer"

# Ctrl-C in a terminal: SIGINT to the whole foreground process group. The launcher stops the roles in order; the
# private redis-server, in a group of its own, stays up for them (it takes SIGINT for a shutdown).
setsid "$CPT" run "${GRPO_ARGS[@]}" run.dir="$T/run3" 2> "$T/run3.log" &
pid=$!
wait_for "run grpo-arithmetic in" "$T/run3.log" 30
wait_for "." "$T/run3/metrics.jsonl" 10
kill -INT -- "-$pid"
rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 3 ] || { cat "$T/run3.log"; fail "Ctrl-C: status $rc, expected 3 (stopped)"; }
! grep -q "redis-server exited" "$T/run3.log" || { cat "$T/run3.log"; fail "Ctrl-C reached the redis-server"; }
grep -q "run stopped; continue it with" "$T/run3.log" || { cat "$T/run3.log"; fail "Ctrl-C: no resume hint"; }

# A trainer that cannot write its checkpoint when asked to stop (exit 4): the run failed, not "stopped"
FAKE_STOP_STATUS=4 "$CPT" run "${GRPO_ARGS[@]}" run.dir="$T/run4" 2> "$T/run4.log" &
pid=$!
wait_for "run grpo-arithmetic in" "$T/run4.log" 30
wait_for "." "$T/run4/metrics.jsonl" 10
kill -INT "$pid"
rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 1 ] || { cat "$T/run4.log"; fail "a trainer that could not checkpoint: status $rc, expected 1"; }
grep -q "the trainer, asked to stop, could not write its checkpoint (exit status 4)" "$T/run4.log" ||
  { cat "$T/run4.log"; fail "no error for the trainer's status 4"; }
! grep -q "run stopped; continue it with" "$T/run4.log" || fail "status 4 was reported as a resumable stop"
echo "test_run_supervise: ok (redis-server restarted on its AOF; scale 1 -> 2 -> 1; worker restarted;" \
     "failing trainer given up in $((SECONDS - t0)) s; Ctrl-C to the group stopped in order; status 4 failed)"
