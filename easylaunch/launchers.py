"""Argument lists that start the runner; composed by modes, never joined into shell strings."""

from __future__ import annotations

import os
from pathlib import Path

from easylaunch.bundle import RUNNER_FILE


def python_runner(python: str, bundle_dir: str | os.PathLike,
                  log_dir: str | os.PathLike | None = None) -> list[str]:
    """``python BUNDLE/runner.py BUNDLE [--log-dir DIR]``."""
    argv = [python, str(Path(bundle_dir) / RUNNER_FILE), str(bundle_dir)]
    if log_dir is not None:
        argv += ["--log-dir", str(log_dir)]
    return argv
