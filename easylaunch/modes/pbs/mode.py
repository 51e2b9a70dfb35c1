"""``pbs``: submit to PBS Pro with qsub; a sweep becomes one job array (``-J 1-N``), split below
the server's max_array_size; one run is one job (``modes.scheduled``'s ArrayMode: all or
nothing, ``cluster=`` over SSH, ``env_pack=``).

Resources come from PBS_CONFIGS (``pbs_config_name=``; ``n_nodes``, ``n_gpus``,
``tasks_per_node``, ``time_in_mins``, ``queue`` and ``project`` override it for one launch). A
run of several ranks starts its function on every rank through ``mpiexec`` on the job's
``$PBS_NODEFILE``, rank 0 keeping the record. PBS ends a job at its walltime with SIGTERM: the
job script tells the runner when that is, so such a run records ``timeout``; with MAX_RESTARTS
it saves and its entry is submitted again with qsub (a plain job told its entry) instead.

Tracking: the run's own record first, then ``qstat -x -f -F json`` (PBS Pro, OpenPBS) or
``qstat -f`` (servers without JSON output), asked once for all open runs. Cancel: ``qdel`` of
the run's own array element.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import shlex
import subprocess

from easylaunch import launchers
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.jobscript import job_script, on_every_mpi_rank
from easylaunch.modes.scheduled import ArrayMode, ClusterFacts
from easylaunch.request import LaunchRequest
from easylaunch.schedulers import pbs
from easylaunch.schedulers.pbs import Resources
from easylaunch_job.environment import (
    ENV_ENTRY,
    ENV_JOB_ID,
    ENV_RESUBMIT_SCRIPT,
    ENV_RESUBMIT_WITH,
    ENV_TIME_LIMIT_AT,
    ENV_WATCH_CANCEL,
)
from easylaunch_job.records import STATUS_JSON

# The run's entry: the one a restart was submitted for, else the array index (PBS Pro numbers
# elements from 1; Slurm's PBS front ends set SLURM_ARRAY_TASK_ID instead of PBS_ARRAY_INDEX,
# and SLURM_JOB_ID instead of PBS_JOBID).
PBS_INDEX = (f"${{{ENV_ENTRY}:-"
             "$(( ${PBS_ARRAY_INDEX:-${SLURM_ARRAY_TASK_ID:-1}} - 1 ))}")
JOB_ID = "${PBS_JOBID:-${SLURM_JOB_ID:-}}"
WATCH_CANCEL = 3  # seconds: how soon a run stops when its record asks (see PbsMode._stop)
OVERRIDES = {"n_nodes": "select", "n_gpus": "ngpus", "tasks_per_node": "mpiprocs",
             "time_in_mins": "walltime", "queue": "queue", "project": "project"}


class PbsMode(ArrayMode):
    """Direct submission to the PBS Pro server this machine is a login node of (or reaches)."""

    name = "pbs"
    restarts = True
    scheduler = "PBS"
    submit_tool = "qsub"
    job_id_key = "pbs_job_id"
    options = {"pbs_config_name": None, **dict.fromkeys(OVERRIDES), "cluster": None,
               "array_parallelism": None, "env_pack": None}
    script_dir = ".pbs"
    script_suffix = ".pbs"
    broadcast_with = "pbs"

    def resources(self, request: LaunchRequest) -> Resources:
        """The checked PBS_CONFIGS entry for this request, with this launch's overrides."""
        configs = self.settings.PBS_CONFIGS
        name = self.opts["pbs_config_name"] or ("gpu" if request.use_gpu else "cpu")
        overrides = {field: self.opts[option] for option, field in OVERRIDES.items()
                     if self.opts.get(option) is not None}
        if name in configs and overrides:
            configs = {**configs, name: {**configs[name], **overrides}}
        return pbs.resolve_resources(configs, name, request.use_gpu)

    def check(self, request: LaunchRequest) -> None:
        self.resources(request)
        super().check(request)

    def cluster_facts(self, folder: str) -> ClusterFacts:
        root, (which, version, server) = self.preflight(
            folder, True, {"op": "which", "names": ["qstat", "qdel"]},
            {"op": "run", "argv": ["qstat", "--version"]},
            {"op": "run", "argv": ["qstat", "-B", "-f", "-F", "json"]})
        missing = [name for name, path in which["found"].items() if path is None]
        if missing:
            raise LaunchError(f"mode 'pbs' tracks and cancels runs with qstat and qdel; "
                              f"{' and '.join(missing)} is not on PATH on {self.transport.where}")
        self.json_output = pbs.server_has_json(version["out"] + version["err"])
        return ClusterFacts(root, pbs.max_array_size(server["out"]))

    def cluster_python(self) -> str:
        return self.settings.PBS_PYTHON or self.transport.python

    def pre_cmds(self) -> tuple[str, ...]:
        return tuple(self.settings.PBS_PRE_CMDS)

    def every_rank(self, line: str, res: Resources) -> str:
        """``line`` as is for one process, or started on every rank through mpiexec."""
        if res.tasks == 1:
            return line
        return on_every_mpi_rank(line, launchers.mpiexec(res.tasks, res.mpiprocs, None,
                                                         res.cpu_bind, res.depth))

    def array_script(self, res: Resources, request: LaunchRequest,
                     entries: list[tuple[str, str]], script: str, line: str) -> str:
        array = None if len(entries) == 1 else \
            pbs.array_spec(len(entries), self.opts["array_parallelism"])
        exports = (f"{ENV_TIME_LIMIT_AT}=$(( $(date +%s) + {res.walltime_seconds} )) "
                   f'{ENV_JOB_ID}="{JOB_ID}" {ENV_WATCH_CANCEL}={WATCH_CANCEL}')
        if self.settings.MAX_RESTARTS:  # an attempt that ends to restart submits its entry again
            exports += (f" {ENV_RESUBMIT_SCRIPT}={shlex.quote(script)} "
                        f'{ENV_RESUBMIT_WITH}=qsub {ENV_ENTRY}="$i"')
        return job_script(pbs.pbs_header(res, request.exp_name, array), entries, line,
                          index=PBS_INDEX, exports=exports)

    def submit_op(self, script: str) -> dict:
        # run in the script's folder: PBS writes the job's own output file there
        return {"op": "run", "argv": pbs.qsub_command(script), "cwd": posixpath.dirname(script)}

    def parse_submit(self, stdout: str) -> str:
        return pbs.parse_qsub(stdout)

    def element_fields(self, job_id: str, index: int, count: int, script: str) -> dict:
        element = job_id if count == 1 else pbs.element_id(job_id, index + 1)
        return {"pbs_job_id": element, "array_job_id": job_id, "array_index": index + 1,
                "script": script, "qstat_json": self.json_output}

    # -- tracking -------------------------------------------------------------------------------

    def _json_output(self, by_id: dict[str, list[Job]]) -> bool:
        return any(j.launch_info["backend"].get("qstat_json") for js in by_id.values()
                   for j in js)

    def state_ops(self, by_id: dict[str, list[Job]]) -> list[dict]:
        return [{"op": "run", "argv": pbs.qstat_command(list(by_id), self._json_output(by_id))}]

    def states(self, by_id: dict[str, list[Job]], answers: list[subprocess.CompletedProcess]
               ) -> dict[str, str | None]:
        return pbs.states_from(list(by_id), answers[0], self._json_output(by_id))

    def cancel_command(self, job_id: str) -> list[str]:
        return pbs.qdel_command(job_id)

    def scheduler_output(self, job: Job) -> str | None:
        folder = posixpath.dirname(job.launch_info["backend"].get("script", ""))
        return f"PBS's output files (NAME.oID) in {self.transport.remote(folder)}" \
            if folder else None

    def _stop(self, job: Job, job_id: str) -> None:
        """qdel the run's job, as every scheduler mode stops one. Front ends without JSON
        output may not name array elements (Slurm's cannot; their qdel would end the whole
        array), so there an element is stopped by its record alone: the cancel is noted there
        (reading the record in the same round trip), a running element stops within
        WATCH_CANCEL seconds (its runner watches the record), and one not started yet is
        recorded cancelled here at once (it ends as soon as it starts)."""
        backend = job.launch_info["backend"]
        if "[" not in backend[self.job_id_key] or backend.get("qstat_json"):
            super()._stop(job, job_id)
            return
        record = f"{self._job_log_dir(job)}/{STATUS_JSON}"
        (read,) = self.request_cancel(job, {"op": "read", "paths": [record]})
        found = read["files"][record]
        with contextlib.suppress(ValueError):
            if found and json.loads(found["text"]).get("state") == "running":
                return  # its runner stops it, and records that
        job.record_end("cancelled", "cancelled before it started")
