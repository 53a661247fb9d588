#!/usr/bin/env bash
# GRPO with two trainer ranks on the CPU (`cpt run` starting the trainer under Open MPI's mpirun): the run finishes
# with the exactly-once counts (check_groups in grpo_small.sh) and final weights close to a one-rank run with the
# same seed (sync mode on the CPU); a SIGTERM to cpt run mid-run stops both ranks at the same step, `latest` is that
# step, and `cpt run --resume` finishes with the counts; the same for PPO (the critic, ppo_epochs = 2).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CPT="$BUILD/cpt"
T=$(mktemp -d /tmp/cpt-grpo-ranks-XXXXXX)
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; sleep 0.5; rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v mpirun > /dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
source tests/e2e/grpo_small.sh
export OMP_NUM_THREADS=1
make_tiny_model "$T"
STEPS=6
args=("${GRPO_ARGS[@]}" train.steps=$STEPS checkpoint.every=2 train.threads=1 train.log_every=1)

# max |a - b| over the tensors of two safetensors files (F32)
max_diff() {
  python3 - "$1" "$2" <<'PY'
import json, struct, sys
def load(p):
    b = open(p, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n]); base = 8 + n
    out = {}
    for k, v in h.items():
        if k == "__metadata__": continue
        s, e = v["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - s) // 4), b[base + s:base + e])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), "different tensors"
d = max(max(abs(x - y) for x, y in zip(a[k], b[k])) for k in a)
print(f"{d:.3g}")
PY
}
model_of() { echo "$1/checkpoints/step-$2/model/model.safetensors"; }

# 1. one rank, then two ranks: same seed, sync mode
"$CPT" run "${args[@]}" run.dir="$T/one" 2> "$T/one.log" || { cat "$T/one.log"; fail "the one-rank run failed"; }
t0=$(date +%s)
"$CPT" run "${args[@]}" slurm.trainer_tasks=2 run.dir="$T/two" 2> "$T/two.log" ||
  { cat "$T/two.log" "$T/two/logs/trainer"*.log; fail "the two-rank run failed"; }
t2=$(( $(date +%s) - t0 ))
grep -q "trainer rank 1 of 2" "$T/two/logs/"trainer*.log || fail "no second trainer rank in the logs"
check_groups "$T/two" $STEPS 4 || fail "exactly-once counts of the two-rank run"
d=$(max_diff "$(model_of "$T/one" $STEPS)" "$(model_of "$T/two" $STEPS)")
moved=$(max_diff "$(model_of "$T/one" 2)" "$(model_of "$T/one" $STEPS)")
python3 -c "import sys; sys.exit(0 if float('$d') < 1e-5 and float('$moved') > 1e3 * float('$d') else 1)" ||
  fail "two ranks end $d away from one rank (the weights moved $moved from step 2 to $STEPS)"

# 2. SIGTERM mid-run: both ranks stop at the same step, latest is that step, --resume finishes
"$CPT" run "${args[@]}" slurm.trainer_tasks=2 train.steps=40 run.dir="$T/stop" 2> "$T/stop.log" &
pid=$!
for _ in $(seq 1 600); do
  grep -q '"step":3,' "$T/stop/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 3 ] || { cat "$T/stop.log"; fail "SIGTERM: exit status $rc, expected 3"; }
s0=$(grep -o 'stopping at step [0-9]*' "$T/stop/logs/trainer.log" | awk '{print $4}' | tail -1)
s1=$(grep -ho 'trainer rank 1 ends at step [0-9]*' "$T/stop/logs/"trainer*.log | awk '{print $7}' | tail -1)
[ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "rank 0 stopped at '$s0', rank 1 at '$s1'"
latest=$(cat "$T/stop/checkpoints/latest")
[ "$latest" = "$s0" ] || [ "$latest" = "step-$s0" ] || fail "latest is $latest, the ranks stopped at $s0"
"$CPT" run --resume "$T/stop" 2> "$T/resume.log" || { cat "$T/resume.log"; fail "--resume failed"; }
grep -q "trainer rank 1 resumed from .*step-$s0" "$T/stop/logs/"trainer*.log || fail "rank 1 did not load step-$s0"
check_groups "$T/stop" 40 4 || fail "exactly-once counts after stop and resume"

# 3. PPO (a critic, two optimizer updates per step): stopped and resumed on two ranks, the critic's checkpoint too
ppo=(examples/ppo_arithmetic.toml "${GRPO_ARGS[@]:1}" critic.path= train.threads=1 checkpoint.every=5
     slurm.trainer_tasks=2)
"$CPT" run "${ppo[@]}" train.steps=30 run.dir="$T/ppo" 2> "$T/ppo.log" &
pid=$!
for _ in $(seq 1 600); do
  grep -q '"step":3,' "$T/ppo/metrics.jsonl" 2>/dev/null && break
  sleep 0.1
done
kill -TERM "$pid"
rc=0; wait "$pid" || rc=$?; pid=
[ "$rc" -eq 3 ] || { cat "$T/ppo.log"; fail "ppo SIGTERM: exit status $rc, expected 3"; }
p0=$(grep -o 'stopping at step [0-9]*' "$T/ppo/logs/trainer.log" | awk '{print $4}' | tail -1)
[ -d "$T/ppo/critic/checkpoints/step-$p0" ] || fail "no critic checkpoint at the ppo stop step $p0"
"$CPT" run --resume "$T/ppo" 2> "$T/ppo2.log" || { cat "$T/ppo2.log" "$T/ppo/logs/trainer"*.log; fail "ppo --resume failed"; }
grep -q "trainer rank 1 resumed from .*step-$p0" "$T/ppo/logs/"trainer*.log || fail "ppo rank 1 did not load step-$p0"
check_groups "$T/ppo" 30 4 || fail "exactly-once counts of the resumed ppo run"

echo "test_grpo_ranks: ok (2 ranks: $STEPS steps in ${t2}s, weights within $d of 1 rank, moved $moved; SIGTERM: both ranks" \
     "stopped at step $s0, resumed to 40 with the counts; ppo stopped at $p0 and resumed)"
