"""How runs are shown: grouped by sweep for a terminal, one tab-separated line each for a pipe.

Pure functions over registry entries (and the states a refresh just saw), shared by
``easylaunch ls`` and whatever else lists runs.
"""

from __future__ import annotations

import collections
import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from easylaunch.errors import EasyLaunchError
from easylaunch.runs.commands import COMMAND_KEY
from easylaunch.runs.record import RunRecord
from easylaunch.tracking.registry import Entry
from easylaunch.tracking.searches import search_folder, search_line, summary_of
from easylaunch_job.outcome import load_outcome
from easylaunch_job.records import flat_items

# Backend fields that name a cloud instance running a run (first one present wins). A
# scheduler's job is its "<name>_job_id" field (Scheduler.job_id_key), whatever the scheduler.
INSTANCE_FIELDS = ("instance_id", "instance_name")
ARRAY_FIELD = "array_job_id"  # (the array an element belongs to: the element's own id wins)
STATE_ORDER = ("queued", "running", "succeeded", "failed", "timeout", "cancelled")
VALUE_WIDTH = 14  # a variant value wider than this is cut on a terminal
TSV_COLUMNS = ("ID", "EXPERIMENT", "MODE", "STATE", "LAUNCHED", "LOG DIR", "SWEEP", "SECONDS",
               "JOB", "REASON")
_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@dataclass(frozen=True)
class Shown:
    """A run as listed: its registry entry with what a refresh just saw."""

    entry: Entry
    state: str  # may carry a note: "running (folder missing)"
    restarts: int
    waiting: str | None = None  # why a queued run's job waits, as the scheduler says
    record: RunRecord | None = None  # the run's records as the refresh read them (open runs)

    @property
    def state_text(self) -> str:
        state = f"{self.state}: {self.waiting}" if self.waiting else self.state
        if not self.restarts:
            return state
        return f"{state} ({self.restarts} restart{'s' * (self.restarts > 1)})"


def result_text(log_dir: str, status: dict, limit: int = 300) -> str | None:
    """A run's return value, summarised (its repr, cut to ``limit``), or why it cannot be
    shown here; None when it has none. ``status``: its status.json, as read."""
    try:
        outcome = load_outcome(log_dir, status)
    except Exception as exc:  # noqa: BLE001 - a value this process cannot unpickle
        return f"(cannot be loaded here: {exc!r})"
    if outcome is None or outcome[0] != "success":
        return None
    text = repr(outcome[1])
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more)"


def job_label(entry: Entry) -> str:
    """The scheduler's job id (or the instance) that runs the run, or "" for local runs."""
    if entry.job_id:
        return entry.job_id
    jobs = [f for f in entry.backend if f.endswith("_job_id") and f != ARRAY_FIELD]
    return next((str(entry.backend[f]) for f in (*jobs, *INSTANCE_FIELDS)
                 if entry.backend.get(f)), "")


def flatten(variant: Mapping) -> dict[str, str]:
    """Nested variant keys as ``a.b``, values as short text."""
    return {key: str(value) for key, value in flat_items(variant).items()}


def shown_variant(entry: Entry) -> dict[str, str]:
    """A run's variant as lists show it: flattened, less the command of a run from a list of
    commands (its command has a column of its own)."""
    values = flatten(entry.variant)
    if entry.command:
        values.pop(COMMAND_KEY, None)
    return values


def differing_keys(variants: Sequence[Mapping]) -> list[str]:
    """The (flattened) keys whose values are not the same in every variant, in first-seen
    order: what tells the runs of a sweep apart."""
    flat = [flatten(v) for v in variants]
    keys = list(dict.fromkeys(k for f in flat for k in f))
    return [k for k in keys if len({f.get(k) for f in flat}) > 1]


def seconds_run(entry: Entry, now: float) -> float | None:
    """How long the run's last attempt ran (so far, if it runs)."""
    if entry.started is None or entry.started < 0:
        return None
    if entry.ended is not None and entry.ended < 0:  # (ended, but its record had no time)
        return None
    return (entry.ended or now) - entry.started


def rounded(value: object) -> str:
    """A number as a table or an axis shows it: 4 significant digits (``0.001``,
    ``2.5e+04``); another value as text."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def duration(seconds: float | None) -> str:
    """``0.4s``, ``42s``, ``3m12s``, ``1h05m``, ``2d03h``; "-" when unknown."""
    if seconds is None:
        return "-"
    if seconds < 1:
        return f"{max(seconds, 0):.1f}s"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def when(timestamp: float | None, seconds: bool = True) -> str:
    """A Unix time as local ``YYYY-mm-dd HH:MM:SS`` (``seconds`` False: ``HH:MM``); "-" for
    none."""
    if not timestamp or timestamp < 0:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M",
                         time.localtime(timestamp))


def parse_since(text: str) -> float:
    """``30m``, ``2h``, ``3d``, ``1w`` ago, or an ISO date/time, as a Unix time; anything else
    raises EasyLaunchError saying what is allowed."""
    match = _AGE.fullmatch(text.strip())
    if match:
        return time.time() - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise EasyLaunchError(f"{text!r}: use an age like 30m, 2h, 3d, 1w or a date like "
                              "2026-11-20") from None


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:max(width - 1, 0)] + "…"


def counts(states: Sequence[str]) -> str:
    """``4 succeeded, 1 failed, 1 running``: a sweep's runs by state (notes left out)."""
    found = collections.Counter(s.split(" ", 1)[0] for s in states)
    order = [s for s in STATE_ORDER if found[s]] + sorted(set(found) - set(STATE_ORDER))
    return ", ".join(f"{found[s]} {s}" for s in order)


def sweeps(shown: Sequence[Shown]) -> list[list[Shown]]:
    """The runs grouped by sweep, groups and runs newest first (a run without a sweep, from
    before sweeps, is its own)."""
    groups: dict[str, list[Shown]] = {}
    for item in shown:
        groups.setdefault(item.entry.sweep or item.entry.id, []).append(item)
    return list(groups.values())


def grouped_lines(shown: Sequence[Shown], keys: Sequence[str] | None, width: int,
                  now: float) -> list[str]:
    """Lines for a terminal ``width`` wide: a heading per sweep (experiment, sweep id, mode,
    launch time, counts by state), then a row per run: id, state, time run, job, and the
    variant keys that differ within the sweep (``keys``: these instead)."""
    lines = []
    for group in sweeps(shown):
        first = group[-1].entry
        heading = (f"{first.exp_name} · sweep {first.sweep or first.id} · {first.mode} · "
                   f"{when(first.created, seconds=False)} · {len(group)} "
                   f"run{'s' * (len(group) > 1)}: {counts([g.state for g in group])}")
        lines.append(_cut(heading, width))
        search = summary_of(first.log_dir, first.sweep) if first.sweep else None
        if search is not None and first.sweep:
            folder = search_folder(first.log_dir, first.sweep)
            lines.append(_cut(f"  search: {search_line(search, folder)}", width))
        has_command = any(g.entry.command for g in group)
        columns = list(keys) if keys is not None else \
            differing_keys([shown_variant(g.entry) for g in group])
        has_job = any(job_label(g.entry) for g in group)
        header = ["ID", "STATE", "TIME", *(["JOB"] if has_job else []), *columns,
                  *(["COMMAND"] if has_command else [])]
        rows = [header]
        for g in group:
            values = flatten(g.entry.variant)
            rows.append([g.entry.id, g.state_text, duration(seconds_run(g.entry, now)),
                         *([job_label(g.entry) or "-"] if has_job else []),
                         *(_cut(values.get(k, "-"), VALUE_WIDTH) for k in columns),
                         *([g.entry.command or "-"] if has_command else [])])
        widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
        lines.append(_cut(_row_text(rows[0], widths), width))
        for row, g in zip(rows[1:], group, strict=True):
            lines.append(_cut(_row_text(row, widths), width))
            if g.entry.reason:  # why it ended so, under its row
                lines.append(_cut(f"    ↳ {g.entry.reason}", width))
    return lines


def _row_text(row: list[str], widths: list[int]) -> str:
    return ("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True))).rstrip()


def tsv_lines(shown: Sequence[Shown], keys: Sequence[str], now: float) -> list[str]:
    """One tab-separated line per run (a header first), for scripts: the columns of
    TSV_COLUMNS, then one per variant key in ``keys``. Tabs and newlines inside values become
    spaces."""
    plain = str.maketrans("\t\n\r", "   ")
    has_command = any(g.entry.command for g in shown)
    rows = [[*TSV_COLUMNS, *keys, *(["command"] if has_command else [])]]
    for g in shown:
        e, values = g.entry, flatten(g.entry.variant)
        run_for = seconds_run(e, now)
        rows.append([e.id, e.exp_name, e.mode, g.state_text, when(e.created), e.log_dir,
                     e.sweep or e.id,
            "" if run_for is None else f"{run_for:.0f}", job_label(e), e.reason or "",
            *(values.get(k, "") for k in keys), *([e.command or ""] if has_command else [])])
    return ["\t".join(v.translate(plain) for v in row) for row in rows]
