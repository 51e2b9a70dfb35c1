"""``load_sweep`` over a large sweep, against reading the same metric files with pandas
directly, side by side in one process.

N runs (default 1,000; ``here_no_doodad``, so they are made quickly) each log M steps (default
1,000) of one metric. Timed, interleaved, medians: ``load_sweep(exp)`` (every run refreshed,
its variant, result and the last value of each metric) against ``pandas.read_json(lines=True)``
of every run's metrics.jsonl and the last value taken (goal: <= 1.5x). Each round reads the
files afresh, as a new process does (the folders ``read_series`` keeps are forgotten first); a
second ``load_sweep`` in the same process, its files unchanged, is timed apart.

Usage: python bench/bench_load_sweep.py [--runs N] [--steps M] [--rounds R]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from easylaunch import log_metrics, run_sweep
from easylaunch.results import load_sweep, readers


def steps(doodad_config, variant):
    for step in range(variant["steps"]):
        log_metrics(step=step, loss=1.0 / (step + 1))
    return {"seed": variant["seed"]}


def by_hand(root: Path) -> pd.DataFrame:
    rows = []
    for path in root.glob("*/metrics.jsonl"):
        frame = pd.read_json(path, lines=True)
        rows.append({"run": path.parent.name, "loss": frame["loss"].iloc[-1]})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-load-sweep-") as tmp:
        cfg = {"LOCAL_LOG_DIR": f"{tmp}/logs", "REGISTRY_PATH": f"{tmp}/registry.sqlite3",
               "LAUNCH_LINE": False}
        t = time.perf_counter()
        run_sweep(steps, [{"seed": i, "steps": args.steps} for i in range(args.runs)],
                  exp_name="big", mode="here_no_doodad", config=cfg)
        made = time.perf_counter() - t
        ours, theirs, again = [], [], []
        for _ in range(args.rounds):
            readers._kept.clear()
            t = time.perf_counter()
            table = load_sweep("big", config=cfg)
            ours.append(time.perf_counter() - t)
            t = time.perf_counter()
            load_sweep("big", config=cfg)
            again.append(time.perf_counter() - t)
            t = time.perf_counter()
            plain = by_hand(Path(tmp, "logs", "big"))
            theirs.append(time.perf_counter() - t)
        assert len(table) == len(plain) == args.runs
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"{args.runs} runs x {args.steps} steps (made in {made:.1f} s): load_sweep "
              f"{a:.2f} s, pandas.read_json of each metrics.jsonl {b:.2f} s: {a / b:.2f}x "
              f"(goal <= 1.5x); load_sweep again, files unchanged: "
              f"{statistics.median(again):.2f} s")


if __name__ == "__main__":
    main()
