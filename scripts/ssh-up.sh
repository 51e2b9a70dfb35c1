#!/usr/bin/env bash
# Start a real OpenSSH server on 127.0.0.1 (Debian's openssh-server) with a second local user as
# the "cluster side", for the remote-cluster tests. Needs root; idempotent.
#
# The remote user (easyremote) has its own home and a Python venv with this checkout's
# cloudpickle; it shares no folder with the launching side. The launching side's key, known_hosts
# and an ssh config naming the host `easylaunch-test-cluster` go to .test-ssh/ in this checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
    echo "ssh-up: needs root to install sshd and add a user; skipping" >&2
    exit 0
fi
PORT=${EASYLAUNCH_TEST_SSH_PORT:-22022}
REMOTE_USER=easyremote
STATE=/var/lib/easylaunch-test-sshd
CLIENT=$PWD/.test-ssh
if [ ! -x /usr/sbin/sshd ] || ! command -v rsync >/dev/null; then
    "$(dirname "$0")/apt-install.sh" openssh-server rsync
fi

# the remote user: a home of its own, unlocked for key logins only (no password)
# (slurm-up.sh, run beside this script, may make it first: then useradd fails and id finds it)
if ! id "$REMOTE_USER" >/dev/null 2>&1; then
    useradd -m -s /bin/bash "$REMOTE_USER" || id "$REMOTE_USER" >/dev/null
fi
usermod -p '*' "$REMOTE_USER"
home=$(getent passwd "$REMOTE_USER" | cut -d: -f6)
chmod 700 "$home"

# the remote user's Python: the same minor version and cloudpickle as this checkout's venv, and
# numpy (what a cluster's environment has for the researchers' runs)
cloudpickle=$(.venv/bin/python -c "import cloudpickle; print(cloudpickle.__version__)")
if ! su - "$REMOTE_USER" -c "venv/bin/python -c 'import numpy, cloudpickle, sys; sys.exit(cloudpickle.__version__ != \"$cloudpickle\")'" 2>/dev/null; then
    su - "$REMOTE_USER" -c "python3 -m venv venv && venv/bin/pip install -q --disable-pip-version-check cloudpickle==$cloudpickle numpy"
fi

# keys: the server's host key, the client's login key
mkdir -p "$STATE" "$CLIENT"
chmod 700 "$STATE" "$CLIENT"
[ -s "$STATE/host_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$STATE/host_ed25519"
[ -s "$CLIENT/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$CLIENT/id_ed25519"
install -d -m 700 -o "$REMOTE_USER" -g "$REMOTE_USER" "$home/.ssh"
keys="$home/.ssh/authorized_keys"  # each checkout adds its own key
touch "$keys"
grep -qxF "$(cat "$CLIENT/id_ed25519.pub")" "$keys" || cat "$CLIENT/id_ed25519.pub" >> "$keys"
chown "$REMOTE_USER:$REMOTE_USER" "$keys"
chmod 600 "$keys"
# what a cluster's login node has: the Singularity stand-in (bubblewrap) on the user's PATH
install -d -o "$REMOTE_USER" -g "$REMOTE_USER" "$home/bin"
install -m 755 -o "$REMOTE_USER" -g "$REMOTE_USER" tests/bin/singularity "$home/bin/singularity"
echo "PATH=$home/bin:/usr/local/bin:/usr/bin:/bin" > "$home/.ssh/environment"
chown "$REMOTE_USER:$REMOTE_USER" "$home/.ssh/environment"
echo "[127.0.0.1]:$PORT $(cut -d' ' -f1,2 "$STATE/host_ed25519.pub")" > "$CLIENT/known_hosts"
cat > "$CLIENT/config" <<CONF
Host easylaunch-test-cluster
    HostName 127.0.0.1
    Port $PORT
    User $REMOTE_USER
    IdentityFile $CLIENT/id_ed25519
    IdentitiesOnly yes
    UserKnownHostsFile $CLIENT/known_hosts
CONF

cat > "$STATE/sshd_config" <<CONF
Port $PORT
ListenAddress 127.0.0.1
HostKey $STATE/host_ed25519
PidFile $STATE/sshd.pid
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin no
AllowUsers $REMOTE_USER
PermitUserEnvironment PATH
MaxStartups 100
MaxSessions 100
LogLevel INFO
CONF
mkdir -p /run/sshd
if [ -s "$STATE/sshd.pid" ] && kill -0 "$(cat "$STATE/sshd.pid")" 2>/dev/null; then
    kill -HUP "$(cat "$STATE/sshd.pid")"  # re-read its config
else
    /usr/sbin/sshd -f "$STATE/sshd_config" -E "$STATE/sshd.log"
fi
for _ in $(seq 1 40); do
    if ssh -F "$CLIENT/config" -o BatchMode=yes easylaunch-test-cluster true 2>/dev/null; then
        exit 0
    fi
    sleep 0.25
done
echo "ssh-up: cannot log in as $REMOTE_USER over 127.0.0.1:$PORT; see $STATE/sshd.log" >&2
exit 1
