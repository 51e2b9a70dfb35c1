#!/usr/bin/env bash
# Stop the tests' Slurm cluster of scripts/slurm-up.sh: its daemons, found by their pid files,
# then its MariaDB.
# --wipe also forgets its state: jobs, accounting database, logs (the next start is a first one).
set -uo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "slurm-down: needs root; skipping" >&2
    exit 0
fi
RUN=/run/slurm-realistic
stop() {  # stop the process a pid file names, waiting (bounded) until it is gone
    local pid
    [ -s "$1" ] || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.25
    done
    kill -9 "$pid" 2>/dev/null
}
for pidfile in "$RUN"/slurmd-*.pid; do
    stop "$pidfile"
done
stop "$RUN/slurmctld.pid"
stop "$RUN/slurmdbd.pid"
if [ "${1:-}" = --wipe ]; then
    # (the database is dropped through MariaDB: removing its folder would leave InnoDB's tables)
    if ! mariadb-admin ping >/dev/null 2>&1; then
        mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
        mariadbd --user=mysql --skip-networking --pid-file=/run/mysqld/mysqld.pid \
            >/dev/null 2>&1 &
        for _ in $(seq 1 60); do
            mariadb-admin ping >/dev/null 2>&1 && break
            sleep 0.5
        done
    fi
    mariadb -e "DROP DATABASE IF EXISTS slurm_realistic_acct" || exit 1
    rm -rf /var/lib/slurm-realistic /var/spool/slurm-realistic /var/log/slurm-realistic "$RUN"
fi
stop /run/mysqld/mysqld.pid
