#!/usr/bin/env bash
# cluster.sh start DIR | stop DIR: a real single-node Slurm cluster (munge + slurmctld + slurmd) in DIR, for the
# slurm-labelled tests. Needs root (slurmd runs jobs as their users). After start, `source DIR/env` sets SLURM_CONF.
# Two partitions: `low` (default, preemptible, requeue on preemption) and `high` (preempts low).
set -euo pipefail
cmd=$1 dir=$(realpath -m "$2")

stop() {
  for p in slurmd slurmctld; do
    [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
  [ -f "$dir/munge/munged.pid" ] && kill "$(cat "$dir/munge/munged.pid")" 2>/dev/null || true
  sleep 0.5
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: cluster.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: needs root (slurmd)" >&2; exit 1; }

mkdir -p "$dir"/{spool,state,log,munge}
node=$(hostname -s)
# More CPUs than the machine has (config_overrides keeps the node up) so role steps can run side by side.
cpus=$(( $(nproc) > 8 ? $(nproc) : 8 ))

# munge: our own key and socket, so the test never depends on a system daemon.
chown munge:munge "$dir/munge" 2>/dev/null || true
if [ ! -f "$dir/munge/munge.key" ]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chown munge:munge "$dir/munge/munge.key" 2>/dev/null || true
  chmod 400 "$dir/munge/munge.key"
fi
sock="$dir/munge/munge.socket"
munge_user=munge; id munge >/dev/null 2>&1 || munge_user=root
chmod 755 "$dir"
if [ "$munge_user" = munge ]; then
  su -s /bin/sh munge -c "munged --socket=$sock --key-file=$dir/munge/munge.key --pid-file=$dir/munge/munged.pid --log-file=$dir/munge/munged.log --seed-file=$dir/munge/seed --force"
else
  munged --socket="$sock" --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed" --force
fi

cat > "$dir/slurm.conf" <<CONF
ClusterName=cpttest
SlurmctldHost=localhost
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=10
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$((20000 + RANDOM % 20000))
SlurmdPort=$((40000 + RANDOM % 10000))
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
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=low Nodes=$node Default=YES MaxTime=INFINITE State=UP PriorityTier=1 PreemptMode=REQUEUE GraceTime=10 OverSubscribe=NO
PartitionName=high Nodes=$node Default=NO MaxTime=INFINITE State=UP PriorityTier=10 PreemptMode=OFF
CONF
echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env"
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF" -N "$node"
for _ in $(seq 1 60); do
  if sinfo -h -o '%T' 2>/dev/null | grep -q idle; then exit 0; fi
  sleep 0.5
done
echo "cluster.sh: node not idle after 30 s; logs in $dir/log" >&2
sinfo >&2 || true
tail -20 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
exit 1
