#!/usr/bin/env bash
# cluster.sh start DIR [GPUS] | stop DIR: a real single-node Slurm cluster (munge + slurmctld + slurmd) in DIR, for the
# slurm-labelled tests. Needs root (slurmd runs jobs as their users). After start, `source DIR/env` sets SLURM_CONF.
# Two partitions: `low` (default, preemptible, requeue on preemption) and `high` (preempts low).
# GPUS > 0: the node declares that many GPUs (gres gpu, device files DIR/dev/nvidiaN made as copies of /dev/null), so
# Slurm allocates them to jobs and steps and sets CUDA_VISIBLE_DEVICES / SLURM_STEP_GPUS as on a GPU node.
#
# The environment may point it at another copy of Slurm and describe the node (tests/gpu/slurm_device.sh does, with
# the copy tests/gpu/slurm_carry.sh gathers for the GPU machine); unset, it uses the system's:
#   CLUSTER_BIN         folder of slurmctld, slurmd, slurmstepd, sinfo and munged (default: found on PATH)
#   CLUSTER_PLUGIN_DIR  PluginDir (default: Slurm's built-in one)
#   CLUSTER_CPUS        the node's CPUs (default: the machine's, at least 8)
#   CLUSTER_GRES        the node's Gres=, e.g. gpu:1 (GresTypes from its names), with CLUSTER_GRES_CONF: the lines of
#                       gres.conf, e.g. "AutoDetect=off" and "Name=gpu File=/dev/nvidia0" (one a line); GPUS
#                       takes precedence
#   CLUSTER_MUNGE_USER  the user munged runs as (default: munge where that user exists, else root)
#   CLUSTER_CGROUP_CONF the lines of cgroup.conf (beside slurm.conf), e.g. "CgroupPlugin=cgroup/v1" (default: none,
#                       Slurm's autodetect)
#   CLUSTER_CONF        more lines of slurm.conf, e.g. "SlurmctldDebug=debug" (default: none)
set -euo pipefail
cmd=$1 dir=$(realpath -m "$2") gpus=${3:-0}

stop_slurm() {
  for p in slurmd slurmctld; do
    [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
}
stop() {
  stop_slurm
  [ -f "$dir/munge/munged.pid" ] && kill "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true
  sleep 0.5
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (slurmd)" >&2; exit 1; }

mkdir -p "$dir"/{spool,state,log,munge}
node=$(hostname -s 2>/dev/null || uname -n | cut -d. -f1)
# More CPUs than the machine has (config_overrides keeps the node up) so role steps can run side by side.
# (nproc without OMP_NUM_THREADS, which it would honour)
here=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
cpus=${CLUSTER_CPUS:-$(( here > 8 ? here : 8 ))}
bin=${CLUSTER_BIN:+$CLUSTER_BIN/}

# munge: our own key and socket, so the test never depends on a system daemon.
chown munge:munge "$dir/munge" 2>/dev/null || true
if [ ! -f "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$dir/munge/munge.key" 2>/dev/null || true
  chmod 400 "$dir/munge/munge.key"
fi
sock="$dir/munge/munge.socket"
munge_user=${CLUSTER_MUNGE_USER:-munge}; id "$munge_user" >/dev/null 2>&1 || munge_user=root
chmod 755 "$dir"
if [ "$munge_user" != root ]; then
  su -s /bin/sh "$munge_user" -c "${bin}munged --socket=$sock --key-file=$dir/munge/munge.key --pid-file=$dir/munge/munged.pid --log-file=$dir/munge/munged.log --seed-file=$dir/munge/seed --force"
else
  "${bin}munged" --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" --force
fi

# A TCP port in [LO, LO + SPAN) that no socket of this machine holds (any state, from /proc/net/tcp*). Both ranges
# sit below Linux's ephemeral ports (32768-60999), so no outgoing connection (redis clients, srun) takes ours
# between the pick and the bind.
pick_port() {
  local lo=$1 span=$2 p used
  used=$(cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$2 ~ /:[0-9A-F]+$/ {split($2, a, ":"); print a[2]}' |
    while read -r h; do echo $((16#$h)); done | sort -u)
  for _ in $(seq 1 100); do
    p=$((lo + RANDOM % span))
    grep -qx "$p" <<< "$used" || { echo "$p"; return; }
  done
  echo "$p"
}

# the optional lines: another PluginDir, generic resources (gres.conf sits beside slurm.conf)
gres_node="" gres_types=""
rm -f "$dir/gres.conf" # an earlier start's
if [ "$gpus" -gt 0 ]; then
  mkdir -p "$dir/dev"
  for i in $(seq 0 $((gpus - 1))); do [ -e "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 1 3; done
  echo "Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]" > "$dir/gres.conf"
  gres_node="Gres=gpu:$gpus" gres_types="GresTypes=gpu"
elif [ -n "${CLUSTER_GRES:-}" ]; then
  gres_types="GresTypes=$(echo "$CLUSTER_GRES" | tr ',' '\n' | cut -d: -f1 | sort -u | paste -sd,)"
  gres_node="Gres=$CLUSTER_GRES"
  printf '%s\n' "${CLUSTER_GRES_CONF:-}" > "$dir/gres.conf"
fi
rm -f "$dir/cgroup.conf"
[ -z "${CLUSTER_CGROUP_CONF:-}" ] || printf '%s\n' "$CLUSTER_CGROUP_CONF" > "$dir/cgroup.conf"
stepd=()
[ -n "$bin" ] && stepd=(-d "${bin}slurmstepd") # slurmd looks for slurmstepd in its build's prefix otherwise

write_conf() {
cat > "$dir/slurm.conf" <<CONF
ClusterName=cpttest
SlurmctldHost=localhost
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=10
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
MinJobAge=600
SchedulerParameters=sched_interval=2,bf_interval=2
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
SlurmctldParameters=preempt_send_user_signal
${CLUSTER_PLUGIN_DIR:+PluginDir=$CLUSTER_PLUGIN_DIR}
$gres_types
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus $gres_node State=UNKNOWN
PartitionName=low Nodes=$node Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=10 OverSubscribe=NO
PartitionName=high Nodes=$node Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
${CLUSTER_CONF:-}
CONF
}

# Up to 3 starts, each with fresh ports and state: a daemon that cannot bind (or hangs before it forks) costs one
# attempt, not the test. The daemons run under a timeout (each forks into the background once it is up).
for attempt in 1 2 3; do
  ctld_port=$(pick_port 10000 10000)
  slurmd_port=$(pick_port 20000 10000)
  rm -rf "$dir/state" "$dir/spool" && mkdir -p "$dir/state" "$dir/spool"
  write_conf
  echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"
  export SLURM_CONF=$dir/slurm.conf
  timeout 60 "${bin}slurmctld" -f "$SLURM_CONF" || echo "cluster.sh: slurmctld start failed (rc $?)" >&2
  timeout 60 "${bin}slurmd" -f "$SLURM_CONF" -N "$node" "${stepd[@]}" || echo "cluster.sh: slurmd start failed (rc $?)" >&2
  # slurmd refused its configuration (its cgroup plugin, say): new ports will not help; exit 3 at once
  if grep -q -E 'slurmd initialization failed|\] fatal:' "$dir/log/slurmd.log" 2>/dev/null; then
    echo "cluster.sh: slurmd refused its configuration:" >&2
    grep -E 'error:|fatal:' "$dir/log/slurmd.log" | tail -n 6 >&2
    stop
    rm -rf "$dir/log.refused" && mv "$dir/log" "$dir/log.refused" && mkdir -p "$dir/log" # a next start's log is its own
    exit 3
  fi
  # by the clock: without a controller each sinfo waits out its message timeout (~10 s), so 60 tries took 10 min
  end=$((SECONDS + 30))
  while [ $SECONDS -lt $end ]; do
    if timeout 3 "${bin}sinfo" -h -o '%T' 2>/dev/null | grep -q idle; then exit 0; fi
    sleep 0.5
  done
  echo "cluster.sh: node not idle after 30 s (attempt $attempt, ports $ctld_port/$slurmd_port); logs in $dir/log" >&2
  timeout 5 "${bin}sinfo" >&2 || true
  tail -n 20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
  stop_slurm
  sleep 1
  mv "$dir/log" "$dir/log.$attempt" 2>/dev/null || true
  mkdir -p "$dir/log"
done
exit 1
