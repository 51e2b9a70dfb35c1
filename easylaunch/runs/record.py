"""What a launch asks for and what each of its runs leaves: the validated request
(:class:`LaunchRequest`, which every run's ``launch.json`` keeps), and a run's folder as its
records say (:class:`RunRecord`: its ids, ``launch.json``, ``status.json``), each file read
from disk once until it changes.

Modes take and return these records; the user's handle on a run, :class:`easylaunch.Job`, holds
one with the run's mode. ``launch.json`` changes only when a backend id is recorded, so it is
read once; ``status.json`` changes while the run runs, so each look at the run (a wait's poll:
:meth:`RunRecord.reload`) reads it again. Between reads a copy serves only while the file is the
one it was read from (same inode, size and modification time: a stat, not an open), so a change
written by anyone is seen.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easylaunch.errors import EasyLaunchError
from easylaunch_job.environment import process_start_time
from easylaunch_job.records import (
    STATUS_JSON,
    DamagedRecord,
    read_json,
    update_status,
    write_json_atomic,
)
from easylaunch_job.states import TERMINAL_STATES, JobState

if TYPE_CHECKING:
    from easylaunch.runs.bundle import Run

NOT_RETURNED = object()  # RunRecord.returned of a run that did not run in this process

LAUNCH_JSON = "launch.json"  # how a run was launched (written once, the backend added)
VARIANT_JSON = "variant.json"  # the run's variant, as data
LAUNCH_STORE = ".launches"  # one empty file per launch its mode took: <launch id>
PARTIAL_DIR = ".partial"  # in the log root: run folders being made, <host>-<pid>-<run id>


def sweep_of(launch: dict) -> str | None:
    """The sweep a run's launch.json names (runs launched before sweeps: their launch)."""
    return launch.get("sweep_id") or launch.get("launch_id")


def _host_prefix() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) + "-"


def partial_name(run_id: str) -> str:
    """The name in ``.partial`` of a run folder this process is making."""
    return f"{_host_prefix()}{os.getpid()}-{run_id}"


def abandoned_partials(root: Path) -> dict[str, Path]:
    """Half-made run folders, by run id, left by launchers of this machine that died."""
    prefix = _host_prefix()
    try:
        names = [e.name for e in os.scandir(root / PARTIAL_DIR) if e.name.startswith(prefix)]
    except FileNotFoundError:
        return {}
    found = {}
    for name in names:
        pid, _, run_id = name[len(prefix):].partition("-")
        if pid.isdigit() and process_start_time(int(pid)) is None:
            found[run_id] = root / PARTIAL_DIR / name
    return found


def place_abandoned(tmp: Path, error: str) -> None:
    """Move the folder of a registered run whose launch died before placing it into place,
    its status.json saying it failed with ``error``; one without a launch.json (never
    registered) is removed. Another process doing the same at once is harmless."""
    final = read_json(str(tmp / LAUNCH_JSON)).get("log_dir")
    if not final:
        shutil.rmtree(tmp, ignore_errors=True)
        return
    with contextlib.suppress(OSError):  # (gone, or placed by another process)
        os.makedirs(os.path.dirname(final), exist_ok=True)
        os.rename(tmp, final)
        update_status(final, state="failed", ended_at=time.time(), error=error)


def was_submitted(launch: dict) -> bool | None:
    """Whether a run's launch was handed to its mode (None: it predates these marks)."""
    if not launch.get("launch_id"):
        return None
    return (Path(launch["request"]["log_root"]) / LAUNCH_STORE / launch["launch_id"]).exists()


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a mode needs to check before anything is made or started."""

    method_call: Callable[..., Any] | None  # (None: read back from launch.json, the bundle has it)
    variants: list[dict]
    exp_name: str
    use_gpu: bool
    gpu_id: int | str | None
    log_root: Path
    slurm_config_name: str | None
    script_name: str

    @classmethod
    def of_launch(cls, launch: dict, variants: list[dict]) -> LaunchRequest:
        """The request a run was launched with, from its launch.json, for ``variants``
        (without the function: the run's bundle holds it)."""
        saved = launch["request"]
        return cls(method_call=None, variants=variants, exp_name=launch["exp_name"],
                   use_gpu=saved["use_gpu"], gpu_id=saved["gpu_id"],
                   log_root=Path(saved["log_root"]),
                   slurm_config_name=saved["slurm_config_name"],
                   script_name=launch["script_name"])


class DamagedRecordError(EasyLaunchError):
    """A run's status.json cannot be read (empty or cut short by a crash)."""


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of a file from another without opening it (None: no file)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


def until_changed(path: Path, timeout: float) -> None:
    """Return once the file at ``path`` changes, or after ``timeout`` seconds. It is looked
    at ten times in that while, at most every 2 ms: a short wait sees a change at once, a long
    one costs little."""
    before = _signature(path)
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(min(max(timeout / 10, 0.002), left))
        if _signature(path) != before:
            return


def _copy(content: dict) -> dict:
    """A copy of a record's content, as the file holds it (JSON's C code: several times a
    deep copy's pace)."""
    return json.loads(json.dumps(content, default=repr))


class _JsonFile:
    """A record file's content, read again only when forgotten or when the file changed."""

    def __init__(self, path: Path, content: dict | None = None) -> None:
        self.path = path
        # (a copy: the launching side's dict changes)
        self.content = None if content is None else _copy(content)
        self.signature = _signature(path) if content is not None else None

    def read(self) -> dict:
        """A copy of the content (empty where there is no file; a damaged one raises
        ``DamagedRecord``)."""
        signature = _signature(self.path)  # (before the read: a change during it is seen)
        if self.content is None or signature != self.signature:
            self.content = None
            self.content = read_json(str(self.path))
            self.signature = signature
        return _copy(self.content)

    def forget(self) -> None:
        self.content = None


class RunRecord:
    """One run's folder and its records (:attr:`launch_info`, :meth:`info`), as modes track
    it; the in-process value of a run that ran here (``here_no_doodad``) in :attr:`returned`."""

    def __init__(self, run_id: str, exp_name: str, log_dir: str | os.PathLike,
                 launch: dict | None = None) -> None:
        self.id = run_id
        self.exp_name = exp_name
        self.log_dir = Path(log_dir)
        self._launch = _JsonFile(self.log_dir / LAUNCH_JSON, launch)
        self._status = _JsonFile(self.log_dir / STATUS_JSON)
        self._unwritten_end: dict = {}  # an end that could not be written to status.json
        self.returned: Any = NOT_RETURNED

    @classmethod
    def of_run(cls, run: Run) -> RunRecord:
        """The record of a run just launched (its launch.json as the launch holds it)."""
        return cls(run.run_id, run.exp_name, run.log_dir, run.launch or None)

    @classmethod
    def read(cls, log_dir: str | os.PathLike) -> RunRecord:
        """The record of the run whose folder is ``log_dir`` (its launch.json read)."""
        record = _JsonFile(Path(log_dir) / LAUNCH_JSON)
        try:
            launch = record.read()
        except DamagedRecord as exc:
            raise EasyLaunchError(f"its {LAUNCH_JSON} is damaged, so the run cannot be "
                                  f"tracked or acted on ({exc})") from None
        if not launch:
            raise EasyLaunchError(f"{log_dir} is not an easylaunch run folder "
                                  f"(no {LAUNCH_JSON})")
        found = cls(launch["run_id"], launch["exp_name"], log_dir)
        found._launch = record
        return found

    @property
    def launch_info(self) -> dict:
        """The run's launch.json: mode, ids, host, versions, command line, git commits."""
        return self._launch.read()

    def reload(self) -> None:
        """A new look at the run: the next :meth:`info` reads status.json again."""
        self._status.forget()

    def status_json(self) -> dict:
        """status.json as the file holds it (empty where there is none; a damaged one raises
        ``DamagedRecord``)."""
        return self._status.read()

    def info(self) -> dict:
        """The run's status.json (state, times, exit code, error), as :meth:`status_json`.

        A run whose folder is gone reads as failed, with the reason; one without a status.json
        (its launch writes it last) as queued; a damaged status.json raises
        :class:`DamagedRecordError` for this run alone.
        """
        if not self.log_dir.is_dir():
            return {"state": "failed", "error": f"the run folder {self.log_dir} no longer "
                                                "exists (deleted or moved): its outcome is lost"}
        try:
            status = self.status_json()
        except DamagedRecord as exc:
            if self._unwritten_end:
                return self._unwritten_end
            raise DamagedRecordError(f"run {self.id}: {exc}; its state is unknown until the run "
                                     "writes it again") from None
        if self._unwritten_end and status.get("state") not in TERMINAL_STATES:
            return {**status, **self._unwritten_end}
        return status or {"state": "queued"}  # (none yet: the launch writes it last)

    def recorded_state(self) -> JobState:
        """The state in the run's own status.json, without asking the backend."""
        return JobState(self.info().get("state", "unknown"))

    def record_backend(self, **ids: Any) -> None:
        """Store backend ids (a new instance, a new job) in launch.json, as
        :meth:`easylaunch.runs.bundle.Run.record_backend` does at launch."""
        launch = self.launch_info
        launch.setdefault("backend", {}).update(ids)
        write_json_atomic(str(self.log_dir / LAUNCH_JSON), launch)
        self._launch = _JsonFile(self._launch.path, launch)

    def record_end(self, state: str, error: str) -> None:
        """Record a terminal state for a run whose own record has none (the first end wins).

        Where status.json cannot be written (a full disk), this record keeps the end, with
        the reason it is not on disk.
        """
        try:
            update_status(str(self.log_dir), state=state, ended_at=time.time(), error=error)
        except OSError as exc:
            self._unwritten_end = {"state": state, "ended_at": time.time(),
                                   "error": f"{error} (not saved in status.json: {exc})"}
