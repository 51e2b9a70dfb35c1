#!/usr/bin/env bash
# Set up (if needed) and run the example sweep on the local mode.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python examples/sweep_local.py
