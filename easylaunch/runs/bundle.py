"""Run folders and run bundles.

Every run gets its own folder ``<root>/<exp_name>/<date>_<exp_name>_<id>/``. It is built in
``<root>/.partial/`` and, once complete, registered, moved into place and given its
``status.json``, in that order: a launch killed at any instant leaves no folder the registry
lacks, and no temporary folder that looks like a run.

The folder holds ``variant.json``, ``launch.json``, ``status.json``, the git diffs, and
``bundle/``: the pickled function and variant, ``bundle.json`` (metadata the runner reads), a
copy of the runner, and ``code/`` links to the content-addressed code snapshots.
"""

from __future__ import annotations

import contextlib
import functools
import getpass
import hashlib
import os
import re
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easylaunch.errors import LaunchError
from easylaunch.runs.jobpack import job_archive
from easylaunch.runs.record import (
    LAUNCH_JSON,
    LAUNCH_STORE,
    PARTIAL_DIR,
    VARIANT_JSON,
    partial_name,
    sweep_of,
)
from easylaunch.runs.snapshot import Snapshot
from easylaunch.runs.variants import as_data
from easylaunch_job.command import Command
from easylaunch_job.config import GitInfo
from easylaunch_job.environment import cloudpickle_version, process_start_time, python_minor
from easylaunch_job.records import (
    BLOB_STORE,
    BUNDLE_DIR,
    BUNDLE_FORMAT,
    BUNDLE_JSON,
    FUNCTION_PKL,
    JOB_PYZ,
    STATUS_JSON,
    VARIANT_PKL,
    read_json,
    write_bytes_atomic,
    write_json_atomic,
)

CODE_DIR = "code"
GIT_DIR = "git"
OLD_RUNNER = "runner.py"  # the job side in bundles made before easylaunch_job (one file)

ID_CHARS = 8


@dataclass
class Run:
    """One run as launched: its id, folder and what the mode needs to start it."""

    run_id: str
    exp_name: str
    mode: str
    log_dir: Path
    variant: dict
    launch: dict = field(default_factory=dict)
    meta: dict = field(default_factory=dict)

    @property
    def bundle_dir(self) -> Path:
        return self.log_dir / BUNDLE_DIR

    @property
    def code_dirs(self) -> list[Path]:
        """The snapshot folders of this run, in CODE_DIRS_TO_MOUNT order."""
        return [self.bundle_dir / d for d in self.meta["code_dirs"]]

    def record_backend(self, **ids: Any) -> None:
        """Store the backend's ids (pid, job id, instance id) in launch.json."""
        self.launch.setdefault("backend", {}).update(ids)
        write_json_atomic(str(self.log_dir / LAUNCH_JSON), self.launch)


def new_run_id() -> str:
    """A short random id, unique within an experiment folder."""
    return uuid.uuid4().hex[:ID_CHARS]


def run_folder_name(exp_name: str, run_id: str, prepend_date: bool, now: float) -> str:
    """``<date>_<exp_name>_<id>`` (without the date when prepend_date is False)."""
    name = f"{exp_name}_{run_id}"
    return f"{time.strftime('%Y-%m-%d_%H-%M-%S', time.localtime(now))}_{name}" if prepend_date \
        else name


def _safe_name(directory: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(directory.rstrip("/"))) or "code"


@dataclass(frozen=True)
class BundleSpec:
    """What every run of one launch request shares."""

    root: Path
    exp_name: str
    mode: str
    function_bytes: bytes
    use_gpu: bool
    gpu_id: int | str | None
    prepend_date: bool
    git_infos: list[GitInfo]
    snapshots: list[Snapshot]  # empty for modes that run in this process
    script_name: str
    write_bundle: bool
    runs_here: bool  # the mode runs the function in this process as soon as the run is made
    request: dict  # what resubmitting needs again: settings, mode options, GPU and log choices
    launch_id: str = ""  # names this launch's mark of submission (mark_submitted)
    sweep_id: str = ""  # the sweep the runs belong to (default: this launch)
    extra_launch_info: dict = field(default_factory=dict)  # doodad's keys, from the mode
    blobs: dict[str, Path] = field(default_factory=dict)  # bundle file name -> stored once
    restart: dict = field(default_factory=dict)  # the runner's RestartPolicy, as bundle.json has it
    trackers: dict = field(default_factory=dict)  # bundle.json's: names, exp_name, sweep
    command: Command | None = None  # a command launch's payload (each run's command, shown)
    folder_mode: int = 0o700  # RUN_FOLDER_MODE
    launch_dir: str | None = None  # where a command with no code folder runs (None: where the
    # runs do not see this machine's folders)
    again: tuple[dict, ...] = ()  # a resubmit's: each run's launch.json fields of the run it reruns


def make_store(path: Path, mode: int) -> Path:
    """Make a folder easylaunch keeps things in, with permissions ``mode`` when this call
    makes it (an existing folder keeps its own)."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, mode)
    return path


def blob_name(name: str, data: bytes) -> str:
    """The name of ``data`` (a file called ``name``) in the blob store: ``<digest>.<name>``."""
    return f"{hashlib.sha256(data).hexdigest()[:32]}.{name}"


def store_blob(root: Path, name: str, data: bytes) -> Path:
    """Keep ``data`` once per content in ``<root>/.blobs/``; return its path there.

    Bundles link to it, so a sweep holds one pickled function and one job side, not one per
    run.
    """
    path = root / BLOB_STORE / blob_name(name, data)
    if not path.exists():
        write_bytes_atomic(str(path), data)
    return path


def bundle_blobs(root: Path, function_bytes: bytes, mode: int) -> dict[str, Path]:
    """The pickled function and the job side of a launch, stored once per content."""
    make_store(root / BLOB_STORE, mode)
    return {FUNCTION_PKL: store_blob(root, FUNCTION_PKL, function_bytes),
            JOB_PYZ: store_blob(root, JOB_PYZ, job_archive())}


def _launcher_fields(now: float) -> dict:
    """What launch.json says of the launching process (a resubmit gets its own)."""
    return {"launched_at": now, **_this_process(os.getpid()), "command_line": sys.argv,
            "cwd": os.getcwd()}


@functools.lru_cache(maxsize=1)
def _this_process(pid: int) -> dict:
    """What stays the same in one process (asked by its pid: a fork is another process)."""
    return {"host": socket.gethostname(), "user": getpass.getuser(), "launcher_pid": pid,
            "launcher_started": process_start_time(pid), "python": sys.version.split()[0],
            "python_executable": sys.executable, "cloudpickle": cloudpickle_version()}


def _launch_record(spec: BundleSpec, run_id: str, log_dir: Path, index: int) -> dict:
    return {
        "run_id": run_id,
        "exp_name": spec.exp_name,
        "mode": spec.mode,
        "log_dir": str(log_dir),
        "sweep_index": index,
        "launch_id": spec.launch_id,
        "sweep_id": spec.sweep_id or spec.launch_id,
        **_launcher_fields(time.time()),
        "script_name": spec.script_name,
        "git_commits": {g.directory: g.commit_hash for g in spec.git_infos},
        "code_snapshots": [{"source": s.source, "digest": s.digest} for s in spec.snapshots],
        "request": spec.request,
        "backend": {},
    }


def _bundle_metadata(spec: BundleSpec, run_id: str, final: Path, code_dirs: list[str]) -> dict:
    return {
        "format": BUNDLE_FORMAT,
        "run_id": run_id,
        "exp_name": _doodad_exp_name(spec.exp_name, spec.prepend_date),
        "log_dir": str(final),
        "python_minor": python_minor(),
        "cloudpickle": cloudpickle_version(),
        "use_gpu": spec.use_gpu,
        "gpu_id": spec.gpu_id,
        "git_infos": [list(g) for g in spec.git_infos],
        "script_name": spec.script_name,
        "code_dirs": code_dirs,
        "launch_dir": spec.launch_dir,
        "restart": spec.restart,
        **({"trackers": dict(spec.trackers, run_id=run_id)} if spec.trackers else {}),
        "extra_launch_info": {"base_exp_name": spec.exp_name, "instance_type": "None",
                              **spec.extra_launch_info, "mode": spec.mode, "run_id": run_id},
    }


def _doodad_exp_name(exp_name: str, prepend_date: bool) -> str:
    """``doodad_config.exp_name`` as doodad gave it: dated (``24-05-17-name``) by default."""
    return f"{time.strftime('%y-%m-%d')}-{exp_name}" if prepend_date else exp_name


def _write_bundle(spec: BundleSpec, tmp: Path, final: Path, meta: dict,
                  variant_bytes: bytes) -> None:
    bundle = tmp / BUNDLE_DIR
    code_dirs = meta["code_dirs"]
    (bundle / CODE_DIR).mkdir(parents=True)
    for name, snap in zip(code_dirs, spec.snapshots, strict=True):
        link = bundle / name
        os.symlink(os.path.relpath(snap.path, final / BUNDLE_DIR / CODE_DIR), link)
    for name, blob in spec.blobs.items():
        os.symlink(os.path.relpath(blob, final / BUNDLE_DIR), bundle / name)
    write_bytes_atomic(str(bundle / VARIANT_PKL), variant_bytes)
    write_json_atomic(str(bundle / BUNDLE_JSON), meta)


def _write_git_patches(folder: Path, git_infos: list[GitInfo]) -> None:
    for i, info in enumerate(git_infos):
        name = f"{i}-{_safe_name(info.directory)}"
        for suffix, diff in (("diff", info.code_diff), ("staged.diff", info.code_diff_staged)):
            if diff:
                (folder / GIT_DIR).mkdir(exist_ok=True)
                (folder / GIT_DIR / f"{name}.{suffix}").write_text(diff + "\n")


@contextlib.contextmanager
def _new_run_folder(exp_dir: Path, exp_name: str, prepend_date: bool, now: float,
                    mode: int) -> Iterator[tuple[str, Path, Path]]:
    """Yield (run id, temporary folder, final path); the temporary folder is removed if the
    caller fails before placing it (:func:`_put_in_place`)."""
    while True:
        run_id = new_run_id()
        final = exp_dir / run_folder_name(exp_name, run_id, prepend_date, now)
        if not final.exists():
            break
    tmp = exp_dir.parent / PARTIAL_DIR / partial_name(run_id)
    try:
        tmp.mkdir(mode)
    except FileNotFoundError:  # (the log root's first run)
        make_store(tmp.parent, mode)
        tmp.mkdir(mode)
    os.chmod(tmp, mode)  # whatever the umask
    try:
        yield run_id, tmp, final
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


Register = Callable[["Run"], None]  # adds a run's row to the registry


def _put_in_place(run: Run, tmp: Path, status: dict, register: Register) -> Run:
    """Register the complete run, move its folder into place, then write its status.json.

    A launch killed between these steps leaves a registered run whose folder is in
    ``.partial`` or has no status.json yet; both read as never started
    (:func:`~easylaunch.runs.record.place_abandoned`; a missing status.json reads as queued).
    """
    register(run)
    try:
        os.rename(tmp, run.log_dir)
    except FileNotFoundError:  # (the experiment's first run)
        run.log_dir.parent.mkdir(parents=True, exist_ok=True)
        os.rename(tmp, run.log_dir)
    write_json_atomic(str(run.log_dir / STATUS_JSON), status)
    return run


def _queued_status(run_id: str, now: float, **extra: Any) -> dict:
    return {"state": "queued", "run_id": run_id, "queued_at": now, **extra}


def create_run(spec: BundleSpec, variant: dict, variant_bytes: bytes, index: int,
               register: Register) -> Run:
    """Make one complete run folder (and bundle) under a temporary name, then register it,
    move it into place and write its status (:func:`_put_in_place`)."""
    code_dirs = [f"{CODE_DIR}/{i}-{_safe_name(s.source)}" for i, s in enumerate(spec.snapshots)]
    now = time.time()
    with _new_run_folder(spec.root / spec.exp_name, spec.exp_name, spec.prepend_date,
                         now, spec.folder_mode) as (run_id, tmp, final):
        launch = _launch_record(spec, run_id, final, index)
        again = spec.again[index] if spec.again else {}
        launch.update(again)
        if spec.command is not None:
            launch["command"] = spec.command.argv(variant)
        meta = _bundle_metadata(spec, run_id, final, code_dirs)
        write_json_atomic(str(tmp / VARIANT_JSON), as_data(variant)[0])
        write_json_atomic(str(tmp / LAUNCH_JSON), launch)
        status = _queued_status(run_id, now, **{
            k: again[k] for k in ("resubmitted_from",) if k in again})
        if spec.runs_here:
            status.update(state="running", started_at=now, pid=os.getpid())
        _write_git_patches(tmp, spec.git_infos)
        if spec.write_bundle:
            _write_bundle(spec, tmp, final, meta, variant_bytes)
        run = Run(run_id, spec.exp_name, spec.mode, final, variant, launch, meta)
        return _put_in_place(run, tmp, status, register)


def mark_submitted(root: Path, launch_id: str, mode: int) -> None:
    """Note that the runs of a launch were handed to their mode (one file per launch, in a
    store made with the run folders' permissions ``mode``, so whoever reads them reads it)."""
    (make_store(root / LAUNCH_STORE, mode) / launch_id).touch()


def _renew_job_side(bundle: Path, final_bundle: Path, root: Path) -> None:
    """Give a copied bundle whose job side is gone from the store (removed by hand), or that
    still has the one-file runner of older releases, the job side of this release
    (``job.pyz``, which every mode starts); a bundle keeps the job side it has otherwise."""
    if (bundle / JOB_PYZ).exists() or not (
            os.path.lexists(bundle / JOB_PYZ) or os.path.lexists(bundle / OLD_RUNNER)):
        return
    for name in (JOB_PYZ, OLD_RUNNER):
        with contextlib.suppress(FileNotFoundError):
            (bundle / name).unlink()
    make_store(root / BLOB_STORE, root.stat().st_mode & 0o777)
    blob = store_blob(root, JOB_PYZ, job_archive())
    os.symlink(os.path.relpath(blob, final_bundle), bundle / JOB_PYZ)


def _check_links(bundle: Path, run_id: str) -> None:
    """Refuse a copied bundle that links to a pickled function or code snapshot no longer
    in its store, naming what is gone and where."""
    gone = [link for folder in (bundle, bundle / CODE_DIR) if folder.is_dir()
            for link in folder.iterdir() if link.is_symlink() and not link.exists()]
    if gone:
        named = ", ".join(os.path.normpath(os.path.join(link.parent, os.readlink(link)))
                          for link in gone)
        raise LaunchError(f"run {run_id} cannot run again as launched: its bundle links to "
                          f"{named}, which is gone. Resubmit it with --current-code (Python: "
                          "current_code=True) to rebuild it from its script and code folders "
                          "as they are now")


def clone_run(old_dir: Path, launch_id: str, register: Register, request: dict | None = None,
              restart: dict | None = None, record: dict | None = None) -> Run:
    """A new run of an old run's bundle: same function, variant and code snapshots, new id
    (``request``: launch.json's request fields that change, such as mode options or the
    settings file; ``restart``: bundle.json's restart policy, where the settings changed it;
    ``record``: other launch.json fields to set).

    The new folder sits beside the old one and links to the same snapshots. A bundle made
    before easylaunch_job (its job side a ``runner.py``), or whose job side is gone from the
    store, gets today's job side instead; one whose function or snapshots are gone is refused.
    """
    old_launch = read_json(str(old_dir / LAUNCH_JSON))
    old_meta = read_json(str(old_dir / BUNDLE_DIR / BUNDLE_JSON))
    exp_name = old_launch["exp_name"]
    now = time.time()
    with _new_run_folder(old_dir.parent, exp_name, old_launch["request"]["prepend_date"],
                         now, old_dir.stat().st_mode & 0o777) as (run_id, tmp, final):
        shutil.copytree(old_dir / BUNDLE_DIR, tmp / BUNDLE_DIR, symlinks=True)
        _renew_job_side(tmp / BUNDLE_DIR, final / BUNDLE_DIR, old_dir.parent.parent)
        _check_links(tmp / BUNDLE_DIR, old_launch["run_id"])
        if (old_dir / GIT_DIR).is_dir():
            shutil.copytree(old_dir / GIT_DIR, tmp / GIT_DIR)
        shutil.copy2(old_dir / VARIANT_JSON, tmp / VARIANT_JSON)
        meta = dict(old_meta, run_id=run_id, log_dir=str(final),
                    extra_launch_info=dict(old_meta["extra_launch_info"], run_id=run_id))
        if meta.get("trackers"):
            meta["trackers"] = dict(meta["trackers"], run_id=run_id)
        if restart is not None:
            meta["restart"] = restart
        write_json_atomic(str(tmp / BUNDLE_DIR / BUNDLE_JSON), meta)
        launch = dict(old_launch, **_launcher_fields(now), run_id=run_id, log_dir=str(final),
                      launch_id=launch_id, backend={}, resubmitted_from=old_launch["run_id"],
                      sweep_id=sweep_of(old_launch),
                      request=dict(old_launch["request"], **(request or {})), **(record or {}))
        write_json_atomic(str(tmp / LAUNCH_JSON), launch)
        variant = read_json(str(tmp / VARIANT_JSON))
        run = Run(run_id, exp_name, old_launch["mode"], final, variant, launch, meta)
        return _put_in_place(run, tmp, _queued_status(
            run_id, now, resubmitted_from=old_launch["run_id"]), register)
