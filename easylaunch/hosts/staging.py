"""Copying what runs need to the far side: content-addressed, resumable, placed atomically.

Code snapshots, pickled functions, runners and packed environments are kept once per content
in a store there (``.snapshots``, ``.blobs``, ``.envs``), so a second sweep with the same code
copies none of them again. Everything travels into ``<store>/.incoming`` first (rsync
``--partial``: a copy that was cut off resumes on the next launch) and is then moved into place
in one far-side step, so the far side never holds half a run or half a snapshot.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from easylaunch.bundle import CODE_DIR
from easylaunch.hosts.transport import HostError, Transport, checked

INCOMING = ".incoming"
HEADROOM = 1.1  # refuse a copy that would leave the far side's disk all but full


@dataclass(frozen=True)
class Upload:
    """What one launch copies: items relative to ``local_root`` that go under ``root`` there.

    ``shared`` items are content-addressed (named by their digest): kept once in ``store``
    and linked into ``root`` where that is another folder. ``plain`` items are new (run
    folders, job scripts) and never overwrite anything there.
    """

    local_root: Path
    root: str
    store: str
    shared: list[str]
    plain: list[str]


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def upload(transport: Transport, up: Upload, then: list[dict] | None = None
           ) -> tuple[int, list[dict]]:
    """Copy what is missing there, place it, then run the far-side ops ``then`` in the same
    round trip; return (bytes that crossed the wire, the answers of ``then``)."""
    incoming = f"{up.store}/{INCOMING}"
    shared = sorted(set(up.shared))
    first = checked(transport.probe([
        {"op": "exists", "paths": [f"{up.store}/{rel}" for rel in shared]},
        {"op": "prepare_dir", "path": incoming}]), transport.where)
    missing = [rel for rel, there in zip(shared, first[0]["exists"], strict=True) if not there]
    sending = missing + up.plain
    need = sum(_size(up.local_root / rel) for rel in sending)
    free = first[1]["free"]
    if need * HEADROOM > free:
        raise HostError(f"{transport.where} has {free / 1e6:.1f} MB free in {incoming}, and "
                        f"this launch copies {need / 1e6:.1f} MB: free space there or choose "
                        "another log_dir; nothing was copied or submitted")
    sent = transport.push(up.local_root, sending, incoming)
    answers = checked(transport.probe([
        {"op": "place", "incoming": incoming, "store": up.store, "root": up.root,
         "shared": shared, "plain": up.plain}, *(then or [])]), transport.where)
    return sent, answers[1:]


def bundle_items(log_root: Path, runs) -> tuple[list[str], list[str]]:
    """(shared, plain) items of runs made under ``log_root``: the blobs and snapshots their
    bundles link to, and the run folders themselves."""
    shared: set[str] = set()
    for run in runs:
        for folder in (run.bundle_dir, run.bundle_dir / CODE_DIR):
            for entry in os.scandir(folder):
                if entry.is_symlink():
                    target = os.path.normpath(os.path.join(folder, os.readlink(entry.path)))
                    shared.add(os.path.relpath(target, log_root))
    plain = [os.path.relpath(run.log_dir, log_root) for run in runs]
    return sorted(shared), plain
