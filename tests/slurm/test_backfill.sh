#!/usr/bin/env bash
# Backfill: rollout satellites on the preemptible `low` partition (cluster.sh), taken back by `high` jobs while the run
# goes on. The main GRPO job (sync mode, tiny model) runs in `high` with room for its trainer, one rollout and one
# reward step; `cpt-scale rollout=3` sends two rollout workers to satellite jobs in `low` (slurm.satellite_partition).
# Three times a `high` job asks for every CPU the main job does not hold: Slurm preempts the satellites, sends
# their batch script USR2 at once (--signal=B:USR2@N with preempt_send_user_signal), the worker hands back what it
# holds and the job ends without waiting for GraceTime, and cpt-sched submits new satellites, which pend until the
# `high` job is done. Then a satellite worker killed with kill -9 while it holds a group: cpt-sched hands that group
# to the others when it sees the job gone. queue.claim_idle_ms is 10 minutes, so a group left with a gone satellite
# would stall the sync-mode trainer for that long. The run is stopped with scancel after that (a checkpoint first)
# and its checkpoint holds every group exactly once; its steps per second are printed against a run without
# satellites (on this 2-core machine more workers share the same cores, and each preemption costs a look for
# abandoned work).
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
CLUSTER_CONF="SlurmctldDebug=debug" # preemption decisions in slurmctld.log (diag below)
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
BASE_STEPS=${BACKFILL_STEPS:-300} G=4
RUN=grpo-arithmetic
common=("${GRPO_ARGS[@]}" roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 slurm.trainer_cpus=1
        slurm.rollout_cpus=1 slurm.reward_cpus=1 train.groups_per_step=$G queue.claim_idle_ms=600000
        roles.drain_grace_s=30 checkpoint.every=100000)
submit_main() { # NAME ARGS...: the main job in `high`, 3 CPUs
  local name=$1
  shift
  sbatch --parsable -p high --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/$name.log" sbatch/grpo_4gpu.sh \
    "${common[@]}" run.dir="$T/$name" "$@"
}
rate() { # RUN_DIR: steps per second between its first and its last metrics line
  python3 -c "
import json, sys
t = [json.loads(l)['time'] for l in open('$1/metrics.jsonl')]
print(f'{(len(t) - 1) / (t[-1] - t[0]):.1f}')"
}

# 1. without backfill: one rollout worker
base=$(submit_main base roles.rollout=1 slurm.max_satellites=0 train.steps=$BASE_STEPS)
wait_job_done "$base" 300
check_groups "$T/base" $BASE_STEPS $G > /dev/null || fail "baseline: group counts"
base_rate=$(rate "$T/base")

# 2. with backfill: two more rollout workers in satellite jobs on `low`
R="$T/bf"
job=$(submit_main bf roles.rollout=1 slurm.max_satellites=2 slurm.satellite_partition=low slurm.satellite_check_s=2 \
      train.steps=100000)
wait_run_step "$R" 1 120
"$BUILD/cpt-scale" --run "$R" rollout=3 > /dev/null || fail "cpt-scale rollout=3"
cpus=$(sinfo -h -o %c | head -1)
sats_running() { squeue -h -p low --name="cpt-sat-$RUN-rollout" -t R -o %i | wc -l; }
# diag JOB: what the job's satellite log, Slurm's view of it and the daemons' logs say (stderr)
diag() {
  local log
  log=$(grep -l "^satellite: job $1 " "$R"/logs/rollout-sat*.log 2>/dev/null | head -1) || true
  {
    echo "== job $1: $(scontrol show job "$1" -o 2>&1 | tr ' ' '\n' | grep -E '^(JobState|Reason|RunTime|EndTime)=' | paste -sd' ')"
    [ -n "$log" ] && { echo "== $log"; tail -15 "$log"; }
    echo "== slurmctld.log, slurmd.log on job $1"
    grep -h -E "JobId=$1([^0-9]|$)|job_id $1([^0-9]|$)|StepId=$1\." "$T"/cluster/log/slurm*.log | tail -25
    echo "== processes"
    ps -eo pid,ppid,stat,etimes,args | grep -E "cpt-satellite|cpt-rollout .*rollout-sat|slurmstepd" | grep -v grep
  } >&2
}
# Each round waits for two running satellites, then a `high` job takes their CPUs; they must be gone within 20 s.
# A satellite whose log shows the preemption signal but still runs is a failure. One whose log shows no signal was
# not signalled by Slurm (a preemption during Slurm's launch of the batch script, above): shown, and the round is
# repeated, once at most.
preempted=0 handback_s=() round=0 lost=0
while [ "${#handback_s[@]}" -lt 3 ]; do
  round=$((round + 1))
  for _ in $(seq 1 240); do [ "$(sats_running)" = 2 ] && break; sleep 0.25; done
  [ "$(sats_running)" = 2 ] || fail "round $round: two satellites never ran together (running: $(sats_running))"
  victims=$(squeue -h -p low --name="cpt-sat-$RUN-rollout" -t R -o %i | tr '\n' ' ')
  # Their workers run (a weight version loaded): a preemption that comes while Slurm still launches the batch script
  # loses the user signal, and the job then ends only after GraceTime and KillWait (Slurm's behaviour, not cpt's).
  for v in $victims; do
    for _ in $(seq 1 400); do
      log=$(grep -l "^satellite: job $v " "$R"/logs/rollout-sat*.log 2>/dev/null | head -1) || true
      [ -n "$log" ] && grep -q "weights v[0-9]* loaded" "$log" && break
      sleep 0.1
    done
    [ -n "$log" ] && grep -q "weights v[0-9]* loaded" "$log" || fail "round $round: satellite $v never loaded weights"
  done
  s0=$(run_step "$R")
  wait_run_step "$R" $((s0 + 3)) 120 # they take part
  # every CPU the main job does not hold: Slurm must take both satellites back
  hi=$(sbatch --parsable -p high --ntasks=1 --cpus-per-task=$((cpus - 3)) --output=/dev/null --wrap 'sleep 4')
  t=$SECONDS slow=
  declare -A states=()
  for v in $victims; do
    # the states seen, in order (the decision is on the last one: a state read twice may differ)
    for _ in $(seq 1 200); do
      st=$(job_field "$v" JobState)
      [ "${states[$v]:-}" != "" ] && [ "${states[$v]##* }" = "${st:-?}" ] || states[$v]+=" ${st:-?}"
      case "$st" in RUNNING|COMPLETING|"") sleep 0.1 ;; *) break ;; esac
    done
    case "$st" in RUNNING|COMPLETING|"") slow="$slow $v" ;; esac
  done
  for v in $slow; do
    echo "job $v: states seen after the high job came:${states[$v]}" >&2
    diag "$v"
    log=$(grep -l "^satellite: job $v " "$R"/logs/rollout-sat*.log | head -1)
    grep -q "^satellite: the job ends (preempted" "$log" &&
      fail "round $round: satellite $v got the preemption signal and still runs 20 s later"
  done
  if [ -n "$slow" ]; then
    lost=$((lost + 1))
    [ "$lost" -le 1 ] || fail "round $round: Slurm sent satellites$slow no preemption signal, the second such round"
    echo "round $round: Slurm sent satellites$slow no preemption signal (their logs: none received); repeated"
    for v in $slow; do # GraceTime, then Slurm's kill or requeue
      for _ in $(seq 1 600); do case "$(job_field "$v" JobState)" in RUNNING|COMPLETING) sleep 0.1 ;; *) break ;; esac; done
    done
    wait_job_done "$hi" 120
    continue
  fi
  preempted=$((preempted + 2))
  handback_s+=($((SECONDS - t)))
  wait_job_done "$hi" 120
  echo "round $round: satellites $victims preempted at step $(run_step "$R"), gone in ${handback_s[-1]} s" \
       "(states: $(for v in $victims; do printf '%s:%s ' "$v" "${states[$v]# }"; done))"
done
# 4. A satellite whose worker dies holding groups (kill -9: no hand-back): cpt-sched releases them when it sees the job
#    gone. The worker is frozen (SIGSTOP) until the queue shows it holding a group, so the kill finds one.
export REDISCLI_AUTH
REDISCLI_AUTH=$(cat "$R/redis.pass")
for _ in $(seq 1 240); do [ "$(sats_running)" = 2 ] && break; sleep 0.25; done
killed= held=0
for _ in $(seq 1 50); do
  # the worker of this run (not its batch script, whose command line holds the worker's)
  line=$(pgrep -a -f -- "^[^ ]*/cpt-rollout $R/config.toml --worker-id rollout-sat" | head -1) || true
  [ -n "$line" ] || { sleep 0.2; continue; }
  pid=${line%% *} wid=$(echo "$line" | grep -o -- '--worker-id [^ ]*' | cut -d' ' -f2)
  kill -STOP "$pid" 2>/dev/null || continue
  held=$(redis-cli -s "$R/redis.sock" XPENDING "cpt:$RUN:prompts" rollout - + 100 "$wid" | wc -l)
  if [ "$held" -ge 4 ]; then kill -KILL "$pid"; killed=$wid; break; fi
  kill -CONT "$pid"
  sleep 0.1
done
[ -n "$killed" ] || fail "no satellite worker was seen holding a group"
for _ in $(seq 1 100); do grep -q "satellite $killed held [0-9]* groups\? unfinished; handed to the other workers" \
  "$T/bf.log" && break; sleep 0.2; done
grep -q "satellite $killed held [0-9]* groups\? unfinished; handed to the other workers" "$T/bf.log" ||
  fail "cpt-sched did not release what the killed $killed held"
wait_run_step "$R" $(($(run_step "$R") + 10)) 120 # the run goes on without it
scancel "$job"
wait_job_state "$job" CANCELLED 120
for _ in $(seq 1 100); do [ -z "$(squeue -h --name="cpt-sat-$RUN-rollout" -t PD,R,CG -o %i)" ] && break; sleep 0.2; done
stopped=$(tr -dc '0-9' < "$R/checkpoints/latest")
[ -n "$stopped" ] && [ "$(run_step "$R")" = "$stopped" ] || fail "no checkpoint of the last step $(run_step "$R") at the stop"
summary=$(check_groups_ahead "$R" "$stopped" $G) || fail "backfill: exactly-once: $summary"
bf_rate=$(rate "$R")
ends=$(grep -c "(preempted or at its time limit); a new one is submitted" "$T/bf.log" || true)
[ "$ends" -ge 6 ] || fail "cpt-sched saw $ends satellites end preempted (6 expected)"
handed=$(cat "$R"/logs/rollout-sat*.log | grep -c "satellite: the job ends (preempted or near its time limit)" || true)
[ "$handed" -ge 6 ] || fail "$handed satellites got the preemption signal (6 expected)"
# sums of a figure over matching lines (awk: no match is 0, not a failed pipeline)
sum_of() { awk -v re="$1" -v f="$2" '$0 ~ re {for (i = 1; i <= NF; i++) if ($i == f) s += $(i + 1)} END {print s + 0}' "${@:3}"; }
groups_back=$(sum_of "handed back [0-9]+ held group" back "$R"/logs/rollout-sat*.log)
released=$(sum_of "held [0-9]+ groups? unfinished" held "$T/bf.log")
made=$(sum_of "stopping: [0-9]+ groups" stopping: "$R"/logs/rollout-sat*.log)
[ "$made" -ge 1 ] || fail "the satellites made no group"
subs=$(grep -c "cpt: submitted satellite job" "$T/bf.log")
maxwait=$(python3 -c "
import json
print(round(max(json.loads(l).get('time/wait_scored', 0) for l in open('$R/metrics.jsonl')), 1))")
[ "${maxwait%.*}" -lt 30 ] || fail "the trainer waited $maxwait s for a group (queue.claim_idle_ms is 600 s)"
[ -z "$(squeue -h --name="cpt-sat-$RUN-rollout" -t PD,R,CG -o %i)" ] || fail "satellites left after the run"
echo "test_backfill: ok ($stopped steps at $bf_rate steps/s with backfill ($subs satellite jobs, $preempted preempted, gone in" \
     "${handback_s[*]} s, they made $made groups and handed back $groups_back held ones; $killed killed holding" \
     "$((held / 4)), cpt-sched released $released; longest trainer wait ${maxwait} s) vs $BASE_STEPS steps at $base_rate steps/s without; $summary)"
