#!/usr/bin/env bash
# The Slurm that tests/gpu/slurm_carry.sh gathers for the GPU machine (which has no Slurm, munge or libpmix) runs on
# its own: with the system's Slurm binaries, plugins, munge and libpmix hidden (tests/gpu/hide_system_slurm.sh: a
# private mount namespace, a bare environment), tests/gpu/slurm_device.sh check starts the carried cluster (munged
# as root, the node's GPU as a gres with /dev/null standing in for /dev/nvidia0), checks that every carried file's
# libraries resolve inside the carry, and runs `sbatch --wrap hostname`, a 2-task `srun --mpi=pmix` (cpt check-bootstrap too) and a
# --gres=gpu:1 job that must see CUDA_VISIBLE_DEVICES=0, as must its steps that hold the GPU or share it (--overlap)
# while a --gres=none step starts beside them; then the device's GRPO stage (tests/gpu/grpo_slurm_run.sh)
# with MODE=cpu: sbatch sbatch/grpo_4gpu.sh, `scontrol requeue` mid-run, COMPLETED, every group trained once.
set -euo pipefail
BUILD=${CPT_BUILD:-$(pwd)/build}
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root (slurmd, mounts)"; exit 77; }
command -v slurmctld > /dev/null || { echo "skip: no Slurm here to gather"; exit 77; }
unshare -m --propagation private true 2> /dev/null || { echo "skip: no private mount namespace"; exit 77; }
T=$(mktemp -d /tmp/cpt-slurmcarry-XXXXXX)
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT

# the device folder's layout (tests/gpu/device_all.sh build): the cpt programs, redis-server, lib/, slurm/
tests/gpu/grpo_gpu_run.sh build "$BUILD" "$T/carry" > /dev/null
tests/gpu/slurm_carry.sh "$T/carry"

# the system's copy must be out of reach, or the check below proves nothing
if tests/gpu/hide_system_slurm.sh /usr/bin/sbatch --version > /dev/null 2>&1; then
  echo "FAIL: the system's sbatch still runs under hide_system_slurm.sh"; exit 1
fi
# OMP_NUM_THREADS=1 as grpo_slurm_run.sh sets it: the node still gets the machine's CPUs (nproc honours it)
tests/gpu/hide_system_slurm.sh env OMP_NUM_THREADS=1 tests/gpu/slurm_device.sh check "$T/cluster" "$T/carry" |
  tee "$T/check.log"
grep -q "slurm_device.sh check: ok" "$T/check.log" || { echo "FAIL: the carried Slurm's check"; exit 1; }
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
grep -q "cluster up in .*(CPUs=$cpus " "$T/check.log" ||
  { echo "FAIL: the node's CPUs are not the machine's $cpus: $(grep -o 'CPUs=[0-9]*' "$T/check.log")"; exit 1; }
grep -q "^ok: srun --mpi=pmix -n 2 cpt check-bootstrap" "$T/check.log" || { echo "FAIL: no cpt check-bootstrap"; exit 1; }

# the device's GRPO stage on the CPUs: sbatch sbatch/grpo_4gpu.sh, a requeue, COMPLETED, every group once
# (90 steps: the requeue at step 30 must land before the last step, and this run makes about 30 steps a second)
tests/gpu/hide_system_slurm.sh env MODE=cpu STEPS=90 OUT="$T/grpo" tests/gpu/grpo_slurm_run.sh run "$T/carry" |
  tee "$T/grpo.log"
grep -q "^grpo_slurm_run: ok" "$T/grpo.log" || { echo "FAIL: grpo_slurm_run.sh MODE=cpu"; exit 1; }
grep -q "COMPLETED, Restarts=1," "$T/grpo.log" || { echo "FAIL: the job was not requeued once"; exit 1; }
grep -q "exactly-once: groups: cursor 360 = 90 x 4 + 0 skipped, 0 outstanding" "$T/grpo.log" ||
  { echo "FAIL: exactly-once counts"; exit 1; }
grep -q "^trainer: .*resumed from" "$T/grpo.log" || { echo "FAIL: no resume line"; exit 1; }
echo "test_slurm_carry: ok ($(du -sh "$T/carry/slurm" | cut -f1) carried; GRPO requeued and finished on it)"
