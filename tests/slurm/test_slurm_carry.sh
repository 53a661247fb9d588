#!/usr/bin/env bash
# The Slurm that tests/gpu/slurm_carry.sh gathers for the GPU machine (which has no Slurm, munge or libpmix) runs on
# its own: with the system's Slurm binaries, plugins, munge and libpmix hidden (tests/gpu/hide_system_slurm.sh: a
# private mount namespace, a bare environment), tests/gpu/slurm_device.sh check starts the carried cluster (munged
# as root, the node's GPU as a gres with /dev/null standing in for /dev/nvidia0), checks that every carried file's
# libraries resolve inside the carry, and runs `sbatch --wrap hostname`, a 2-task `srun --mpi=pmix` (cpt check-bootstrap too) and a
# --gres=gpu:1 job that must see CUDA_VISIBLE_DEVICES=0.
set -euo pipefail
BUILD=${CPT_BUILD:-$(pwd)/build}
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root (slurmd, mounts)"; exit 77; }
command -v slurmctld > /dev/null || { echo "skip: no Slurm here to gather"; exit 77; }
unshare -m --propagation private true 2> /dev/null || { echo "skip: no private mount namespace"; exit 77; }
T=$(mktemp -d /tmp/cpt-slurmcarry-XXXXXX)
chmod 755 "$T"
trap 'rm -rf "$T"' EXIT

tests/gpu/slurm_carry.sh "$T/carry"
mkdir -p "$T/carry/bin" && cp "$BUILD/cpt" "$T/carry/bin/"

# the system's copy must be out of reach, or the check below proves nothing
if tests/gpu/hide_system_slurm.sh /usr/bin/sbatch --version > /dev/null 2>&1; then
  echo "FAIL: the system's sbatch still runs under hide_system_slurm.sh"; exit 1
fi
tests/gpu/hide_system_slurm.sh tests/gpu/slurm_device.sh check "$T/cluster" "$T/carry" | tee "$T/check.log"
grep -q "slurm_device.sh check: ok" "$T/check.log" || { echo "FAIL: the carried Slurm's check"; exit 1; }
grep -q "^ok: srun --mpi=pmix -n 2 cpt check-bootstrap" "$T/check.log" || { echo "FAIL: no cpt check-bootstrap"; exit 1; }
echo "test_slurm_carry: ok ($(du -sh "$T/carry/slurm" | cut -f1) carried)"
