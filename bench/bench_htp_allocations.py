"""``htp`` over several allocations against one allocation of the same total workers, side
by side (issue: past one node): N runs of a 10 ms function, launch to every run's recorded
end, alternating which goes first (goal: K allocations <= 1.2x one).

Needs the local cluster (scripts/slurm-up.sh). Usage: python bench/bench_htp_allocations.py
[--runs 2000] [--allocations 2] [--rounds 2]; the workers in all are --allocations (one per
allocation, against one allocation of that many).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid

from batches import submit_copied_batch

from easylaunch import JobState, run_sweep, wait_all


def work(doodad_config, variant):
    time.sleep(0.01)
    return variant["i"]


def seconds(settings: dict, runs: int, allocations: int, workers: int) -> float:
    cfg = dict(settings, SLURM_CONFIGS={"cpu": {"max_num_cores_per_node": workers,
                                                "time_in_mins": 120}})
    start = time.perf_counter()
    jobs = run_sweep(work, [{"i": i} for i in range(runs)], exp_name=f"b{uuid.uuid4().hex[:6]}",
                     mode="htp", config=cfg, allocations=allocations)
    submit_copied_batch(jobs)
    states = wait_all(jobs)
    others = [(j.id, j.info()) for j, s in zip(jobs, states, strict=True)
              if s is not JobState.SUCCEEDED]
    assert not others, (len(others), others[:2])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--allocations", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    k = args.allocations
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        settings = dict(LOCAL_LOG_DIR=f"{tmp}/logs", REGISTRY_PATH=f"{tmp}/registry.sqlite3",
                        LAUNCH_LINE=False, SLURM_PYTHON=sys.executable, SSS_SCRIPT_PATH=None,
                        SLURM_DIRECTORY_FOR_JOB_SCRIPT=f"{tmp}/cluster/batches",
                        SSS_LOG_DIR=f"{tmp}/cluster/logs", CODE_DIRS_TO_MOUNT=[])
        one, many = [], []
        for r in range(args.rounds):
            order = [(one, 1, k), (many, k, 1)]
            for times, allocations, workers in order if r % 2 == 0 else order[::-1]:
                times.append(seconds(settings, args.runs, allocations, workers))
    a, b = statistics.median(one), statistics.median(many)
    print(f"{args.runs} runs: 1 allocation x {k} workers {a:.2f} s; {k} allocations x 1 "
          f"worker {b:.2f} s: {b / a:.2f}x (goal <= 1.2x)")


if __name__ == "__main__":
    main()
