"""Restarts and checkpoints in the local mode and the runner: a killed, stopped or failing run
resumes from its checkpoint; a cancel is never restarted; the history stays in status.json."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import jobfns
import pytest
from helpers import wait_for
from jobfns import steps_done

from easylaunch import EasyLaunchError, JobState, LaunchError, run_experiment
from easylaunch import checkpoint as ckpt
from easylaunch_job.checkpoint import CHECKPOINT_API


def _running_pid(job, after_steps: int) -> int:
    """The pid of the run's function once it did ``after_steps`` steps."""
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= after_steps), job.info()
    return job.info()["pid"]


def test_a_killed_run_resumes_from_its_checkpoint(cfg):
    job = run_experiment(jobfns.count_steps, variant={"steps": 40, "every": 5,
                                                      "step_seconds": 0.05},
                         max_restarts=2, config=cfg)
    os.kill(_running_pid(job, 12), signal.SIGKILL)
    result = job.result(timeout=60)
    info = job.info()
    assert info["state"] == "succeeded" and info["attempt"] == 2
    (restart,) = info["restarts"]
    assert restart["reason"] == "lost" and "SIGKILL" in restart["error"]
    assert result["attempt"] == 2 and result["resumed_from"] >= 10
    steps = steps_done(job.log_dir)
    first = [s for a, s in steps if a == 1]
    redone = [s for a, s in steps if a == 2 and s <= max(first)]
    assert len(redone) < 5  # at most the steps since the last checkpoint
    assert [s for a, s in steps if a == 2][-1] == 40
    assert (job.log_dir / "checkpoint" / "state.pkl").exists()


def test_a_stop_notice_saves_at_once_and_restarts_from_there(cfg):
    """SIGTERM with no cancel asked is a preemption: the next save is the checkpoint (here
    the only one), and the run goes on from the step it stopped at."""
    job = run_experiment(jobfns.count_steps, variant={"steps": 30, "every": 1000,
                                                      "step_seconds": 0.05},
                         max_restarts=1, config=cfg)
    os.kill(_running_pid(job, 8), signal.SIGTERM)
    result = job.result(timeout=60)
    (restart,) = job.info()["restarts"]
    assert restart["reason"] == "preempted" and "SIGTERM" in restart["error"]
    stopped_at = max(s for a, s in steps_done(job.log_dir) if a == 1)
    assert result["resumed_from"] == stopped_at  # nothing redone
    assert [s for a, s in steps_done(job.log_dir) if a == 2][0] == stopped_at + 1


def test_an_exception_restarts_only_when_asked(cfg):
    variant = {"steps": 3, "fail_on": 1}
    failed = run_experiment(jobfns.count_steps, variant=variant, max_restarts=2, config=cfg)
    assert failed.wait(timeout=60) is JobState.FAILED
    assert "restarts" not in failed.info()
    job = run_experiment(jobfns.count_steps, variant=variant, max_restarts=2,
                         restart_on_error=True, config=cfg)
    assert job.result(timeout=60)["attempt"] == 2
    (restart,) = job.info()["restarts"]
    assert restart["reason"] == "error" and "attempt 1 fails" in restart["error"]
    assert "attempt 1 fails" in (job.log_dir / "stderr.log").read_text()  # appended to


def test_used_up_restarts_end_the_run_with_its_history(cfg):
    job = run_experiment(jobfns.kill_self, variant={"signal": signal.SIGKILL},
                         max_restarts=2, config=cfg)
    assert job.wait(timeout=60) is JobState.FAILED
    info = job.info()
    assert [r["reason"] for r in info["restarts"]] == ["lost", "lost"]
    assert info["attempt"] == 3 and "max_restarts=2 used up" in info["error"]


def test_cancel_wins_over_restarts(cfg):
    job = run_experiment(jobfns.count_steps, variant={"steps": 400, "step_seconds": 0.05},
                         max_restarts=3, config=cfg)
    _running_pid(job, 3)
    job.cancel()
    assert job.wait(timeout=30) is JobState.CANCELLED
    time.sleep(1)
    assert job.status() is JobState.CANCELLED and "restarts" not in job.info()
    assert {a for a, _ in steps_done(job.log_dir)} == {1}


def test_max_restarts_is_checked_before_anything_is_made(cfg):
    with pytest.raises(LaunchError, match="cannot restart runs.*local"):
        run_experiment(jobfns.train, mode="here_no_doodad", max_restarts=1, config=cfg)
    with pytest.raises(EasyLaunchError, match="MAX_RESTARTS must be a whole number"):
        run_experiment(jobfns.train, max_restarts=-1, config=cfg)
    assert not Path(cfg["LOCAL_LOG_DIR"]).exists()


def test_checkpoint_helpers_outside_a_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EASYLAUNCH_CHECKPOINT_DIR", raising=False)
    assert ckpt.load(default="none yet") == "none yet" and ckpt.stop_requested() is None
    path = ckpt.save({"w": [1, 2]}, name="model-1")
    assert Path(path) == tmp_path / "checkpoint" / "model-1.pkl"
    assert ckpt.load(name="model-1") == {"w": [1, 2]}
    with pytest.raises(ValueError, match="letters, digits"):
        ckpt.save(1, name="../escape")
    assert {n: getattr(ckpt, n) for n in CHECKPOINT_API} == CHECKPOINT_API


def test_checkpoints_work_where_easylaunch_is_not_installed(cfg, tmp_path):
    """The runner gives a function that imports easylaunch.checkpoint its own helpers."""
    from test_bundle import _standalone_python

    job = run_experiment(jobfns.count_steps, variant={"steps": 3}, config=cfg)
    job.wait(timeout=60)
    out_dir = tmp_path / "out"
    (out_dir / "checkpoint").mkdir(parents=True)
    (out_dir / "checkpoint" / "state.pkl").write_bytes(
        (job.log_dir / "checkpoint" / "state.pkl").read_bytes())
    python, env = _standalone_python(tmp_path)
    env["PYTHONPATH"] += os.pathsep + str(next((job.log_dir / "bundle" / "code").iterdir()))
    proc = subprocess.run(python + [str(job.log_dir / "bundle/job.pyz"), "run",
                                    str(job.log_dir / "bundle"), "--log-dir", str(out_dir)],
                          env=env, capture_output=True)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((out_dir / "status.json").read_text())["state"] == "succeeded"
    assert steps_done(out_dir) == []  # resumed at step 3 of 3: nothing left to do
