"""What the launched function learns about its run: the :class:`DoodadConfig` it receives."""

from __future__ import annotations

import os
from typing import NamedTuple

from easylaunch_job.environment import ENV_GPU_ID, rank_info
from easylaunch_job.records import CHECKPOINT_DIR


class GitInfo(NamedTuple):
    """The state of one git repository among the code directories at launch time."""

    directory: str
    code_diff: str
    code_diff_staged: str
    commit_hash: str | None
    branch_name: str | None


class DoodadConfig(NamedTuple):
    """What the launched function learns about its run (first argument of ``fn``)."""

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
