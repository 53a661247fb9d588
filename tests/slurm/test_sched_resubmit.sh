#!/usr/bin/env bash
# sbatch into a run directory that holds a finished run (GRPO, tiny model, finished by a local `cpt run`): the job
# says so and fails before starting anything; `scontrol requeue` of that job (a restart, as when the run finished
# during a requeue's drain) finds nothing to do and completes; run.fresh=true trains again from step 0.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
R="$T/job"
args=("${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 slurm.trainer_cpus=1
      slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=8 run.dir="$R")
"$BUILD/cpt" run "${args[@]}" 2> "$T/local.log" || fail "the local run"
submit() { sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/$1.log" sbatch/grpo_4gpu.sh \
           "${args[@]}" "${@:2}"; }

job=$(submit again)
wait_job_state "$job" FAILED 120
grep -q "run.dir $R holds a finished run (step 8 of 8); choose another run.dir, or pass run.fresh=true" "$T/again.log" ||
  fail "no finished-run message"
! grep -q "cpt: run grpo" "$T/again.log" || fail "the job started the run"

scontrol requeue "$job"
for _ in $(seq 1 120); do
  [ "$(job_field "$job" JobState)" = PENDING ] && [ "$(job_field "$job" Reason)" = BeginTime ] &&
    scontrol update JobId="$job" StartTime=now 2>/dev/null || true
  [ "$(job_field "$job" JobState)" = COMPLETED ] && break
  sleep 0.5
done
[ "$(job_field "$job" JobState)" = COMPLETED ] || fail "the requeued job is $(job_field "$job" JobState), not COMPLETED"
grep -q "cpt: $R finished (step 8 of 8) before this requeue; nothing to do" "$T/again.log" || fail "no nothing-to-do line"

fresh=$(submit fresh run.fresh=true)
wait_job_done "$fresh" 200
grep -q "cpt: run.fresh=true: the earlier run in $R moved to $R/previous-" "$T/fresh.log" || fail "no set-aside line"
[ "$(tr -dc '0-9' < "$R/checkpoints/latest")" = 8 ] || fail "the fresh job did not finish"
[ -f "$(ls -d "$R"/previous-*/checkpoints/step-8 | head -1)/manifest.json" ] || fail "the old run was not set aside"
echo "test_sched_resubmit: ok (job $job refused the finished run, completed with nothing to do after scontrol" \
     "requeue; job $fresh with run.fresh=true trained it again)"
