"""Where a run stands: one vocabulary for the job side, the registry, the CLI and the dashboard."""

from __future__ import annotations

import enum


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


# The terminal states' values, for records read as plain JSON.
TERMINAL_STATES = frozenset({JobState.SUCCEEDED.value, JobState.FAILED.value,
                             JobState.CANCELLED.value, JobState.TIMEOUT.value})
