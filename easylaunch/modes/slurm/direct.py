"""``slurm``: submit right away with sbatch from a login node; a sweep becomes one job array.

Runs live in LOCAL_LOG_DIR, which the compute nodes must share. Arrays above MaxArraySize are
split; ``array_parallelism=N`` caps how many tasks of an array run at once (``%N``).
``env_pack=True`` (this Python's environment) or ``env_pack=PATH`` (a virtualenv or conda
environment) packs it once per content and broadcasts it with sbcast to node-local storage
(ENV_BROADCAST_DIR) inside each job, where the runs then start from.
"""

from __future__ import annotations

import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from easylaunch import envpack
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.slurm import scheduler as slurm
from easylaunch.modes.slurm.base import SlurmBase
from easylaunch.modes.slurm.jobscript import (
    StartLine,
    broadcast_env,
    bundle_pythonpath,
    job_script,
    start_line,
)
from easylaunch.request import LaunchRequest
from easylaunch.runner import write_bytes_atomic

SCRIPT_DIR = ".slurm"
ENV_STORE = ".envs"


@dataclass(frozen=True)
class ArrayJob:
    """One job array: its script, and the runs its task indices stand for."""

    script: Path
    text: str
    runs: list[Run]


@dataclass(frozen=True)
class EnvPack:
    """The environment a launch broadcasts to its nodes, and the archive it packs to."""

    prefix: Path
    archive: Path


@dataclass(frozen=True)
class SlurmPlan:
    """The job arrays of a launch, and the environment they broadcast (if any)."""

    arrays: list[ArrayJob]
    env: EnvPack | None


class SlurmMode(SlurmBase):
    """Direct submission to the Slurm cluster this machine is a login node of."""

    name = "slurm"
    options = {**SlurmBase.options, "array_parallelism": None, "env_pack": None}

    def _env_prefix(self) -> Path | None:
        choice = self.opts.get("env_pack")
        if choice is None or choice is False:
            return None
        return Path(sys.prefix if choice is True else choice).expanduser()

    def check(self, request: LaunchRequest) -> None:
        super().check(request)
        slurm.check_log_folder(str(request.log_root))
        if shutil.which("sbatch") is None:
            raise LaunchError("mode 'slurm' submits with sbatch, which is not on PATH here; run "
                              "on the cluster's login node, or use mode='sss' to write job "
                              "scripts to copy there")
        cap = self.opts["array_parallelism"]
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise LaunchError(f"array_parallelism must be a positive integer, got {cap!r}")

    def start(self, request: LaunchRequest, runs: list[Run], python: str) -> StartLine:
        """How each run starts: ``python`` on the bundle's code snapshots."""
        return StartLine(python=python, pre_cmds=tuple(self.settings.SLURM_PRE_CMDS),
                         pythonpath=bundle_pythonpath(runs[0].meta["code_dirs"]))

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> SlurmPlan:
        res = self.resources(request)
        prefix = self._env_prefix()
        env = None if prefix is None else \
            EnvPack(prefix, envpack.archive_path(prefix, request.log_root / ENV_STORE))
        python = shlex.quote(self.settings.SLURM_PYTHON or sys.executable)
        if env is not None:
            python = '"$EASYLAUNCH_ENV"/bin/python'
        line = self.every_rank(start_line(self.start(request, runs, python)), res)
        if env is not None:
            line = broadcast_env(str(env.archive), self.settings.ENV_BROADCAST_DIR) + "\n" + line
        script_dir = runs[0].log_dir.parent / SCRIPT_DIR
        arrays = []
        for chunk in slurm.chunks(len(runs), slurm.query_max_array_size()):
            members = runs[chunk.start:chunk.stop]
            header = slurm.sbatch_header(
                res, job_name=request.exp_name,
                output=slurm.output_path(str(script_dir), "slurm-%A_%a.out"),
                signal_seconds=self.settings.SLURM_SIGNAL_SECONDS,
                array=slurm.array_spec(len(members), self.opts["array_parallelism"]))
            entries = [(str(r.bundle_dir), str(r.log_dir)) for r in members]
            arrays.append(ArrayJob(script_dir / f"{members[0].run_id}.sbatch",
                                   job_script(header, entries, line), members))
        return SlurmPlan(arrays, env)

    def submit(self, request: LaunchRequest, runs: list[Run],
               prepared: SlurmPlan) -> list[Job]:
        if prepared.env is not None:
            envpack.pack_env(prepared.env.prefix, prepared.env.archive)
        submitted: list[str] = []
        for array in prepared.arrays:
            array.script.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(str(array.script), array.text.encode())
            out = slurm.run_command(slurm.sbatch_command(str(array.script)))
            try:
                if out.returncode != 0:
                    raise LaunchError(f"sbatch refused {array.script}: {out.stderr.strip()}")
                job_id = slurm.parse_sbatch(out.stdout)
            except LaunchError:
                for earlier in submitted:  # all or nothing: no half-submitted sweep
                    slurm.run_command(slurm.scancel_command(earlier))
                raise
            submitted.append(job_id)
            for index, run in enumerate(array.runs):
                run.record_backend(slurm_job_id=f"{job_id}_{index}", array_job_id=job_id,
                                   array_index=index, script=str(array.script),
                                   slurm_output=str(array.script.parent /
                                                    f"slurm-{job_id}_{index}.out"))
        return [Job(run.run_id, run.exp_name, run.log_dir, self) for run in runs]
