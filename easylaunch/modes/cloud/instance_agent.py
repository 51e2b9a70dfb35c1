"""The instance side of the cloud modes: ``python agent.py BUCKET MANIFEST_KEY --cloud C``.

The boot script fetches this file from the bucket and runs it. It needs only the standard
library and the cloud's storage library (boto3 on AWS, google-cloud-storage on Google Cloud;
easylaunch is not installed on the instance), and no credentials: the storage library uses the
instance's own identity. It reads the launch manifest, picks its share of runs by its index,
unpacks their code snapshots and bundles, starts one runner per run, and

* mirrors each run's ``status.json`` to the bucket as soon as it changes, and the whole log
  folder (files matching the manifest's patterns) every sync interval;
* stops a run whose cancel marker appears in the bucket;
* watches the interruption notice (an EC2 spot notice, a GCE preemption) and syncs everything
  when it comes; SIGTERM (the machine shutting down, a GCE shutdown-script) does a last sync;
* with restarts (the bundle's ``restart``): starts a run's next attempt here after a crash or an
  exception; on an interruption tells the run (SIGTERM: it checkpoints) and leaves it queued,
  synced with its ``checkpoint/``, for the new instance the launching side starts, whose agent
  first takes up what the earlier attempts synced (the manifest's ``resume``);
* waits for all its runs, syncs everything a last time and ends the instance: EC2 instances
  shut down (they were started with shutdown behaviour "terminate"), GCE instances delete
  themselves through the Compute API with the metadata server's token.

Environment overrides (tests point them at stand-ins): ``EASYLAUNCH_METADATA_URL`` (metadata
service), ``EASYLAUNCH_COMPUTE_URL`` (Compute Engine API), ``EASYLAUNCH_SHUTDOWN_CMD``
(``shutdown -h now``), ``EASYLAUNCH_WORKDIR`` (the folder runs live in), and the storage
libraries' own ``AWS_ENDPOINT_URL`` and ``STORAGE_EMULATOR_HOST``.
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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

DEFAULT_SHUTDOWN_CMD = "shutdown -h now"
DEFAULT_WORKDIR = "/var/lib/easylaunch"
DEFAULT_COMPUTE_URL = "https://compute.googleapis.com"
ENV_METADATA_URL = "EASYLAUNCH_METADATA_URL"
ENV_COMPUTE_URL = "EASYLAUNCH_COMPUTE_URL"
ENV_SHUTDOWN_CMD = "EASYLAUNCH_SHUTDOWN_CMD"
ENV_WORKDIR = "EASYLAUNCH_WORKDIR"

STATUS_JSON = "status.json"
AGENT_JSON = "agent.json"
AGENT_PID = "agent.pid"
INSTANCE_LOG = "instance.log"
BOOT_LOG = "boot.log"
SNAPSHOT_STORE = ".snapshots"
BUNDLE_DIR = "bundle"
RESULT_PKL = "result.pkl"
BUNDLE_JSON = "bundle.json"
STATUS_LOCK = f".{STATUS_JSON}.lock"  # the runner's lock on status.json
CHECKPOINT_DIR = "checkpoint"  # the run's checkpoints: always synced, brought back on relaunch
RECORD_FILES = ("stdout.log", "stderr.log", RESULT_PKL, STATUS_JSON)
INSTANCE_FILES = (AGENT_JSON, INSTANCE_LOG)  # the instance's own, in each run's prefix
TERMINAL_STATES = ("succeeded", "failed", "cancelled", "timeout")
CANCEL_SUFFIX = ".cancel"
TAG_KEY = "easylaunch:agent"
GCE_INDEX_KEY = "easylaunch-index"  # the instance's share of the manifest, in its metadata
KILL_GRACE_SECONDS = 10.0
# How long runs that may restart get, when the machine goes down, to checkpoint and record their
# stop (GCE gives the shutdown script about 30 s, of which the last sync needs a few).
STOP_GRACE_SECONDS = 15.0
TOKEN_TTL_SECONDS = 21600
HTTP_TIMEOUT_SECONDS = 5


def log(message: str) -> None:
    """One timestamped line in the instance log."""
    print(f"[easylaunch agent {time.strftime('%H:%M:%S')}] {message}", flush=True)


def http(url: str, method: str = "GET", headers: dict | None = None) -> str | None:
    """The body of a reply, or None for an error status or an unreachable server."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_SECONDS) as reply:
            return reply.read().decode()
    except (OSError, ValueError):  # urllib.error.HTTPError is an OSError
        return None


# -- object storage: one class a cloud, used by the agent and the launching side alike ----------


class Store:
    """A bucket through the few calls easylaunch needs; keys are relative to the bucket."""

    scheme = ""

    def __init__(self, bucket: str, client: Any) -> None:
        self.bucket = bucket
        self.client = client

    def url(self, key: str) -> str:
        """The object's URL, e.g. ``gs://bucket/key``."""
        return f"{self.scheme}://{self.bucket}/{key}"

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def get(self, key: str) -> bytes | None:
        """The object under ``key``, or None if there is none."""
        raise NotImplementedError

    def put_bytes(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        raise NotImplementedError

    def list(self, prefix: str) -> list[str]:
        """Keys under ``prefix``."""
        raise NotImplementedError

    def create(self, key: str, data: bytes) -> bool:
        """Write ``key`` only if no object has that name yet; False if one has. Of two callers
        at once, exactly one gets True (the store decides, not the callers)."""
        raise NotImplementedError


def aws_error_code(exc: Exception) -> str:
    """The error code of a botocore ClientError ("NoSuchKey", "404"...), or ""."""
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class S3Store(Store):
    """An S3 bucket through boto3."""

    scheme = "s3"
    NOT_FOUND = ("NoSuchKey", "404", "NotFound", "NoSuchBucket")

    @classmethod
    def default(cls, bucket: str, region: str) -> S3Store:
        import boto3

        return cls(bucket, boto3.client("s3", region_name=region))

    def _missing(self, exc: Exception) -> bool:
        return aws_error_code(exc) in self.NOT_FOUND

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if self._missing(exc):
                return False
            raise
        return True

    def get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if self._missing(exc):
                return None
            raise

    def put_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        self.client.upload_file(os.fspath(path), self.bucket, key)

    def list(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]

    def create(self, key: str, data: bytes) -> bool:
        """A conditional PUT (``If-None-Match: *``)."""
        from botocore.exceptions import ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except ClientError as exc:
            if aws_error_code(exc) in ("PreconditionFailed", "ConditionalRequestConflict"):
                return False
            raise
        return True


class GcsStore(Store):
    """A Google Cloud Storage bucket through google-cloud-storage (no gsutil)."""

    scheme = "gs"

    @classmethod
    def default(cls, bucket: str, region: str = "") -> GcsStore:
        from google.cloud import storage

        return cls(bucket, storage.Client())

    def _blob(self, key: str) -> Any:
        return self.client.bucket(self.bucket).blob(key)

    def exists(self, key: str) -> bool:
        return self._blob(key).exists()

    def get(self, key: str) -> bytes | None:
        from google.api_core.exceptions import NotFound

        try:
            return self._blob(key).download_as_bytes()
        except NotFound:
            return None

    def put_bytes(self, key: str, data: bytes) -> None:
        self._blob(key).upload_from_string(data)

    def put_file(self, key: str, path: str | os.PathLike) -> None:
        self._blob(key).upload_from_filename(os.fspath(path))

    def list(self, prefix: str) -> list[str]:
        return [b.name for b in self.client.list_blobs(self.bucket, prefix=prefix)]

    def create(self, key: str, data: bytes) -> bool:
        """An upload on the condition that no generation of the object exists."""
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._blob(key).upload_from_string(data, if_generation_match=0)
        except PreconditionFailed:
            return False
        return True


# -- the machine the agent runs on --------------------------------------------------------------


class Platform:
    """What the agent asks of the cloud it runs in: who it is, interruption notices, the end."""

    store_class: type[Store] = Store

    def __init__(self, region: str) -> None:
        self.region = region

    def describe(self) -> dict:
        """instance_id, where it runs and its index in the manifest."""
        raise NotImplementedError

    def interruption_notice(self) -> str | None:
        """A notice that the cloud takes the machine back soon, or None."""
        raise NotImplementedError

    def tag(self, instance: dict, tags: dict) -> None:
        """Label the instance with the agent's state (best effort)."""

    def end(self, instance: dict) -> None:
        """Make the instance go away."""
        shutdown()


class Aws(Platform):
    """EC2: IMDSv2 (a session token before any read), tags, shutdown with terminate behaviour."""

    store_class = S3Store
    base_url = "http://169.254.169.254"

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.base = (os.environ.get(ENV_METADATA_URL) or self.base_url).rstrip("/")
        self.token: str | None = None

    def _token(self) -> str | None:
        if self.token is None:
            self.token = http(self.base + "/latest/api/token", "PUT", {
                "X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)})
        return self.token

    def get(self, path: str) -> str | None:
        """``/latest/meta-data/<path>``, or None when absent or unreachable."""
        for _ in range(2):  # a token that expired is renewed once
            token = self._token()
            if token is None:
                return None
            req = urllib.request.Request(f"{self.base}/latest/meta-data/{path}",
                                         headers={"X-aws-ec2-metadata-token": token})
            try:
                with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_SECONDS) as reply:
                    return reply.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code != 401:
                    return None
                self.token = None
            except (OSError, ValueError):
                return None
        return None

    def describe(self) -> dict:
        return {"instance_id": self.get("instance-id"),
                "region": self.get("placement/region") or self.region,
                "index": self.get("ami-launch-index") or "0"}

    def interruption_notice(self) -> str | None:
        return self.get("spot/instance-action")

    def tag(self, instance: dict, tags: dict) -> None:
        """Tag this instance (needs ec2:CreateTags; best effort)."""
        if not instance.get("instance_id"):
            return
        try:
            import boto3

            boto3.client("ec2", region_name=instance["region"]).create_tags(
                Resources=[instance["instance_id"]],
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        except Exception as exc:  # noqa: BLE001 - tags help people, the runs do not need them
            log(f"could not tag {instance['instance_id']}: {exc!r}")


class Gce(Platform):
    """Compute Engine: the metadata server (``Metadata-Flavor: Google``), preemption, and
    deleting itself through the Compute API with the service account's token."""

    store_class = GcsStore
    base_url = "http://metadata.google.internal"

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.base = (os.environ.get(ENV_METADATA_URL) or self.base_url).rstrip("/")

    def get(self, path: str) -> str | None:
        """``/computeMetadata/v1/<path>``, or None when absent or unreachable."""
        return http(f"{self.base}/computeMetadata/v1/{path}",
                    headers={"Metadata-Flavor": "Google"})

    def describe(self) -> dict:
        zone = (self.get("instance/zone") or "").rsplit("/", 1)[-1]
        return {"instance_id": self.get("instance/name"), "zone": zone,
                "project": self.get("project/project-id"),
                "index": self.get(f"instance/attributes/{GCE_INDEX_KEY}") or "0"}

    def interruption_notice(self) -> str | None:
        return "preempted" if (self.get("instance/preempted") or "").upper() == "TRUE" else None

    def end(self, instance: dict) -> None:
        """Delete this instance; shut down if the delete request is refused."""
        token = json.loads(self.get("instance/service-accounts/default/token") or "{}")
        url = (f"{os.environ.get(ENV_COMPUTE_URL) or DEFAULT_COMPUTE_URL}/compute/v1/projects/"
               f"{instance['project']}/zones/{instance['zone']}/instances/"
               f"{instance['instance_id']}")
        log(f"deleting this instance: DELETE {url}")
        if token.get("access_token") and http(url, "DELETE", {
                "Authorization": f"Bearer {token['access_token']}"}) is not None:
            return
        log("the delete request failed (does the service account have compute.instances"
            ".delete?); shutting down instead")
        shutdown()


PLATFORMS: dict[str, type[Platform]] = {"aws": Aws, "gcp": Gce}


def read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def write_bytes(path: Path, data: bytes) -> None:
    """Write whole or not at all (a temporary name, then a rename)."""
    tmp = path.with_name(f".{path.name}.agent-tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_json(path: Path, obj: dict) -> None:
    write_bytes(path, json.dumps(obj, indent=2).encode())


@contextlib.contextmanager
def status_lock(log_dir: Path) -> Iterator[None]:
    """The runner's own lock on a run's status.json, so their changes never interleave."""
    import fcntl

    fd = os.open(log_dir / STATUS_LOCK, os.O_CREAT | os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


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
        self.restartable = False  # its bundle allows restarts (read once it is unpacked)
        self.attempts_before = 0  # the run's attempt count when its runner last started

    @property
    def run_id(self) -> str:
        return self.spec["run_id"]

    def status(self) -> dict:
        return read_json(self.log_dir / STATUS_JSON)

    def update(self, **fields: Any) -> None:
        """Change fields of the run's status.json."""
        with status_lock(self.log_dir):
            write_json(self.log_dir / STATUS_JSON, dict(self.status(), **fields))

    def record_end(self, state: str, error: str, **extra: Any) -> None:
        """Give the run a terminal state unless it recorded one itself."""
        with status_lock(self.log_dir):
            status = self.status()
            if status.get("state") not in TERMINAL_STATES:
                status.update(state=state, ended_at=time.time(), error=error, **extra)
                write_json(self.log_dir / STATUS_JSON, status)
        self.ended = True

    def may_restart(self) -> bool:
        """Its attempt here ended without a final state, it may restart and nobody cancelled
        it: it goes on, here or (after an interruption) on a new instance."""
        status = self.status()
        return (self.restartable and self.cancelled_at is None
                and not status.get("cancel_requested")
                and status.get("state") not in TERMINAL_STATES
                and status.get("attempt", 0) > self.attempts_before)


class Agent:
    """Runs this instance's share of a launch manifest and keeps the bucket up to date."""

    def __init__(self, store: Store, manifest: dict, workdir: Path, platform: Platform,
                 instance: dict) -> None:
        self.store = store
        self.manifest = manifest
        self.workdir = workdir
        self.platform = platform
        self.instance = instance
        index = int(instance.get("index") or 0)
        self.slots = [RunSlot(spec, workdir) for spec in manifest["instances"][index]]
        self.spot_notice: str | None = None
        self.final = False

    def tags(self, state: str) -> dict:
        """The instance's own tags: its runs, their experiment and the agent's state."""
        runs = " ".join(slot.run_id for slot in self.slots)
        exps = " ".join(sorted({slot.spec["exp_name"] for slot in self.slots}))
        return {TAG_KEY: state, "easylaunch:runs": runs[:255], "easylaunch:exp": exps[:255]}

    def stop_all(self) -> None:
        """The agent is going away: runs that may restart are told (SIGTERM) and get
        STOP_GRACE_SECONDS to checkpoint, and are left for a relaunch on a new instance; every
        other run that has not ended gets a terminal state."""
        told = self.tell_restartable()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while any(s.proc.poll() is None for s in told) and time.monotonic() < deadline:
            time.sleep(0.1)
        why = (f"the cloud took the instance back ({self.spot_notice}) before the run ended; "
               "its last sync is in the bucket" if self.spot_notice else
               "the instance agent stopped before the run ended; see instance.log")
        for slot in self.slots:
            if slot.ended:
                continue
            if slot.proc is not None and slot.proc.poll() is None:
                _signal_group(slot.proc.pid, signal.SIGKILL)
            if slot.may_restart():
                log(f"run {slot.run_id}: stopped here; it goes on on a new instance")
                slot.ended = True
            else:
                slot.record_end("failed", why)

    def tell_restartable(self) -> list[RunSlot]:
        """Send SIGTERM to the running runs that may restart: each checkpoints and records its
        stop (a preemption, to its runner). Returns them."""
        told = [s for s in self.slots if s.restartable and not s.ended and s.proc is not None
                and s.proc.poll() is None and s.cancelled_at is None]
        for slot in told:
            log(f"run {slot.run_id}: telling it the instance goes away (SIGTERM)")
            _signal_group(slot.proc.pid, signal.SIGTERM)
        return told

    # -- setup ----------------------------------------------------------------------------------

    def prepare(self, slot: RunSlot) -> None:
        """Unpack the run's code snapshots (once per digest) and its bundle."""
        for digest, key in self.manifest["snapshots"].items():
            dest = self.workdir / SNAPSHOT_STORE / digest
            if not dest.is_dir():
                unpack(self._fetch(key), dest)
        slot.log_dir.mkdir(parents=True, exist_ok=True)
        if slot.spec.get("resume") and not (slot.log_dir / STATUS_JSON).exists():
            self.resume(slot)
        if not (slot.log_dir / BUNDLE_DIR).is_dir():
            unpack(self._fetch(slot.spec["bundle_key"]), slot.log_dir / BUNDLE_DIR)
        if not (slot.log_dir / STATUS_JSON).exists():
            write_json(slot.log_dir / STATUS_JSON, {
                "state": "queued", "run_id": slot.run_id, "queued_at": slot.spec["queued_at"]})
        restart = read_json(slot.log_dir / BUNDLE_DIR / BUNDLE_JSON).get("restart") or {}
        slot.restartable = int(restart.get("max_restarts", 0)) > 0

    def resume(self, slot: RunSlot) -> None:
        """Bring what the run's earlier instances synced (its status with the attempts so far,
        checkpoint, logs to append to) into its folder on this relaunched instance."""
        prefix = slot.spec["log_prefix"] + "/"
        root = slot.log_dir.resolve()
        count = 0
        for key in self.store.list(prefix):
            rel = key[len(prefix):]
            path = (root / rel).resolve()
            data = None if rel in INSTANCE_FILES or not path.is_relative_to(root) \
                else self.store.get(key)
            if data is None:
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            write_bytes(path, data)
            st = path.stat()
            slot.synced[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
            count += 1
        log(f"run {slot.run_id}: took up {count} file(s) of its earlier attempts from "
            f"{self.store.url(prefix)}")

    def _fetch(self, key: str) -> bytes:
        data = self.store.get(key)
        if data is None:
            raise RuntimeError(f"{self.store.url(key)} is missing")
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
        slot.attempts_before = slot.status().get("attempt", 0)
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
                slot.update(cancel_requested=True)  # (the runner's SIGTERM: a cancel, no restart)
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
            if slot.may_restart():
                self.go_on(slot)
                continue
            state = "cancelled" if slot.cancelled_at is not None else "failed"
            slot.record_end(state, f"the run's process exited with code {code} before "
                                   "recording an outcome; see stderr.log", exit_code=code)
            log(f"run {slot.run_id}: ended as {slot.status().get('state')}")
            self.sync(slot, everything=True)

    def go_on(self, slot: RunSlot) -> None:
        """Start the run's next attempt here; after an interruption notice, leave it (synced)
        for a new instance instead, which the launching side starts."""
        status = slot.status()
        if self.spot_notice:
            log(f"run {slot.run_id}: stopped for the interruption ({status.get('state')}); it "
                "goes on on a new instance")
            slot.ended = True
            self.sync(slot, everything=True)
            return
        log(f"run {slot.run_id}: attempt {status.get('attempt')} ended "
            f"({status.get('state')}); starting it again")
        self.start(slot)

    def check_interruption(self) -> None:
        if self.spot_notice is not None:
            return
        notice = self.platform.interruption_notice()
        if notice:
            self.spot_notice = notice
            log(f"interruption notice: {notice}; syncing everything now")
            self.tell_restartable()
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
            self.check_interruption()
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
                if rel in RECORD_FILES or rel.startswith(CHECKPOINT_DIR + os.sep) or any(
                        fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns):
                    found.append(rel)
        # the record last: a reader who sees a final status.json finds result.pkl already there
        return sorted(found, key=lambda r: (r == STATUS_JSON, r == RESULT_PKL, r))

    def sync(self, slot: RunSlot, everything: bool) -> None:
        """Upload the run's files that changed since they were last uploaded (all of them once
        the run has ended: its final status reaches the bucket after the logs it ends)."""
        everything = everything or slot.status().get("state") in TERMINAL_STATES
        for rel in self._files(slot, everything):
            self._put_if_changed(slot, rel, slot.log_dir / rel)
        if everything:
            self._put_instance_files(slot)

    def _put_if_changed(self, slot: RunSlot, rel: str, path: Path) -> None:
        """Upload ``path`` as the run's ``rel`` unless it is unchanged since its last upload."""
        try:
            st = path.stat()
        except OSError:
            return
        signature = (st.st_size, st.st_mtime_ns)
        if slot.synced.get(rel) != signature:
            key = f"{slot.spec['log_prefix']}/{rel}"
            if rel == STATUS_JSON:  # read whole first: the runner may replace it mid-upload
                try:
                    self.store.put_bytes(key, path.read_bytes())
                except FileNotFoundError:
                    return
            else:
                self.store.put_file(key, path)
            slot.synced[rel] = signature

    def _put_instance_files(self, slot: RunSlot) -> None:
        info = dict(self.instance, spot_notice=self.spot_notice, synced_at=time.time(),
                    final=self.final, runs=[s.run_id for s in self.slots])
        prefix = slot.spec["log_prefix"]
        self.store.put_bytes(f"{prefix}/{AGENT_JSON}", json.dumps(info, indent=2).encode())
        self._put_if_changed(slot, INSTANCE_LOG, self.workdir / BOOT_LOG)

    def sync_all(self, everything: bool) -> None:
        for slot in self.slots:
            try:
                self.sync(slot, everything)
            except Exception as exc:  # noqa: BLE001 - a failed sync is retried next time
                log(f"run {slot.run_id}: sync failed: {exc!r}")


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


class Stop(BaseException):
    """SIGTERM reached the agent: the machine is going down (not caught by the agent's
    ``except Exception`` handlers, which retry what failed)."""


def _stop(signum: int, frame: Any) -> None:
    raise Stop


def shutdown() -> None:
    command = os.environ.get(ENV_SHUTDOWN_CMD) or DEFAULT_SHUTDOWN_CMD
    log(f"shutting down: {command}")
    subprocess.run(shlex.split(command), check=False)


def run(cloud: str, bucket: str, manifest_key: str, region: str) -> None:
    """Run this instance's share of the manifest, then end the instance."""
    workdir = Path(os.environ.get(ENV_WORKDIR) or DEFAULT_WORKDIR).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    platform = PLATFORMS[cloud](region)
    instance = dict(platform.describe(), started_at=time.time())
    log(f"instance {instance['instance_id']} "
        f"in {instance.get('region') or instance.get('zone')}, index {instance['index']}")
    (workdir / AGENT_PID).write_text(str(os.getpid()))
    signal.signal(signal.SIGTERM, _stop)
    agent = None
    try:
        store = platform.store_class.default(bucket, region)
        manifest = json.loads(store.get(manifest_key) or b"{}")
        if manifest.get("format") != 1:
            raise RuntimeError(f"{store.url(manifest_key)} is not a launch manifest")
        agent = Agent(store, manifest, workdir, platform, instance)
        platform.tag(instance, agent.tags("running"))
        agent.handle_cancels()
        for slot in agent.slots:
            if not slot.ended:
                agent.start(slot)
        agent.sync_all(everything=False)
        agent.supervise(float(manifest["sync_interval"]), float(manifest["poll_seconds"]))
    except Stop:
        log("SIGTERM: the machine is going down; syncing a last time")
        if agent is not None and agent.spot_notice is None:
            agent.spot_notice = platform.interruption_notice()
    except Exception as exc:  # noqa: BLE001 - logged; the instance must still go away
        log(f"agent failed: {exc!r}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the last sync is not cut short
        if agent is not None:
            agent.stop_all()
            agent.final = True
            agent.sync_all(everything=True)
        platform.tag(instance, {TAG_KEY: "done"})
        with contextlib.suppress(OSError):
            (workdir / AGENT_PID).unlink()
        platform.end(instance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bucket")
    parser.add_argument("manifest_key")
    parser.add_argument("--cloud", choices=sorted(PLATFORMS), default="aws")
    parser.add_argument("--region", default="")
    args = parser.parse_args(argv)
    run(args.cloud, args.bucket, args.manifest_key, args.region)
    return 0


if __name__ == "__main__":
    sys.exit(main())
