#!/usr/bin/env bash
# A one-node Slurm cluster for tests of an HPC pool: slurmctld, slurmd and slurmdbd (for sacct)
# as root, four fake GPUs declared through GRES, everything under one folder, with its own munged
# (socket, key, pid, log and seed in DIR/munge), so it starts beside any other munged on the machine.
#
#   deploy/slurm-dev/start.sh [DIR]    (default /tmp/klique-slurm; prints `export SLURM_CONF=...`)
#   SLURM_DEV_GPUS (default 4) and SLURM_DEV_CPUS (default 8) size the node.
#   deploy/slurm-dev/stop.sh  [DIR]
#
# Needs Debian's slurm-wlm, slurmdbd and munge, and MariaDB on 127.0.0.1:3306 (root, no password).
set -euo pipefail

dir=$(realpath -m "${1:-/tmp/klique-slurm}")
host=$(hostname -s)
gpus=${SLURM_DEV_GPUS:-4}
cpus=${SLURM_DEV_CPUS:-8}  # each job takes a CPU: 120 one-GPU jobs at once need 120
export SLURM_CONF="$dir/slurm.conf"

if [ -f "$dir/slurmctld.pid" ] && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
  echo "export SLURM_CONF=$SLURM_CONF"
  exit 0
fi
mkdir -p "$dir/state" "$dir/spool" "$dir/log" "$dir/dev" "$dir/munge"
munge_socket="$dir/munge/munge.socket.2"
for ((i = 0; i < gpus; i++)); do
  [ -e "$dir/dev/nvidia$i" ] || mknod "$dir/dev/nvidia$i" c 1 3
done

cat >"$SLURM_CONF" <<CONF
ClusterName=klique-dev
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10,socket=$munge_socket
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_interval=2
# Ended jobs stay MinJobAge seconds: a 15,000-task replay (bench/kueue_replay.py --cohorts 5)
# holds more than the default MaxJobCount of 10,000 at once.
MinJobAge=300
MaxJobCount=50000
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=$host
AccountingStoragePass=$munge_socket
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$cpus RealMemory=4000 Gres=gpu:$gpus State=UNKNOWN
PartitionName=gpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

cat >"$dir/gres.conf" <<CONF
AutoDetect=off
NodeName=$host Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]
CONF

cat >"$dir/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$munge_socket
DbdHost=$host
SlurmUser=root
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=3306
StorageUser=root
StorageLoc=klique_slurm_acct
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
CONF
chmod 600 "$dir/slurmdbd.conf"

wait_for() {
  local what=$1 tries=$2
  shift 2
  for ((i = 0; i < tries; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "slurm-dev: $what did not come up; logs in $dir/log" >&2
  exit 1
}

if ! mysqladmin -h 127.0.0.1 -u root ping >/dev/null 2>&1; then
  echo "slurm-dev: slurmdbd needs MariaDB on 127.0.0.1:3306 (root, no password)" >&2
  exit 1
fi
chmod a+x "$dir"
chown munge:munge "$dir/munge"
chmod 755 "$dir/munge"
[ -f "$dir/munge/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key"
if ! { [ -f "$dir/munge/munged.pid" ] && kill -0 "$(cat "$dir/munge/munged.pid")" 2>/dev/null; }; then
  runuser -u munge -- /usr/sbin/munged --socket="$munge_socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"
fi
wait_for munged 20 munge -n --socket="$munge_socket"

slurmdbd
wait_for slurmdbd 60 sacctmgr -n list cluster
sacctmgr -i add cluster klique-dev >/dev/null 2>&1 || true
slurmctld
slurmd
wait_for "an idle node" 60 bash -c '[ "$(sinfo -h -o %T)" = idle ]'
echo "export SLURM_CONF=$SLURM_CONF"
