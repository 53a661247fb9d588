#!/usr/bin/env bash
# sbatch sbatch/sft.sh on a real single-node Slurm; `scontrol requeue` mid-run: the trainer checkpoints at its step
# boundary, the job reruns (SLURM_RESTART_COUNT=1), resumes from `latest` with no user action and finishes. The final
# weights equal an uninterrupted run's bitwise.
set -euo pipefail
source tests/slurm/sft_lib.sh

sft_reference
t0=$SECONDS
job=$(sft_submit)
wait_run_step "$T/job" 25 240
scontrol requeue "$job"
echo "requeued job $job at step $(run_step "$T/job")"
wait_job_done "$job" 400
t_job=$((SECONDS - t0))

sft_check_resumed "$job" "the requeue"
[ "$stopped" -lt "$STEPS" ] || fail "the requeue came after the end"
sft_check_weights requeued
echo "test_sft_requeue: ok ($STEPS steps; reference ${t_ref}s; job $job stopped at step $stopped on requeue," \
     "resumed from step-$stopped, finished in ${t_job}s; final model.safetensors equal (cmp))"
