"""`easylaunch ls` and `easylaunch ls --all` over a registry of 10,000 runs against
`easylaunch --version` (goal < 5x); each with `--json` against the table (goal <= 1.2x).

The commands run as fresh processes, interleaved, so start-up costs count the same for each;
their output goes to a pipe (ls then prints tab-separated lines).
Usage: python bench/bench_registry.py [--runs N] [--repeats N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from easylaunch.tracking.registry import Registry


def fill(path: Path, runs: int) -> None:
    now = time.time()
    states = ("succeeded", "failed", "cancelled")
    Registry(path).add(
        dict(id=f"{i:08x}", exp_name=f"exp-{i % 37}", mode="local", state=states[i % 3],
             log_dir=f"/logs/exp-{i % 37}/run_{i:08x}", variant={"lr": i}, created=now - i)
        for i in range(runs))


@contextlib.contextmanager
def filled_settings(runs: int) -> Iterator[Path]:
    """A settings file naming a temporary registry of ``runs`` runs (and a temporary log
    folder beside it), removed afterwards."""
    with tempfile.TemporaryDirectory() as tmp:
        fill(Path(tmp) / "registry.sqlite3", runs)
        config = Path(tmp) / "settings.py"
        config.write_text(f"REGISTRY_PATH = {str(Path(tmp) / 'registry.sqlite3')!r}\n"
                          f"LOCAL_LOG_DIR = {tmp!r}\n")
        yield config


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    with filled_settings(args.runs) as config:
        base = [sys.executable, "-m", "easylaunch.cli"]
        times: dict[str, list[float]] = {"--version": [], "ls": [], "ls --all": [],
                                         "ls --json": [], "ls --all --json": []}
        for _ in range(args.repeats):
            for name in times:
                argv = name.split() if name == "--version" else \
                    ["--config", str(config), *name.split()]
                times[name].append(timed(base + argv))
        v = statistics.median(times["--version"]) * 1000
        print(f"registry of {args.runs} runs: easylaunch --version {v:.0f} ms")
        for name in ("ls", "ls --all"):
            ms = statistics.median(times[name]) * 1000
            print(f"  easylaunch {name:9} {ms:5.0f} ms | ratio {ms / v:.2f}x (goal < 5x)")
            as_json = statistics.median(times[f"{name} --json"]) * 1000
            print(f"  easylaunch {name} --json {as_json:5.0f} ms | ratio to the table "
                  f"{as_json / ms:.2f}x (goal <= 1.2x)")


if __name__ == "__main__":
    main()
