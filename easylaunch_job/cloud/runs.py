"""A run on a cloud instance: its folder, process and record, and what of it reached the
bucket."""

from __future__ import annotations

import fnmatch
import io
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

from easylaunch_job.cloud.stores import Store
from easylaunch_job.records import (
    BUNDLE_DIR,
    CHECKPOINT_DIR,
    RESULT_PKL,
    STATUS_JSON,
    STDERR_LOG,
    STDOUT_LOG,
    read_status,
    update_status,
)
from easylaunch_job.states import TERMINAL_STATES

RECORD_FILES = (STDOUT_LOG, STDERR_LOG, RESULT_PKL, STATUS_JSON)


def unpack(data: bytes, dest: Path, only: set[str] | None = None) -> None:
    """Unpack a gzipped tarball into ``dest`` (made complete, then renamed into place; where
    another process placed the same content first, its copy is kept); with ``only``, just the
    entries under those top-level names."""
    tmp = dest.with_name(f"{dest.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    extra: dict[str, Any] = {"filter": "tar"} if hasattr(tarfile, "tar_filter") else {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = None if only is None else \
            [m for m in tar.getmembers() if m.name.split("/", 1)[0] in only]
        tar.extractall(tmp, members=members, **extra)
    try:
        os.replace(tmp, dest)
    except OSError:
        if not dest.is_dir():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


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
        return read_status(str(self.log_dir))

    def update(self, **fields: Any) -> None:
        """Change fields of the run's status.json."""
        update_status(str(self.log_dir), **fields)

    def record_end(self, state: str, error: str, **extra: Any) -> None:
        """Give the run a terminal state unless it recorded one itself."""
        update_status(str(self.log_dir), state=state, ended_at=time.time(), error=error, **extra)
        self.ended = True

    def may_restart(self) -> bool:
        """Its attempt here ended without a final state, it may restart and nobody cancelled
        it: it goes on, here or (after an interruption) on a new instance."""
        status = self.status()
        return (self.restartable and self.cancelled_at is None
                and not status.get("cancel_requested")
                and status.get("state") not in TERMINAL_STATES
                and status.get("attempt", 0) > self.attempts_before)

    def put_if_changed(self, store: Store, rel: str, path: Path) -> None:
        """Upload ``path`` as the run's ``rel`` unless it is unchanged since its last upload."""
        try:
            st = path.stat()
        except OSError:
            return
        signature = (st.st_size, st.st_mtime_ns)
        if self.synced.get(rel) != signature:
            key = f"{self.spec['log_prefix']}/{rel}"
            if rel == STATUS_JSON:  # read whole first: the runner may replace it mid-upload
                try:
                    store.put_bytes(key, path.read_bytes())
                except FileNotFoundError:
                    return
            else:
                store.put_file(key, path)
            self.synced[rel] = signature


def files_to_sync(log_dir: Path, patterns: list, everything: bool) -> list:
    """The run folder's files to upload: its record only, or (``everything``) the record, the
    checkpoints and the files matching ``patterns``, the record last."""
    if not everything:  # the record only; result.pkl before the status that announces it
        return [RESULT_PKL, STATUS_JSON]
    found = []
    for dirpath, dirnames, filenames in os.walk(log_dir):
        rel_dir = os.path.relpath(dirpath, log_dir)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d != BUNDLE_DIR]
        for name in filenames:
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if ".tmp-" in name or name.endswith(".lock"):  # (being written; locks)
                continue
            if rel in RECORD_FILES or rel.startswith(CHECKPOINT_DIR + os.sep) or any(
                    fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(name, p) for p in patterns):
                found.append(rel)
    # the record last: a reader who sees a final status.json finds result.pkl already there
    return sorted(found, key=lambda r: (r == STATUS_JSON, r == RESULT_PKL, r))
