"""A real Ray cluster (``ray start --head``), moto's S3 server and Azurite (Microsoft's Azure
Storage emulator) for the ray mode's tests and bench, inside a network namespace of their own
where only ``lo`` is up.

Ray does not stay on loopback by itself (it binds the machine's other addresses too), so the
cluster, the S3 server and every process that talks to them (the launching scripts, the
``easylaunch`` commands) run in the namespace; the run folders they write are on the shared
file system, where the tests read them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from easylaunch_job.cloud.platforms import ENV_WORKDIR

TESTS = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
DASHBOARD_PORT = 8265
S3_PORT = 5555
AZURITE_PORT = 10000
BUCKET = "ray-runs"  # the S3 bucket, and the Azure container
AZURITE = TESTS.parent / ".tools" / "azurite" / "node_modules" / "azurite" / "dist" / "src" / \
    "blob" / "main.js"  # (scripts/setup.sh installs it)
# Azurite's well-known development account (published by Microsoft: no secret)
AZURE_DEV = ("DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey="
             "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGM"
             "Gw==;BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;")
# made up here, so that a grep for them cannot find this file's own text in a code snapshot
KEYS = ("AKIA" + uuid.uuid4().hex[:16].upper(), "fake/" + uuid.uuid4().hex + uuid.uuid4().hex)


class RayCluster:
    """A one-node Ray cluster with an S3 bucket and an Azure Blob container (Azurite), in the
    network namespace ``ns``."""

    def __init__(self, ns: str, root: Path) -> None:
        self.ns = ns
        self.root = root
        self.address = f"http://127.0.0.1:{DASHBOARD_PORT}"
        self.servers: list[subprocess.Popen] = []
        self.env = dict(  # over this process's environment as it is at each call
            AWS_ACCESS_KEY_ID=KEYS[0], AWS_SECRET_ACCESS_KEY=KEYS[1],
            AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=f"http://127.0.0.1:{S3_PORT}",
            AZURE_STORAGE_CONNECTION_STRING=AZURE_DEV.format(port=AZURITE_PORT),
            PYTHONPATH=str(TESTS), RAY_ADDRESS=self.address, RAY_USAGE_STATS_ENABLED="0")

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run in the namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, *argv: str, timeout: float = 120, check: bool = True,
            env: dict | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` in the namespace with the cluster's environment; its output as text."""
        out = subprocess.run(self.argv(*argv), env=dict(os.environ, **self.env, **(env or {})),
                             text=True, capture_output=True, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError(f"{argv} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out

    def python(self, code: str, *args: str, timeout: float = 120, **kw) -> str:
        """Run Python ``code`` in the namespace (``args`` in sys.argv); its stdout."""
        return self.run(sys.executable, "-c", code, *args, timeout=timeout, **kw).stdout

    def easylaunch(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return self.run(str(VENV_BIN / "easylaunch"), *args, **kw)

    def start(self) -> None:
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        subprocess.run(self.argv("ip", "link", "set", "lo", "up"), check=True)
        for argv in ([str(VENV_BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(S3_PORT)],
                     ["node", str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort",
                      str(AZURITE_PORT), "--location", str(self.root / "azurite"),
                      "--disableTelemetry", "--skipApiVersionCheck"]):
            self.servers.append(subprocess.Popen(self.argv(*argv), stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL))
        self.run(str(VENV_BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1",
                 "--num-cpus=2", "--num-gpus=0", "--dashboard-host=127.0.0.1",
                 f"--dashboard-port={DASHBOARD_PORT}", "--disable-usage-stats",
                 f"--temp-dir={self.root / 'ray'}", timeout=180)
        self.python("import boto3, sys; boto3.client('s3').create_bucket(Bucket=sys.argv[1])",
                    BUCKET)
        self.python("import os, sys; from azure.storage.blob import BlobServiceClient as S; "
                    "S.from_connection_string(os.environ['AZURE_STORAGE_CONNECTION_STRING'])"
                    ".create_container(sys.argv[1])", BUCKET)

    def stop(self) -> None:
        """Stop the cluster, and any run its jobs left (they run in sessions of their own)."""
        self.run(str(VENV_BIN / "ray"), "stop", "--force", check=False, timeout=120)
        for pid in job_processes(f"{ENV_WORKDIR}={self.root}/"):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for server in self.servers:
            server.kill()
            server.wait()
        subprocess.run(["ip", "netns", "delete", self.ns], check=False)

    def listening(self) -> list[str]:
        """The local addresses of every TCP socket listening in the namespace."""
        out = self.run("ss", "-Hltn").stdout
        return [line.split()[3] for line in out.splitlines() if line.strip()]

    def config(self, log_dir: Path, **extra) -> dict:
        """Settings for launches onto this cluster."""
        return {"LOCAL_LOG_DIR": str(log_dir), "CODE_DIRS_TO_MOUNT": [str(TESTS)],
                "RAY_ADDRESS": self.address, "RAY_STORAGE_PATH": f"s3://{BUCKET}/exps",
                "RAY_PYTHON": sys.executable, "RAY_SYNC_INTERVAL_SECONDS": 1.0,
                "RAY_WORKDIR": str(self.root / "workers"), **extra}

    def jobs(self) -> dict[str, dict]:
        """The cluster's jobs by submission id, as its job API lists them."""
        code = ("import json; from ray.job_submission import JobSubmissionClient as C; "
                "print(json.dumps([j.dict() for j in C().list_jobs()], default=str))")
        return {j["submission_id"]: j for j in json.loads(self.python(code).splitlines()[-1])}

    def s3_keys(self, prefix: str = "") -> list[str]:
        code = ("import boto3, sys; p = boto3.client('s3').get_paginator('list_objects_v2'); "
                "print('\\n'.join(o['Key'] for page in p.paginate(Bucket=sys.argv[1], "
                "Prefix=sys.argv[2]) for o in page.get('Contents', [])))")
        return self.python(code, BUCKET, prefix).split()


def job_processes(mark: str) -> list[int]:
    """The processes whose environment holds a variable that starts with ``mark``
    (``EASYLAUNCH_RAY_JOB=<job>``: a Ray job's supervisor, agent and runs)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and any(v.startswith(mark.encode()) for v in (
                    proc / "environ").read_bytes().split(b"\0")):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def wait_until_up(cluster: RayCluster, timeout: float = 60) -> None:
    """Until the cluster's job API answers in the namespace."""
    code = (f"import urllib.request; urllib.request.urlopen("
            f"{cluster.address + '/api/version'!r}, timeout=2)")
    deadline = time.monotonic() + timeout
    while cluster.run(sys.executable, "-c", code, check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise AssertionError("the Ray cluster's job API did not answer")
        time.sleep(0.5)

