#!/usr/bin/env bash
# The Slurm that tests/gpu/slurm_carry.sh gathers for the GPU machine (which has no Slurm, munge or libpmix) runs on
# its own: in a private mount namespace the system's Slurm binaries, plugins, munge and libpmix are hidden, and
# tests/gpu/slurm_device.sh check, from a bare environment, starts the carried cluster (munged as root, the node's
# GPU as a gres with /dev/null standing in for /dev/nvidia0), checks that every carried file's libraries resolve inside
# the carry, and runs `sbatch --wrap hostname`, a 2-task `srun --mpi=pmix` (cpt check-bootstrap too) and a
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

hide=(/usr/sbin/slurmctld-wlm /usr/sbin/slurmd-wlm /usr/sbin/slurmstepd-wlm /usr/bin/srun /usr/bin/sbatch
      /usr/bin/scontrol /usr/bin/squeue /usr/bin/scancel /usr/bin/sinfo /usr/sbin/munged /usr/bin/munge
      /usr/bin/unmunge)
hide+=($(readlink -f /usr/lib/x86_64-linux-gnu/libmunge.so.2 /usr/lib/x86_64-linux-gnu/libpmix.so.2))
# shellcheck disable=SC2016
unshare -m --propagation private bash -c '
  set -e
  for f in "${@:2}"; do mount --bind /dev/null "$f"; done
  mount -t tmpfs none /usr/lib/x86_64-linux-gnu/slurm-wlm
  mount -t tmpfs none /usr/lib/x86_64-linux-gnu/pmix2
  env -i PATH=/usr/bin:/bin:/usr/sbin:/sbin HOME=/root tests/gpu/slurm_device.sh check "$1/cluster" "$1/carry"
' hide "$T" "${hide[@]}" | tee "$T/check.log"
grep -q "slurm_device.sh check: ok" "$T/check.log" || { echo "FAIL: the carried Slurm's check"; exit 1; }
grep -q "^ok: srun --mpi=pmix -n 2 cpt check-bootstrap" "$T/check.log" || { echo "FAIL: no cpt check-bootstrap"; exit 1; }
echo "test_slurm_carry: ok ($(du -sh "$T/carry/slurm" | cut -f1) carried)"
