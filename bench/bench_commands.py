"""Commands as runs (issue: commands as jobs), side by side in one process.

1. ``easylaunch submit --wait -- true`` (a new process, local mode, to the run's end) and
   ``run_command(["true"])`` from Python, against ``bash -c true`` through ``subprocess``
   (goal <= 3x).
2. A 300-command ``htp`` sweep (``true``) against the same number of no-op functions through
   ``htp``, launch to the last result (goal <= 1.1x).
3. ``easylaunch shell ID`` to a prompt that answers, locally and into a Slurm run over the test
   sshd, driven through tmux (seconds).

Needs the local Slurm cluster (scripts/slurm-up.sh), the test sshd (scripts/ssh-up.sh) and tmux.
Usage: python bench/bench_commands.py [--runs 300] [--repeat 5] (medians of --repeat)
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from batches import submit_copied_batch

from easylaunch import JobState, run_command, run_commands, run_sweep, wait_all

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "easylaunch.cli"]


def noop(doodad_config, variant):
    return None


def median_seconds(action, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def local_figures(settings_file: str, settings: dict, repeat: int) -> dict[str, float]:
    def submit_cli():
        out = subprocess.run([*CLI, "--config", settings_file, "submit", "--wait", "--",
                              "true"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr

    def submit_python():
        assert run_command(["true"], config=settings).wait() is JobState.SUCCEEDED

    return {"bash -c true (subprocess)": median_seconds(
                lambda: subprocess.run(["bash", "-c", "true"], check=True), repeat),
            "easylaunch submit --wait -- true": median_seconds(submit_cli, repeat),
            "run_command(['true']) to its end": median_seconds(submit_python, repeat)}


def submitted(jobs: list) -> None:
    """Submit the batch on the cluster (this machine) and wait for its runs."""
    submit_copied_batch(jobs)
    states = wait_all(jobs)
    assert all(s is JobState.SUCCEEDED for s in states), states


def htp_figures(settings: dict, runs: int, repeat: int) -> dict[str, float]:
    def commands():  # (each sweep its own experiment: one batch each, none grown)
        submitted(run_commands(["true"] * runs, exp_name=f"cmd-{uuid.uuid4().hex[:6]}",
                               mode="htp", config=settings))

    def functions():
        submitted(run_sweep(noop, [{"i": i} for i in range(runs)],
                            exp_name=f"fn-{uuid.uuid4().hex[:6]}", mode="htp",
                            config=settings))

    times: dict[str, list[float]] = {f"htp: {runs} functions": [], f"htp: {runs} commands": []}
    for _ in range(repeat):  # alternately: the cluster's pace drifts
        for name, action in zip(times, (functions, commands), strict=True):
            times[name].append(median_seconds(action, 1))
    return {name: statistics.median(values) for name, values in times.items()}


def shell_seconds(argv: list[str]) -> float:
    """From starting ``argv`` in tmux to the answer of a command typed at once."""
    session = f"bench{uuid.uuid4().hex[:6]}"
    marker = "READY-" + "$((6*7))"
    start = time.perf_counter()
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "200", "-y", "50",
                    shlex.join(argv)], check=True)
    subprocess.run(["tmux", "send-keys", "-t", session, f"echo {marker}", "Enter"], check=True)
    try:
        while "READY-42" not in subprocess.run(["tmux", "capture-pane", "-p", "-t", session],
                                               capture_output=True, text=True).stdout:
            if time.perf_counter() - start > 60:
                raise TimeoutError("no prompt in 60 s")
            time.sleep(0.02)
        return time.perf_counter() - start
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def shell_figures(tmp: Path, settings: dict) -> dict[str, float]:
    local = tmp / "local.py"
    local.write_text(f"LOCAL_LOG_DIR = {settings['LOCAL_LOG_DIR']!r}\n"
                     f"REGISTRY_PATH = {settings['REGISTRY_PATH']!r}\n")
    remote = tmp / "remote.py"
    remote.write_text(local.read_text() + f"""
DEFAULT_CLUSTER = "test"
CLUSTERS = {{"test": {{"host": "easylaunch-test-cluster", "log_dir": "~/runs/bench",
            "python": "~/venv/bin/python", "ssh_config": {str(REPO / '.test-ssh/config')!r}}}}}
SLURM_CONFIGS = {{"cpu": {{"max_num_cores_per_node": {os.cpu_count()}, "time_in_mins": 10}}}}
""")
    figures = {}
    for name, config, mode in (("local", local, "local"), ("slurm over ssh", remote, "slurm")):
        job = run_command(["sleep", "300"], mode=mode, config=str(config),
                          **({"detach": True} if mode == "local" else {}))
        try:
            deadline = time.time() + 120
            while job.status() is not JobState.RUNNING and time.time() < deadline:
                time.sleep(0.5)
            figures[f"shell to a prompt: {name}"] = statistics.median(
                shell_seconds([*CLI, "--config", str(config), "shell", job.id])
                for _ in range(3))
        finally:
            job.cancel()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        tmp = Path(tmp)
        settings = dict(LOCAL_LOG_DIR=str(tmp / "logs"),
                        REGISTRY_PATH=str(tmp / "registry.sqlite3"), LAUNCH_LINE=False,
                        SLURM_PYTHON=sys.executable, SSS_SCRIPT_PATH=None, SSS_SUBMIT=False,
                        SLURM_DIRECTORY_FOR_JOB_SCRIPT=str(tmp / "cluster/batches"),
                        SSS_LOG_DIR=str(tmp / "cluster/logs"), CODE_DIRS_TO_MOUNT=[],
                        SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=os.cpu_count(),
                                                    time_in_mins=120)))
        settings_file = tmp / "settings.py"
        settings_file.write_text("".join(f"{k} = {v!r}\n" for k, v in settings.items()))
        local = local_figures(str(settings_file), settings, args.repeat)
        htp = htp_figures(settings, args.runs, args.repeat)
        shells = shell_figures(tmp, settings)
    base = local["bash -c true (subprocess)"]
    for name, seconds in local.items():
        print(f"{name:40} {seconds * 1000:9.1f} ms  {seconds / base:7.1f}x")
    fn, cmd = htp.values()
    print(f"{list(htp)[0]:40} {fn:9.2f} s")
    print(f"{list(htp)[1]:40} {cmd:9.2f} s  {cmd / fn:7.2f}x the functions")
    for name, seconds in shells.items():
        print(f"{name:40} {seconds:9.2f} s")


if __name__ == "__main__":
    main()
