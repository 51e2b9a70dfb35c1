"""Local process facts that survive the launching process: identity by pid and start time."""

from __future__ import annotations

import os
import signal


def start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (None if there is no such process)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return fields[19]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    except OSError:
        return None


def is_alive(pid: int | None, started: str | None) -> bool:
    """True if ``pid`` runs and is the same process that started at ``started``."""
    if not pid:
        return False
    now = start_time(pid)
    if now is None:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return started is None  # no /proc: trust the pid only when no start time was recorded
    if _is_zombie(pid):
        return False
    return started is None or now == started


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def signal_group(pgid: int, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to a process group; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
