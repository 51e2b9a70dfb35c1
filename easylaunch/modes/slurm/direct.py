"""``slurm``: submit right away with sbatch; a sweep becomes one job array.

On a login node (no ``cluster``), runs live in LOCAL_LOG_DIR, which the compute nodes must
share. With ``cluster=`` the runs, the code snapshots and the pickled function are copied to the
cluster's log_dir first (each snapshot and function once per content), and sbatch runs there
over SSH; the runs' folders here are kept up to date by tracking. Arrays above MaxArraySize are
split; ``array_parallelism=N`` caps how many tasks of an array run at once (``%N``).
``env_pack=True`` (this Python's environment) or ``env_pack=PATH`` (a virtualenv or conda
environment) packs it once per content and broadcasts it with sbcast to node-local storage
(ENV_BROADCAST_DIR) inside each job, where the runs then start from.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from easylaunch import envpack
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.hosts import staging
from easylaunch.hosts.staging import Upload, bundle_items
from easylaunch.jobs import Job
from easylaunch.modes.jobscript import (
    StartLine,
    broadcast_env,
    bundle_pythonpath,
    job_script,
    start_line,
)
from easylaunch.modes.slurm import scheduler as slurm
from easylaunch.modes.slurm.base import SlurmBase
from easylaunch.request import LaunchRequest
from easylaunch.runner import write_bytes_atomic

SCRIPT_DIR = ".slurm"
ENV_STORE = ".envs"


@dataclass(frozen=True)
class ArrayJob:
    """One job array: its script (here, and on the cluster), and the runs its task indices
    stand for."""

    script: Path
    script_there: str
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
        cap = self.opts["array_parallelism"]
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise LaunchError(f"array_parallelism must be a positive integer, got {cap!r}")
        self.facts = self.preflight(self.transport.log_dir or str(request.log_root),
                                    runs_there=True)

    def start(self, request: LaunchRequest, runs: list[Run], python: str, root: str
              ) -> StartLine:
        """How each run starts: ``python`` on the bundle's code snapshots (``root``: the
        launch's folder on the cluster)."""
        return StartLine(python=python, pre_cmds=tuple(self.settings.SLURM_PRE_CMDS),
                         pythonpath=bundle_pythonpath(runs[0].meta["code_dirs"]))

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> SlurmPlan:
        res = self.resources(request)
        root = self.facts.root

        def there(path: Path) -> str:  # the cluster's path of a file of this launch
            return f"{root}/{path.relative_to(request.log_root)}"

        prefix = self._env_prefix()
        env = None if prefix is None else \
            EnvPack(prefix, envpack.archive_path(prefix, request.log_root / ENV_STORE))
        python = shlex.quote(self.cluster_python())
        if env is not None:
            python = '"$EASYLAUNCH_ENV"/bin/python'
        line = self.every_rank(start_line(self.start(request, runs, python, root)), res)
        if env is not None:
            line = broadcast_env(there(env.archive), self.settings.ENV_BROADCAST_DIR) + "\n" + line
        script_dir = runs[0].log_dir.parent / SCRIPT_DIR
        arrays = []
        for chunk in slurm.chunks(len(runs), self.facts.max_array_size):
            members = runs[chunk.start:chunk.stop]
            header = slurm.sbatch_header(
                res, job_name=request.exp_name,
                output=slurm.output_path(there(script_dir), "slurm-%A_%a.out"),
                signal_seconds=self.settings.SLURM_SIGNAL_SECONDS,
                array=slurm.array_spec(len(members), self.opts["array_parallelism"]))
            entries = [(there(r.bundle_dir), there(r.log_dir)) for r in members]
            script = script_dir / f"{members[0].run_id}.sbatch"
            arrays.append(ArrayJob(script, there(script), job_script(header, entries, line),
                                   members))
        return SlurmPlan(arrays, env)

    def submit(self, request: LaunchRequest, runs: list[Run],
               prepared: SlurmPlan) -> list[Job]:
        if prepared.env is not None:
            envpack.pack_env(prepared.env.prefix, prepared.env.archive)
        for array in prepared.arrays:
            array.script.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(str(array.script), array.text.encode())
        submits = [{"op": "run", "argv": slurm.sbatch_command(a.script_there)}
                   for a in prepared.arrays]
        root = self.facts.root
        if self.transport.is_local and root == str(request.log_root):
            answers = self.transport.probe(submits)  # everything is in place already
        else:
            shared, plain = bundle_items(request.log_root, runs)
            if prepared.env is not None:
                shared.append(str(prepared.env.archive.relative_to(request.log_root)))
            plain += [str(a.script.relative_to(request.log_root)) for a in prepared.arrays]
            up = Upload(request.log_root, root, root, shared, plain)
            answers = staging.upload(self.transport, up, then=submits).answers
        job_ids = self._job_ids(prepared.arrays, answers)
        for array, job_id in zip(prepared.arrays, job_ids, strict=True):
            for index, run in enumerate(array.runs):
                log_there = f"{root}/{run.log_dir.relative_to(request.log_root)}"
                run.record_backend(slurm_job_id=f"{job_id}_{index}", array_job_id=job_id,
                                   array_index=index, script=array.script_there,
                                   job_log_dir=log_there, slurm_output=str(
                                       Path(array.script_there).parent /
                                       f"slurm-{job_id}_{index}.out"))
        return [Job(run.run_id, run.exp_name, run.log_dir, self) for run in runs]

    def _job_ids(self, arrays: list[ArrayJob], answers: list[dict]) -> list[str]:
        """The job id sbatch gave each array; if any was refused, the others are cancelled
        (all or nothing: no half-submitted sweep) and the refusal raised."""
        job_ids, refused = [], None
        for array, answer in zip(arrays, answers, strict=True):
            try:
                if answer.get("rc") != 0:
                    raise LaunchError(f"sbatch refused {array.script_there} on "
                                      f"{self.transport.where}: {answer.get('err', '').strip()}")
                job_ids.append(slurm.parse_sbatch(answer["out"]))
            except LaunchError as exc:
                refused = refused or exc
        if refused is not None:
            if job_ids:
                self.transport.probe([{"op": "run", "argv": slurm.scancel_command(j)}
                                      for j in job_ids])
            raise refused
        return job_ids
