"""Resuming a recorded sweep from the command line (``easylaunch resume SWEEP``): its runs that
did not succeed are launched again, once each, in the same sweep (a script resumes its sweep
with ``run_sweep(..., resume=True)``: see :mod:`easylaunch.api.launch`)."""

from __future__ import annotations

from easylaunch.api.launch import _registry
from easylaunch.api.resubmission import resubmit_launch
from easylaunch.settings import ConfigArg, load_settings
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import Entry
from easylaunch.tracking.sweeps import (
    kept,
    launch_of,
    resume_line,
    sweep_entries,
    sweep_lock,
    to_relaunch,
)


def resume_sweep(sweep: str, config: ConfigArg = None, detach: bool | None = None,
                 current_code: bool = False, current_settings: bool = False
                 ) -> tuple[str, list[tuple[Entry, Job]]]:
    """Launch again, as new runs of the recorded sweep ``sweep`` (its id or a unique start of
    one), the runs that did not succeed: the last run of each variant's runs where none
    succeeded or is under way, each launch's together (:func:`resubmit_launch`, with its
    ``detach``, ``current_code`` and ``current_settings``), holding the sweep's lock. Returns
    the line saying what was done, and each run launched again with its new Job."""
    registry = _registry(load_settings(config))
    sweep_id = registry.find_sweep(sweep)
    with sweep_lock(registry, sweep_id):
        entries = sweep_entries(registry, sweep_id)
        olds = to_relaunch(entries)
        launches: dict[str, list[Entry]] = {}
        for entry in olds:
            launches.setdefault(launch_of(entry), []).append(entry)
        done = [pair for group in launches.values() for pair in zip(group, resubmit_launch(
            [e.id for e in group], config, detach if group[0].mode == "local" else None,
            current_code, current_settings), strict=True)]
    kept_states = [e.state for e in entries if kept(e)]
    return resume_line(sweep_id, [e.state for e in olds], kept_states, "runs"), done
