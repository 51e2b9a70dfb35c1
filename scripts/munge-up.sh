#!/usr/bin/env bash
# Start munge (Slurm's authentication) if no munged answers: a key, then the daemon as the munge
# user. Called by slurm-up.sh.
set -euo pipefail
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    exit 0
fi
if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 400 /etc/munge/munge.key
mkdir -p /run/munge
chown munge:munge /run/munge
su -s /bin/sh munge -c /usr/sbin/munged
for _ in $(seq 1 40); do  # (20 s at most)
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        exit 0
    fi
    sleep 0.5
done
echo "munge-up: munged does not answer; see /var/log/munge/" >&2
exit 1
