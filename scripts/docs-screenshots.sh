#!/usr/bin/env bash
# Refresh the dashboard screenshots the docs show (docs/assets/screenshots/): the dashboard's
# browser tests take them as they check each page; this keeps those the guide shows.
# Run it after a change to the dashboard: scripts/docs-screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/browser-up.sh
taken=$(mktemp -d)
trap 'rm -rf "$taken"' EXIT
EASYLAUNCH_ARTIFACTS=$taken .venv/bin/python -m pytest -q -p no:cacheprovider \
    tests/test_dashboard.py -k "sweeps_results or overlaid"
mkdir -p docs/assets/screenshots
for name in dashboard-sweep dashboard-compare; do
    cp "$taken/$name.png" "docs/assets/screenshots/$name.png"
done
echo "docs/assets/screenshots: $(ls docs/assets/screenshots | tr '\n' ' ')"
