#!/usr/bin/env bash
# Set up (if needed), start the test services, lint, and run the whole test suite.
# With CI=true, a skipped test fails.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/slurm-up.sh  # a real one-node Slurm cluster (and bubblewrap) for the Slurm tests
scripts/cluster-up.sh  # a realistic four-node Slurm cluster beside it (accounting, GPUs as GRES, preemption)
scripts/ssh-up.sh    # an OpenSSH server on 127.0.0.1 with a second user: the remote cluster side
scripts/browser-up.sh  # Debian's chromium and chromedriver for the dashboard's browser tests
scripts/pythons-up.sh  # researchers' Pythons (pyenv's, Debian's) the launches start from
.venv/bin/ruff check .
.venv/bin/mypy  # the type checker, as pyproject.toml's [tool.mypy] sets it: 0 errors
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir site  # the docs (mkdocs.yml): a broken link, a missing page or a failing reference fails
# the dashboard tests' screenshots (every page, zoomed and smoothed curves, 900 px) are kept here
export EASYLAUNCH_ARTIFACTS=${EASYLAUNCH_ARTIFACTS:-$PWD/test-artifacts}
# (in two workers: scripts/test.sh -n 2 --dist loadgroup; see docs/development/tests.md)
exec .venv/bin/python -m pytest "$@"
