"""Argument lists that start the job side; composed by modes, never joined into shell strings."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.errors import LaunchError
from easylaunch_job.records import JOB_PYZ

if TYPE_CHECKING:
    from easylaunch.settings import Mount


def python_runner(python: str, bundle_dir: str | os.PathLike) -> list[str]:
    """``python BUNDLE/job.pyz run BUNDLE``."""
    return [python, str(Path(bundle_dir) / JOB_PYZ), "run", str(bundle_dir)]


def run_binds(log_root: str | os.PathLike,
              data_mounts: Iterable[Mount]) -> tuple[tuple[str, str], ...]:
    """What a run in a container on a machine that shares the log root needs bound: the log
    root at its own path (bundles, snapshots and run folders keep their paths), and each data
    folder at its mount point."""
    root = str(log_root)
    return ((root, root), *((m.local_dir, m.mount_point) for m in data_mounts))


def _bind(source: str, target: str) -> str:
    for path in (source, target):
        if ":" in path or "," in path or "\n" in path:
            raise LaunchError(f"cannot bind-mount {path!r}: singularity's -B cannot take a path "
                              "holding ':', ',' or a newline; rename the folder")
    return f"{source}:{target}"


def singularity_exec(image: str, binds: Sequence[tuple[str, str]], command: Sequence[str],
                     gpu: bool = False, extra_args: str = "") -> list[str]:
    """``singularity exec [extra] -B src:dst ... [--nv] IMAGE COMMAND...``."""
    argv = ["singularity", "exec", *shlex.split(extra_args)]
    for source, target in binds:
        argv += ["-B", _bind(source, target)]
    if gpu:
        argv.append("--nv")
    return [*argv, image, *command]


def srun(nodes: int, tasks: int, gpus_per_node: int = 0, cpu_bind: str | None = None,
         extra: Sequence[str] = ()) -> list[str]:
    """``srun -u -N NODES -n TASKS [--gpus-per-node=G] [--cpu-bind=B] [extra]``."""
    argv = ["srun", "-u", "-N", str(nodes), "-n", str(tasks)]
    if gpus_per_node:
        argv.append(f"--gpus-per-node={gpus_per_node}")
    if cpu_bind:
        argv.append(f"--cpu-bind={cpu_bind}")
    return [*argv, *extra]


def mpiexec(total: int, per_host: int, hostfile: str | None, cpu_bind: str | None = "depth",
            depth: int | None = None) -> list[str]:
    """``mpiexec --envall --np N --ppn P [--hostfile F] [--cpu-bind=B [--depth=D]]`` (PBS)."""
    argv = ["mpiexec", "--envall", "--np", str(total), "--ppn", str(per_host)]
    if hostfile is not None:
        argv += ["--hostfile", hostfile]
    if cpu_bind:
        argv.append(f"--cpu-bind={cpu_bind}")
        if cpu_bind == "depth" and depth:
            argv.append(f"--depth={depth}")
    return argv


def torchrun(per_host: int) -> list[str]:
    """``torchrun --standalone --nproc-per-node=P`` (one host, no scheduler)."""
    return ["torchrun", "--standalone", f"--nproc-per-node={per_host}"]
