"""`easylaunch ls` of a sweep the queue forgot, against the same ls while squeue still lists it.

Two sweeps of N runs are submitted held (``--hold``) on the test cluster, then cancelled
from outside, so no run records an end. The first ``ls`` of sweep B runs while squeue still
lists its jobs; the first ``ls`` of sweep A runs after ``MinJobAge`` purged them, so only sacct
knows how they ended. Prints both times, their ratio (goal <= 2x) and the squeue and sacct
calls each ls made (goal: at most one sacct call a poll, never one a run).

Needs the test cluster (scripts/slurm-up.sh).
Usage: python bench/bench_forgotten.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from easylaunch import run_sweep


def noop(doodad_config, variant):
    return None


def counting_path(folder: Path) -> str:
    """A PATH whose squeue and sacct log each call in ``folder/calls`` first."""
    folder.mkdir()
    for name in ("squeue", "sacct"):
        (folder / name).write_text(f"#!/bin/sh\necho {name} >> {folder}/calls\n"
                                   f"exec {shutil.which(name)} \"$@\"\n")
        (folder / name).chmod(0o755)
    return f"{folder}:{os.environ['PATH']}"


def in_squeue(array: str) -> bool:
    return bool(subprocess.run(["squeue", "-h", "--states=all", "-j", array, "-o", "%T"],
                               capture_output=True, text=True).stdout.strip())


def timed_ls(settings: Path, sweep: str, calls_dir: Path) -> tuple[float, list[str]]:
    env = dict(os.environ, PATH=counting_path(calls_dir))
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(settings), "ls",
                    "--sweep", sweep], check=True, env=env, capture_output=True)
    return time.perf_counter() - start, (calls_dir / "calls").read_text().split()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Path(tmp) / "settings.py"
        settings.write_text(
            f"LOCAL_LOG_DIR = {tmp + '/logs'!r}\nREGISTRY_PATH = {tmp + '/registry.sqlite3'!r}\n"
            f"SLURM_PYTHON = {sys.executable!r}\n"
            f"CODE_DIRS_TO_MOUNT = [{str(Path(__file__).parent)!r}]\nLAUNCH_LINE = False\n"
            "SLURM_CONFIGS = {'cpu': {'partition': 'cpu', 'extra_flags': '--hold'}}\n")
        sweeps = {}
        for name in ("purged", "listed"):
            jobs = run_sweep(noop, [{"i": i} for i in range(args.runs)], exp_name=name,
                             mode="slurm", config=str(settings))
            array = jobs[0].launch_info["backend"]["slurm_job_id"].split("_")[0]
            sweeps[name] = (jobs[0].launch_info["sweep_id"], array)
        subprocess.run(["scancel", sweeps["purged"][1]], check=True)
        while in_squeue(sweeps["purged"][1]):
            time.sleep(0.5)
        subprocess.run(["scancel", sweeps["listed"][1]], check=True)
        listed, listed_calls = timed_ls(settings, sweeps["listed"][0], Path(tmp) / "a")
        purged, purged_calls = timed_ls(settings, sweeps["purged"][0], Path(tmp) / "b")
        shown = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config",
                                str(settings), "ls", "--all", "--json"], check=True,
                               capture_output=True, text=True).stdout
        ends = Counter(run["state"] for run in json.loads(shown)["runs"])
    print(f"ls of {args.runs} runs squeue still lists: {listed:.2f} s "
          f"({listed_calls.count('squeue')} squeue, {listed_calls.count('sacct')} sacct call)")
    print(f"ls of {args.runs} runs after MinJobAge purged them: {purged:.2f} s "
          f"({purged_calls.count('squeue')} squeue, {purged_calls.count('sacct')} sacct call); "
          f"ratio {purged / listed:.2f}x (goal <= 2x)")
    print(f"states after both: {dict(ends)}")


if __name__ == "__main__":
    main()
