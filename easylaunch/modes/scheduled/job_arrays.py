"""``slurm``, ``slurm_singularity`` and ``pbs``: a sweep as the scheduler's job arrays (one run:
one job), submitted right away, all or nothing; ``cluster=`` over SSH, ``env_pack=``.

Slurm: one array per launch, split below MaxArraySize, ``%N`` caps with ``array_parallelism``;
a packed environment is broadcast with sbcast. ``slurm_singularity`` (doodad's name) runs each
run inside SINGULARITY_IMAGE (the log root bound at its own path, data folders at their mount
points, ``--nv`` for use_gpu runs). PBS: ``-J 1-N`` arrays below the server's max_array_size;
resources from PBS_CONFIGS (``pbs_config_name=``); ranks through mpiexec on ``$PBS_NODEFILE``;
the job script tells the job side when the walltime comes, so such a run records ``timeout``.
"""

from __future__ import annotations

import shlex
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easylaunch.errors import LaunchError, check_count
from easylaunch.modes import launchers
from easylaunch.modes.base import Composed
from easylaunch.modes.containers import SINGULARITY, Singularity
from easylaunch.modes.jobscript import (
    StartLine,
    broadcast_env,
    bundle_pythonpath,
    job_script,
    settled_outside,
    start_line,
)
from easylaunch.modes.scheduled.tracking import ClusterFacts, ScheduledMode
from easylaunch.modes.schedulers import Broadcast, Scheduler, broadcasting, slurm
from easylaunch.runs import envpack
from easylaunch.runs.bundle import Run, make_store
from easylaunch.runs.preview import Preview, op_line, resource_fields
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.records import write_bytes_atomic

ENV_STORE = ".envs"


def array_chunks(count: int, max_len: int) -> list[range]:
    """Split ``count`` runs into arrays of at most ``max_len`` elements."""
    size = max(1, max_len)
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


@dataclass(frozen=True)
class ArraySubmission:
    """One job array: its script (here, and on the cluster), and the runs its elements stand
    for."""

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
class ArrayPlan:
    """The job arrays of a launch, what the cluster said, and the environment they broadcast
    (if any)."""

    facts: ClusterFacts
    arrays: list[ArraySubmission]
    env: EnvPack | None


class ArrayMode(ScheduledMode):
    """Submit right away; a sweep becomes job arrays of the ``scheduler``'s (split below the
    cluster's limit), submitted all or nothing.

    On a login node (no ``cluster``), runs live in LOCAL_LOG_DIR, which the compute nodes must
    share. With ``cluster=`` the runs, code snapshots and the pickled function are copied to the
    cluster's log_dir first (each snapshot and function once per content), and the submit
    command runs there over SSH. ``array_parallelism=N`` caps how many elements of an array run
    at once. ``env_pack=True`` (this Python's environment) or ``env_pack=PATH`` (a virtualenv or
    conda environment) packs it once per content and copies it to node-local storage
    (ENV_BROADCAST_DIR) inside each job, where the runs then start from. With a ``container``
    part, runs start inside its image instead (the image is the environment).

    With MAX_RESTARTS, an attempt that ends to restart (time-limit warning, SIGTERM, a lost
    process) submits its own array entry again: same run id and folder, a new job id (from a
    container, the job's shell does, after the container ended).
    """

    streams_runs = True

    container: Singularity | None = None

    def _env_prefix(self) -> Path | None:
        choice = self.opts.get("env_pack")
        if choice is None or choice is False:
            return None
        return Path(sys.prefix if choice is True else choice).expanduser()

    def check(self, request: LaunchRequest) -> ClusterFacts:
        if self.container is not None:
            self.container.check(self.settings, request.use_gpu, self.name, here=False)
        self.scheduler.check(self.settings, self.resources(request))
        cap = self.opts["array_parallelism"]
        if cap is not None:
            check_count("array_parallelism", cap)
        return self.preflight(self.transport.log_dir or str(request.log_root),
                              None if self.container or self._env_prefix()
                              else self.cluster_python(), request,
                              in_image=self.container is not None,
                              jobs=len(request.variants))  # (each element counts)

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        if self.container is None:
            return {}
        return {self.container.launch_info_key:
                str(self.container.image(self.settings, request.use_gpu))}

    def start(self, request: LaunchRequest, runs: list[Run], python: str, root: str
              ) -> StartLine:
        """How each run starts: ``python`` on the bundle's code snapshots (``root``: the
        launch's folder on the cluster), or the container's Python in its image."""
        pythonpath = bundle_pythonpath(runs[0].meta["code_dirs"])
        c, s = self.container, self.settings
        if c is None:
            return StartLine(python=python, pre_cmds=self.scheduler.pre_cmds(s),
                             pythonpath=pythonpath)
        binds = launchers.run_binds(root, s.data_mounts())
        return StartLine(python=shlex.quote(c.python(s)), pre_cmds=c.pre_cmds(s),
                         pythonpath=pythonpath, container=c.in_job(s, request.use_gpu, binds))

    def array_script(self, res: Any, request: LaunchRequest, entries: list[tuple[str, str]],
                     script: str, line: str) -> str:
        """The job script of one array (or one job, for one entry): ``entries`` are (bundle,
        log folder) pairs as the job sees them, ``script`` the script's own path there."""
        sched = self.scheduler
        header = sched.array_header(res, request.exp_name, script, len(entries),
                                    self.opts["array_parallelism"], self.settings)
        restarts = bool(self.settings.MAX_RESTARTS)
        if restarts and self.container is not None:  # the image has no submit command
            line = settled_outside(line, shlex.quote(self.cluster_python()), script)
            restarts = False
        exports = sched.job_exports(res, script if restarts else None)
        return job_script(header, entries, line, index=sched.SIDE.index, exports=exports)

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: ClusterFacts
                ) -> ArrayPlan:
        res = self.resources(request)
        root = facts.root

        def there(path: Path) -> str:  # the cluster's path of a file of this launch
            return f"{root}/{path.relative_to(request.log_root)}"

        prefix = self._env_prefix()
        env = None if prefix is None else \
            EnvPack(prefix, envpack.archive_path(prefix, request.log_root / ENV_STORE))
        python = shlex.quote(self.cluster_python())
        if env is not None:
            python = '"$EASYLAUNCH_ENV"/bin/python'
        line = self.scheduler.every_rank(start_line(self.start(request, runs, python, root)),
                                         res)
        if env is not None:
            line = (broadcast_env(there(env.archive), self.settings.ENV_BROADCAST_DIR,
                                  broadcasting(self.scheduler, "env_pack").broadcast)
                    + "\n" + line)
        script_dir = runs[0].log_dir.parent / self.scheduler.script_dir
        arrays = []
        for chunk in array_chunks(len(runs), facts.max_array_len):
            members = runs[chunk.start:chunk.stop]
            entries = [(there(r.bundle_dir), there(r.log_dir)) for r in members]
            script = script_dir / f"{members[0].run_id}{self.scheduler.SCRIPT_SUFFIX}"
            text = self.array_script(res, request, entries, there(script), line)
            arrays.append(ArraySubmission(script, there(script), text, members))
        return ArrayPlan(facts, arrays, env)

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: ArrayPlan) -> Preview:
        notes = [] if prepared.env is None else [
            f"packs the environment {prepared.env.prefix} into {prepared.env.archive} first"]
        return Preview(
            self.name, len(runs), self.transport.where,
            {a.script_there: a.text for a in prepared.arrays},
            [op_line(self.scheduler.submit_op(a.script_there)) for a in prepared.arrays],
            resource_fields(self.resources(request)), notes)

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: ArrayPlan
               ) -> list[RunRecord]:
        if prepared.env is not None:
            envpack.pack_env(prepared.env.prefix, prepared.env.archive)
        for array in prepared.arrays:  # (with the run folders' mode: another user reads none)
            make_store(array.script.parent, self.settings.RUN_FOLDER_MODE)
            write_bytes_atomic(str(array.script), array.text.encode())
        root = prepared.facts.root
        answers = self.stage(
            request, runs, root,
            [self.scheduler.submit_op(a.script_there) for a in prepared.arrays],
            [] if prepared.env is None else [str(prepared.env.archive.relative_to(
                request.log_root))],
            [str(a.script.relative_to(request.log_root)) for a in prepared.arrays])
        job_ids = self._job_ids(prepared.arrays, answers)
        for array, job_id in zip(prepared.arrays, job_ids, strict=True):
            for index, run in enumerate(array.runs):
                log_there = f"{root}/{run.log_dir.relative_to(request.log_root)}"
                run.record_backend(job_log_dir=log_there, array_job_id=job_id,
                                   **self.scheduler.element_fields(
                                       job_id, index, len(array.runs), array.script_there,
                                       prepared.facts.details))
        return [RunRecord.of_run(run) for run in runs]

    def launched(self, runs: list[Run]) -> str:
        """The job (or array) each group of runs became."""
        arrays = Counter(run.launch["backend"]["array_job_id"] for run in runs)
        return (f"submitted as {self.scheduler.NAME} job{'s' * (len(arrays) > 1)} " + ", ".join(
            job_id + (f" (an array of {count})" if count > 1 else "")
            for job_id, count in arrays.items()))

    def _job_ids(self, arrays: list[ArraySubmission], answers: list[dict]) -> list[str]:
        """The job id each array got; if any was refused, the others are cancelled (all or
        nothing: no half-submitted sweep) and the refusal raised."""
        job_ids, refused = [], None
        for array, answer in zip(arrays, answers, strict=True):
            try:
                if answer.get("rc") != 0:
                    said = (answer.get("err", "") or answer.get("out", "")).strip()
                    raise LaunchError(f"{self.scheduler.SIDE.tool} refused "
                                      f"{array.script_there} on {self.transport.where}: {said}")
                job_ids.append(self.scheduler.parse_submit(answer["out"]))
            except LaunchError as exc:
                refused = refused or exc
        if refused is not None:
            if job_ids:
                self.transport.run_ops([{"op": "run", "argv": self.scheduler.cancel_command(j)}
                                      for j in job_ids])
            raise refused
        return job_ids


ARRAY_OPTIONS = {"cluster": None, "array_parallelism": None}


def array_mode(name: str, scheduler: Scheduler) -> Composed:
    """The mode ``name`` that submits a sweep as ``scheduler``'s job arrays: what a
    :data:`~easylaunch.modes.MODES` line naming a scheduler (``module:SCHEDULER``) stands
    for. It takes the scheduler's options, and ``env_pack`` where the scheduler can broadcast."""
    packs = {"env_pack": None} if isinstance(scheduler, Broadcast) else {}
    return Composed(name, ArrayMode, {**scheduler.OPTIONS, **ARRAY_OPTIONS, **packs},
                    restarts=True, parts={"scheduler": scheduler})


SLURM_SINGULARITY = Composed("slurm_singularity", ArrayMode, {**slurm.OPTIONS, **ARRAY_OPTIONS},
                             restarts=True,
                             parts={"scheduler": slurm.SCHEDULER, "container": SINGULARITY})
