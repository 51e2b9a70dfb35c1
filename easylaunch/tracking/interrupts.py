"""Ctrl-C during a wait for runs: the one line says which runs go on without this process and
the command that cancels them (:mod:`easylaunch.modes.console` says it and ends the process)."""

from __future__ import annotations

import collections
import os
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.modes.console import install_hook, line
from easylaunch.modes.display import shows_as
from easylaunch.runs.process import in_kernel
from easylaunch.runs.record import sweep_of
from easylaunch.settings import ENV_CONFIG, LOCAL_CONFIG_NAME, USER_CONFIG_PATH

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job


def goes_on(what: str, count: int, cancel: Sequence[str]) -> str:
    """``3 slurm runs go on without this process: cancel them with `CANCEL```."""
    one = count == 1
    without = "" if in_kernel() else " without this process"  # (a kernel goes on too)
    return (f"{what} {'goes' if one else 'go'} on{without}: cancel "
            f"{'it' if one else 'them'} with " + " and ".join(f"`{c}`" for c in cancel))


def interrupted(jobs: Sequence[Job]) -> KeyboardInterrupt:
    """The exception a wait for ``jobs`` (those still open) raises when Ctrl-C stops it, its
    message the one line (a plain ``KeyboardInterrupt``, so ``except KeyboardInterrupt``
    and Python's own exit on it hold)."""
    install_hook()
    going = [job for job in jobs if job.mode.goes_on_without(job.record)]
    return interrupt_saying(line(goes_on(_runs(going), len(going), cancel_commands(going))
                                 if going else ""))


def interrupt_saying(said: str) -> KeyboardInterrupt:
    """A KeyboardInterrupt whose message is ``said``, which Jupyter shows as that one line
    (not the frames of easylaunch that raise it)."""
    return shows_as(KeyboardInterrupt(said), f"KeyboardInterrupt: {said}")


def _runs(jobs: Sequence[Job]) -> str:
    """``run abc (slurm)``, ``3 slurm runs``, ``5 runs (3 slurm, 2 ssh)``."""
    if len(jobs) == 1:
        return f"run {jobs[0].id} ({jobs[0].mode.name})"
    modes = collections.Counter(job.mode.name for job in jobs)
    if len(modes) == 1:
        return f"{len(jobs)} {jobs[0].mode.name} runs"
    return f"{len(jobs)} runs ({', '.join(f'{n} {mode}' for mode, n in modes.items())})"


def cancel_commands(jobs: Sequence[Job]) -> list[str]:
    """The commands that cancel these runs: by id for one, else by their sweeps."""
    start = "easylaunch cancel" + config_flag(jobs[0].mode.settings.path)
    if len(jobs) == 1:
        return [f"{start} {jobs[0].id}"]
    sweeps: dict[str | None, None] = {}
    for job in jobs:
        try:
            sweeps[sweep_of(job.launch_info)] = None
        except (OSError, ValueError):  # a record not readable now: name the runs instead
            sweeps[None] = None
    if None in sweeps:
        return [f"{start} {' '.join(job.id for job in jobs)}"]
    return [f"{start} --sweep {sweep}" for sweep in sweeps]


def config_flag(path: str | None) -> str:
    """`` --config PATH`` where a bare ``easylaunch`` would not read the settings file
    ``path`` (the one runs were launched with, or a command's --config), else "". Without
    ``path``: EASYLAUNCH_CONFIG's file, if set (a script's, or the ``easylaunch`` command's
    --config, which it exports)."""
    path = path or os.environ.get(ENV_CONFIG)
    if not path:
        return ""
    found = [p for p in (Path(LOCAL_CONFIG_NAME), USER_CONFIG_PATH.expanduser()) if p.is_file()]
    if found and found[0].resolve() == Path(path).resolve():
        return ""
    return f" --config {shlex.quote(os.path.abspath(path))}"
