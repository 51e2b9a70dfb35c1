"""``hydra/launcher=easylaunch``: a multirun's jobs as the easylaunch runs of one sweep.

Hydra imports this module at every app start, so it imports only Hydra, OmegaConf and the
standard library; easylaunch is imported when a multirun launches. The config's types are
``typing``'s: OmegaConf 2.3 reads them at run time and knows ``Optional``, not ``X | None``
(and Hydra executes the module outside ``sys.modules``: no postponed annotations).
"""
# ruff: noqa: UP006, UP035, UP045

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


@dataclass
class EasylaunchLauncherConf:
    """The launcher's settings (``hydra.launcher.*``): the mode, whether to wait, the options
    most launches set as fields, and any other mode option under ``options``
    (``+hydra.launcher.options.qos=high`` on the command line)."""

    _target_: str = ("hydra_plugins.easylaunch_launcher.easylaunch_launcher."
                     "EasylaunchLauncher")
    mode: str = "local"
    wait: bool = True  # False: return once every job is submitted (with Hydra's BasicSweeper)
    exp_name: Optional[str] = None  # None: the Hydra job's name (the app's)
    sweep: Optional[str] = None  # the sweep's name (None: a generated id)
    resume: bool = False  # launch only the jobs that have not succeeded in the sweep
    config: Optional[str] = None  # an easylaunch settings file (None: the usual one)
    max_parallel: Optional[int] = None
    partition: Optional[str] = None
    slurm_config_name: Optional[str] = None
    cluster: Optional[str] = None
    use_gpu: bool = False
    max_restarts: Optional[int] = None
    pool: Optional[str] = None  # a warm pool's name (easylaunch pool start): the jobs go to it
    options: Dict[str, Any] = field(default_factory=dict)


ConfigStore.instance().store(group="hydra/launcher", name="easylaunch",
                             node=EasylaunchLauncherConf, provider="easylaunch")


class EasylaunchLauncher(Launcher):
    """Launches each job of a Hydra multirun as an easylaunch run (see
    :mod:`easylaunch.api.hydra_launch`)."""

    def __init__(self, **launcher_config: Any) -> None:
        self.launcher_config = launcher_config
        self.sweep_id: str | None = None  # (the sweep of this multirun's first launch)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        from easylaunch.api.hydra_launch import check_sweeper

        check_sweeper(config, self.launcher_config)
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from easylaunch.api.hydra_launch import launch_jobs

        assert self.config is not None and self.hydra_context is not None
        assert self.task_function is not None
        returns, self.sweep_id = launch_jobs(
            self.launcher_config, self.sweep_id, self.hydra_context, self.task_function,
            self.config, job_overrides, initial_job_idx)
        return returns
