"""What every mode provides: option checks, a pure prepare, submit, and tracking; and the shell
line that modes reaching a run's machine share (``easylaunch shell``)."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from easylaunch.errors import EasyLaunchError, LaunchError, NotSubmittedError
from easylaunch.settings import Mount, Settings

if TYPE_CHECKING:
    from easylaunch.runs.bundle import Run
    from easylaunch.runs.preview import Preview
    from easylaunch.runs.record import LaunchRequest, RunRecord


class RunSink(Protocol):
    """Takes each run as a launch makes it (:meth:`Mode.stream_runs`)."""

    def made(self, run: Run) -> None:
        """The run is made (its folder complete)."""

    def abort(self) -> None:
        """The launch ends (failed, or its runs were handed over): stop what is under way."""


class _NoSink:
    """Where runs go as they are made, for modes that take them only at submission."""

    def made(self, run: Run) -> None:
        pass

    def abort(self) -> None:
        pass


NO_SINK = _NoSink()


class ModeKind(Protocol):
    """What the registry gives for a mode name: a Mode class, a :class:`Composed` entry, or
    an entry that picks a class by the options (``local``)."""

    name: str
    options: dict[str, Any]
    restarts: bool
    needs_bundle: bool

    def create(self, settings: Settings, mode_options: dict[str, Any]) -> Mode:
        """The mode object for a launch with these settings and options."""


@dataclass(frozen=True)
class Composed:
    """A mode users name that is a shared class with its parts (a scheduler, a container, a
    way of packing runs): its MODES table entry, used as a Mode class is (``name``, ``options``,
    ``restarts``, ``create``)."""

    name: str
    cls: type[Mode]
    options: dict[str, Any]
    restarts: bool
    parts: dict[str, Any]  # attributes of the mode object: scheduler=, container=, packing=
    needs_bundle: bool = True

    def create(self, settings: Settings, mode_options: dict[str, Any]) -> Mode:
        return self.cls.create(settings, mode_options, self)


class Mode(ABC):
    """A way to run bundles. Subclasses add only what differs between backends; a mode made of
    parts takes its name, options and parts from its :class:`Composed` entry."""

    name: str
    needs_bundle: bool = True
    options: dict[str, Any] = {}  # accepted mode options and their defaults
    restarts: bool = False  # whether it starts runs again (MAX_RESTARTS)
    # how often a follower of runs' curves (run_search's driver) asks the backend and brings
    # metrics over: asking this machine's process table costs nothing
    backend_poll_seconds: float = 0.0

    def __init__(self, settings: Settings, mode_options: dict[str, Any],
                 kind: Composed | None = None) -> None:
        if kind is not None:
            self.name, self.options, self.restarts = kind.name, kind.options, kind.restarts
            for part, value in kind.parts.items():
                setattr(self, part, value)
        unknown = sorted(set(mode_options) - set(self.options))
        if unknown:
            accepted = ", ".join(sorted(self.options)) or "none"
            raise LaunchError(f"mode {self.name!r} does not take the option(s) "
                              f"{', '.join(unknown)}; it takes: {accepted}")
        self.settings = settings
        self.opts = {**self.options, **mode_options}

    @classmethod
    def create(cls, settings: Settings, mode_options: dict[str, Any],
               kind: Composed | None = None) -> Mode:
        """The mode object for a launch with these settings and options (a mode whose options
        choose another way to run returns that mode's object)."""
        return cls(settings, mode_options, kind)

    def checks_while_runs_are_made(self) -> bool:
        """Whether :meth:`check` asks a far host (a round trip worth overlapping with making
        the runs, which it does not need); a refusal then takes the runs made back."""
        return False

    def stream_runs(self, request: LaunchRequest, ready: Callable[[], bool]) -> RunSink:
        """Where each run goes as the launch makes it (a far host's copy under way while the
        next runs are made; ``ready``: whether :meth:`check` is done)."""
        return NO_SINK

    def check(self, request: LaunchRequest) -> Any:
        """Refuse a request this mode cannot run, before anything is made (or, where
        :meth:`checks_while_runs_are_made`, while the runs are made: a refusal takes them
        back); return what it learned of the target on the way (a cluster's folder and
        limits, a host's GPUs), which :meth:`prepare` receives. Nothing is kept on the mode."""
        return None

    @abstractmethod
    def prepare(self, request: LaunchRequest, runs: list[Run], facts: Any) -> Any:
        """Render what starts the runs (commands, scripts, as text) without side effects;
        ``facts``: what :meth:`check` returned."""

    @abstractmethod
    def submit(self, request: LaunchRequest, runs: list[Run], prepared: Any) -> list[RunRecord]:
        """Start the prepared runs and return their records."""

    @abstractmethod
    def preview(self, request: LaunchRequest, runs: list[Run], prepared: Any) -> Preview:
        """What :meth:`submit` would write and run for ``prepared`` (a dry run)."""

    def launched(self, runs: list[Run]) -> str:
        """What the launch line says was done with these runs, just submitted ("submitted as
        Slurm job 12 (an array of 4)", "ran in this process")."""
        return "launched"

    def sees_this_machine(self) -> bool:
        """Whether the runs see this machine's file system (this machine, or a cluster whose
        login node this is), so that a folder of the launch is there for them too."""
        return True

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        """What doodad put in ``extra_launch_info`` for this mode (instance type, image)."""
        return {}

    def read_record(self, job: RunRecord) -> dict:
        """The run's status.json as it is now: its own record copied here first
        (:meth:`sync_record`), then read where it changed (:meth:`RunRecord.info`)."""
        self.sync_record(job)
        return job.info()

    def sync_record(self, job: RunRecord) -> None:
        """Copy the run's own record into its local folder, where the job writes it elsewhere
        (default: the job writes it there already)."""

    def refresh(self, job: RunRecord) -> None:
        """Bring a non-terminal status.json up to date with the backend (default: nothing)."""

    def refresh_many(self, jobs: list[RunRecord]) -> None:
        """Refresh several jobs of this mode; backends override it to ask once for all."""
        for job in jobs:
            self.refresh(job)

    def cancel(self, job: RunRecord) -> None:
        """Stop a run that has not ended."""
        raise NotImplementedError(f"mode {self.name!r} cannot cancel runs")

    def cancel_many(self, jobs: list[RunRecord]) -> dict[str, EasyLaunchError]:
        """Stop these runs (none ended) as :meth:`cancel` does, one by one; what kept each one
        that failed from being stopped. Modes that stop many in one step override it."""
        failures: dict[str, EasyLaunchError] = {}
        for job in jobs:
            try:
                self.cancel(job)
            except EasyLaunchError as exc:
                failures[job.id] = exc
        return failures

    def goes_on_without(self, job: RunRecord) -> bool:
        """Whether the run goes on when this process ends (default: yes; a local run this
        process supervises stops with it)."""
        return True

    def not_submitted(self, job: RunRecord) -> str | None:
        """Why a run will never start by itself (written to a batch nobody submitted, with
        how to submit it); None for a run that will."""
        return None

    def refuse_not_submitted(self, job: RunRecord) -> None:
        """Raise ``NotSubmittedError`` for a run that will never start by itself: a wait for
        it would never end."""
        why = self.not_submitted(job)
        if why is not None:
            raise NotSubmittedError(f"run {job.id} was {why}")

    def waiting_reason(self, job: RunRecord) -> str | None:
        """Why a queued run has not started, as the backend says (None: unknown)."""
        return None

    def heard_wait(self, job: RunRecord) -> str | None:
        """Why a queued run waits, as the backend said in this mode's last refresh (asks
        nothing; None: it did not say)."""
        return None

    def remote_log_dir(self, run: Run) -> str | None:
        """Where the run writes its logs when that is not its local folder (for the registry)."""
        return None

    def readable_log(self, job: RunRecord, name: str) -> Path:
        """Where this run's log file ``name`` can be read from this machine (a mode whose runs
        write it elsewhere may bring it here first)."""
        return job.log_dir / name

    def readable_folder(self, job: RunRecord) -> Path:
        """The folder this run's files (metrics, event files) are read from on this machine."""
        return job.log_dir

    def bring_logs(self, job: RunRecord) -> None:
        """Bring the run's logs up to date here, where it writes them elsewhere, those
        :meth:`readable_log` does not bring itself (default: it writes them here)."""

    def bring_metrics(self, jobs: Sequence[RunRecord]) -> None:
        """Bring the open runs' ``metrics.jsonl`` up to date in :meth:`readable_folder`,
        where the runs write them elsewhere (default: they write them there)."""

    def fetch(self, job: RunRecord) -> str:
        """Bring remote logs and results into the local run folder; say what was done."""
        return f"run {job.id} ran on this machine: everything is already in {job.log_dir}"

    def snapshot_mounts(self) -> list[Mount]:
        """The code folders whose snapshots the runs import (CODE_DIRS_TO_MOUNT)."""
        return self.settings.code_mounts()

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        """The argv (run here, on a terminal) of an interactive shell on the machine and in
        the folder of a running run, with its environment; and the environment to run it
        with here (None: this process's)."""
        raise LaunchError(f"mode {self.name!r} has no way into a run's machine")

    def wait_for_change(self, job: RunRecord, timeout: float) -> None:
        """Block up to ``timeout`` seconds or until the job may have changed."""
        time.sleep(timeout)


# ``bash -c`` program of the shell: into the run's folder, then an interactive bash
_INTO_FOLDER = 'cd -- "$1" || exit 1; shift; exec bash -i'


def shell_in(folder: str, variables: Mapping[str, str]) -> list[str]:
    """The argv of an interactive bash in ``folder`` with ``variables`` set (no shell reads
    the values: they stay argv words until bash's own ``cd``)."""
    return ["env", *(f"{k}={v}" for k, v in variables.items()),
            "bash", "-c", _INTO_FOLDER, "easylaunch-shell", folder]


def process_environment(pid: int) -> dict[str, str]:
    """The environment a process on this machine started with (/proc), to give a shell the
    run's own (GPU pinning, PYTHONPATH, the scheduler's variables)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError as exc:
        raise LaunchError(f"cannot read the run's environment (process {pid}): {exc}") from None
    pairs = (item.decode(errors="replace").partition("=") for item in data.split(b"\0") if item)
    return {key: value for key, _, value in pairs if key}
