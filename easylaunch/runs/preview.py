"""What a launch would do, shown without doing it: ``dry_run=True`` and ``easylaunch preview``.

A dry run checks the launch as a real one does (settings, variants, pickling, the mode's
checks, which ask a cluster over SSH too), builds its run bundles in a temporary folder, asks
the mode to prepare them, and shows what the mode would write and run: job scripts, commands,
resources, instance counts. It submits, registers and keeps nothing.

What it returns stands for the runs it would make: iterate it for the :class:`PlannedRun` objects
(id, experiment, folder as they would be); asking one (or the preview) for a state, an end or a
result raises :class:`DryRunStop`, which ``easylaunch preview`` takes as the script's end.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, NoReturn

from easylaunch.errors import EasyLaunchError

ENV_DRY_RUN = "EASYLAUNCH_DRY_RUN"  # "1": every launch of this process is a dry run
_shown = 0  # dry runs this process has shown


def dry_run_by_default() -> bool:
    """Whether launches that do not say are dry runs (``easylaunch preview`` sets this)."""
    return os.environ.get(ENV_DRY_RUN) == "1"


def show(preview: Preview) -> Preview:
    """Print ``preview`` (a dry run's outcome) and count it."""
    global _shown
    _shown += 1
    print(preview, end="", flush=True)
    return preview


def shown() -> int:
    """How many dry runs this process has shown."""
    return _shown


def resource_fields(resources: Any) -> dict[str, Any]:
    """A resources dataclass as a dict of the fields that are set (not None or "")."""
    return {f.name: value for f in fields(resources)
            if (value := getattr(resources, f.name)) not in (None, "")}


def op_line(op: Mapping[str, Any]) -> str:
    """A far-side ``run`` op as the command line it runs (in its folder, if it names one)."""
    line = shlex.join(op["argv"])
    return f"cd {shlex.quote(op['cwd'])} && {line}" if op.get("cwd") else line


class DryRunStop(EasyLaunchError):
    """A script asked a dry run's runs for what only launched runs have (a state, an end, a
    result)."""


@dataclass(frozen=True)
class PlannedRun:
    """A run a dry run would make, as it would be named; it was not launched."""

    id: str
    exp_name: str
    log_dir: Path
    variant: dict

    def _none(self, what: str) -> NoReturn:
        raise DryRunStop(f"run {self.id} belongs to a dry run: it was not launched, so it has "
                         f"no {what}")

    def status(self) -> NoReturn:
        self._none("state")

    recorded_state = done = status

    def wait(self, timeout: float | None = None) -> NoReturn:
        self._none("end to wait for")

    def result(self, timeout: float | None = None) -> NoReturn:
        self._none("result")


@dataclass
class Preview:
    """What one launch would write and run."""

    mode: str
    runs: int
    where: str  # "this machine", "cluster 'gpu-box' (user@host)", "ec2 us-east-1"
    files: dict[str, str] = field(default_factory=dict)  # path -> text, as written there
    commands: list[str] = field(default_factory=list)  # command lines, as they would run
    resources: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    planned: list[PlannedRun] = field(default_factory=list)  # the runs, as they would be

    def __iter__(self) -> Iterator[PlannedRun]:
        return iter(self.planned)

    def __len__(self) -> int:
        return len(self.planned)

    def __getitem__(self, index: int) -> PlannedRun:
        return self.planned[index]

    @property
    def id(self) -> str:  # (what run_experiment's dry run returns stands for its one run)
        return self.planned[0].id

    def status(self) -> NoReturn:
        self.planned[0].status()

    recorded_state = done = status

    def wait(self, timeout: float | None = None) -> NoReturn:
        self.planned[0].wait()

    def result(self, timeout: float | None = None) -> NoReturn:
        self.planned[0].result()

    def replace_path(self, old: str, new: str) -> Preview:
        """This preview with the folder ``old`` named ``new`` everywhere (a dry run builds its
        bundles in a temporary folder that stands for the log root)."""
        def swap(text: str) -> str:
            return text.replace(old, new)

        return Preview(self.mode, self.runs, self.where,
                       {swap(path): swap(text) for path, text in self.files.items()},
                       [swap(c) for c in self.commands],
                       {k: swap(v) if isinstance(v, str) else v
                        for k, v in self.resources.items()},
                       [swap(n) for n in self.notes],
                       [PlannedRun(r.id, r.exp_name, Path(swap(str(r.log_dir))), r.variant)
                        for r in self.planned])

    def __str__(self) -> str:
        lines = [f"dry run: {self.runs} run(s) in mode {self.mode!r} on {self.where}; nothing "
                 "was submitted, registered or kept"]
        if self.resources:
            lines.append("resources:")
            lines += [f"  {key}: {value}" for key, value in self.resources.items()]
        for path, text in self.files.items():
            lines += [f"--- would write {path}", text.rstrip("\n")]
        if self.commands:
            lines.append("would run:")
            lines += [f"  {command}" for command in self.commands]
        lines += self.notes
        return "\n".join(lines) + "\n"
