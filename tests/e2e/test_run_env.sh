#!/usr/bin/env bash
# `cpt run` with env.type = calculator (tiny model of grpo_small.sh): the launcher starts one env worker (roles.env
# defaults to 1 when a tool is configured), `cpt preflight` names it, a tool call pushed into cpt:RUN:env with
# redis-cli is answered on cpt:RUN:env:WORKER, `cpt-queue stats` shows the env stream, `cpt-scale env=2` starts a
# second env worker and `cpt-scale env=1` drains it. The rollout's own tool calls go through the same worker: the
# call ends at every "1" the tiny model writes (env.call_end), so calls are frequent, and the env worker answers
# them while the run trains; answered requests are deleted, so the env stream stays as long as the calls in flight.
# The run is stopped with Ctrl-C (SIGINT).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-run-env-XXXXXX)
pg=
trap '[ -n "$pg" ] && kill "$pg" 2>/dev/null; sleep 0.3; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log "$T"/*.out "$T"/run/logs/env-*.log; do [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }; done >&2; exit 1; }
command -v redis-cli > /dev/null || { echo "SKIP: no redis-cli"; exit 77; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1 XDG_STATE_HOME="$T/state"
unset CPT_RUN
make_tiny_model "$T" || fail "tiny model"
wait_log() { for _ in $(seq 1 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done; fail "no '$2' in $1"; }
D="$T/run" RUN_NAME=grpo-arithmetic
args=("${GRPO_ARGS[@]}" run.dir="$D" train.steps=100000 checkpoint.every=100000 env.type=calculator
      env.call_start= env.call_end=1)

"$CPT" preflight "${args[@]}" > "$T/preflight.out" 2>&1 || fail "cpt preflight"
grep -q "ok .*roles .*1 env" "$T/preflight.out" || fail "preflight does not count the env worker"
grep -q "ok .*env .*calculator, in a sandbox (seccomp strict" "$T/preflight.out" || fail "preflight does not check the tool"

"$CPT" run "${args[@]}" 2> "$T/run.log" & pg=$!
wait_log "$T/run.log" "cpt: started env-0"
wait_log "$D/logs/env-0.log" "cpt-env env-0: run $RUN_NAME, environment calculator, reading cpt:$RUN_NAME:env"

# one env request (queue/env_msg.h), msgpack written by hand: the test needs no msgpack library; no "1" in the
# call, which env.call_end would cut, and no markup: env.call_start is empty, the whole text is the call
python3 - "$RUN_NAME" > "$T/request.bin" <<'PY'
import sys
def enc(v):
    if v is None: return b"\xc0"
    if isinstance(v, int): return bytes([v]) if v < 128 else b"\xcd" + v.to_bytes(2, "big")
    if isinstance(v, str):
        b = v.encode(); return (bytes([0xa0 | len(b)]) if len(b) < 32 else b"\xd9" + bytes([len(b)])) + b
    return bytes([0x80 | len(v)]) + b"".join(enc(k) + enc(x) for k, x in v.items())
sys.stdout.buffer.write(enc({"schema": 1, "type": "env_request", "run": sys.argv[1], "worker": "rollout-test",
    "id": {"epoch": 0, "index": 5}, "sample": 3, "turn": 1,
    "call": '{"name": "calculator", "arguments": {"expression": "2*204"}}', "extra": None}))
PY
R=(redis-cli -s "$D/redis.sock")
id=$("${R[@]}" -x XADD "cpt:$RUN_NAME:env" '*' m < "$T/request.bin") || fail "XADD"
for _ in $(seq 1 100); do
  "${R[@]}" --raw XRANGE "cpt:$RUN_NAME:env:rollout-test" - + > "$T/reply.out" 2>&1
  grep -aq "observation" "$T/reply.out" && break; sleep 0.1
done
grep -aq "env_reply" "$T/reply.out" || fail "no env reply on cpt:$RUN_NAME:env:rollout-test"
LC_ALL=C grep -aq "observation.408" "$T/reply.out" || fail "the reply's observation is not 408"
grep -aq "env-0" "$T/reply.out" || fail "the reply does not name env-0"
"${R[@]}" XPENDING "cpt:$RUN_NAME:env" env - + 10000 | grep -q "^$id$" && fail "the request $id was not acked"

(cd / && "$BUILD/cpt-queue" stats) > "$T/stats.out" 2>&1 || fail "cpt-queue stats"
grep -Eq "^env +[0-9]+ +[0-9.-]+ +env +1 " "$T/stats.out" || fail "cpt-queue stats does not show the env stream"
grep -Eq "^ +env-0 +env " "$T/stats.out" || fail "cpt-queue stats does not list the env worker"

(cd / && "$BUILD/cpt-scale" env=2) > "$T/scale.out" 2>&1 || fail "cpt-scale env=2"
grep -q "^desired: env=2" "$T/scale.out" || fail "cpt-scale did not say what it set"
wait_log "$T/run.log" "cpt: started env-1"
(cd / && "$BUILD/cpt-scale") > "$T/scale_show.out" 2>&1 || fail "cpt-scale (show)"
grep -Eq "^env +[0-9]+ +2 " "$T/scale_show.out" || fail "cpt-scale does not show 2 desired env workers"
(cd / && "$BUILD/cpt-scale" env=1) > /dev/null 2>&1 || fail "cpt-scale env=1"
wait_log "$T/run.log" "cpt: draining env-1"
wait_log "$D/logs/env-1.log" "cpt-env env-1: stopping"

# answered requests are deleted: the env stream holds only the calls in flight (at most a step's samples, 4 x 8)
info=$("${R[@]}" XINFO STREAM "cpt:$RUN_NAME:env")
len=$(echo "$info" | awk '$0 == "length" {getline; print}')
added=$(echo "$info" | awk '$0 == "entries-added" {getline; print}')
[ -n "$len" ] && [ "$len" -le 32 ] || fail "the env stream holds $len requests: answered ones are not deleted"
[ -n "$added" ] && [ "$added" -ge $((len + 10)) ] || fail "only $added env requests in the run: the check above is vacuous"
echo "env stream: $len requests held of $added added"
kill -INT "$pg"
rc=0; wait "$pg" || rc=$?; pg=
[ "$rc" = 3 ] || fail "the run stopped with status $rc, expected 3 (stopped after a checkpoint)"
answered=$(sed -n 's/.*cpt-env env-0: stopping: \([0-9]*\) calls answered .*, 0 dead.*/\1/p' "$D/logs/env-0.log")
[ -n "$answered" ] || fail "env-0 did not drain with its counts"
[ "$answered" -gt 1 ] || fail "env-0 answered $answered calls: the rollout's own tool calls never reached it"
echo "env-0 answered $answered calls"
echo "ok: env worker started, answered, listed, scaled and drained"
