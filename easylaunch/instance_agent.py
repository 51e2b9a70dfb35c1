"""The instance side of the cloud modes: ``python agent.py BUCKET MANIFEST_KEY --region R``.

The boot script fetches this file from the bucket and runs it. It needs only the standard
library and boto3 (easylaunch is not installed on the instance), and no credentials: boto3 uses
the instance's own role. It reads the launch manifest, picks its share of runs by its launch
index, unpacks their code snapshots and bundles, starts one runner per run, and

* mirrors each run's ``status.json`` to the bucket as soon as it changes, and the whole log
  folder (files matching the manifest's patterns) every sync interval;
* stops a run whose cancel marker appears in the bucket;
* watches the spot interruption notice (IMDSv2: a token first, then every metadata read) and
  syncs everything when it comes;
* waits for all its runs, syncs everything a last time, tags the instance and shuts it down
  (the instance was started with shutdown behaviour "terminate").

Environment overrides (tests point them at stand-ins): ``EASYLAUNCH_IMDS_URL`` (metadata
service), ``EASYLAUNCH_SHUTDOWN_CMD`` (``shutdown -h now``), ``EASYLAUNCH_WORKDIR`` (the
folder runs live in) and boto3's own ``AWS_ENDPOINT_URL``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_IMDS_URL = "http://169.254.169.254"
DEFAULT_SHUTDOWN_CMD = "shutdown -h now"
DEFAULT_WORKDIR = "/var/lib/easylaunch"
ENV_IMDS_URL = "EASYLAUNCH_IMDS_URL"
ENV_SHUTDOWN_CMD = "EASYLAUNCH_SHUTDOWN_CMD"
ENV_WORKDIR = "EASYLAUNCH_WORKDIR"

STATUS_JSON = "status.json"
AGENT_JSON = "agent.json"
INSTANCE_LOG = "instance.log"
BOOT_LOG = "boot.log"
SNAPSHOT_STORE = ".snapshots"
BUNDLE_DIR = "bundle"
RESULT_PKL = "result.pkl"
RECORD_FILES = ("stdout.log", "stderr.log", RESULT_PKL, STATUS_JSON)
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "timeout")
CANCEL_SUFFIX = ".cancel"
TAG_KEY = "easylaunch:agent"
KILL_GRACE_SECONDS = 10.0
TOKEN_TTL_SECONDS = 21600


def log(message: str) -> None:
    """One timestamped line in the instance log."""
    print(f"[easylaunch agent {time.strftime('%H:%M:%S')}] {message}", flush=True)


class Imds:
    """The instance metadata service, IMDSv2: a session token before any read."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")
        self.token: str | None = None

    def _request(self, path: str, method: str, headers: dict) -> str | None:
        req = urllib.request.Request(self.base + path, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=2) as reply:
                return reply.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                self.token = None
            return None
        except (OSError, ValueError):
            return None

    def _token(self) -> str | None:
        if self.token is None:
            self.token = self._request("/latest/api/token", "PUT", {
                "X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)})
        return self.token

    def get(self, path: str) -> str | None:
        """``/latest/meta-data/<path>``, or None when absent or unreachable."""
        for _ in range(2):  # a token that expired is renewed once
            token = self._token()
            if token is None:
                return None
            value = self._request(f"/latest/meta-data/{path}", "GET",
                                  {"X-aws-ec2-metadata-token": token})
            if value is not None or self.token is not None:
                return value
        return None


class S3Store:
    """The bucket, through boto3 with the instance's own credentials."""

    def __init__(self, bucket: str, region: str) -> None:
        import boto3

        self.bucket = bucket
        self.client = boto3.client("s3", region_name=region)

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except self.client.exceptions.NoSuchKey:
            return None

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as f:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=f.read())

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def list(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(f".{path.name}.agent-tmp")
    tmp.write_text(json.dumps(obj, indent=2))
    os.replace(tmp, path)


def unpack(data: bytes, dest: Path) -> None:
    """Unpack a gzipped tarball into ``dest`` (made complete, then renamed into place)."""
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    extra = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(tmp, **extra)
    os.replace(tmp, dest)


class RunSlot:
    """One run on this instance: its folder, process and what was synced of it."""

    def __init__(self, spec: dict, workdir: Path) -> None:
        self.spec = spec
        self.log_dir = workdir / spec["exp_name"] / spec["folder"]
        self.proc: subprocess.Popen | None = None
        self.synced: dict[str, tuple[int, int]] = {}
        self.cancelled_at: float | None = None
        self.ended = False

    @property
    def run_id(self) -> str:
        return self.spec["run_id"]

    def status(self) -> dict:
        return read_json(self.log_dir / STATUS_JSON)

    def record_end(self, state: str, error: str, **extra: Any) -> None:
        """Give the run a terminal state unless it recorded one itself."""
        status = self.status()
        if status.get("state") not in TERMINAL_STATES:
            status.update(state=state, ended_at=time.time(), error=error, **extra)
            write_json(self.log_dir / STATUS_JSON, status)
        self.ended = True


class Agent:
    """Runs this instance's share of a launch manifest and keeps the bucket up to date."""

    def __init__(self, store: S3Store, manifest: dict, workdir: Path, imds: Imds,
                 instance: dict) -> None:
        self.store = store
        self.manifest = manifest
        self.workdir = workdir
        self.imds = imds
        self.instance = instance
        index = int(instance.get("launch_index") or 0)
        self.slots = [RunSlot(spec, workdir) for spec in manifest["instances"][index]]
        self.spot_notice: str | None = None
        self.final = False

    def tags(self, state: str) -> dict:
        """The instance's own tags: its runs, their experiment and the agent's state."""
        runs = " ".join(slot.run_id for slot in self.slots)
        exps = " ".join(sorted({slot.spec["exp_name"] for slot in self.slots}))
        return {TAG_KEY: state, "easylaunch:runs": runs[:255], "easylaunch:exp": exps[:255]}

    def stop_all(self) -> None:
        """Give every run that has not ended a terminal state (the agent is going away)."""
        for slot in self.slots:
            if slot.ended:
                continue
            if slot.proc is not None and slot.proc.poll() is None:
                _signal_group(slot.proc.pid, signal.SIGKILL)
            slot.record_end("failed", "the instance agent stopped before the run ended; "
                                      "see instance.log")

    # -- setup ----------------------------------------------------------------------------------

    def prepare(self, slot: RunSlot) -> None:
        """Unpack the run's code snapshots (once per digest) and its bundle."""
        for digest, key in self.manifest["snapshots"].items():
            dest = self.workdir / SNAPSHOT_STORE / digest
            if not dest.is_dir():
                unpack(self._fetch(key), dest)
        slot.log_dir.mkdir(parents=True, exist_ok=True)
        if not (slot.log_dir / BUNDLE_DIR).is_dir():
            unpack(self._fetch(slot.spec["bundle_key"]), slot.log_dir / BUNDLE_DIR)
        if not (slot.log_dir / STATUS_JSON).exists():
            write_json(slot.log_dir / STATUS_JSON, {
                "state": "queued", "run_id": slot.run_id, "queued_at": slot.spec["queued_at"]})

    def _fetch(self, key: str) -> bytes:
        data = self.store.get(key)
        if data is None:
            raise RuntimeError(f"s3://{self.store.bucket}/{key} is missing")
        return data

    def command(self, slot: RunSlot) -> list[str]:
        """The runner's argv, inside the Docker image when the manifest names one."""
        bundle = str(slot.log_dir / BUNDLE_DIR)
        runner = [f"{bundle}/runner.py", bundle, "--log-dir", str(slot.log_dir)]
        image = self.manifest.get("docker_image")
        if not image:
            return [self.manifest["python"], *runner]
        gpu = ["--gpus", "all"] if self.manifest.get("use_gpu") else []
        mount = f"{self.workdir}:{self.workdir}"
        return ["docker", "run", "--rm", "--net=host", *gpu, "-v", mount, "-w", str(slot.log_dir),
                "-e", "PYTHONUNBUFFERED=1", image, "python3", *runner]

    def start(self, slot: RunSlot) -> None:
        try:
            self.prepare(slot)
        except Exception as exc:  # noqa: BLE001 - reported in the run's own record
            slot.log_dir.mkdir(parents=True, exist_ok=True)
            slot.record_end("failed", f"the instance could not prepare the run: {exc!r}")
            log(f"run {slot.run_id}: preparing failed: {exc!r}")
            return
        with open(slot.log_dir / "stdout.log", "ab") as out, \
                open(slot.log_dir / "stderr.log", "ab") as err:
            slot.proc = subprocess.Popen(
                self.command(slot), cwd=str(slot.log_dir), stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log(f"run {slot.run_id}: started (pid {slot.proc.pid})")

    # -- supervision ----------------------------------------------------------------------------

    def cancel_requests(self) -> set[str]:
        prefix = self.manifest["control_prefix"] + "/"
        return {k[len(prefix):-len(CANCEL_SUFFIX)] for k in self.store.list(prefix)
                if k.endswith(CANCEL_SUFFIX)}

    def handle_cancels(self) -> None:
        wanted = self.cancel_requests()
        for slot in self.slots:
            if slot.ended or slot.run_id not in wanted:
                continue
            if slot.proc is None:
                slot.record_end("cancelled", "cancelled before it started")
            elif slot.cancelled_at is None:
                log(f"run {slot.run_id}: cancel requested, stopping it")
                slot.cancelled_at = time.time()
                _signal_group(slot.proc.pid, signal.SIGTERM)
            elif time.time() - slot.cancelled_at > KILL_GRACE_SECONDS:
                _signal_group(slot.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Record the end of runs whose process exited; sync them in full."""
        for slot in self.slots:
            if slot.ended or slot.proc is None or slot.proc.poll() is None:
                continue
            code = slot.proc.returncode
            _signal_group(slot.proc.pid, signal.SIGKILL)  # what the run left behind
            state = "cancelled" if slot.cancelled_at is not None else "failed"
            slot.record_end(state, f"the run's process exited with code {code} before "
                                   "recording an outcome; see stderr.log", exit_code=code)
            log(f"run {slot.run_id}: ended as {slot.status().get('state')}")
            self.sync(slot, everything=True)

    def check_spot_notice(self) -> None:
        if self.spot_notice is not None:
            return
        notice = self.imds.get("spot/instance-action")
        if notice:
            self.spot_notice = notice
            log(f"spot interruption notice: {notice}; syncing everything now")
            self.sync_all(everything=True)

    def supervise(self, interval: float, poll: float) -> None:
        """Run until every run has ended; sync statuses each poll and everything each interval."""
        next_sync = time.monotonic() + interval
        while True:
            try:
                self.handle_cancels()
            except Exception as exc:  # noqa: BLE001 - the bucket is asked again next time
                log(f"could not read cancel requests: {exc!r}")
            self.reap()
            if all(slot.ended for slot in self.slots):
                return
            self.check_spot_notice()
            everything = time.monotonic() >= next_sync
            if everything:
                next_sync = time.monotonic() + interval
            self.sync_all(everything)
            time.sleep(poll)

    # -- syncing --------------------------------------------------------------------------------

    def _files(self, slot: RunSlot, everything: bool) -> list[str]:
        if not everything:  # the record only; result.pkl before the status that announces it
            return [RESULT_PKL, STATUS_JSON]
        patterns = self.manifest["patterns"]
        found = []
        for dirpath, dirnames, filenames in os.walk(slot.log_dir):
            rel_dir = os.path.relpath(dirpath, slot.log_dir)
            if rel_dir == ".":
                dirnames[:] = [d for d in dirnames if d != BUNDLE_DIR]
            for name in filenames:
                rel = os.path.normpath(os.path.join(rel_dir, name))
                if ".agent-tmp" in name or ".tmp-" in name or name.endswith(".lock"):
                    continue
                if rel in RECORD_FILES or any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p)
                                              for p in patterns):
                    found.append(rel)
        # the record last: a reader who sees a final status.json finds result.pkl already there
        return sorted(found, key=lambda r: (r == STATUS_JSON, r == RESULT_PKL, r))

    def sync(self, slot: RunSlot, everything: bool) -> None:
        """Upload the run's files that changed since they were last uploaded."""
        for rel in self._files(slot, everything):
            path = slot.log_dir / rel
            try:
                st = path.stat()
            except OSError:
                continue
            signature = (st.st_size, st.st_mtime_ns)
            if slot.synced.get(rel) != signature:
                self.store.put_file(f"{slot.spec['log_prefix']}/{rel}", path)
                slot.synced[rel] = signature
        if everything:
            self._put_instance_files(slot)

    def _put_instance_files(self, slot: RunSlot) -> None:
        info = dict(self.instance, spot_notice=self.spot_notice, synced_at=time.time(),
                    final=self.final, runs=[s.run_id for s in self.slots])
        prefix = slot.spec["log_prefix"]
        self.store.put_bytes(f"{prefix}/{AGENT_JSON}", json.dumps(info, indent=2).encode())
        if (self.workdir / BOOT_LOG).is_file():
            self.store.put_file(f"{prefix}/{INSTANCE_LOG}", self.workdir / BOOT_LOG)

    def sync_all(self, everything: bool) -> None:
        for slot in self.slots:
            try:
                self.sync(slot, everything)
            except Exception as exc:  # noqa: BLE001 - a failed sync is retried next time
                log(f"run {slot.run_id}: sync failed: {exc!r}")


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def tag_instance(region: str, instance_id: str | None, tags: dict) -> None:
    """Tag this instance (needs ec2:CreateTags; best effort)."""
    if not instance_id:
        return
    try:
        import boto3

        boto3.client("ec2", region_name=region).create_tags(
            Resources=[instance_id], Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
    except Exception as exc:  # noqa: BLE001 - tags help people, the runs do not need them
        log(f"could not tag {instance_id}: {exc!r}")


def shutdown() -> None:
    command = os.environ.get(ENV_SHUTDOWN_CMD) or DEFAULT_SHUTDOWN_CMD
    log(f"shutting down: {command}")
    subprocess.run(shlex.split(command), check=False)


def describe_instance(imds: Imds, region: str) -> dict:
    """Who this instance is, from the metadata service."""
    return {"instance_id": imds.get("instance-id"),
            "region": imds.get("placement/region") or region,
            "launch_index": imds.get("ami-launch-index") or "0",
            "started_at": time.time()}


def run(bucket: str, manifest_key: str, region: str) -> None:
    """Run this instance's share of the manifest, then shut the instance down."""
    workdir = Path(os.environ.get(ENV_WORKDIR) or DEFAULT_WORKDIR).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    imds = Imds(os.environ.get(ENV_IMDS_URL) or DEFAULT_IMDS_URL)
    instance = describe_instance(imds, region)
    log(f"instance {instance['instance_id']} in {instance['region']}, "
        f"launch index {instance['launch_index']}")
    agent = None
    try:
        store = S3Store(bucket, region)
        manifest = json.loads(store.get(manifest_key) or b"{}")
        if manifest.get("format") != 1:
            raise RuntimeError(f"s3://{bucket}/{manifest_key} is not a launch manifest")
        agent = Agent(store, manifest, workdir, imds, instance)
        tag_instance(instance["region"], instance["instance_id"], agent.tags("running"))
        agent.handle_cancels()
        for slot in agent.slots:
            if not slot.ended:
                agent.start(slot)
        agent.sync_all(everything=False)
        agent.supervise(float(manifest["sync_interval"]), float(manifest["poll_seconds"]))
    except Exception as exc:  # noqa: BLE001 - logged; the instance must still go away
        log(f"agent failed: {exc!r}")
    finally:
        if agent is not None:
            agent.stop_all()
            agent.final = True
            agent.sync_all(everything=True)
        tag_instance(instance["region"], instance["instance_id"], {TAG_KEY: "done"})
        shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bucket")
    parser.add_argument("manifest_key")
    parser.add_argument("--region", required=True)
    args = parser.parse_args(argv)
    run(args.bucket, args.manifest_key, args.region)
    return 0


if __name__ == "__main__":
    sys.exit(main())
