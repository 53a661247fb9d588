#!/usr/bin/env bash
# A satellite job (scheduler/cpt-satellite.sh) ends as soon as its worker exits, not at its next check on the main
# job: with a check every 30 s, a worker that exits by itself after 1 s, and one that drains on the TERM of
# `scancel --batch --signal=TERM` (cpt-sched's drain), each end their job within a few seconds, with the worker's
# exit status. The periodic check still drains a worker whose main job ends (test_scale_satellite.sh).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/slurm/lib.sh
main=$(sbatch --parsable --output=/dev/null --wrap 'sleep 120')
wait_job_state "$main" RUNNING 30
# JOB SECONDS: waits for the job's script to end (COMPLETING: Slurm still cleans up after it); fails past SECONDS.
# The bounds below are half the satellite's 30 s check: under load on a small machine Slurm's own bookkeeping takes
# seconds, and an end at the next check would still fail.
sat_ended_within() {
  local end=$((SECONDS + $2))
  while [ $SECONDS -lt $end ]; do
    case "$(job_field "$1" JobState)" in COMPLETING|COMPLETED|FAILED) return 0 ;; esac
    sleep 0.2
  done
  fail "satellite job $1 still $(job_field "$1" JobState) $2 s later"
}

# a worker that exits by itself
a=$(sbatch --parsable --output="$T/a.log" "$BUILD/cpt-satellite.sh" "$main" 30 sh -c 'sleep 1; exit 3')
wait_job_state "$a" RUNNING 30
t0=$SECONDS
sat_ended_within "$a" 15
a_s=$((SECONDS - t0))
grep -q "satellite: worker exited with status 3" "$T/a.log" || { cat "$T/a.log"; fail "worker status not passed on"; }
[ "$(job_field "$a" ExitCode)" = "3:0" ] || fail "satellite $a exit code $(job_field "$a" ExitCode)"

# a worker drained by cpt-sched's signal
b=$(sbatch --parsable --output="$T/b.log" "$BUILD/cpt-satellite.sh" "$main" 30 \
    sh -c 'trap "echo worker drained; exit 0" TERM; while :; do sleep 0.2; done')
wait_job_state "$b" RUNNING 30
for _ in $(seq 1 50); do grep -q "satellite: job" "$T/b.log" 2>/dev/null && break; sleep 0.1; done
sleep 1 # the worker's trap is set
t0=$SECONDS
scancel --batch --signal=TERM "$b"
sat_ended_within "$b" 15
b_s=$((SECONDS - t0))
grep -q "satellite: draining (signal)" "$T/b.log" && grep -q "worker drained" "$T/b.log" || { cat "$T/b.log"; fail "drain"; }
[ "$(job_field "$b" ExitCode)" = "0:0" ] || fail "satellite $b exit code $(job_field "$b" ExitCode)"
[ "$(job_field "$main" JobState)" = RUNNING ] || fail "the main job ended"
echo "test_satellite_exit: ok (check every 30 s; a worker exiting by itself ended its job in ${a_s}s with its" \
     "status 3; a drained worker ended its job ${b_s}s after the drain signal)"
