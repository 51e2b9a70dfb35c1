"""What the Slurm modes share: resources, the ``srun`` line of multi-process runs, and Slurm's
side of tracking (squeue and sacct, asked in one round trip) and cancel (scancel). The rest of
tracking is ``modes.scheduled``'s.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from easylaunch import launchers
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.hosted import completed
from easylaunch.modes.jobscript import on_every_rank
from easylaunch.modes.scheduled import ClusterFacts, ScheduledMode
from easylaunch.request import LaunchRequest
from easylaunch.schedulers import slurm
from easylaunch.schedulers.slurm import Resources

# Options of one launch that replace a SLURM_CONFIGS field (option -> field).
RESOURCE_OPTIONS = {"time_in_mins": "time_in_mins", "partition": "partition", "mem": "mem",
                    "account": "account_name", "qos": "qos", "constraint": "constraint",
                    "n_cpus_per_task": "n_cpus_per_task"}


class SlurmBase(ScheduledMode):
    """Tracking and cancelling through Slurm; subclasses decide how jobs are made.

    Options ``n_nodes``, ``n_gpus`` (per node) and ``tasks_per_node`` (default: the GPUs per
    node, else 1) make a run multi-process: its function runs on every rank through srun.
    ``time_in_mins`` (minutes or a Slurm time), ``partition``, ``mem``, ``account``, ``qos``,
    ``constraint`` and ``n_cpus_per_task`` replace the config's values for one launch (checked
    as SLURM_CONFIGS is).
    """

    scheduler = "Slurm"
    submit_tool = "sbatch"
    job_id_key = "slurm_job_id"
    other_ways = ", or use mode='sss' to write job scripts to copy"
    options = {"n_nodes": None, "n_gpus": None, "tasks_per_node": None, "cluster": None,
               **dict.fromkeys(RESOURCE_OPTIONS)}

    def resources(self, request: LaunchRequest) -> Resources:
        """The checked SLURM_CONFIGS entry for this request, with this launch's options
        applied."""
        configs = self.settings.SLURM_CONFIGS
        name = request.slurm_config_name or ("gpu" if request.use_gpu else "cpu")
        given = {option: (field, self.opts[option])
                 for option, field in {"n_nodes": "n_nodes", "n_gpus": "n_gpus",
                                       **RESOURCE_OPTIONS}.items()
                 if self.opts.get(option) is not None}
        overrides = dict(given.values())
        if name in configs and overrides:
            configs = {**configs, name: {**configs[name], **overrides}}
        try:
            res = slurm.resolve_resources(configs, name, request.use_gpu)
        except LaunchError as exc:
            if not given:
                raise
            raise LaunchError(f"{exc} (with this launch's " + ", ".join(
                f"{option}={value!r}" for option, (_, value) in given.items()) + ")") from None
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
        super().check(request)

    def cluster_python(self) -> str:
        return self.settings.SLURM_PYTHON or self.transport.python

    def slurm_facts(self, folder: str, runs_there: bool) -> ClusterFacts:
        """:meth:`preflight`, with the cluster's MaxArraySize (array indices stay below it)."""
        slurm.check_log_folder(folder)  # before anything is made there
        root, (config,) = self.preflight(folder, runs_there,
                                         {"op": "run", "argv": ["scontrol", "show", "config"]})
        return ClusterFacts(root, max(1, slurm.max_array_size(config["out"]) - 1))

    # -- Slurm's commands -----------------------------------------------------------------------

    def state_ops(self, by_id: dict[str, list[Job]]) -> list[dict]:
        return [{"op": "run", "argv": slurm.squeue_command(list(by_id))},
                {"op": "run", "argv": slurm.sacct_command(list(by_id))}]

    def states(self, by_id: dict[str, list[Job]], answers: list[subprocess.CompletedProcess]
               ) -> dict[str, str | None]:
        return slurm.states_from(list(by_id), *answers)

    def cancel_command(self, job_id: str) -> list[str]:
        return slurm.scancel_command(job_id)

    def waiting_reason(self, job: Job) -> str | None:
        """squeue's reason a queued job waits (Resources, Priority, Dependency, ...)."""
        job_id = self.job_id(job)
        if job_id is None:
            return None
        op = {"op": "run", "argv": slurm.reason_command(job_id)}
        out = completed(self.retried([op], self.transport.probe([op]))[0])
        return slurm.parse_reason(out.stdout) if out.returncode == 0 else None

    def scheduler_output(self, job: Job) -> str | None:
        output = job.launch_info["backend"].get("slurm_output")
        if output and (not self.transport.is_local or Path(output).exists()):
            return f"Slurm's output {self.transport.remote(output)}"
        return None
