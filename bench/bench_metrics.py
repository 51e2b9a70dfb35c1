"""Cost of ``easylaunch.log_metrics`` per logged step (3 values) against writing the same JSON
line to an open file (goal <= 3x), and against torch's ``SummaryWriter.add_scalar`` (3 calls)
where torch and tensorboard are installed.

Interleaved rounds, each timing a batch of steps per way and its flush to the file; medians.
log_metrics runs as inside a run (its file named by the runner's variable).
Usage: python bench/bench_metrics.py [--steps N] [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from easylaunch_job.environment import ENV_METRICS_FILE
from easylaunch_job.metrics import flush_metrics


def ways(folder: Path) -> dict[str, Callable[[int], None]]:
    """Each way of logging one step of (loss, acc, lr), as a function of the step count that
    logs that many steps and flushes."""
    os.environ[ENV_METRICS_FILE] = str(folder / "metrics.jsonl")
    plain = open(folder / "plain.jsonl", "a")  # noqa: SIM115 - open for the whole benchmark

    def log_metrics(steps: int) -> None:
        for step in range(steps):
            log_metrics(step=step, loss=0.5 / (step + 1), acc=0.9, lr=1e-3)
        flush_metrics()

    def append_line(steps: int) -> None:
        for step in range(steps):
            plain.write(json.dumps({"step": step, "time": time.time(), "loss": 0.5 / (step + 1),
                                    "acc": 0.9, "lr": 1e-3}) + "\n")
        plain.flush()

    found = {"log_metrics": log_metrics, "open file": append_line}
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        print(f"(no SummaryWriter here: {exc})")
        return found
    writer = SummaryWriter(log_dir=str(folder / "tb"))

    def add_scalar(steps: int) -> None:
        for step in range(steps):
            writer.add_scalar("loss", 0.5 / (step + 1), step)
            writer.add_scalar("acc", 0.9, step)
            writer.add_scalar("lr", 1e-3, step)
        writer.flush()

    found["SummaryWriter"] = add_scalar
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per way per round")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        found = ways(Path(tmp))
        times: dict[str, list[float]] = {name: [] for name in found}
        for _ in range(args.rounds):
            for name, way in found.items():
                start = time.perf_counter()
                way(args.steps)
                times[name].append((time.perf_counter() - start) / args.steps * 1e6)
    us = {name: statistics.median(t) for name, t in times.items()}
    base = us["open file"]
    print(f"one step of 3 values, median of {args.rounds} rounds of {args.steps} steps:")
    print(f"  json line to an open file {base:6.2f} us")
    print(f"  log_metrics               {us['log_metrics']:6.2f} us | "
          f"{us['log_metrics'] / base:.2f}x the open file (goal <= 3x)")
    if "SummaryWriter" in us:
        print(f"  SummaryWriter.add_scalar  {us['SummaryWriter']:6.2f} us (3 calls) | log_metrics "
              f"{us['log_metrics'] / us['SummaryWriter']:.2f}x of it")


if __name__ == "__main__":
    main()
