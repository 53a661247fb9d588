#!/bin/bash
# A single-node Slurm on the lent GPU machine (no Slurm, no munge there), from the copy tests/gpu/slurm_carry.sh
# gathers into CARRY/slurm: tests/slurm/cluster.sh's cluster, with the carried daemons, plugins and libraries, munged
# as root on its own socket, CPUs = the machine's, and the GPU as a generic resource.
#
#   tests/gpu/slurm_device.sh start DIR CARRY   start it in DIR; then `source DIR/env` (SLURM_CONF, PATH and
#                                               LD_LIBRARY_PATH of the carried copy) and use sbatch, srun, ...
#   tests/gpu/slurm_device.sh stop DIR          stop it (and undo the libpmix mount)
#   tests/gpu/slurm_device.sh check DIR CARRY   start, then check: every carried file's libraries resolve inside
#                                               CARRY (but the C library's), `sbatch --wrap hostname` completes, a
#                                               2-task `srun --mpi=pmix` runs (and `cpt check-bootstrap` where CARRY
#                                               has cpt), a --gres=gpu:1 job sees CUDA_VISIBLE_DEVICES, and so do
#                                               its steps as cpt-sched starts them (one holding the GPU, one beside
#                                               it with --overlap, one with --gres=none); then stop
#
# The node's GPU: gres.conf `Name=gpu File=/dev/nvidia0` (AutoDetect off: there is no NVML plugin); on a machine
# without /dev/nvidia0, File=/dev/null stands in, so the gres path is checked here too. The node's CPUs: the
# machine's (CLUSTER_CPUS=N declares more, as tests/slurm/cluster.sh allows). MODE=cpu: no gres at all, and
# cluster.sh's CPU count (at least 8, so the CPU runs' steps fit side by side).
set -euo pipefail
# DIR and CARRY as given from where it was called, then from the repository root (tests/slurm/cluster.sh)
args=("$@")
for i in 1 2; do [ -z "${args[$i]:-}" ] || args[i]=$(realpath -m "${args[$i]}"); done
set -- "${args[@]}"
cd "$(dirname "$0")/../.."
# Slurm's pmix plugin dlopens libpmix by this absolute path (not through LD_LIBRARY_PATH)
PMIX_PREFIX=/usr/lib/x86_64-linux-gnu/pmix2
GLIBC='/(libc|libm|libdl|libpthread|librt|libresolv|libutil|libanl|libnsl|libnss_[a-z]*|libBrokenLocale)\.so|ld-linux|linux-vdso'

# the machine's CPUs: nproc alone honours OMP_NUM_THREADS (grpo_slurm_run.sh sets 1, and a 1-CPU node never
# started the 3-task GRPO job)
cpus_here() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }

carried() { # CARRY: the carried Slurm's folder, checked
  local s
  s=$(cd "$1" && pwd)/slurm
  [ -x "$s/bin/slurmctld" ] || { echo "slurm_device.sh: no carried Slurm in $1 (tests/gpu/slurm_carry.sh)" >&2; exit 1; }
  echo "$s"
}

# The carried libpmix at PMIX_PREFIX: a bind mount, undone by stop. Nothing to do where the same file is there.
mount_pmix() { # SLURM DIR
  local s=$1 dir=$2
  cmp -s "$PMIX_PREFIX/lib/libpmix.so" "$s/pmix2/lib/libpmix.so" && return 0
  local made=0
  [ -e "$PMIX_PREFIX" ] || { mkdir -p "$PMIX_PREFIX" && made=1; }
  if mount --bind "$s/pmix2" "$PMIX_PREFIX"; then
    echo "$PMIX_PREFIX" > "$dir/pmix.mount"
    echo "slurm_device.sh: mounted the carried libpmix at $PMIX_PREFIX"
  elif [ $made = 1 ] && rmdir "$PMIX_PREFIX" && ln -s "$s/pmix2" "$PMIX_PREFIX"; then # no mounts: a link will do
    echo "$PMIX_PREFIX" > "$dir/pmix.link"
    echo "slurm_device.sh: linked $PMIX_PREFIX to the carried libpmix (mount --bind failed)"
  else
    echo "slurm_device.sh: cannot put $s/pmix2 at $PMIX_PREFIX: srun --mpi=pmix will fail" >&2
  fi
}

start() {
  local dir=$1 s
  s=$(carried "$2")
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  # the carry's own lib/ (the cpt programs' libraries, tests/gpu/device_all.sh build) serves the jobs too
  export PATH="$s/bin:$PATH" LD_LIBRARY_PATH="$s/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  [ ! -d "$2/lib" ] || LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$2/lib"
  mount_pmix "$s" "$dir"
  local gres="" gres_conf="" cpus=""
  if [ "${MODE:-gpu}" != cpu ]; then
    local file=/dev/nvidia0
    [ -e "$file" ] || file=/dev/null
    gres=gpu:1 gres_conf=$'AutoDetect=off\n'"Name=gpu File=$file" cpus=${CLUSTER_CPUS:-$(cpus_here)}
  fi
  # slurmd initialises a cgroup plugin even with proctrack/linuxproc and task/none. Autodetect picks cgroup/v2 on a
  # cgroup2 mount, whose plugin asks systemd (dbus) for a scope: the lent GPU machine (gVisor) has cgroup2 and no
  # dbus, and slurmd fails its start. cgroup/v1's start touches no cgroup (nothing here constrains), so it is used
  # there; where even that fails, cgroup/v2 with IgnoreSystemd=yes (slurmd makes its own folders).
  local cg=("") rc=1
  if [ "${CGROUP:-}" = v1 ] || { [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ] &&
                                  [ ! -S /run/dbus/system_bus_socket ]; }; then
    cg=("CgroupPlugin=cgroup/v1" $'CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes')
  fi
  for c in "${cg[@]}"; do
    [ -z "$c" ] || echo "slurm_device.sh: cgroup.conf: $(echo "$c" | paste -sd' ')"
    rc=0
    CLUSTER_BIN=$s/bin CLUSTER_PLUGIN_DIR=$s/plugins CLUSTER_MUNGE_USER=root CLUSTER_GRES=$gres \
      CLUSTER_GRES_CONF=$gres_conf CLUSTER_CPUS=$cpus CLUSTER_CGROUP_CONF=$c tests/slurm/cluster.sh start "$dir" || rc=$?
    [ $rc = 3 ] || break # 3: slurmd refused this configuration; the next one, if any
  done
  [ $rc = 0 ] || { echo "slurm_device.sh: the cluster did not start (rc $rc)" >&2; return 1; }
  { echo "export PATH=$s/bin:\$PATH"; echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; } >> "$dir/env"
  echo "slurm_device.sh: cluster up in $dir ($(grep -o 'CPUs=[0-9]*' "$dir/slurm.conf") ${gres:+Gres=$gres}" \
       "$(grep -o 'File=.*' "$dir/gres.conf" 2>/dev/null || true)); source $dir/env"
}

# every job of this cluster first (a batch step, a cpt-sched draining its steps would outlive the daemons)
end_jobs() { # DIR
  [ -f "$1/env" ] || return 0
  (
    source "$1/env"
    local jobs
    for round in 1 2; do
      jobs=$(timeout 5 squeue -h -o %i 2>/dev/null || true)
      [ -n "$jobs" ] || break
      # shellcheck disable=SC2086
      [ $round = 1 ] || timeout 5 scancel --quiet --full --signal=KILL $jobs 2>/dev/null || true
      # shellcheck disable=SC2086
      timeout 5 scancel --quiet $jobs 2>/dev/null || true
      # a job that will not end here is swept after the daemons stop (sweep_steps)
      for _ in $(seq 1 30); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.5; done
    done
  )
}

# What a job left once the daemons are gone: this cluster's slurmstepd (its SLURM_CONF says which cluster) and every
# process below it, by id.
sweep_steps() { # DIR
  local conf=$1/slurm.conf p kids=() all=()
  for p in $(ps -eo pid=,comm= | awk '$2 == "slurmstepd" {print $1}'); do
    { tr '\0' '\n' < "/proc/$p/environ"; } 2>/dev/null | grep -qx "SLURM_CONF=$conf" && kids+=("$p")
  done
  while [ ${#kids[@]} -gt 0 ]; do
    all+=("${kids[@]}")
    mapfile -t kids < <(ps -eo pid=,ppid= | awk -v set=" ${kids[*]} " 'index(set, " " $2 " ") {print $1}')
  done
  [ ${#all[@]} -eq 0 ] || { echo "slurm_device.sh: killing what jobs left: ${all[*]}"; kill -9 "${all[@]}" 2>/dev/null || true; }
}

stop() {
  local dir=$1
  end_jobs "$dir"
  tests/slurm/cluster.sh stop "$dir"
  sweep_steps "$dir"
  if [ -f "$dir/pmix.mount" ]; then umount "$(cat "$dir/pmix.mount")" && rm -f "$dir/pmix.mount"; fi
  if [ -f "$dir/pmix.link" ]; then rm -f "$(cat "$dir/pmix.link")" "$dir/pmix.link"; fi
}

# Every carried program and library finds its libraries in the carry, or is the C library's family.
check_ldd() { # SLURM
  local s=$1 bad=0 f out
  for f in "$s"/bin/* "$s"/plugins/*.so "$s"/lib/*.so* "$s"/pmix2/lib/libpmix.so "$s"/pmix2/lib/pmix/*.so; do
    out=$(ldd "$f" 2>&1 | grep -v -E "$GLIBC|statically linked" | grep -v -F "=> $s/" || true)
    [ -z "$out" ] || { echo "FAIL: $f resolves outside the carry: $out"; bad=1; }
  done
  [ $bad -eq 0 ] && echo "ok: every carried file's libraries resolve inside $s (but the C library's)"
  return $bad
}

wait_done() { # JOB TIMEOUT_S: its final state
  local end=$((SECONDS + $2)) st=""
  while [ $SECONDS -lt $end ]; do
    st=$(scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    case "$st" in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY) break ;; esac
    sleep 0.5
  done
  echo "$st"
}

check() {
  local carry=$2 s rc=0 job st out
  CHECK_DIR=$1
  s=$(carried "$carry")
  trap 'stop "$CHECK_DIR"' EXIT
  start "$CHECK_DIR" "$carry"
  local dir
  dir=$(cd "$CHECK_DIR" && pwd)
  source "$dir/env"
  echo "slurm: $(command -v sbatch); $(sbatch --version)"
  check_ldd "$s" || rc=1

  job=$(sbatch --parsable --output="$dir/hostname.out" --wrap hostname)
  st=$(wait_done "$job" 60)
  if [ "$st" = COMPLETED ] && [ "$(cat "$dir/hostname.out")" = "$(hostname)" ]; then
    echo "ok: sbatch --wrap hostname: job $job $st, printed $(cat "$dir/hostname.out")"
  else
    echo "FAIL: sbatch --wrap hostname: job $job ${st:-not done}, printed '$(cat "$dir/hostname.out" 2>/dev/null)'"; rc=1
  fi

  # --quiet: no "srun: job N queued and waiting for resources" when the last job's CPUs are not free yet
  out=$(timeout 60 srun --quiet --mpi=pmix -n 2 bash -c 'echo "rank $PMIX_RANK of $SLURM_NTASKS"' 2>&1 | sort) || true
  if [ "$out" = $'rank 0 of 2\nrank 1 of 2' ]; then
    echo "ok: srun --mpi=pmix -n 2: $(echo "$out" | paste -sd';')"
  else
    echo "FAIL: srun --mpi=pmix -n 2 printed: $out"; rc=1
  fi
  if [ -x "$carry/bin/cpt" ]; then
    out=$(timeout 60 srun --quiet --mpi=pmix -n 2 "$carry/bin/cpt" check-bootstrap --kind pmix 2>&1) || true
    if [ "$(echo "$out" | grep -c 'transport pmix')" -eq 2 ] &&
       [ "$(echo "$out" | awk '/transport pmix/ {print $5}' | sort -u | wc -l)" -eq 1 ]; then
      echo "ok: srun --mpi=pmix -n 2 cpt check-bootstrap: $(echo "$out" | paste -sd';')"
    else
      echo "FAIL: srun --mpi=pmix -n 2 cpt check-bootstrap printed: $out"; rc=1
    fi
  fi

  if [ "${MODE:-gpu}" != cpu ]; then
    job=$(sbatch --parsable --gres=gpu:1 --output="$dir/gpu.out" \
      --wrap 'echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset}"; nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"')
    st=$(wait_done "$job" 60)
    if [ "$st" = COMPLETED ] && grep -q '^CUDA_VISIBLE_DEVICES=0$' "$dir/gpu.out"; then
      echo "ok: sbatch --gres=gpu:1: job $job $st, $(paste -sd' ' "$dir/gpu.out")"
    else
      echo "FAIL: sbatch --gres=gpu:1: job $job ${st:-not done}, printed '$(cat "$dir/gpu.out" 2>/dev/null)'"; rc=1
    fi
  fi
  if [ "${MODE:-gpu}" != cpu ]; then
    # the steps cpt-sched starts under --gres=gpu:1: the trainer's holds the GPU, a rollout worker beside it
    # (--overlap) and the reward worker (--gres=none) start at once; which GPU does each see?
    cat > "$dir/steps.sh" <<'EOF'
#!/bin/bash
see='echo "$0: CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-unset} $(nvidia-smi -L 2>/dev/null | head -1)"'
srun --exact -n1 -c1 --gpus-per-task=1 bash -c "sleep 4; $see" gpu-step &
sleep 1
srun --exact -n1 -c1 --overlap --gpus-per-task=1 bash -c "$see" overlap-step &
srun --exact -n1 -c1 --gres=none bash -c "$see" gres-none-step &
wait
EOF
    job=$(sbatch --parsable --gres=gpu:1 --ntasks=2 --cpus-per-task=1 --output="$dir/steps.out" "$dir/steps.sh")
    st=$(wait_done "$job" 60)
    if [ "$st" = COMPLETED ] && grep -q '^gpu-step: CUDA_VISIBLE_DEVICES=0' "$dir/steps.out" &&
       grep -q '^overlap-step: CUDA_VISIBLE_DEVICES=0' "$dir/steps.out" && grep -q '^gres-none-step' "$dir/steps.out" &&
       [ "$(tail -1 "$dir/steps.out" | cut -d: -f1)" = gpu-step ]; then # the others did not wait for it
      echo "ok: steps of a --gres=gpu:1 job, the GPU step's line last: $(paste -sd';' "$dir/steps.out")"
    else
      echo "FAIL: steps of a --gres=gpu:1 job: job $job ${st:-not done}, printed '$(cat "$dir/steps.out" 2>/dev/null)'"; rc=1
    fi
  fi
  [ $rc -eq 0 ] && echo "slurm_device.sh check: ok" || { echo "slurm_device.sh check: FAILED (logs in $dir/log)"; tail -n 20 "$dir"/log/*.log; }
  return $rc
}

case "${1:-}" in
start) start "${2:?DIR}" "${3:?CARRY}" ;;
stop) stop "${2:?DIR}" ;;
check) check "${2:?DIR}" "${3:?CARRY}" ;;
*) sed -n '2,18p' "$0"; exit 2 ;;
esac
