#!/usr/bin/env bash
# The rollout autoscaler under cpt-sched grows into satellite jobs: a GRPO job whose allocation holds its trainer, one
# rollout and one reward step, rollouts made deliberately slow (one sequence at a time, 220-token completions, the
# trainer sees 16 tokens of each: two workers still starve it when the machine is loaded, as in the full suite on
# 2 cores, where 110 tokens were once enough for two), roles.rollout_auto between 1 and 3. The trainer starves, so the autoscaler asks for 2, then
# 3 workers, which cpt-sched places as satellite jobs; `cpt-scale` shows the mode and the satellites. Stopped with
# scancel (a checkpoint first): every group below the data cursor trained once or outstanding, none twice.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
G=2 RUN=grpo-arithmetic R="$T/job"
job=$(sbatch --parsable --gres=none --ntasks=3 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh \
      "${GRPO_ARGS[@]}" roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 \
      slurm.trainer_cpus=1 slurm.rollout_cpus=1 slurm.reward_cpus=1 slurm.satellite_check_s=2 \
      async.mode=async async.max_staleness=2 train.groups_per_step=$G rollout.group_size=16 rollout.slots=1 \
      sampling.max_new_tokens=220 train.max_seq_len=16 rollout.stop_on_eos=false roles.rollout_auto=true \
      roles.rollout_min=1 roles.rollout_max=3 roles.autoscale_period_s=1 roles.autoscale_periods=2 \
      roles.autoscale_cooldown_s=1 checkpoint.every=100000 train.steps=100000 run.dir="$R")
wait_run_step "$R" 1 120
for _ in $(seq 1 240); do grep -q "cpt: autoscale rollout 2 -> 3: trainer starved" "$T/job.log" && break; sleep 0.5; done
grep -q "cpt: autoscale rollout 1 -> 2: trainer starved for 2 periods: trainer waited" "$T/job.log" || fail "no growth to 2"
grep -q "cpt: autoscale rollout 2 -> 3: trainer starved" "$T/job.log" || fail "no growth to 3"
for _ in $(seq 1 120); do [ "$(squeue -h --name="cpt-sat-$RUN-rollout" -t R -o %i | wc -l)" = 2 ] && break; sleep 0.5; done
[ "$(squeue -h --name="cpt-sat-$RUN-rollout" -t R -o %i | wc -l)" = 2 ] || fail "the autoscaler's workers are not 2 running satellites"
for _ in $(seq 1 60); do "$BUILD/cpt-scale" --run "$R" > "$T/table" 2>&1; grep -Eq "^rollout +3 +3 +1 +2 " "$T/table" && break; sleep 0.5; done
cat "$T/table"
grep -Eq "^rollout +3 +3 +1 +2 " "$T/table" || fail "cpt-scale: not 3 running (1 inside, 2 satellites)"
grep -q "^rollout mode: auto 1-3; last change 2 -> 3: trainer starved" "$T/table" || fail "cpt-scale: no auto mode line"
s0=$(run_step "$R")
wait_run_step "$R" $((s0 + 5)) 120
scancel "$job"
wait_job_state "$job" CANCELLED 120
stopped=$(tr -dc '0-9' < "$R/checkpoints/latest")
summary=$(check_groups_ahead "$R" "$stopped" $G) || fail "exactly-once: $summary"
made=$(awk '/stopping: [0-9]+ groups/ {for (i = 1; i <= NF; i++) if ($i == "stopping:") s += $(i + 1)} END {print s + 0}' \
       "$R"/logs/rollout-sat*.log)
[ "$made" -ge 1 ] || fail "the satellites made no group"
echo "test_autoscale_satellites: ok ($(grep -c 'cpt: autoscale rollout [0-9]' "$T/job.log") autoscale changes, the" \
     "satellites made $made groups; stopped at step $stopped; $summary)"
