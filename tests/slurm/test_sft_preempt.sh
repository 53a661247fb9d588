#!/usr/bin/env bash
# Preemption on a real single-node Slurm: sbatch/sft.sh runs in the preemptible partition `low`; a job in `high` that
# needs the whole node arrives; the SFT job gets USR1 (preempt_send_user_signal, --signal=B:USR1), checkpoints at its
# step boundary, is requeued, waits while the high job runs, resumes from `latest` and finishes. The final weights
# equal an uninterrupted run's bitwise.
set -euo pipefail
source tests/slurm/sft_lib.sh

sft_reference
t0=$SECONDS
job=$(sft_submit -p low)
wait_run_step "$T/job" 25 240
cpus=$(scontrol show node -o | tr ' ' '\n' | grep '^CPUTot=' | cut -d= -f2)
high=$(sbatch --parsable -p high -c "$cpus" --output="$T/high.log" --wrap "echo high start \$(date +%s.%N); sleep 5; echo high end \$(date +%s.%N)")
echo "preempting job $job at step $(run_step "$T/job") with job $high ($cpus CPUs in high)"
wait_job_done "$high" 120
wait_job_done "$job" 400
t_job=$((SECONDS - t0))

sft_check_resumed "$job" preemption
grep -q "stopping: the trainer checkpoints" "$T/job.log" || fail "cpt-sched did not stop on the preemption signal"
# the high job ran while the low job was off the node: it started after the low job's stop
grep -q "high end" "$T/high.log" || fail "the high job did not run"
sft_check_weights preempted
echo "test_sft_preempt: ok ($STEPS steps; reference ${t_ref}s; job $job preempted by $high, stopped at step" \
     "$stopped, resumed from step-$stopped, finished in ${t_job}s; final model.safetensors equal (cmp))"
