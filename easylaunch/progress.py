"""Progress bars on a terminal (rich), and nothing at all when stderr is not one."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from easylaunch.jobs import Job, JobState

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


def wait_all(jobs: Iterable[Job], timeout: float | None = None,
             refresh_every: float = 2.0) -> list[JobState]:
    """Wait for every job (with a progress bar on a terminal); return their states.

    The runs' own records are read often; backends (squeue, process tables) are asked at most
    every ``refresh_every`` seconds, once per mode for all the jobs still open.
    """
    jobs = list(jobs)
    deadline = None if timeout is None else time.monotonic() + timeout
    pending, last_refresh = list(jobs), time.monotonic()
    with bar(len(jobs), "waiting for runs") as advance:
        while pending and (deadline is None or time.monotonic() < deadline):
            if time.monotonic() - last_refresh >= refresh_every:
                by_mode: dict[int, list[Job]] = {}
                for job in pending:
                    by_mode.setdefault(id(job.mode), []).append(job)
                for group in by_mode.values():
                    group[0].mode.refresh_many(group)
                last_refresh = time.monotonic()
            still = [j for j in pending if not j.recorded_state().terminal]
            advance(len(pending) - len(still))
            if still:  # a full scan reads every open run's record: not more than twice a second
                still[0].mode.wait_for_change(still[0], 0.5)
            pending = still
    return [j.status() for j in jobs]
