"""What modes that hand runs to a batch scheduler share (Slurm, PBS).

``ScheduledMode``: the scheduler's side of tracking (asked in the same round trip as the runs'
records), the terminal state a run gets when the scheduler is done with it before the run
recorded one (so ``job.wait()`` never hangs), and cancel. ``ArrayMode``: a launch as job arrays
of runs, submitted all or nothing, with an optional packed environment broadcast to the nodes.
Each scheduler supplies only its commands and their parsing (pure functions in its
``scheduler`` module) through the hooks below.
"""

from __future__ import annotations

import functools
import re
import shlex
import subprocess
import sys
import time
from abc import abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from easylaunch import envpack
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.hosted import NO_QUERY, BackendQuery, HostedMode, completed
from easylaunch.modes.jobscript import StartLine, broadcast_env, bundle_pythonpath, start_line
from easylaunch.preview import Preview, op_line, resource_fields
from easylaunch.request import LaunchRequest
from easylaunch_job.records import STDERR_LOG, update_status, write_bytes_atomic
from easylaunch_job.states import TERMINAL_STATES

ENV_STORE = ".envs"


@dataclass(frozen=True)
class ClusterFacts:
    """What a launch learned from the cluster before making anything."""

    root: str  # the launch's folder there, as an absolute path
    max_array_len: int  # how many runs one job array may hold


def array_chunks(count: int, max_len: int) -> list[range]:
    """Split ``count`` runs into arrays of at most ``max_len`` elements."""
    size = max(1, max_len)
    return [range(start, min(start + size, count)) for start in range(0, count, size)]


# Scheduler answers that say "not now" rather than "no": asked again after these pauses.
TRANSIENT = re.compile(r"timed out|try again|temporarily unavailable|Unable to contact|"
                       r"Connection refused|Socket|busy|Communications error", re.IGNORECASE)
RETRY_DELAYS = (0.5, 1.0, 2.0)


class ScheduledMode(HostedMode):
    """Tracking and cancelling through a batch scheduler; subclasses say how jobs are made.

    ``cluster`` (a CLUSTERS name or an ssh destination; default DEFAULT_CLUSTER) submits to a
    cluster over SSH; without one, the scheduler is on this machine.
    """

    scheduler: ClassVar[str]  # how messages name it: "Slurm", "PBS"
    submit_tool: ClassVar[str]  # the command that submits: "sbatch", "qsub"
    job_id_key: ClassVar[str]  # launch.json's backend key for a run's job (or element) id
    other_ways: ClassVar[str] = ""  # what else a user without the submit command can do

    def host_name(self) -> str | None:
        return self.opts.get("cluster") or self.settings.DEFAULT_CLUSTER

    def preflight(self, folder: str, runs_there: bool, *ops: dict) -> tuple[str, list[dict]]:
        """Ask the cluster, in one round trip, whether it can take this launch (see
        :meth:`check_host`) and whether the submit command is there; the launch's folder
        there and the answers to ``ops``."""
        t = self.transport
        root, (which, *answers) = self.check_host(
            folder, runs_there, {"op": "which", "names": [self.submit_tool]}, *ops)
        if which["found"][self.submit_tool] is None:
            raise LaunchError(
                f"mode {self.name!r} submits with {self.submit_tool}, which is not on PATH on "
                f"{t.where}; " + ("run on the cluster's login node, or set cluster= (or "
                                  "DEFAULT_CLUSTER) to submit to one over SSH" + self.other_ways
                                  if t.is_local else "is it the cluster's login node?"))
        return root, answers

    def cluster_python(self) -> str:
        """The Python that starts runs on the cluster (outside any container)."""
        return self.transport.python

    # -- the scheduler's commands ---------------------------------------------------------------

    @abstractmethod
    def state_ops(self, by_id: dict[str, list[Job]]) -> list[dict]:
        """Far-side ops asking the scheduler about these jobs (by job id, the runs of each)."""

    @abstractmethod
    def states(self, by_id: dict[str, list[Job]], answers: list[subprocess.CompletedProcess]
               ) -> dict[str, str | None]:
        """Each job's state from the answers to :meth:`state_ops`: an easylaunch state,
        "unknown" (the scheduler could not say just now) or None (it has forgotten the job)."""

    @abstractmethod
    def cancel_command(self, job_id: str) -> list[str]:
        """The command that stops one job or array element."""

    def scheduler_output(self, job: Job) -> str | None:
        """Where the scheduler's own output for this run is, in words (None: unknown)."""
        return None

    # -- tracking -------------------------------------------------------------------------------

    def job_id(self, job: Job) -> str | None:
        """The scheduler's id of the job (or array element) that runs this run, if known: the
        one its last attempt submitted for the next, else the one it recorded when it started
        (on front ends that cannot name array elements, the only one the scheduler knows), else
        the one submitted at launch."""
        info = job.info()
        return info.get("next_job_id") or info.get("job_id") or self.submitted_job_id(job)

    def submitted_job_id(self, job: Job) -> str | None:
        """The scheduler's id of the job submitted at launch, if known."""
        return job.launch_info["backend"].get(self.job_id_key)

    def _open_ids(self, jobs: list[Job]) -> dict[str, list[Job]]:
        by_id: dict[str, list[Job]] = {}  # htp runs share one allocation's id
        for job in jobs:
            job_id = self.job_id(job)
            if job_id is not None:
                by_id.setdefault(job_id, []).append(job)
        return by_id

    def backend_query(self, jobs: list[Job]) -> BackendQuery:
        by_id = self._open_ids(jobs)
        if not by_id:
            return NO_QUERY
        ops = self.state_ops(by_id)
        return BackendQuery(ops, functools.partial(self._settle_all, by_id, ops))

    def _settle_all(self, by_id: dict[str, list[Job]], ops: list[dict],
                    answers: list[dict]) -> None:
        answers = self.retried(ops, answers)
        states = self.states(by_id, [completed(a) for a in answers])
        for job_id, group in by_id.items():
            for job in group:
                self._settle(job, job_id, states.get(job_id, "unknown"))

    def _settle(self, job: Job, job_id: str, state: str | None) -> None:
        """Give a run the scheduler has finished with (or forgotten) the terminal state it
        lacks."""
        if state in ("queued", "running", "unknown"):
            return
        info = job.info()
        # (its record, mirrored in the same round trip, may be newer than the ids asked about)
        if info.get("state") in TERMINAL_STATES or self.job_id(job) != job_id:
            return  # ended, or gone on as another job (a restart) since the scheduler was asked
        look, name = self._where_to_look(job), self.scheduler
        if info.get("cancel_requested"):
            job.record_end("cancelled", f"cancelled ({name} job {job_id})")
        elif state is None:
            job.record_end("failed", f"{name} no longer knows job {job_id} and the run "
                                     f"recorded no outcome; {look}")
        elif state == "succeeded":
            job.record_end("failed", f"{name} job {job_id} ended without the run recording "
                                     f"an outcome; {look}")
        else:
            job.record_end(state, f"{name} reports job {job_id} as {state} before the run "
                                  f"recorded an outcome; {look}")

    def _where_to_look(self, job: Job) -> str:
        """Point at the log that says why a job ended: the run's stderr.log where it exists,
        else the scheduler's own output, else say that neither was written."""
        stderr = self.log_file(job, STDERR_LOG)
        if stderr.exists() and stderr.stat().st_size:
            return f"see {stderr}"
        output = self.scheduler_output(job)
        if output:
            return f"see {output}"
        return ("the job wrote no log (it may have failed before it started: check the "
                f"queue, the paths and what {self.scheduler} says about the job)")

    def cancel(self, job: Job) -> None:
        job_id = self.job_id(job)
        if job_id is None:
            update_status(str(job.log_dir), cancel_requested=True)
            raise LaunchError(f"run {job.id} has no {self.scheduler} job id known on this "
                              f"machine; cancel it on the cluster")
        self._stop(job, job_id)

    def retried(self, ops: list[dict], answers: list[dict]) -> list[dict]:
        """``answers`` to ``ops`` (scheduler commands, asked once already), with those that
        failed for a passing reason (the controller busy or out of reach) asked again, after
        RETRY_DELAYS. Never used for submitting, which must not happen twice."""
        answers = list(answers)
        for delay in RETRY_DELAYS:
            again = [i for i, a in enumerate(answers)
                     if a.get("rc") not in (0, None) and TRANSIENT.search(a.get("err", ""))]
            if not again:
                break
            time.sleep(delay)
            for i, answer in zip(again, self.transport.probe([ops[i] for i in again]),
                                 strict=True):
                answers[i] = answer
        return answers

    def _stop(self, job: Job, job_id: str) -> None:
        """Note the cancel in the run's record and stop its job in the same round trip."""
        argv = self.cancel_command(job_id)
        op = {"op": "run", "argv": argv}
        out = completed(self.retried([op], self.request_cancel(job, op))[0])
        if out.returncode != 0:
            raise LaunchError(f"{shlex.join(argv)} failed on {self.transport.where}: "
                              f"{(out.stderr or out.stdout).strip()}")


@dataclass(frozen=True)
class ArrayJob:
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
    """The job arrays of a launch, and the environment they broadcast (if any)."""

    arrays: list[ArrayJob]
    env: EnvPack | None


class ArrayMode(ScheduledMode):
    """Submit right away; a sweep becomes job arrays (split below the cluster's limit).

    On a login node (no ``cluster``), runs live in LOCAL_LOG_DIR, which the compute nodes must
    share. With ``cluster=`` the runs, code snapshots and the pickled function are copied to the
    cluster's log_dir first (each snapshot and function once per content), and the submit
    command runs there over SSH. ``array_parallelism=N`` caps how many elements of an array run
    at once. ``env_pack=True`` (this Python's environment) or ``env_pack=PATH`` (a virtualenv or
    conda environment) packs it once per content and copies it to node-local storage
    (ENV_BROADCAST_DIR) inside each job, where the runs then start from.
    """

    script_dir: ClassVar[str]  # the folder of a launch's job scripts, next to its runs
    script_suffix: ClassVar[str]
    broadcast_with: ClassVar[str]  # how broadcast_env copies to every node: "slurm", "pbs"

    def _env_prefix(self) -> Path | None:
        choice = self.opts.get("env_pack")
        if choice is None or choice is False:
            return None
        return Path(sys.prefix if choice is True else choice).expanduser()

    def check(self, request: LaunchRequest) -> None:
        cap = self.opts["array_parallelism"]
        if cap is not None and (not isinstance(cap, int) or isinstance(cap, bool) or cap < 1):
            raise LaunchError(f"array_parallelism must be a positive integer, got {cap!r}")
        self.facts = self.cluster_facts(self.transport.log_dir or str(request.log_root))

    @abstractmethod
    def cluster_facts(self, folder: str) -> ClusterFacts:
        """:meth:`preflight` for runs kept in ``folder``, with what the scheduler says about
        array sizes."""

    @abstractmethod
    def resources(self, request: LaunchRequest) -> Any:
        """The checked resource request of this launch."""

    @abstractmethod
    def every_rank(self, line: str, res: Any) -> str:
        """``line`` as is for one process, or started on every rank of the job."""

    @abstractmethod
    def array_script(self, res: Any, request: LaunchRequest, entries: list[tuple[str, str]],
                     script: str, line: str) -> str:
        """The job script of one array (or one job, for one entry): ``entries`` are (bundle,
        log folder) pairs as the job sees them, ``script`` the script's own path there."""

    @abstractmethod
    def submit_op(self, script: str) -> dict:
        """The far-side op that submits the script at ``script`` (a path there)."""

    @abstractmethod
    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's output."""

    @abstractmethod
    def element_fields(self, job_id: str, index: int, count: int, script: str) -> dict:
        """What launch.json records for element ``index`` (0-based) of an array of ``count``
        runs submitted as ``job_id`` from ``script``."""

    def pre_cmds(self) -> tuple[str, ...]:
        """Shell commands run before the Python of each run."""
        return ()

    def start(self, request: LaunchRequest, runs: list[Run], python: str, root: str
              ) -> StartLine:
        """How each run starts: ``python`` on the bundle's code snapshots (``root``: the
        launch's folder on the cluster)."""
        return StartLine(python=python, pre_cmds=self.pre_cmds(),
                         pythonpath=bundle_pythonpath(runs[0].meta["code_dirs"]))

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> ArrayPlan:
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
            line = (broadcast_env(there(env.archive), self.settings.ENV_BROADCAST_DIR,
                                  self.broadcast_with) + "\n" + line)
        script_dir = runs[0].log_dir.parent / self.script_dir
        arrays = []
        for chunk in array_chunks(len(runs), self.facts.max_array_len):
            members = runs[chunk.start:chunk.stop]
            entries = [(there(r.bundle_dir), there(r.log_dir)) for r in members]
            script = script_dir / f"{members[0].run_id}{self.script_suffix}"
            text = self.array_script(res, request, entries, there(script), line)
            arrays.append(ArrayJob(script, there(script), text, members))
        return ArrayPlan(arrays, env)

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: ArrayPlan) -> Preview:
        notes = [] if prepared.env is None else [
            f"packs the environment {prepared.env.prefix} into {prepared.env.archive} first"]
        return Preview(
            self.name, len(runs), self.transport.where,
            {a.script_there: a.text for a in prepared.arrays},
            [op_line(self.submit_op(a.script_there)) for a in prepared.arrays],
            resource_fields(self.resources(request)), notes)

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: ArrayPlan) -> list[Job]:
        if prepared.env is not None:
            envpack.pack_env(prepared.env.prefix, prepared.env.archive)
        for array in prepared.arrays:
            array.script.parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(str(array.script), array.text.encode())
        root = self.facts.root
        answers = self.stage(
            request, runs, root, [self.submit_op(a.script_there) for a in prepared.arrays],
            [] if prepared.env is None else [str(prepared.env.archive.relative_to(
                request.log_root))],
            [str(a.script.relative_to(request.log_root)) for a in prepared.arrays])
        job_ids = self._job_ids(prepared.arrays, answers)
        print(f"easylaunch {self.name}: {len(runs)} run(s) submitted as {self.scheduler} job"
              f"{'s' * (len(job_ids) > 1)} " + ", ".join(
                  job_id + (f" (an array of {len(array.runs)})" if len(array.runs) > 1 else "")
                  for array, job_id in zip(prepared.arrays, job_ids, strict=True)),
              file=sys.stderr)
        for array, job_id in zip(prepared.arrays, job_ids, strict=True):
            for index, run in enumerate(array.runs):
                log_there = f"{root}/{run.log_dir.relative_to(request.log_root)}"
                run.record_backend(job_log_dir=log_there, **self.element_fields(
                    job_id, index, len(array.runs), array.script_there))
        return [Job(run.run_id, run.exp_name, run.log_dir, self) for run in runs]

    def _job_ids(self, arrays: list[ArrayJob], answers: list[dict]) -> list[str]:
        """The job id each array got; if any was refused, the others are cancelled (all or
        nothing: no half-submitted sweep) and the refusal raised."""
        job_ids, refused = [], None
        for array, answer in zip(arrays, answers, strict=True):
            try:
                if answer.get("rc") != 0:
                    said = (answer.get("err", "") or answer.get("out", "")).strip()
                    raise LaunchError(f"{self.submit_tool} refused {array.script_there} on "
                                      f"{self.transport.where}: {said}")
                job_ids.append(self.parse_submit(answer["out"]))
            except LaunchError as exc:
                refused = refused or exc
        if refused is not None:
            if job_ids:
                self.transport.probe([{"op": "run", "argv": self.cancel_command(j)}
                                      for j in job_ids])
            raise refused
        return job_ids
