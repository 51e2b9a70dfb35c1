"""Azure ML launch figures against Azurite and the tests' Azure ML workspace stand-in.

A 100-run aml sweep of a function whose variants are hyperparameter dicts of 20 keys, launched
twice with unchanged code: bytes uploaded by the second launch against the pickled variants
alone (goal: <= 1.2x; the code snapshot, the pickled function and the job side are in the
datastore already), and launch time per run (the jobs are created through azure-ai-ml against
the stand-in, which accepts them without playing them: the figure is the launch's own).

Usage: python bench/bench_aml.py [--runs N] (needs the aml extra, and Azurite from
scripts/setup.sh)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import cloudpickle

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import aml_stubs  # noqa: E402
import azure_stubs  # noqa: E402
from azure.storage.blob import BlobServiceClient  # noqa: E402
from uploads import count_uploads  # noqa: E402

from easylaunch import run_sweep  # noqa: E402
from easylaunch_job.cloud.stores import AzureBlobStore  # noqa: E402


def train(doodad_config, variant):
    return variant["seed"]


def variant(i: int) -> dict:
    """A sweep point as researchers write them: 20 hyperparameters."""
    return {"seed": i, "lr": 3e-4 * (1 + i % 5), "batch_size": 64 * (1 + i % 3),
            "env_name": "HalfCheetah-v4", "algo": "sac", "gamma": 0.99, "tau": 0.005,
            "hidden_sizes": [256, 256], "num_epochs": 1000, "replay_size": 1_000_000,
            "target_entropy": "auto", "reward_scale": 1.0 + i % 4, "policy_lr": 3e-4,
            "qf_lr": 3e-4, "eval_every": 10, "save_every": 100, "use_automatic_entropy": True,
            "layer_norm": bool(i % 2), "dropout": 0.0, "notes": f"sweep point {i}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    variants = [variant(i) for i in range(args.runs)]
    pickled = sum(len(cloudpickle.dumps(v)) for v in variants)
    secret = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp, \
            azure_stubs.stand_ins(Path(tmp), secret) as (arm, account):
        BlobServiceClient.from_connection_string(
            azure_stubs.connection_string(account)).create_container("azureml")
        workspace = aml_stubs.AmlWorkspace(arm, account, "azureml")
        workspace.autostart = False
        cfg = {"LOCAL_LOG_DIR": str(Path(tmp) / "logs"),
               "CODE_DIRS_TO_MOUNT": [str(REPO / "easylaunch")],
               "AML_SUBSCRIPTION_ID": azure_stubs.SUBSCRIPTION,
               "AML_RESOURCE_GROUP": azure_stubs.RESOURCE_GROUP,
               "AML_WORKSPACE": aml_stubs.WORKSPACE, "AML_COMPUTE": "cpu-cluster",
               "AML_IMAGE": "python:3.11", "AML_STORAGE_ACCOUNT_URL": account,
               "AZ_TENANT_ID": azure_stubs.TENANT, "AZ_CLIENT_ID": azure_stubs.CLIENT_ID,
               "AZ_SECRET": secret, "AZ_CONN_STR": azure_stubs.connection_string(account)}
        counts = count_uploads(AzureBlobStore)
        times, uploads = [], []
        for _ in range(2):
            counts.clear()
            started = time.perf_counter()
            run_sweep(train, variants, exp_name="bench", mode="aml", config=cfg)
            times.append(time.perf_counter() - started)
            uploads.append(Counter(counts))
        jobs = len(workspace.jobs)
    n = args.runs
    print(f"aml sweep of {n} runs (20-key variants, {pickled / n:.0f} bytes a run pickled), "
          f"launched twice with unchanged code ({jobs} jobs created in the stand-in)")
    for i, (took, sent) in enumerate(zip(times, uploads, strict=True), start=1):
        print(f"  launch {i}: {took:.2f} s ({took / n * 1000:.1f} ms a run); uploaded "
              f"{sum(sent.values()) / 1024:.1f} KiB: "
              + ", ".join(f"{k} {v / 1024:.1f} KiB" for k, v in sorted(sent.items())))
    ratio = sum(uploads[1].values()) / pickled
    print(f"  second launch: {sum(uploads[1].values()) / 1024:.1f} KiB uploaded vs "
          f"{pickled / 1024:.1f} KiB of pickled variants: {ratio:.2f}x (goal <= 1.2x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
