"""EC2 launch figures against moto's server on 127.0.0.1, each beside its baseline.

1. A 100-variant ec2 sweep: bytes of code snapshot uploaded against the snapshot's size (goal:
   1x, where uploading the code with every run would be 100x), and what the bundles add.
2. Launch time per variant of that sweep, beside one S3 PUT round trip to the same server.
3. The same sweep again: the snapshot is already in S3, so none of it is uploaded.

Usage: python bench/bench_ec2.py [--variants N] (needs moto[server] and boto3)
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer
from uploads import count_uploads

from easylaunch import run_sweep
from easylaunch_job.cloud.stores import S3Store

REPO = Path(__file__).resolve().parent.parent
REGION = "us-east-1"


def noop(doodad_config, variant):
    return None


def start_moto() -> tuple[ThreadedMotoServer, str]:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION=REGION, AWS_ENDPOINT_URL=url,
                      AWS_EC2_METADATA_DISABLED="true")
    return server, url


def settings(log_dir: str) -> dict:
    """A bucket, an instance profile and an image in moto, and settings that use them."""
    s3, ec2, iam = (boto3.client(s, region_name=REGION) for s in ("s3", "ec2", "iam"))
    s3.create_bucket(Bucket="easylaunch-bench")
    iam.create_instance_profile(InstanceProfileName="bench")
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    return {"LOCAL_LOG_DIR": log_dir, "CODE_DIRS_TO_MOUNT": [str(REPO / "easylaunch")],
            "REGISTRY_PATH": os.path.join(log_dir, "registry.sqlite3"),
            "AWS_S3_PATH": "s3://easylaunch-bench/exps", "AWS_REGION": REGION,
            "AWS_IMAGE_IDS": {REGION: image}, "AWS_IAM_INSTANCE_PROFILE": "bench"}


def sweep(cfg: dict, n: int, counts: Counter) -> tuple[float, Counter, list]:
    counts.clear()
    started = time.perf_counter()
    jobs = run_sweep(noop, [{"i": i} for i in range(n)], exp_name="bench", mode="ec2",
                     config=cfg, confirm=False)
    return (time.perf_counter() - started) / n, Counter(counts), jobs


def put_round_trip_ms() -> float:
    s3 = boto3.client("s3", region_name=REGION)
    samples = []
    for i in range(20):
        t = time.perf_counter()
        s3.put_object(Bucket="easylaunch-bench", Key=f"bench/{i}", Body=b"x" * 1024)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples) * 1000


def snapshot_sizes(cfg: dict, jobs: list) -> tuple[int, int]:
    """(bytes of the snapshot's files, bytes of its archive in S3)."""
    digest = jobs[0].launch_info["code_snapshots"][0]["digest"]
    folder = Path(cfg["LOCAL_LOG_DIR"]) / ".snapshots" / digest
    raw = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    head = boto3.client("s3", region_name=REGION).head_object(
        Bucket="easylaunch-bench", Key=f"exps/snapshots/{digest}.tar.gz")
    return raw, head["ContentLength"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=100)
    args = parser.parse_args()
    n = args.variants
    server, _ = start_moto()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = settings(tmp)
            counts = count_uploads(S3Store)
            per_variant, first, jobs = sweep(cfg, n, counts)
            raw, archive = snapshot_sizes(cfg, jobs)
            instances = len({j.launch_info["backend"]["instance_id"] for j in jobs})
            again, second, _ = sweep(cfg, n, counts)
            put_ms = put_round_trip_ms()
    finally:
        server.stop()
    print(f"ec2 sweep of {n} variants against moto ({instances} instances)")
    print(f"  code snapshot: {raw / 1024:.0f} KiB of files, {archive / 1024:.0f} KiB archived")
    print(f"  snapshot bytes uploaded:  {first['snapshots'] / 1024:8.0f} KiB  = "
          f"{first['snapshots'] / archive:.1f}x the archive   "
          f"(with every run: {n * archive / 1024:.0f} KiB = {n}x)")
    print(f"  bundle bytes uploaded:    {first['bundles'] / 1024:8.0f} KiB  "
          f"({first['bundles'] / n / 1024:.1f} KiB per run); manifest "
          f"{first['manifests'] / 1024:.0f} KiB, agent {first['agent'] / 1024:.0f} KiB")
    print(f"  same sweep again: snapshot bytes uploaded {second['snapshots']} "
          f"(bundles {second['bundles'] / 1024:.0f} KiB: new runs)")
    print(f"  launch time per variant:  {per_variant * 1000:6.1f} ms (first sweep), "
          f"{again * 1000:.1f} ms (again)   vs one 1 KiB S3 PUT to moto: {put_ms:.1f} ms")
    ok = first["snapshots"] == archive and second["snapshots"] == 0
    print("snapshot uploaded once: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
