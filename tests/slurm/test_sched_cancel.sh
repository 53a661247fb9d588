#!/usr/bin/env bash
# scancel ends a cpt-sched job for good; scontrol requeue is logged as Slurm's own. A GRPO job (sync mode, tiny
# random model) through sbatch/grpo_4gpu.sh: `scontrol requeue` mid-run -> cpt-sched says Slurm requeues it (and
# does not requeue it again), the rerun resumes; then `scancel` twice -> the trainer checkpoints the step it stopped
# at (checkpoints/latest advances to it within Slurm's KillWait), the job ends CANCELLED and stays so (no requeue),
# and no process of the run is left (no cpt-* step, no redis-server). Meanwhile `cpt-scale` as typed, from another
# directory and with a registry of live runs that does not hold this one (a login node's), finds the run through the
# job's comment (cpt-run:RUN_DIR), and `cpt-scale --job JOBID` too.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
R="$T/job"
job=$(XDG_STATE_HOME="$T/batch-state" sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 checkpoint.every=1000 \
      train.steps=5000 run.dir="$R")
wait_run_step "$R" 3 300

scontrol requeue "$job"
for _ in $(seq 1 120); do
  grep -q "cpt-sched: job $job requeued by Slurm" "$T/job.log" && break; sleep 0.5
done
grep -q "cpt-sched: job $job requeued by Slurm (scontrol requeue); it will resume from checkpoints/latest" \
  "$T/job.log" || fail "no requeue line from cpt-sched"
! grep -q "scontrol requeue failed" "$T/job.log" || fail "cpt-sched tried to requeue a job Slurm requeued"
! grep -q "cpt-sched: scontrol requeue $job" "$T/job.log" || fail "cpt-sched called scontrol requeue itself"
rq_step=$(tr -dc '0-9' < "$R/checkpoints/latest" || true) # the stop's checkpoint (checkpoint.every is past the test)
[ -n "$rq_step" ] || fail "no checkpoint after the requeue's stop"
for _ in $(seq 1 240); do
  [ "$(job_field "$job" JobState)" = PENDING ] && [ "$(job_field "$job" Reason)" = BeginTime ] &&
    scontrol update JobId="$job" StartTime=now 2>/dev/null || true
  grep -q "cpt-sched: job $job, restart 1" "$T/job.log" && break; sleep 0.5
done
grep -q "cpt-sched: job $job, restart 1" "$T/job.log" || fail "the requeued job did not start again"
wait_run_step "$R" $((rq_step + 3)) 300
grep -q "resumed from" "$R/logs/trainer.log" || fail "the rerun did not resume"

[ "$(job_field "$job" Comment)" = "cpt-run:$R" ] || fail "job comment: $(job_field "$job" Comment)"
(cd / && XDG_STATE_HOME="$T/login-state" "$BUILD/cpt-scale") > "$T/scale.out" 2> "$T/scale.err" ||
  fail "cpt-scale without --run: $(cat "$T/scale.err")"
grep -q "cpt-scale: using the live run $R (job $job, host $(hostname -s), started " "$T/scale.err" ||
  fail "cpt-scale did not find the run from the job's comment: $(cat "$T/scale.err")"
grep -q "^rollout " "$T/scale.out" || fail "no cpt-scale table"
(cd / && XDG_STATE_HOME="$T/login-state" "$BUILD/cpt-scale" --job "$job" reward=1) | grep -q "^desired: reward=1" ||
  fail "cpt-scale --job $job"

t_cancel=$SECONDS
scancel "$job"
sleep 1
scancel "$job" 2>/dev/null || true # a second scancel changes nothing
wait_job_state "$job" CANCELLED 60
cancel_s=$((SECONDS - t_cancel))
sleep 4 # a requeue would show now (PENDING, Restarts 2)
[ "$(job_field "$job" JobState)" = CANCELLED ] || fail "job $job is $(job_field "$job" JobState) after scancel"
[ "$(job_field "$job" Restarts)" = 1 ] || fail "job $job restarted $(job_field "$job" Restarts) times"
grep -q "cpt-sched: job $job cancelled (scancel" "$T/job.log" || fail "no cancel line from cpt-sched"
[ "$(grep -c "cpt-sched: scontrol requeue" "$T/job.log" || true)" = 0 ] || fail "cpt-sched requeued a cancelled job"
stop_step=$(run_step "$R")
latest=$(tr -dc '0-9' < "$R/checkpoints/latest" || true)
[ "$latest" = "$stop_step" ] || fail "checkpoints/latest is step '$latest', the run stopped at step $stop_step"
grep -q "online: stopping at step $stop_step" "$R/logs/trainer.log" || fail "the trainer did not stop on request"
left=$(pgrep -af -- "$R" || true)
[ -z "$left" ] || fail "processes of the run left after scancel: $left"
[ ! -e "$R/redis.sock" ] && [ ! -e "$R/redis.pid" ] || fail "the run's redis-server did not shut down"
echo "test_sched_cancel: ok (job $job: scontrol requeue at step $rq_step logged as Slurm's, resumed; scancel at" \
     "step $stop_step -> CANCELLED in ${cancel_s}s, latest = step $latest, no process left)"
