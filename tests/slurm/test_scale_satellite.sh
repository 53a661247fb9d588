#!/usr/bin/env bash
# Satellite jobs under Slurm: a GRPO job (sync mode, tiny random model) whose allocation fits exactly its trainer,
# one rollout and one reward step (3 CPUs). `cpt-scale rollout=2` finds no room inside, so cpt-sched submits a
# satellite job that runs cpt-rollout against the run's queue over TCP (password file): it shows in squeue, in
# `cpt-scale`'s table and among `cpt-queue stats`'s consumers, and makes groups. `scontrol requeue` of the main job
# drains it (its batch script gets TERM, the worker finishes what it holds, the job leaves COMPLETED, not killed);
# the rerun reads the desired count back from the queue's control hash and submits a new satellite, which
# `cpt-scale rollout=1` drains the same way. Last, a satellite whose main job ends under it drains by itself,
# and one that starts after its main job is over does not start its worker.
# The run finishes with every group trained exactly once (the trainer's data cursor and outstanding ids).
# queue.claim_idle_ms=3000 keeps it short: after the requeue, messages left pending by the first attempt's workers
# are claimed only after this idle time (60 s by default), and a sync-mode step may wait for one of them.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=${SAT_STEPS:-600} G=4
R="$T/job"
RUN=grpo-arithmetic
t0=$SECONDS
job=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 slurm.satellite_check_s=2 roles.drain_grace_s=30 queue.claim_idle_ms=3000 \
      train.steps=$STEPS train.groups_per_step=$G run.dir="$R")
wait_run_step "$R" 3 300

# The queue listens on TCP for satellites, with a password (mode 0600) that the port asks for.
port=$(grep 'for satellite jobs' "$T/job.log" | grep -o 'redis://[^ ]*' | head -1 | sed 's/.*://' || true)
[ -n "$port" ] || fail "cpt-sched did not open the queue on TCP for satellites"
[ "$(stat -c %a "$R/redis.pass")" = 600 ] || fail "redis.pass is not mode 0600"
noauth=$(redis-cli -h 127.0.0.1 -p "$port" PING 2>&1 || true)
echo "$noauth" | grep -q NOAUTH || fail "the TCP port answered without the password: $noauth"
export REDISCLI_AUTH
REDISCLI_AUTH=$(cat "$R/redis.pass")
control() { redis-cli -s "$R/redis.sock" HGET "cpt:$RUN:control" "$1"; }

"$BUILD/cpt-scale" --run "$R" rollout=2 | grep -q "desired: rollout=2" || fail "cpt-scale rollout=2"
sat=""
for _ in $(seq 1 40); do
  sat=$(squeue -h --name="cpt-sat-$RUN-rollout" -o %i | head -1); [ -n "$sat" ] && break; sleep 0.5
done
[ -n "$sat" ] || fail "no satellite job in squeue after cpt-scale rollout=2"
t_up=$SECONDS
wait_job_state "$sat" RUNNING 60
[ "$(job_field "$sat" Comment)" = "cpt-main:$job" ] || fail "satellite $sat comment: $(job_field "$sat" Comment)"
for _ in $(seq 1 60); do [ "$(control running_rollout)" = 2 ] && break; sleep 0.5; done
[ "$(control running_rollout)" = 2 ] || fail "running_rollout stayed $(control running_rollout)"
[ "$(control inside_rollout)" = 1 ] || fail "inside_rollout is $(control inside_rollout): the allocation had no room"
"$BUILD/cpt-scale" --run "$R" > "$T/table"
cat "$T/table"
grep -Eq "^rollout +2 +2 +1 +1  $sat:RUNNING$" "$T/table" || fail "cpt-scale table after scale-up"
up_step=$(run_step "$R")

# The satellite's worker is a consumer of the run's queue and makes groups.
for _ in $(seq 1 60); do
  "$BUILD/cpt-queue" stats --run "$R" > "$T/stats" 2>&1 || true
  grep -q "rollout-sat0" "$T/stats" && break; sleep 0.5
done
grep -q "prompts .* rollout-sat0" "$T/stats" || { cat "$T/stats"; fail "rollout-sat0 is not a consumer of the prompts"; }
wait_run_step "$R" $((up_step + 8)) 300

# A requeue of the main job: cpt-sched drains the satellite with the rest (it leaves COMPLETED, not killed), and
# the rerun submits a new one for the desired count it reads back from the queue's control hash.
scontrol requeue "$job"
t_rq=$SECONDS
wait_job_done "$sat" 90
[ "$(job_field "$sat" ExitCode)" = "0:0" ] || fail "satellite $sat exit code $(job_field "$sat" ExitCode) on requeue"
made1=$(grep -o 'stopping: [0-9]* groups' "$R/logs/rollout-sat0.log" | head -1 | awk '{print $2}')
[ -n "$made1" ] && [ "$made1" -ge 1 ] || { tail "$R/logs/rollout-sat0.log"; fail "the satellite made no group"; }
# cpt-sched drains it; the satellite's own poll of the main job (now COMPLETING or PENDING) may get there first,
# and either way it drains once
grep -q "draining satellite rollout-sat0 (job $sat" "$T/job.log" || fail "cpt-sched did not drain the satellite"
grep -Eq "satellite: draining \((signal|main job $job is [A-Z_]+)\)" "$R/logs/rollout-sat0.log" ||
  fail "the satellite did not drain"
[ "$(grep -c "satellite: draining" "$R/logs/rollout-sat0.log")" = 1 ] || fail "the satellite drained twice"
sat2=""
for _ in $(seq 1 240); do
  [ "$(job_field "$job" JobState)" = PENDING ] && [ "$(job_field "$job" Reason)" = BeginTime ] &&
    scontrol update JobId="$job" StartTime=now 2>/dev/null || true
  sat2=$(squeue -h --name="cpt-sat-$RUN-rollout" -t PD,R -o %i | head -1); [ -n "$sat2" ] && break; sleep 0.5
done
[ -n "$sat2" ] || fail "the requeued job submitted no satellite for rollout=2"
grep -q "cpt-sched: job $job, restart 1" "$T/job.log" || fail "no second start of the main job"
rq_s=$((SECONDS - t_rq))
wait_job_state "$sat2" RUNNING 60
rq_step=$(run_step "$R")
wait_run_step "$R" $((rq_step + 8)) 300

"$BUILD/cpt-scale" --run "$R" rollout=1 > /dev/null || fail "cpt-scale rollout=1"
t_down=$SECONDS
wait_job_done "$sat2" 90
down_s=$((SECONDS - t_down))
down_step=$(run_step "$R")
for _ in $(seq 1 20); do [ "$(control satellite_jobs_rollout)" = "-" ] && break; sleep 0.5; done
[ "$(control satellite_jobs_rollout)" = "-" ] || fail "cpt-sched still lists $(control satellite_jobs_rollout)"
[ "$(control running_rollout)" = 1 ] || fail "running_rollout is $(control running_rollout) after scale-down"
[ "$(job_field "$sat2" ExitCode)" = "0:0" ] || fail "satellite $sat2 exit code $(job_field "$sat2" ExitCode)"
log2="$R/logs/rollout-sat0-r1.log"
grep -q "satellite: draining (signal)" "$log2" || fail "the second satellite did not get the drain signal"
made2=$(grep -o 'stopping: [0-9]* groups' "$log2" | head -1 | awk '{print $2}')
[ -n "$made2" ] && [ "$made2" -ge 1 ] || { tail "$log2"; fail "the second satellite made no group"; }

wait_job_done "$job" 600
dt=$((SECONDS - t0))
grep -q "cpt: submitted satellite job $sat for rollout-sat0 " "$T/job.log" || fail "no submission in the job log"
grep -q "cpt: satellite rollout-sat0 (job $sat) drained" "$T/job.log" || fail "no drain of $sat in the job log"
grep -q "cpt: submitted satellite job $sat2 for rollout-sat0-r1 " "$T/job.log" || fail "no resubmission after the requeue"
grep -q "cpt: satellite rollout-sat0-r1 (job $sat2) drained" "$T/job.log" || fail "no drain of $sat2 in the job log"
! grep -q "cpt: started rollout-1" "$T/job.log" || fail "a second rollout step started inside a full allocation"
summary=$(check_groups "$R" $STEPS $G) || fail "exactly-once: $summary"
# A satellite that starts after its main job is over does not start its worker (a TERM sent before the worker set
# its handler would kill it instead of draining it).
late=$(sbatch --parsable --output="$T/late.log" "$BUILD/cpt-satellite.sh" "$job" 1 sh -c "touch '$T/late.ran'")
wait_job_done "$late" 60
grep -q "satellite: main job $job is COMPLETED; the worker is not started" "$T/late.log" || { cat "$T/late.log"; fail "late"; }
[ ! -e "$T/late.ran" ] || fail "the late satellite started its worker"
# A satellite whose main job ends under it (cpt-sched killed before it could cancel it) drains by itself.
main2=$(sbatch --parsable --output=/dev/null --wrap 'sleep 8')
for _ in $(seq 1 60); do [ "$(job_field "$main2" JobState)" = RUNNING ] && break; sleep 0.5; done
[ "$(job_field "$main2" JobState)" = RUNNING ] || fail "job $main2 did not start"
orphan=$(sbatch --parsable --output="$T/orphan.log" "$BUILD/cpt-satellite.sh" "$main2" 1 \
         sh -c 'trap "echo worker drained; exit 0" TERM; while :; do sleep 0.2; done')
wait_job_done "$orphan" 60
# The check may land while Slurm still finishes the main job (COMPLETING) or after (COMPLETED): both drain.
grep -Eq "satellite: draining \(main job $main2 is COMPLET(ING|ED)\)" "$T/orphan.log" || { cat "$T/orphan.log"; fail "orphan"; }
grep -q "worker drained" "$T/orphan.log" || fail "the orphaned satellite's worker did not get TERM"
[ -z "$(squeue -h --name="cpt-sat-$RUN-rollout,cpt-sat-$RUN-reward" -t PD,R,CG -o %i)" ] || fail "satellites left after the run"
echo "test_scale_satellite: ok ($STEPS steps in ${dt}s; satellite job $sat up at step $up_step made $made1 groups," \
     "drained on the requeue; the rerun resubmitted job $sat2 ${rq_s}s after the requeue, it made $made2 groups and" \
     "drained in ${down_s}s at step $down_step on scale-down; $summary)"
