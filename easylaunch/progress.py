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


def wait_all(jobs: Iterable[Job], timeout: float | None = None) -> list[JobState]:
    """Wait for every job (with a progress bar on a terminal); return their states."""
    jobs = list(jobs)
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = list(jobs)
    with bar(len(jobs), "waiting for runs") as advance:
        while pending and (deadline is None or time.monotonic() < deadline):
            left = 0.2 if deadline is None else min(0.2, max(deadline - time.monotonic(), 0))
            pending[0].wait(timeout=left)
            still = [j for j in pending if not j.status().terminal]
            advance(len(pending) - len(still))
            pending = still
    return [j.status() for j in jobs]
