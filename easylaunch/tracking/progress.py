"""Waiting for many runs at once (``wait_all``), with a bar of their states on a terminal."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from easylaunch.modes.console import state_bar
from easylaunch.tracking.interrupts import interrupted
from easylaunch.tracking.listing import counts
from easylaunch.tracking.notify import record_ends
from easylaunch_job.states import JobState

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job


def _counts(states: Iterable[str]) -> str:
    return counts(list(states))


def wait_all(jobs: Iterable[Job], timeout: float | None = None,
             refresh_every: float = 2.0) -> list[JobState]:
    """Wait for every job; return their states. On a terminal a bar shows how many runs are
    in each state, and a one-line summary stays when it ends.

    The runs' own records are read often; backends (squeue, process tables) are asked at most
    every ``refresh_every`` seconds, once per mode for all the jobs still open.

    Args:
        jobs: The runs' Jobs, as a launch returned them.
        timeout: Seconds to wait at most (None: until every run ends).
        refresh_every: Seconds between two asks of the backends.

    Returns:
        Each run's state, in the jobs' order: terminal ones, unless ``timeout`` passed first.

    Raises:
        NotSubmittedError: A run is in a batch nobody has submitted, so it would never end.
    """
    jobs = list(jobs)
    started = time.monotonic()
    deadline = None if timeout is None else started + timeout
    pending, last_refresh = list(jobs), started
    states = {job.id: job.recorded_state() for job in jobs}
    try:
        with state_bar(len(jobs), "runs") as show:
            while pending and (deadline is None or time.monotonic() < deadline):
                if time.monotonic() - last_refresh >= refresh_every:
                    by_mode: dict[int, list[Job]] = {}
                    for job in pending:
                        by_mode.setdefault(id(job.mode), []).append(job)
                    for group in by_mode.values():
                        group[0].mode.refresh_many([job.record for job in group])
                    last_refresh = time.monotonic()
                for job in pending:  # (a new look: each record's status.json read again)
                    job.record.reload()
                    states[job.id] = job.recorded_state()
                pending = [j for j in pending if not states[j.id].terminal]
                _raise_not_submitted(pending, states)
                show(len(jobs) - len(pending), _counts(s.value for s in states.values()))
                if pending:  # a full scan reads every open run's record: twice a second at most
                    pending[0].mode.wait_for_change(pending[0].record, 0.5)
    except KeyboardInterrupt:
        raise interrupted(pending) from None
    final = [j.status(again=False) for j in jobs]
    record_ends(jobs)
    if len(jobs) > 1 and sys.stderr.isatty():
        print(f"{len(jobs)} runs: {_counts(s.value for s in final)} (waited "
              f"{time.monotonic() - started:.0f} s)", file=sys.stderr)
    return final


def _raise_not_submitted(pending: Sequence[Job], states: Mapping[str, JobState]) -> None:
    """Raise ``NotSubmittedError`` at once for the first queued run that was written to a
    batch nobody submitted (its wait would never end), wherever it is in the list."""
    for job in pending:
        if states[job.id] is JobState.QUEUED:
            job.mode.refuse_not_submitted(job.record)
