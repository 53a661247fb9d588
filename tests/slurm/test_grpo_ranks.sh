#!/usr/bin/env bash
# GRPO with two trainer ranks through sbatch/grpo_4gpu.sh on a real single-node Slurm, on CPUs:
# slurm.trainer_tasks=2 makes cpt-sched start the trainer step with `srun --mpi=pmix --ntasks=2`, whose ranks talk
# through Open MPI (trainer/dp.h's MPI backend, PMIx from Slurm). The job completes with every group trained once,
# rank 1 following rank 0 to the last step.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
command -v mpirun > /dev/null || { echo "SKIP: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so was not built (no MPI found by cmake)"; exit 77; }
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=20 G=4
roles=(roles.rollout=1 roles.reward=1 slurm.trainer_tasks=2 slurm.trainer_gpus=0 slurm.rollout_gpus=0
       slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=$STEPS train.groups_per_step=$G
       train.threads=1 train.device=cpu rollout.device=cpu weights.transport=file)

t0=$SECONDS
job=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" "${roles[@]}" run.dir="$T/job")
wait_job_done "$job" 120
t_job=$((SECONDS - t0))
[ "$(job_field "$job" JobState)" = COMPLETED ] || fail "job $job ended $(job_field "$job" JobState)"
grep -qh "trainer rank 1 of 2 (bootstrap mpi)" "$T/job/logs/"trainer*.log || fail "no second trainer rank over MPI"
grep -qh "trainer rank 1 ends at step $STEPS with rank 0 (status 0)" "$T/job/logs/"trainer*.log ||
  fail "rank 1 did not end at step $STEPS with rank 0"
summary=$(check_groups "$T/job" $STEPS $G) || fail "exactly-once: $summary"
echo "test_grpo_ranks (slurm): ok (job $job, 2 trainer ranks under srun --mpi=pmix, $STEPS steps in ${t_job}s; $summary)"
