"""What an instance brings in before its runs start: the launch manifest, the code snapshots
and blobs (once per content), each run's bundle (from its fleet's archive), and, for a run
that goes on from an earlier instance, what that instance synced."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

from easylaunch_job.cloud.platforms import log
from easylaunch_job.cloud.runs import RunSlot, unpack
from easylaunch_job.cloud.stores import Store
from easylaunch_job.records import (
    BLOB_STORE,
    BUNDLE_DIR,
    BUNDLE_JSON,
    SNAPSHOT_STORE,
    STATUS_JSON,
    read_json,
    write_bytes_atomic,
    write_json_atomic,
)

AGENT_JSON = "agent.json"
INSTANCE_LOG = "instance.log"
INSTANCE_FILES = (AGENT_JSON, INSTANCE_LOG)  # the instance's own, in each run's prefix
BUNDLES_STORE = ".bundles"  # bundle archives unpacked, until each run's folder is moved out


def parse_manifest(data: bytes | None) -> dict:
    """A launch manifest from its stored bytes (gzipped JSON, or JSON from before)."""
    if data and data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    return json.loads(data or b"{}")


def manifest(store: Store, key: str) -> dict:
    """The launch manifest at ``key``; refused if it is none."""
    found = parse_manifest(store.get(key))
    if found.get("format") != 1:
        raise RuntimeError(f"{store.url(key)} is not a launch manifest")
    return found


def share_snapshots(workdir: Path, store: str | None) -> None:
    """Keep code snapshots in ``store``, shared with the other work folders of this machine
    (a Ray node's jobs: each snapshot fetched and unpacked once per node), where given."""
    if not store or (workdir / SNAPSHOT_STORE).exists():
        return
    Path(store).mkdir(parents=True, exist_ok=True)
    os.symlink(store, workdir / SNAPSHOT_STORE)


def required(store: Store, key: str) -> bytes:
    """The object at ``key``; refused, naming it, where it is missing."""
    data = store.get(key)
    if data is None:
        raise RuntimeError(f"{store.url(key)} is missing")
    return data


def prepare(store: Store, launch: dict, workdir: Path, slot: RunSlot,
            slots: list[RunSlot]) -> None:
    """Unpack the run's code snapshots (once per digest), fetch the blobs its bundle links to
    (once per content), and unpack its bundle (``slots``: the runs of this instance)."""
    for digest, key in launch["snapshots"].items():
        dest = workdir / SNAPSHOT_STORE / digest
        if not dest.is_dir():
            unpack(required(store, key), dest)
    for name, key in launch.get("blobs", {}).items():
        dest = workdir / BLOB_STORE / name
        if not dest.exists():
            dest.parent.mkdir(exist_ok=True)
            write_bytes_atomic(str(dest), required(store, key))
    slot.log_dir.mkdir(parents=True, exist_ok=True)
    if slot.spec.get("resume") and not (slot.log_dir / STATUS_JSON).exists():
        take_up_earlier_attempts(store, slot)
    if not (slot.log_dir / BUNDLE_DIR).is_dir():
        place_bundle(store, workdir, slot, slots)
    if not (slot.log_dir / STATUS_JSON).exists():
        write_json_atomic(str(slot.log_dir / STATUS_JSON), {
            "state": "queued", "run_id": slot.run_id, "queued_at": slot.spec["queued_at"]})
    restart = read_json(str(slot.log_dir / BUNDLE_DIR / BUNDLE_JSON)).get("restart") or {}
    slot.restartable = int(restart.get("max_restarts", 0)) > 0


def place_bundle(store: Store, workdir: Path, slot: RunSlot, slots: list[RunSlot]) -> None:
    """Unpack the archive holding the run's bundle (once, the folders of the runs here) and
    move the run's folder of it into place (where its relative links resolve)."""
    if "bundle_key" in slot.spec:  # (a manifest of a launch made before bundles were packed)
        unpack(required(store, slot.spec["bundle_key"]), slot.log_dir / BUNDLE_DIR)
        return
    key = slot.spec["bundles_key"]
    unpacked = workdir / BUNDLES_STORE / key.rsplit("/", 1)[-1].split(".")[0]
    if not unpacked.is_dir():  # (only this instance's runs: the fleet may hold thousands)
        unpack(required(store, key), unpacked, {s.spec["folder"] for s in slots})
    os.replace(unpacked / slot.spec["folder"], slot.log_dir / BUNDLE_DIR)


def take_up_earlier_attempts(store: Store, slot: RunSlot) -> None:
    """Bring what the run's earlier instances synced (its status with the attempts so far,
    checkpoint, logs to append to) into its folder on this relaunched instance."""
    prefix = slot.spec["log_prefix"] + "/"
    root = slot.log_dir.resolve()
    count = 0
    for key in store.list(prefix):
        rel = key[len(prefix):]
        path = (root / rel).resolve()
        data = None if rel in INSTANCE_FILES or root not in path.parents else store.get(key)
        if data is None:
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(str(path), data)
        st = path.stat()
        slot.synced[os.path.relpath(path, root)] = (st.st_size, st.st_mtime_ns)
        count += 1
    log(f"run {slot.run_id}: took up {count} file(s) of its earlier attempts from "
        f"{store.url(prefix)}")
