"""The validated description of one launch: what to run, how many variants, where to log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a mode needs to check before anything is made or started."""

    method_call: Callable[..., Any]
    variants: list[dict]
    exp_name: str
    use_gpu: bool
    gpu_id: int | str | None
    log_root: Path
    slurm_config_name: str | None
    script_name: str
