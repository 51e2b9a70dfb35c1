"""What ``--json`` prints: one JSON document per command, for scripts and agents.

``{"version": 1, "runs": [...]}`` from ``ls`` and ``status``; ``{"version": 1, "searches":
[...]}`` from ``search``; ``{"version": 1, "pools": [...]}`` from ``pool ls``. One object per
run, search or pool, built here from what the tables show. The schema is
docs/reference/json.md; a field is only ever added within a version.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easylaunch.results.readers import last_values
from easylaunch.tracking.listing import Shown, job_label, seconds_run
from easylaunch.tracking.searches import driver_alive, latest_run

if TYPE_CHECKING:
    from easylaunch.modes.local.pools import PoolState

JSON_VERSION = 1  # raised only when a field changes meaning or goes away


def document(key: str, items: Sequence[Mapping[str, Any]], **extra: Any) -> str:
    """The JSON text of a command's output: ``{"version": 1, key: items, **extra}``.
    Values JSON has no number for (NaN, infinities) are written as null."""
    whole = {"version": JSON_VERSION, key: list(items), **extra}
    try:  # (the usual case, quick: every value is JSON's already)
        return json.dumps(whole, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(_plain(whole), ensure_ascii=False, allow_nan=False)


def _plain(value: Any) -> Any:
    """``value`` with NaN and infinities as None, and other non-JSON values as text."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (str, int)):
        return value
    return str(value)


def _time(value: float | None) -> float | None:
    """A registry time as Unix seconds; None where unknown (the registry's NO_TIME)."""
    return value if value is not None and value >= 0 else None


def metrics_here(shown: Shown) -> dict[str, float]:
    """Each metric's last value, read from the run's files on this machine: the folder its
    job writes where that is readable here (a shared file system), else its own folder
    (a remote run's: as last brought back)."""
    entry = shown.entry
    folder = Path(entry.log_dir)
    if entry.remote_log_dir and Path(entry.remote_log_dir).is_dir():
        folder = Path(entry.remote_log_dir)
    if not folder.is_dir():  # (a folder gone: one look, not one for each metrics file)
        return {}
    try:
        return last_values(folder)
    except OSError:
        return {}


def run_object(shown: Shown, now: float, metrics: dict[str, float] | None = None
               ) -> dict[str, Any]:
    """A run as ``ls --json`` and ``status --json`` give it (the schema's run object);
    ``metrics``: its last values where the caller read them already."""
    e = shown.entry
    state, _, note = shown.state.partition(" ")
    return {"id": e.id, "experiment": e.exp_name, "sweep": e.sweep or e.id, "mode": e.mode,
            "state": state, "note": note.strip().strip("()") or None,
            "waiting_for": shown.waiting, "restarts": shown.restarts,
            "launched_at": _time(e.created), "started_at": _time(e.started),
            "ended_at": _time(e.ended), "seconds": seconds_run(e, now),
            "job": job_label(e) or None, "reason": e.reason or None, "host": e.host,
            "log_dir": e.log_dir, "remote_log_dir": e.remote_log_dir, "variant": e.variant,
            "command": e.command, "git_commit": e.git_commit,
            "resubmitted_from": e.resubmitted_from,
            "metrics": metrics_here(shown) if metrics is None else metrics}


def search_object(folder: Path, summary: Mapping[str, Any]) -> dict[str, Any]:
    """A search as ``search --json`` gives it: its summary.json, with each trial's latest
    run id, its folder and whether a driver runs it."""
    best = summary.get("best")
    return {"id": summary.get("id", folder.name), "folder": str(folder),
            "objective": summary.get("objective"), "direction": summary.get("direction"),
            "n_trials": summary.get("n_trials"), "finished": summary.get("finished", 0),
            "counts": summary.get("counts", {}), "driver_alive": driver_alive(folder),
            "updated_at": summary.get("updated"),
            "best": None if not best else {"trial": best["number"], "value": best["value"],
                                           "run": _run_id(best)},
            "trials": [{"trial": t["number"], "state": t["state"], "value": t["value"],
                        "last_step": t.get("last_step"), "run": _run_id(t),
                        "runs": t.get("runs") or [], "variant": t.get("variant"),
                        "reason": t.get("reason")} for t in summary.get("trials", [])]}


def _run_id(trial: Mapping[str, Any]) -> str | None:
    run = latest_run(dict(trial))
    return None if run == "-" else run


def pool_object(pool: PoolState) -> dict[str, Any]:
    """``pool ls --json``'s object of one pool."""
    return {"name": pool.name, "workers": pool.workers, "busy": pool.busy, "free": pool.free,
            "queued": pool.queued, "done": pool.done, "gpus": pool.gpus,
            "preload": pool.preload, "idle_seconds": pool.idle_seconds,
            "started_at": pool.started_at, "ended": pool.ended, "where": pool.where,
            "folder": pool.folder}
