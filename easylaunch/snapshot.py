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
from dataclasses import dataclass
from pathlib import Path

from easylaunch.errors import LaunchError

HASH_CHARS = 16


@dataclass(frozen=True)
class Entry:
    """One file of a code directory."""

    relpath: str
    size: int
    mtime_ns: int
    executable: bool
    link_target: str | None


@dataclass(frozen=True)
class Snapshot:
    """A code directory's snapshot: its content hash, where it is stored, and its size."""

    source: str
    digest: str
    path: Path
    size: int


_hash_by_fingerprint: dict[str, tuple[tuple[Entry, ...], str]] = {}


def _walk(root: str, excludes: list[str], skip_dirs: set[str]) -> tuple[Entry, ...]:
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(
            d for d in dirnames
            if not any(fnmatch.fnmatch(d, p) for p in excludes)
            and os.path.realpath(os.path.join(dirpath, d)) not in skip_dirs)
        for name in sorted(filenames):
            if any(fnmatch.fnmatch(name, p) for p in excludes):
                continue
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            link = os.readlink(full) if stat.S_ISLNK(st.st_mode) else None
            entries.append(Entry(os.path.relpath(full, root), st.st_size, st.st_mtime_ns,
                                 bool(st.st_mode & stat.S_IXUSR), link))
    return tuple(entries)


def _digest(root: str, entries: tuple[Entry, ...]) -> str:
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.relpath}\0{int(e.executable)}\0{e.link_target}\0".encode())
        if e.link_target is None:
            with open(os.path.join(root, e.relpath), "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        h.update(b"\0")
    return h.hexdigest()[:HASH_CHARS]


def _too_big(source: str, entries: tuple[Entry, ...], total: int, max_mb: float) -> LaunchError:
    largest = sorted(entries, key=lambda e: e.size, reverse=True)[:3]
    names = ", ".join(f"{e.relpath} ({e.size / 2**20:.1f} MB)" for e in largest)
    return LaunchError(
        f"the code directory {source} holds {total / 2**20:.1f} MB, more than "
        f"CODE_SNAPSHOT_MAX_MB={max_mb}; largest files: {names}. Move data out of the code "
        "directory (NON_CODE_DIRS_TO_MOUNT), add patterns to CODE_SNAPSHOT_EXCLUDES, or raise "
        "CODE_SNAPSHOT_MAX_MB.")


def _copy_into(source: str, entries: tuple[Entry, ...], dest: Path) -> None:
    for e in entries:
        target = dest / e.relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        if e.link_target is not None:
            os.symlink(e.link_target, target)
        else:
            shutil.copy2(os.path.join(source, e.relpath), target)


def snapshot(source: str, store: Path, excludes: list[str], max_mb: float,
             skip_dirs: set[str] = frozenset()) -> Snapshot:
    """Snapshot ``source`` into ``store`` (or find the existing snapshot of the same content)."""
    entries = _walk(source, excludes, {os.path.realpath(d) for d in skip_dirs})
    total = sum(e.size for e in entries)
    if total > max_mb * 2**20:
        raise _too_big(source, entries, total, max_mb)
    cached = _hash_by_fingerprint.get(source)
    digest = cached[1] if cached and cached[0] == entries else _digest(source, entries)
    _hash_by_fingerprint[source] = (entries, digest)
    final = store / digest
    if not final.is_dir():
        tmp = store / f".partial-{digest}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            _copy_into(source, entries, tmp)
            os.rename(tmp, final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not final.is_dir():  # not a lost race with another launcher: a real failure
                raise
    return Snapshot(source, digest, final, total)
