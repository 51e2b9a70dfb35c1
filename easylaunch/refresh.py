"""Runs as they are now: registry entries refreshed from their records and backends.

Shared by ``easylaunch ls``, the bulk actions, ``load_sweep`` and the dashboard, so every view
of the runs refreshes them the same way (each backend asked once per group, the registry's
cached rows written back).
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.errors import EasyLaunchError
from easylaunch.jobs import JobState
from easylaunch.reasons import reason_of
from easylaunch_job.records import read_status

if TYPE_CHECKING:
    from easylaunch.jobs import Job
    from easylaunch.listing import Shown
    from easylaunch.registry import Entry, Registry

STATES = [s.value for s in JobState]
OPEN_STATES = [s.value for s in JobState if not s.terminal]


def short(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def job_for(registry: Registry, entry: Entry) -> Job:
    """The live Job of a registry entry, its state refreshed and written back."""
    from easylaunch.jobs import Job

    job = Job.from_run_dir(entry.log_dir)
    state = job.status().value
    if state != entry.state:
        with contextlib.suppress(sqlite3.Error):  # the row is a cache; a full disk keeps it old
            registry.update(entry.id, state=state)
    return job


def cancel_entry(registry: Registry, entry: Entry, timeout: float) -> tuple[JobState, bool]:
    """Cancel a registered run and wait up to ``timeout`` seconds for it to end; its state
    then, and whether it was still open (False: it had ended, nothing was done)."""
    job = job_for(registry, entry)
    state = job.status()
    if state.terminal:
        return state, False
    job.cancel()
    state = job.wait(timeout=timeout)
    registry.update(job.id, state=state.value)
    return state, True


def ended_fields(entry: Entry) -> dict:
    """A finished run's start, end and reason from its status.json, for a registry row that
    lacks them (written before they were kept, or never refreshed since it ended)."""
    from easylaunch.registry import NO_TIME

    info = read_status(entry.log_dir)
    # (NO_TIME and "": looked once, so a record without them is not read again)
    return {"ended": NO_TIME, **_times(info), "reason": reason_of(info) or ""}


def _times(info: dict) -> dict:
    """A status.json's start and end, as the registry's ``started`` and ``ended`` (only
    numbers: a hand-edited record must not spoil every listing)."""
    return {k: info[f"{k}_at"] for k in ("started", "ended")
            if isinstance(info.get(f"{k}_at"), (int, float))
            and not isinstance(info.get(f"{k}_at"), bool)}


def refresh_entries(registry: Registry, entries: Sequence[Entry]) -> list[Shown]:
    """Each run as a refresh sees it now (``listing.Shown``), written back to the registry, or
    what keeps it from being read; a fault in one run never stops a listing. Each backend is
    asked once about all the open runs launched with the same settings: one round trip to a
    remote cluster, not one per run."""
    from easylaunch import notify
    from easylaunch.jobs import DamagedRecordError, Job
    from easylaunch.listing import Shown

    shown = {entry.id: entry.state for entry in entries}
    seen: dict[str, dict] = {}  # run id -> registry fields a refresh saw
    groups: dict[tuple, list[Job]] = {}
    for entry in entries:
        if entry.state not in OPEN_STATES:
            if entry.ended is None or entry.reason is None:
                seen[entry.id] = ended_fields(entry)
            continue
        try:
            job = Job.from_run_dir(entry.log_dir)
            job.resolve_unsubmitted()
        except DamagedRecordError:
            shown[entry.id] = "unknown (its status.json is damaged)"
            continue
        except (EasyLaunchError, OSError) as exc:
            why = "folder missing" if not Path(entry.log_dir).is_dir() else short(str(exc), 120)
            shown[entry.id] = f"{entry.state} ({why})"
            continue
        request = job.launch_info.get("request") or {}
        key = (job.mode.name, request.get("settings_file"),
               repr(sorted((request.get("mode_options") or {}).items())))
        if groups.get(key):
            job.mode = groups[key][0].mode  # one mode (and connection) per group
        groups.setdefault(key, []).append(job)
    for jobs in groups.values():
        with contextlib.suppress(EasyLaunchError, OSError):
            jobs[0].mode.refresh_many(jobs)
        for job in jobs:
            try:
                shown[job.id] = job.status().value
                info = job.info()
            except DamagedRecordError:
                shown[job.id] = "unknown (its status.json is damaged)"
                continue
            except (EasyLaunchError, OSError) as exc:
                shown[job.id] = f"{shown[job.id]} ({short(str(exc), 120)})"
                continue
            seen[job.id] = {"state": shown[job.id], "restarts": len(info.get("restarts", [])),
                            **_times(info),
                            "job_id": info.get("next_job_id") or info.get("job_id"),
                            "reason": reason_of(info) or ""}
    with contextlib.suppress(sqlite3.Error):  # the rows are a cache; a full disk keeps them old
        registry.update_many((run_id, {k: v for k, v in fields.items() if v is not None})
                             for run_id, fields in seen.items() if fields)
        notify.tell_ends(registry, [job for jobs in groups.values() for job in jobs],
                         {entry.id: entry.state for entry in entries})
    listed = []
    for entry in entries:
        fields = {k: v for k, v in seen.get(entry.id, {}).items() if v is not None}
        restarts = fields.pop("restarts", entry.restarts)
        fields.pop("state", None)
        listed.append(Shown(dataclasses.replace(entry, **fields) if fields else entry,
                            shown[entry.id], restarts))
    return listed
