"""Modes from other packages: a package installed with pip adds a mode through the entry point
group ``easylaunch.modes`` (tests/fixtures/plugin), and a user's script launches with it."""

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
print(json.dumps({"results": [j.result() for j in jobs], "ids": [j.id for j in jobs],
                  "refused": refused}))
"""


def test_a_mode_an_installed_package_adds_launches_a_sweep(tmp_path):
    site = tmp_path / "site"
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", site, PLUGIN],
        capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    env = {"PYTHONPATH": f"{site}:{TESTS_DIR}", "PATH": "/usr/bin:/bin"}
    config = settings_file(tmp_path)
    done = subprocess.run([sys.executable, "-c", SCRIPT, config], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["results"] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    assert "unknown mode 'inlne'; did you mean 'inline'?" in said["refused"]
    listed = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config, "ls",
                             "--json"], capture_output=True, text=True, timeout=120, env=env,
                            cwd=REPO_DIR)
    runs = {r["id"]: r for r in json.loads(listed.stdout)["runs"]}
    assert {runs[i]["mode"] for i in said["ids"]} == {"inline"}, listed.stderr
    assert {runs[i]["state"] for i in said["ids"]} == {"succeeded"}
