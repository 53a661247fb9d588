#!/usr/bin/env bash
# GRPO (sync mode, tiny random model) through sbatch/grpo_4gpu.sh on a real single-node Slurm: trainer, rollout and
# reward run as concurrent steps; `scontrol requeue` mid-run; the job reruns, redis-server restarts on its AOF, the
# trainer resumes from `latest`, the outstanding groups are issued again; later a job in the `high` partition that
# needs the whole node preempts it (USR1, then requeue); it resumes again after the high job. The run finishes with
# every group trained once, and the final weights equal an uninterrupted local run's bitwise.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=300 G=4
roles=(roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 slurm.trainer_cpus=1
       slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=$STEPS train.groups_per_step=$G)

t0=$SECONDS
"$BUILD/cpt" run "${GRPO_ARGS[@]}" "${roles[@]}" run.dir="$T/ref" 2> "$T/ref.log" || fail "reference run"
t_ref=$((SECONDS - t0))

t0=$SECONDS
job=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" "${roles[@]}" run.dir="$T/job")
wait_run_step "$T/job" 40 300
scontrol requeue "$job"
echo "requeued job $job at step $(run_step "$T/job")"
# the rerun resumes and goes on; then preemption from the high partition
wait_run_step "$T/job" 120 400
cpus=$(scontrol show node -o | tr ' ' '\n' | grep '^CPUTot=' | cut -d= -f2)
high=$(sbatch --parsable -p high -c "$cpus" --output="$T/high.log" --wrap "echo high start; sleep 5; echo high end")
echo "preempting job $job at step $(run_step "$T/job") with job $high ($cpus CPUs in high)"
wait_job_done "$high" 180
wait_job_done "$job" 500
t_job=$((SECONDS - t0))

[ "$(job_field "$job" Restarts)" -ge 2 ] || fail "job $job was not restarted twice (requeue, preemption)"
grep -q "cpt-sched: job $job, restart 1" "$T/job.log" || fail "no second start in the job log"
grep -q "cpt-sched: job $job requeued by Slurm (scontrol requeue); it will resume from checkpoints/latest" "$T/job.log" ||
  fail "cpt-sched did not log the scontrol requeue as Slurm's"
! grep -q "scontrol requeue failed" "$T/job.log" || fail "cpt-sched requeued a job Slurm had requeued"
grep -q "cpt-sched: job $job, restart 2" "$T/job.log" || fail "no third start after the preemption"
grep -q "high end" "$T/high.log" || fail "the high job did not run"
grep -q "resumed from" "$T/job/logs/trainer.log" || fail "the rerun did not resume"
summary=$(check_groups "$T/job" $STEPS $G) || fail "exactly-once: $summary"
ref_w="$T/ref/checkpoints/step-$STEPS/model/model.safetensors"
job_w="$T/job/checkpoints/step-$STEPS/model/model.safetensors"
cmp "$ref_w" "$job_w" || fail "the requeued GRPO run's final weights differ from the uninterrupted run's"
echo "test_grpo_requeue: ok ($STEPS steps; reference ${t_ref}s; job $job requeued, preempted by $high, resumed each time," \
     "finished in ${t_job}s;" \
     "final model.safetensors equal (cmp); $summary)"
