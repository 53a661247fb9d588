# Shared by the slurm tests (sourced, not a test): a private cluster, waiting on job states and run steps.
# Needs: SRC BUILD set; defines T (temp dir) and starts the cluster in $T/cluster, stopped on exit; with
# CLUSTER_GPUS=N set before sourcing, the node declares N GPUs (cluster.sh).
T=$(mktemp -d /tmp/cpt-slurm-XXXXXX)
chmod 755 "$T" # munged (user munge) keeps its socket and key below it
pids=()
slurm_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # jobs of this cluster end with it; scancel first so no step outlives the daemons
  local jobs
  jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true) # timeouts: the controller may be what failed
  if [ -n "$jobs" ]; then
    timeout 5 scancel --quiet $jobs 2>/dev/null || true
    for _ in $(seq 1 40); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    # a cpt-sched still draining (roles.drain_grace_s) would outlive the daemons with its steps: kill what is left
    jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      timeout 5 scancel --quiet --full --signal=KILL $jobs 2>/dev/null || true
      for _ in $(seq 1 40); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    fi
  fi
  tests/slurm/cluster.sh stop "$T/cluster" || true
  [ -n "${KEEP_T:-}" ] && echo "kept $T" >&2 || rm -rf "$T"
}
trap slurm_cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for f in "$T"/*.log "$T"/*/logs/*.log; do [ -f "$f" ] && { echo "== $f"; tail -30 "$f"; } >&2; done
  exit 1
}
tests/slurm/cluster.sh start "$T/cluster" "${CLUSTER_GPUS:-0}"
source "$T/cluster/env"
export CPT_BIN=$BUILD OMP_NUM_THREADS=1

# The pollers below run many times a second in the tests, and a process costs some 3 ms of CPU here (fork and
# exec on a VM): one process each, the rest in bash.
# job_field JOB FIELD: a field of the job's record (empty when Slurm does not know the job)
job_field() {
  local rec
  rec=$(scontrol show job "$1" -o 2>/dev/null) || true
  if [[ " $rec" =~ \ $2=([^ ]*) ]]; then echo "${BASH_REMATCH[1]}"; fi
}
# the step of the newest metrics line of a run (empty before the first)
run_step() {
  awk 'match($0, /"step":[0-9]+/) { s = substr($0, RSTART + 7, RLENGTH - 7) } END { if (s != "") print s }' \
    "$1/metrics.jsonl" 2>/dev/null || true
}
wait_run_step() { # RUN_DIR STEP TIMEOUT_S
  local end=$((SECONDS + $3)) s
  while [ $SECONDS -lt $end ]; do
    s=$(run_step "$1"); [ -n "$s" ] && [ "$s" -ge "$2" ] && return 0
    sleep 0.2
  done
  fail "$1 did not reach step $2 in $3 s"
}
# waits for a final state; nudges a requeued job that Slurm holds in PENDING (BeginTime)
wait_job_done() { # JOB TIMEOUT_S
  local end=$((SECONDS + $2)) st reason
  while [ $SECONDS -lt $end ]; do
    st=$(job_field "$1" JobState); reason=$(job_field "$1" Reason)
    case "$st" in
      COMPLETED) return 0 ;;
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) fail "job $1 ended $st" ;;
      PENDING) [ "$reason" = BeginTime ] && scontrol update JobId="$1" StartTime=now 2>/dev/null || true ;;
    esac
    sleep 1
  done
  fail "job $1 not done after $2 s (state $st, reason $reason)"
}
wait_job_state() { # JOB STATE TIMEOUT_S
  local end=$((SECONDS + $3))
  while [ $SECONDS -lt $end ]; do [ "$(job_field "$1" JobState)" = "$2" ] && return 0; sleep 0.2; done
  fail "job $1 never $2 (now $(job_field "$1" JobState))"
}
