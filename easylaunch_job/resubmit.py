"""Submitting a job from inside a job: the next attempt of a run queued again, or the runs a
stopped allocation left (the packer). Only the scheduler's own commands are used."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable

from easylaunch_job.attempts import give_up_restart
from easylaunch_job.environment import ENV_ENTRY, ENV_RESUBMIT_SCRIPT, ENV_RESUBMIT_WITH
from easylaunch_job.records import update_status, write_bytes_atomic
from easylaunch_job.submission import qsub_command, qsub_job_id, sbatch_command, sbatch_job_id


def _without_array(script: str) -> str:
    """A copy of a PBS job script without its array directive, next to it: PBS cannot submit
    one element of an array (every resubmission of the array's elements shares it)."""
    root, ext = os.path.splitext(script)
    single = f"{root}.single{ext}"
    if not os.path.exists(single):
        with open(script) as f:
            lines = [ln for ln in f if not re.match(r"#PBS\s+-J\b", ln)]
        write_bytes_atomic(single, "".join(lines).encode())
        os.chmod(single, os.stat(script).st_mode & 0o777)
    return single


def _resubmission(script: str) -> tuple[list[str], Callable[[str], str]]:
    """The command that submits ``script`` again for this job's entry, and the function that
    reads the new job's id from its output ("" when it printed none)."""
    if os.environ.get(ENV_RESUBMIT_WITH) == "qsub":  # a plain job told its entry
        entry = os.environ.get(ENV_ENTRY) or "0"
        # (-V: the job's environment, as sbatch passes it on by default)
        return (qsub_command(_without_array(script), "-V", "-v", f"{ENV_ENTRY}={entry}"),
                qsub_job_id)
    index = os.environ.get("SLURM_ARRAY_TASK_ID") or "0"  # the same element of a new array

    def element(out: str) -> str:
        job = sbatch_job_id(out)
        return f"{job}_{index}" if job else ""

    return sbatch_command(script, f"--array={index}"), element


CLUSTER_VARIABLES = ("SLURM_CONF", "SLURM_CLUSTERS")  # which cluster, not what a job takes


def submit_from_job(argv: list[str], cwd: str | None = None,
                    **env: str) -> tuple[str, str | None]:
    """Run a submit command (sbatch, qsub) from inside a job, with ``env`` added and without
    this job's own scheduler values (they would bend the new job's resources), but with those
    that name the cluster (SLURM_CONF: a site's or a second cluster's config): (its output,
    what went wrong or None)."""
    env = {**{k: v for k, v in os.environ.items()
              if k in CLUSTER_VARIABLES or (
                  not k.startswith(("SLURM_", "SBATCH_", "PBS_")) and k != ENV_ENTRY)}, **env}
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                             cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return "", repr(exc)
    if out.returncode == 0 and out.stdout.strip():
        return out.stdout, None
    return out.stdout, (out.stderr or out.stdout).strip() or \
        f"{argv[0]} exited with {out.returncode}"


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
        argv, job_of = _resubmission(script)
    except OSError as exc:  # (the PBS script's copy could not be written)
        out, problem = "", repr(exc)
    else:  # (PBS writes the job's output where it is submitted from)
        out, problem = submit_from_job(argv, cwd=os.path.dirname(script) or None)
    job = job_of(out) if problem is None else ""
    if problem is None and not job:
        problem = f"{argv[0]} printed no job id: {out.strip()!r}"
    if problem is not None:
        give_up_restart(log_dir, f"{' '.join(argv)}: {problem}")
        return
    update_status(log_dir, next_job_id=job)
    print(f"easylaunch runner: the run goes on as job {job}", file=sys.stderr)
