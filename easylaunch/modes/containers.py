"""Containers a run starts in, as parts a mode takes: the settings that name the image, its
Python and its commands, and how the command that starts the job side is wrapped (as a
launcher wraps it). ``local`` runs in one with ``container=``, the Slurm modes through their
job scripts' start line (:class:`SingularityImage`)."""

from __future__ import annotations

import os
import shlex
import shutil
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from easylaunch.errors import LaunchError
from easylaunch.modes import launchers
from easylaunch.settings import Settings
from easylaunch_job.environment import ENV_GPU_ID

# What a Docker run takes from the launching side's environment (named, so values never
# appear on a command line): code on PYTHONPATH, and the GPU the run was given.
DOCKER_ENV = ("PYTHONPATH", "PYTHONUNBUFFERED", "CUDA_VISIBLE_DEVICES", ENV_GPU_ID)


@dataclass(frozen=True)
class SingularityImage:
    """The Singularity image a job script's run starts in, and what is bound into it."""

    image: str
    binds: tuple[tuple[str, str], ...]
    gpu: bool
    extra_args: str


def find_engine(choices: tuple[str, ...], chosen: str | None = None) -> str | None:
    """The container engine to use: ``chosen``, else the first of ``choices`` on PATH."""
    return shutil.which(chosen) if chosen else next(
        (path for path in map(shutil.which, choices) if path), None)


@dataclass(frozen=True)
class Container(ABC):
    """An engine family and the settings that name its image, Python and commands."""

    family: str  # how messages name it: "Singularity", "Docker"
    launch_info_key: str  # its name in extra_launch_info, as doodad's
    engines: tuple[str, ...]
    image_key: str
    gpu_image_keys: tuple[str, ...]  # with use_gpu: the first of these that is set
    python_key: str
    pre_cmds_key: str | None = None
    engine_key: str | None = None  # a setting that picks the engine
    shared_image_key: str | None = None  # the image of both where neither above is set

    def image_keys(self, use_gpu: bool) -> tuple[str, ...]:
        """The settings that may name the image, in order (the first set one is used)."""
        keys = self.gpu_image_keys if use_gpu else (self.image_key,)
        return (*keys, self.shared_image_key) if self.shared_image_key else keys

    def image(self, settings: Settings, use_gpu: bool) -> str | None:
        return next((settings[key] for key in self.image_keys(use_gpu) if settings[key]), None)

    def python(self, settings: Settings) -> str:
        return settings[self.python_key] or "python3"

    def pre_cmds(self, settings: Settings) -> tuple[str, ...]:
        return tuple(settings[self.pre_cmds_key]) if self.pre_cmds_key else ()

    def engine(self, settings: Settings) -> str | None:
        """The engine on this machine's PATH."""
        return find_engine(self.engines, settings[self.engine_key] if self.engine_key else None)

    def check(self, settings: Settings, use_gpu: bool, mode: str, here: bool) -> None:
        """Refuse a launch whose image is not set, or (``here``: runs on this machine) whose
        engine is not on PATH."""
        if not self.image(settings, use_gpu):
            key = self.image_keys(use_gpu)[0]
            shared = (f" (nor {self.shared_image_key}, the image of runs with and without "
                      "GPUs)") if self.shared_image_key else ""
            where = "" if here else " on the cluster"
            raise LaunchError(f"mode {mode!r} runs in a {self.family} image, but {key} is not "
                              f"set{shared}; set it to the image's path{where}")
        if here and self.engine(settings) is None:
            raise LaunchError(f"mode {mode!r} needs {' or '.join(self.engines)} on PATH, and "
                              "none is there; install one, or use mode 'local'")

    @abstractmethod
    def wrap(self, settings: Settings, use_gpu: bool, binds: Sequence[tuple[str, str]],
             python_args: list[str], workdir: str) -> list[str]:
        """The command that starts ``<its Python> <python_args>`` in the image here."""


class Singularity(Container):
    """``singularity exec`` (or Apptainer's), here or in a job script."""

    def wrap(self, settings: Settings, use_gpu: bool, binds: Sequence[tuple[str, str]],
             python_args: list[str], workdir: str) -> list[str]:
        line = " && ".join([*self.pre_cmds(settings),
                            "exec " + shlex.join([self.python(settings), *python_args])])
        argv = launchers.singularity_exec(str(self.image(settings, use_gpu)), binds,
                                          ["/bin/bash", "-c", line], use_gpu,
                                          settings.BRC_EXTRA_SINGULARITY_ARGS)
        return [self.engine(settings) or argv[0], *argv[1:]]

    def in_job(self, settings: Settings, use_gpu: bool,
               binds: Sequence[tuple[str, str]]) -> SingularityImage:
        """The image a job script's start line runs in."""
        return SingularityImage(str(self.image(settings, use_gpu)), tuple(binds), use_gpu,
                                settings.BRC_EXTRA_SINGULARITY_ARGS)


class Docker(Container):
    """``docker run`` (or podman's), here."""

    def wrap(self, settings: Settings, use_gpu: bool, binds: Sequence[tuple[str, str]],
             python_args: list[str], workdir: str) -> list[str]:
        return [self.engine(settings) or "docker", *docker_run_args(
            str(self.image(settings, use_gpu)), binds, [self.python(settings), *python_args],
            use_gpu, workdir)]


SINGULARITY = Singularity("Singularity", "singularity_image", ("singularity", "apptainer"),
                        "SINGULARITY_IMAGE", ("SINGULARITY_IMAGE",), "SINGULARITY_PYTHON",
                        "SINGULARITY_PRE_CMDS")
# sss and htp: doodad's per-device images, Python and commands of the batch modes
SSS_SINGULARITY = Singularity("Singularity", "singularity_image", ("singularity", "apptainer"),
                            "SSS_CPU_IMAGE", ("SSS_GPU_IMAGE",), "SSS_PYTHON", "SSS_PRE_CMDS",
                            shared_image_key="SSS_IMAGE")
DOCKER = Docker("Docker", "docker_image", ("docker", "podman"), "DOCKER_IMAGE",
                   ("GPU_DOCKER_IMAGE", "DOCKER_IMAGE"), "DOCKER_PYTHON",
                   engine_key="DOCKER_ENGINE")


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
