"""Launching onto a cluster over SSH, side by side with the same cluster reached locally.

Needs the test services (scripts/slurm-up.sh, scripts/ssh-up.sh: sshd on 127.0.0.1 with the user
easyremote as the cluster side) and, for the last figure, submitit (pip install submitit).

Prints:
1. a 100-variant ``slurm`` sweep over SSH: ssh connections sshd accepted for the launch and for a
   later ``easylaunch ls`` (goal: 1 each), bytes copied vs snapshot + one function + the
   variants (goal <= 1.2x), and snapshot bytes a repeat sweep copies (goal 0);
2. launch time per variant over SSH vs local sbatch (goal <= 1.5x), from a cold connection and
   over an open one, and one status poll of the 100 runs over SSH vs a local poll (goal <= 2x);
3. launch to all results back here for N runs of a 10 ms function packed with ``htp`` over SSH
   across allocations, vs submitit's ``map_array`` run on the cluster side itself at the sizes
   that fit a bench run, its time extrapolated linearly to N (goal >= 50x at N = 10,000).

Usage: python bench/bench_remote.py [--runs N] [--allocations K] [--submitit-runs 100,200]
[--warm-rounds 5]
"""

from __future__ import annotations

import argparse
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import cloudpickle
from bench_slurm import bench_submitit, work

from easylaunch import run_sweep, wait_all
from easylaunch.modes.hosts.ssh import SshTransport

REPO = Path(__file__).resolve().parent.parent
SSH_CONFIG = REPO / ".test-ssh" / "config"
SSHD_LOG = Path("/var/lib/easylaunch-test-sshd/sshd.log")
HOME_THERE = Path(pwd.getpwnam("easyremote").pw_dir)


def logins() -> int:
    """Connections sshd has accepted so far (a multiplexed session is not one)."""
    return SSHD_LOG.read_text().count("Accepted publickey")


def close_master() -> None:
    transport = SshTransport("test", "easylaunch-test-cluster", None, "python3", "~",
                             str(SSH_CONFIG))
    subprocess.run(["ssh", *transport.ssh_options(), "-O", "exit", "easylaunch-test-cluster"],
                   capture_output=True)


class Uploads:
    """What every upload to the far side copied (items and bytes)."""

    def __init__(self) -> None:
        from easylaunch.modes.hosts import staging

        self.calls: list = []
        upload = staging.upload

        def spy(*args, **kwargs):
            self.calls.append(upload(*args, **kwargs))
            return self.calls[-1]

        staging.upload = spy


def size_of(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() \
        else path.stat().st_size


def settings(tmp: Path, remote: bool) -> dict:
    tag = uuid.uuid4().hex[:8]
    base = dict(LOCAL_LOG_DIR=str(tmp / f"logs-{tag}"), REGISTRY_PATH=str(tmp / "reg.sqlite3"),
                CODE_DIRS_TO_MOUNT=[str(REPO / "easylaunch")], SSS_SCRIPT_PATH=None,
                SLURM_SIGNAL_SECONDS=30, SLURM_CONFIGS=dict(cpu=dict(
                    max_num_cores_per_node=os.cpu_count(), time_in_mins=120)))
    if not remote:
        return dict(base, SLURM_PYTHON=sys.executable)
    return dict(base, DEFAULT_CLUSTER="test", SSS_LOG_DIR=f"{HOME_THERE}/bench/{tag}",
                CLUSTERS={"test": {"host": "easylaunch-test-cluster",
                                   "log_dir": f"~/bench/{tag}", "python": "~/venv/bin/python",
                                   "ssh_config": str(SSH_CONFIG)}})


def sweep_figures(tmp: Path, pushes: Uploads) -> None:
    remote = settings(tmp, remote=True)
    close_master()
    before = logins()
    start = time.perf_counter()
    jobs = run_sweep(work, [{"i": i} for i in range(100)], mode="slurm", config=remote,
                     exp_name="bench", array_parallelism=1)
    launch_ssh = time.perf_counter() - start
    launch_logins = logins() - before
    rels, sent = pushes.calls[-1].items, pushes.calls[-1].bytes
    root = Path(remote["LOCAL_LOG_DIR"])
    payload = sum(size_of(root / r) for r in rels if r.startswith(".snapshots/")) + \
        size_of(next(root.glob(".blobs/*.function.pkl"))) + \
        sum(size_of(j.log_dir / "bundle" / "variant.pkl") for j in jobs)
    start = time.perf_counter()
    jobs[0].mode.refresh_many(jobs)
    poll_ssh = time.perf_counter() - start
    close_master()
    before = logins()
    listing = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config",
                              write_config(tmp / "remote.py", remote), "ls", "--all"],
                             capture_output=True, text=True, check=True)
    ls_logins = logins() - before
    assert listing.stdout.count("bench") >= 100
    subprocess.run(["scancel", "-u", "easyremote"], check=True)
    run_sweep(work, [{"i": 0}], mode="slurm", config=remote, exp_name="bench")
    again = sum(size_of(root / r) for r in pushes.calls[-1].items if r.startswith(".snapshots/"))
    subprocess.run(["scancel", "-u", "easyremote"], check=True)

    local = settings(tmp, remote=False)
    start = time.perf_counter()
    jobs = run_sweep(work, [{"i": i} for i in range(100)], mode="slurm", config=local,
                     exp_name="bench", array_parallelism=1)
    launch_local = time.perf_counter() - start
    start = time.perf_counter()
    jobs[0].mode.refresh_many(jobs)
    poll_local = time.perf_counter() - start
    subprocess.run(["scancel", "-u", "root"], check=True)

    print("1. a 100-variant slurm sweep over SSH")
    print(f"   ssh connections: launch {launch_logins}, a later `easylaunch ls` {ls_logins}  "
          "(goal 1 each)")
    print(f"   bytes copied {sent:,} vs snapshot + function + variants {payload:,}: "
          f"{sent / payload:.2f}x (goal <= 1.2x)")
    print(f"   a repeat sweep with the same code copied {again} snapshot bytes (goal 0)")
    print("2. over SSH vs local sbatch on the same cluster")
    print(f"   launch per variant: {launch_ssh * 10:.1f} ms vs {launch_local * 10:.1f} ms: "
          f"{launch_ssh / launch_local:.2f}x (goal <= 1.5x)")
    print(f"   one status poll of 100 runs: {poll_ssh * 1000:.0f} ms vs "
          f"{poll_local * 1000:.0f} ms: {poll_ssh / poll_local:.2f}x (goal <= 2x)")


def warm_launches(tmp: Path, rounds: int) -> None:
    """Launch per variant over an open connection (a later launch of the same process, or
    within ControlPersist of an earlier command) vs local sbatch, alternating; medians."""
    remote, local = settings(tmp, remote=True), settings(tmp, remote=False)

    def launch(config: dict) -> float:
        start = time.perf_counter()
        run_sweep(work, [{"i": i} for i in range(100)], mode="slurm", config=config,
                  exp_name="bench", array_parallelism=1)
        return time.perf_counter() - start

    launch(remote), launch(local)  # (the code snapshot made and sent once)
    ssh, here = [], []
    for _ in range(rounds):
        ssh.append(launch(remote))
        here.append(launch(local))
    subprocess.run(["scancel", "-u", "easyremote"], check=True)
    subprocess.run(["scancel", "-u", "root"], check=True)
    a, b = statistics.median(ssh), statistics.median(here)
    print(f"   launch per variant, the connection already open: {a * 10:.1f} ms vs "
          f"{b * 10:.1f} ms: {a / b:.2f}x (goal <= 1.5x; medians of {rounds})")


def write_config(path: Path, values: dict) -> str:
    path.write_text("".join(f"{k} = {v!r}\n" for k, v in values.items()))
    return str(path)


def laptop_first(tmp: Path, runs: int, allocations: int, submitit_sizes: list[int]) -> None:
    remote = settings(tmp, remote=True)
    start = time.perf_counter()
    jobs = run_sweep(work, [{"i": i} for i in range(runs)], mode="htp", config=remote,
                     exp_name="bench-htp", allocations=allocations)
    assert all(s.value == "succeeded" for s in wait_all(jobs))
    assert [j.result() for j in jobs] == list(range(runs))
    assert all((j.log_dir / "result.pkl").exists() for j in jobs)
    ours = time.perf_counter() - start
    print(f"3. {runs} runs of a 10 ms function, launch to all results here")
    print(f"   easylaunch htp over SSH, {allocations} allocation(s): {ours:.1f} s "
          f"({ours / runs * 1000:.1f} ms a run)", flush=True)
    if not submitit_sizes:
        return
    theirs = {n: bench_submitit(tmp / f"submitit-{n}", n) for n in submitit_sizes}
    for n, seconds in theirs.items():
        print(f"   submitit map_array on the cluster, {n} runs: {seconds:.1f} s "
              f"({seconds / n:.2f} s a run)")
    # least squares through the origin: submitit's time grows with N at this many seconds a run
    per_run = sum(n * t for n, t in theirs.items()) / sum(n * n for n in theirs)
    if runs in theirs:
        print(f"   measured at {runs}: {theirs[runs] / ours:.1f}x faster")
    else:
        print(f"   submitit at {runs} runs, at {per_run:.2f} s a run (linear in N above): "
              f"~{per_run * runs:.0f} s; easylaunch {per_run * runs / ours:.0f}x faster "
              "(goal >= 50x)")


# bench_slurm's functions travel by value, as a script's own would: the cluster side cannot
# import this folder
cloudpickle.register_pickle_by_value(sys.modules["bench_slurm"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--allocations", type=int, default=2,
                        help="htp allocations for figure 3 (default 2)")
    parser.add_argument("--submitit-runs", default="100,200",
                        help="sizes submitit runs for figure 3, comma-separated (its time grows "
                             "linearly: ~1.3 s a run here); empty: none")
    parser.add_argument("--warm-rounds", type=int, default=5,
                        help="launches over an open connection vs local (default 5)")
    args = parser.parse_args()
    pushes = Uploads()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HOME"] = tmp  # the registry and settings of this bench only
        sweep_figures(Path(tmp), pushes)
        warm_launches(Path(tmp), args.warm_rounds)
        if args.runs:
            laptop_first(Path(tmp), args.runs, args.allocations,
                         [int(n) for n in args.submitit_runs.split(",") if n])


if __name__ == "__main__":
    main()
