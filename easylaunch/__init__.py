"""easylaunch: launch ``fn(doodad_config, variant)`` in-process, locally, on clusters and clouds."""

from easylaunch.api.launch import (
    get_job,
    run_command,
    run_commands,
    run_experiment,
    run_sweep,
)
from easylaunch.api.resubmission import resubmit, resubmit_launch
from easylaunch.errors import (
    EasyLaunchError,
    JobCancelledError,
    JobFailedError,
    LaunchError,
    SettingsError,
)
from easylaunch.results import load_histories, load_sweep, plot_sweep
from easylaunch.tracking.jobs import Job, JobState
from easylaunch.tracking.progress import wait_all
from easylaunch.tracking.registry import NoSuchJob, NoSuchRun, RegistryError
from easylaunch_job.config import DoodadConfig, GitInfo
from easylaunch_job.metrics import flush_metrics, log_metrics

__version__ = "0.1.0"

__all__ = [
    "DoodadConfig",
    "EasyLaunchError",
    "GitInfo",
    "Job",
    "JobCancelledError",
    "JobFailedError",
    "JobState",
    "LaunchError",
    "NoSuchJob",
    "NoSuchRun",
    "RegistryError",
    "SettingsError",
    "flush_metrics",
    "get_job",
    "load_histories",
    "load_sweep",
    "log_metrics",
    "plot_sweep",
    "resubmit",
    "resubmit_launch",
    "run_command",
    "run_commands",
    "run_experiment",
    "run_sweep",
    "wait_all",
]
