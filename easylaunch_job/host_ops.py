"""The operations a transport runs on the machine that holds the runs (the remote half of the
transport): a list of small operations in, one answer each out.

A transport sends ``answer(ops)`` a whole batch of operations (read these status files, run
squeue, touch a cancel marker, move uploaded folders into place) and gets every result back in
one round trip. Over SSH the whole job package travels (held in memory there, nothing is
installed) and this module answers on the far side's own Python.

Each op is a dict with an ``op`` name, typed for mypy by its own TypedDict below (``RunOp``:
``{"op": "run", "argv": [...]}``); each answer is a dict, with ``error`` when that op failed
(the others still run). Paths may start with ``~``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from easylaunch_job.environment import cloudpickle_version, is_alive, process_start_time
from easylaunch_job.records import update_status

READ_LIMIT = 1 << 20  # a status.json or job id file is far smaller

if TYPE_CHECKING:  # (annotations only, checked by mypy: dict[...] is no value on Python 3.8)
    from collections.abc import Callable, Sequence
    from typing import Literal, TypedDict

    Answer = dict[str, Any]  # one op's answer, as JSON

    # The operations, each as JSON: its ``op`` name and arguments.
    class InfoOp(TypedDict):
        op: Literal["info"]

    class WhichOp(TypedDict):
        op: Literal["which"]
        names: Sequence[str]

    class PrepareDirOp(TypedDict):
        op: Literal["prepare_dir"]
        path: str

    class ExistsOp(TypedDict):
        op: Literal["exists"]
        paths: Sequence[str]

    class _ReadOp(TypedDict):
        op: Literal["read"]
        paths: Sequence[str]

    class ReadOp(_ReadOp, total=False):
        limit: int

    class _RunOp(TypedDict):
        op: Literal["run"]
        argv: Sequence[str]

    class RunOp(_RunOp, total=False):
        cwd: str
        timeout: float

    class _DetachOp(TypedDict):
        op: Literal["detach"]
        argv: Sequence[str]
        log: str

    class DetachOp(_DetachOp, total=False):
        cwd: str

    class AliveOp(TypedDict):
        op: Literal["alive"]
        pids: Sequence[Sequence[Any]]  # [pid, start time] pairs

    class TouchOp(TypedDict):
        op: Literal["touch"]
        paths: Sequence[str]

    class UpdateStatusOp(TypedDict):
        op: Literal["update_status"]
        folders: Sequence[str]
        fields: dict[str, Any]

    class UnpackOp(TypedDict):
        op: Literal["unpack"]
        root: str
        tar: str  # base64 of a tar.gz

    class PlaceOp(TypedDict):
        op: Literal["place"]
        incoming: str
        store: str
        root: str
        shared: Sequence[str]
        plain: Sequence[str]

    class OpenTasksOp(TypedDict):
        op: Literal["open_tasks"]
        taskfile: str
        state_dir: str

    class PoolAddOp(TypedDict):
        op: Literal["pool_add"]
        folder: str
        tasks: Sequence[str]
        runs: Sequence[str]  # bundle<TAB>log dir, one per task

    class _PoolOp(TypedDict):
        op: Literal["pool"]
        action: Literal["find", "list", "stop"]
        root: str  # the log root the pools are under

    class PoolOp(_PoolOp, total=False):
        name: str

    Op = (InfoOp | WhichOp | PrepareDirOp | ExistsOp | ReadOp | RunOp | DetachOp | AliveOp
          | TouchOp | UpdateStatusOp | UnpackOp | PlaceOp | OpenTasksOp | PoolAddOp | PoolOp)


def _path(path: str) -> str:
    return os.path.abspath(os.path.expanduser(path))


def _info(op: InfoOp) -> Answer:
    """The far side's Python, cloudpickle and home folder."""
    return {"python": list(sys.version_info[:3]), "executable": sys.executable,
            "cloudpickle": cloudpickle_version(), "home": os.path.expanduser("~"),
            "host": os.uname().nodename, "cpus": os.cpu_count()}


def _which(op: WhichOp) -> Answer:
    return {"found": {name: shutil.which(name) for name in op["names"]}}


def _prepare_dir(op: PrepareDirOp) -> Answer:
    """Make a folder (and its parents), prove it writable, say how much room it has."""
    path = _path(op["path"])
    try:
        os.makedirs(path, exist_ok=True)
        probe = os.path.join(path, f".easylaunch-write-test-{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as exc:
        return {"error": f"{path} cannot be written: {exc.strerror or exc}",
                "path": path, "errno": exc.errno}
    stat = os.statvfs(path)
    return {"path": path, "free": stat.f_bavail * stat.f_frsize}


def _exists(op: ExistsOp) -> Answer:
    return {"exists": [os.path.lexists(_path(p)) for p in op["paths"]]}


def _read(op: ReadOp) -> Answer:
    """Text of each file (None where missing), with its size and modification time."""
    files: dict[str, dict[str, Any] | None] = {}
    for name in op["paths"]:
        try:
            with open(_path(name), "rb") as f:
                data = f.read(op.get("limit", READ_LIMIT))
            files[name] = {"text": data.decode("utf-8", "replace"),
                           "mtime": os.stat(_path(name)).st_mtime}
        except OSError:
            files[name] = None
    return {"files": files}


def _run(op: RunOp) -> Answer:
    argv = [os.path.expanduser(a) if a.startswith("~/") else a for a in op["argv"]]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=op.get("timeout", 60),
                             cwd=_path(op["cwd"]) if op.get("cwd") else None)
    except FileNotFoundError:
        return {"rc": 127, "out": "", "err": f"{argv[0]}: command not found"}
    except subprocess.TimeoutExpired:
        return {"rc": 124, "out": "", "err": "{}: no answer in {} s".format(
            argv[0], op.get("timeout", 60))}
    return {"rc": out.returncode, "out": out.stdout, "err": out.stderr}


def _detach(op: DetachOp) -> Answer:
    """Start a command that outlives this connection (its own session, output to a log)."""
    log = _path(op["log"])
    os.makedirs(os.path.dirname(log), exist_ok=True)
    with open(log, "ab") as out, open(os.devnull, "rb") as null:
        proc = subprocess.Popen([os.path.expanduser(a) for a in op["argv"]], stdin=null,
                                stdout=out, stderr=out, start_new_session=True,
                                cwd=_path(op["cwd"]) if op.get("cwd") else None)
    return {"pid": proc.pid, "started": process_start_time(proc.pid)}


def _alive(op: AliveOp) -> Answer:
    """Whether each [pid, start time] is still the same running process."""
    return {"alive": [is_alive(pid, started) for pid, started in op["pids"]]}


def _touch(op: TouchOp) -> Answer:
    """Make empty files (and their own folder, whose parent must exist)."""
    for name in op["paths"]:
        path = _path(name)
        if not os.path.isdir(os.path.dirname(os.path.dirname(path))):
            return {"error": f"{os.path.dirname(os.path.dirname(path))} does not exist"}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
    return {}


def _update_status(op: UpdateStatusOp) -> Answer:
    """Merge fields into run folders' status.json (under its lock)."""
    for folder in op["folders"]:
        if os.path.isdir(_path(folder)):
            update_status(_path(folder), **op["fields"])
    return {}


def _unpack(op: UnpackOp) -> Answer:
    """Unpack files sent inline (a base64 gzipped tar) under ``root``."""
    import base64
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(op["tar"])), mode="r:gz") as tar:
        tar.extractall(_path(op["root"]))  # noqa: S202 - made by this launch's own side
    return {}


def _link_tree(source: str, dest: str) -> None:
    """``dest`` as a copy of ``source`` made of hard links (a real copy across file systems)."""
    tmp = f"{dest}.tmp-{os.getpid()}"
    try:
        shutil.copytree(source, tmp, symlinks=True, copy_function=os.link)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp, symlinks=True)
    os.rename(tmp, dest)


def _place(op: PlaceOp) -> Answer:
    """Move uploaded items from the incoming folder into place.

    ``shared`` items are content-addressed: kept once in ``store`` (a later upload of the
    same content is dropped), then linked to where ``root`` needs them. ``plain`` items must
    not exist yet: an earlier run is never overwritten.
    """
    incoming, store, root = _path(op["incoming"]), _path(op["store"]), _path(op["root"])
    for rel in op["shared"]:
        kept, dest = os.path.join(store, rel), os.path.join(root, rel)
        os.makedirs(os.path.dirname(kept), exist_ok=True)
        if os.path.lexists(os.path.join(incoming, rel)):
            if os.path.lexists(kept):
                _remove(os.path.join(incoming, rel))
            else:
                os.rename(os.path.join(incoming, rel), kept)
        if not os.path.lexists(kept):
            return {"error": f"{kept} was not uploaded"}
        if dest != kept and not os.path.lexists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if os.path.isdir(kept):
                _link_tree(kept, dest)
            else:
                _link_file(kept, dest)
    # a new run's items move as its one folder (one rename, not one an item)
    folders: dict[str, list[str]] = {}
    for rel in op["plain"]:
        folders.setdefault(os.path.dirname(rel), []).append(rel)
    for folder, rels in folders.items():
        source, dest = os.path.join(incoming, folder), os.path.join(root, folder)
        if folder and not os.path.lexists(dest) and \
                sorted(os.listdir(source)) == sorted(os.path.basename(r) for r in rels):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(source, dest)
            continue
        for rel in rels:
            source, dest = os.path.join(incoming, rel), os.path.join(root, rel)
            if os.path.lexists(dest):
                return {"error": f"{dest} exists already; it is left as it is"}
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.rename(source, dest)
    for rel in [*op["shared"], *op["plain"]]:  # the folders that held them, now empty
        parent = os.path.dirname(os.path.join(incoming, rel))
        while parent != incoming:
            if os.path.isdir(parent):
                if os.listdir(parent):
                    break
                os.rmdir(parent)
            parent = os.path.dirname(parent)
    return {}


def _link_file(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def _open_tasks(op: OpenTasksOp) -> Answer:
    """The tasks of a packer's task file that may still run (see packer.open_tasks)."""
    from easylaunch_job.packer import open_tasks

    return {"open": open_tasks(_path(op["taskfile"]), _path(op["state_dir"]))}


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        os.remove(path)


# (each takes its own kind of op: the dispatch reads the "op" name)
def _pool_add(op: PoolAddOp) -> Answer:
    """Add runs to a warm pool (see pool.add_runs): the first one's task index and the pool's
    record; an error naming why where the pool has ended."""
    from easylaunch_job.pool import PoolEnded, add_runs

    try:
        return add_runs(_path(op["folder"]), op["tasks"], op["runs"])
    except PoolEnded as exc:
        return {"error": f"the pool has ended: {exc}", "ended": True}


def _pool(op: PoolOp) -> Answer:
    """A pool command (see pool.command): find or stop a pool, or list them."""
    from easylaunch_job.pool import command

    return command(_path(op["root"]), op["action"], op.get("name"))


OPS: dict[str, Callable[[Any], Answer]] = {
    "info": _info, "which": _which, "prepare_dir": _prepare_dir, "exists": _exists,
    "read": _read, "run": _run, "detach": _detach, "alive": _alive, "touch": _touch,
    "update_status": _update_status, "unpack": _unpack, "place": _place,
    "open_tasks": _open_tasks, "pool_add": _pool_add, "pool": _pool}


def answer(ops: list[Op]) -> list[Answer]:
    """Run ``ops`` in order; one answer each (an op that fails says why, the rest still run)."""
    answers: list[Answer] = []
    for op in ops:
        try:
            answers.append(OPS[op["op"]](op))
        except OSError as exc:
            full = exc.errno == errno.ENOSPC
            answers.append({"error": "{}{}".format(
                "the disk is full: " if full else "", exc), "errno": exc.errno})
        answers[-1]["time"] = time.time()
    return answers
