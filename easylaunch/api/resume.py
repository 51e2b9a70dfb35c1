"""A script's resume of its sweep (``run_sweep(..., resume=True)``): of the variants it gives,
those that did not succeed are launched, once each, in the same sweep, holding the sweep's lock
(``easylaunch resume SWEEP`` relaunches a recorded sweep's runs:
:func:`easylaunch.api.resubmission.resume_sweep`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from easylaunch.api.options import (
    LaunchOptions,
    check_exp_name,
    checked_variants,
    registry_of,
    script_name,
)
from easylaunch.errors import LaunchError
from easylaunch.runs.bundle import new_run_id
from easylaunch.runs.preview import Preview, dry_run_by_default
from easylaunch.runs.process import SESSION
from easylaunch.runs.rebuild import function_name, refuse_launches_while_importing
from easylaunch.runs.record import RunRecord
from easylaunch.runs.variants import variant_key
from easylaunch.settings import Settings, load_settings
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.registry import Registry
from easylaunch.tracking.sweeps import (
    Plan,
    newest_sweep,
    plan,
    sweep_entries,
    sweep_lock,
)

Launch = Callable[..., "list[Job] | Preview"]  # launch.launch_variants (which calls resumed)


def resumed(launch: Launch, method_call: Callable[..., Any],
            variants: Iterable[Mapping | None], opts: LaunchOptions, script: bool
            ) -> list[Job] | Preview:
    """Launch (with ``launch``) the variants that did not succeed in the sweep
    :func:`_chosen_sweep` picks, holding the sweep's lock until they are submitted; return the
    Jobs of all, in order. A script's single launches (``script``) each take a run of the sweep
    this process has not taken before."""
    refuse_launches_while_importing()
    checked = checked_variants(method_call, variants, opts.use_gpu)
    settings = load_settings(opts.config)
    registry = registry_of(settings)
    # (two first resumes of one script at once would each find no sweep and make one: the
    # choice is made holding a lock of the experiment's)
    choosing = sweep_lock(registry, f"{opts.exp_name}.{opts.mode}.choosing") \
        if opts.sweep is None and opts.resume is True else contextlib.nullcontext()
    with choosing:
        sweep_id = _chosen_sweep(registry, method_call, opts, settings, script)
        keys = [variant_key(v) for v in checked]
        with sweep_lock(registry, sweep_id):
            taken = SESSION.claimed.setdefault(sweep_id, set()) if script else set()
            entries = [e for e in sweep_entries(registry, sweep_id) if e.id not in taken]
            others = sorted({e.exp_name for e in entries} - {opts.exp_name})
            if others:
                raise LaunchError(f"sweep {sweep_id} holds runs of experiment(s) "
                                  f"{', '.join(others)}, not {opts.exp_name}: a resume "
                                  "matches the variants of one experiment; name this one's "
                                  "sweep another way (sweep=...)")
            chosen = plan(entries, keys)
            if settings.LAUNCH_LINE and entries:  # (a sweep's first launch says nothing more)
                print(f"easylaunch: {chosen.line(sweep_id)}", file=sys.stderr)
            launched = chosen.launched
            if not launched and (dry_run_by_default() if opts.dry_run is None
                                 else opts.dry_run):  # (a dry run gives a Preview, if empty)
                return Preview(opts.mode, 0, "nothing to launch", notes=[chosen.line(sweep_id)])
            again = tuple({"sweep_index": i, **({"resubmitted_from": last.id} if last else {})}
                          for i, last in launched)
            new = launch(method_call, [checked[i] for i, _ in launched],
                          dataclasses.replace(opts, resume=False, sweep=sweep_id), sweep_id,
                          again) if launched else []
            if isinstance(new, Preview):
                return new
            taken.update(e.id for e in chosen.kept if e is not None)
            taken.update(job.id for job in new)
    return _in_order(chosen, new)


def _chosen_sweep(registry: Registry, method_call: Callable[..., Any], opts: LaunchOptions,
                 settings: Settings, script: bool) -> str:
    """The sweep a resume goes into: the one named (``sweep``, or by id in ``resume``), else
    the one this process's earlier single launches chose (``script``), else the newest this
    script launched with this function into this log folder, else a new one."""
    if opts.sweep is not None:
        return check_exp_name(opts.sweep, "sweep")
    if isinstance(opts.resume, str):
        return registry.find_sweep(opts.resume)
    root = str(Path(os.path.expanduser(os.fspath(opts.base_log_dir or settings.LOCAL_LOG_DIR))
                    ).resolve())
    key = (opts.exp_name, opts.mode, root)
    if script and key in SESSION.sweeps:
        return SESSION.sweeps[key]
    found = newest_sweep(registry, opts.exp_name, opts.mode, root, script_name(),
                         function_name(method_call)) or new_run_id()
    return SESSION.sweep_of(*key, found) if script else found


def _in_order(chosen: Plan, new: list[Job]) -> list[Job]:
    """The Jobs of a resume, one per variant: the kept runs' and the new ones'."""
    kept = iter(Job.of_records(RunRecord.read(e.log_dir) for e in chosen.kept if e is not None))
    made = iter(new)
    return [next(made) if entry is None else next(kept) for entry in chosen.kept]
