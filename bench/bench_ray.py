"""mode="ray" against Ray's own JobSubmissionClient, side by side on one real Ray cluster.

A sweep of N runs of a 10 ms function, from launch to every result back on the launching side:

* easylaunch: ``run_sweep(fn, variants, mode="ray")``, then ``job.result()`` for each run (the
  run folders come back through the storage path, moto's S3 here); and the same with
  ``num_exps_per_instance=10`` (10 runs a job, side by side);
* by hand: the loop a user writes with Ray's client: the function pickled once into a
  ``working_dir`` (Ray uploads it once), one ``submit_job`` per variant whose entrypoint loads
  and calls it and prints the result, a ``list_jobs`` poll until all ended, and
  ``get_job_logs`` for each result. Both ask for 1 CPU a job.

The cluster (2 CPUs), the S3 server and both sides run in a network namespace of their own
(tests/ray_cluster.py). Rounds alternate the two sides; medians are printed with their ratio.

Usage: python bench/bench_ray.py [--runs N] [--rounds R]   (as root: it makes the namespace)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from ray_cluster import RayCluster, wait_until_up  # noqa: E402 - the tests' cluster

SIDES = r"""
import json, os, re, sys, tempfile, time
import cloudpickle
from ray.job_submission import JobSubmissionClient

def work(doodad_config, variant):
    time.sleep(0.01)
    return variant["i"] * 2

side, n, cfg = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
start = time.perf_counter()
if side.startswith("easylaunch"):
    from easylaunch import run_sweep
    per_job = 10 if side.endswith("packed") else 1
    jobs = run_sweep(work, [{"i": i} for i in range(n)], exp_name="bench-ray", mode="ray",
                     config=cfg, num_exps_per_instance=per_job)
    results = [job.result(timeout=900) for job in jobs]
else:
    client = JobSubmissionClient(cfg["RAY_ADDRESS"])
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "fn.pkl"), "wb") as f:
        cloudpickle.dump(work, f)
    call = ("import cloudpickle, sys; fn = cloudpickle.load(open('fn.pkl', 'rb')); "
            "print('RESULT', fn(None, {'i': int(sys.argv[1])}))")
    ids = [client.submit_job(entrypoint=f"{sys.executable} -c \"{call}\" {i}",
                             runtime_env={"working_dir": folder}, entrypoint_num_cpus=1)
           for i in range(n)]
    wanted = set(ids)
    while True:
        states = {j.submission_id: j.status for j in client.list_jobs()
                  if j.submission_id in wanted}
        if all(s.is_terminal() for s in states.values()) and len(states) == n:
            break
        time.sleep(0.5)
    logs = {i: client.get_job_logs(i) for i in ids}
    found = {i: re.search(r"^RESULT (-?[0-9]+)$", text, re.M) for i, text in logs.items()}
    failed = [i for i, m in found.items() if m is None]
    assert not failed, f"{len(failed)} job(s) printed no result; {failed[0]}: " + \
        logs[failed[0]][-3000:]
    results = [int(found[i].group(1)) for i in ids]
assert results == [2 * i for i in range(n)], results
print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    cluster = RayCluster(f"el-bench-ray-{os.getpid()}", root)
    os.environ["HOME"] = str(root / "home")  # its own registry
    sides = ("easylaunch", "by hand", "easylaunch packed")
    times: dict[str, list[float]] = {side: [] for side in sides}
    try:
        cluster.start()
        wait_until_up(cluster)
        cfg = json.dumps(cluster.config(root / "logs", RAY_SYNC_INTERVAL_SECONDS=10.0))
        for rnd in range(args.rounds):
            for side in sides if rnd % 2 == 0 else reversed(sides):
                out = cluster.python(SIDES, side, str(args.runs), cfg, timeout=1800)
                seconds = json.loads(out.splitlines()[-1])["seconds"]
                times[side].append(seconds)
                print(f"round {rnd + 1}: {side:17s} {seconds:7.1f} s", flush=True)
    finally:
        cluster.stop()
    ours, theirs, packed = (statistics.median(times[s]) for s in sides)
    print(f"{args.runs} runs of a 10 ms function on a 2-CPU Ray cluster, launch to every result "
          f"(medians of {args.rounds}): easylaunch {ours:.1f} s ({ours / args.runs:.2f} s a run),"
          f" JobSubmissionClient by hand {theirs:.1f} s: {ours / theirs:.2f}x; easylaunch with "
          f"10 runs a job {packed:.1f} s: {packed / theirs:.2f}x")


if __name__ == "__main__":
    main()
