"""Copying what runs need to the far side: content-addressed, resumable, placed atomically.

Code snapshots, pickled functions, runners and packed environments are kept once per content
in a store there (``.snapshots``, ``.blobs``, ``.envs``), so a second sweep with the same code
copies none of them again. Everything travels into ``<store>/.incoming`` first and is then
moved into place in one far-side step, so the far side never holds half a run or half a
snapshot. The runs' own files stream there while the launch makes them (:class:`RunStream`);
what has not arrived by then goes inline, a few MB in the round trip that places them, more by
rsync (``--partial``: a copy that was cut off resumes on the next launch).
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import stat
import subprocess
import tarfile
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from easylaunch.modes.hosts.transport import HostError, Transport, checked
from easylaunch.runs.bundle import CODE_DIR, Run
from easylaunch.runs.record import VARIANT_JSON
from easylaunch_job.records import BUNDLE_DIR, STATUS_JSON

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Op

INCOMING = ".incoming"
INLINE_BYTES = 4 << 20  # up to this much goes inline with the far side's answer, not by rsync
STREAM_TIMEOUT_SECONDS = 120  # a run stream still going this long after the last run is stopped
SENT_OF_A_RUN = (BUNDLE_DIR, STATUS_JSON, VARIANT_JSON)
HEADROOM = 1.1  # refuse a copy that would leave the far side's disk all but full


@dataclass(frozen=True)
class Upload:
    """What one launch copies: items relative to ``local_root`` that go under ``root`` there.

    ``shared`` items are content-addressed (named by their digest): kept once in ``store``
    and linked into ``root`` where that is another folder. ``plain`` items are new (run
    folders, job scripts) and never overwrite anything there; those in ``streamed`` are in the
    incoming folder there already (a :class:`RunStream` copied them while the runs were made).
    """

    local_root: Path
    root: str
    store: str
    shared: list[str]
    plain: list[str]
    streamed: frozenset[str] = frozenset()
    streamed_bytes: int = 0


class RunStream:
    """Copies each run's files into the far side's incoming folder while the launch makes the
    next runs: the system's ``tar`` here, gzipped, piped into ``tar`` there over the host's
    connection, so packing, the wire and the far side's writes overlap the making (on other
    cores) instead of following it. It starts once ``ready()`` (the check that opens the
    connection is done), so a launch still logs in once. :meth:`finish` says which items
    arrived; the upload sends the others as before."""

    def __init__(self, transport: Transport, local_root: Path, store: str,
                 ready: Callable[[], bool]) -> None:
        self.transport, self.local_root, self.ready = transport, local_root, ready
        self.incoming = f"{store.rstrip('/')}/{INCOMING}"
        self.waiting: list[str] = []  # items of runs made before the stream started
        self.sent: list[str] = []
        self.procs: list[subprocess.Popen[bytes]] = []  # (tar here, tar there: pipes)
        self.pump: threading.Thread | None = None
        self.bytes = 0

    def made(self, run: Run) -> None:
        """Send the run's files, now or once the stream starts."""
        self.waiting += run_items(self.local_root, run)
        if not self.procs and self.ready():
            self._start()
        if self.procs:
            assert self.procs[0].stdin is not None  # (opened with PIPE)
            try:
                self.procs[0].stdin.write(b"".join(i.encode() + b"\0" for i in self.waiting))
            except OSError:  # (the stream broke: finish() says nothing arrived)
                return
            self.sent += self.waiting
            self.waiting = []

    def _start(self) -> None:
        tar = shutil.which("tar")
        untar = self.transport.untar_argv(self.incoming)
        if tar is None or untar is None:
            self.ready = lambda: False  # (no stream: the upload sends everything)
            return
        here = subprocess.Popen([tar, "-cf", "-", "-C", str(self.local_root), "--null",
                                 "-T", "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        there = subprocess.Popen(untar, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        self.procs = [here, there]
        self.pump = threading.Thread(target=self._pump, daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        """Carry the tar from here to there, gzipped and flushed as it comes (gzip's own
        buffering would hold most of it back until the end), counting the bytes."""
        here, there = self.procs
        out, into = here.stdout, there.stdin
        # (opened with PIPE and the default buffering: a buffered reader, which has read1)
        assert isinstance(out, io.BufferedReader) and into is not None
        gzip = zlib.compressobj(6, zlib.DEFLATED, 31)
        try:
            while chunk := out.read1(1 << 16):
                data = gzip.compress(chunk) + gzip.flush(zlib.Z_SYNC_FLUSH)
                into.write(data)
                into.flush()
                self.bytes += len(data)
            into.write(gzip.flush())
        except OSError:  # the far side went away: so does this side's tar
            here.kill()
        with contextlib.suppress(OSError):
            into.close()

    def finish(self) -> frozenset[str]:
        """Wait for the copy to end; the items that arrived (none, where it failed)."""
        if not self.procs:
            return frozenset()
        assert self.procs[0].stdin is not None and self.pump is not None  # (set by _start)
        with contextlib.suppress(OSError):
            self.procs[0].stdin.close()
        # (blocking waits, which see an exit at once; the timer ends a copy that hangs)
        timer = threading.Timer(STREAM_TIMEOUT_SECONDS, self._kill)
        timer.start()
        try:
            codes = [proc.wait() for proc in self.procs]
        finally:
            timer.cancel()
        self.pump.join()
        return frozenset(self.sent) if codes == [0, 0] else frozenset()

    def abort(self) -> None:
        """Stop the copy (the launch failed); what arrived stays unplaced in the incoming
        folder there, as a cut-off copy's does."""
        self._kill()
        for proc in self.procs:
            proc.wait()

    def _kill(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(OSError):
                proc.kill()


def _size(path: Path) -> int:
    if path.is_symlink() or path.is_file():
        return path.lstat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


class Uploaded(NamedTuple):
    """What an upload copied, and the answers of the ops run after it."""

    bytes: int  # file data that crossed the wire (compressed)
    items: list[str]  # the items copied: those missing there
    answers: list[dict]


def upload(transport: Transport, up: Upload, then: Sequence[Op] = ()) -> Uploaded:
    """Copy what is missing there, place it, then run the far-side ops ``then`` in the same
    round trip."""
    incoming = f"{up.store}/{INCOMING}"
    shared = sorted(set(up.shared))
    first = checked(transport.run_ops([
        {"op": "exists", "paths": [f"{up.store}/{rel}" for rel in shared]},
        {"op": "prepare_dir", "path": incoming}]), transport.where)
    missing = [rel for rel, there in zip(shared, first[0]["exists"], strict=True) if not there]
    sending = missing + [rel for rel in up.plain if rel not in up.streamed]
    need = sum(_size(up.local_root / rel) for rel in sending)
    free = first[1]["free"]
    if need * HEADROOM > free:
        raise HostError(f"{transport.where} has {free / 1e6:.1f} MB free in {incoming}, and "
                        f"this launch copies {need / 1e6:.1f} MB: free space there or choose "
                        "another log_dir; nothing was copied or submitted")
    inline: list[Op] = []
    sent = up.streamed_bytes
    if sending and need <= INLINE_BYTES:  # small: in the same round trip as placing them
        packed = _packed(up.local_root, sending)
        inline = [{"op": "unpack", "root": incoming, "tar": packed}]
        sent += len(packed)
    elif sending:  # large: rsync, which resumes a copy that was cut off
        sent += transport.push(up.local_root, sending, incoming)
    answers = checked(transport.run_ops([*inline, {
        "op": "place", "incoming": incoming, "store": up.store, "root": up.root,
        "shared": shared, "plain": up.plain}, *(then or [])]), transport.where)
    return Uploaded(sent, sending, answers[len(inline) + 1:])


def _packed(local_root: Path, rels: list[str]) -> str:
    """``rels`` as a gzipped tar (links kept as links), in base64. Files of one name go side by
    side, so what every run repeats (the same git diff in each bundle.json) compresses away.
    Each entry's header comes from one ``lstat`` (no owner names looked up: the far side
    unpacks as its own user)."""
    folders, files = [], []
    for rel in rels:
        for path in _walk(local_root / rel):
            st = os.lstat(path)
            info = tarfile.TarInfo(str(path.relative_to(local_root)))
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                info.type = tarfile.DIRTYPE
                folders.append((info, path))
                continue
            if stat.S_ISLNK(st.st_mode):
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
            else:
                info.size = st.st_size
            files.append((info, path))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6,
                      format=tarfile.GNU_FORMAT) as tar:
        for info, path in [*folders, *sorted(files, key=lambda f: (f[1].name, f[1]))]:
            if info.isreg():
                with open(path, "rb") as data:
                    tar.addfile(info, data)
            else:
                tar.addfile(info)
    return base64.b64encode(buffer.getvalue()).decode()


def _walk(top: Path) -> list[Path]:
    """``top`` and, for a folder (not a link to one), everything under it."""
    if not top.is_dir() or top.is_symlink():
        return [top]
    found = [top]
    for folder, dirs, names in os.walk(top):
        found += [Path(folder) / name for name in dirs + names]
    return found


def bundle_items(log_root: Path, runs: list[Run]) -> tuple[list[str], list[str]]:
    """(shared, plain) items of runs made under ``log_root``: the blobs and snapshots their
    bundles link to, and what the far side needs of each run folder (:func:`run_items`)."""
    shared: set[str] = set()
    for run in runs:
        for folder in (run.bundle_dir, run.bundle_dir / CODE_DIR):
            for entry in os.scandir(folder):
                if entry.is_symlink():
                    target = os.path.normpath(os.path.join(folder, os.readlink(entry.path)))
                    shared.add(os.path.relpath(target, log_root))
    return sorted(shared), [rel for run in runs for rel in run_items(log_root, run)]


def run_items(log_root: Path, run: Run) -> list[str]:
    """What the far side needs of a run's folder (not its git diffs or launch record, which
    stay here), relative to the log root."""
    return [os.path.relpath(run.log_dir / name, log_root) for name in SENT_OF_A_RUN]
