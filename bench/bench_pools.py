"""Warm pools on this machine (issue 51), measured side by side in one run.

1. A no-op run's call to result: ``run_experiment(noop, mode="local", pool=P).result()``
   against ``python -c pass`` and against ``local`` without a pool (goal: <= 1.2x
   ``python -c pass``).
2. Dispatch to a function's first line, for a function whose module imports torch at its top:
   in a pool with torch preloaded against a cold ``local`` run (goal: <= 0.2 s in the pool).
3. A sweep of ``--runs`` runs of 10 ms, launch to every result, each way with two runs at once:
   ``local``, a pool in a Slurm allocation on the test cluster (goal: <= 1.3x local), the same
   pool from a laptop over SSH (goal: <= 1.5x local; scripts/ssh-up.sh's user), ``htp`` and
   ``slurm`` (scripts/slurm-up.sh).
4. A search of ``--trials`` trials of 1-5 s into a pool of ``--search-workers`` workers
   (default 2): the share of the workers' time with no trial (goal <= 3%; the issue's figure
   is 200 trials on 4 workers: ``--trials 200 --search-workers 4``). Beside it, the share
   until the last trial's start: the gaps between trials, without the tail of the last ones.

Usage: python bench/bench_pools.py [--calls 20] [--runs 100] [--trials 30] [--search-workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from easylaunch import run_experiment, run_search, run_sweep, start_pool, stop_pool, wait_all

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


def sweep_seconds(runs: int, **launch) -> float:
    """Launch to every result of ``runs`` runs of 10 ms (wait_all: one look for all the open
    runs, every 0.25 s, as a sweep is followed)."""
    t = time.perf_counter()
    jobs = run_sweep(light.short, [{"i": i} for i in range(runs)], **launch)
    wait_all(jobs, timeout=600, refresh_every=0.25)
    for job in jobs:
        job.result(timeout=600)
    return time.perf_counter() - t


def idle_share(folder: Path, workers: int) -> tuple[float, float]:
    """The share of the pool workers' time with no trial running: from the first trial's
    start to the last one's end (the issue's figure), and to the last trial's start (while
    trials were left to start: the gaps between trials, without the last ones' tail)."""
    spans = [(r["started"], r["ended"]) for r in (
        json.loads(p.read_text()) for p in folder.glob("task-state/task-*.json"))]
    first = min(s for s, _ in spans)

    def idle_until(end: float) -> float:
        busy = sum(max(0.0, min(e, end) - s) for s, e in spans)
        return 1 - busy / (workers * (end - first))

    return idle_until(max(e for _, e in spans)), idle_until(max(s for s, _ in spans))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--search-workers", type=int, default=2)
    args = parser.parse_args()
    calls = args.calls
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
        slots = args.search_workers
        searching = start_pool("search", workers=slots, idle="10m", config=cfg)
        try:
            search = run_search(light.trial, {"x": [0.1, 0.3, 0.5, 0.9],
                                              "seconds": [1, 2, 3, 4, 5]}, "loss",
                                n_trials=args.trials, max_parallel=slots, sampler="random",
                                pruner=None, seed=0, mode="local", pool="search", config=cfg)
            searched = idle_share(Path(searching.folder), slots)
            counts = search.summary()["counts"]
        finally:
            stop_pool("search", cfg)
        slurm_cfg = dict(cfg, SLURM_PYTHON=sys.executable, SSS_SCRIPT_PATH=None,
                         SLURM_CONFIGS={"cpu": {"partition": "debug", "time_in_mins": 10,
                                                "max_num_cores_per_node": 2}})
        local_sweep = sweep_seconds(args.runs, mode="local", max_parallel=2, config=cfg)
        start_pool("nodes", on="slurm", workers=2, idle="10m", time_limit="10m",
                   config=slurm_cfg)
        try:
            sweep_seconds(2, mode="local", pool="nodes", config=slurm_cfg)  # (its allocation
            pooled_sweep = sweep_seconds(args.runs, mode="local", pool="nodes",  # runs)
                                         config=slurm_cfg)
        finally:
            stop_pool("nodes", slurm_cfg)
        laptop_cfg = dict(cfg, CLUSTERS={"test": {
            "host": "easylaunch-test-cluster", "log_dir": f"~/runs/bench-{os.getpid()}",
            "python": "~/venv/bin/python", "ssh_config": str(HERE.parent / ".test-ssh/config")}},
            SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])
        start_pool("far", on="slurm", workers=2, idle="10m", time_limit="10m", cluster="test",
                   config=laptop_cfg)
        try:
            sweep_seconds(2, pool="far", cluster="test", config=laptop_cfg)
            laptop_sweep = sweep_seconds(args.runs, pool="far", cluster="test",
                                         config=laptop_cfg)
        finally:
            stop_pool("far", laptop_cfg, cluster="test")
        htp_sweep = sweep_seconds(args.runs, mode="htp", config=slurm_cfg)
        slurm_sweep = sweep_seconds(args.runs, mode="slurm", config=slurm_cfg)
    p = median_ms(python)
    print(f"no-op call to result, median of {calls} (ms): python -c pass {p:.1f}; pool "
          f"{median_ms(pooled):.1f} ({median_ms(pooled) / p:.2f}x, goal <= 1.2x); local "
          f"without a pool {median_ms(local):.1f} ({median_ms(local) / p:.2f}x)")
    print(f"dispatch to the first line of a function whose module imports torch, median "
          f"(s): pool with torch preloaded {statistics.median(warm):.3f} (goal <= 0.2); cold "
          f"local {statistics.median(cold):.3f}")
    print(f"a sweep of {args.runs} runs of 10 ms, two at once, launch to every result (s): "
          f"local {local_sweep:.2f}; pool on Slurm {pooled_sweep:.2f} "
          f"({pooled_sweep / local_sweep:.2f}x local, goal <= 1.3x); the same from a laptop "
          f"over SSH {laptop_sweep:.2f} ({laptop_sweep / local_sweep:.2f}x, goal <= 1.5x); "
          f"htp {htp_sweep:.2f} "
          f"({htp_sweep / local_sweep:.2f}x); slurm {slurm_sweep:.2f} "
          f"({slurm_sweep / local_sweep:.2f}x)")
    print(f"a search of {args.trials} trials of 1-5 s into a pool of {slots} workers: the workers "
          f"idle {100 * searched[0]:.1f}% of the time (goal <= 3%); "
          f"{100 * searched[1]:.1f}% while trials were left to start; {counts}")


if __name__ == "__main__":
    main()
