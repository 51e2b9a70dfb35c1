"""easylaunch: launch ``fn(doodad_config, variant)`` in-process, locally, on clusters and clouds.

The public names are imported on first use (PEP 562): ``import easylaunch`` and the
``easylaunch`` command's start import no layer they do not use (``easylaunch --version`` none).
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # (as typing's, which type checkers read so; importing typing: 3 ms)
if TYPE_CHECKING:
    from typing import Any

    from easylaunch.api.commands import run_command, run_commands
    from easylaunch.api.launch import get_job, run_experiment, run_sweep
    from easylaunch.api.resubmission import resubmit, resubmit_launch
    from easylaunch.api.search import Search, run_search
    from easylaunch.errors import (
        EasyLaunchError,
        JobCancelledError,
        JobFailedError,
        LaunchError,
        MissingExtra,
        SettingsError,
    )
    from easylaunch.modes.local.pools import list_pools, start_pool, stop_pool
    from easylaunch.results import load_histories, load_sweep, plot_sweep
    from easylaunch.tracking.jobs import Job, JobState
    from easylaunch.tracking.progress import wait_all
    from easylaunch.tracking.registry import NoSuchJob, NoSuchRun, RegistryError
    from easylaunch_job.config import DoodadConfig, GitInfo
    from easylaunch_job.metrics import flush_metrics, log_metrics

__version__ = "0.1.0"

# each public name -> the module it is imported from on first use
_MODULE_OF = {
    **dict.fromkeys(("get_job", "run_experiment", "run_sweep"), "easylaunch.api.launch"),
    **dict.fromkeys(("run_command", "run_commands"), "easylaunch.api.commands"),
    **dict.fromkeys(("resubmit", "resubmit_launch"), "easylaunch.api.resubmission"),
    **dict.fromkeys(("Search", "run_search"), "easylaunch.api.search"),
    **dict.fromkeys(("EasyLaunchError", "JobCancelledError", "JobFailedError", "LaunchError",
                     "MissingExtra", "SettingsError"), "easylaunch.errors"),
    **dict.fromkeys(("load_histories", "load_sweep", "plot_sweep"), "easylaunch.results"),
    **dict.fromkeys(("Job", "JobState"), "easylaunch.tracking.jobs"),
    "wait_all": "easylaunch.tracking.progress",
    **dict.fromkeys(("list_pools", "start_pool", "stop_pool"), "easylaunch.modes.local.pools"),
    **dict.fromkeys(("NoSuchJob", "NoSuchRun", "RegistryError"), "easylaunch.tracking.registry"),
    **dict.fromkeys(("DoodadConfig", "GitInfo"), "easylaunch_job.config"),
    **dict.fromkeys(("flush_metrics", "log_metrics"), "easylaunch_job.metrics"),
}

__all__ = [
    "DoodadConfig",
    "EasyLaunchError",
    "GitInfo",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobState",
    "LaunchError",
    "MissingExtra",
    "NoSuchJob",
    "NoSuchRun",
    "RegistryError",
    "Search",
    "SettingsError",
    "flush_metrics",
    "get_job",
    "list_pools",
    "load_histories",
    "load_sweep",
    "log_metrics",
    "plot_sweep",
    "resubmit",
    "resubmit_launch",
    "run_command",
    "run_commands",
    "run_experiment",
    "run_search",
    "run_sweep",
    "start_pool",
    "stop_pool",
    "wait_all",
]


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (then kept in this module); else a
    subpackage or module (``easylaunch.results`` after ``import easylaunch``, as before)."""
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value
        return value
    if not name.startswith("_"):
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
