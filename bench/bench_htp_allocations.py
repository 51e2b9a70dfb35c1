"""``htp`` over several allocations against one allocation of the same total workers, side
by side (issue: past one node): N runs of a 10 ms function, launch to every run's recorded
end, alternating which goes first (goal: K allocations <= 1.2x one); the packer's own cost,
from its first task's start to its last task's end against the ideal n x t / workers (goal <=
2x at 300 runs: ``--runs 300 --no-hyperqueue``); and, as the outside reference for packing
tasks, HyperQueue's local cluster (PyPI ``hyperqueue``: its server and one worker of the same
cores) running the same function as N Python function tasks.

Needs the local cluster (scripts/slurm-up.sh) and, for the reference, ``pip install
hyperqueue``. Usage: python bench/bench_htp_allocations.py [--runs 2000] [--allocations 2]
[--rounds 2] [--no-hyperqueue]; the workers in all are --allocations (one per allocation,
against one allocation of that many).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from batches import submit_copied_batch

from easylaunch import JobState, run_sweep, wait_all


def work(doodad_config, variant):
    time.sleep(0.01)
    return variant["i"]


def packer_span(jobs: list) -> float:
    """Seconds from the first task's start to the last task's end, by the packers' records."""
    records = [json.loads(p.read_text()) for p in Path(
        jobs[0].launch_info["backend"]["cluster_batch_dir"], "task-state").glob("task-*.json")]
    return max(r["ended"] for r in records) - min(r["started"] for r in records)


def seconds(settings: dict, runs: int, allocations: int, workers: int) -> tuple[float, float]:
    """Launch to every recorded end, and the packers' span."""
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
    return time.perf_counter() - start, packer_span(jobs)


def work_plain(i: int) -> int:
    time.sleep(0.01)
    return i


def hyperqueue_seconds(runs: int, cores: int) -> float:
    """N function tasks on HyperQueue's local cluster with one worker of ``cores`` cores."""
    from hyperqueue import Job
    from hyperqueue.cluster import LocalCluster, WorkerConfig

    # its tasks start "python" from PATH: this one, which has hyperqueue
    os.environ["PATH"] = f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(server_dir=tmp) as cluster:
        cluster.start_worker(WorkerConfig(cores=cores))
        client = cluster.client()
        start = time.perf_counter()
        job = Job(f"{tmp}/work")
        for i in range(runs):
            job.function(work_plain, args=(i,), stdout=None, stderr=None)
        client.wait_for_jobs([client.submit(job)])
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--allocations", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-hyperqueue", action="store_true")
    args = parser.parse_args()
    k = args.allocations
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        settings = dict(LOCAL_LOG_DIR=f"{tmp}/logs", REGISTRY_PATH=f"{tmp}/registry.sqlite3",
                        LAUNCH_LINE=False, SLURM_PYTHON=sys.executable, SSS_SCRIPT_PATH=None,
                        SSS_SUBMIT=False,
                        SLURM_DIRECTORY_FOR_JOB_SCRIPT=f"{tmp}/cluster/batches",
                        SSS_LOG_DIR=f"{tmp}/cluster/logs", CODE_DIRS_TO_MOUNT=[])
        one, many = [], []
        for r in range(args.rounds):
            order = [(one, 1, k), (many, k, 1)]
            for times, allocations, workers in order if r % 2 == 0 else order[::-1]:
                times.append(seconds(settings, args.runs, allocations, workers))
    a, b = (statistics.median(t for t, _ in times) for times in (one, many))
    print(f"{args.runs} runs: 1 allocation x {k} workers {a:.2f} s; {k} allocations x 1 "
          f"worker {b:.2f} s: {b / a:.2f}x (goal <= 1.2x)")
    ideal = args.runs * 0.01 / k
    for name, times in ((f"1 allocation x {k} workers", one), (f"{k} allocations", many)):
        span = statistics.median(s for _, s in times)
        print(f"  the packers' own time, {name}: first task's start to last task's end "
              f"{span:.2f} s vs the ideal n x t / workers {ideal:.2f} s: {span / ideal:.2f}x "
              f"({(span - ideal) * k / args.runs * 1000:.1f} ms a run over it; goal <= 2x)")
    if not args.no_hyperqueue:
        hq = hyperqueue_seconds(args.runs, k)
        print(f"HyperQueue's local cluster, {args.runs} Python function tasks on one worker of "
              f"{k} cores: {hq:.2f} s; htp is {hq / min(a, b):.1f}x faster")


if __name__ == "__main__":
    main()
