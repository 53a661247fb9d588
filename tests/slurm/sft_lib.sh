# Shared by the SFT interruption tests (sourced, not a test; brings lib.sh's private cluster): the SFT run they
# interrupt, its uninterrupted reference, the submission through sbatch/sft.sh, and the checks that the job stopped at
# a step boundary, resumed from that step and ended with the reference's weights bitwise.
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/slurm/lib.sh
STEPS=120
args=(examples/sft_arithmetic.toml data.train=examples/data/arithmetic_rl_train.jsonl
      data.eval=examples/data/arithmetic_rl_eval.jsonl train.steps=$STEPS train.log_every=1 train.eval_every=0
      train.eval_generate=0 train.eval_max_examples=16 train.threads=1 checkpoint.every=10 run.progress_every_s=5)

sft_reference() { # the uninterrupted run in $T/ref, on this machine; sets t_ref
  local t0=$SECONDS
  "$BUILD/cpt" run "${args[@]}" run.dir="$T/ref" 2> "$T/ref.log" || fail "reference run"
  t_ref=$((SECONDS - t0))
}
sft_submit() { # [SBATCH_OPTION ...]: the job in $T/job; prints its id
  sbatch --parsable "$@" --gres=none -c 2 --output="$T/job.log" sbatch/sft.sh "${args[@]}" run.dir="$T/job" \
    slurm.trainer_gpus=0 slurm.trainer_cpus=1
}
sft_check_resumed() { # JOB WHY ("preemption", "the requeue"): sets stopped, the step the trainer stopped at
  [ "$(job_field "$1" Restarts)" -ge 1 ] || fail "job $1 was not requeued"
  grep -q "cpt-sched: job $1, restart 1" "$T/job.log" || fail "no second start (SLURM_RESTART_COUNT=1) in the job log"
  stopped=$(grep -o 'stopping at step [0-9]*' "$T/job/logs/trainer.log" | head -1 | awk '{print $4}')
  [ -n "$stopped" ] || fail "the trainer did not stop at a step boundary on $2"
  grep -q "resumed from .*step-$stopped" "$T/job/logs/trainer.log" || fail "the rerun did not resume from step-$stopped"
}
sft_check_weights() { # WHAT ("preempted", "requeued")
  cmp "$T/ref/checkpoints/step-$STEPS/model/model.safetensors" "$T/job/checkpoints/step-$STEPS/model/model.safetensors" ||
    fail "the $1 run's final weights differ from the uninterrupted run's"
}
