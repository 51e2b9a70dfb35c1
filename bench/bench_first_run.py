"""The first five minutes: ``scripts/example.sh`` from a fresh clone of this repository, run
twice, against the full development environment (``.venv`` of this checkout, as
``scripts/setup.sh`` makes it for the tests) measured alongside.

1. First run: wall time from the clone to the example's end, and the size of its ``.venv``
   (goals: under 45 s; under a third of the full environment).
2. Second run, nothing changed: wall time (goal: under 3 s).

Usage: python bench/bench_first_run.py   (pip's cache makes the first run faster than on a
machine that never downloaded the packages)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
               ) / 2**20


def timed(argv: list[str], cwd: Path) -> float:
    t = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-first-run-") as tmp:
        clone = Path(tmp) / "easylaunch"
        t = time.perf_counter()
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        first = time.perf_counter() - t + timed(["./scripts/example.sh"], clone)
        second = timed(["./scripts/example.sh"], clone)
        light = size_mb(clone / ".venv")
    full = size_mb(REPO / ".venv") if (REPO / ".venv").is_dir() else float("nan")
    print(f"first run (clone + example.sh) {first:5.1f} s (goal < 45 s); .venv {light:6.0f} MB "
          f"vs the test environment's {full:6.0f} MB: {light / full:.3f}x (goal < 0.33x)")
    print(f"second run {second:5.2f} s (goal < 3 s)")


if __name__ == "__main__":
    sys.exit(main())
