#!/usr/bin/env bash
# Supervised fine-tuning on one GPU (offline: trainer only, no queue).
# Submit: sbatch sbatch/sft.sh [CONFIG] [section.key=value ...]
# Preemption-safe: see sbatch/grpo_4gpu.sh.
#
# Edit the resource lines for your cluster:
#SBATCH --job-name=cpt-sft
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=16
#SBATCH --gres=gpu:1
#SBATCH --time=24:00:00
##SBATCH --partition=YOUR_PARTITION
##SBATCH --account=YOUR_ACCOUNT
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
#SBATCH --output=cpt-sft-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
config=${1:-examples/sft_arithmetic.toml}
shift || true
CPT_BIN=${CPT_BIN:-$PWD/build}
exec "$CPT_BIN/cpt-sched" "$config" slurm.trainer_gpus=1 slurm.trainer_cpus=16 "$@"
