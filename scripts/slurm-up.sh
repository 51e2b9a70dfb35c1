#!/usr/bin/env bash
# Install and start the tests' Slurm cluster on this one machine (issue 49), like a university's:
# four nodes (node1..node4, each slurmd in UTS and mount namespaces of its own), accounting through
# slurmdbd on MariaDB, fake GPUs as GRES on node3 and node4, partitions with time limits, a
# preemptible one, ordinary users with associations, a QOS limit, and node-local scratch.
# Its config is Slurm's default, /etc/slurm/slurm.conf: root, the test users and Slurm's PBS front
# ends (qsub, qstat, qdel) all reach it. Needs root; idempotent: running daemons (by their pid
# files) are left running. scripts/slurm-down.sh stops it.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "slurm-up: needs root to install and start the test cluster; skipping" >&2
    exit 0
fi

NAME=easylaunch-realistic
ETC=/etc/slurm
export SLURM_CONF=$ETC/slurm.conf
STATE=/var/lib/slurm-realistic
SPOOL=/var/spool/slurm-realistic
LOGS=/var/log/slurm-realistic
RUN=/run/slurm-realistic
SCRATCH=/var/tmp/slurm-realistic-scratch  # each node's own, in its jobs (empty out of them)
CTLD_PORT=6917
DBD_PORT=6919
NODE_PORT=6920  # node N listens on NODE_PORT + N
DB=slurm_realistic_acct
NODES="node1 node2 node3 node4"
USERS="easyuser easyremote"  # easyuser: a second user here; easyremote: scripts/ssh-up.sh's SSH user
ACCOUNT=easyusers

# Install only what is missing (apt's policy here starts no service: we start them below).
# slurm-wlm-torque: Slurm's PBS front ends, which run the pbs mode's job scripts; bubblewrap: the
# tests' singularity stand-in; tmux drives the interactive shells (easylaunch shell, interactive).
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v munged >/dev/null || ! command -v slurmdbd >/dev/null \
        || ! command -v mariadbd >/dev/null || ! command -v qsub >/dev/null \
        || ! command -v bwrap >/dev/null || ! command -v tmux >/dev/null \
        || ! ls /usr/lib/*/slurm-wlm/accounting_storage_mysql.so >/dev/null 2>&1; then
    "$(dirname "$0")/apt-install.sh" slurm-wlm munge slurmdbd slurm-wlm-mysql-plugin \
        mariadb-server slurm-wlm-torque bubblewrap tmux >/dev/null
fi

# A daemon runs when its pid file names a live process.
running() {
    [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Earlier set-ups ran a one-node cluster on /etc/slurm and this one on /etc/slurm-realistic: stop
# both (a daemon keeps the config file it started with).
if [ -e /etc/slurm-realistic ] || grep -q '^ClusterName=easylaunch-test$' "$SLURM_CONF" 2>/dev/null; then
    for pid_file in /run/slurmd.pid /run/slurmctld.pid "$RUN"/slurmd-*.pid "$RUN/slurmctld.pid"; do
        if running "$pid_file"; then
            pid=$(cat "$pid_file") && kill "$pid"
            while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
        fi
    done
    rm -rf /etc/slurm-realistic "$SLURM_CONF"
fi

# Wait (bounded) until a command succeeds; else say what failed and where to look.
wait_until() {
    local what=$1 tries=$2
    shift 2
    for _ in $(seq 1 "$tries"); do
        if "$@" >/dev/null 2>&1; then
            return 0
        fi
        sleep 0.5
    done
    echo "slurm-up: $what did not come up; see $LOGS/" >&2
    exit 1
}

mkdir -p "$ETC" "$STATE/ctld" "$LOGS" "$RUN" "$ETC/gpus" "$SCRATCH"
for node in $NODES; do
    mkdir -p "$SPOOL/$node"
done

# The node names resolve to this machine.
if ! grep -q -E '^127\.0\.0\.1[[:space:]].*\bnode1\b' /etc/hosts; then
    echo "127.0.0.1 node1 node2 node3 node4" >> /etc/hosts
fi

"$(dirname "$0")/munge-up.sh"  # munge: Slurm's authentication

# MariaDB on its unix socket only, with a database user for slurmdbd.
mkdir -p /run/mysqld
chown mysql:mysql /run/mysqld
if ! mariadb-admin ping >/dev/null 2>&1; then
    mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
        >>"$LOGS/mariadb.log" 2>&1 &
    wait_until MariaDB 60 mariadb-admin ping
fi
mariadb -e "CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'easylaunch';
            GRANT ALL ON $DB.* TO 'slurm'@'localhost';"

# Fake GPUs: Slurm only looks at the device files.
for n in 0 1; do
    [ -c "$ETC/gpus/nvidia$n" ] || mknod "$ETC/gpus/nvidia$n" c 195 "$n"
done

cat > "$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=$DBD_PORT
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOGS/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=easylaunch
StorageLoc=$DB
CONF
chmod 600 "$ETC/slurmdbd.conf"  # (slurmdbd refuses it otherwise)

cat > "$ETC/gres.conf" <<CONF
AutoDetect=off
NodeName=node[3-4] Name=gpu File=$ETC/gpus/nvidia[0-1]
CONF

# Short times so that tests wait little: finished jobs leave squeue after 10 s (sacct keeps
# them), requeued jobs start again after about 30 s, kills follow signals after 5 s, and a
# preempted job has 10 s after its SIGTERM to save (GraceTime).
host=$(hostname -s)
cat > "$SLURM_CONF.new" <<CONF
ClusterName=$NAME
SlurmctldHost=$host
SlurmctldPort=$CTLD_PORT
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=30
StateSaveLocation=$STATE/ctld
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdSpoolDir=$SPOOL/%n
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=256
GresTypes=gpu
MpiDefault=none
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,max_sched_time=1
MinJobAge=10
KillWait=5
ReturnToService=2
JobRequeue=1
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBD_PORT
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
NodeName=node1 NodeHostname=node1 NodeAddr=127.0.0.1 Port=$((NODE_PORT + 1)) CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeHostname=node2 NodeAddr=127.0.0.1 Port=$((NODE_PORT + 2)) CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=node3 NodeHostname=node3 NodeAddr=127.0.0.1 Port=$((NODE_PORT + 3)) CPUs=4 RealMemory=2000 Gres=gpu:2 State=UNKNOWN
NodeName=node4 NodeHostname=node4 NodeAddr=127.0.0.1 Port=$((NODE_PORT + 4)) CPUs=4 RealMemory=2000 Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=60 PriorityTier=10 State=UP
PartitionName=cpu Nodes=node[1-4] MaxTime=60 PriorityTier=10 State=UP
PartitionName=gpu Nodes=node[3-4] MaxTime=60 PriorityTier=10 State=UP
PartitionName=preempt Nodes=node[1-4] MaxTime=60 PriorityTier=1 PreemptMode=REQUEUE GraceTime=10 State=UP
CONF
changed=false  # (a cluster of an older set-up reads the new file at "scontrol reconfigure")
if ! cmp -s "$SLURM_CONF.new" "$SLURM_CONF"; then
    mv "$SLURM_CONF.new" "$SLURM_CONF"
    changed=true
else
    rm "$SLURM_CONF.new"
fi

# slurmdbd, then the cluster, account, user and QOS in its database.
if ! running "$RUN/slurmdbd.pid"; then
    slurmdbd
fi
wait_until slurmdbd 60 sacctmgr -n list cluster
# (sacctmgr -i add of something that exists exits 1: add only what is missing)
if [ -z "$(sacctmgr -n -P list cluster "$NAME" format=cluster)" ]; then
    sacctmgr -i add cluster "$NAME" >/dev/null
fi
# The Unix accounts exist before slurmctld starts: it maps a user to its uid when it loads the
# associations, and a user made later cannot submit until it restarts ("Invalid account").
# (ssh-up.sh, run beside this script, makes easyremote too: whichever comes second finds it.)
for user in $USERS; do
    id -u "$user" >/dev/null 2>&1 || useradd -m -s /bin/bash "$user" || id -u "$user" >/dev/null
done
if [ -z "$(sacctmgr -n -P list qos limited format=name)" ]; then
    sacctmgr -i add qos limited MaxSubmitJobsPerUser=3 >/dev/null
fi
if [ -z "$(sacctmgr -n -P list account "$ACCOUNT" format=account)" ]; then
    sacctmgr -i add account "$ACCOUNT" Cluster="$NAME" >/dev/null
fi
for user in $USERS; do  # (Slurm needs no Unix account for this)
    if [ -z "$(sacctmgr -n -P list assoc user="$user" cluster="$NAME" format=user)" ]; then
        sacctmgr -i add user "$user" Account="$ACCOUNT" Cluster="$NAME" \
            QOS=normal,limited DefaultQOS=normal >/dev/null
    fi
done

# slurmctld, then each slurmd in UTS and mount namespaces of its own: hostname says nodeN in
# jobs, and SCRATCH is a tmpfs each node has alone (node-local storage, as for ENV_BROADCAST_DIR).
fresh=false
if ! running "$RUN/slurmctld.pid"; then
    slurmctld
    fresh=true
elif $changed; then
    scontrol reconfigure
fi
wait_until slurmctld 60 scontrol ping
if $fresh; then  # the jobs of an earlier boot are no test's: they would run again and hold nodes
    squeue -h -o %A | xargs -r scancel
fi
for node in $NODES; do
    if ! running "$RUN/slurmd-$node.pid"; then
        unshare --uts --mount --propagation private \
            sh -c "hostname $node && mount -t tmpfs -o size=1g scratch $SCRATCH && exec slurmd -N $node"
    fi
done

# The nodes answer when none is down or still unknown; resume any left down by an earlier stop.
for _ in $(seq 1 60); do
    states=$(sinfo -h -N -p cpu -o %T 2>/dev/null || true)
    if [ "$(echo "$states" | grep -c -E '^(idle|mixed|allocated|completing|planned)')" = 4 ]; then
        echo "slurm-up: $NAME answers (4 nodes)"
        exit 0
    fi
    for node in $(sinfo -h -N -p cpu -t down,drain,fail -o %N 2>/dev/null || true); do
        scontrol update NodeName="$node" State=RESUME 2>/dev/null || true
    done
    sleep 0.5
done
echo "slurm-up: the nodes did not all come up: $(sinfo -h -N -p cpu -o '%N=%T' | xargs);" \
    "see $LOGS/" >&2
exit 1
