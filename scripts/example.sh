#!/usr/bin/env bash
# Run the example sweep on the local default mode, in .venv with easylaunch and only its core
# dependencies (cloudpickle, GitPython, rich). The first run makes .venv (well under a minute);
# later runs with pyproject.toml unchanged start at once. scripts/test.sh adds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
say() { echo "easylaunch example: $*" >&2; }
if ! command -v git >/dev/null; then
    say "installing git (GitPython needs it)"
    scripts/apt-install.sh git
fi
stamp=.venv/.easylaunch-installed
wanted=$(sha256sum pyproject.toml | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
    if [ ! -x .venv/bin/python ]; then
        say "making a virtualenv in .venv"
        "$PYTHON" -m venv .venv
    fi
    say "installing easylaunch and its core dependencies into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check -e . 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    echo "$wanted" > "$stamp"
fi
say "running examples/sweep_local.py"
exec .venv/bin/python examples/sweep_local.py
