#!/usr/bin/env bash
# Install Debian's Chromium and ChromeDriver for the dashboard's browser tests (selenium drives
# them headless; no browser is downloaded at run time). Needs root; idempotent.
set -euo pipefail
if [ "$(id -u)" != 0 ]; then
    echo "browser-up: needs root to install chromium and chromium-driver; skipping" >&2
    exit 0
fi
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    "$(dirname "$0")/apt-install.sh" chromium chromium-driver
fi
