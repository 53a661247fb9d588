#!/usr/bin/env bash
# Live scaling under Slurm: a GRPO job (sync mode, tiny random model) with room for 2 rollout workers starts with 1;
# `cpt-scale rollout=2` adds a rollout step, `cpt-scale rollout=1` drains it; the control hash and the worker logs
# show both; the new worker did work; no group is lost or trained twice. STEPS leaves the run several times the
# steps that scaling up and down take (CI: up at step ~70, down at ~120) to finish with one worker again.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=600 G=4
R="$T/job"
t0=$SECONDS
job=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=$STEPS train.groups_per_step=$G \
      run.dir="$R")
wait_run_step "$R" 10 300
# the queue asks for the password satellites would use (RUN_DIR/redis.pass) on its socket too
[ -f "$R/redis.pass" ] && export REDISCLI_AUTH=$(cat "$R/redis.pass")
control() { redis-cli -s "$R/redis.sock" HGET "cpt:grpo-arithmetic:control" "$1"; }
"$BUILD/cpt-scale" --run "$R" rollout=2 | grep -q "desired: rollout=2" || fail "cpt-scale rollout=2"
[ "$(control rollout)" = 2 ] || fail "control hash: rollout is $(control rollout)"
for _ in $(seq 1 60); do [ "$(control running_rollout)" = 2 ] && break; sleep 0.5; done
[ "$(control running_rollout)" = 2 ] || fail "running_rollout stayed $(control running_rollout)"
up_step=$(run_step "$R")
"$BUILD/cpt-scale" --run "$R" > "$T/table"
grep -Eq '^rollout +2 +2 +2 +0  -$' "$T/table" || { cat "$T/table"; fail "cpt-scale table after scale-up"; }
wait_run_step "$R" $((up_step + 6)) 300
"$BUILD/cpt-scale" --run "$R" rollout=1 > /dev/null || fail "cpt-scale rollout=1"
for _ in $(seq 1 120); do [ "$(control running_rollout)" = 1 ] && break; sleep 0.5; done
[ "$(control running_rollout)" = 1 ] || fail "running_rollout stayed $(control running_rollout) after scale-down"
down_step=$(run_step "$R")
wait_job_done "$job" 900
dt=$((SECONDS - t0))
grep -q "cpt: scale rollout 1 -> 2" "$T/job.log" || fail "no scale-up in the job log"
grep -q "cpt: started rollout-1" "$T/job.log" || fail "rollout-1 was not started"
grep -q "cpt: scale rollout 2 -> 1" "$T/job.log" || fail "no scale-down in the job log"
grep -q "cpt: draining rollout-1" "$T/job.log" || fail "rollout-1 was not drained"
grep -q "stopping: [1-9][0-9]* groups" "$R/logs/rollout-1.log" || { tail "$R/logs/rollout-1.log"; fail "rollout-1 made no group"; }
summary=$(check_groups "$R" $STEPS $G) || fail "exactly-once: $summary"
echo "test_grpo_scale: ok ($STEPS steps in ${dt}s; up to 2 rollout at step $up_step, down to 1 at step $down_step;" \
     "$(grep -o 'stopping: [0-9]* groups' "$R/logs/rollout-1.log" | head -1) by rollout-1; $summary)"
