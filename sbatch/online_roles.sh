# Sourced by the online scripts (grpo_4gpu.sh, ppo.sh, opd.sh), not submitted itself: the roles of an online run
# sized from the allocation, then cpt-sched. Usage, from the submit folder: online_roles_exec CONFIG REWARD [k=v ...]
# where REWARD is the script's reward workers when the tasks allow. Trainer ranks (slurm.trainer_tasks) take a task
# and, on GPUs, a GPU each. Env workers (the tools of multi-turn rollouts: roles.env, or one when env.type is set)
# take a task and CPUs like a reward worker.
online_roles_exec() {
  local config=$1 reward=$2
  shift 2
  local bin=${CPT_BIN:-$PWD/build}
  # The allocation: GPUs on the node, tasks, CPUs per task (each role's step gets that many CPUs).
  local gpus=${SLURM_GPUS_ON_NODE:-0} tasks=${SLURM_NTASKS:-1} cpus=${SLURM_CPUS_PER_TASK:-1}
  # Trainer ranks (slurm.trainer_tasks, from the config and the overrides): each takes a task and, on GPUs, a GPU.
  # A config that does not parse leaves 1 here; cpt-sched then names the error.
  local ranks
  ranks=$("$bin/cpt" config show "$config" "$@" 2> /dev/null |
          awk '/^\[/ {sec = $0} sec == "[slurm]" && $1 == "trainer_tasks" {print $3}') || true
  [[ $ranks =~ ^[1-9][0-9]*$ ]] || ranks=1
  local rollout tgpus rgpus share=()
  if [ "$gpus" -gt "$ranks" ]; then    # a GPU for each trainer rank, one for each rollout worker
    rollout=$((gpus - ranks)) tgpus=1 rgpus=1
  elif [ "$gpus" -eq "$ranks" ]; then  # the rollout worker beside the first trainer rank, on its GPU
    rollout=1 tgpus=1 rgpus=0 share=(rollout.device=cuda)
  elif [ "$gpus" -gt 0 ]; then
    echo "online_roles: slurm.trainer_tasks = $ranks trainer ranks need $ranks GPUs; the allocation has $gpus" \
         "(ask for more with --gres=gpu:N, or set slurm.trainer_tasks=$gpus)" >&2
    return 1
  else
    rollout=1 tgpus=0 rgpus=0
  fi
  local env envargs=()
  env=$("$bin/cpt" config show "$config" "$@" 2> /dev/null | awk '
    /^\[/ { sec = $0 }
    sec == "[env]" && $1 == "type" { t = $3; gsub(/"/, "", t) }
    sec == "[roles]" && $1 == "env" { n = $3 }
    END { if (n == "" || n < 0) n = (t == "" || t == "none") ? 0 : 1; print n }') || true
  [[ $env =~ ^[0-9]+$ ]] || env=0
  if [ "$env" -gt 0 ]; then envargs=(roles.env=$env slurm.env_cpus=$cpus); fi
  if [ $((ranks + rollout + reward + env)) -gt "$tasks" ]; then # fewer tasks: one reward worker, the rest rollout
    reward=1
    local left=$((tasks - ranks - 1 - env))
    rollout=$((left < rollout ? left : rollout))
    [ "$rollout" -ge 1 ] || rollout=1
  fi
  exec "$bin/cpt-sched" "$config" roles.rollout=$rollout roles.reward=$reward "${envargs[@]}" \
    slurm.trainer_gpus=$tgpus slurm.rollout_gpus=$rgpus slurm.trainer_cpus=$cpus slurm.rollout_cpus=$cpus \
    slurm.reward_cpus=$cpus "${share[@]}" "$@"
}
