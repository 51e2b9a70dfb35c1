"""Local process facts that survive the launching process: identity by pid and start time."""

from __future__ import annotations

import signal
import socket
import time

from easylaunch_job.environment import is_alive, signal_group


def terminate_group(pgid: int, leader_started: str | None, grace: float) -> None:
    """SIGTERM a process group, then SIGKILL whatever is left of it after ``grace`` seconds."""
    signal_group(pgid, signal.SIGTERM)  # (a group that is gone: nothing is alive below)
    deadline = time.monotonic() + grace
    while is_alive(pgid, leader_started) and time.monotonic() < deadline:
        time.sleep(0.05)
    signal_group(pgid, signal.SIGKILL)


def same_host(launch: dict) -> bool:
    """True if the run was launched from this machine (so its pids mean something here)."""
    return launch.get("host") == socket.gethostname()


def launcher_gone(launch: dict) -> bool:
    """True if the process that launched the run is known to have ended (on this machine)."""
    return same_host(launch) and not is_alive(launch.get("launcher_pid"),
                                              launch.get("launcher_started"))
