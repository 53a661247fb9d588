#!/usr/bin/env bash
# PPO with a critic on one 4-GPU node: trainer (policy + critic) on 1 GPU, 3 rollout workers.
# Submit: sbatch sbatch/ppo.sh [CONFIG] [section.key=value ...]
# Preemption-safe: see sbatch/grpo_4gpu.sh.
#
# Edit the resource lines for your cluster:
#SBATCH --job-name=cpt-ppo
#SBATCH --nodes=1
#SBATCH --ntasks=5
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:4
#SBATCH --time=24:00:00
##SBATCH --partition=YOUR_PARTITION
##SBATCH --account=YOUR_ACCOUNT
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=cpt-ppo-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
config=${1:-examples/ppo_arithmetic.toml}
shift || true
CPT_BIN=${CPT_BIN:-$PWD/build}
exec "$CPT_BIN/cpt-sched" "$config" roles.rollout=3 roles.reward=1 slurm.trainer_gpus=1 slurm.rollout_gpus=1 slurm.trainer_cpus=8 slurm.rollout_cpus=8 slurm.reward_cpus=4 "$@"
