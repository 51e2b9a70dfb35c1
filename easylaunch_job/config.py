"""What the launched function learns about its run: the :class:`DoodadConfig` it receives."""

from __future__ import annotations

import os
from typing import NamedTuple

from easylaunch_job.environment import ENV_GPU_ID, rank_info
from easylaunch_job.records import CHECKPOINT_DIR


class GitInfo(NamedTuple):
    """The state of one git repository among the code directories at launch time.

    Attributes:
        directory: The folder the repository was found from: a code folder, or the script's.
        code_diff: ``git diff``: the changes not staged.
        code_diff_staged: ``git diff --staged``: the staged changes.
        commit_hash: The commit checked out (None: a repository without commits).
        branch_name: The branch checked out (None: a detached HEAD).
    """

    directory: str
    code_diff: str
    code_diff_staged: str
    commit_hash: str | None
    branch_name: str | None


class DoodadConfig(NamedTuple):
    """What the launched function learns about its run (first argument of ``fn``).

    Attributes:
        exp_name: The experiment's name, dated (``24-05-17-name``) unless
            ``prepend_date_to_exp_name=False``.
        base_log_dir: The run's own folder, where it writes its outputs.
        use_gpu: Whether the run was given a GPU.
        gpu_id: The GPU to use: 0 where the run is pinned to one, else ``gpu_id`` as
            launched (default 0).
        git_infos: A GitInfo for each git repository of the code folders and the script's.
        script_name: The launching script's path (empty from an interactive session).
        extra_launch_info: More about the run: ``run_id``, ``mode``, ``host``, ``attempt``,
            ``checkpoint_dir``, ``rank``, ``local_rank``, ``world_size``...
    """

    exp_name: str
    base_log_dir: str
    use_gpu: bool
    gpu_id: int | str | None
    git_infos: list[GitInfo]
    script_name: str
    extra_launch_info: dict


def make_doodad_config(meta: dict, log_dir: str, attempt: int = 1) -> DoodadConfig:
    """Build the DoodadConfig the function receives from a bundle's metadata."""
    gpu_id = meta.get("gpu_id")
    if gpu_id is None:
        gpu_id = 0  # doodad's default
    rank, local_rank, world_size = rank_info()
    extra = dict(meta.get("extra_launch_info", {}), host=os.uname().nodename, rank=rank,
                 local_rank=local_rank, world_size=world_size, attempt=attempt,
                 checkpoint_dir=os.path.join(log_dir, CHECKPOINT_DIR))
    if os.environ.get("SLURM_JOB_ID"):
        extra["slurm-job-id"] = os.environ["SLURM_JOB_ID"]  # doodad's name for it
    if os.environ.get(ENV_GPU_ID):  # pinned through CUDA_VISIBLE_DEVICES: device 0 inside
        extra["physical_gpu_id"] = os.environ[ENV_GPU_ID]
        gpu_id = 0
    return DoodadConfig(
        exp_name=meta["exp_name"],
        base_log_dir=log_dir,
        use_gpu=bool(meta.get("use_gpu")),
        gpu_id=gpu_id,
        git_infos=[GitInfo(*g) for g in meta.get("git_infos", [])],
        script_name=meta.get("script_name", ""),
        extra_launch_info=extra,
    )
