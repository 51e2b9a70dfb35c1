"""What the Slurm modes share: resources, the cluster they reach, tracking, cancel, fetch.

The cluster is reached through a transport (``easylaunch.hosts``): this machine, or a login
node over SSH; nothing below depends on which. A run's ``status.json`` is the first source of
truth. Only while the local copy is not final is the cluster asked, once for all the runs of a
poll: their records there, then squeue and sacct. When Slurm reports a job ended, or has
forgotten it, the run gets a terminal state with the reason, so ``job.wait()`` never hangs.
A run that ended is brought back into its local folder (logs and result) in the same poll.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from easylaunch import hosts, launchers, runner
from easylaunch.bundle import BUNDLE_DIR, STDERR_LOG, STDOUT_LOG, Run
from easylaunch.errors import LaunchError
from easylaunch.hosts.transport import HostError, Transport, checked
from easylaunch.jobs import Job
from easylaunch.modes.base import Mode
from easylaunch.modes.slurm import scheduler as slurm
from easylaunch.modes.slurm.jobscript import on_every_rank
from easylaunch.modes.slurm.scheduler import Resources
from easylaunch.request import LaunchRequest

MIRRORED = (runner.STATUS_JSON, runner.RESULT_PKL)


def _copy_newer(source: Path, dest: Path) -> None:
    """Copy the run's record from where the job writes it into the local run folder, when
    that copy is newer than the local one."""
    for name in MIRRORED:
        try:
            newer = (source / name).stat().st_mtime_ns > (dest / name).stat().st_mtime_ns
        except FileNotFoundError:
            newer = (source / name).exists()
        if newer:
            shutil.copy2(source / name, dest / f".{name}.tmp")
            os.replace(dest / f".{name}.tmp", dest / name)


@dataclass(frozen=True)
class ClusterFacts:
    """What a launch learned from the cluster before making anything."""

    root: str  # the launch's folder there, as an absolute path
    max_array_size: int


class SlurmBase(Mode):
    """Tracking and cancelling through Slurm; subclasses decide how jobs are made.

    Options ``n_nodes``, ``n_gpus`` (per node) and ``tasks_per_node`` (default: the GPUs per
    node, else 1) make a run multi-process: its function runs on every rank through srun.
    ``time_in_mins`` (minutes or a Slurm time) replaces the config's limit for one launch.
    ``cluster`` (a CLUSTERS name or an ssh destination; default DEFAULT_CLUSTER) submits to
    a cluster over SSH; without one, Slurm is on this machine.
    """

    options = {"n_nodes": None, "n_gpus": None, "tasks_per_node": None, "time_in_mins": None,
               "cluster": None}
    runs_python = sys.executable  # the Python of runs on this machine, when no cluster is set

    def resources(self, request: LaunchRequest) -> Resources:
        """The checked SLURM_CONFIGS entry for this request, with the rank options applied."""
        configs = self.settings.SLURM_CONFIGS
        name = request.slurm_config_name or ("gpu" if request.use_gpu else "cpu")
        overrides = {k: self.opts[k] for k in ("n_nodes", "n_gpus", "time_in_mins")
                     if self.opts.get(k) is not None}
        if name in configs and overrides:
            configs = {**configs, name: {**configs[name], **overrides}}
        res = slurm.resolve_resources(configs, name, request.use_gpu)
        per_node = self.opts.get("tasks_per_node") or res.n_gpus or 1
        if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
            raise LaunchError(f"tasks_per_node must be a positive integer, got {per_node!r}")
        if overrides.get("n_nodes") or per_node > 1:
            res = slurm.resolve_resources(configs, name, request.use_gpu,
                                          n_tasks=res.nodes * per_node)
        return res

    def every_rank(self, line: str, res: Resources) -> str:
        """``line`` as is for one process, or started on every rank through srun."""
        if res.tasks == 1:
            return line
        return on_every_rank(line, launchers.srun(res.nodes, res.tasks, res.n_gpus))

    def check(self, request: LaunchRequest) -> None:
        res = self.resources(request)
        if self.settings.SLURM_SIGNAL_SECONDS >= res.time_minutes * 60:
            raise LaunchError(
                f"SLURM_SIGNAL_SECONDS={self.settings.SLURM_SIGNAL_SECONDS} is not shorter than "
                f"the time limit ({res.time_minutes} min): the time-limit warning would come at "
                "once; lower it (0 turns the warning off) or raise time_in_mins")

    # -- the cluster ------------------------------------------------------------------------------

    @functools.cached_property
    def transport(self) -> Transport:
        """This machine, or the cluster's login node over SSH."""
        return hosts.transport_to(self.settings, self.opts.get("cluster") or
                                  self.settings.DEFAULT_CLUSTER, self.runs_python)

    def cluster_python(self) -> str:
        """The Python that starts runs (or the packer) on the cluster, outside any container."""
        return self.settings.SLURM_PYTHON or self.transport.python

    def preflight(self, folder: str, runs_there: bool) -> ClusterFacts:
        """Ask the cluster, in one round trip, whether it can take this launch: sbatch there,
        ``folder`` writable (made if missing); with ``runs_there``, a Python that can load
        what this machine pickles."""
        t = self.transport
        info, which, folder_there, config = checked(t.probe([
            {"op": "info"}, {"op": "which", "names": ["sbatch"]},
            {"op": "prepare_dir", "path": folder},
            {"op": "run", "argv": ["scontrol", "show", "config"]}]), t.where)
        if which["found"]["sbatch"] is None:
            raise LaunchError(
                f"mode {self.name!r} submits with sbatch, which is not on PATH on {t.where}; "
                + ("run on the cluster's login node, set cluster= (or DEFAULT_CLUSTER) to "
                   "submit to one over SSH, or use mode='sss' to write job scripts to copy"
                   if t.is_local else "is it the cluster's login node?"))
        if runs_there and not t.is_local:
            here, there = list(sys.version_info[:2]), info["python"][:2]
            if there != here:
                raise LaunchError(
                    f"{t.python} on {t.where} is Python {'.'.join(map(str, there))}, but runs "
                    f"are pickled here with Python {'.'.join(map(str, here))}: set 'python' "
                    "of the cluster (or SLURM_PYTHON) to a Python "
                    f"{'.'.join(map(str, here))} there")
            if info["cloudpickle"] is None:
                raise LaunchError(f"{t.python} on {t.where} has no cloudpickle; install it "
                                  "there (pip install cloudpickle)")
        slurm.check_log_folder(folder_there["path"])
        return ClusterFacts(folder_there["path"], slurm.max_array_size(config["out"]))

    # -- tracking -------------------------------------------------------------------------------

    def _job_log_dir(self, job: Job) -> str:
        """Where the job writes the run's record, on the cluster."""
        return job.launch_info["backend"].get("job_log_dir", str(job.log_dir))

    def remote_log_dir(self, run: Run) -> str | None:
        there = run.launch["backend"].get("job_log_dir")
        if there is None or (self.transport.is_local and there == str(run.log_dir)):
            return None
        return there if self.transport.is_local else f"{self.transport.remote(there)}"

    def log_file(self, job: Job, name: str) -> Path:
        """The log where the job writes it when that is readable here, else the local copy."""
        there = Path(self._job_log_dir(job)) / name
        return there if self.transport.is_local and there.exists() else job.log_dir / name

    def slurm_job_id(self, job: Job) -> str | None:
        """The Slurm job (or array task) id that runs this job, if known here."""
        return job.launch_info["backend"].get("slurm_job_id")

    def sync_record(self, job: Job) -> None:
        """Where the job's folder is visible here (a shared file system), its record is
        copied whenever it is newer: a run the user reran on the cluster shows it too."""
        there = Path(self._job_log_dir(job))
        if self.transport.is_local and there != job.log_dir and there.is_dir():
            _copy_newer(there, job.log_dir)

    def _mirrored(self, job: Job) -> bool:
        """Whether the job keeps its record somewhere other than its local folder."""
        return not self.transport.is_local or self._job_log_dir(job) != str(job.log_dir)

    def refresh(self, job: Job) -> None:
        self.refresh_many([job])

    def refresh_many(self, jobs: list[Job]) -> None:
        """One round trip for all the runs: Slurm's view, then their records there; runs that
        ended are brought back here. A cluster out of reach leaves the states as they are
        (they catch up on a later poll)."""
        open_jobs = [job for job in jobs if not job.recorded_state().terminal]
        by_id: dict[str, list[Job]] = {}  # htp runs share one allocation's id
        for job in open_jobs:
            job_id = self.slurm_job_id(job)
            if job_id is not None:
                by_id.setdefault(job_id, []).append(job)
        mirrored = [job for job in open_jobs if self._mirrored(job)]
        ops = [{"op": "run", "argv": slurm.squeue_command(list(by_id))},
               {"op": "run", "argv": slurm.sacct_command(list(by_id))}] if by_id else []
        ops.append({"op": "read", "paths": [f"{self._job_log_dir(j)}/{runner.STATUS_JSON}"
                                            for j in mirrored]})
        if len(ops) == 1 and not mirrored:
            return
        try:
            answers = self.transport.probe(ops)
        except HostError:
            return  # out of reach: the records there keep, and are read on a later poll
        records = answers[-1]["files"]
        ended = [job for job in mirrored if self._mirror(
            job, records[f"{self._job_log_dir(job)}/{runner.STATUS_JSON}"])]
        if by_id:
            states = slurm.states_from(list(by_id), *(_completed(a) for a in answers[:2]))
            for job_id, group in by_id.items():
                for job in group:
                    self._settle(job, job_id, states.get(job_id, "unknown"))
        self._bring_back(ended)

    def _mirror(self, job: Job, record: dict | None) -> bool:
        """Copy the record read there into the local folder; True if it is terminal (its
        folder is then brought back before the record is written here)."""
        if record is None:
            return False
        try:
            status = json.loads(record["text"])
        except ValueError:
            return False  # being written, or damaged there: read again on the next poll
        if status.get("state") in runner.TERMINAL_STATES:
            return True
        with contextlib.suppress(OSError):
            if runner.read_json(str(job.log_dir / runner.STATUS_JSON)) != status:
                runner.write_json_atomic(str(job.log_dir / runner.STATUS_JSON), status)
        return False

    def _bring_back(self, jobs: list[Job]) -> None:
        """Copy the folders of runs that ended there into their local folders (results and
        logs; one rsync per cluster folder), then their final records."""
        groups: dict[tuple[str, Path], list[Job]] = {}
        for job in jobs:
            there = Path(self._job_log_dir(job))
            groups.setdefault((str(there.parent.parent), job.log_dir.parent.parent),
                              []).append(job)
        for (root_there, root_here), group in groups.items():
            rels = [os.path.relpath(self._job_log_dir(j), root_there) for j in group]
            try:
                self.transport.pull(root_there, rels, root_here,
                                    exclude=(BUNDLE_DIR, runner.STATUS_JSON))
                self.transport.pull(root_there, [f"{r}/{runner.STATUS_JSON}" for r in rels],
                                    root_here)
            except HostError:
                continue  # brought back on a later poll

    def _settle(self, job: Job, job_id: str, state: str | None) -> None:
        """Give a run Slurm has finished with (or forgotten) the terminal state it lacks."""
        if state in ("queued", "running", "unknown"):
            return
        info = job.info()
        if info.get("state") in runner.TERMINAL_STATES:
            return
        look = self._where_to_look(job)
        if info.get("cancel_requested") and state in (None, "failed", "cancelled"):
            job.record_end("cancelled", f"cancelled (Slurm job {job_id})")
        elif state is None:
            job.record_end("failed", f"Slurm no longer knows job {job_id} and the run "
                                     f"recorded no outcome; {look}")
        elif state == "succeeded":
            job.record_end("failed", f"Slurm job {job_id} ended without the run recording "
                                     f"an outcome; {look}")
        else:
            job.record_end(state, f"Slurm reports job {job_id} as {state} before the run "
                                  f"recorded an outcome; {look}")

    def _where_to_look(self, job: Job) -> str:
        """Point at the log that says why a job ended: the run's stderr.log where it exists,
        else Slurm's own output file, else say that neither was written."""
        stderr = self.log_file(job, STDERR_LOG)
        if stderr.exists() and stderr.stat().st_size:
            return f"see {stderr}"
        output = job.launch_info["backend"].get("slurm_output")
        if output and (not self.transport.is_local or Path(output).exists()):
            return f"see Slurm's output {self.transport.remote(output)}"
        return ("the job wrote no log (it may have failed before it started: check the "
                "partition, the paths and `scontrol show job`)")

    def request_cancel(self, job: Job, *then: dict) -> list[dict]:
        """Note the cancel in the run's record, here and where the job writes it, then run the
        far-side ops ``then`` in the same round trip; their answers."""
        runner.update_status(str(job.log_dir), cancel_requested=True)
        answers = checked(self.transport.probe([
            {"op": "update_status", "folders": [self._job_log_dir(job)],
             "fields": {"cancel_requested": True}}, *then]), self.transport.where)
        return answers[1:]

    def cancel(self, job: Job) -> None:
        job_id = self.slurm_job_id(job)
        if job_id is None:
            runner.update_status(str(job.log_dir), cancel_requested=True)
            raise LaunchError(f"run {job.id} has no Slurm job id known on this machine; cancel "
                              "it on the cluster (scancel)")
        out = _completed(self.request_cancel(
            job, {"op": "run", "argv": slurm.scancel_command(job_id)})[0])
        if out.returncode != 0:
            raise LaunchError(f"scancel {job_id} failed on {self.transport.where}: "
                              f"{out.stderr.strip()}")

    def fetch(self, job: Job) -> str:
        if not self._mirrored(job):
            return super().fetch(job)
        there = Path(self._job_log_dir(job))
        sent = self.transport.pull(str(there.parent.parent),
                                   [os.path.relpath(there, there.parent.parent)],
                                   job.log_dir.parent.parent, exclude=(BUNDLE_DIR,))
        return (f"brought {self.transport.remote(str(there))} into {job.log_dir} "
                f"({sent} bytes over the wire)")

    def sync_logs(self, job: Job) -> None:
        if not self.transport.is_local:
            there = Path(self._job_log_dir(job))
            with contextlib.suppress(HostError):
                self.transport.pull(str(there), [STDOUT_LOG, STDERR_LOG], job.log_dir)

    def wait_for_change(self, job: Job, timeout: float) -> None:
        time.sleep(max(timeout, 0.25))  # each look asks the cluster: not more than 4 times a second


def _completed(answer: dict) -> subprocess.CompletedProcess:
    """A far-side ``run`` answer as a CompletedProcess."""
    return subprocess.CompletedProcess([], answer["rc"], answer["out"], answer["err"])
