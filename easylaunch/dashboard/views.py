"""What the dashboard's pages show, as plain data: registry entries refreshed and laid out, run
folders read, actions taken. No web framework here; these build on the functions
``easylaunch ls``, ``status``, ``logs``, ``cancel`` and ``resubmit`` use.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from easylaunch.api.resubmission import resubmit
from easylaunch.errors import EasyLaunchError
from easylaunch.modes import all_modes
from easylaunch.results.readers import last_values
from easylaunch.results.sweep import metrics_folder, variant_of
from easylaunch.runs import bundle
from easylaunch.runs.record import RunRecord
from easylaunch.settings import ConfigArg
from easylaunch.tracking import listing
from easylaunch.tracking.jobs import DamagedRecordError
from easylaunch.tracking.listing import when
from easylaunch.tracking.refresh import OPEN_STATES, STATES, cancel_entry, job_for, refresh_entries
from easylaunch.tracking.registry import Entry, NoSuchRun, Registry
from easylaunch.tracking.rows import reason_of
from easylaunch_job.records import STDERR_LOG, STDOUT_LOG, DamagedRecord

PER_PAGE = 50
MAX_PAGE = 10**9  # a larger page number is read as this one (past the end: no rows)
MAX_IDS = 200  # runs one state poll may ask about
CANCEL_WAIT_SECONDS = 15
LOG_TAIL_BYTES = 64 * 1024  # the first read of a log: its end
LOG_CHUNK_BYTES = 256 * 1024  # each later read, at most
DIFF_BYTES = 512 * 1024  # a git diff shown, at most
LOG_STREAMS = {"stdout": STDOUT_LOG, "stderr": STDERR_LOG}
FILTERS = ("exp", "mode", "state", "since", "sweep", "reason")
SHOWN_METRICS = 3  # last values a runs-list row shows


@dataclass(frozen=True)
class Filters:
    """The runs page's filters, as typed (``since``: an age such as 2h, or a date)."""

    exp: str | None = None
    mode: str | None = None
    state: str | None = None
    since: str | None = None
    sweep: str | None = None
    reason: str | None = None  # why runs ended, whole

    @classmethod
    def of(cls, params: Mapping[str, str]) -> Filters:
        """The filters in some query parameters (empty ones left out), unchecked."""
        return cls(**{k: params[k].strip() or None for k in FILTERS if k in params})

    def query(self) -> dict:
        """Keyword arguments of ``Registry.list``; a bad value raises EasyLaunchError saying
        what is allowed."""
        if self.state is not None and self.state not in STATES:
            raise EasyLaunchError(f"state {self.state!r}: states are {', '.join(STATES)}")
        if self.mode is not None and self.mode not in (known := all_modes()):
            raise EasyLaunchError(f"mode {self.mode!r}: modes are {', '.join(known)}")
        try:
            since = listing.parse_since(self.since) if self.since else None
        except EasyLaunchError as exc:
            raise EasyLaunchError(f"since {exc}") from None
        return {"exp": self.exp, "mode": self.mode, "since": since, "sweep": self.sweep,
                "states": [self.state] if self.state else None, "reason": self.reason}

    def params(self) -> dict[str, str]:
        """The filters set, as query parameters (for links to other pages)."""
        return {k: v for k, v in vars(self).items() if v}


@dataclass(frozen=True)
class Row:
    """One run as a table row shows it."""

    id: str
    exp_name: str
    sweep: str  # ("": a run from before sweeps)
    mode: str
    state: str  # with notes: "succeeded (2 restarts)"
    open: bool
    launched: str
    duration: str
    seconds: float  # (what the time column sorts by)
    job: str
    variant: str  # the variant keys that tell it from the other runs of its sweep shown
    reason: str  # why it ended as it did, in one line ("": it succeeded, or is open)
    metrics: list[tuple[str, str]]  # its first metrics' last values, rounded


@dataclass(frozen=True)
class Group:
    """The runs of one sweep on a page, under a heading with the whole sweep's counts."""

    sweep: str  # ("": a run from before sweeps)
    exp_name: str
    counts: str
    rows: list[Row]


def is_open(state: str) -> bool:
    """True while a run (its state text, notes and all) may still change."""
    return state.split(" ", 1)[0] in OPEN_STATES


def _variant_text(values: Mapping[str, str], keys: Sequence[str]) -> str:
    """``lr=0.001  seed=2``: those of ``keys`` a flattened variant has."""
    return "  ".join(f"{k}={values[k]}" for k in keys if k in values)


def _last_metrics(shown: listing.Shown) -> list[tuple[str, str]]:
    """The run's first SHOWN_METRICS metrics' last values, read where load_sweep and the sweep
    page read them (a cluster job's folder, where the job writes it elsewhere)."""
    try:
        values = last_values(metrics_folder(shown, fetch=False))
    except OSError:
        return []
    return [(k, listing.rounded(v)) for k, v in list(values.items())[:SHOWN_METRICS]]


def _row(shown: listing.Shown, keys: Sequence[str] | None, now: float) -> Row:
    e, values = shown.entry, listing.shown_variant(shown.entry)
    text = "  ".join(t for t in (_variant_text(values, keys or list(values)),
                                 e.command and f"$ {e.command}") if t)
    seconds = listing.seconds_run(e, now)
    return Row(e.id, e.exp_name, e.sweep or "", e.mode, shown.state_text, is_open(shown.state),
               when(e.created), listing.duration(seconds), seconds or 0.0,
               listing.job_label(e), text, e.reason or "", _last_metrics(shown))


def groups_of(registry: Registry, shown: Sequence[listing.Shown], now: float) -> list[Group]:
    """The runs grouped by sweep; a run's variant shows the keys that differ within its sweep
    on the page (all its keys when it is alone there)."""
    states = registry.sweep_states(g[0].entry.sweep for g in listing.sweeps(shown)
                                   if g[0].entry.sweep)
    found = []
    for group in listing.sweeps(shown):
        keys = listing.differing_keys([listing.shown_variant(g.entry) for g in group]) \
            if len(group) > 1 else None
        sweep = group[0].entry.sweep or ""
        found.append(Group(sweep, group[0].entry.exp_name,
                           listing.counts(states.get(sweep) or [g.state for g in group]),
                           [_row(g, keys, now) for g in group]))
    return found


def page_number(text: str | None) -> int:
    """A ``page`` query parameter as a page number (none: 1; at most MAX_PAGE)."""
    try:
        number = int(text or 1)
    except ValueError:
        number = 0
    if number < 1:
        raise EasyLaunchError(f"page {text!r}: a page number (1, 2, ...)")
    return min(number, MAX_PAGE)


def runs_page(registry: Registry, filters: Filters, page: int) -> tuple[list[Group], int]:
    """Page ``page`` (from 1) of the runs the filters select, newest first and grouped by
    sweep, with the number that matched. Only the runs on the page are refreshed (the open
    ones ask their backend)."""
    entries, total = registry.list(**filters.query(), limit=PER_PAGE,
                                   offset=(page - 1) * PER_PAGE)
    shown = refresh_entries(registry, entries)
    return groups_of(registry, shown, time.time()), total


def reasons(registry: Registry, filters: Filters) -> list[tuple[str, int]]:
    """Why the runs the filters select ended, commonest first, with how many each."""
    return registry.reasons(**{**filters.query(), "reason": None})


def registered(registry: Registry, ids: Sequence[str]) -> list[Entry]:
    """The entries of the first MAX_IDS distinct ``ids``; ids not in the registry left out."""
    entries = []
    for run_id in list(dict.fromkeys(ids))[:MAX_IDS]:
        try:
            entries.append(registry.find(run_id))
        except NoSuchRun:
            continue
    return entries


def live_states(registry: Registry, ids: Sequence[str]) -> dict[str, dict]:
    """The runs ``ids`` refreshed: state text, whether still open, time run, job; ids not in
    the registry are left out."""
    entries = registered(registry, ids)
    now = time.time()
    return {s.entry.id: {"state": s.state_text, "open": is_open(s.state),
                         "duration": listing.duration(listing.seconds_run(s.entry, now)),
                         "job": listing.job_label(s.entry), "reason": s.entry.reason or ""}
            for s in refresh_entries(registry, entries)}


@dataclass(frozen=True)
class RunView:
    """One run's page: what the registry, status.json, launch.json and git/ hold."""

    entry: Entry
    state: str
    open: bool
    facts: list[tuple[str, str]]
    error: str | None
    variant: str  # as JSON
    commits: list[tuple[str, str]]  # code folder, commit
    diffs: list[tuple[str, str]]  # file name, text


def _read_record(read: Callable[[], dict]) -> dict:
    try:
        return read()
    except (DamagedRecord, OSError) as exc:
        return {"damaged_record": str(exc)}


def _read_text(path: Path, limit: int) -> str:
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    text = data[:limit].decode(errors="replace")
    if len(data) > limit:
        text += f"\n... (cut at {limit // 1024} KB; the whole file is {path})\n"
    return text


def run_view(registry: Registry, run_id: str) -> RunView:
    """The run ``run_id`` (an id, or its unique start or end), refreshed."""
    shown = refresh_entries(registry, [registry.find(run_id)])[0]
    e, folder = shown.entry, Path(shown.entry.log_dir)
    record = shown.record or RunRecord(e.id, e.exp_name, folder)  # (read once, by the refresh)
    info = _read_record(record.status_json)
    launch = _read_record(lambda: record.launch_info)
    command = launch.get("command_line")
    backend = launch.get("backend") or e.backend
    facts = [
        ("mode", e.mode), ("host", info.get("host") or launch.get("host") or e.host),
        ("user", launch.get("user")), ("launched", when(e.created)),
        ("started", when(info.get("started_at"))), ("ended", when(info.get("ended_at"))),
        ("ran for", listing.duration(listing.seconds_run(e, time.time()))),
        ("exit code", info.get("exit_code")), ("signal", info.get("signal")),
        ("why", reason_of(info)),
        ("result", listing.result_text(e.log_dir, info)
         if info.get("state") == "succeeded" else None),
        ("attempt", info.get("attempt") if info.get("restarts") else None),
        ("job", listing.job_label(e)),
        ("backend", ", ".join(f"{k}={v}" for k, v in backend.items() if v is not None)),
        ("command run", shlex.join(launch["command"]) if "command" in launch else None),
        ("command line", shlex.join(command) if isinstance(command, list) else command),
        ("working directory", launch.get("cwd")), ("python", launch.get("python")),
        ("log dir", e.log_dir), ("record", info.get("damaged_record")),
    ]
    variant = variant_of(e)
    git = folder / bundle.GIT_DIR
    diffs = [(p.name, _read_text(p, DIFF_BYTES)) for p in sorted(git.glob("*.diff"))] \
        if git.is_dir() else []
    return RunView(e, shown.state_text, is_open(shown.state),
                   [(k, str(v)) for k, v in facts if v not in (None, "", "-")],
                   info.get("error"), json.dumps(variant, indent=2, default=repr),
                   sorted((launch.get("git_commits") or {}).items()), diffs)


@dataclass(frozen=True)
class LogChunk:
    """Text of a log from some offset, the offset to ask from next, and whether the run may
    still write more."""

    text: str
    offset: int
    open: bool


LINE_ENDS = (b"\n", b"\r")  # (a progress bar redraws its line after a carriage return)


def _tail_start(f: BinaryIO, size: int) -> int:
    """Where a log's last LOG_TAIL_BYTES are shown from: after their first line end, else (one
    long line) at their first whole UTF-8 character."""
    start = max(size - LOG_TAIL_BYTES, 0)
    if not start:
        return 0
    f.seek(start - 1)
    tail = f.read(size - start)  # (the byte before them, and all of them but the last)
    ends = [i for i in (tail.find(end) for end in LINE_ENDS) if i >= 0]
    if ends:
        end = min(ends)
        return start + end + (tail[end:end + 2] == b"\r\n")
    return start + next((i for i, b in enumerate(tail[1:5]) if b & 0xC0 != 0x80), 0)


def read_log(path: Path, offset: int) -> tuple[str, int]:
    """The text of ``path`` from byte ``offset`` (negative: its last LOG_TAIL_BYTES, see
    :func:`_tail_start`) and the offset after it. A read that stops short of the end stops
    after a line end (a newline or a carriage return), so no character is cut in two; a file
    that shrank is read again from 0."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if offset < 0:
                offset = _tail_start(f, size)
            elif offset > size:
                offset = 0
            f.seek(offset)
            data = f.read(LOG_CHUNK_BYTES)
    except FileNotFoundError:
        return "", 0
    last_end = max(data.rfind(end) for end in LINE_ENDS)
    if offset + len(data) < size and last_end >= 0:
        data = data[:last_end + 1]
    return data.decode(errors="replace"), offset + len(data)


def log_chunk(registry: Registry, run_id: str, stream: str, offset: int) -> LogChunk:
    """What ``easylaunch logs -f`` shows next of a run's ``stream`` (stdout or stderr)."""
    if stream not in LOG_STREAMS:
        raise EasyLaunchError(f"no log {stream!r}: logs are {', '.join(LOG_STREAMS)}")
    # its state before the read (a run's last lines come before its end), asked of the
    # backend once, by job_for; a damaged record reads as open
    job = job_for(registry, registry.find(run_id))
    still = True
    with contextlib.suppress(DamagedRecordError):
        still = not job.recorded_state().terminal
    job.mode.bring_logs(job.record)
    text, offset = read_log(job.mode.readable_log(job.record, LOG_STREAMS[stream]), offset)
    return LogChunk(text, offset, still)


def cancel_run(registry: Registry, run_id: str) -> str:
    """Cancel a run as ``easylaunch cancel`` does; its state after (up to
    CANCEL_WAIT_SECONDS)."""
    try:
        state, _ = cancel_entry(registry, registry.find(run_id), CANCEL_WAIT_SECONDS)
    except NotImplementedError as exc:  # (a mode that cannot)
        raise EasyLaunchError(str(exc)) from None
    return state.value


def resubmit_run(registry: Registry, run_id: str, config: ConfigArg) -> str:
    """Run a run again as ``easylaunch resubmit --detach`` does (a local run outlives the
    dashboard); the new run's id."""
    entry = registry.find(run_id)
    return resubmit(entry.id, config=config, detach=True if entry.mode == "local" else None).id
