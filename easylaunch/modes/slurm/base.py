"""What the Slurm modes share: resources, tracking by the run's own record then Slurm, cancel.

A run's ``status.json`` is the first source of truth. Only while it is not final is Slurm asked
(squeue, then sacct); when Slurm reports the job ended, or has forgotten it, the run gets a
terminal state with the reason, so ``job.wait()`` never hangs.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from easylaunch import launchers, runner
from easylaunch.bundle import STDERR_LOG, Run
from easylaunch.errors import LaunchError
from easylaunch.jobs import Job
from easylaunch.modes.base import Mode
from easylaunch.modes.slurm import scheduler as slurm
from easylaunch.modes.slurm.jobscript import on_every_rank
from easylaunch.modes.slurm.scheduler import Resources
from easylaunch.request import LaunchRequest

MIRRORED = (runner.STATUS_JSON, runner.RESULT_PKL)


def _mirror(source: Path, dest: Path) -> None:
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


class SlurmBase(Mode):
    """Tracking and cancelling through Slurm; subclasses decide how jobs are made.

    Options ``n_nodes``, ``n_gpus`` (per node) and ``tasks_per_node`` (default: the GPUs per
    node, else 1) make a run multi-process: its function runs on every rank through srun.
    ``time_in_mins`` (minutes or a Slurm time) replaces the config's limit for one launch.
    """

    options = {"n_nodes": None, "n_gpus": None, "tasks_per_node": None, "time_in_mins": None}

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

    # -- tracking -------------------------------------------------------------------------------

    def _job_log_dir(self, job: Job) -> Path:
        return Path(job.launch_info["backend"].get("job_log_dir", job.log_dir))

    def remote_log_dir(self, run: Run) -> str | None:
        remote = run.launch["backend"].get("job_log_dir")
        return remote if remote != str(run.log_dir) else None

    def log_file(self, job: Job, name: str) -> Path:
        """The log where the job writes it (a cluster folder visible here), else the copy."""
        remote = self._job_log_dir(job) / name
        return remote if remote.exists() else job.log_dir / name

    def slurm_job_id(self, job: Job) -> str | None:
        """The Slurm job (or array task) id that runs this job, if known here."""
        return job.launch_info["backend"].get("slurm_job_id")

    def sync_record(self, job: Job) -> None:
        remote = self._job_log_dir(job)
        if remote != job.log_dir and remote.is_dir():
            _mirror(remote, job.log_dir)

    def _record(self, job: Job, state: str, error: str) -> None:
        remote = self._job_log_dir(job)
        if remote != job.log_dir and remote.is_dir():
            runner.update_status(str(remote), state=state, ended_at=time.time(), error=error)
        job.record_end(state, error)

    def refresh(self, job: Job) -> None:
        self.refresh_many([job])

    def refresh_many(self, jobs: list[Job]) -> None:
        """Sync each run's record, then ask Slurm once about those still not ended."""
        open_jobs: dict[str, list[Job]] = {}  # htp runs share one allocation's id
        for job in jobs:
            job_id = None if job.recorded_state().terminal else self.slurm_job_id(job)
            if job_id is not None:
                open_jobs.setdefault(job_id, []).append(job)
        if not open_jobs or shutil.which("squeue") is None:
            return  # not submitted from here, or not on a login node: nothing more to ask
        states = slurm.query_states(list(open_jobs))
        for job_id, group in open_jobs.items():
            for job in group:
                self._settle(job, job_id, states.get(job_id, "unknown"))

    def _settle(self, job: Job, job_id: str, state: str | None) -> None:
        """Give a run Slurm has finished with (or forgotten) the terminal state it lacks."""
        if state in ("queued", "running", "unknown"):
            return
        info = job.info()  # synced again: the run may have recorded its end meanwhile
        if info.get("state") in runner.TERMINAL_STATES:
            return
        look = self._where_to_look(job)
        if info.get("cancel_requested") and state in (None, "failed", "cancelled"):
            self._record(job, "cancelled", f"cancelled (Slurm job {job_id})")
        elif state is None:
            self._record(job, "failed", f"Slurm no longer knows job {job_id} and the run "
                                        f"recorded no outcome; {look}")
        elif state == "succeeded":
            self._record(job, "failed", f"Slurm job {job_id} ended without the run recording "
                                        f"an outcome; {look}")
        else:
            self._record(job, state, f"Slurm reports job {job_id} as {state} before the run "
                                     f"recorded an outcome; {look}")

    def _where_to_look(self, job: Job) -> str:
        """Point at the log that says why a job ended: the run's stderr.log where it exists,
        else Slurm's own output file, else say that neither was written."""
        stderr = self.log_file(job, STDERR_LOG)
        if stderr.exists() and stderr.stat().st_size:
            return f"see {stderr}"
        output = job.launch_info["backend"].get("slurm_output")
        if output and Path(output).exists():
            return f"see Slurm's output {output}"
        return ("the job wrote no log (it may have failed before it started: check the "
                "partition, the paths and `scontrol show job`)")

    def request_cancel(self, job: Job) -> None:
        """Note the cancel in the run's record, here and where the job writes it."""
        for folder in {self._job_log_dir(job), job.log_dir}:
            if folder.is_dir():
                runner.update_status(str(folder), cancel_requested=True)

    def cancel(self, job: Job) -> None:
        self.request_cancel(job)
        job_id = self.slurm_job_id(job)
        if job_id is None:
            raise LaunchError(f"run {job.id} has no Slurm job id known on this machine; cancel "
                              "it on the cluster (scancel)")
        out = slurm.run_command(slurm.scancel_command(job_id))
        if out.returncode != 0:
            raise LaunchError(f"scancel {job_id} failed: {out.stderr.strip()}")

    def wait_for_change(self, job: Job, timeout: float) -> None:
        time.sleep(max(timeout, 0.25))  # each look may ask squeue: not more than 4 times a second
