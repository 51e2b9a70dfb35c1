"""``local_singularity`` and ``local_docker``: ``local`` runs, each inside a container.

Everything ``local`` does (parallelism, GPU pinning, cancel, waiting at exit) stays; only the
command that starts a run changes. The log root is bound at its own path, so bundles, code
snapshots and run folders keep their paths inside; data folders are bound at their mount points.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import shutil
from collections.abc import Sequence

from easylaunch import launchers
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.modes.local import LocalCommand, LocalMode
from easylaunch.request import LaunchRequest
from easylaunch_job.environment import ENV_GPU_ID

SINGULARITY_ENGINES = ("singularity", "apptainer")
DOCKER_ENGINES = ("docker", "podman")
# What a Docker run takes from the launching side's environment (named, so values never
# appear on a command line): code on PYTHONPATH, and the GPU the run was given.
DOCKER_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", ENV_GPU_ID)


def find_engine(choices: tuple[str, ...], chosen: str | None = None) -> str | None:
    """The container engine to use: ``chosen``, else the first of ``choices`` on PATH."""
    return shutil.which(chosen) if chosen else next(
        (path for path in map(shutil.which, choices) if path), None)


class _ContainerMode(LocalMode):
    """A local mode whose runs start inside an image."""

    links_data_mounts = False
    engines: tuple[str, ...]
    image_key: str
    image_kind: str  # its name in extra_launch_info, as doodad's

    def image(self, request: LaunchRequest) -> str | None:
        return self.settings[self.image_key]

    def engine(self) -> str | None:
        return find_engine(self.engines)

    def check(self, request: LaunchRequest) -> None:
        super().check(request)
        if not self.image(request):
            raise LaunchError(f"mode {self.name!r} runs in the image {self.image_key} names, "
                              "which is not set; set it in your settings")
        if self.engine() is None:
            raise LaunchError(f"mode {self.name!r} needs {' or '.join(self.engines)} on PATH, "
                              "and none is there; install one, or use mode 'local'")

    def binds(self, request: LaunchRequest) -> tuple[tuple[str, str], ...]:
        return launchers.run_binds(request.log_root, self.settings.data_mounts())

    def launch_info(self, request: LaunchRequest) -> dict[str, str]:
        return {self.image_kind: str(self.image(request))}

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> list[LocalCommand]:
        return [dataclasses.replace(c, argv=self.contain(request, c.argv[1:]))
                for c in super().prepare(request, runs)]

    def contain(self, request: LaunchRequest, runner_args: list[str]) -> list[str]:
        """The command that starts ``python <runner_args>`` in the image."""
        raise NotImplementedError


class LocalSingularityMode(_ContainerMode):
    """Runs in SINGULARITY_IMAGE through ``singularity exec`` (or Apptainer's)."""

    name = "local_singularity"
    engines = SINGULARITY_ENGINES
    image_key = "SINGULARITY_IMAGE"
    image_kind = "singularity_image"

    def contain(self, request: LaunchRequest, runner_args: list[str]) -> list[str]:
        s = self.settings
        line = " && ".join([*s.SINGULARITY_PRE_CMDS,
                            "exec " + shlex.join([s.SINGULARITY_PYTHON, *runner_args])])
        argv = launchers.singularity_exec(self.image(request), self.binds(request),
                                          ["/bin/bash", "-c", line], request.use_gpu,
                                          s.BRC_EXTRA_SINGULARITY_ARGS)
        return [self.engine() or argv[0], *argv[1:]]


class LocalDockerMode(_ContainerMode):
    """Runs in DOCKER_IMAGE (GPU_DOCKER_IMAGE with use_gpu) through docker or podman."""

    name = "local_docker"
    engines = DOCKER_ENGINES
    image_key = "DOCKER_IMAGE"
    image_kind = "docker_image"

    def image(self, request: LaunchRequest) -> str | None:
        s = self.settings
        return (s.GPU_DOCKER_IMAGE or s.DOCKER_IMAGE) if request.use_gpu else s.DOCKER_IMAGE

    def engine(self) -> str | None:
        return find_engine(self.engines, self.settings.DOCKER_ENGINE)

    def contain(self, request: LaunchRequest, runner_args: list[str]) -> list[str]:
        return [self.engine() or "docker", *docker_run_args(
            self.image(request), self.binds(request), [self.settings.DOCKER_PYTHON,
                                                       *runner_args],
            request.use_gpu, str(request.log_root))]


def docker_run_args(image: str, binds: Sequence[tuple[str, str]], command: list[str], gpu: bool,
                    workdir: str) -> list[str]:
    """``run`` arguments of docker/podman: removed at exit, as this user, binds, named env."""
    argv = ["run", "--rm", "--init", "--user", f"{os.getuid()}:{os.getgid()}", "-w", workdir]
    for source, target in binds:
        if "," in source or ":" in source or ":" in target:
            raise LaunchError(f"cannot bind {source!r} at {target!r}: docker's -v cannot take "
                              "a path with ':' or ','; rename the folder")
        argv += ["-v", f"{source}:{target}"]
    for name in DOCKER_ENV:
        argv += ["-e", name]
    if gpu:
        argv += ["--gpus", "all"]
    return [*argv, image, *command]
