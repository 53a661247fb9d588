#!/bin/bash
# `sbatch sbatch/grpo_4gpu.sh` on the lent GPU machine (one H200, no Slurm of its own), issue 21: the carried Slurm
# (tests/gpu/slurm_device.sh), the script shrunk to one GPU by the line at its top (--gres=gpu:1: the trainer and one
# rollout worker share the GPU, weights over cuda_ipc; the reward worker on CPUs), a `scontrol requeue` a third of
# the way in, the job waited on to COMPLETED; then what the run shows: the exactly-once counts, the job's Restarts,
# the trainer's resume line, steps/s, which device each role used.
#
#   tests/gpu/grpo_slurm_run.sh run CARRY   CARRY: the device folder that tests/gpu/device_all.sh build packs (bin/
#                                           with the cpt binaries and redis-server, lib/, slurm/), unpacked
#
# MODE=cpu (here, to check the flow before device time is spent): no gres, the CPU-only line of grpo_4gpu.sh, the
# tiny model of tests/e2e/grpo_small.sh, every role on the CPU. MODE=gres: the GPU run's Slurm shape (--gres=gpu:1,
# the trainer's step holding the GPU, the others beside it; /dev/null stands in for the GPU, CLUSTER_CPUS=12 here)
# with every role on the CPU. Knobs: STEPS (300 on the GPU, 30 otherwise), OUT (the run, the cluster and the logs;
# default /tmp/cpt-grpo-slurm, emptied first), WAIT_S (240: the most seconds until the requeue's step), DONE_S (300:
# the most seconds from the requeue to the job's end).
set -euo pipefail
[ "${1:-}" = run ] && [ -n "${2:-}" ] || { sed -n '2,16p' "$0"; exit 2; }
CARRY=$(cd "$2" && pwd)
cd "$(dirname "$0")/../.."
W=${OUT:-/tmp/cpt-grpo-slurm}
MODE=${MODE:-gpu}
rm -rf "$W"
mkdir -p "$W"
chmod 755 "$W" # the job runs as root here, but munged's folder sits below it

export CPT_BIN=$CARRY/bin CPT_REDIS_SERVER=$CARRY/bin/redis-server OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export LD_LIBRARY_PATH="$CARRY/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
[ "$MODE" != gpu ] || eval "$(tests/gpu/run_on_device.sh env)" # cuBLASLt and NCCL where the device image keeps them
export MODE
trap 'tests/gpu/slurm_device.sh stop "$W/cluster"' EXIT
tests/gpu/slurm_device.sh start "$W/cluster" "$CARRY"
source "$W/cluster/env"

job_field() { scontrol show job "$1" -o 2>/dev/null | tr ' ' '\n' | grep "^$2=" | head -1 | cut -d= -f2-; }
run_step() { grep -o '"step":[0-9]*' "$W/run/metrics.jsonl" 2>/dev/null | tail -1 | cut -d: -f2 || true; }
logs() { # what the run left, for a failure
  for f in "$W/job.log" "$W"/run/logs/*.log "$W"/cluster/log/slurmd.log; do [ -f "$f" ] && { echo "== $f"; tail -25 "$f"; }; done
}
fail() { echo "FAIL: $*"; logs; exit 1; }
gpu_apps() { command -v nvidia-smi > /dev/null && nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null | paste -sd';' || true; }

source tests/e2e/grpo_small.sh # check_groups; GRPO_ARGS and make_tiny_model (it runs $BUILD's cpt) off the GPU
export BUILD=$CARRY/bin
# the lines at the top of sbatch/grpo_4gpu.sh; the script derives the roles and their devices from the allocation
if [ "$MODE" = cpu ]; then
  STEPS=${STEPS:-30} G=4
  make_tiny_model "$W" || fail "tiny model"
  opts=(--gres=none --ntasks=3 --cpus-per-task=1)
  args=("${GRPO_ARGS[@]}" checkpoint.every=5)
  roles=()
elif [ "$MODE" = gres ]; then # the GPU run's Slurm shape (gres, steps) with every role on the CPU
  STEPS=${STEPS:-30} G=4
  make_tiny_model "$W" || fail "tiny model"
  opts=(--gres=gpu:1 --ntasks=3 --cpus-per-task=4)
  args=("${GRPO_ARGS[@]}" checkpoint.every=5)
  roles=(train.device=cpu rollout.device=cpu weights.transport=file)
else
  STEPS=${STEPS:-300} G=16 # examples/grpo_arithmetic.toml (the script's default CONFIG): 16 groups a step
  opts=(--gres=gpu:1 --ntasks=3 --cpus-per-task=4)
  args=()
  roles=()
fi
args+=("${roles[@]}" run.dir="$W/run" train.steps="$STEPS")
echo "submit: sbatch ${opts[*]} --output=$W/job.log sbatch/grpo_4gpu.sh ${args[*]}"
t0=$(date +%s.%N)
job=$(sbatch --parsable "${opts[@]}" --output="$W/job.log" sbatch/grpo_4gpu.sh "${args[@]}")

# the requeue, a third of the way in
third=$((STEPS / 3))
end=$((SECONDS + ${WAIT_S:-240}))
while [ "$(run_step)" = "" ] || [ "$(run_step)" -lt "$third" ]; do
  [ $SECONDS -lt $end ] || fail "job $job: step $(run_step) after ${WAIT_S:-240} s (state $(job_field "$job" JobState))"
  case "$(job_field "$job" JobState)" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL) fail "job $job ended before step $third" ;; esac
  sleep 0.2
done
before=$(gpu_apps)
requeue_step=$(run_step)
scontrol requeue "$job"
echo "requeued job $job at step $requeue_step ($(date -u +%T)); GPU processes then: ${before:-none}"

end=$((SECONDS + ${DONE_S:-300})) st="" during=""
while [ $SECONDS -lt $end ]; do
  st=$(job_field "$job" JobState)
  case "$st" in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;;
    # a requeued job waits in PENDING (BeginTime) for Slurm's requeue delay: start it now
    PENDING) [ "$(job_field "$job" Reason)" = BeginTime ] && scontrol update JobId="$job" StartTime=now 2>/dev/null || true ;;
    RUNNING) s=$(run_step); [ -z "$during" ] && [ -n "$s" ] && [ "$s" -gt $((requeue_step + 5)) ] && during=$(gpu_apps) ;;
  esac
  sleep 0.5
done
t1=$(date +%s.%N)
[ "$st" = COMPLETED ] || fail "job $job ended ${st:-not done ${DONE_S:-300} s after the requeue}"

echo "job $job: $st, Restarts=$(job_field "$job" Restarts), $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s from sbatch to COMPLETED"
grep -E "cpt-sched: job|cpt: devices|requeue" "$W/job.log" | head -8 || true
resumed=$(grep -m1 -E 'resumed from' "$W/run/logs/trainer.log") ||
  fail "no resume line in the trainer's log: the run ended before the requeue took hold (raise STEPS)"
echo "trainer: $resumed"
summary=$(check_groups "$W/run" "$STEPS" "$G") || fail "exactly-once: $summary"
echo "exactly-once: $summary"
python3 - "$W/run/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
steps = {r["step"]: r for r in rows if "reward/mean" in r and "time" in r}
ks = sorted(steps)
def rate(seg):
    return (len(seg) - 1) / (steps[seg[-1]]["time"] - steps[seg[0]]["time"]) if len(seg) > 1 else float("nan")
# the requeue: the longest pause between two steps' metric lines
i = max(range(1, len(ks)), key=lambda j: steps[ks[j]]["time"] - steps[ks[j - 1]]["time"])
gap = steps[ks[i]]["time"] - steps[ks[i - 1]]["time"]
print(f"steps/s: {rate(ks):.2f} over steps {ks[0]}-{ks[-1]} with the requeue; {rate(ks[:i]):.2f} in steps "
      f"{ks[0]}-{ks[i - 1]}, {rate(ks[i:]):.2f} in steps {ks[i]}-{ks[-1]}, {gap:.1f} s between them; reward/mean "
      f"{steps[ks[0]]['reward/mean']:.3f} at step {ks[0]}, {steps[ks[-1]]['reward/mean']:.3f} at {ks[-1]}")
PY
echo "devices (the run's config): $(awk '/^\[/ {s = $1} /^(device|transport) *=/ {print s, $0}' "$W/run/config.toml" | paste -sd';')"
for f in "$W"/run/logs/*.log; do
  line=$(grep -m2 -i -E 'cuda|gpu|cpu|device' "$f" | cut -c1-160 | paste -sd'|' || true)
  echo "  $(basename "$f" .log): ${line:-(no line names a device)}"
done
echo "GPU processes at the requeue: ${before:-none}; after it: ${during:-none}"
echo "grpo_slurm_run: ok"
