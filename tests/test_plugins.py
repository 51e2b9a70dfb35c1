"""Modes from other packages: a package installed with pip adds a mode and a scheduler through
the entry point group ``easylaunch.modes`` (tests/fixtures/plugin), and a user's script
launches with each."""

import json
import subprocess
import sys

from conftest import REPO_DIR, TESTS_DIR, settings_file

PLUGIN = TESTS_DIR / "fixtures" / "plugin"
SCRIPT = """
import json, sys
from easylaunch import run_sweep
from easylaunch.errors import LaunchError
import jobfns
jobs = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="inline", config=sys.argv[1])
try:
    run_sweep(jobfns.double, [{"x": 1}], mode="inlne", config=sys.argv[1])
except LaunchError as exc:
    refused = str(exc)
lsf = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="lsf", queue="short",
                config=sys.argv[1], dry_run=True)
print(json.dumps({"results": [j.result() for j in jobs], "ids": [j.id for j in jobs],
                  "refused": refused, "lsf": list(lsf.files.values())}))
"""


def test_a_mode_and_a_scheduler_an_installed_package_adds_launch_sweeps(tmp_path):
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", site, PLUGIN],
        capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    bin_dir = tmp_path / "bin"  # (a dry run asks whether bsub is there, and never runs it)
    bin_dir.mkdir()
    (bin_dir / "bsub").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "bsub").chmod(0o755)
    env = {"PYTHONPATH": f"{site}:{TESTS_DIR}", "PATH": f"{bin_dir}:/usr/bin:/bin"}
    config = settings_file(tmp_path)
    done = subprocess.run([sys.executable, "-c", SCRIPT, config], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["results"] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    assert "unknown mode 'inlne'; did you mean 'inline'?" in said["refused"]
    (script,) = said["lsf"]  # (the scheduler's mode: one array script for the sweep)
    assert "\n#BSUB -J " in script and "[1-2]\n#BSUB -q short\n" in script
    listed = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config, "ls",
                             "--json"], capture_output=True, text=True, timeout=120, env=env,
                            cwd=REPO_DIR)
    runs = {r["id"]: r for r in json.loads(listed.stdout)["runs"]}
    assert {runs[i]["mode"] for i in said["ids"]} == {"inline"}, listed.stderr
    assert {runs[i]["state"] for i in said["ids"]} == {"succeeded"}
