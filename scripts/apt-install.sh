#!/usr/bin/env bash
# Install Debian packages: scripts/apt-install.sh PACKAGE...
# It runs apt-get update, then apt-get install. The set-up scripts run side by side, and apt takes
# one caller at a time, so each call waits for the one before (flock). Needs root.
set -euo pipefail
exec flock /var/lock/easylaunch-apt.lock sh -c \
    'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$@"' apt-install "$@"
