#!/usr/bin/env bash
# A satellite worker of a cpt run, submitted by cpt-sched (scheduler/satellite.h); installed beside the cpt programs.
# cpt-satellite.sh MAIN_JOB CHECK_S PROGRAM ARGS...: runs the worker; TERM, USR1 or INT drain it (TERM: it finishes
# or returns what it holds); USR2 (Slurm's --signal=B:USR2@N: the job is preempted or near its time limit) makes it
# hand back what it holds at once (USR2 to the worker); it drains by itself once the main job is no longer running
# (checked every CHECK_S seconds), and it ends as soon as the worker exits (not at the next check).
main=$1 every=$2
shift 2
echo "satellite: job ${SLURM_JOB_ID:-?} on $(hostname) for main job $main: $*"
# main_state: the main job's state (fails when squeue does not answer); main_live STATE: it still runs.
main_state() { st=$(squeue -h -t all -j "$main" -o %T 2>/dev/null) && [ -n "$st" ] && echo "$st"; }
main_live() { case "$1" in RUNNING|CONFIGURING|SUSPENDED) return 0 ;; esac; return 1; }
# A main job already over (the satellite waited in the queue past its end): no worker to start, nothing to drain.
# Checked before the start because a TERM that reaches a worker before its handler is set kills it instead.
if st=$(main_state) && ! main_live "$st"; then
  echo "satellite: main job $main is $st; the worker is not started"
  exit 0
fi
"$@" &
w=$!
stopped=0
drain() {
  [ "$stopped" = 1 ] && return
  stopped=1
  echo "satellite: draining ($1)"
  kill -TERM "$w" 2>/dev/null
}
# The job ends in seconds: no time to finish what the worker holds (also after a drain began).
handback() {
  [ "$handed" = 1 ] && return
  handed=1 stopped=1
  echo "satellite: the job ends (preempted or near its time limit): the worker hands back what it holds"
  kill -USR2 "$w" 2>/dev/null
}
handed=0
trap 'drain signal' TERM USR1 INT
trap handback USR2
misses=0 rc=
while [ -z "$rc" ]; do
  if st=$(main_state); then
    misses=0
    main_live "$st" || drain "main job $main is $st"
  else
    misses=$((misses + 1))
    [ "$misses" -ge 3 ] && drain "main job $main is gone"
  fi
  # Whichever ends first: the worker, the pause before the next check, or a trapped signal (bash 4.3's `wait -n`,
  # no pid arguments). A worker reaped by it keeps its status for `wait $w`.
  sleep "$every" & s=$!
  wait -n 2>/dev/null || true
  kill "$s" 2>/dev/null
  wait "$s" 2>/dev/null
  kill -0 "$w" 2>/dev/null || { wait "$w"; rc=$?; }
done
echo "satellite: worker exited with status $rc"
exit "$rc"
