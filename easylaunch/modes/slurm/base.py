"""What the Slurm modes share: resources, the cluster's side of tracking (squeue, sacct),
cancel. Reaching the cluster, and the runs' records there, is ``modes.hosted``'s.

When Slurm reports a job ended, or has forgotten it, before the run recorded an outcome, the run
gets a terminal state with the reason, so ``job.wait()`` never hangs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from easylaunch import launchers, runner
from easylaunch.bundle import STDERR_LOG
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.hosted import HostedMode, completed
from easylaunch.modes.jobscript import on_every_rank
from easylaunch.modes.slurm import scheduler as slurm
from easylaunch.modes.slurm.scheduler import Resources
from easylaunch.request import LaunchRequest


@dataclass(frozen=True)
class ClusterFacts:
    """What a launch learned from the cluster before making anything."""

    root: str  # the launch's folder there, as an absolute path
    max_array_size: int


class SlurmBase(HostedMode):
    """Tracking and cancelling through Slurm; subclasses decide how jobs are made.

    Options ``n_nodes``, ``n_gpus`` (per node) and ``tasks_per_node`` (default: the GPUs per
    node, else 1) make a run multi-process: its function runs on every rank through srun.
    ``time_in_mins`` (minutes or a Slurm time) replaces the config's limit for one launch.
    ``cluster`` (a CLUSTERS name or an ssh destination; default DEFAULT_CLUSTER) submits to
    a cluster over SSH; without one, Slurm is on this machine.
    """

    options = {"n_nodes": None, "n_gpus": None, "tasks_per_node": None, "time_in_mins": None,
               "cluster": None}

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

    def host_name(self) -> str | None:
        return self.opts.get("cluster") or self.settings.DEFAULT_CLUSTER

    def cluster_python(self) -> str:
        """The Python that starts runs (or the packer) on the cluster, outside any container."""
        return self.settings.SLURM_PYTHON or self.transport.python

    def preflight(self, folder: str, runs_there: bool) -> ClusterFacts:
        """Ask the cluster, in one round trip, whether it can take this launch (see
        :meth:`check_host`), and whether sbatch is there."""
        t = self.transport
        slurm.check_log_folder(folder)  # before anything is made there
        root, (which, config) = self.check_host(
            folder, runs_there, {"op": "which", "names": ["sbatch"]},
            {"op": "run", "argv": ["scontrol", "show", "config"]})
        if which["found"]["sbatch"] is None:
            raise LaunchError(
                f"mode {self.name!r} submits with sbatch, which is not on PATH on {t.where}; "
                + ("run on the cluster's login node, set cluster= (or DEFAULT_CLUSTER) to "
                   "submit to one over SSH, or use mode='sss' to write job scripts to copy"
                   if t.is_local else "is it the cluster's login node?"))
        return ClusterFacts(root, slurm.max_array_size(config["out"]))

    # -- tracking -------------------------------------------------------------------------------

    def slurm_job_id(self, job: Job) -> str | None:
        """The Slurm job (or array task) id that runs this job, if known here."""
        return job.launch_info["backend"].get("slurm_job_id")

    def _open_ids(self, jobs: list[Job]) -> dict[str, list[Job]]:
        by_id: dict[str, list[Job]] = {}  # htp runs share one allocation's id
        for job in jobs:
            job_id = self.slurm_job_id(job)
            if job_id is not None:
                by_id.setdefault(job_id, []).append(job)
        return by_id

    def backend_ops(self, jobs: list[Job]) -> list[dict]:
        ids = list(self._open_ids(jobs))
        return [{"op": "run", "argv": slurm.squeue_command(ids)},
                {"op": "run", "argv": slurm.sacct_command(ids)}] if ids else []

    def settle(self, jobs: list[Job], answers: list[dict]) -> None:
        by_id = self._open_ids(jobs)
        states = slurm.states_from(list(by_id), *(completed(a) for a in answers))
        for job_id, group in by_id.items():
            for job in group:
                self._settle(job, job_id, states.get(job_id, "unknown"))

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

    def cancel(self, job: Job) -> None:
        job_id = self.slurm_job_id(job)
        if job_id is None:
            runner.update_status(str(job.log_dir), cancel_requested=True)
            raise LaunchError(f"run {job.id} has no Slurm job id known on this machine; cancel "
                              "it on the cluster (scancel)")
        out = completed(self.request_cancel(
            job, {"op": "run", "argv": slurm.scancel_command(job_id)})[0])
        if out.returncode != 0:
            raise LaunchError(f"scancel {job_id} failed on {self.transport.where}: "
                              f"{out.stderr.strip()}")
