"""Azure VM launch figures against Azurite and the Resource Manager stand-in of the tests.

1. A 100-run azure sweep with num_exps_per_instance=10: VMs started (goal: 10), bytes uploaded
   per run beside the run's own bundle, and launch to every result back in the local run
   folders (the VMs are played on this machine, 10 runs of a 10 ms function each).
2. The same sweep again with unchanged code: bytes uploaded against the bundles alone (goal:
   <= 1.2x; the code snapshot and the agent are in the container already).

Usage: python bench/bench_azure.py [--runs N] [--per-vm K] (needs the azure extra, and Azurite
from scripts/setup.sh)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import azure_stubs  # noqa: E402
from azure.storage.blob import BlobServiceClient  # noqa: E402
from uploads import count_uploads  # noqa: E402

from easylaunch import run_sweep  # noqa: E402
from easylaunch_job.cloud.stores import AzureBlobStore  # noqa: E402


def ten_ms(doodad_config, variant):
    time.sleep(0.01)
    return variant["i"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--per-vm", type=int, default=10)
    args = parser.parse_args()
    secret = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp, \
            azure_stubs.stand_ins(Path(tmp), secret) as (arm, account):
        BlobServiceClient.from_connection_string(
            azure_stubs.connection_string(account)).create_container("bench")
        cfg = {"LOCAL_LOG_DIR": str(Path(tmp) / "logs"),
               "CODE_DIRS_TO_MOUNT": [str(REPO / "easylaunch")],
               "AZ_SUB_ID": azure_stubs.SUBSCRIPTION, "AZ_TENANT_ID": azure_stubs.TENANT,
               "AZ_CLIENT_ID": azure_stubs.CLIENT_ID, "AZ_SECRET": secret,
               "AZ_CONTAINER": "bench", "AZ_CONN_STR": azure_stubs.connection_string(account),
               "DEFAULT_AZURE_REGION": azure_stubs.LOCATION,
               "AZURE_RESOURCE_GROUP": azure_stubs.RESOURCE_GROUP,
               "AZURE_IDENTITY": azure_stubs.IDENTITY, "AZURE_SUBNET_ID": azure_stubs.SUBNET,
               "AZURE_PIP_REQUIREMENTS": [], "AZURE_PYTHON": sys.executable,
               "AZURE_SYNC_INTERVAL_SECONDS": 1.0}
        counts = count_uploads(AzureBlobStore)
        variants = [{"i": i} for i in range(args.runs)]
        started = time.perf_counter()
        jobs = run_sweep(ten_ms, variants, exp_name="bench", mode="azure", config=cfg,
                         num_exps_per_instance=args.per_vm, confirm=False)
        launched = time.perf_counter() - started
        first = Counter(counts)
        results = [job.result(timeout=600) for job in jobs]
        done = time.perf_counter() - started
        assert results == list(range(args.runs))
        vms = len({job.launch_info["backend"]["instance_id"] for job in jobs})
        counts.clear()
        run_sweep(ten_ms, variants, exp_name="bench", mode="azure", config=cfg,
                  num_exps_per_instance=args.per_vm, confirm=False)
        second = Counter(counts)
    n = args.runs
    print(f"azure sweep of {n} runs, {args.per_vm} a VM (Azurite + the Resource Manager "
          "stand-in; VMs played here)")
    print(f"  VMs started: {vms} (goal {-(-n // args.per_vm)})")
    print(f"  launch: {launched:.2f} s ({launched / n * 1000:.1f} ms a run); launch to every "
          f"result back: {done:.1f} s")
    print(f"  first sweep uploaded {sum(first.values()) / 1024:.0f} KiB: "
          + ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sorted(first.items()))
          + f"; {sum(first.values()) / n / 1024:.1f} KiB a run, bundles "
          f"{first['bundles'] / n / 1024:.1f} KiB a run")
    ratio = sum(second.values()) / second["bundles"]
    print(f"  unchanged code, second sweep: {sum(second.values()) / 1024:.0f} KiB uploaded vs "
          f"{second['bundles'] / 1024:.0f} KiB of bundles alone: {ratio:.2f}x (goal <= 1.2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
