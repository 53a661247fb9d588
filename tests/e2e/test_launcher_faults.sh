#!/usr/bin/env bash
# The launcher under a clumsy operator (issue 19), on short GRPO runs of grpo_small.sh's tiny model:
#  1. kill -9 of `cpt run`: no role and no redis-server of the run is left within 5 s; `--resume` finishes exactly
#     once (prompts the killed trainer issued past its checkpoint go to dead as obsolete, see docs/rollout.md).
#  2. SIGHUP (a closed terminal): the run stops in order (status 3); nothing is left behind.
#  3. a copy of a stopped run directory (cp -a) resumes as itself: the original is untouched, the copy finishes.
#  4. the original then resumes and finishes exactly once.
#  5. a second launch (cpt run, cpt run --resume) on a live run directory is refused naming the holder's pid and writes
#     nothing: config.toml stays byte-identical and the first run finishes with its own step count. Meanwhile a
#     control value that is not a count is ignored (once), a good one still applies, and cpt-scale refuses bad input.
#  6. --resume of a folder with no checkpoint is refused unless --from-scratch.
#  7. a checkpoints folder the trainer cannot write stops the run at once, without restarts.
#  8. every run directory and everything in it is for its owner only (find -perm /077 finds nothing).
# Every run that must end is bounded (timeout 300: a stall fails instead of hanging). A trainer is paused with
# SIGSTOP where a step must not race the test (it cannot finish under a second launch).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-launcher-XXXXXX)
started=() tp=
cleanup() {
  [ -z "$tp" ] || kill -CONT "$tp" 2>/dev/null || true
  for p in "${started[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  sleep 0.5
  [ -n "${KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$T"/*.log; do echo "== $f" >&2; tail -15 "$f" >&2; done; exit 1; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T" || fail "tiny model"
G=4
RUN_NAME=grpo-arithmetic

step_of() { grep -o '"step":[0-9]*' "$1/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
wait_step() { # RUN_DIR STEP
  for _ in $(seq 1 3000); do
    s=$(step_of "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "$1 never reached step $2"
}
latest_step() { sed 's/step-//' "$1/checkpoints/latest"; }
left_of() { pgrep -f "$1/" || true; } # the run's processes: every one names RUN_DIR on its command line
wait_gone() { # RUN_DIR SECONDS
  for _ in $(seq 1 $((${2} * 10))); do [ -z "$(left_of "$1")" ] && return 0; sleep 0.1; done
  fail "processes of $1 left ${2}s after the launcher: $(pgrep -af "$1/" | tr '\n' ';')"
}
trainer_of() { pgrep -f "cpt-train $1/config.toml" | head -1; }
start_run() { # LOG ARGS...: starts cpt run in the background, its pid in $pid
  local log=$1; shift
  "$CPT" run "$@" 2> "$log" &
  pid=$!; started+=("$pid")
}
snapshot() { (cd "$1" && find . -printf '%p %s %m %T@\n' | sort && find . -type f -exec sha1sum {} + | sort); }

# 1. kill -9 of the launcher
A="$T/a"
start_run "$T/a.log" "${GRPO_ARGS[@]}" run.dir="$A" train.steps=5000
wait_step "$A" 12
kill -0 "$pid" || fail "the run of $A ended early"
[ -n "$(pgrep -f "cpt-rollout $A/config.toml")" ] || fail "no rollout worker found for $A"
kill -9 "$pid"
wait_gone "$A" 5
k=$(latest_step "$A"); K=$((k + 10))
test -f "$A/checkpoints/step-$k/manifest.json" || fail "after kill -9 of the launcher: latest names step-$k, not a checkpoint"
timeout 300 "$CPT" run --resume "$A" train.steps=$K 2> "$T/a2.log" || fail "--resume after kill -9 of the launcher"
summary_a=$(check_groups "$A" $K $G) || fail "exactly-once after kill -9 of the launcher: $summary_a"

# 2. SIGHUP of the launcher: an orderly stop
B="$T/b"
start_run "$T/b.log" "${GRPO_ARGS[@]}" run.dir="$B" train.steps=5000
wait_step "$B" 12
kill -HUP "$pid"
rc=0; wait "$pid" || rc=$?
[ "$rc" -eq 3 ] || fail "SIGHUP: the launcher ended with status $rc, expected 3 (stopped after a checkpoint)"
grep -q "stopping: the trainer checkpoints" "$T/b.log" || fail "SIGHUP did not stop the run in order"
wait_gone "$B" 5
hup=$(latest_step "$B"); S=$((hup + 10))

# 3. a copy resumes as itself and leaves the original alone
C="$T/c"
cp -a "$B" "$C"
snapshot "$B" > "$T/b.before"
timeout 300 "$CPT" run --resume "$C" train.steps=$S 2> "$T/c.log" || fail "--resume of the copy"
grep -q "records run.dir = $B; resuming in $C" "$T/c.log" || fail "the copy's resume did not say where it runs"
snapshot "$B" > "$T/b.after"
cmp -s "$T/b.before" "$T/b.after" || fail "resuming the copy changed the original: $(diff "$T/b.before" "$T/b.after" | head -5)"
grep -q "^dir = \"$C\"" "$C/config.toml" || fail "the copy's config.toml does not name the copy"
grep -q "unix://$C/redis.sock" "$C/queue.json" || fail "the copy's queue is not its own socket"
summary_c=$(check_groups "$C" $S $G) || fail "exactly-once in the copy: $summary_c"

# 4. the original resumes after SIGHUP and finishes exactly once
timeout 300 "$CPT" run --resume "$B" train.steps=$S 2> "$T/b2.log" || fail "--resume after SIGHUP"
summary_b=$(check_groups "$B" $S $G) || fail "exactly-once after SIGHUP: $summary_b"

# 5. a second launch on a live run directory; control values
D="$T/d"
start_run "$T/d.log" "${GRPO_ARGS[@]}" run.dir="$D" train.steps=30
first=$pid
wait_step "$D" 2
tp=$(trainer_of "$D"); [ -n "$tp" ] || fail "no trainer for $D"
kill -STOP "$tp"
sum=$(sha1sum < "$D/config.toml")
if "$CPT" run "${GRPO_ARGS[@]}" run.dir="$D" train.steps=20 2> "$T/d2.log"; then fail "a second cpt run was not refused"; fi
grep -q "$D is in use by another launcher (pid $first holds" "$T/d2.log" || fail "the refusal does not name pid $first"
if "$CPT" run --resume "$D" 2> "$T/d3.log"; then fail "a second cpt run --resume was not refused"; fi
grep -q "in use by another launcher (pid $first" "$T/d3.log" || fail "the --resume refusal does not name pid $first"
[ "$(sha1sum < "$D/config.toml")" = "$sum" ] || fail "a refused launch rewrote config.toml"
ctl=(redis-cli -s "$D/redis.sock" HSET "cpt:$RUN_NAME:control")
"${ctl[@]}" rollout garbage > /dev/null
for _ in $(seq 1 100); do grep -q 'ignoring .* rollout = "garbage"' "$T/d.log" && break; sleep 0.1; done
grep -q 'ignoring .* rollout = "garbage": not a worker count' "$T/d.log" || fail "a garbage control value was not reported"
sleep 2.5 # another read of the same bad value: reported once only
"${ctl[@]}" rollout 2 > /dev/null
for _ in $(seq 1 100); do grep -q "scale rollout 1 -> 2" "$T/d.log" && break; sleep 0.1; done
grep -q "scale rollout 1 -> 2" "$T/d.log" || fail "a good control value after a bad one was not applied"
[ "$(grep -c 'ignoring .* rollout' "$T/d.log")" -eq 1 ] || fail "the bad control value was reported more than once"
grep -q "scale rollout .* -> 0" "$T/d.log" && fail "the garbage control value was read as 0"
for bad in rollout=garbage rollout=+3 "rollout= 3" rollout=5000 rollout=-1 rollout=; do
  rc=0; CPT_RUN="$D" "$BUILD/cpt-scale" "$bad" > /dev/null 2>&1 || rc=$?
  [ "$rc" -eq 2 ] || fail "cpt-scale '$bad': status $rc, expected 2"
done
# env workers in a run without a tool would fail at start until the run gives up: cpt-scale refuses, the launcher
# ignores the field
rc=0; CPT_RUN="$D" "$BUILD/cpt-scale" env=1 > "$T/env_scale.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "cpt-scale env=1 on a run without a tool: status $rc, expected 2"
grep -q "has no tool (env.type = none)" "$T/env_scale.out" || fail "cpt-scale env=1 does not say why it refuses"
"${ctl[@]}" env 1 > /dev/null
for _ in $(seq 1 100); do grep -q 'ignoring .* env = "1": this run has no tool' "$T/d.log" && break; sleep 0.1; done
grep -q 'ignoring .* env = "1": this run has no tool (env.type = none)' "$T/d.log" ||
  fail "an env count for a run without a tool was not refused"
grep -q "started env-" "$T/d.log" && fail "an env worker was started in a run without a tool"
kill -CONT "$tp"
rc=0; wait "$first" || rc=$?
[ "$rc" -eq 0 ] || fail "the first run ended with status $rc after a refused second launch"
[ "$(step_of "$D")" = 30 ] || fail "the first run finished at step $(step_of "$D"), not its own 30"
test -f "$D/checkpoints/step-30/manifest.json" || fail "no final checkpoint step-30 in $D"

# 6. --resume with no checkpoint
E="$T/e"
cp -a "$D" "$E"
rm -rf "$E/checkpoints"
sum=$(sha1sum < "$E/config.toml")
if "$CPT" run --resume "$E" 2> "$T/e.log"; then fail "--resume of a folder with no checkpoint was not refused"; fi
grep -q "has no checkpoint to resume from.*--from-scratch" "$T/e.log" || fail "the refusal does not say why"
[ "$(sha1sum < "$E/config.toml")" = "$sum" ] || fail "a refused --resume rewrote config.toml"
[ -z "$(left_of "$E")" ] || fail "a refused --resume started something"
timeout 300 "$CPT" run --resume "$E" --from-scratch train.steps=3 2> "$T/e2.log" || fail "--resume --from-scratch"
grep -q "from-scratch: training starts again at step 0" "$T/e2.log" || fail "--from-scratch did not say it starts over"
test -f "$E/checkpoints/step-3/manifest.json" || fail "--from-scratch did not train"

# 7. a checkpoints folder the trainer cannot write (root writes through modes: a folder of /proc then)
F="$T/f"
mkdir -p "$F"
if [ "$(id -u)" -eq 0 ]; then ln -s /proc/1 "$F/checkpoints"; else mkdir "$F/checkpoints"; chmod 500 "$F/checkpoints"; fi
t0=$SECONDS
rc=0; timeout 60 "$CPT" run "${GRPO_ARGS[@]}" run.dir="$F" train.steps=20 2> "$T/f.log" || rc=$?
[ "$rc" -eq 1 ] || fail "an unwritable checkpoints folder: status $rc, expected 1"
grep -q "cannot write into the checkpoints folder $F/checkpoints" "$F/logs/trainer.log" || fail "the trainer did not say why"
grep -q "trainer exited with status 4 .*not restarting" "$T/f.log" || fail "the launcher did not give up at once"
grep -q "trainer exited .* restarting in" "$T/f.log" && fail "the trainer was restarted"
wait_gone "$F" 5
[ -d "$F/checkpoints" ] && [ "$(id -u)" -ne 0 ] && chmod 700 "$F/checkpoints"

# 8. modes
for r in "$A" "$B" "$C" "$D" "$E"; do
  bad=$(find "$r" -perm /077 -printf '%m %p\n' | head -5)
  [ -z "$bad" ] || fail "files of $r readable by others: $bad"
done

echo "test_launcher_faults: ok (kill -9: nothing left, resumed from step-$k, $summary_a; SIGHUP: stopped at step $hup, nothing left," \
     "resumed $summary_b; copy: original untouched, $summary_c; second launch refused, config.toml identical," \
     "first run finished at 30; bad control value ignored once; no checkpoint refused; unwritable checkpoints: failed" \
     "in $((SECONDS - t0))s without restarts; modes 0600/0700)"
