"""Launching from researchers' own Pythons: venvs of pyenv's build (its standard library's C
extensions in lib-dynload), of Debian's /usr/bin/python3, and of Debian's with the system's
site-packages (numpy from python3-numpy), made by scripts/pythons-up.sh. Each launches the same
script a researcher writes: standard-library C extensions, numpy, a module beside the script
and an editable-installed package imported at its top, in the modes a first sweep uses."""

import decimal
import json
import os
import subprocess
import textwrap
import zlib
from pathlib import Path

import pytest
from conftest import REPO_DIR, SSH_DIR

PYTHONS = REPO_DIR / ".tools" / "pythons"
LAYOUTS = ("pyenv", "debian", "debian-system")
USERPKG_SRC = REPO_DIR / "tests" / "fixtures" / "userpkg" / "src"

SCRIPT = textwrap.dedent('''\
    import array, ctypes, decimal, json, math, select, sys, zlib

    import numpy as np
    import userpkg

    import helper_mod
    from easylaunch import run_sweep

    def train(doodad_config, variant):
        x = variant["x"]
        return {"sqrt": math.sqrt(x), "crc": zlib.crc32(b"run"),
                "array": array.array("i", [x]).tolist(), "quarter": str(decimal.Decimal(x) / 4),
                "sum": int(np.arange(x).sum()), "scaled": userpkg.scale(x),
                "beside": helper_mod.twice(x), "poll": hasattr(select, "poll"),
                "int_size": ctypes.sizeof(ctypes.c_int), "python": sys.version_info[:2]}

    if __name__ == "__main__":
        mode = sys.argv[1]
        jobs = run_sweep(train, [dict(x=x) for x in (4, 9)], exp_name="day-one", mode=mode)
        print(json.dumps([job.result(timeout=240) for job in jobs]))
''')


def expected(x: int) -> dict:
    return {"sqrt": x ** 0.5, "crc": zlib.crc32(b"run"), "array": [x],
            "quarter": str(decimal.Decimal(x) / 4),
            "sum": sum(range(x)), "scaled": 10 * x, "beside": 2 * x, "poll": True,
            "int_size": 4, "python": [3, 11]}


def interpreter(layout: str) -> Path:
    python = PYTHONS / layout / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no {layout} venv: run scripts/pythons-up.sh")
    return python


def launch(tmp_path: Path, layout: str, mode: str,
           settings: str = "") -> subprocess.CompletedProcess:
    """The researcher's script, run with ``python sweep.py MODE`` from its own folder, with
    their settings file (if any) as the only configuration."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sweep.py").write_text(SCRIPT)
    (project / "helper_mod.py").write_text("def twice(x):\n    return 2 * x\n")
    env = dict(os.environ, EASYLAUNCH_CONFIG=str(tmp_path / "settings.py"))
    (tmp_path / "settings.py").write_text(settings)
    for name in ("VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(name, None)
    return subprocess.run([str(interpreter(layout)), "sweep.py", mode], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


def results_of(out: subprocess.CompletedProcess) -> list:
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_sweep_importing_c_extensions_runs_locally(tmp_path, layout):
    assert results_of(launch(tmp_path, layout, "local")) == [expected(4), expected(9)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_sweep_runs_on_slurm_from_the_login_node(tmp_path, layout, slurm_cluster):
    """No setting at all: the runs start with the launching interpreter, on the default
    partition."""
    assert results_of(launch(tmp_path, layout, "slurm")) == [expected(4), expected(9)]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_htp_sweep_submits_itself_from_the_login_node(tmp_path, layout, slurm_cluster):
    assert results_of(launch(tmp_path, layout, "htp")) == [expected(4), expected(9)]


@pytest.mark.parametrize("layout", ("pyenv", "debian"))
def test_a_sweep_runs_on_an_ssh_workstation(tmp_path, layout, ssh_cluster):
    """Over SSH the far side has its own interpreter (numpy installed there); the user's
    editable package travels as a code folder."""
    settings = (f"CODE_DIRS_TO_MOUNT = [{str(USERPKG_SRC)!r}]\n"
                f"CLUSTERS = {{'lab': {{'host': 'easylaunch-test-cluster', "
                f"'log_dir': '~/runs/{tmp_path.name}', 'python': '~/venv/bin/python', "
                f"'ssh_config': {str(SSH_DIR / 'config')!r}}}}}\n"
                "SSH_DEFAULT_HOST = 'lab'\n")
    assert results_of(launch(tmp_path, layout, "ssh", settings)) == [expected(4), expected(9)]
