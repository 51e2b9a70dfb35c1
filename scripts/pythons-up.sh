#!/usr/bin/env bash
# Researchers' Pythons, for the tests that launch from them (tests/test_interpreters.py): venvs
# of more than one real interpreter of this machine in .tools/pythons/, each with easylaunch,
# numpy and an editable-installed package of the user's own (tests/fixtures/userpkg):
#   pyenv          a venv of the default python3 (pyenv's build: C extensions in lib-dynload)
#   debian         a venv of Debian's /usr/bin/python3 (python3-venv), with pandas; the other
#                  local users of the tests run easylaunch from it (root's pyenv is in /root)
#   debian-system  the same with --system-site-packages, numpy from Debian's python3-numpy
# Idempotent: a venv that imports what it needs is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! /usr/bin/python3 -c "import ensurepip" 2>/dev/null || ! dpkg -s python3-numpy >/dev/null 2>&1
then
    scripts/apt-install.sh python3-venv python3-numpy
fi
make() {  # make NAME INTERPRETER [venv options] [-- extra pip requirements]
    local name=$1 python=$2 venv=.tools/pythons/$1
    shift 2
    local options=() extra=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do options+=("$1"); shift; done
    [ $# -gt 0 ] && shift && extra=("$@")
    local wanted="import easylaunch, numpy, userpkg${extra[*]/#/, }"  # (extras: module names)
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$wanted" 2>/dev/null; then
        return
    fi
    rm -rf "$venv"
    "$python" -m venv "${options[@]}" "$venv"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e . \
        -e tests/fixtures/userpkg "${extra[@]}" 2>&1 \
        | { grep -v "is ignored: it is neither a file nor a directory" || true; }
    "$venv/bin/python" -c "$wanted"
}
make pyenv "$(command -v python3)" -- numpy
# (pandas: another user's load_sweep in the tests; starlette, jinja2, httpx: their dashboard)
make debian /usr/bin/python3 -- numpy pandas starlette jinja2 httpx
make debian-system /usr/bin/python3 --system-site-packages
