#!/usr/bin/env bash
# Set up (if needed), start the test services, lint, and run the whole test suite (which
# builds the docs with --strict: tests/test_docs_site.py and tests/test_core_install.py).
# With CI=true, a skipped test fails. Arguments go to pytest: scripts/test.sh tests/test_api.py
set -euo pipefail
cd "$(dirname "$0")/.."
# The services start beside the set-up: each script is idempotent, and their apt calls wait in turn.
services=()
scripts/slurm-up.sh &  # a four-node Slurm cluster (accounting, GPUs as GRES, preemption), its PBS front ends, bubblewrap, tmux
services+=($!)
scripts/browser-up.sh &  # Debian's chromium and chromedriver for the dashboard's browser tests
services+=($!)
scripts/setup.sh
# (after setup.sh: editable installs of this checkout share its egg-info, so they go one at a time)
scripts/pythons-up.sh &  # researchers' Pythons (pyenv's, Debian's) the launches start from
services+=($!)
scripts/ssh-up.sh    # an OpenSSH server on 127.0.0.1 with a second user: the remote cluster side
.venv/bin/ruff check .
# the type checker, as pyproject.toml's [tool.mypy] sets it: 0 errors (its cache outlives a clone)
MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/easylaunch/mypy} .venv/bin/mypy
for pid in "${services[@]}"; do
    wait "$pid"  # (one that failed stops the script here)
done
# the dashboard tests' screenshots (every page, zoomed and smoothed curves, 900 px) are kept here
export EASYLAUNCH_ARTIFACTS=${EASYLAUNCH_ARTIFACTS:-$PWD/test-artifacts}
# Three workers (pytest-xdist): most tests wait on a scheduler, a server or a process, so three
# share two cores well. Each file runs in one worker (loadfile): its module-wide services start
# once, and its tests never race each other. (loadgroup cannot do it: pytest-xdist 3.8 marks
# groups in a field pytest 9.2 no longer reads, so it spreads them.)
exec .venv/bin/python -m pytest -n 3 --dist loadfile "$@"
