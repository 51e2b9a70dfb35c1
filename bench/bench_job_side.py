"""The job side: start-up and bytes per run, this release's job.pyz against the one-file
runner.py it replaced (tests/fixtures/old_run holds a copy), measured side by side.

1. Start-up: from starting the interpreter to the user's function called (the function stamps
   the time), ``python bundle/job.pyz run bundle`` vs ``python runner.py bundle``, interleaved
   rounds, medians (goal: no worse).
2. Bytes per run in an ``sss`` batch of N runs: the batch folder as written, vs the same folder
   with the old runner.py in job.pyz's place (goal: no worse).

Usage: python bench/bench_job_side.py [--rounds N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from easylaunch import run_experiment, run_sweep
from easylaunch.runs.jobpack import job_archive
from easylaunch_job.outcome import load_outcome

REPO = Path(__file__).resolve().parent.parent
OLD_RUNNER = next((REPO / "tests/fixtures/old_run/logs/.blobs").glob("*.runner.py"))


def stamp(doodad_config, variant):
    return time.time()


def _start_ms(argv: list[str], log_dir: Path) -> float:
    """Milliseconds from starting ``argv`` to the function's stamp."""
    t = time.time()
    subprocess.run([*argv, "--log-dir", str(log_dir)], check=True)
    return (load_outcome(str(log_dir))[1] - t) * 1000


def bench_start(root: Path, rounds: int) -> tuple[float, float]:
    job = run_experiment(stamp, mode="local", config={"LOCAL_LOG_DIR": str(root / "logs")})
    job.wait(60)
    bundle = job.log_dir / "bundle"
    new, old = [], []
    for i in range(rounds):
        new.append(_start_ms([sys.executable, str(bundle / "job.pyz"), "run", str(bundle)],
                             root / f"new-{i}"))
        old.append(_start_ms([sys.executable, str(OLD_RUNNER), str(bundle)], root / f"old-{i}"))
    return statistics.median(new), statistics.median(old)


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def bench_sss_bytes(root: Path, runs: int) -> tuple[float, float]:
    cfg = {"LOCAL_LOG_DIR": str(root / "sss-logs"), "SSS_LOG_DIR": "/cluster/logs",
           "SSS_SUBMIT": False,
           "SLURM_DIRECTORY_FOR_JOB_SCRIPT": "/cluster/batches", "SSS_CPU_IMAGE": "/img.sif",
           "SSS_SCRIPT_PATH": str(root / "seed.sh")}
    jobs = run_sweep(stamp, [{"i": i} for i in range(runs)], mode="sss", config=cfg)
    batch = Path(jobs[0].launch_info["backend"]["batch_dir"])
    now = _folder_bytes(batch)
    before = now - len(job_archive()) + OLD_RUNNER.stat().st_size
    return now / runs, before / runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-job-side-"))
    os.chdir(root)
    try:
        new, old = bench_start(root, args.rounds)
        print(f"start-up to the function: job.pyz {new:.1f} ms, runner.py {old:.1f} ms "
              f"({new / old:.2f}x; goal <= 1x)")
        now, before = bench_sss_bytes(root, args.runs)
        print(f"sss batch of {args.runs} runs: {now:.0f} bytes per run, with runner.py "
              f"{before:.0f} ({now / before:.2f}x; goal <= 1x)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
