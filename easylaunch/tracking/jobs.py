"""Job handles: state, waiting, results and cancellation of one run, from any process.

A run's own ``status.json`` is the record of how it went; the mode that launched it is asked
only while that record is not terminal (is the process still alive? did the scheduler drop it?).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from easylaunch.errors import JobCancelledError, JobFailedError
from easylaunch.modes import get_mode
from easylaunch.modes.base import Mode
from easylaunch.modes.display import html_table, shows_as
from easylaunch.modes.local import machine
from easylaunch.runs.record import NOT_RETURNED, DamagedRecordError, RunRecord, was_submitted
from easylaunch.settings import launch_settings
from easylaunch.tracking.interrupts import interrupted
from easylaunch.tracking.notify import record_ends
from easylaunch_job.outcome import load_outcome
from easylaunch_job.records import STDERR_LOG, STDOUT_LOG
from easylaunch_job.states import JobState

__all__ = ["DamagedRecordError", "Job", "JobState", "RemoteTraceback"]


class RemoteTraceback(Exception):
    """Carries a run's own traceback as the cause of the exception ``result()`` raises."""

    def __str__(self) -> str:
        return self.args[0]


class Job:
    """A handle on one launched run: its record (:class:`RunRecord`) and the mode that tracks
    it; ``Job.from_run_dir`` reconnects from a later process.

    Args:
        record: The run's record: its folder, launch.json and status.json.
        mode: The mode object that launched the run and tracks it.

    Attributes:
        id (str): The run's id.
        exp_name (str): The run's experiment.
        log_dir (Path): The run's folder on this machine.
    """

    def __init__(self, record: RunRecord, mode: Mode) -> None:
        self.record = record
        self.mode = mode
        self.id, self.exp_name, self.log_dir = record.id, record.exp_name, record.log_dir
        self._end_recorded = False  # whether a wait wrote the run's end to the registry

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, exp_name={self.exp_name!r}, mode={self.mode.name!r}, " \
               f"state={self.status().value!r})"

    def _repr_html_(self) -> str:
        """Jupyter's view: a one-row table of the run."""
        return html_table(["id", "experiment", "mode", "state", "folder"],
                          [[self.id, self.exp_name, self.mode.name, self.status(),
                            self.log_dir]])

    @classmethod
    def from_run_dir(cls, log_dir: str | os.PathLike) -> Job:
        """Reconnect to the run whose folder is ``log_dir``, with the settings and mode options
        it was launched with.

        Args:
            log_dir: The run's folder.

        Returns:
            A handle on the run.

        Raises:
            EasyLaunchError: The folder is no run folder, or its launch.json is damaged.
        """
        return cls.of_record(RunRecord.read(log_dir))

    @classmethod
    def of_record(cls, record: RunRecord) -> Job:
        """The handle on a run whose record is read, with the mode it was launched with.

        Args:
            record: The run's record, its launch.json read.

        Returns:
            A handle on the run.
        """
        return cls.of_records([record])[0]

    @classmethod
    def of_records(cls, records: Iterable[RunRecord]) -> list[Job]:
        """:meth:`of_record` of each run, those launched in one mode with the same settings and
        mode options sharing one mode object (made once).

        Args:
            records: The runs' records, their launch.json read.

        Returns:
            A handle on each run, in the records' order.
        """
        modes: dict[tuple, Mode] = {}
        jobs = []
        for record in records:
            launch = record.launch_info
            saved = launch.get("request") or {}
            options = saved.get("mode_options") or {}
            key = (launch["mode"], saved.get("settings_file"), repr(sorted(options.items())))
            if key not in modes:
                modes[key] = get_mode(launch["mode"]).create(
                    launch_settings(saved.get("settings_file")), options)
            jobs.append(cls(record, modes[key]))
        return jobs

    @property
    def launch_info(self) -> dict:
        """The run's launch.json: mode, ids, host, versions, command line, git commits."""
        return self.record.launch_info

    def info(self) -> dict:
        """The run's status.json as it is now (state, times, exit code, error); see
        :meth:`RunRecord.info`.

        Returns:
            The fields of status.json.
        """
        return self.mode.read_record(self.record)

    def recorded_state(self) -> JobState:
        """The state in the run's own status.json, without asking the backend.

        Returns:
            The state recorded (``unknown`` where status.json has none).
        """
        return JobState(self.info().get("state", "unknown"))

    def status(self, *, again: bool = True) -> JobState:
        """The current state, asking the backend when the run's own record is not final
        (``unknown`` while a damaged status.json has not been written again). Each call is a
        new look, status.json read again; ``again=False`` takes the record as the look that
        just read it left it (a refresh of many runs), read again only where it changed.

        Args:
            again: Read status.json again first; False takes it as last read.

        Returns:
            The run's state now.
        """
        if again:
            self.record.reload()
        try:
            state = self.recorded_state()
        except DamagedRecordError:  # unknown until the run or its backend writes an end
            with contextlib.suppress(DamagedRecordError):
                self.mode.refresh(self.record)
            try:
                return self.recorded_state()
            except DamagedRecordError:
                return JobState.UNKNOWN
        if not self.resolve_unsubmitted() and not state.terminal:
            self.mode.refresh(self.record)
        return self.recorded_state()

    def resolve_unsubmitted(self) -> bool:
        """End a queued run that was never handed to its mode and whose launcher is gone (it
        would wait forever); True if it did. Callers refreshing many jobs at once call it
        before the mode's ``refresh_many``.

        Returns:
            True if the run was ended here, as failed.
        """
        if self.recorded_state() is JobState.QUEUED and self._launcher_died_before_submitting():
            self.record_end("failed", "never started: the launching process ended before this "
                                      f"run was submitted; run it with `easylaunch resubmit "
                                      f"{self.id}`")
            return True
        return False

    def _launcher_died_before_submitting(self) -> bool:
        """True if the run was never handed to its mode and its launcher is gone."""
        launch = self.launch_info
        return was_submitted(launch) is False and machine.launcher_gone(launch)

    def done(self) -> bool:
        """True once the run has reached a terminal state.

        Returns:
            Whether the run has ended.
        """
        return self.status().terminal

    def wait(self, timeout: float | None = None) -> JobState:
        """Block until the run ends (or ``timeout`` seconds pass); return its state, its end
        written to the registry. Ctrl-C raises ``KeyboardInterrupt`` saying, in one line,
        whether the run goes on and how to cancel it.

        Args:
            timeout: Seconds to wait at most (None: until the run ends).

        Returns:
            The run's state: a terminal one, unless ``timeout`` passed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.01
        try:
            while True:
                state = self.status()
                if state.terminal:
                    self._record_end_once()
                    return state
                if deadline is not None and time.monotonic() >= deadline:
                    return state
                pause = delay if deadline is None else min(delay, deadline - time.monotonic())
                self.mode.wait_for_change(self.record, max(pause, 0.0))
                delay = min(delay * 1.5, 1.0)
        except KeyboardInterrupt:
            raise interrupted([self]) from None

    def _record_end_once(self) -> None:
        """Write the run's end to the registry (and tell it, if its row was open), once for
        this handle."""
        if not self._end_recorded:
            self._end_recorded = True
            record_ends([self])

    def result(self, timeout: float | None = None) -> Any:
        """The function's return value; raises its exception if it failed.

        Args:
            timeout: Seconds to wait for the run at most (None: until it ends).

        Returns:
            What the run's function returned.

        Raises:
            Exception: The function's own exception, where the run raised one.
            TimeoutError: The run had not ended when ``timeout`` passed.
            JobCancelledError: The run was cancelled or timed out.
            JobFailedError: The run failed without an exception to raise, or its result
                cannot be loaded here.
        """
        state = self.wait(timeout)
        if not state.terminal:
            raise TimeoutError(f"run {self.id} is still {state} after {timeout} s")
        if self.record.returned is not NOT_RETURNED:
            return self.record.returned
        info = self.info()
        if state in (JobState.CANCELLED, JobState.TIMEOUT):
            raise JobCancelledError(f"run {self.id} ended as {state}: {info.get('error', '')}")
        try:
            outcome = load_outcome(str(self.log_dir), info)
        except Exception as exc:  # noqa: BLE001 - a result this process cannot unpickle
            raise JobFailedError(f"run {self.id} {state}, but its result cannot be loaded "
                                 f"here ({exc!r}); error recorded: {info.get('error')}") from exc
        if outcome is None:
            raise JobFailedError(f"run {self.id} {state} without a result: "
                                 f"{info.get('error', 'no error recorded')}")
        if outcome[0] == "success":
            return outcome[1]
        _, raised, tb_text = outcome
        where = f"raised in easylaunch run {self.id} ({self.log_dir}):\n"
        remote = RemoteTraceback(where + tb_text)
        if isinstance(raised, BaseException):
            raise shows_as(raised, where + tb_text) from remote
        raise shows_as(JobFailedError(f"run {self.id} failed:\n{tb_text}"), where + tb_text)

    def fetch(self) -> str:
        """Bring the run's remote logs and results into its local folder; say what was done.

        Returns:
            A line saying what was done.
        """
        return self.mode.fetch(self.record)

    def record_backend(self, **ids: Any) -> None:
        """Store backend ids (a new instance, a new job) in launch.json.

        Args:
            **ids: The ids by name (``job_id="123"``), added to launch.json's ``backend``.
        """
        self.record.record_backend(**ids)

    def record_end(self, state: str, error: str) -> None:
        """Record a terminal state for a run whose own record has none (the first end wins).

        Args:
            state: The terminal state, as its value (``"failed"``, ``"cancelled"``).
            error: Why the run ended so, in one line.
        """
        self.record.record_end(state, error)

    def cancel(self) -> None:
        """Stop the run (a finished run is left as it is)."""
        try:
            ended = self.recorded_state().terminal
        except DamagedRecordError:  # its state is unknown: stop it, its end repairs the record
            ended = False
        if not ended:
            self.mode.cancel(self.record)

    @property
    def stdout_path(self) -> Path:
        """The run's stdout log, where it can be read from here."""
        return self.mode.readable_log(self.record, STDOUT_LOG)

    @property
    def stderr_path(self) -> Path:
        """The run's stderr log, where it can be read from here."""
        return self.mode.readable_log(self.record, STDERR_LOG)
