#!/usr/bin/env bash
# Install (Debian's slurm-wlm and munge) and start a one-node Slurm cluster on this machine, for
# the tests. Needs root; idempotent: a cluster that already answers is left running.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "slurm-up: needs root to install and start slurmctld/slurmd; skipping" >&2
    exit 0
fi
# slurm-wlm-torque: Slurm's qsub/qstat/qdel front ends, which run the pbs mode's job scripts;
# tmux drives the interactive shells (easylaunch shell, easylaunch interactive) in the tests.
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null || ! command -v bwrap >/dev/null \
        || ! command -v qsub >/dev/null || ! command -v tmux >/dev/null; then
    "$(dirname "$0")/apt-install.sh" slurm-wlm munge bubblewrap slurm-wlm-torque tmux
fi

# The node says it has 8 CPUs on any machine (config_overrides): the test workers' jobs run side
# by side on it, as on a real node (most of them sleep). Tests ask sinfo, not nproc.
host=$(hostname -s)
wanted=$(cat <<CONF
ClusterName=easylaunch-test
SlurmctldHost=${host}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SlurmdParameters=config_overrides
SchedulerParameters=sched_min_interval=0,batch_sched_delay=0,max_sched_time=1
MinJobAge=300
NodeName=${host} CPUs=8 RealMemory=8000 State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
)
# (found by pid file: the realistic cluster of cluster-up.sh runs daemons of the same names)
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" = "$wanted" ] \
        && sinfo -h -o %T 2>/dev/null | grep -q -E 'idle|mix|alloc'; then
    exit 0
fi
if [ "$(cat /etc/slurm/slurm.conf 2>/dev/null)" != "$wanted" ]; then  # a cluster of an older setup
    for pid_file in /run/slurmd.pid /run/slurmctld.pid; do
        if alive "$pid_file"; then
            pid=$(cat "$pid_file") && kill "$pid"
            while kill -0 "$pid" 2>/dev/null; do sleep 0.2; done
        fi
    done
fi

"$(dirname "$0")/munge-up.sh"  # munge: a key and its daemon, run as the munge user

mkdir -p /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
echo "$wanted" > /etc/slurm/slurm.conf
# A controller started afresh forgets the jobs of an earlier boot (-c): they are no test's, and
# they would run again or hold the node "completing".
alive /run/slurmctld.pid || slurmctld -c
alive /run/slurmd.pid || slurmd
for i in $(seq 1 60); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    if echo "$state" | grep -q -E 'idle|mix|alloc'; then
        exit 0
    fi
    if echo "$state" | grep -q -E 'down|drain|fail'; then  # left so by an earlier unclean stop
        scontrol update NodeName="${host}" State=RESUME 2>/dev/null || true
    fi
    if [ "$i" = 20 ] && echo "$state" | grep -q completing; then  # a job that will not end: end it
        scontrol update NodeName="${host}" State=DOWN Reason="completing at slurm-up" 2>/dev/null || true
    fi
    sleep 0.5
done
echo "slurm-up: the node did not come up; see /var/log/slurm/" >&2
exit 1
