"""Stand-ins for what an EC2 instance has, and functions the EC2 tests launch.

``ImdsStub`` answers the few metadata calls the instance agent makes (IMDSv2: a token first);
``Instance`` plays one instance on this machine: it runs the user-data moto stored with bash in
a sandbox folder, with the metadata service, ``shutdown`` and S3 pointed at stand-ins.
"""

import base64
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from helpers import LoopbackServer, PlayedInstance


class ImdsStub:
    """A metadata service for one instance; spot/instance-action is 404 until ``announce``."""

    def __init__(self, instance_id: str, region: str, launch_index: int = 0) -> None:
        self.values = {"instance-id": instance_id, "placement/region": region,
                       "ami-launch-index": str(launch_index)}
        self.token = uuid.uuid4().hex
        self.calls: list[tuple[str, str]] = []  # (method, path) in order
        self.refused = 0  # metadata reads without a valid token
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def _handle(self, method, path, headers, body):
        self.calls.append((method, path))
        if method == "PUT":
            if path == "/latest/api/token" and \
                    headers.get("X-aws-ec2-metadata-token-ttl-seconds"):
                return 200, {}, self.token.encode()
            return 400, {}, b""
        if method != "GET":
            return 405, {}, b""
        if headers.get("X-aws-ec2-metadata-token") != self.token:
            self.refused += 1
            return 401, {}, b""
        value = self.values.get(path.removeprefix("/latest/meta-data/"))
        return (404, {}, b"") if value is None else (200, {}, value.encode())

    def announce_spot_interruption(self) -> None:
        self.values["spot/instance-action"] = json.dumps(
            {"action": "terminate", "time": "2026-01-01T00:00:00Z"})

    def close(self) -> None:
        self._server.close()


_FAKE_SHUTDOWN = """#!/bin/bash
# A stand-in for shutdown: note the call, then do what InstanceInitiatedShutdownBehavior=terminate
# makes AWS do.
echo "shutdown $*" >> "$FAKE_SHUTDOWN_LOG"
AWS_DEFAULT_REGION="$FAKE_REGION" exec "$FAKE_PYTHON" -c '
import os, boto3
boto3.client("ec2").terminate_instances(InstanceIds=[os.environ["FAKE_INSTANCE_ID"]])'
"""


class Instance(PlayedInstance):
    """One EC2 instance played on this machine from the user-data moto holds."""

    def __init__(self, ec2, instance_id: str, sandbox: Path, env: dict, region: str) -> None:
        self.id = instance_id
        reply = ec2.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        self.user_data = base64.b64decode(reply["UserData"]["Value"]).decode()
        desc = ec2.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]
        self.imds = ImdsStub(instance_id, region, desc.get("AmiLaunchIndex", 0))
        bin_dir = self.make_sandbox(sandbox / instance_id, _FAKE_SHUTDOWN)
        (self.root / "user-data.sh").write_text(self.user_data)
        self.env = dict(env, PATH=f"{bin_dir}{os.pathsep}{env['PATH']}", HOME=str(self.root),
                        EASYLAUNCH_METADATA_URL=self.imds.url, EASYLAUNCH_WORKDIR=str(self.workdir),
                        FAKE_SHUTDOWN_LOG=str(self.shutdown_log), FAKE_INSTANCE_ID=instance_id,
                        FAKE_REGION=region, FAKE_PYTHON=sys.executable)
        self.proc = subprocess.Popen(["bash", str(self.root / "user-data.sh")], cwd=self.root,
                                     env=self.env, start_new_session=True,
                                     stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.imds.close()


def clean_env(endpoint: str, keys: tuple[str, str]) -> dict:
    """The sandbox environment: PATH, the fake keys and moto's endpoint, nothing of this
    process's Python setup (no PYTHONPATH: the code must come from S3)."""
    return {"PATH": os.environ["PATH"], "AWS_ACCESS_KEY_ID": keys[0],
            "AWS_SECRET_ACCESS_KEY": keys[1], "AWS_ENDPOINT_URL": endpoint, "LANG": "C.UTF-8"}
