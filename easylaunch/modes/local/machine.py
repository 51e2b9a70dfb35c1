"""This machine as local runs see it: processes known by pid and start time (which survive the
launching process), and the GPUs it offers."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping

from easylaunch.errors import installed
from easylaunch_job.environment import is_alive, signal_group

# each tracker's library, as pip names it (its module and its extra: the tracker's name)
TRACKER_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow-skinny", "tensorboard": "tensorboard"}


def check_trackers(names: Iterable[str]) -> None:
    """The libraries of the TRACKERS of runs in this Python are installed (else MissingExtra:
    a run would go on without its tracker, saying so only in its log)."""
    for name in names:
        installed(name, f"TRACKERS {name!r}", name, TRACKER_PACKAGES.get(name))


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


def chosen_gpu_ids(configured: list | None = None,
                   env: Mapping[str, str] | None = None) -> list[str] | None:
    """LOCAL_GPU_IDS if set, else CUDA_VISIBLE_DEVICES (of ``env``, default this process's);
    None when neither chooses (every GPU ``nvidia-smi`` lists is there to use)."""
    if configured is not None:
        return [str(g) for g in configured]
    visible = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return [g.strip() for g in visible.split(",") if g.strip() and g.strip() != "-1"]
    return None


def local_gpu_ids(configured: list | None = None,
                  env: Mapping[str, str] | None = None) -> list[str]:
    """LOCAL_GPU_IDS if set, else CUDA_VISIBLE_DEVICES (of ``env``, default this process's),
    else what ``nvidia-smi`` lists."""
    chosen = chosen_gpu_ids(configured, env)
    if chosen is not None:
        return chosen
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]
