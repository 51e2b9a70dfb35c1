"""Run bundles: content-addressed code snapshots and a runner that travels on its own."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import cloudpickle
import jobfns
import pytest

from easylaunch import LaunchError, run_experiment, run_sweep
from easylaunch_job.outcome import load_outcome


def _snapshots(cfg):
    return sorted(os.listdir(Path(cfg["LOCAL_LOG_DIR"]) / ".snapshots"))


def _code_dir(tmp_path, body="def f(c, v):\n    return 'v1'\n"):
    code = tmp_path / "mycode"
    code.mkdir(exist_ok=True)
    (code / "mymod.py").write_text(body)
    return code


def test_sweep_shares_one_snapshot(cfg):
    jobs = run_sweep(jobfns.train, [dict(learning_rate=i) for i in range(20)], config=cfg)
    assert len(_snapshots(cfg)) == 1
    linked = {os.path.realpath(j.log_dir / "bundle/code/0-tests") for j in jobs}
    assert len(linked) == 1
    assert [j.result(timeout=60)["lr"] for j in jobs] == list(range(20))


def test_edits_after_launch_do_not_reach_launched_runs(cfg, tmp_path, monkeypatch):
    code = _code_dir(tmp_path)
    monkeypatch.syspath_prepend(str(code))
    import mymod
    cfg["CODE_DIRS_TO_MOUNT"] = [str(code)]
    first = run_experiment(mymod.f, config=cfg)  # pickled by reference: imported from snapshot
    (code / "mymod.py").write_text("def f(c, v):\n    return 'v2'\n")
    second = run_experiment(mymod.f, config=cfg)
    assert first.result(timeout=60) == "v1"
    assert second.result(timeout=60) == "v2"
    assert len(_snapshots(cfg)) == 2


def test_log_dir_inside_a_code_dir_is_left_out(cfg, tmp_path):
    code = _code_dir(tmp_path)
    cfg.update(CODE_DIRS_TO_MOUNT=[str(code), str(Path(jobfns.__file__).parent)],
               LOCAL_LOG_DIR=str(code / "logs"))
    for _ in range(2):
        run_experiment(jobfns.train, config=cfg).wait(timeout=60)
    assert len(_snapshots(cfg)) == 2  # one per code dir, reused by the second launch
    for snap in _snapshots(cfg):
        assert not (code / "logs/.snapshots" / snap / "logs").exists()


def test_excluded_files_stay_out(cfg, tmp_path, monkeypatch):
    code = _code_dir(tmp_path)
    (code / "__pycache__").mkdir()
    (code / "__pycache__/x.pyc").write_bytes(b"x")
    (code / ".git").mkdir()
    cfg["CODE_DIRS_TO_MOUNT"] = [str(code)]
    monkeypatch.syspath_prepend(str(code))
    import mymod

    run_experiment(mymod.f, config=cfg).wait(timeout=60)
    (snap,) = _snapshots(cfg)
    files = os.listdir(Path(cfg["LOCAL_LOG_DIR"]) / ".snapshots" / snap)
    assert files == ["mymod.py"]


def test_payload_travels_in_files_not_in_argv_or_env(cfg):
    secret = "x" * 200_000
    job = run_experiment(jobfns.echo, variant={"big": secret}, config=cfg)
    assert len(job.result(timeout=60)["variant"]["big"]) == 200_000
    bundle = job.log_dir / "bundle"
    assert {p.name for p in bundle.iterdir()} == {
        "bundle.json", "function.pkl", "variant.pkl", "job.pyz", "code"}
    assert cloudpickle.loads((bundle / "variant.pkl").read_bytes()) == {"big": secret}


def _standalone_python(tmp_path):
    """A Python that can import cloudpickle but not easylaunch (no site-packages)."""
    site = tmp_path / "only-cloudpickle"
    shutil.copytree(Path(cloudpickle.__file__).parent, site / "cloudpickle")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(site)}
    probe = subprocess.run([sys.executable, "-S", "-c", "import easylaunch"], env=env,
                           capture_output=True)
    assert probe.returncode != 0  # really without easylaunch
    return [sys.executable, "-S"], env


def test_runner_runs_without_easylaunch_installed(cfg, tmp_path):
    def standalone(doodad_config, variant):
        return variant["n"] * 2, doodad_config.exp_name

    job = run_experiment(standalone, variant={"n": 21}, exp_name="alone", config=cfg)
    job.wait(timeout=60)
    moved = tmp_path / "elsewhere"
    shutil.copytree(job.log_dir / "bundle", moved / "bundle", symlinks=False)
    python, env = _standalone_python(tmp_path)
    out_dir = tmp_path / "out"
    proc = subprocess.run(python + [str(moved / "bundle/job.pyz"), "run", str(moved / "bundle"),
                                    "--log-dir", str(out_dir)], env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out_dir / "status.json").read_text())["state"] == "succeeded"
    assert load_outcome(str(out_dir)) == ("success", (42, time.strftime("%y-%m-%d-alone")))


def test_runner_refuses_another_python_minor_version(cfg, tmp_path):
    job = run_experiment(jobfns.train, config=cfg)
    job.wait(timeout=60)
    meta_path = job.log_dir / "bundle/bundle.json"
    meta = json.loads(meta_path.read_text())
    meta["python_minor"] = "2.7"
    meta_path.write_text(json.dumps(meta))
    out_dir = tmp_path / "rerun"
    proc = subprocess.run([sys.executable, str(job.log_dir / "bundle/job.pyz"), "run",
                           str(job.log_dir / "bundle"), "--log-dir", str(out_dir)],
                          capture_output=True, text=True)
    assert proc.returncode == 3
    assert "the run was pickled with Python 2.7" in proc.stderr
    status = json.loads((out_dir / "status.json").read_text())
    assert status["state"] == "failed"
    assert "Start runs with a Python 2.7 that has cloudpickle" in status["error"]
    assert "SLURM_PYTHON" in status["error"]


def test_missing_module_on_the_target_says_which_setting_to_fix(cfg, tmp_path, monkeypatch):
    code = _code_dir(tmp_path)
    monkeypatch.syspath_prepend(str(code))
    import mymod
    cfg["CODE_DIRS_TO_MOUNT"] = []  # the module would not travel: refused before anything
    with pytest.raises(LaunchError, match=f"module 'mymod' is in {code}.*add {code} to "
                                          "CODE_DIRS_TO_MOUNT"):
        run_experiment(mymod.f, config=cfg)
    assert not Path(cfg["LOCAL_LOG_DIR"]).exists()
