"""The job side of ``hydra/launcher=easylaunch``: one Hydra job run in its easylaunch run.

Hydra is imported inside the function: only runs launched by the Hydra launcher need it.
"""

import json
from typing import Any, Dict, List, Tuple

HYDRA_SUBDIR = "hydra"  # Hydra's job folder (its .hydra/ and log) inside the run folder


def numbered(overrides: List[str]) -> str:
    """A job's key in the launch's job numbers: its overrides."""
    return json.dumps(list(overrides))


def run(payload: Tuple[Any, Any, Any, Any, Dict[str, int]], doodad_config: Any,
        variant: Dict[str, Any]) -> Any:
    """Run the Hydra job of ``variant`` (its overrides; its number is the launch's, in the
    payload) as Hydra's own launcher does, with the run folder as the sweep folder; return the
    task function's value, or raise its exception so that the run is recorded as failed."""
    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobStatus, run_job, setup_globals
    from omegaconf import open_dict

    singletons, hydra_context, config, task_function, numbers = payload
    Singleton.set_state(singletons)
    setup_globals()
    job_config = hydra_context.config_loader.load_sweep_config(config, list(variant["overrides"]))
    with open_dict(job_config):
        job_config.hydra.job.id = doodad_config.extra_launch_info["run_id"]
        job_config.hydra.job.num = numbers[numbered(variant["overrides"])]
        job_config.hydra.sweep.dir = doodad_config.base_log_dir
        job_config.hydra.sweep.subdir = HYDRA_SUBDIR
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=job_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status == JobStatus.FAILED:
        raise ret._return_value
    return ret.return_value
