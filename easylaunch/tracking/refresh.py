"""Runs as they are now: registry entries refreshed from their records and backends (and
cancelled together).

Shared by ``easylaunch ls``, the bulk actions, ``load_sweep`` and the dashboard, so every view
of the runs refreshes them the same way (each backend asked once per group, the registry's
cached rows written back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from easylaunch.errors import EasyLaunchError
from easylaunch.runs.record import DamagedRecordError, RunRecord
from easylaunch.tracking.jobs import Job, JobState
from easylaunch.tracking.listing import Shown
from easylaunch.tracking.notify import tell_ends, write_records
from easylaunch.tracking.progress import wait_all
from easylaunch.tracking.registry import NO_TIME, Entry, Registry
from easylaunch.tracking.rows import record_fields, settle_abandoned
from easylaunch_job.records import read_status

STATES = [s.value for s in JobState]
OPEN_STATES = [s.value for s in JobState if not s.terminal]


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def job_for(registry: Registry, entry: Entry) -> Job:
    """The live Job of a registry entry, its state refreshed and its record written back."""
    job = Job.from_run_dir(entry.log_dir)
    job.status()
    write_records(registry, [job])
    return job


def cancel_entry(registry: Registry, entry: Entry, timeout: float) -> tuple[JobState, bool]:
    """Cancel a registered run and wait up to ``timeout`` seconds for it to end; its state
    then, and whether it was still open (False: it had ended, nothing was done)."""
    _, outcome, was_open = cancel_entries(registry, [entry], timeout)[0]
    if isinstance(outcome, EasyLaunchError):
        raise outcome
    return outcome, was_open


def cancel_entries(registry: Registry, entries: Sequence[Entry], timeout: float
                   ) -> list[tuple[Entry, JobState | EasyLaunchError, bool]]:
    """Cancel registered runs together, then wait up to ``timeout`` seconds for them to end.
    Each backend is asked about its runs at once and stops them in as few steps as it can (a
    packed sweep's tasks: one round trip for all). For each run: its state then, or what kept
    it from being read or cancelled; and whether it was still open."""
    outcome: dict[str, tuple[JobState | EasyLaunchError, bool]] = {
        e.id: (JobState(e.state), False) for e in entries if e.state not in OPEN_STATES}
    groups, problems = group_jobs(settled(registry, [e for e in entries if e.state in OPEN_STATES]))
    outcome.update((run_id, (EasyLaunchError(f"cannot cancel it: {why}"), False))
                   for run_id, why in problems.items())
    stopping, ended = [], []
    for jobs in groups:
        with contextlib.suppress(EasyLaunchError, OSError):
            jobs[0].mode.refresh_many([job.record for job in jobs])
        live = []
        for job in jobs:
            with contextlib.suppress(DamagedRecordError):  # (unknown: stopped, its end repairs it)
                if (state := job.recorded_state()).terminal:
                    outcome[job.id] = (state, False)
                    ended.append(job)
                    continue
            live.append(job)
        failures = jobs[0].mode.cancel_many([job.record for job in live])
        outcome.update((run_id, (exc, True)) for run_id, exc in failures.items())
        stopping += [job for job in live if job.id not in failures]
    outcome.update((job.id, (state, True))  # (wait_all writes them to the registry)
                   for job, state in zip(stopping, wait_all(stopping, timeout, 1.0), strict=True))
    write_records(registry, ended)
    return [(entry, *outcome[entry.id]) for entry in entries]


def settled(registry: Registry, entries: list[Entry]) -> list[Entry]:
    """``entries``, the folders of those whose launch died before putting them in place
    (still in the log root's ``.partial``) put in place as failed, saying so."""
    roots = {Path(e.log_dir).parent.parent for e in entries
             if e.state == "queued" and not os.path.isdir(e.log_dir)}
    for root in roots:
        settle_abandoned(root, registry)
    return entries


def group_jobs(entries: Sequence[Entry]) -> tuple[list[list[Job]], dict[str, str]]:
    """The live Jobs of these runs, grouped by mode and settings with one mode (and one
    connection) per group, so each backend is asked once for a group; and, for runs that
    cannot be read, why."""
    problems: dict[str, str] = {}
    groups: dict[tuple, list[Job]] = {}
    for entry in entries:
        try:
            job = Job.from_run_dir(entry.log_dir)
            job.resolve_unsubmitted()
        except DamagedRecordError:
            problems[entry.id] = "unknown (its status.json is damaged)"
            continue
        except (EasyLaunchError, OSError) as exc:
            why = "folder missing" if not Path(entry.log_dir).is_dir() else short(str(exc), 120)
            problems[entry.id] = f"{entry.state} ({why})"
            continue
        request = job.launch_info.get("request") or {}
        key = (job.mode.name, request.get("settings_file"),
               repr(sorted((request.get("mode_options") or {}).items())))
        if groups.get(key):
            job.mode = groups[key][0].mode  # one mode (and connection) per group
        groups.setdefault(key, []).append(job)
    return list(groups.values()), problems


def ended_fields(entry: Entry) -> dict:
    """A finished run's fields from its status.json (:func:`record_fields` but the state the
    registry holds), for a row that lacks them (written before they were kept, or never
    refreshed since it ended)."""
    # (NO_TIME and "": looked once, so a record without them is not read again)
    fields = {"ended": NO_TIME, "reason": ""}
    if info := read_status(entry.log_dir):  # (none: its folder is gone, the row says more)
        fields.update(record_fields(info))
        del fields["state"]
    return fields


def refresh_entries(registry: Registry, entries: Sequence[Entry]) -> list[Shown]:
    """Each run as a refresh sees it now (``listing.Shown``), written back to the registry, or
    what keeps it from being read; a fault in one run never stops a listing. Each backend is
    asked once about all the open runs launched with the same settings: one round trip to a
    remote cluster, not one per run."""
    shown = {entry.id: entry.state for entry in entries}
    records: dict[str, RunRecord] = {}
    seen: dict[str, dict] = {}  # run id -> registry fields a refresh saw
    waits: dict[str, str | None] = {}  # run id -> why its queued job waits, as heard
    for entry in entries:
        if entry.state not in OPEN_STATES and (entry.ended is None or entry.reason is None):
            seen[entry.id] = ended_fields(entry)
    groups, problems = group_jobs(settled(registry, [e for e in entries if e.state in OPEN_STATES]))
    shown.update(problems)
    for jobs in groups:
        with contextlib.suppress(EasyLaunchError, OSError):
            jobs[0].mode.refresh_many([job.record for job in jobs])
        for job in jobs:
            try:
                shown[job.id] = job.status(again=False).value
                info = job.info()
            except DamagedRecordError:
                shown[job.id] = "unknown (its status.json is damaged)"
                continue
            except (EasyLaunchError, OSError) as exc:
                shown[job.id] = f"{shown[job.id]} ({short(str(exc), 120)})"
                continue
            seen[job.id], records[job.id] = record_fields(info), job.record
            waits[job.id] = job.mode.heard_wait(job.record) if shown[job.id] == "queued" else None
    with contextlib.suppress(sqlite3.Error):  # the rows are a cache; a full disk keeps them old
        registry.update_many((run_id, fields) for run_id, fields in seen.items() if fields)
        tell_ends(registry, [job for jobs in groups for job in jobs],
                         {entry.id: entry.state for entry in entries})
    listed = []
    for entry in entries:
        fields = dict(seen.get(entry.id, {}))
        restarts = fields.pop("restarts", entry.restarts)
        fields.pop("state", None)
        listed.append(Shown(dataclasses.replace(entry, **fields) if fields else entry,
                            shown[entry.id], restarts, waits.get(entry.id),
                            records.get(entry.id)))
    return listed
