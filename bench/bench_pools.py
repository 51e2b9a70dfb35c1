"""Warm pools on this machine (issue 51), measured side by side in one run.

1. A no-op run's call to result: ``run_experiment(noop, mode="local", pool=P).result()``
   against ``python -c pass`` and against ``local`` without a pool (goal: <= 1.2x
   ``python -c pass``).
2. Dispatch to a function's first line, for a function whose module imports torch at its top:
   in a pool with torch preloaded against a cold ``local`` run (goal: <= 0.2 s in the pool).

Usage: python bench/bench_pools.py [--calls 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from easylaunch import run_experiment, start_pool, stop_pool

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "poolfns"))

import heavy_top  # noqa: E402  (pickled by reference: each run imports it, and torch with it)
import light  # noqa: E402


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def timed(call, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return times


def dispatch(cfg: dict, calls: int, **options) -> list[float]:
    """Seconds from the launch call to the function's first line."""
    times = []
    for _ in range(calls):
        t = time.time()
        job = run_experiment(heavy_top.first_line, mode="local", config=cfg, **options)
        times.append(job.result(timeout=120)["at"] - t)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    calls = parser.parse_args().calls
    with tempfile.TemporaryDirectory(prefix="bench-pools-") as tmp:
        cfg = {"LOCAL_LOG_DIR": f"{tmp}/logs", "REGISTRY_PATH": f"{tmp}/registry.sqlite3",
               "CODE_DIRS_TO_MOUNT": [str(HERE / "poolfns")]}
        start_pool("bench", workers=2, preload=["torch"], idle="10m", config=cfg)
        try:
            python = timed(lambda: subprocess.run([sys.executable, "-c", "pass"], check=True),
                           calls)
            pooled = timed(lambda: run_experiment(light.noop, mode="local", pool="bench",
                                                  config=cfg).result(timeout=60), calls)
            local = timed(lambda: run_experiment(light.noop, mode="local",
                                                 config=cfg).result(timeout=60), calls)
            warm = dispatch(cfg, calls, pool="bench")
            cold = dispatch(cfg, max(3, calls // 4))
        finally:
            stop_pool("bench", cfg)
    p = median_ms(python)
    print(f"no-op call to result, median of {calls} (ms): python -c pass {p:.1f}; pool "
          f"{median_ms(pooled):.1f} ({median_ms(pooled) / p:.2f}x, goal <= 1.2x); local "
          f"without a pool {median_ms(local):.1f} ({median_ms(local) / p:.2f}x)")
    print(f"dispatch to the first line of a function whose module imports torch, median "
          f"(s): pool with torch preloaded {statistics.median(warm):.3f} (goal <= 0.2); cold "
          f"local {statistics.median(cold):.3f}")


if __name__ == "__main__":
    main()
