"""What modes that hand runs to a batch scheduler share: the preflight (one round trip that
also asks the scheduler what the launch needs to know), the scheduler's side of tracking (asked
in the same round trip as the runs' records), the terminal state a run gets when the scheduler
is done with it before the run recorded one (so ``job.wait()`` never hangs), and cancel. The
scheduler (a module of :mod:`easylaunch.modes.schedulers`) is a part the mode is made with.
"""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easylaunch.errors import LaunchError
from easylaunch.modes.base import shell_in
from easylaunch.modes.hosted import NO_QUERY, BackendQuery, HostedMode, completed
from easylaunch.modes.schedulers import Scheduler, shells
from easylaunch.modes.schedulers.nodes import Nodes
from easylaunch.runs.commands import programs_to_find
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.command import run_variables
from easylaunch_job.records import STATUS_JSON, STDERR_LOG, update_status
from easylaunch_job.states import TERMINAL_STATES

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Answer, Op, RunOp


@dataclass(frozen=True)
class ClusterFacts:
    """What a launch learned from the cluster before making anything."""

    root: str  # the launch's folder there, as an absolute path
    max_array_len: int  # how many runs one job array may hold
    details: dict  # what launch.json records with each run (the scheduler's element_fields)


# Scheduler answers that say "not now" rather than "no": asked again after these pauses.
TRANSIENT = re.compile(r"timed out|try again|temporarily unavailable|Unable to contact|"
                       r"Connection refused|Socket|busy|Communications error", re.IGNORECASE)
RETRY_DELAYS = (0.5, 1.0, 2.0)


class ScheduledMode(HostedMode):
    """Tracking and cancelling through the mode's ``scheduler``; subclasses say how jobs are
    made.

    ``cluster`` (a CLUSTERS name or an ssh destination; default DEFAULT_CLUSTER) submits to a
    cluster over SSH; without one, the scheduler is on this machine.
    """

    scheduler: Scheduler
    packs_runs = False  # whether an allocation's resources are sized to pack runs (htp)
    nodes: Sequence[Nodes] = ()  # what the cluster's nodes can give, once the preflight asked

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._waits: dict[str, str | None] = {}  # run id -> why its job waits, last heard

    def host_name(self) -> str | None:
        return self.opts.get("cluster") or self.settings.DEFAULT_CLUSTER

    def resources(self, request: LaunchRequest) -> Any:
        """The checked resource request of this launch (against the cluster's nodes, once
        the preflight has asked about them)."""
        res = self.scheduler.resources(self.settings, self.opts, request)
        return self.scheduler.fit(res, self.nodes, self.packs_runs)

    def preflight(self, folder: str, runs_python: str | None, request: LaunchRequest,
                  in_image: bool, jobs: int | None = None) -> ClusterFacts:
        """Ask the cluster, in one round trip, whether it can take runs kept in ``folder``
        and started with ``runs_python`` (see :meth:`check_host`; a command's programs are
        looked up on its PATH unless the runs start ``in_image`` or PRE_CMDS set their PATH
        up), whether the submit command is there, what the scheduler says about array sizes,
        what its nodes can give (a request none can give is refused here), and whether its
        limits let this user submit ``jobs`` more jobs."""
        sched, t = self.scheduler, self.transport
        sched.check_folder(folder)  # before anything is made there
        tool = sched.SIDE.tool
        programs = [] if in_image or self.runs_pre_cmds() \
            else programs_to_find(request)
        root, _, (which, *answers) = self.check_host(
            folder, runs_python, {"op": "which", "names": [tool]}, *sched.preflight_ops(),
            programs=programs)
        if which["found"][tool] is None:
            raise LaunchError(
                f"mode {self.name!r} submits with {tool}, which is not on PATH on {t.where}; "
                + ("run on the cluster's login node, or set cluster= (or DEFAULT_CLUSTER) to "
                   "submit to one over SSH" + sched.OTHER_WAYS if t.is_local
                   else "is it the cluster's login node?"))
        max_array_len, details = sched.cluster_facts(answers, t.where)
        self.nodes = sched.read_nodes(answers)
        res = self.resources(request)  # (refused here if no node can give it)
        if jobs is not None:
            sched.check_room(res, jobs, answers)
        return ClusterFacts(root, max_array_len, details)

    def cluster_python(self) -> str:
        """The Python that starts runs on the cluster (outside any container): SLURM_PYTHON
        or PBS_PYTHON, else the cluster's ``python`` over SSH, else (a login node) the
        interpreter of the launching script."""
        return self.far_path(self.scheduler.python(self.settings) or self.transport.python)

    def python_setting(self) -> str:
        key = self.scheduler.python_key
        if self.scheduler.python(self.settings) or self.transport.is_local:
            return key
        return f"{super().python_setting()} (or {key})"

    def runs_pre_cmds(self) -> tuple[str, ...]:
        return self.scheduler.pre_cmds(self.settings)

    def scheduler_output(self, job: RunRecord) -> str | None:
        """Where the scheduler's own output for this run is, in words (None: unknown)."""
        place = self.scheduler.output_place(job.launch_info["backend"])
        if place is None or (self.transport.is_local and not Path(place[0]).exists()):
            return None
        return place[1].format(self.transport.remote(place[0]))

    def waiting_reason(self, job: RunRecord) -> str | None:
        """Why a queued job waits, as the scheduler says (Resources, Priority, ...)."""
        job_id = self.job_id(job)
        argv = None if job_id is None else self.scheduler.reason_command(job_id)
        if argv is None:
            return None
        op: RunOp = {"op": "run", "argv": argv}
        out = completed(self.retried([op], self.transport.run_ops([op]))[0])
        return self.scheduler.parse_reason(out.stdout) if out.returncode == 0 else None

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        """bash in the run's folder on its job's node (through the scheduler), over the
        cluster's SSH connection with a terminal when the cluster is remote."""
        job_id, inside = self.job_id(job), shells(self.scheduler, "easylaunch shell")
        if job_id is None:
            raise LaunchError(f"run {job.id} has no {self.scheduler.NAME} job id yet")
        op: RunOp = {"op": "run", "argv": inside.shell_lookup(job_id)}
        found = completed(self.retried([op], self.transport.run_ops([op]))[0])
        folder = self._job_log_dir(job)
        inner = shell_in(folder, run_variables(job.id, folder))
        return self.transport.terminal_argv(
            inside.shell_argv(found.stdout, job_id, inner)), None

    # -- tracking -------------------------------------------------------------------------------

    def job_id(self, job: RunRecord) -> str | None:
        """The scheduler's id of the job (or array element) that runs this run, if known: the
        one its last attempt submitted for the next, else the one it recorded when it started
        (on front ends that cannot name array elements, the only one the scheduler knows), else
        the one submitted at launch."""
        info = self.read_record(job)
        return info.get("next_job_id") or info.get("job_id") or self.submitted_job_id(job)

    def submitted_job_id(self, job: RunRecord) -> str | None:
        """The scheduler's id of the job submitted at launch, if known."""
        return job.launch_info["backend"].get(self.scheduler.job_id_key)

    def _open_ids(self, jobs: list[RunRecord]) -> dict[str, list[RunRecord]]:
        by_id: dict[str, list[RunRecord]] = {}  # htp runs share one allocation's id
        for job in jobs:
            job_id = self.job_id(job)
            if job_id is not None:
                by_id.setdefault(job_id, []).append(job)
        return by_id

    def backend_query(self, jobs: list[RunRecord]) -> BackendQuery:
        by_id = self._open_ids(jobs)
        if not by_id:
            return NO_QUERY
        backends = [job.launch_info["backend"] for group in by_id.values() for job in group]
        ops: list[Op] = [{"op": "run", "argv": argv}
                         for argv in self.scheduler.status_commands(list(by_id), backends)]
        return BackendQuery(ops, functools.partial(self._settle_all, by_id, backends, ops))

    def _settle_all(self, by_id: dict[str, list[RunRecord]], backends: list[dict],
                    ops: Sequence[Op], answers: list[Answer], ended_there: set[str]) -> None:
        answers = self.retried(ops, answers)
        said = [completed(a) for a in answers]
        states = self.scheduler.read_states(list(by_id), said, backends)
        waits = self.scheduler.read_waits(list(by_id), said, backends)
        exits = self.scheduler.read_exits(list(by_id), said, backends)
        for job_id, group in by_id.items():
            for job in group:
                self._waits[job.id] = waits.get(job_id)
                if job.id not in ended_there:  # (its end is on its way here)
                    self._settle(job, job_id, states.get(job_id, "unknown"), exits.get(job_id))

    def heard_wait(self, job: RunRecord) -> str | None:
        return self._waits.get(job.id)

    def _settle(self, job: RunRecord, job_id: str, state: str | None,
                ended: str | None = None) -> None:
        """Give a run the scheduler has finished with (or forgotten) the terminal state it
        lacks (``ended``: how its job ended, in the scheduler's words, where it says)."""
        if state in ("queued", "running", "unknown"):
            return
        info = self.read_record(job)
        # (its record, mirrored in the same round trip, may be newer than the ids asked about)
        if info.get("state") in TERMINAL_STATES or self.job_id(job) != job_id:
            return  # ended, or gone on as another job (a restart) since the scheduler was asked
        look, name = self._where_to_look(job), self.scheduler.NAME
        if info.get("cancel_requested"):
            job.record_end("cancelled", f"cancelled ({name} job {job_id})")
        elif state is None:
            job.record_end("failed", f"{name} no longer knows job {job_id} and the run "
                                     f"recorded no outcome; {look}")
        elif state == "succeeded":
            job.record_end("failed", f"{name} job {job_id} ended without the run recording "
                                     f"an outcome; {look}")
        else:
            how = f" ({ended})" if ended else ""
            job.record_end(state, f"{name} reports job {job_id} as {state}{how} before the run "
                                  f"recorded an outcome; {look}")

    def _where_to_look(self, job: RunRecord) -> str:
        """Point at the log that says why a job ended: the run's stderr.log where it exists,
        else the scheduler's own output, else say that neither was written."""
        stderr = self.readable_log(job, STDERR_LOG)
        if stderr.exists() and stderr.stat().st_size:
            return f"see {stderr}"
        output = self.scheduler_output(job)
        if output:
            return f"see {output}"
        return ("the job wrote no log (it may have failed before it started: check the "
                f"queue, the paths and what {self.scheduler.NAME} says about the job)")

    def cancel(self, job: RunRecord) -> None:
        job_id = self.job_id(job)
        if job_id is None:
            update_status(str(job.log_dir), cancel_requested=True)
            raise LaunchError(f"run {job.id} has no {self.scheduler.NAME} job id known on this "
                              f"machine; cancel it on the cluster")
        self._stop(job, job_id)

    def retried(self, ops: Sequence[Op], answers: list[Answer]) -> list[Answer]:
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
            for i, answer in zip(again, self.transport.run_ops([ops[i] for i in again]),
                                 strict=True):
                answers[i] = answer
        return answers

    def _stop(self, job: RunRecord, job_id: str) -> None:
        """Note the cancel in the run's record and stop its job in the same round trip. Where
        the scheduler cannot name the run's element (``stops_by_record``), the record alone
        stops it: a running element stops within seconds (its job side watches the record),
        and one not started yet is recorded cancelled here at once (it ends as it starts)."""
        if self.scheduler.stops_by_record(job.launch_info["backend"]):
            record = f"{self._job_log_dir(job)}/{STATUS_JSON}"
            (read,) = self.request_cancel([job], {"op": "read", "paths": [record]})
            found = read["files"][record]
            with contextlib.suppress(ValueError):
                if found and json.loads(found["text"]).get("state") == "running":
                    return  # its job side stops it, and records that
            job.record_end("cancelled", "cancelled before it started")
            return
        argv = self.scheduler.cancel_command(job_id)
        op: RunOp = {"op": "run", "argv": argv}
        out = completed(self.retried([op], self.request_cancel([job], op))[0])
        if out.returncode != 0:
            raise LaunchError(f"{shlex.join(argv)} failed on {self.transport.where}: "
                              f"{(out.stderr or out.stdout).strip()}")
