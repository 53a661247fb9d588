#!/bin/bash
# hide_system_slurm.sh CMD [ARG...]: runs CMD from a bare environment (env -i, the system's PATH) in a private mount
# namespace where this machine's Slurm binaries and plugins, munge and libpmix are hidden (empty folders, /dev/null
# over each file), so whatever CMD does with Slurm uses a carried copy (tests/gpu/slurm_carry.sh) or fails: how the
# GPU machine, which has none of them, is imitated here. Needs root. Exit status: CMD's.
set -euo pipefail
[ $# -gt 0 ] || { sed -n '2,5p' "$0"; exit 2; }
hide=()
for f in /usr/sbin/slurmctld-wlm /usr/sbin/slurmd-wlm /usr/sbin/slurmstepd-wlm /usr/bin/srun /usr/bin/sbatch \
         /usr/bin/scontrol /usr/bin/squeue /usr/bin/scancel /usr/bin/sinfo /usr/sbin/munged /usr/bin/munge \
         /usr/bin/unmunge /usr/lib/x86_64-linux-gnu/libmunge.so.2 /usr/lib/x86_64-linux-gnu/libpmix.so.2; do
  [ -e "$f" ] && hide+=("$(readlink -f "$f")")
done
# the files first: libpmix.so.2 leads into pmix2, which the folders' mounts then cover
# shellcheck disable=SC2016
exec unshare -m --propagation private bash -c '
  set -e
  n=$1; shift
  for f in "${@:1:$n}"; do mount --bind /dev/null "$f"; done
  shift "$n"
  for d in /usr/lib/x86_64-linux-gnu/slurm-wlm /usr/lib/x86_64-linux-gnu/pmix2; do
    [ -d "$d" ] && mount -t tmpfs none "$d"
  done
  exec env -i PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin HOME="${HOME:-/root}" "$@"
' hide "${#hide[@]}" "${hide[@]}" "$@"
