# Sourced by the online scripts (grpo_4gpu.sh, ppo.sh, opd.sh), not submitted itself: the roles of an online run
# sized from the allocation, then cpt-sched. Usage, from the submit folder: online_roles_exec CONFIG REWARD [k=v ...]
# where REWARD is the script's reward workers when the tasks allow. Env workers (the tools of multi-turn rollouts:
# roles.env, or one when env.type is set) take a task and CPUs like a reward worker.
online_roles_exec() {
  local config=$1 reward=$2
  shift 2
  # The allocation: GPUs on the node, tasks, CPUs per task (each role's step gets that many CPUs).
  local gpus=${SLURM_GPUS_ON_NODE:-0} tasks=${SLURM_NTASKS:-1} cpus=${SLURM_CPUS_PER_TASK:-1}
  local rollout tgpus rgpus share=()
  if [ "$gpus" -ge 2 ]; then   # a GPU for the trainer, one for each rollout worker
    rollout=$((gpus - 1)) tgpus=1 rgpus=1
  elif [ "$gpus" -eq 1 ]; then # the rollout worker beside the trainer, on its GPU
    rollout=1 tgpus=1 rgpus=0 share=(rollout.device=cuda)
  else
    rollout=1 tgpus=0 rgpus=0
  fi
  local env envargs=()
  env=$("${CPT_BIN:-$PWD/build}/cpt" config show "$config" "$@" | awk '
    /^\[/ { sec = $0 }
    sec == "[env]" && $1 == "type" { t = $3; gsub(/"/, "", t) }
    sec == "[roles]" && $1 == "env" { n = $3 }
    END { if (n == "" || n < 0) n = (t == "" || t == "none") ? 0 : 1; print n }') || return 1
  [ "$env" -gt 0 ] && envargs=(roles.env=$env slurm.env_cpus=$cpus)
  if [ $((1 + rollout + reward + env)) -gt "$tasks" ]; then # fewer tasks: one reward worker, the rest rollout
    reward=1
    local left=$((tasks - 2 - env))
    rollout=$((left > rollout ? rollout : left > 1 ? left : 1))
  fi
  exec "${CPT_BIN:-$PWD/build}/cpt-sched" "$config" roles.rollout=$rollout roles.reward=$reward "${envargs[@]}" \
    slurm.trainer_gpus=$tgpus slurm.rollout_gpus=$rgpus slurm.trainer_cpus=$cpus slurm.rollout_cpus=$cpus \
    slurm.reward_cpus=$cpus "${share[@]}" "$@"
}
