"""Content-addressed snapshots of code directories, made once per unique content.

A snapshot lives in ``<store>/<hash>/`` where the hash covers every file's path, mode bit and
bytes. Launching the same code again (another variant, another call, another process) finds the
folder and reuses it. Within a process, a walk that sees the same sizes and modification times
as last time reuses the hash without reading the files again.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import stat
import uuid
import warnings
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from easylaunch.errors import LaunchError

HASH_CHARS = 16


@dataclass(frozen=True)
class SnapshotFile:
    """One file of a code directory (symbolic links are followed)."""

    relpath: str
    size: int
    mtime_ns: int
    executable: bool


@dataclass(frozen=True)
class Snapshot:
    """A code directory's snapshot: its content hash and where it is stored."""

    source: str
    digest: str
    path: Path


_hash_by_fingerprint: dict[str, tuple[tuple[SnapshotFile, ...], str]] = {}


def _excluded(name: str, excludes: list[str]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in excludes)


def _walk(root: str, excludes: list[str], skip_dirs: set[str]) -> tuple[SnapshotFile, ...]:
    """Regular files under ``root``, links followed (each real folder once), sorted."""
    entries, seen = [], {os.path.realpath(root)}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        kept = []
        for d in sorted(dirnames):
            real = os.path.realpath(os.path.join(dirpath, d))
            if not _excluded(d, excludes) and real not in skip_dirs and real not in seen:
                seen.add(real)
                kept.append(d)
        dirnames[:] = kept
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if _excluded(name, excludes):
                continue
            try:
                st = os.stat(full)
            except OSError as exc:
                warnings.warn(f"code snapshot of {root}: leaving out {full} ({exc.strerror})",
                              stacklevel=4)
                continue
            if not stat.S_ISREG(st.st_mode):
                warnings.warn(f"code snapshot of {root}: leaving out {full}, which is not a "
                              "regular file", stacklevel=4)
                continue
            entries.append(SnapshotFile(os.path.relpath(full, root), st.st_size, st.st_mtime_ns,
                                 bool(st.st_mode & stat.S_IXUSR)))
    return tuple(entries)


def _digest(root: Path, entries: tuple[SnapshotFile, ...]) -> str:
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.relpath}\0{int(e.executable)}\0".encode())
        with open(root / e.relpath, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        h.update(b"\0")
    return h.hexdigest()[:HASH_CHARS]


def _too_big(source: str, entries: tuple[SnapshotFile, ...], total: int,
             max_mb: float) -> LaunchError:
    largest = sorted(entries, key=lambda e: e.size, reverse=True)[:3]
    names = ", ".join(f"{e.relpath} ({e.size / 2**20:.1f} MB)" for e in largest)
    return LaunchError(
        f"the code directory {source} holds {total / 2**20:.1f} MB, more than "
        f"CODE_SNAPSHOT_MAX_MB={max_mb}; largest files: {names}. Move data out of the code "
        "directory (NON_CODE_DIRS_TO_MOUNT), add patterns to CODE_SNAPSHOT_EXCLUDES, or raise "
        "CODE_SNAPSHOT_MAX_MB.")


def _copy_into(source: str, entries: tuple[SnapshotFile, ...], dest: Path) -> None:
    for e in entries:
        target = dest / e.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copy2(os.path.join(source, e.relpath), target)
        except OSError as exc:
            raise LaunchError(
                f"cannot copy {os.path.join(source, e.relpath)} into the code snapshot "
                f"({exc.strerror}); make it readable or add it to CODE_SNAPSHOT_EXCLUDES"
            ) from exc


def snapshot(source: str, store: Path, excludes: list[str], max_mb: float,
             skip_dirs: AbstractSet[str] = frozenset()) -> Snapshot:
    """Snapshot ``source`` into ``store`` (or find the existing snapshot of the same content).

    The hash is taken over the copy, so a file edited during the launch cannot leave a
    snapshot whose content differs from its name.
    """
    entries = _walk(source, excludes, {os.path.realpath(d) for d in skip_dirs})
    total = sum(e.size for e in entries)
    if total > max_mb * 2**20:
        raise _too_big(source, entries, total, max_mb)
    cached = _hash_by_fingerprint.get(source)
    if cached and cached[0] == entries and (store / cached[1]).is_dir():
        return Snapshot(source, cached[1], store / cached[1])
    tmp = store / f".partial-{uuid.uuid4().hex[:12]}"
    tmp.mkdir(parents=True)
    try:
        _copy_into(source, entries, tmp)
        digest = _digest(tmp, entries)
        try:
            os.rename(tmp, store / digest)
        except OSError:
            if not (store / digest).is_dir():  # not a lost race with another launcher
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _hash_by_fingerprint[source] = (entries, digest)
    return Snapshot(source, digest, store / digest)
