"""Notifications: a command or a webhook told, with a short JSON summary, when a sweep ends
(and, with NOTIFY_FAILED_RUNS, when a run fails).

Whichever process first sees the end tells it (``wait_all`` in the launching script,
``easylaunch watch``, ``easylaunch ls``), once: the registry holds a claim per end. A delivery
that fails is said on stderr (without the URL, which may hold a token) and not tried again.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from easylaunch.errors import EasyLaunchError
from easylaunch.runs.record import DamagedRecordError, RunRecord
from easylaunch.tracking.registry import Entry, Registry, open_registry
from easylaunch.tracking.rows import record_fields
from easylaunch_job.states import JobState

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job

DELIVERY_TIMEOUT = 10  # seconds a command or a webhook gets
ERROR_CHARS = 300  # of a failed run's error, in a summary


def _last_line(error: str | None) -> str:
    """What a summary says of an error: its last line (a traceback's exception), cut."""
    lines = [line for line in (error or "").splitlines() if line.strip()]
    return lines[-1].strip()[:ERROR_CHARS] if lines else ""


def _targets(settings: Mapping) -> tuple[list[str] | None, str | None]:
    command = settings.get("NOTIFY_COMMAND")
    if isinstance(command, str):
        command = shlex.split(command)
    return command or None, settings.get("NOTIFY_WEBHOOK") or None


def deliver(settings: Mapping, message: dict) -> bool:
    """Send ``message`` to NOTIFY_COMMAND and NOTIFY_WEBHOOK; False (said on stderr, the URL
    left out) if either failed."""
    command, webhook = _targets(settings)
    data = json.dumps(message, default=str).encode()
    ok = True
    if command:
        try:
            subprocess.run(command, input=data, capture_output=True, check=True,
                           timeout=DELIVERY_TIMEOUT)
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"easylaunch: notification command {command[0]} failed: {exc}",
                  file=sys.stderr)
            ok = False
    if webhook:
        import urllib.request  # (15 ms with http.client and ssl: only where a webhook is set)

        host = urllib.parse.urlsplit(webhook).hostname
        request = urllib.request.Request(webhook, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT):  # noqa: S310
                pass
        except (OSError, urllib.error.URLError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "code", None) or type(exc)
            print(f"easylaunch: notification webhook on {host} failed: {reason}",
                  file=sys.stderr)
            ok = False
    return ok


def sweep_message(entries: list[Entry], errors: Mapping[str, str]) -> dict:
    """The summary of an ended sweep: experiment, sweep, mode, counts by state, the runs that
    did not succeed (with their errors, cut)."""
    first = entries[-1]
    states: dict[str, int] = {}
    for entry in entries:
        states[entry.state] = states.get(entry.state, 0) + 1
    return {"event": "sweep_ended", "experiment": first.exp_name, "sweep": first.sweep,
            "mode": first.mode, "runs": len(entries), "states": states,
            "not_succeeded": [{"id": e.id, "state": e.state,
                               "error": _last_line(errors.get(e.id))}
                              for e in entries if e.state != "succeeded"]}


def _error(entry: Entry) -> str:
    try:
        return RunRecord.read(entry.log_dir).info().get("error") or ""
    except Exception:  # noqa: BLE001 - a summary goes out without the error rather than not
        return ""


def tell_ends(registry: Registry, jobs: Iterable[Job], before: Mapping[str, str]) -> None:
    """After a look at ``jobs`` (whose registry states were ``before``; a run with no row
    there is not told) wrote their states to the registry: tell each sweep whose last open
    run just ended, and each run that just failed where NOTIFY_FAILED_RUNS asks, once."""
    ended = [job for job in jobs if job.id in before and not JobState(before[job.id]).terminal
             and job.recorded_state().terminal]
    sweeps: dict[str, Job] = {}
    for job in ended:
        settings = job.mode.settings
        if not any(_targets(settings)):
            continue
        if settings.get("NOTIFY_FAILED_RUNS") and job.recorded_state() is JobState.FAILED:
            _tell_once(registry, f"run-failed:{job.id}", settings, {
                "event": "run_failed", "id": job.id, "experiment": job.exp_name,
                "sweep": job.launch_info.get("sweep_id"),
                "error": _last_line(job.info().get("error"))})
        if job.launch_info.get("sweep_id"):
            sweeps.setdefault(job.launch_info["sweep_id"], job)
    for sweep, job in sweeps.items():
        entries = [e for e in registry.list(sweep=sweep)[0] if e.sweep == sweep]
        if entries and all(JobState(e.state).terminal for e in entries):
            errors = {e.id: _error(e) for e in entries if e.state != "succeeded"}
            _tell_once(registry, f"sweep-ended:{sweep}", job.mode.settings,
                       sweep_message(entries, errors))


def _tell_once(registry: Registry, key: str, settings: Mapping, message: dict) -> None:
    if registry.claim(key):
        deliver(settings, message)


def write_records(registry: Registry, jobs: Sequence[Job]) -> None:
    """Write what these runs' records say to the registry (:func:`record_fields`, the same
    fields whichever path looks) and tell the ends this brought (NOTIFY_*): the runs whose
    rows were open until now, whoever saw the end first (a wait that began after it, as
    ``logs -f`` and ``submit --wait`` do, still tells it). A run whose record cannot be read
    now is left as it was."""
    changes = []
    for job in jobs:
        with contextlib.suppress(DamagedRecordError, OSError):
            changes.append((job.id, record_fields(job.info())))
    with contextlib.suppress(sqlite3.Error):  # the rows are a cache; a full disk keeps them old
        before = registry.states(job.id for job in jobs)
        registry.update_many(changes)
        tell_ends(registry, jobs, before)


def record_ends(jobs: Sequence[Job]) -> None:
    """:func:`write_records` to each run's own registry (REGISTRY_PATH of its settings), as
    ``wait_all`` and ``Job.wait`` do when they saw runs end."""
    by_registry: dict[str, list[Job]] = {}
    for job in jobs:
        by_registry.setdefault(job.mode.settings.REGISTRY_PATH or "", []).append(job)
    for path, group in by_registry.items():
        with contextlib.suppress(sqlite3.Error, EasyLaunchError, OSError):
            write_records(open_registry(path or None), group)
