"""The functions users call: launching (``run_experiment``, ``run_sweep``, ``run_command``,
``run_commands``, ``get_job``) and resubmitting (``resubmit``, ``resubmit_launch``); also
importable from ``easylaunch`` itself, as before the layers."""

from easylaunch.api.launch import get_job, run_command, run_commands, run_experiment, run_sweep
from easylaunch.api.resubmission import resubmit, resubmit_launch

__all__ = ["get_job", "resubmit", "resubmit_launch", "run_command", "run_commands",
           "run_experiment", "run_sweep"]
