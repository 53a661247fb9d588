#!/usr/bin/env bash
# sbatch/grpo_4gpu.sh as typed on a 4-GPU node: Slurm declares 4 GPUs (device files are stand-ins, so the roles are
# told to compute on the CPU: train.device=cpu rollout.device=cpu), and the script's steps must all start: the trainer
# and each of the 3 rollout workers with a GPU of its own (4 distinct SLURM_STEP_GPUS), the 2 reward workers with none
# (srun --gres=none; without it Slurm 22.05 gives a step every GPU of the job, and the reward steps would wait forever
# for the others to end). Then the one-GPU shape's sharing at the srun level: with the job's only GPU held by a step,
# `srun --overlap --gpus-per-task=1` (the rollout beside the trainer) starts and gets that GPU, where a plain step
# waits.
set -euo pipefail
SRC=${CPT_SRC:-$(pwd)}
BUILD=${CPT_BUILD:-$SRC/build}
CLUSTER_GPUS=4
source tests/e2e/grpo_small.sh
source tests/slurm/lib.sh
make_tiny_model "$T" || fail "tiny model"
G=4

job=$(sbatch --parsable --ntasks=6 --cpus-per-task=1 --output="$T/job.log" sbatch/grpo_4gpu.sh "${GRPO_ARGS[@]:1}" \
      train.device=cpu rollout.device=cpu train.steps=100000 train.groups_per_step=$G run.dir="$T/job")
wait_run_step "$T/job" 3 240
# every role's process: its step's GPUs (SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES) from its environment. The trainer
# steps with the first workers up, so on a loaded machine the last steps may still be starting: look until all 6 are
# (the run goes on until the scancel below).
declare -A step_gpus=() cvd=()
scan_roles() {
  step_gpus=() cvd=()
  local pid env role
  for pid in $(pgrep -x 'cpt-train|cpt-rollout|cpt-reward'); do
    env=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null) || continue
    grep -qx "CPT_RUN=$T/job" <<< "$env" || continue
    role=$(grep '^CPT_ROLE=' <<< "$env" | cut -d= -f2)
    step_gpus[$role]=$(grep '^SLURM_STEP_GPUS=' <<< "$env" | cut -d= -f2 || true)
    cvd[$role]=$(grep '^CUDA_VISIBLE_DEVICES=' <<< "$env" | cut -d= -f2 || true)
  done
}
for _ in $(seq 1 120); do scan_roles; [ "${#step_gpus[@]}" -ge 6 ] && break; sleep 0.5; done
for r in trainer rollout-0 rollout-1 rollout-2 reward-0 reward-1; do echo "  $r: SLURM_STEP_GPUS=${step_gpus[$r]:-none} CUDA_VISIBLE_DEVICES=${cvd[$r]:-unset}"; done
[ "${#step_gpus[@]}" -eq 6 ] || fail "${#step_gpus[@]} role processes running, expected 6 (trainer, 3 rollout, 2 reward)"
seen=""
for r in trainer rollout-0 rollout-1 rollout-2; do
  g=${step_gpus[$r]:-}
  [[ $g =~ ^[0-9]+$ ]] || fail "$r: SLURM_STEP_GPUS '$g', expected one GPU"
  [[ " $seen " == *" $g "* ]] && fail "$r shares GPU $g with another step"
  seen="$seen $g"
done
for r in reward-0 reward-1; do
  [ -z "${step_gpus[$r]:-}" ] && [ -z "${cvd[$r]:-}" ] || fail "$r was given GPUs (${step_gpus[$r]:-} ${cvd[$r]:-})"
done
wait_run_step "$T/job" $(($(run_step "$T/job") + 20)) 240 # every step takes part
scancel "$job"
wait_job_state "$job" CANCELLED 120
stopped=$(tr -dc '0-9' < "$T/job/checkpoints/latest")
[ -n "$stopped" ] && [ "$(run_step "$T/job")" = "$stopped" ] || fail "no checkpoint of the last step at the scancel"
grep -q 'cpt: devices: trainer cpu, rollout cpu, reward cpu; weights over file' "$T/job.log" || fail "no devices line"
grep -q 'warn  devices    slurm.trainer_gpus = 1, but train.device = cpu' "$T/job.log" || fail "no unused-GPU warning"
summary=$(check_groups_ahead "$T/job" "$stopped" $G) || fail "exactly-once: $summary"

# one GPU: a step holds it; an --overlap step gets the same GPU; a plain step and one that asks the GPU wait
share=$(sbatch --parsable --gres=gpu:1 --ntasks=2 --cpus-per-task=1 --output="$T/share.log" --wrap '
  srun --exact -n1 -c1 --gpus-per-task=1 --mpi=none sh -c "echo held=\$SLURM_STEP_GPUS; sleep 30" &
  sleep 3
  timeout 20 srun --exact -n1 -c1 --overlap --gpus-per-task=1 --mpi=none sh -c "echo overlap=\$SLURM_STEP_GPUS"
  timeout 20 srun --exact -n1 -c1 --gres=none --mpi=none sh -c "echo none=\${CUDA_VISIBLE_DEVICES:-unset}"
  timeout 6 srun --exact -n1 -c1 --gpus-per-task=1 --mpi=none true 2>/dev/null || echo asking=waited
  timeout 6 srun --exact -n1 -c1 --mpi=none true 2>/dev/null || echo plain=waited
  kill %1 2>/dev/null; wait')
wait_job_done "$share" 120
cat "$T/share.log"
held=$(grep -o '^held=[0-9]*' "$T/share.log" | cut -d= -f2)
[ -n "$held" ] || fail "the first step got no GPU"
grep -qx "overlap=$held" "$T/share.log" || fail "the --overlap step did not get the held GPU $held"
grep -qx 'none=unset' "$T/share.log" || fail "the --gres=none step did not start, or saw a GPU"
grep -qx 'asking=waited' "$T/share.log" || fail "a second step asking the held GPU started (expected it to wait)"
grep -qx 'plain=waited' "$T/share.log" || fail "a step without --gres started (Slurm gives it the job's GPUs: expected it to wait)"
echo "test_sbatch_gpu_steps: ok (4 GPUs: trainer and 3 rollout steps on GPUs$seen, reward steps on none; $stopped steps to the scancel," \
     "$summary; one GPU: --overlap step on GPU $held beside the holder, plain and GPU-asking steps wait)"
