#!/usr/bin/env bash
# GRPO with two trainer ranks through sbatch/grpo_4gpu.sh on a real single-node Slurm, on CPUs:
# slurm.trainer_tasks=2 makes cpt-sched start the trainer step with `srun --mpi=pmix --ntasks=2`, whose ranks talk
# through Open MPI (trainer/dp.h's MPI backend, PMIx from Slurm); rank 1 follows rank 0 (trainer/online_ranks.h).
# `scontrol requeue` mid-run stops both ranks at the same step with a checkpoint; the job reruns, both resume from
# it, and the run finishes with every group trained once and the final weights of the same two ranks run locally by
# `cpt run` (mpirun), bitwise. The ranks shard their optimizer (train.zero = 1, ZeRO-1): each writes its shard at the
# requeue's checkpoint and reads it back on the rerun.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
command -v mpirun > /dev/null || { echo "SKIP: Open MPI not installed (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
[ -f "$BUILD/libcpt-coll-mpi.so" ] || { echo "SKIP: $BUILD/libcpt-coll-mpi.so was not built (no MPI found by cmake)"; exit 77; }
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=40 G=4
roles=(roles.rollout=1 roles.reward=1 slurm.trainer_tasks=2 slurm.trainer_gpus=0 slurm.rollout_gpus=0
       slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=$STEPS train.groups_per_step=$G
       train.threads=1 train.device=cpu rollout.device=cpu weights.transport=file train.zero=1)

t0=$SECONDS
"$BUILD/cpt" run "${GRPO_ARGS[@]}" "${roles[@]}" run.dir="$T/ref" 2> "$T/ref.log" || fail "local two-rank reference run"
t_ref=$((SECONDS - t0))
grep -qh "trainer rank 1 ends at step $STEPS" "$T/ref/logs/"trainer*.log || fail "the reference did not run 2 ranks"

t0=$SECONDS
job=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" "${roles[@]}" run.dir="$T/job")
wait_run_step "$T/job" 8 120
scontrol requeue "$job"
echo "requeued job $job at step $(run_step "$T/job")"
wait_job_done "$job" 240
t_job=$((SECONDS - t0))

[ "$(job_field "$job" Restarts)" -ge 1 ] || fail "job $job was not restarted by the requeue"
grep -qh "trainer rank 1 of 2 (bootstrap mpi)" "$T/job/logs/"trainer*.log || fail "no second trainer rank over MPI"
grep -qh "ZeRO-1 rank 1/2" "$T/job/logs/"trainer*.log || fail "rank 1 did not shard its optimizer"
s0=$(grep -o 'stopping at step [0-9]*' "$T/job/logs/trainer.log" | awk '{print $4}' | head -1)
s1=$(grep -ho 'trainer rank 1 ends at step [0-9]*' "$T/job/logs/"trainer*.log | awk '{print $7}' | head -1)
[ -n "$s0" ] && [ "$s0" = "$s1" ] || fail "on the requeue rank 0 stopped at step '$s0', rank 1 at '$s1'"
grep -q "resumed from .*step-$s0" "$T/job/logs/trainer.log" || fail "rank 0 did not resume from step-$s0"
grep -qh "trainer rank 1 resumed from .*step-$s0" "$T/job/logs/"trainer*.log || fail "rank 1 did not load step-$s0"
grep -qh "trainer rank 1 ends at step $STEPS with rank 0 (status 0)" "$T/job/logs/"trainer*.log ||
  fail "rank 1 did not end at step $STEPS with rank 0"
summary=$(check_groups "$T/job" $STEPS $G) || fail "exactly-once: $summary"
for r in 0 1; do
  [ -f "$T/job/checkpoints/step-$STEPS/optimizer-rank-$r-of-2.safetensors" ] || fail "no optimizer shard $r at step $STEPS"
done
cmp "$T/ref/checkpoints/step-$STEPS/model/model.safetensors" "$T/job/checkpoints/step-$STEPS/model/model.safetensors" ||
  fail "the requeued two-rank job's final weights differ from the local two-rank run's"
# The run scancelled at two ranks and submitted again at one (the run-guide's "More trainer ranks"): the one rank
# re-shards the two ranks' optimizer files and finishes the run, every group once.
cut=(roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 slurm.trainer_cpus=1
     slurm.rollout_cpus=1 slurm.reward_cpus=1 train.steps=$STEPS train.groups_per_step=$G train.threads=1
     train.device=cpu rollout.device=cpu weights.transport=file train.zero=1)
j1=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/cut1.log" sbatch/grpo_4gpu.sh \
     "${GRPO_ARGS[@]}" "${cut[@]}" slurm.trainer_tasks=2 run.dir="$T/cut")
wait_run_step "$T/cut" 8 120
scancel "$j1"
wait_job_state "$j1" CANCELLED 120
c0=$(tr -dc '0-9' < "$T/cut/checkpoints/latest")
[ -f "$T/cut/checkpoints/step-$c0/optimizer-rank-1-of-2.safetensors" ] || fail "no 2-rank shards at the scancel (step $c0)"
j2=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/cut2.log" sbatch/grpo_4gpu.sh \
     "${GRPO_ARGS[@]}" "${cut[@]}" slurm.trainer_tasks=1 run.dir="$T/cut")
wait_job_done "$j2" 240
[ "$(job_field "$j2" JobState)" = COMPLETED ] || fail "the one-rank resubmission ended $(job_field "$j2" JobState)"
grep -q "re-sharded the policy optimizer state of .*step-$c0 (the shards of 2 ranks) for 1 ranks" \
  "$T/cut/logs/trainer.log" || fail "the one-rank resubmission did not re-shard step-$c0"
cut_summary=$(check_groups "$T/cut" $STEPS $G) || fail "exactly-once after 2 -> 1 ranks: $cut_summary"
echo "test_grpo_ranks (slurm): ok (2 ZeRO-1 trainer ranks under srun --mpi=pmix; reference ${t_ref}s; job $job requeued," \
     "both ranks stopped at step $s0, resumed, $STEPS steps in ${t_job}s; final weights equal (cmp); $summary; scancelled at" \
     "2 ranks at step $c0, resubmitted at 1 rank: re-sharded, $cut_summary)"
