"""One Ctrl-C during any wait (job.wait, wait_all, the end of a launching script, ``submit
--wait``, ``logs -f``, ``watch``) says one line and ends as interrupted: runs that go on
without the launcher are named with the command that cancels them, attached local runs are
cancelled. A Slurm wait used to end in a KeyboardInterrupt traceback, ``submit --wait`` needed
two Ctrl-C (issue 39)."""

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import TESTS_DIR, settings_file
from helpers import wait_for

from easylaunch import Job, JobState
from easylaunch.tracking.registry import Registry

EASYLAUNCH = [sys.executable, "-m", "easylaunch.cli"]
INTO_THE_WAIT = 1.0  # seconds from the line a process prints to the wait it starts next
SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
import jobfns
from easylaunch import run_sweep, wait_all
jobs = run_sweep(jobfns.sleep_a_while, [{{"seconds": 120}}] * {n}, exp_name="ctrl-c",
                 mode={mode!r}, config={config!r}{extra})
print(" ".join(job.id for job in jobs), flush=True)
{wait}
"""


def _ctrl_c(argv: list[str], ready: str = "") -> tuple[str, int, str]:
    """Start ``argv``, wait for its first line of stdout (and a stderr line holding
    ``ready``), press Ctrl-C once (SIGINT to its process group, as a terminal sends it);
    its first line, exit code and stderr."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    first = proc.stdout.readline()
    said = ""
    while ready and ready not in said:
        said = proc.stderr.readline()
        assert said, f"it ended before saying {ready!r}"
    time.sleep(INTO_THE_WAIT)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=90)
    return first, proc.returncode, err


def _one_line(err: str) -> str:
    """The one line a Ctrl-C said: the last on stderr, the only one of its kind, with no
    traceback."""
    assert "Traceback" not in err, err
    said = [line for line in err.splitlines() if "interrupted (Ctrl-C)" in line]
    assert len(said) == 1 and err.splitlines()[-1] == said[0], err
    return said[0]


def _script(tmp_path: Path, config: str, mode: str, wait: str, n: int = 2, extra: str = ""
            ) -> list[str]:
    script = tmp_path / "launch.py"
    script.write_text(textwrap.dedent(SCRIPT).format(
        tests=str(TESTS_DIR), n=n, mode=mode, config=config, extra=extra, wait=wait))
    return [sys.executable, str(script)]


def _run_said_command(line: str) -> str:
    """Run the cancel command the line names, as a user pastes it; its output."""
    (command,) = re.findall(r"`(easylaunch cancel [^`]*)`", line)
    argv = shlex.split(command)
    out = subprocess.run([*EASYLAUNCH, *argv[1:]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _states(tmp_path: Path, ids: list[str]) -> list[JobState]:
    registry = Registry(tmp_path / "registry.sqlite3")
    return [Job.from_run_dir(registry.find(run_id).log_dir).status() for run_id in ids]


@pytest.fixture
def slurm_settings(slurm_cfg, tmp_path):
    return settings_file(tmp_path, SLURM_PYTHON=slurm_cfg["SLURM_PYTHON"],
                         SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])


@pytest.mark.parametrize("wait, n", [("wait_all(jobs)", 2), ("jobs[0].result()", 1)])
def test_ctrl_c_in_a_slurm_wait_leaves_the_jobs_and_says_how_to_cancel_them(
        slurm_settings, tmp_path, wait, n):
    first, code, err = _ctrl_c(_script(tmp_path, slurm_settings, "slurm", wait, n))
    ids = first.split()
    assert code == -signal.SIGINT  # as Python ends on Ctrl-C (a shell shows 130)
    line = _one_line(err)
    assert all(state in (JobState.QUEUED, JobState.RUNNING) for state in _states(tmp_path, ids))
    sweep = Registry(tmp_path / "registry.sqlite3").find(ids[0]).sweep
    config = shlex.quote(slurm_settings)
    if n == 1:
        assert line == (f"easylaunch: interrupted (Ctrl-C); run {ids[0]} (slurm) goes on "
                        "without this process: cancel it with "
                        f"`easylaunch cancel --config {config} {ids[0]}`")
    else:
        assert line == ("easylaunch: interrupted (Ctrl-C); 2 slurm runs go on without this "
                        "process: cancel them with "
                        f"`easylaunch cancel --config {config} --sweep {sweep}`")
    _run_said_command(line)
    assert _states(tmp_path, ids) == [JobState.CANCELLED] * n


@pytest.mark.parametrize("wait", ["jobs[0].wait()", ""])  # "": the end of the script waits
def test_ctrl_c_in_a_local_wait_cancels_the_attached_runs(tmp_path, wait):
    config = settings_file(tmp_path)
    first, code, err = _ctrl_c(_script(tmp_path, config, "local", wait),
                               ready="" if wait else "waiting for 2 local run(s)")
    assert code == -signal.SIGINT
    assert _one_line(err) == "easylaunch: interrupted (Ctrl-C); cancelling 2 local runs"
    assert _states(tmp_path, first.split()) == [JobState.CANCELLED] * 2


def test_ctrl_c_in_a_wait_for_detached_runs_leaves_them_running(tmp_path):
    config = settings_file(tmp_path)
    first, code, err = _ctrl_c(_script(tmp_path, config, "local", "wait_all(jobs)",
                                       extra=", detach=True"))
    ids = first.split()
    assert code == -signal.SIGINT
    line = _one_line(err)
    assert "2 local runs go on without this process: cancel them with `easylaunch cancel " \
        f"--config {config} --sweep " in line
    assert _states(tmp_path, ids) == [JobState.RUNNING] * 2
    _run_said_command(line)
    assert _states(tmp_path, ids) == [JobState.CANCELLED] * 2


def test_one_ctrl_c_ends_submit_wait_and_cancels_its_local_run(tmp_path):
    config = settings_file(tmp_path)
    first, code, err = _ctrl_c([*EASYLAUNCH, "--config", config, "submit", "--wait", "--",
                                "sleep", "120"])
    assert code == 130
    assert _one_line(err) == "easylaunch: interrupted (Ctrl-C); cancelling 1 local run"
    assert _states(tmp_path, first.split()) == [JobState.CANCELLED]


def test_ctrl_c_in_logs_follow_and_watch_leaves_the_run_and_names_the_cancel(tmp_path):
    config = settings_file(tmp_path)
    submitted = subprocess.run([*EASYLAUNCH, "--config", config, "submit", "--", "bash", "-c",
                                "echo started; sleep 120"],
                               capture_output=True, text=True, timeout=120)
    run_id = submitted.stdout.strip()
    job = Job.from_run_dir(Registry(tmp_path / "registry.sqlite3").find(run_id).log_dir)
    assert wait_for(lambda: job.stdout_path.exists() and job.stdout_path.read_text(), 30)
    first, code, err = _ctrl_c([*EASYLAUNCH, "--config", config, "logs", "-f", run_id])
    assert first == "started\n" and code == 130
    assert _one_line(err) == (f"easylaunch: interrupted (Ctrl-C); run {run_id} (local) goes "
                              "on without this process: cancel it with "
                              f"`easylaunch cancel --config {config} {run_id}`")
    first, code, err = _ctrl_c([*EASYLAUNCH, "--config", config, "watch", "--interval", "1"])
    assert first.endswith("1 open run(s): 1 running\n") and code == 130
    line = _one_line(err)
    assert line == ("easylaunch: interrupted (Ctrl-C); 1 open run goes on without this "
                    "process: cancel it with `easylaunch cancel --state queued,running,unknown "
                    f"--config {config}`")
    assert job.status() is JobState.RUNNING
    assert f"{run_id}: cancelled" in _run_said_command(line)


def test_wait_all_raises_at_once_for_a_batch_nobody_submitted_behind_a_running_run(
        cfg, tmp_path, slurm_cluster):
    """A run written to a batch nobody submitted is never waited for, wherever it stands in
    the list (it used to raise only once the runs ahead of it had ended)."""
    import jobfns

    from easylaunch import run_sweep, wait_all
    from easylaunch.errors import NotSubmittedError

    (running,) = run_sweep(jobfns.sleep_a_while, [{"seconds": 120}], exp_name="ahead",
                           config=cfg)
    cfg.update(SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=1, time_in_mins=10)))
    (written,) = run_sweep(jobfns.train, [{}], mode="htp", exp_name="behind", config=cfg,
                           submit=False)
    try:
        with pytest.raises(NotSubmittedError, match=f"run {written.id} was written to batch "):
            wait_all([running, written], timeout=60)  # (the running run needs 120 s)
        assert running.recorded_state() is not JobState.SUCCEEDED  # (it did not wait for it)
    finally:
        running.cancel()
