"""The functions users call: launching (``run_experiment``, ``run_sweep``, ``get_job``),
commands as runs (``run_command``, ``run_commands``) and resubmitting (``resubmit``,
``resubmit_launch``); also importable from ``easylaunch`` itself, as before the layers."""

from easylaunch.api.commands import run_command, run_commands
from easylaunch.api.launch import get_job, run_experiment, run_sweep
from easylaunch.api.resubmission import resubmit, resubmit_launch

__all__ = ["get_job", "resubmit", "resubmit_launch", "run_command", "run_commands",
           "run_experiment", "run_sweep"]
