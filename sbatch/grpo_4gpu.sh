#!/usr/bin/env bash
# GRPO on one 4-GPU node: trainer on 1 GPU, 3 rollout workers on 1 GPU each, 2 reward workers on CPUs.
# Submit: sbatch sbatch/grpo_4gpu.sh [CONFIG] [section.key=value ...]
# Preemption-safe: USR1 arrives GRACE seconds before the end or on preemption; cpt-sched checkpoints, drains and
# requeues; the requeued job resumes from the run directory's checkpoints/latest.
#
# Edit the resource lines for your cluster:
#SBATCH --job-name=cpt-grpo
#SBATCH --nodes=1
#SBATCH --ntasks=6
#SBATCH --cpus-per-task=8
#SBATCH --gres=gpu:4
#SBATCH --time=24:00:00
##SBATCH --partition=YOUR_PARTITION
##SBATCH --account=YOUR_ACCOUNT
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=cpt-grpo-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
config=${1:-examples/grpo_arithmetic.toml}
shift || true
CPT_BIN=${CPT_BIN:-$PWD/build}
exec "$CPT_BIN/cpt-sched" "$config" roles.rollout=3 roles.reward=2 \
  slurm.trainer_gpus=1 slurm.rollout_gpus=1 slurm.trainer_cpus=8 slurm.rollout_cpus=8 slurm.reward_cpus=4 "$@"
