"""``local`` runs that outlive their launcher (detach=True, LOCAL_DETACH), tracked, followed and
cancelled from later processes through the real ``easylaunch`` command."""

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from helpers import alive, run_pids, wait_for

from easylaunch import Job, JobState, LaunchError, run_experiment

TESTS_DIR = Path(__file__).resolve().parent


def cli(config_file: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def _launch(config_file: str, call: str) -> tuple[subprocess.Popen, list[Path]]:
    """A launching script that makes ``call`` (run_sweep of jobfns, settings from
    ``config_file``), prints the run folders and then sleeps, to be killed."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import jobfns
        from easylaunch import run_sweep
        jobs = {call}
        print(" ".join(str(j.log_dir) for j in jobs), flush=True)
        time.sleep(300)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    dirs = [Path(d) for d in proc.stdout.readline().split()]
    assert dirs, proc.stderr.read()
    return proc, dirs


def test_detached_runs_outlive_a_killed_launcher_and_take_turns(tmp_path):
    config = settings_file(tmp_path)
    proc, dirs = _launch(config, f"run_sweep(jobfns.wait_for_release, [dict(tag='a'), "
                                 f"dict(tag='b')], config={config!r}, max_parallel=1, "
                                 "detach=True)")
    assert wait_for(lambda: (dirs[0] / "progress.txt").exists(), 30), "the first never started"
    proc.kill()  # (an attached local run dies with its launcher: test_local_processes)
    proc.wait(timeout=30)
    first, second = (Job.from_run_dir(d) for d in dirs)
    assert first.status() is JobState.RUNNING
    assert second.status() is JobState.QUEUED  # max_parallel=1: it waits its turn
    assert "started a" in cli(config, "logs", first.id)
    (dirs[0] / jobfns.RELEASE).touch()
    assert first.wait(timeout=30) is JobState.SUCCEEDED
    assert wait_for(lambda: (dirs[1] / "progress.txt").exists(), 30)
    (dirs[1] / jobfns.RELEASE).touch()
    assert second.wait(timeout=30) is JobState.SUCCEEDED
    assert second.result()["tag"] == "b"
    listed = cli(config, "ls")  # through a pipe: one tab-separated line per run
    assert [line.split("\t")[3] for line in listed.splitlines()[1:]] == ["succeeded"] * 2


def test_a_later_process_cancels_a_detached_run_and_its_children(tmp_path):
    config = settings_file(tmp_path, LOCAL_DETACH=True)  # the setting, not the keyword
    proc, (run_dir,) = _launch(config, f"run_sweep(jobfns.sleep_with_child, [{{}}], "
                                       f"config={config!r})")
    pids = run_pids(run_dir)
    proc.send_signal(signal.SIGINT)  # Ctrl-C in the script: its detached run goes on
    proc.wait(timeout=30)
    job = Job.from_run_dir(run_dir)
    assert job.status() is JobState.RUNNING and all(alive(p) for p in pids)
    assert cli(config, "cancel", job.id).strip() == f"{job.id}: cancelled"
    assert job.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not any(alive(p) for p in pids))


def test_a_detached_run_whose_supervisor_dies_is_failed_at_the_next_look(tmp_path, cfg):
    job = run_experiment(jobfns.sleep_with_child, config=cfg, detach=True)
    runner_pid, child_pid = run_pids(job.log_dir)
    backend = job.launch_info["backend"]
    subprocess.run(["kill", "-KILL", str(backend["packer_pid"]), str(runner_pid),
                    str(child_pid)], check=True)
    assert job.wait(timeout=30) is JobState.FAILED
    assert "ended before this run recorded an outcome" in job.info()["error"]


@pytest.mark.parametrize(("mode", "detach", "problem"), [
    ("local", "yes", "detach must be True or False"),
    ("local_docker", True, "cannot detach its runs"),
])
def test_detach_is_checked_before_anything_is_made(cfg, tmp_path, mode, detach, problem):
    with pytest.raises(LaunchError, match=problem):
        run_experiment(jobfns.train, mode=mode, config=cfg, detach=detach)
    assert not (tmp_path / "logs").exists()


def test_resubmit_detach_returns_while_the_new_run_goes_on(tmp_path):
    config = settings_file(tmp_path)
    first = run_experiment(jobfns.wait_for_release, variant=dict(tag="r"), config=config)
    (first.log_dir / jobfns.RELEASE).touch()
    assert first.wait(timeout=30) is JobState.SUCCEEDED
    said = cli(config, "resubmit", "--detach", first.id)  # returns: the run is not its child
    new_dir = Path(said.split(": ", 1)[1].strip())
    again = Job.from_run_dir(new_dir)
    assert again.launch_info["request"]["mode_options"]["detach"] is True
    assert wait_for(lambda: (new_dir / "progress.txt").exists(), 30)
    assert again.status() is JobState.RUNNING
    (new_dir / jobfns.RELEASE).touch()
    assert again.wait(timeout=30) is JobState.SUCCEEDED and again.result()["tag"] == "r"
