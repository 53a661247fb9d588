#!/usr/bin/env bash
# Env workers under Slurm: sbatch/grpo_4gpu.sh with env.type = calculator in a 4-task job. online_roles.sh gives the
# env worker a task (trainer, 1 rollout, 1 reward, 1 env); cpt-sched starts it as the step cpt-env-0 without GPUs;
# the rollout's tool calls (env.call_end = "1", frequent in the tiny model's output) are answered by it while the
# run trains; the run finishes with exact group counts and env-0 drains with its count.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
STEPS=30 G=4
R="$T/job"
job=$(sbatch --parsable --gres=none --ntasks=4 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" train.steps=$STEPS train.groups_per_step=$G env.type=calculator env.call_start= \
      env.call_end=1 run.dir="$R")
wait_run_step "$R" 2 300
steps=$(squeue -s -j "$job" -h -o "%j" 2>/dev/null || true)
echo "$steps" | grep -qx "cpt-env-0" || fail "no step cpt-env-0 in job $job (steps: $(echo $steps))"
gres=$(scontrol show step "$job" -o 2>/dev/null | grep "Name=cpt-env-0" | grep -o "TresPerTask=[^ ]*\|Gres=[^ ]*" || true)
case "$gres" in *gpu*) fail "the env step asks for GPUs: $gres" ;; esac
wait_job_done "$job" 600
grep -q "cpt: started env-0" "$T/job.log" || fail "env-0 was not started"
grep -q "ok .*roles .*grpo: trainer, 1 rollout, 1 reward, 1 env" "$T/job.log" ||
  fail "online_roles.sh did not make room for the env worker (one reward worker fewer)"
grep -q "ok .*resources .*roles ask 4 CPUs, 0 GPUs; the allocation has 4 CPUs" "$T/job.log" ||
  fail "the roles do not fit the 4 tasks"
answered=$(sed -n 's/.*cpt-env env-0: stopping: \([0-9]*\) calls answered .*/\1/p' "$R/logs/env-0.log")
[ -n "$answered" ] || fail "env-0 did not drain with its counts"
[ "$answered" -gt 0 ] || fail "env-0 answered no tool call"
summary=$(check_groups "$R" $STEPS $G) || fail "exactly-once: $summary"
echo "test_env_steps: ok (env-0 answered $answered calls; $summary)"
