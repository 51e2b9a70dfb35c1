"""Resume of a 1,000-variant sweep with 10 failures (goal: launches 10 runs, <= 2 s), against a
plain ``run_sweep`` of 10 variants measured in the same process (local mode).

The sweep is made first and waited for (not timed): its function fails when ``i % 100 == 7``.
Then ``run_sweep(..., resume=True)`` of the same 1,000 variants is timed to its return (the
runs launched, not their ends), as is the plain launch of 10 new variants.
Usage: python bench/bench_resume.py [--variants N] [--repeats N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from easylaunch import run_sweep, wait_all


def train(doodad_config, variant):
    if variant["i"] % 100 == 7:
        raise ValueError(f"variant {variant['i']} fails")
    return variant["i"]


def timed(call) -> tuple[float, list]:
    start = time.perf_counter()
    jobs = call()
    return time.perf_counter() - start, jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = {"LOCAL_LOG_DIR": str(Path(tmp) / "logs"), "CODE_DIRS_TO_MOUNT": [],
                  "REGISTRY_PATH": str(Path(tmp) / "registry.sqlite3"), "LAUNCH_LINE": False}
        cpus = os.cpu_count() or 1
        variants = [{"i": i} for i in range(args.variants)]
        start = time.perf_counter()
        first = run_sweep(train, variants, exp_name="resume-bench", config=config,
                          max_parallel=cpus)
        wait_all(first)
        made = time.perf_counter() - start
        failed = sum(job.status().value == "failed" for job in first)
        print(f"sweep of {len(first)} variants made in {made:.0f} s ({failed} failed; "
              f"max_parallel={cpus}; not timed)")
        known = {job.id for job in first}
        resumes, plains = [], []
        for repeat in range(args.repeats):
            seconds, jobs = timed(lambda: run_sweep(
                train, variants, exp_name="resume-bench", config=config, max_parallel=cpus,
                resume=True))
            launched = [job for job in jobs if job.id not in known]
            resumes.append(seconds)
            print(f"  resume {repeat + 1}: {len(launched)} runs launched of {len(jobs)} "
                  f"variants in {seconds:.3f} s")
            wait_all(launched)
            known |= {job.id for job in launched}
            seconds, jobs = timed(lambda: run_sweep(
                train, [{"i": -1 - n} for n in range(failed)], exp_name="resume-plain",
                config=config, max_parallel=cpus))
            plains.append(seconds)
            wait_all(jobs)
        resume, plain = statistics.median(resumes), statistics.median(plains)
        print(f"resume of {args.variants} variants ({failed} to launch): {resume:.3f} s "
              f"(goal <= 2 s) | plain run_sweep of {failed} variants: {plain:.3f} s | "
              f"ratio {resume / plain:.2f}x (median of {args.repeats})")


if __name__ == "__main__":
    main()
