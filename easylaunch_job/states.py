"""Where a run stands: one vocabulary for the job side, the registry, the CLI and the dashboard."""

from __future__ import annotations

import enum
from typing import Any


class JobState(str, enum.Enum):
    """A run's state, as ``status.json`` records it. ``terminal`` states never change again."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
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
