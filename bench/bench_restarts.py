"""Work lost per interruption, and how fast a run resumes, on the local Slurm cluster (issue:
checkpoint, requeue, resume).

A ``slurm`` run counts steps (50 ms each) and saves a checkpoint every K steps. It is
interrupted mid-count:

* with a stop notice (``scancel --full --signal=TERM``, as a preemption or the time-limit
  warning): the function saves at its next step, the job submits itself again and the run
  resumes from there in the new job;
* without one (SIGKILL of the function's process, as an out-of-memory kill): the job goes on,
  so the next attempt starts in it at once, from the last periodic checkpoint (up to K - 1
  steps are redone).

Steps redone = the last step of attempt 1 - the step attempt 2 resumed from (goal <= K).
Resume delay = from the interruption to the next attempt starting (its ``started_at``), side by
side with a fresh submission of the same job by hand (``easylaunch.resubmit``: from the call to
the new run starting), for each kind. Goal: resume / fresh <= 1.2x. slurmctld starts pending
jobs on a one-second tick, so each interruption and each fresh submission waits a random
fraction of a second first (else the phase of the tick decides the ratio), and the means are
compared.

Needs a running cluster (scripts/slurm-up.sh).
Usage: python bench/bench_restarts.py [--every K] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cloudpickle

import easylaunch
from easylaunch import checkpoint

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # travels as a script's own would


def count(doodad_config, variant):
    """Count steps for ever (until cancelled), checkpointing every ``every`` steps; log
    ``<attempt> <step>`` per step."""
    attempt = doodad_config.extra_launch_info["attempt"]
    state = checkpoint.load(default={"step": 0})
    with open(os.path.join(doodad_config.base_log_dir, "steps.log"), "a") as log:
        while True:
            time.sleep(0.05)
            state["step"] += 1
            log.write(f"{attempt} {state['step']}\n")
            log.flush()
            if state["step"] % variant["every"] == 0 or checkpoint.stop_requested():
                checkpoint.save(state)


def _steps(job) -> list[tuple[int, int]]:
    path = job.log_dir / "steps.log"
    lines = path.read_text().splitlines() if path.exists() else []
    return [tuple(map(int, line.split())) for line in lines if len(line.split()) == 2]


def _wait(predicate, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark's run did not get there in time")
        time.sleep(0.02)


def interrupt(settings: dict, every: int, hard: bool) -> tuple[int, float]:
    """(steps redone, seconds from the interruption to the next attempt starting)."""
    job = easylaunch.run_experiment(count, variant={"every": every}, mode="slurm",
                                    max_restarts=1, config=settings)
    try:
        _wait(lambda: len(_steps(job)) >= every * 2 + every // 2)
        time.sleep(random.random())  # a random phase of slurmctld's tick
        info = job.info()
        start = time.time()
        if hard:
            os.kill(info["pid"], signal.SIGKILL)
        else:
            subprocess.run(["scancel", "--full", "--signal=TERM", info["job_id"]], check=True)
        _wait(lambda: job.info().get("attempt") == 2 and job.info().get("state") == "running")
        resumed = job.info()["started_at"] - start
        _wait(lambda: any(a == 2 for a, _ in _steps(job)))
        steps = _steps(job)
        last = max(s for a, s in steps if a == 1)
        first = min(s for a, s in steps if a == 2)
        return last - (first - 1), resumed
    finally:
        job.cancel()
        job.wait(timeout=60)


def fresh(settings: dict, run_id: str) -> float:
    """Seconds from ``easylaunch.resubmit`` of a run to the new run starting."""
    time.sleep(random.random())  # a random phase of slurmctld's tick
    start = time.time()
    job = easylaunch.resubmit(run_id, config=settings)
    try:
        _wait(lambda: job.info().get("state") == "running")
        return job.info()["started_at"] - start
    finally:
        job.cancel()
        job.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=10, help="checkpoint every K steps")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        settings = dict(
            LOCAL_LOG_DIR=str(Path(tmp) / "logs"),
            REGISTRY_PATH=str(Path(tmp) / "registry.sqlite3"),
            SLURM_PYTHON=sys.executable, SLURM_CONFIGS=dict(cpu=dict(time_in_mins=30)))
        template = easylaunch.run_experiment(count, variant={"every": args.every},
                                             mode="slurm", config=settings)
        template.cancel()
        redone: dict[str, list[int]] = {"notice": [], "kill": []}
        delays: dict[str, list[float]] = {"notice": [], "kill": [], "fresh": []}
        for round_ in range(args.rounds):
            for how in ("notice", "kill") if round_ % 2 == 0 else ("kill", "notice"):
                steps, seconds = interrupt(settings, args.every, hard=how == "kill")
                redone[how].append(steps)
                delays[how].append(seconds)
                delays["fresh"].append(fresh(settings, template.id))
                print(f"  round {round_ + 1} {how:6}: {steps:2} steps redone, resumed in "
                      f"{seconds:.2f} s; fresh submission started in "
                      f"{delays['fresh'][-1]:.2f} s", flush=True)
    print(f"checkpoint every {args.every} steps ({args.rounds} interruptions of each kind):")
    print(f"  steps redone after a stop notice: max {max(redone['notice'])} "
          f"(goal <= {args.every})")
    print(f"  steps redone after SIGKILL:       max {max(redone['kill'])} "
          f"(goal <= {args.every})")
    fresh_ = statistics.mean(delays["fresh"])
    print(f"  fresh submission -> started: mean {fresh_:.2f} s")
    for how, words in (("notice", "stop notice -> resumed in a new job"),
                       ("kill", "SIGKILL -> resumed in the same job")):
        mean = statistics.mean(delays[how])
        print(f"  {words}: mean {mean:.2f} s, {mean / fresh_:.2f}x fresh (goal <= 1.2x)")
    both = statistics.mean(delays["notice"] + delays["kill"])
    print(f"  any interruption -> resumed: mean {both:.2f} s, {both / fresh_:.2f}x fresh")


if __name__ == "__main__":
    main()
