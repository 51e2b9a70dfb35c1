"""A sweep of a 10 ms function through ``pbs`` (on Slurm's PBS front ends) vs the same through
``slurm``, side by side on the local cluster (issue: PBS Pro mode).

Both submit one job array to the same Slurm underneath, so the ratio is what the PBS path
(qsub, its job script, qstat tracking) adds of its own. Goal: pbs / slurm <= 1.1x. Rounds
alternate which mode goes first (slurmctld keeps finished jobs for MinJobAge, which may slow
whichever array runs second).

Needs a running cluster with the front ends (scripts/slurm-up.sh).
Usage: python bench/bench_pbs.py [--runs N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import cloudpickle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_slurm import bench_easylaunch  # noqa: E402 - the Slurm benchmark's own run

# bench_slurm's function travels by value, as a script's own would (no code folder is mounted)
cloudpickle.register_pickle_by_value(sys.modules["bench_slurm"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        settings = dict(
            LOCAL_LOG_DIR=str(Path(tmp) / "logs"),
            REGISTRY_PATH=str(Path(tmp) / "registry.sqlite3"),
            SLURM_PYTHON=sys.executable, PBS_PYTHON=sys.executable,
            SLURM_CONFIGS=dict(cpu=dict(time_in_mins=120)),
            PBS_CONFIGS=dict(cpu=dict(select=1, ncpus=1, walltime=120)))
        seconds: dict[str, list[float]] = {"pbs": [], "slurm": []}
        for round_ in range(args.rounds):
            for mode in ("pbs", "slurm") if round_ % 2 == 0 else ("slurm", "pbs"):
                seconds[mode].append(bench_easylaunch(mode, settings, args.runs))
                print(f"  round {round_ + 1}: {mode:5} {seconds[mode][-1]:6.1f} s", flush=True)
    print(f"{args.runs} runs of a 10 ms function, launch to all results "
          f"({args.rounds} rounds):")
    for mode, times in seconds.items():
        print(f"  {mode:5} {sum(times) / len(times):6.1f} s on average")
    print(f"  pbs / slurm: {sum(seconds['pbs']) / sum(seconds['slurm']):.2f}x "
          "(goal <= 1.1x)")


if __name__ == "__main__":
    main()
