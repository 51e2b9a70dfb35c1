"""Checkpoints: what the run's function calls (``easylaunch.checkpoint`` names them)."""

from __future__ import annotations

import os
import pickle
from typing import Any

from easylaunch_job.environment import (
    ENV_CHECKPOINT_DIR,
    ENV_CHECKPOINTING,
    ENV_STOPPING,
    rank_info,
)
from easylaunch_job.records import CHECKPOINT_DIR, write_bytes_atomic

CHECKPOINT_SUFFIX = ".pkl"


class Stopped(BaseException):
    """Ends the function at :func:`save_checkpoint` when the run is being stopped: the run
    restarts from the checkpoint just written. (Not an ``Exception``: ``except Exception``
    does not catch it.)"""


def checkpoint_dir() -> str:
    """The run's checkpoint folder, ``<run folder>/checkpoint`` (``./checkpoint`` outside a
    run), made if missing. It survives restarts; cloud modes sync it to the bucket.

    Returns:
        The folder's absolute path.
    """
    path = os.environ.get(ENV_CHECKPOINT_DIR) or os.path.abspath(CHECKPOINT_DIR)
    os.makedirs(path, exist_ok=True)
    return path


def _checkpoint_path(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or \
            not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"checkpoint name {name!r}: use letters, digits and . _ - only")
    return os.path.join(checkpoint_dir(), name + CHECKPOINT_SUFFIX)


def stop_requested() -> str | None:
    """Why the run is being stopped (``"time limit"``, ``"preempted"``), None while it is not:
    save a checkpoint now.

    Returns:
        The reason the run is being stopped, or None.
    """
    return os.environ.get(ENV_STOPPING) or None


def save_checkpoint(state: Any, name: str = "state") -> str:
    """Pickle ``state`` into the checkpoint folder (rank 0 writes; other ranks skip), through a
    temporary file flushed to disk, so a crash leaves the previous checkpoint whole; return its
    path. When the run is being stopped, raise :class:`Stopped` once it is written.

    Args:
        state: What to save: anything ``pickle`` can write.
        name: The checkpoint's name: letters, digits and ``. _ -`` (one file each).

    Returns:
        The checkpoint file's path.

    Raises:
        Stopped: The run is being stopped: the checkpoint is written, and the run restarts.
        ValueError: ``name`` holds other characters, or starts with a dot.
    """
    os.environ[ENV_CHECKPOINTING] = "1"
    path = _checkpoint_path(name)
    if rank_info()[0] == 0:
        write_bytes_atomic(path, pickle.dumps(state, pickle.HIGHEST_PROTOCOL), durable=True)
    reason = stop_requested()
    if reason:
        raise Stopped(f"checkpoint saved; the run stops ({reason}) and restarts from it")
    return path


def load_checkpoint(default: Any = None, name: str = "state") -> Any:
    """The state last saved under ``name`` (by this attempt or an earlier one), or ``default``
    when there is none yet.

    Args:
        default: What to return while no checkpoint of that name exists.
        name: The checkpoint's name, as it was saved under.

    Returns:
        The state last saved, unpickled, or ``default``.

    Raises:
        ValueError: ``name`` holds characters other than letters, digits and ``. _ -``.
    """
    os.environ[ENV_CHECKPOINTING] = "1"
    try:
        with open(_checkpoint_path(name), "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return default


# ``easylaunch.checkpoint``'s names for the helpers above.
CHECKPOINT_API = {"save": save_checkpoint, "load": load_checkpoint,
                  "stop_requested": stop_requested, "folder": checkpoint_dir,
                  "Stopped": Stopped}
