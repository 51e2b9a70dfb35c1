"""Progress bars on a terminal (rich), and nothing at all when stderr is not one."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job, JobState

T = TypeVar("T")


@contextlib.contextmanager
def bar(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``: a rich progress bar on a terminal for 2+ items, else a no-op."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


def track(items: Sequence[T], description: str) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar (on a terminal)."""
    with bar(len(items), description) as advance:
        for item in items:
            yield item
            advance(1)


def _counts(states: Iterable[str]) -> str:
    from easylaunch.tracking.listing import counts

    return counts(list(states))


def wait_all(jobs: Iterable[Job], timeout: float | None = None,
             refresh_every: float = 2.0) -> list[JobState]:
    """Wait for every job; return their states. On a terminal a bar shows how many runs are
    in each state, and a one-line summary stays when it ends.

    The runs' own records are read often; backends (squeue, process tables) are asked at most
    every ``refresh_every`` seconds, once per mode for all the jobs still open.
    """
    from easylaunch.tracking.interrupts import interrupted
    from easylaunch.tracking.refresh import record_ends

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
                        group[0].mode.refresh_many(group)
                    last_refresh = time.monotonic()
                for job in pending:
                    states[job.id] = job.recorded_state()
                pending = [j for j in pending if not states[j.id].terminal]
                _raise_not_submitted(pending, states)
                show(len(jobs) - len(pending), _counts(s.value for s in states.values()))
                if pending:  # a full scan reads every open run's record: twice a second at most
                    pending[0].mode.wait_for_change(pending[0], 0.5)
    except KeyboardInterrupt:
        raise interrupted(pending) from None
    final = [j.status() for j in jobs]
    record_ends(jobs)
    if len(jobs) > 1 and sys.stderr.isatty():
        print(f"{len(jobs)} runs: {_counts(s.value for s in final)} (waited "
              f"{time.monotonic() - started:.0f} s)", file=sys.stderr)
    return final


def _raise_not_submitted(pending: Sequence[Job], states: Mapping[str, JobState]) -> None:
    """Raise ``NotSubmittedError`` at once for the first queued run that was written to a
    batch nobody submitted (its wait would never end), wherever it is in the list."""
    from easylaunch.tracking.jobs import JobState

    for job in pending:
        if states[job.id] is JobState.QUEUED:
            job.mode.refuse_not_submitted(job)


@contextlib.contextmanager
def state_bar(total: int, description: str) -> Iterator[Callable[[int, str], None]]:
    """Yield ``show(done, counts)``: a bar of ``total`` runs with counts by state on a
    terminal for 2+ runs (elapsed time, no jumpy estimate), else a no-op."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda done, counts: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[counts]}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total, counts="")
        yield lambda done, counts: progress.update(task, completed=done, counts=counts)
