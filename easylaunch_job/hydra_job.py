"""The job side of ``hydra/launcher=easylaunch``: one Hydra job run in its easylaunch run.

Hydra is imported inside the function: only runs launched by the Hydra launcher need it.
"""

import json
from typing import Any, Dict, List, Tuple

HYDRA_SUBDIR = "hydra"  # the job's folder in the run folder, where its sweep folder is not
HYDRA_OUTPUT = "hydra_output_dir.txt"  # in the run folder: the Hydra job's output folder


REPEAT = "repeat"  # in a job's variant: which of the launch's jobs with its overrides it is


def numbered(variant: Dict[str, Any]) -> str:
    """A job's key in the launch's job numbers: its overrides, and its repeat if it has one."""
    return json.dumps([list(variant["overrides"]), variant.get(REPEAT, 0)])


def job_config(hydra_context: Any, config: Any, overrides: List[str], run_id: str,
               num: int) -> Any:
    """The job's own config, as Hydra's basic launcher makes it: its overrides applied, its id
    (the run's) and number set; its output folder is ``${hydra.sweep.dir}/${hydra.sweep.subdir}``
    (the sweep folder made absolute by the launch)."""
    from omegaconf import open_dict

    job = hydra_context.config_loader.load_sweep_config(config, list(overrides))
    with open_dict(job):
        job.hydra.job.id = run_id
        job.hydra.job.num = num
    return job


def output_dir(job: Any) -> str:
    """Where the job writes: ``${hydra.sweep.dir}/${hydra.sweep.subdir}``, as run_job makes it."""
    import os

    return os.path.join(str(job.hydra.sweep.dir), str(job.hydra.sweep.subdir))


def run(payload: Tuple[Any, Any, Any, Any, Dict[str, int]], doodad_config: Any,
        variant: Dict[str, Any]) -> Any:
    """Run the Hydra job of ``variant`` (its overrides; its number is the launch's, in the
    payload) as Hydra's own launcher does, its output where its config says; return the task
    function's value, or raise its exception so that the run is recorded as failed. Where the
    sweep folder cannot be made (a run on another machine), the job writes to the run folder's
    ``hydra/`` instead."""
    import os

    from hydra.core.singleton import Singleton
    from hydra.core.utils import JobStatus, run_job, setup_globals
    from omegaconf import open_dict

    singletons, hydra_context, config, task_function, numbers = payload
    Singleton.set_state(singletons)
    setup_globals()
    job = job_config(hydra_context, config, variant["overrides"],
                     doodad_config.extra_launch_info["run_id"],
                     numbers[numbered(variant)])
    try:
        os.makedirs(output_dir(job), exist_ok=True)
    except OSError:
        with open_dict(job):
            job.hydra.sweep.dir = doodad_config.base_log_dir
            job.hydra.sweep.subdir = HYDRA_SUBDIR
    with open(os.path.join(doodad_config.base_log_dir, HYDRA_OUTPUT), "w") as f:
        f.write(os.path.abspath(output_dir(job)) + "\n")
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=job,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    if ret.status == JobStatus.FAILED:
        raise ret._return_value
    return ret.return_value
