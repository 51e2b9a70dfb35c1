"""The validated description of one launch: what to run, how many variants, where to log."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class LaunchRequest:
    """Everything a mode needs to check before anything is made or started."""

    method_call: Callable[..., Any] | None  # (None: read back from launch.json, the bundle has it)
    variants: list[dict]
    exp_name: str
    use_gpu: bool
    gpu_id: int | str | None
    log_root: Path
    slurm_config_name: str | None
    script_name: str

    @classmethod
    def of_launch(cls, launch: dict, variants: list[dict]) -> LaunchRequest:
        """The request a run was launched with, from its launch.json, for ``variants``
        (without the function: the run's bundle holds it)."""
        saved = launch["request"]
        return cls(method_call=None, variants=variants, exp_name=launch["exp_name"],
                   use_gpu=saved["use_gpu"], gpu_id=saved["gpu_id"],
                   log_root=Path(saved["log_root"]),
                   slurm_config_name=saved["slurm_config_name"],
                   script_name=launch["script_name"])
