#!/usr/bin/env bash
# DPO on one GPU (offline: the trainer only; reference logprobs from a frozen pass).
# Asks for 1 node, 1 task x 16 CPUs, 1 GPU, 24 hours (the #SBATCH lines below).
#
# Submit from the repository root; CONFIG is optional (default examples/dpo_arithmetic.toml), overrides follow:
#   sbatch sbatch/dpo.sh [CONFIG] [section.key=value ...]        e.g. sbatch sbatch/dpo.sh train.steps=10
# The trainer follows the allocation (a GPU if it has one, --cpus-per-task CPUs), so sbatch options alone shrink it:
#   a CPU-only node:  sbatch --gres=none --cpus-per-task=2 sbatch/dpo.sh
# More trainer ranks (data parallel, a GPU each): add slurm.trainer_tasks=N with --ntasks=N --gres=gpu:N.
# The job log says where the trainer runs ("cpt: devices: trainer cuda"). Preemption-safe: see sbatch/grpo_4gpu.sh.
#
# Edit the resource lines for your cluster:
#SBATCH --job-name=cpt-dpo
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
#SBATCH --output=cpt-dpo-%j.log
set -euo pipefail
cd "${SLURM_SUBMIT_DIR:-.}"
config=examples/dpo_arithmetic.toml
if [ $# -gt 0 ] && [[ $1 != *=* ]]; then config=$1; shift; fi
gpus=${SLURM_GPUS_ON_NODE:-0} cpus=${SLURM_CPUS_PER_TASK:-1}
CPT_BIN=${CPT_BIN:-$PWD/build}
exec "$CPT_BIN/cpt-sched" "$config" slurm.trainer_gpus=$((gpus > 0 ? 1 : 0)) slurm.trainer_cpus=$cpus "$@"
