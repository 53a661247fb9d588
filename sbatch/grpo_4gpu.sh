#!/usr/bin/env bash
# GRPO on one 4-GPU node: the trainer on one GPU, a rollout worker on each other GPU (3; weights over NCCL), 2 reward
# workers on CPUs. Asks for 1 node, 6 tasks x 8 CPUs, 4 GPUs, 24 hours (the #SBATCH lines below).
#
# Submit from the repository root; CONFIG is optional (default examples/grpo_arithmetic.toml), overrides follow:
#   sbatch sbatch/grpo_4gpu.sh [CONFIG] [section.key=value ...]        e.g. sbatch sbatch/grpo_4gpu.sh train.steps=10
# The roles follow the allocation (its GPUs, --ntasks, --cpus-per-task), so sbatch options alone shrink it:
#   one GPU, shared by the trainer and one rollout worker (weights over cuda_ipc):
#     sbatch --gres=gpu:1 --ntasks=3 --cpus-per-task=4 sbatch/grpo_4gpu.sh
#   a CPU-only node (every role on the CPU, weights as files):
#     sbatch --gres=none --ntasks=3 --cpus-per-task=1 sbatch/grpo_4gpu.sh
#   N GPUs: --gres=gpu:N --ntasks=N+2 gives N-1 rollout workers with a GPU each.
#   trainer ranks: slurm.trainer_tasks=T takes T of the GPUs and T tasks (data parallel), the rest as above.
# Role counts and slurm.* given as overrides win (docs/run-guide.md). The start of the job log says where each role
# runs: "cpt: devices: trainer cuda (GPU 0), rollout cuda (a GPU per worker), reward cpu; weights over nccl".
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
config=examples/grpo_arithmetic.toml
if [ $# -gt 0 ] && [[ $1 != *=* ]]; then config=$1; shift; fi
# The roles from the allocation (sbatch/online_roles.sh, read from the submit folder like the config).
source sbatch/online_roles.sh
online_roles_exec "$config" 2 "$@"
