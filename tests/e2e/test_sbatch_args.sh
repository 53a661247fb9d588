#!/usr/bin/env bash
# Every script in sbatch/ as typed, without Slurm: each runs with CPT_BIN pointing at a stand-in cpt-sched that prints
# its arguments. CONFIG is optional (the first argument is a config only without '='), overrides come last (so they
# win), and the roles follow the allocation in the environment Slurm gives the batch step: on 4 GPUs a rollout worker
# per spare GPU, on one GPU the rollout beside the trainer (rollout.device=cuda, no GPU of its own), without GPUs
# everything on the CPU; CPUs per role = --cpus-per-task.
set -euo pipefail
T=$(mktemp -d /tmp/cpt-sbatch-args-XXXXXX)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
printf '#!/bin/sh\necho "$@"\n' > "$T/cpt-sched"
chmod +x "$T/cpt-sched"
ln -s "${CPT_BUILD:-$(pwd)/build}/cpt" "$T/cpt" # the real one: the scripts read slurm.trainer_tasks with cpt config show
unset SLURM_GPUS_ON_NODE SLURM_NTASKS SLURM_CPUS_PER_TASK SLURM_SUBMIT_DIR
run() { # SCRIPT ENV... -- ARGS...: the stand-in's output
  local script=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" CPT_BIN="$T" bash "sbatch/$script.sh" "$@"
}
has() { [[ " $1 " == *" $2 "* ]] || fail "$3: '$2' not in: $1"; }
hasnt() { [[ " $1 " != *" $2 "* ]] || fail "$3: '$2' in: $1"; }

declare -A example=([sft]=sft_arithmetic [dpo]=dpo_arithmetic [grpo_4gpu]=grpo_arithmetic [ppo]=ppo_arithmetic
                    [opd]=opd_arithmetic)
for s in sft dpo grpo_4gpu ppo opd; do
  out=$(run $s SLURM_NTASKS=3 SLURM_CPUS_PER_TASK=1 -- train.steps=10)
  [[ $out == "examples/${example[$s]}.toml "* ]] || fail "$s: no default CONFIG first: $out"
  [[ $out == *" train.steps=10" ]] || fail "$s: the override is not last: $out"
  out=$(run $s SLURM_NTASKS=3 -- my.toml train.steps=10)
  [[ $out == "my.toml "* ]] || fail "$s: CONFIG not taken: $out"
  out=$(run $s SLURM_GPUS_ON_NODE=1 SLURM_NTASKS=3 SLURM_CPUS_PER_TASK=4 --)
  has "$out" slurm.trainer_gpus=1 "$s, one GPU"
  has "$out" slurm.trainer_cpus=4 "$s, one GPU"
  out=$(run $s SLURM_NTASKS=3 SLURM_CPUS_PER_TASK=2 --)
  has "$out" slurm.trainer_gpus=0 "$s, no GPU"
  has "$out" slurm.trainer_cpus=2 "$s, no GPU"
done
for s in grpo_4gpu ppo opd; do
  out=$(run $s SLURM_GPUS_ON_NODE=4 SLURM_NTASKS=6 SLURM_CPUS_PER_TASK=8 --)
  for a in roles.rollout=3 slurm.trainer_gpus=1 slurm.rollout_gpus=1 slurm.rollout_cpus=8 slurm.reward_cpus=8; do
    has "$out" $a "$s, 4 GPUs"; done
  hasnt "$out" rollout.device=cuda "$s, 4 GPUs"
  out=$(run $s SLURM_GPUS_ON_NODE=1 SLURM_NTASKS=3 SLURM_CPUS_PER_TASK=4 --)
  for a in roles.rollout=1 roles.reward=1 slurm.rollout_gpus=0 rollout.device=cuda; do has "$out" $a "$s, one GPU"; done
  out=$(run $s SLURM_NTASKS=3 SLURM_CPUS_PER_TASK=1 --)
  for a in roles.rollout=1 roles.reward=1 slurm.trainer_gpus=0 slurm.rollout_gpus=0 slurm.reward_cpus=1; do
    has "$out" $a "$s, no GPU"; done
  hasnt "$out" rollout.device=cuda "$s, no GPU"
  # a user's override follows the script's, so it wins
  out=$(run $s SLURM_GPUS_ON_NODE=1 SLURM_NTASKS=3 -- rollout.device=cpu)
  [[ $out == *"rollout.device=cuda rollout.device=cpu" ]] || fail "$s: the user's override is not after the script's"
done
out=$(run grpo_4gpu SLURM_GPUS_ON_NODE=4 SLURM_NTASKS=6 --)
has "$out" roles.reward=2 "grpo_4gpu, 4 GPUs"
# trainer ranks (slurm.trainer_tasks, an override or the config's) take a GPU and a task each
out=$(run grpo_4gpu SLURM_GPUS_ON_NODE=4 SLURM_NTASKS=6 -- slurm.trainer_tasks=2)
for a in roles.rollout=2 roles.reward=2 slurm.trainer_gpus=1 slurm.rollout_gpus=1; do has "$out" $a "2 ranks, 4 GPUs"; done
printf '[slurm]\ntrainer_tasks = 2\n' > "$T/ranks.toml"
cat examples/grpo_arithmetic.toml "$T/ranks.toml" > "$T/ranks2.toml"
out=$(run grpo_4gpu SLURM_GPUS_ON_NODE=2 SLURM_NTASKS=4 -- "$T/ranks2.toml")
for a in roles.rollout=1 roles.reward=1 slurm.trainer_gpus=1 slurm.rollout_gpus=0 rollout.device=cuda; do
  has "$out" $a "2 ranks from the config, 2 GPUs"; done
out=$(run grpo_4gpu SLURM_GPUS_ON_NODE=4 SLURM_NTASKS=5 -- slurm.trainer_tasks=3)
for a in roles.rollout=1 roles.reward=1; do has "$out" $a "3 ranks, 4 GPUs, 5 tasks"; done
if out=$(run grpo_4gpu SLURM_GPUS_ON_NODE=1 SLURM_NTASKS=4 -- slurm.trainer_tasks=2 2>&1); then
  fail "2 ranks on 1 GPU accepted: $out"; fi
[[ $out == *"trainer ranks need 2 GPUs; the allocation has 1"* ]] || fail "2 ranks on 1 GPU: unclear error: $out"
# every script's header documents its CPU-only line
for s in sft dpo grpo_4gpu ppo opd; do
  grep -q "^#.* sbatch --gres=none .*sbatch/$s.sh" "sbatch/$s.sh" || fail "$s: no CPU-only line in the header"
done
grep -q '^#.* sbatch --gres=gpu:1 .*sbatch/grpo_4gpu.sh' sbatch/grpo_4gpu.sh || fail "grpo_4gpu: no one-GPU line"
echo "test_sbatch_args: ok (5 scripts: CONFIG optional, overrides last, roles from the allocation)"
