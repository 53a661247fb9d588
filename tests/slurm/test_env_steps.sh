#!/usr/bin/env bash
# Env workers under Slurm: sbatch/grpo_4gpu.sh with env.type = calculator in a 4-task job. online_roles.sh gives the
# env worker a task (trainer, 1 rollout, 1 reward, 1 env); cpt-sched starts it as the step cpt-env-0 without GPUs;
# the rollout's tool calls (env.call_end = "1", frequent in the tiny model's output) are answered by it while the
# run trains. `cpt-scale env=2` finds no room inside, so cpt-sched submits a satellite job cpt-sat-RUN-env whose
# env-sat0 answers calls over TCP too; `cpt-scale env=1` drains it (COMPLETED). The run finishes with exact group
# counts and each env worker drains with its count.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=300 G=4
R="$T/job" RUN=grpo-arithmetic
job=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" train.steps=$STEPS train.groups_per_step=$G env.type=calculator env.call_start= \
      env.call_end=1 slurm.satellite_check_s=2 roles.drain_grace_s=30 run.dir="$R")
wait_run_step "$R" 2 300
steps=$(squeue -s -j "$job" -h -o "%j" 2>/dev/null || true)
echo "$steps" | grep -qx "cpt-env-0" || fail "no step cpt-env-0 in job $job (steps: $(echo $steps))"
gres=$(scontrol show step "$job" -o 2>/dev/null | grep "Name=cpt-env-0" | grep -o "TresPerTask=[^ ]*\|Gres=[^ ]*" || true)
case "$gres" in *gpu*) fail "the env step asks for GPUs: $gres" ;; esac
grep -q "ok .*roles .*grpo: trainer, 1 rollout, 1 reward, 1 env" "$T/job.log" ||
  fail "online_roles.sh did not make room for the env worker (one reward worker fewer)"
grep -q "ok .*resources .*roles ask 4 CPUs, 0 GPUs; the allocation has 4 CPUs" "$T/job.log" ||
  fail "the roles do not fit the 4 tasks"

# a second env worker: no room inside, a satellite job
[ -f "$R/redis.pass" ] && export REDISCLI_AUTH=$(cat "$R/redis.pass")
control() { redis-cli -s "$R/redis.sock" HGET "cpt:$RUN:control" "$1"; }
"$BUILD/cpt-scale" --run "$R" env=2 | grep -q "desired: env=2" || fail "cpt-scale env=2"
sat=""
for _ in $(seq 1 40); do sat=$(squeue -h --name="cpt-sat-$RUN-env" -o %i | head -1); [ -n "$sat" ] && break; sleep 0.5; done
[ -n "$sat" ] || fail "no env satellite job in squeue after cpt-scale env=2"
wait_job_state "$sat" RUNNING 60
for _ in $(seq 1 60); do [ "$(control running_env)" = 2 ] && break; sleep 0.5; done
[ "$(control running_env)" = 2 ] || fail "running_env stayed $(control running_env)"
[ "$(control inside_env)" = 1 ] || fail "inside_env is $(control inside_env): the allocation had no room"
for _ in $(seq 1 60); do
  "$BUILD/cpt-queue" stats --run "$R" > "$T/stats" 2>&1 || true
  grep -q "env .* env-sat0 " "$T/stats" && break; sleep 0.5
done
grep -q "env .* env-sat0 " "$T/stats" || { cat "$T/stats"; fail "env-sat0 is not a consumer of the env stream"; }
cur=$(run_step "$R")
[ "$cur" -lt $((STEPS - 20)) ] || fail "the run reached step $cur before the env satellite worked: raise STEPS"
wait_run_step "$R" $((cur + 10)) 300
"$BUILD/cpt-scale" --run "$R" env=1 > /dev/null || fail "cpt-scale env=1"
wait_job_done "$sat" 90
[ "$(job_field "$sat" ExitCode)" = "0:0" ] || fail "env satellite $sat exit code $(job_field "$sat" ExitCode)"
sat_answered=$(sed -n 's/.*cpt-env env-sat0: stopping: \([0-9]*\) calls answered .*/\1/p' "$R/logs/env-sat0.log")
[ -n "$sat_answered" ] || fail "env-sat0 did not drain with its counts"

wait_job_done "$job" 600
grep -q "cpt: started env-0" "$T/job.log" || fail "env-0 was not started"
grep -q "cpt: submitted satellite job $sat for env-sat0 " "$T/job.log" || fail "no env satellite submission in the job log"
answered=$(sed -n 's/.*cpt-env env-0: stopping: \([0-9]*\) calls answered .*/\1/p' "$R/logs/env-0.log")
[ -n "$answered" ] || fail "env-0 did not drain with its counts"
[ "$((answered + sat_answered))" -gt 0 ] || fail "no tool call was answered"
summary=$(check_groups "$R" $STEPS $G) || fail "exactly-once: $summary"
echo "test_env_steps: ok (env-0 answered $answered calls, the satellite env-sat0 (job $sat) $sat_answered; $summary)"
