#!/usr/bin/env bash
# Two CPU trainer ranks under Slurm (issue 21): sbatch sbatch/sft.sh with slurm.trainer_tasks=2 runs the trainer as
# one `srun --mpi=pmix --ntasks=2` step whose ranks average over Open MPI; `scontrol requeue` mid-run stops both at
# the same step with a checkpoint, the job reruns and resumes; the final weights equal those of the same two ranks
# run locally by `cpt run` (mpirun), bitwise.
set -euo pipefail
source tests/slurm/sft_lib.sh
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found (apt-get install openmpi-bin)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so not built (no MPI found by cmake)"; exit 77; }
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
STEPS=40 # a shorter run than sft_lib's (the later override wins)
args+=(train.steps=$STEPS slurm.trainer_tasks=2)

sft_reference
grep -q "data parallel rank 1/2 on the CPU" "$T/ref/logs/trainer.rank1.log" || fail "the local reference did not run 2 ranks"
t0=$SECONDS
job=$(sft_submit)
wait_run_step "$T/job" 15 240
scontrol requeue "$job"
echo "requeued job $job at step $(run_step "$T/job")"
wait_job_done "$job" 400
t_job=$((SECONDS - t0))

grep -q "ok    ranks .*2 CPU trainer ranks over Open MPI, started by srun --mpi=pmix" "$T/job.log" ||
  fail "preflight did not report the ranks"
grep -q "data parallel rank 1/2 on the CPU (Open MPI" "$T/job/logs/trainer.rank1.log" || fail "rank 1 not over Open MPI"
sft_check_resumed "$job" "the requeue"
s1=$(grep -o 'stopping at step [0-9]*' "$T/job/logs/trainer.rank1.log" | head -1 | awk '{print $4}')
[ "$s1" = "$stopped" ] || fail "rank 0 stopped at step $stopped, rank 1 at '$s1'"
grep -q "resumed from .*step-$stopped" "$T/job/logs/trainer.rank1.log" || fail "rank 1 did not resume from step-$stopped"
sft_check_weights "2-rank requeued"
echo "test_sft_ranks: ok ($STEPS steps on 2 CPU ranks; reference ${t_ref}s; job $job: both ranks stopped at step" \
     "$stopped on requeue, resumed, finished in ${t_job}s; final weights equal the local mpirun run's (cmp))"
