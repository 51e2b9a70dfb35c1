"""Core speed figures, each measured side by side with its baseline in this one process.

1. here_no_doodad: added milliseconds per call over calling the function directly (goal <= 2 ms).
2. local: a no-op run from the call to job.result(), against a bare ``python -c pass``
   subprocess round trip (goal <= 2.5x); the process's first local run (which starts the warm
   Python the later ones fork from) on its own line.
3. A 100-variant local sweep: code snapshots made (goal: 1) and launch time per variant.

``--baseline DIR`` measures the same again with the easylaunch of DIR (a checkout of an earlier
commit: ``git worktree add /tmp/wave3 6d5900e``), right after, in this one run.

Usage: python bench/bench_core.py [--repeats N] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from easylaunch import run_experiment, run_sweep


def noop(doodad_config, variant):
    return None


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def bench_here(cfg: str, repeats: int) -> tuple[float, float]:
    run_experiment(noop, mode="here_no_doodad", config=cfg)  # first call: imports, git infos
    direct, launched = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        noop(None, {})
        direct.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_experiment(noop, mode="here_no_doodad", config=cfg)
        launched.append(time.perf_counter() - t)
    return _median_ms(direct), _median_ms(launched)


def bench_local(cfg: str, repeats: int) -> tuple[float, float, float]:
    t = time.perf_counter()
    run_experiment(noop, mode="local", config=cfg).result()  # warm up
    first = time.perf_counter() - t
    bare, launched = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
        t = time.perf_counter()
        run_experiment(noop, mode="local", config=cfg).result()
        launched.append(time.perf_counter() - t)
    return _median_ms(bare), _median_ms(launched), first * 1000


def bench_sweep(cfg: str, n: int) -> tuple[int, float, float]:
    t = time.perf_counter()
    jobs = run_sweep(noop, [{"i": i} for i in range(n)], exp_name="sweep", config=cfg)
    launch = time.perf_counter() - t
    for job in jobs:
        job.result()
    snapshots = len(os.listdir(Path(cfg).parent / ".snapshots"))
    return snapshots, launch * 1000 / n, time.perf_counter() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--sweep", type=int, default=100)
    parser.add_argument("--baseline", help="a checkout of earlier code, measured right after")
    args = parser.parse_args()
    code_dir = str(Path(__file__).resolve().parent.parent / "examples")
    with tempfile.TemporaryDirectory() as tmp:
        settings = Path(tmp) / "settings.py"  # (a file, as users keep their settings)
        settings.write_text(f"LOCAL_LOG_DIR = {tmp!r}\nCODE_DIRS_TO_MOUNT = [{code_dir!r}]\n"
                            f"REGISTRY_PATH = {tmp + '/registry.sqlite3'!r}\n"
                            "LAUNCH_LINE = False\n")
        cfg = str(settings)
        direct, here = bench_here(cfg, args.repeats)
        print(f"here_no_doodad  direct call {direct:8.3f} ms | run_experiment {here:8.3f} ms | "
              f"added {here - direct:6.3f} ms per call (goal <= 2 ms)")
        bare, local, first = bench_local(cfg, args.repeats)
        print(f"local no-op     python -c pass {bare:6.1f} ms | call->result {local:6.1f} ms | "
              f"ratio {local / bare:4.2f}x (goal <= 2.5x); first run {first:.1f} ms")
        snaps, per_variant, total = bench_sweep(cfg, args.sweep)
        print(f"local sweep     {args.sweep} variants: {snaps} code snapshot(s) (goal 1), "
              f"launch {per_variant:.2f} ms per variant, all results in {total:.1f} s")
    if args.baseline:
        print(f"baseline: {args.baseline}", flush=True)
        subprocess.run([sys.executable, __file__, "--repeats", str(args.repeats), "--sweep",
                        str(args.sweep)], check=True, stderr=subprocess.DEVNULL,
                       env=dict(os.environ, PYTHONPATH=args.baseline))


if __name__ == "__main__":
    main()
