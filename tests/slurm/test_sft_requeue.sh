#!/usr/bin/env bash
# sbatch sbatch/sft.sh on a real single-node Slurm; `scontrol requeue` mid-run: the trainer checkpoints at its step
# boundary, the job reruns (SLURM_RESTART_COUNT=1), resumes from `latest` with no user action and finishes. The final
# weights equal an uninterrupted run's bitwise.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/slurm/lib.sh
STEPS=120
args=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
      data.eval=examples/data/arithmetic_rl_eval.jsonl train.steps=$STEPS train.log_every=1 train.eval_every=0
      train.eval_generate=0 train.eval_max_examples=16 train.threads=1 checkpoint.every=10 run.progress_every_s=5)

# the uninterrupted reference, on this machine
t0=$SECONDS
"$BUILD/cpt" run "${args[@]}" run.dir="$T/ref" 2> "$T/ref.log" || fail "reference run"
t_ref=$((SECONDS - t0))

t0=$SECONDS
job=$(sbatch --parsable --gres=none -c 2 --output="$T/job.log" sbatch/sft.sh "${args[@]}" run.dir="$T/job" \
      slurm.trainer_gpus=0 slurm.trainer_cpus=1)
wait_run_step "$T/job" 25 240
scontrol requeue "$job"
echo "requeued job $job at step $(run_step "$T/job")"
wait_job_done "$job" 400
t_job=$((SECONDS - t0))

[ "$(job_field "$job" Restarts)" -ge 1 ] || fail "job $job was not restarted"
grep -q "cpt-sched: job $job, restart 1" "$T/job.log" || fail "no second start (SLURM_RESTART_COUNT=1) in the job log"
stopped=$(grep -o 'stopping at step [0-9]*' "$T/job/logs/trainer.log" | head -1 | awk '{print $4}')
[ -n "$stopped" ] || fail "the trainer did not stop at a step boundary on the requeue"
grep -q "resumed from .*step-$stopped" "$T/job/logs/trainer.log" || fail "the rerun did not resume from step-$stopped"
[ "$stopped" -lt "$STEPS" ] || fail "the requeue came after the end"
cmp "$T/ref/checkpoints/step-$STEPS/model/model.safetensors" "$T/job/checkpoints/step-$STEPS/model/model.safetensors" ||
  fail "the requeued run's final weights differ from the uninterrupted run's"
echo "test_sft_requeue: ok ($STEPS steps; reference ${t_ref}s; job $job stopped at step $stopped on requeue," \
     "resumed from step-$stopped, finished in ${t_job}s; final model.safetensors equal (cmp))"
