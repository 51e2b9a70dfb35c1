"""A sweep's runs as a resume sees them: which of its variants are done or under way (kept)
and which ended otherwise (to launch again), and the lock that keeps two resumes of one sweep
from launching the same variant."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from easylaunch.errors import LaunchError
from easylaunch.runs.record import LAUNCH_JSON
from easylaunch.tracking.refresh import OPEN_STATES, refresh_entries
from easylaunch.tracking.registry import Entry, Registry
from easylaunch.tracking.searches import search_folder
from easylaunch_job.environment import is_alive, process_start_time
from easylaunch_job.records import DamagedRecord, read_json

# (succeeded: done; queued, running, unknown: under way, or not known to have ended)
KEPT_STATES = frozenset({"succeeded", *OPEN_STATES})
LOCKS_DIR = "locks"
STALE_CLAIM_SECONDS = 600  # another host's claim older than this is taken over
CLAIM_POLL_SECONDS = 0.05
SWEEPS_LOOKED_AT = 20  # the newest sweeps of an experiment a resume looks through


@contextlib.contextmanager
def sweep_lock(registry: Registry, sweep_id: str) -> Iterator[None]:
    """Hold the sweep's lock (waiting for another process's): an ``flock`` on a file beside
    the registry, so a process that dies lets go of it at once; where the file system refuses
    ``flock`` (some NFS mounts), a claim file made only if absent (:func:`_claim`)."""
    folder = registry.path.parent / LOCKS_DIR
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = folder / f"sweep-{re.sub(r'[^A-Za-z0-9._+-]', '_', sweep_id)}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        with _claim(path.with_suffix(".claim")):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # (lets go of the lock)


@contextlib.contextmanager
def _claim(path: Path) -> Iterator[None]:
    """Hold ``path``, a hard link to a file of this process's naming it (so a claim is never
    seen half written), waiting while another live process holds it; a claim left by a process
    gone from this host, or older than STALE_CLAIM_SECONDS (another host's), is taken over."""
    host = socket.gethostname()
    mine = path.with_name(f"{path.name}.{host}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    mine.write_text(json.dumps({"host": host, "pid": os.getpid(),
                                "started": process_start_time(os.getpid())}))
    try:
        while True:
            try:
                os.link(mine, path)
                break
            except FileExistsError:
                stale = _stale(path, host)
                if stale is not None:
                    _take_over(path, stale)
                else:
                    time.sleep(CLAIM_POLL_SECONDS)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_ino == mine.stat().st_ino:  # (ours still: not taken over)
                path.unlink()
        mine.unlink()


def _stale(path: Path, host: str) -> int | None:
    """The inode of the claim at ``path`` if a process that is gone left it, else None."""
    try:
        found = path.stat()
    except OSError:
        return None  # (gone meanwhile: look again)
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        holder = {}  # (unreadable: judged by its age, as another host's)
    if holder.get("host") == host:
        alive = is_alive(holder.get("pid"), holder.get("started"))
    else:
        alive = time.time() - found.st_mtime <= STALE_CLAIM_SECONDS
    return None if alive else found.st_ino


def _take_over(path: Path, stale: int) -> None:
    """Move the stale claim (inode ``stale``) out of the way; a claim made meanwhile by a
    process that took it over first is put back."""
    aside = path.with_name(f"{path.name}.stale.{uuid.uuid4().hex[:8]}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return  # (another process took it over first)
    if aside.stat().st_ino != stale:  # (a live claim: back where it was)
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
    aside.unlink()


def newest_sweep(registry: Registry, exp_name: str, mode: str, log_root: str,
                 script_name: str, function: dict | None) -> str | None:
    """The newest sweep of the experiment in this mode whose runs this script launched with
    this function, into this log folder (None: none of its newest sweeps)."""
    for sweep_id, log_dir in registry.recent_sweeps(exp_name, mode, SWEEPS_LOOKED_AT):
        try:
            launch = read_json(str(Path(log_dir) / LAUNCH_JSON))
        except (OSError, DamagedRecord):
            continue
        request = launch.get("request") or {}
        if (launch.get("script_name"), request.get("function"), request.get("log_root")) == (
                script_name, function, log_root):
            return sweep_id
    return None


def sweep_entries(registry: Registry, sweep_id: str) -> list[Entry]:
    """The sweep's runs, oldest first, those still open refreshed from their records first (a
    run whose process is gone becomes failed, and the registry says so). A search's sweep is
    refused: its search draws what runs next, and its pruned runs are done."""
    entries = registry.of_sweep(sweep_id)
    if entries and search_folder(entries[0].log_dir, sweep_id).is_dir():
        raise LaunchError(f"sweep {sweep_id} is a search's (run_search): a resume would run "
                          "its pruned and failed trials again outside it; carry the search "
                          f"on with `easylaunch search resume {sweep_id}` or by calling "
                          "run_search again")
    if any(e.state in OPEN_STATES for e in entries):
        refresh_entries(registry, [e for e in entries if e.state in OPEN_STATES])
        entries = registry.of_sweep(sweep_id)
    return sorted(entries, key=lambda e: e.created)


@dataclass(frozen=True)
class Plan:
    """What a resume of a sweep does with the variants it is given, in their order."""

    kept: list[Entry | None]  # per variant: the run kept for it (None: it is launched)
    previous: list[Entry | None]  # per variant launched: its last run that did not succeed

    @property
    def launched(self) -> list[tuple[int, Entry | None]]:
        """The variants to launch: each one's index and its last run that did not succeed."""
        return [(i, self.previous[i]) for i, entry in enumerate(self.kept) if entry is None]

    def line(self, sweep_id: str) -> str:
        """``resume of sweep S: 3 of 6 variants launched (2 failed, 1 cancelled); 3 kept
        (3 succeeded)``."""
        return resume_line(sweep_id, [last.state if last else "never launched"
                                      for _, last in self.launched],
                           [e.state for e in self.kept if e is not None], "variants")


def resume_line(sweep_id: str, launched: list[str], kept: list[str], what: str) -> str:
    """What a resume did: how many of ``what`` it launched (by how their last runs ended) and
    kept (by state)."""
    def counted(states: list[str]) -> str:
        return ", ".join(f"{n} {state}" for state, n in sorted(Counter(states).items()))

    return (f"resume of sweep {sweep_id}: {len(launched)} of {len(launched) + len(kept)} {what} "
            f"launched{f' ({counted(launched)})' if launched else ''}; {len(kept)} kept"
            + (f" ({counted(kept)})" if kept else ""))


def launch_of(entry: Entry) -> str:
    """The launch a run came from (its own id where its folder cannot say)."""
    try:
        return read_json(str(Path(entry.log_dir) / LAUNCH_JSON))["launch_id"]
    except (OSError, KeyError, DamagedRecord):
        return entry.id


def plan(entries: list[Entry], keys: list[str]) -> Plan:
    """Match the given variants (their keys, in order) to the sweep's runs by content, each run
    to one variant at most: a variant listed k times keeps up to k of its kept runs, and the
    rest are launched, each again after its own earlier run where it has one."""
    kept_runs: dict[str, list[Entry]] = {}
    ended: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.variant_key is not None:
            into = kept_runs if kept(entry) else ended
            into.setdefault(entry.variant_key, []).append(entry)
    chosen: list[Entry | None] = []
    previous: list[Entry | None] = []
    for key in keys:
        runs, others = kept_runs.get(key, []), ended.get(key, [])
        chosen.append(runs.pop(0) if runs else None)
        previous.append(others.pop() if chosen[-1] is None and others else None)
    return Plan(chosen, previous)


def kept(entry: Entry) -> bool:
    """Whether a resume keeps the run: it succeeded or is under way, and its folder is still
    there (one deleted by hand is launched again)."""
    return entry.state in KEPT_STATES and (Path(entry.log_dir) / LAUNCH_JSON).exists()


def to_relaunch(entries: list[Entry]) -> list[Entry]:
    """The runs a resume from the command line launches again: of each variant (by content;
    a run recorded without its key: by its chain of resubmissions) none of whose runs is
    kept, its last run. (A variant a sweep listed twice counts once here: a script's resume,
    given the variants, keeps as many runs as it lists.)"""
    by_id = {entry.id: entry for entry in entries}

    def first(entry: Entry) -> str:
        seen = {entry.id}
        while entry.resubmitted_from in by_id and entry.resubmitted_from not in seen:
            entry = by_id[entry.resubmitted_from]
            seen.add(entry.id)
        return entry.id

    variants: dict[str, list[Entry]] = {}
    for entry in entries:  # (oldest first: a variant's last run comes last)
        variants.setdefault(entry.variant_key or f"chain of {first(entry)}", []).append(entry)
    return [runs[-1] for runs in variants.values() if not any(kept(e) for e in runs)]

