#!/usr/bin/env bash
# Preemption on a real single-node Slurm: sbatch/sft.sh runs in the preemptible partition `low`; a job in `high` that
# needs the whole node arrives; the SFT job gets USR1 (preempt_send_user_signal, --signal=B:USR1), checkpoints at its
# step boundary, is requeued, waits while the high job runs, resumes from `latest` and finishes. The final weights
# equal an uninterrupted run's bitwise.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/slurm/lib.sh
STEPS=120
args=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
      data.eval=examples/data/arithmetic_rl_eval.jsonl train.steps=$STEPS train.log_every=1 train.eval_every=0
      train.eval_generate=0 train.eval_max_examples=16 train.threads=1 checkpoint.every=10 run.progress_every_s=5)

t0=$SECONDS
"$BUILD/cpt" run "${args[@]}" run.dir="$T/ref" 2> "$T/ref.log" || fail "reference run"
t_ref=$((SECONDS - t0))

t0=$SECONDS
job=$(sbatch --parsable -p low --gres=none -c 2 --output="$T/job.log" sbatch/sft.sh "${args[@]}" run.dir="$T/job" \
      slurm.trainer_gpus=0 slurm.trainer_cpus=1)
wait_run_step "$T/job" 25 240
cpus=$(scontrol show node -o | tr ' ' '\n' | grep '^CPUTot=' | cut -d= -f2)
high=$(sbatch --parsable -p high -c "$cpus" --output="$T/high.log" --wrap "echo high start \$(date +%s.%N); sleep 5; echo high end \$(date +%s.%N)")
echo "preempting job $job at step $(run_step "$T/job") with job $high ($cpus CPUs in high)"
wait_job_done "$high" 120
wait_job_done "$job" 400
t_job=$((SECONDS - t0))

[ "$(job_field "$job" Restarts)" -ge 1 ] || fail "job $job was not requeued"
grep -q "cpt-sched: job $job, restart 1" "$T/job.log" || fail "no second start in the job log"
stopped=$(grep -o 'stopping at step [0-9]*' "$T/job/logs/trainer.log" | head -1 | awk '{print $4}')
[ -n "$stopped" ] || fail "the trainer did not stop at a step boundary on preemption"
grep -q "resumed from .*step-$stopped" "$T/job/logs/trainer.log" || fail "the rerun did not resume from step-$stopped"
grep -q "stopping: the trainer checkpoints" "$T/job.log" || fail "cpt-sched did not stop on the preemption signal"
# the high job ran while the low job was off the node: it started after the low job's stop
grep -q "high end" "$T/high.log" || fail "the high job did not run"
cmp "$T/ref/checkpoints/step-$STEPS/model/model.safetensors" "$T/job/checkpoints/step-$STEPS/model/model.safetensors" ||
  fail "the preempted run's final weights differ from the uninterrupted run's"
echo "test_sft_preempt: ok ($STEPS steps; reference ${t_ref}s; job $job preempted by $high, stopped at step" \
     "$stopped, resumed from step-$stopped, finished in ${t_job}s; final model.safetensors equal (cmp))"
