#!/usr/bin/env bash
# Set up (if needed), lint, and run the whole test suite. With CI=true, a skipped test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
