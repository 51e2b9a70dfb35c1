"""Submitting a job from inside a job: the next attempt of a run queued again, or the runs a
stopped allocation left (the packer). Only the scheduler's own commands are used."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

from easylaunch_job.attempts import give_up_restart
from easylaunch_job.environment import ENV_CONTINUE, ENV_ENTRY, ENV_RESUBMIT_SCRIPT
from easylaunch_job.records import STATUS_JSON, update_status
from easylaunch_job.schedulers import SCHEDULERS, JobSide, this_jobs

if TYPE_CHECKING:  # (annotations only: the job side runs on Python 3.8)
    from easylaunch_job.schedulers import ReadJobId

# A job's own scheduler variables (any scheduler's), and those that name the cluster
OWN_PREFIXES = tuple(p for side in SCHEDULERS.values() for p in side.own_prefixes)
CLUSTER_VARIABLES = tuple(v for side in SCHEDULERS.values() for v in side.cluster_variables)


def submit_from_job(argv: list[str], cwd: str | None = None,
                    **env: str) -> tuple[str, str | None]:
    """Run a submit command (sbatch, qsub) from inside a job, with ``env`` added and without
    this job's own scheduler values (they would bend the new job's resources), but with those
    that name the cluster (SLURM_CONF: a site's or a second cluster's config): (its output,
    what went wrong or None)."""
    env = {**{k: v for k, v in os.environ.items()
              if k in CLUSTER_VARIABLES or (
                  not k.startswith(OWN_PREFIXES) and k != ENV_ENTRY)}, **env}
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                             cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", repr(exc)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout, None
    return out.stdout, (out.stderr or out.stdout).strip() or \
        f"{argv[0]} exited with {out.returncode}"


def _submitted(argv: list[str], script: str, read_id: ReadJobId,
               **env: str) -> tuple[str, str | None]:
    """Submit ``argv`` from ``script``'s folder (PBS writes the job's output where it is
    submitted from): (the new job's id, what went wrong or None)."""
    out, problem = submit_from_job(argv, cwd=os.path.dirname(script) or None, **env)
    job = read_id(out) if problem is None else ""
    if problem is None and not job:
        problem = f"{argv[0]} printed no job id: {out.strip()!r}"
    return job, problem


def resubmit_self(log_dir: str) -> None:
    """Start the next attempt of a run queued again by this job, where the job script says how
    (ENV_RESUBMIT_SCRIPT: submit the script again for this entry, which keeps the run id and
    folder; Slurm's own requeue would hold it back for two minutes). Elsewhere the supervisor
    (local) or the launching side (clouds) starts it."""
    script = os.environ.get(ENV_RESUBMIT_SCRIPT)
    if not script:
        return
    argv = [script]
    problem: str | None
    try:
        argv, job_of = this_jobs().resubmission(script)
    except OSError as exc:  # (the PBS script's copy could not be written)
        job, problem = "", repr(exc)
    else:
        job, problem = _submitted(argv, script, job_of)
    if problem is not None:
        give_up_restart(log_dir, f"{' '.join(argv)}: {problem}")
        return
    update_status(log_dir, next_job_id=job)
    print(f"easylaunch runner: the run goes on as job {job}", file=sys.stderr)


def resubmit_allocation(scheduler: JobSide, script: str, going_on: str,
                        log_dirs: list[str]) -> str | None:
    """Submit a stopped allocation's ``script`` again for the runs it left (their folders;
    ``going_on``: EASYLAUNCH_CONTINUE in the new job, "1" or the file of the tasks left), and
    point their records at the new job. The new job's id; None where it could not be
    submitted, and each run then ends as its last attempt would have without a restart."""
    argv = scheduler.command(script)
    job, problem = _submitted(argv, script, scheduler.job_id, **{ENV_CONTINUE: going_on})
    for log_dir in log_dirs:
        if problem is None:
            # (a run never started has no record yet: it gets one saying where it goes on,
            # or the launching side takes this allocation's end for the run's)
            fresh = not os.path.exists(os.path.join(log_dir, STATUS_JSON))
            os.makedirs(log_dir, exist_ok=True)
            update_status(log_dir, next_job_id=job, **({"state": "queued"} if fresh else {}))
        elif os.path.isdir(log_dir):
            give_up_restart(log_dir, f"{' '.join(argv)}: {problem}")
    print(f"packer: {len(log_dirs)} run(s) go on as job {job}" if problem is None
          else f"packer: could not submit the runs left: {problem}", file=sys.stderr)
    return job if problem is None else None
