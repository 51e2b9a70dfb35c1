"""Where a run stands: one vocabulary for the job side, the registry, the CLI and the dashboard."""

from __future__ import annotations

import enum
from typing import Any


class JobState(str, enum.Enum):
    """A run's state, as ``status.json`` records it. ``terminal`` states never change again.

    Attributes:
        QUEUED: Waiting to start (submitted, or written to a batch not submitted yet).
        RUNNING: Started and not ended.
        SUCCEEDED: The function returned (a command: it exited 0).
        FAILED: The function raised, or the run's process or command failed.
        CANCELLED: Stopped by a cancel (a search's pruned trials too).
        TIMEOUT: Stopped at its time limit.
        UNKNOWN: Not known just now (a damaged status.json, until it is written again).
    """

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        """True for the states that never change again: succeeded, failed, cancelled, timeout."""
        return self.value in TERMINAL_STATES

    def __str__(self) -> str:
        return self.value


def _pretty(state: JobState, printer: Any, cycle: bool) -> None:
    """IPython's and Jupyter's view of a state: ``succeeded``."""
    printer.text(state.value)


# (set after the class: Enum reserves _sunder_ names in its body)
setattr(JobState, "_repr_pretty_", _pretty)  # noqa: B010

# The terminal states' values, for records read as plain JSON.
TERMINAL_STATES = frozenset({JobState.SUCCEEDED.value, JobState.FAILED.value,
                             JobState.CANCELLED.value, JobState.TIMEOUT.value})
