"""A run folder's record files, and writing them so that a reader never sees half a file.

Every file is written to a temporary name and renamed into place; ``status.json`` changes under
an exclusive lock, and its first terminal state wins.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from easylaunch_job.states import TERMINAL_STATES

BUNDLE_FORMAT = 1
BUNDLE_DIR = "bundle"  # in a run folder: what the runner needs
JOB_PYZ = "job.pyz"  # in a bundle: this package as one file, stored once per content
SNAPSHOT_STORE = ".snapshots"  # beside the run folders: code snapshots, one per content
BLOB_STORE = ".blobs"  # beside them: pickled functions and job sides, one per content
BUNDLE_JSON = "bundle.json"
FUNCTION_PKL = "function.pkl"
VARIANT_PKL = "variant.pkl"
STATUS_JSON = "status.json"
STATUS_LOCK = f".{STATUS_JSON}.lock"
RESULT_PKL = "result.pkl"
STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"
CHECKPOINT_DIR = "checkpoint"
METRICS_JSONL = "metrics.jsonl"


class DamagedRecord(ValueError):
    """A run's JSON record cannot be read (empty or cut short by a crash mid-write)."""


def write_bytes_atomic(path: str, data: bytes, durable: bool = False,
                       private: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A failed write (a full disk) removes its temporary file. ``durable`` flushes the data to
    disk before the rename, so a crash of the machine leaves the old file or the new one, never
    an empty or cut one; ``private`` makes the file readable by its owner alone.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                _sync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


_sync = getattr(os, "fdatasync", os.fsync)  # (the data and its size; not the times)


def json_text(obj: Any) -> str:
    """``obj`` as JSON, an object one key a line (non-JSON values become strings): readable,
    and made by the C encoder, which indented JSON does not use."""
    if not isinstance(obj, dict) or not obj:
        return json.dumps(obj, default=repr)
    return "{\n" + ",\n".join(" " + json.dumps({k: v}, default=repr)[1:-1]
                               for k, v in obj.items()) + "\n}"


def write_json_atomic(path: str, obj: Any, durable: bool = False) -> None:
    """Write ``obj`` as JSON (:func:`json_text`) to ``path`` atomically."""
    write_bytes_atomic(path, json_text(obj).encode(), durable)


def read_json(path: str) -> dict:
    """Read a JSON object from ``path``; a missing file reads as an empty dict, a damaged one
    raises :class:`DamagedRecord` naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise DamagedRecord(f"{path} is damaged ({len(data)} bytes that are not JSON: "
                            f"{exc})") from None
    if not isinstance(obj, dict):
        raise DamagedRecord(f"{path} is damaged (it holds a {type(obj).__name__}, not an "
                            "object)")
    return obj


@contextlib.contextmanager
def status_lock(log_dir: str) -> Iterator[None]:
    """An exclusive lock on a run's status (a no-op where the file system refuses locks)."""
    try:
        import fcntl

        fd = os.open(os.path.join(log_dir, STATUS_LOCK), os.O_CREAT | os.O_RDWR)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def read_for_update(path: str) -> dict:
    """A record about to be rewritten (under its lock): a damaged one reads as what was lost."""
    try:
        return read_json(path)
    except DamagedRecord as exc:  # the coming write repairs it; say what was lost
        return {"damaged_record": str(exc)}


def read_status(log_dir: str) -> dict:
    """A run's status.json; empty when missing, damaged (being replaced: read again later) or
    unreadable."""
    try:
        return read_json(os.path.join(log_dir, STATUS_JSON))
    except (DamagedRecord, OSError):
        return {}


def recorded_state(log_dir: str) -> str | None:
    """The state in a run's status.json (None if it has none or the record is damaged)."""
    return read_status(log_dir).get("state")


def update_status(log_dir: str, **fields: Any) -> dict:
    """Merge ``fields`` into ``<log_dir>/status.json``; return the status as it now is.

    Writers hold a lock, and the first terminal state wins: a later ``state`` never replaces
    it (other fields still merge in). Callers compare the returned state with the one they asked.
    A terminal state is flushed to disk before it replaces the old record.
    """
    path = os.path.join(log_dir, STATUS_JSON)
    with status_lock(log_dir):
        status = read_for_update(path)
        if status.get("state") in TERMINAL_STATES and "state" in fields:
            return status
        status.update(fields)
        write_json_atomic(path, status, durable=fields.get("state") in TERMINAL_STATES)
    return status


def flat_items(record: Mapping, prefix: str = "") -> dict[str, Any]:
    """Nested keys as ``a.b`` with their values (an empty mapping is a value): a variant as
    tables, plots and trackers show it."""
    flat: dict[str, Any] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flat_items(value, f"{name}."))
        else:
            flat[name] = value
    return flat
