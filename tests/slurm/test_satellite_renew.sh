#!/usr/bin/env bash
# Satellites with a short time limit renew: slurm.satellite_time=1 (a minute) and slurm.satellite_warn_s=50, so Slurm
# sends the satellite's batch script USR2 (--signal=B:USR2@50) well before its end; the worker hands back what it holds
# and the job ends COMPLETED, not TIMEOUT; cpt-sched submits the next satellite at once (no failure backoff) and the
# run goes on with it. Stopped with scancel (a checkpoint first): every group trained exactly once.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
G=4 RUN=grpo-arithmetic R="$T/job"
job=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 slurm.satellite_time=1 slurm.satellite_warn_s=50 \
      slurm.satellite_check_s=2 queue.claim_idle_ms=600000 checkpoint.every=100000 train.steps=100000 \
      train.groups_per_step=$G run.dir="$R")
wait_run_step "$R" 1 120
"$BUILD/cpt-scale" --run "$R" rollout=2 > /dev/null || fail "cpt-scale rollout=2"
sat=""
for _ in $(seq 1 120); do sat=$(squeue -h --name="cpt-sat-$RUN-rollout" -t R -o %i | head -1); [ -n "$sat" ] && break; sleep 0.5; done
[ -n "$sat" ] || fail "no satellite ran"
[ "$(job_field "$sat" TimeLimit)" = "00:01:00" ] || fail "satellite $sat time limit $(job_field "$sat" TimeLimit)"
t0=$SECONDS
wait_job_done "$sat" 90 # COMPLETED: ended by its own hand-back before the limit
ran=$((SECONDS - t0))
grep -q "satellite: the job ends (preempted or near its time limit)" "$R/logs/rollout-sat0.log" ||
  fail "the satellite did not get USR2 before its time limit"
for _ in $(seq 1 40); do grep -q "cpt: submitted satellite job [0-9]* for rollout-sat1 " "$T/job.log" && break; sleep 0.5; done
grep -q "cpt: satellite rollout-sat0 (job $sat) ended COMPLETED after [0-9]* s (preempted or at its time limit); a new one is submitted" \
  "$T/job.log" || fail "cpt-sched did not take the end as a renewal"
sat2=$(grep -o "cpt: submitted satellite job [0-9]* for rollout-sat1 " "$T/job.log" | awk '{print $5}')
[ -n "$sat2" ] || fail "no renewed satellite"
wait_job_state "$sat2" RUNNING 60
for _ in $(seq 1 120); do
  "$BUILD/cpt-queue" stats --run "$R" 2>/dev/null | grep -q "prompts .* rollout-sat1" && break; sleep 0.5
done
"$BUILD/cpt-queue" stats --run "$R" 2>/dev/null | grep -q "prompts .* rollout-sat1" || fail "rollout-sat1 never read prompts"
s0=$(run_step "$R")
wait_run_step "$R" $((s0 + 10)) 120
scancel "$job"
wait_job_state "$job" CANCELLED 120
stopped=$(tr -dc '0-9' < "$R/checkpoints/latest")
summary=$(check_groups_ahead "$R" "$stopped" $G) || fail "exactly-once: $summary"
made=$(awk '/stopping: [0-9]+ groups/ {for (i = 1; i <= NF; i++) if ($i == "stopping:") print $(i + 1)}' "$R/logs/rollout-sat0.log")
echo "test_satellite_renew: ok (satellite $sat with a 1-minute limit made ${made:-0} groups and ended COMPLETED after" \
     "${ran}s more, renewed by job $sat2; stopped at step $stopped; $summary)"
