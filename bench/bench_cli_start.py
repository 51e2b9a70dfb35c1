"""The ``easylaunch`` command's start: what a user waits for before anything happens.

Side by side in one run, the median wall time of N fresh processes of ``python -c pass``,
``python -c "import easylaunch"``, ``easylaunch --version``, ``easylaunch ls`` on a small
registry (a few ended local runs in a temporary folder) and ``easylaunch status ID`` on one of
them, with each one's ratio to ``python -c pass``.

Goals (issue 40): ``--version`` <= 1.5x ``python -c pass``; ``ls`` <= 2x.

Usage: python bench/bench_cli_start.py [--rounds N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 3  # runs in the small registry


def _easylaunch() -> list[str]:
    """The ``easylaunch`` console script beside this Python (as a user starts it)."""
    script = Path(sys.executable).parent / "easylaunch"
    return [str(script)] if script.exists() else [sys.executable, "-m", "easylaunch.cli"]


def _small_registry(folder: Path) -> str:
    """A settings file whose registry holds ``RUNS`` ended local runs; the id of one of them."""
    settings = folder / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(folder / 'logs')!r}\n"
                        f"REGISTRY_PATH = {str(folder / 'registry.sqlite3')!r}\n")
    os.environ["EASYLAUNCH_CONFIG"] = str(settings)
    import easylaunch

    jobs = [easylaunch.run_command(["true"], "bench-cli-start") for _ in range(RUNS)]
    easylaunch.wait_all(jobs)  # type: ignore[arg-type]
    return jobs[0].id  # type: ignore[union-attr]


def _medians_ms(cases: dict[str, list[str]], rounds: int) -> dict[str, float]:
    """Each case's median wall time; the cases take turns, so a busy spell hits all alike."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, argv in cases.items():
            start = time.perf_counter()
            subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) * 1000 for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    rounds = parser.parse_args().rounds
    with tempfile.TemporaryDirectory() as folder:
        run_id = _small_registry(Path(folder))
        cli = _easylaunch()
        cases = {"python -c pass": [sys.executable, "-c", "pass"],
                 'python -c "import easylaunch"': [sys.executable, "-c", "import easylaunch"],
                 "easylaunch --version": [*cli, "--version"],
                 f"easylaunch ls ({RUNS} runs)": [*cli, "ls"],
                 "easylaunch status ID (ended, local)": [*cli, "status", run_id]}
        ms = _medians_ms(cases, rounds)
    base = ms["python -c pass"]
    print(f"medians of {rounds} fresh processes ({sys.executable}):")
    for name, value in ms.items():
        print(f"  {name:38} {value:7.1f} ms  {value / base:4.1f}x")
    print("goals: --version <= 1.5x, ls <= 2.0x")


if __name__ == "__main__":
    main()
