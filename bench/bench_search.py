"""run_search's figures (issue 42), local mode, each against its baseline in the same process:

1. search vs grid at equal budget: f = 1 + (x-0.3)^2 + 0.25 (log10 lr + 3)^2 (optimum 1.0 at
   x=0.3, lr=1e-3), logged as f + 1/t for 27 steps, returned as f; an 8x8 grid (run_sweep)
   against ASHA+TPE, max_parallel=4, 64 trials. Steps are the ones the runs logged (each run's
   last metrics.jsonl step, the overshoot of a stop included). Goal: within 1% of the optimum
   in at most a third of the grid's steps.
2. overhead: 64 trials of a 10 ms function (random sampler, no pruner) against run_sweep of the
   same 64 variants, max_parallel=4, each to its last run's end. Goal: <= 1.2x.
3. idle slots: trials of uneven length (uniform between --short and --long seconds, seeded by
   variant), 4 slots: the share of slot-time no run held, from the first launch to the last
   run's start; beside it a batch-synchronous loop (run_sweep of 4, wait for all, again).
   Goal: <= 5%.
Usage: python bench/bench_search.py [--figures 1,2,3] [--step-s 0.1] [--short 1 --long 10]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import tempfile
import time
from pathlib import Path

import optuna

from easylaunch import log_metrics, run_search, run_sweep

STEPS = 27
SLOTS = 4


def shaped(doodad_config, variant):
    f = 1 + (variant["x"] - 0.3) ** 2 + 0.25 * (math.log10(variant["lr"]) + 3) ** 2
    for t in range(1, STEPS + 1):
        log_metrics(step=t, loss=f + 1 / t)
        time.sleep(variant["step_s"])
    return {"loss": f}


def tiny(doodad_config, variant):
    time.sleep(0.01)
    return {"loss": variant["x"]}


def uneven(doodad_config, variant):
    time.sleep(variant["seconds"])
    return {"loss": variant["seconds"]}


def steps_run(log_dir: str | Path) -> int:
    lines = (Path(log_dir) / "metrics.jsonl").read_text().splitlines()
    return max((json.loads(line)["step"] for line in lines), default=0)


def busy(log_dirs: list[str]) -> list[tuple[float, float]]:
    """(launched, ended) of each run, from its status.json."""
    spans = []
    for folder in log_dirs:
        status = json.loads((Path(folder) / "status.json").read_text())
        spans.append((status["queued_at"], status["ended_at"]))
    return spans


def idle_share(spans: list[tuple[float, float]]) -> float:
    start = min(s for s, _ in spans)
    last_start = max(s for s, _ in spans)
    held = sum(min(e, last_start) - s for s, e in spans if s < last_start)
    return 1 - held / (SLOTS * (last_start - start))


def figure_1(cfg: dict, step_s: float) -> None:
    grid = [{"x": i / 7, "lr": 10 ** (-5 + 4 * j / 7), "step_s": step_s}
            for i in range(8) for j in range(8)]
    jobs = run_sweep(shaped, grid, exp_name="grid", config=cfg, max_parallel=SLOTS)
    for job in jobs:
        job.wait()
    grid_best = min(job.result()["loss"] for job in jobs)
    grid_steps = sum(steps_run(job.log_dir) for job in jobs)
    space = {"x": optuna.distributions.FloatDistribution(0.0, 1.0),
             "lr": optuna.distributions.FloatDistribution(1e-5, 1e-1, log=True),
             "step_s": step_s}
    search = run_search(shaped, space, "loss", n_trials=64, max_parallel=SLOTS, seed=0,
                        min_resource=1, exp_name="asha", config=cfg)
    search_steps = sum(steps_run(run) for t in search.trials() for run in t["runs"])
    print(f"1. grid 8x8: best {grid_best:.4f} in {grid_steps} steps; ASHA+TPE: best "
          f"{search.best.value:.4f} ({100 * (search.best.value - 1):.2f}% above the optimum) "
          f"in {search_steps} steps ({search_steps / grid_steps:.0%} of the grid's); "
          f"{search.summary()['counts']}")


def figure_2(cfg: dict) -> None:
    variants = [{"x": i / 64} for i in range(64)]
    start = time.perf_counter()
    for job in run_sweep(tiny, variants, exp_name="overhead-sweep", config=cfg,
                         max_parallel=SLOTS):
        job.wait()
    sweep_s = time.perf_counter() - start
    start = time.perf_counter()
    run_search(tiny, {"x": [v["x"] for v in variants]}, "loss", sampler="random", pruner=None,
               n_trials=64, max_parallel=SLOTS, exp_name="overhead-search", config=cfg)
    search_s = time.perf_counter() - start
    print(f"2. 64 runs of 10 ms: run_sweep {sweep_s:.2f} s, run_search {search_s:.2f} s: "
          f"{search_s / sweep_s:.2f}x")


def figure_3(cfg: dict, short: float, long: float) -> None:
    rng = random.Random(0)
    seconds = [round(rng.uniform(short, long), 2) for _ in range(24)]
    search = run_search(uneven, {"seconds": seconds}, "loss", sampler="grid", pruner=None,
                        n_trials=24, max_parallel=SLOTS, exp_name="idle", config=cfg)
    searched = idle_share(busy([t["runs"][-1] for t in search.trials()]))
    dirs = []
    for first in range(0, len(seconds), SLOTS):
        jobs = run_sweep(uneven, [{"seconds": s} for s in seconds[first:first + SLOTS]],
                         exp_name="idle-batches", config=cfg, max_parallel=SLOTS)
        for job in jobs:
            job.wait()
        dirs += [str(job.log_dir) for job in jobs]
    print(f"3. idle slots, trials of {short}-{long} s: run_search {searched:.1%}; "
          f"batches of {SLOTS} {idle_share(busy(dirs)):.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--figures", default="1,2,3")
    parser.add_argument("--step-s", type=float, default=0.1)
    parser.add_argument("--short", type=float, default=1.0)
    parser.add_argument("--long", type=float, default=10.0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    root = Path(tempfile.mkdtemp(prefix="bench-search-"))
    cfg = {"LOCAL_LOG_DIR": str(root / "logs"), "REGISTRY_PATH": str(root / "registry.db"),
           "LAUNCH_LINE": False}
    figures = set(args.figures.split(","))
    if "1" in figures:
        figure_1(cfg, args.step_s)
    if "2" in figures:
        figure_2(cfg)
    if "3" in figures:
        figure_3(cfg, args.short, args.long)


if __name__ == "__main__":
    main()
