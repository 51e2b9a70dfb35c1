"""1000 runs of a 10 ms function on the local Slurm cluster, side by side (issue: Slurm speed).

Prints the time from launch to all results for submitit's ``map_array``, easylaunch's ``slurm``
job array, and easylaunch's ``htp`` packer (one allocation, N workers), and the ratios against
submitit. Goals: the array no slower than submitit; the packer at least 20x faster.

Needs a running cluster (scripts/slurm-up.sh) and submitit (pip install submitit).
Usage: python bench/bench_slurm.py [--runs N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from batches import submit_copied_batch

from easylaunch import run_sweep, wait_all


def work(doodad_config, variant):
    time.sleep(0.01)
    return variant["i"]


def work_plain(i):
    time.sleep(0.01)
    return i


def bench_submitit(folder: Path, n: int) -> float:
    import submitit

    executor = submitit.AutoExecutor(folder=folder)
    executor.update_parameters(timeout_min=60, cpus_per_task=1, slurm_array_parallelism=n)
    start = time.perf_counter()
    jobs = executor.map_array(work_plain, range(n))
    assert [j.result() for j in jobs] == list(range(n))
    return time.perf_counter() - start


def bench_easylaunch(mode: str, settings: dict, n: int) -> float:
    start = time.perf_counter()
    jobs = run_sweep(work, [{"i": i} for i in range(n)], exp_name=f"bench-{mode}", mode=mode,
                     config=settings)
    if mode == "htp":  # the cluster is this machine: "copy" is a no-op, then submit
        submit_copied_batch(jobs)
    states = wait_all(jobs)
    assert all(s.value == "succeeded" for s in states), states
    assert [j.result() for j in jobs] == list(range(n))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--easylaunch-first", action="store_true",
                        help="run easylaunch's array before submitit's (slurmctld keeps finished "
                             "jobs for MinJobAge, which may slow whichever array runs second)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        tmp = Path(tmp)
        settings = dict(
            LOCAL_LOG_DIR=str(tmp / "logs"), REGISTRY_PATH=str(tmp / "registry.sqlite3"),
            SLURM_PYTHON=sys.executable, SSS_SCRIPT_PATH=None, SSS_SUBMIT=False,
            SLURM_DIRECTORY_FOR_JOB_SCRIPT=str(tmp / "cluster/batches"),
            SSS_LOG_DIR=str(tmp / "cluster/logs"),
            SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=os.cpu_count(),
                                        time_in_mins=120)))
        results = {}
        if args.easylaunch_first:
            results["easylaunch slurm array"] = bench_easylaunch("slurm", settings, args.runs)
        results["submitit map_array"] = bench_submitit(tmp / "submitit", args.runs)
        if not args.easylaunch_first:
            results["easylaunch slurm array"] = bench_easylaunch("slurm", settings, args.runs)
        results["easylaunch htp packer"] = bench_easylaunch("htp", settings, args.runs)
        base = results["submitit map_array"]
        print(f"{args.runs} runs of a 10 ms function, launch to all results:")
        for name, seconds in results.items():
            print(f"  {name:24} {seconds:8.1f} s   {base / seconds:6.1f}x faster than submitit")
        print("goals: slurm array >= 1.0x, htp packer >= 20x")


if __name__ == "__main__":
    main()
