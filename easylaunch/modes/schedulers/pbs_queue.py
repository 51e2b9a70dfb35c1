"""What PBS says about jobs: ``qstat -f`` (JSON on PBS Pro and OpenPBS, text elsewhere: Torque,
Slurm's front ends) read as easylaunch states. Nothing here runs a command."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Sequence

from easylaunch_job.schedulers import PBS_STATES, qstat_blocks

# Exit_status values PBS Pro gives jobs it ended itself.
EXIT_WALLTIME = -29
EXIT_SIGNALED = 256  # 256 + N: the job was killed by signal N (qdel: SIGTERM, then SIGKILL)


def short_id(job_id: str) -> str:
    """``123[4]`` for ``123[4].server.domain``: how ids are matched (qstat may print the
    server's full name where qsub printed a short one)."""
    return job_id.partition(".")[0]


def qstat_command(job_ids: Sequence[str], json_output: bool) -> list[str]:
    """qstat for these jobs, finished ones included: ``-x -f -F json`` on PBS Pro, ``-f``
    (text) on servers without JSON output."""
    return ["qstat", "-x", "-f", "-F", "json", *job_ids] if json_output else \
        ["qstat", "-f", *job_ids]


def job_state(letter: str, exit_status: int | None) -> str:
    """An easylaunch state from a job_state letter and, for ended jobs, the exit status."""
    state = PBS_STATES.get(letter.strip()[:1], "unknown")
    if state != "ended":
        return state
    if exit_status is None or exit_status == 0:
        return "succeeded"  # (no status: the front end does not say; the run's record does)
    if exit_status == EXIT_WALLTIME:
        return "timeout"
    if exit_status - EXIT_SIGNALED in (9, 15):
        return "cancelled"
    return "failed"


def as_int(value: object) -> int | None:
    """``value`` as an integer (PBS prints numbers as text); None where it is none."""
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def parse_qstat_json(stdout: str) -> dict[str, str] | None:
    """``{short id: easylaunch state}`` from ``qstat -x -f -F json`` output (None: not JSON)."""
    if not stdout.strip():
        return {}  # (every id unknown to the server: it printed only errors)
    try:
        jobs = json.loads(stdout).get("Jobs") or {}
    except (ValueError, AttributeError):
        return None
    return {short_id(job_id): job_state(str(attrs.get("job_state", "")),
                                        as_int(attrs.get("Exit_status", "")))
            for job_id, attrs in jobs.items() if isinstance(attrs, dict)}


def parse_qstat_text(stdout: str) -> dict[str, str]:
    """``{short id: easylaunch state}`` from ``qstat -f`` text (PBS Pro, Torque, Slurm's
    wrappers)."""
    states = {}
    for job_id, attrs in qstat_blocks(stdout).items():
        status = attrs.get("exit_status", attrs.get("Exit_status"))
        states[short_id(job_id)] = job_state(attrs.get("job_state", ""),
                                             None if status is None else as_int(status))
    return states


def read_states(job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                backends: list[dict]) -> dict[str, str | None]:
    """States of these jobs from the output of ``pbs.status_commands``.

    Listed jobs get their state. Not listed: None (PBS has forgotten the job: qstat said
    "Unknown Job Id"), except array elements on a text front end, which may not list them
    (Slurm's wrappers): "unknown" there, and the run's own record tells. A qstat that failed
    otherwise, or answered what cannot be read, leaves every job "unknown".
    """
    qstat, json_output = answers[0], with_json(backends)
    said = qstat.stderr + qstat.stdout
    known = (parse_qstat_json if json_output else parse_qstat_text)(qstat.stdout)
    if known is None or (qstat.returncode != 0 and not known and "Unknown Job Id" not in said):
        return dict.fromkeys(job_ids, "unknown")
    return {j: known.get(short_id(j), None if json_output or "[" not in j else "unknown")
            for j in job_ids}


def with_json(backends: list[dict]) -> bool:
    """Whether the runs' server has ``qstat -F json`` (recorded at launch)."""
    return any(backend.get("qstat_json") for backend in backends)


def read_waits(job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
               backends: list[dict]) -> dict[str, str]:
    """Why each queued job waits: the ``comment`` PBS Pro gives it (``Not Running:
    Insufficient amount of resource: ncpus``), from the output of ``pbs.status_commands``."""
    comments: dict[str, str] = {}
    stdout = answers[0].stdout
    if with_json(backends):
        with contextlib.suppress(ValueError, AttributeError):
            for job_id, attrs in (json.loads(stdout).get("Jobs") or {}).items():
                if PBS_STATES.get(str(attrs.get("job_state", ""))[:1]) == "queued":
                    comments[short_id(job_id)] = str(attrs.get("comment") or "")
    else:
        for job_id, attrs in qstat_blocks(stdout).items():
            if PBS_STATES.get(attrs.get("job_state", "")[:1]) == "queued":
                comments[short_id(job_id)] = attrs.get("comment", "")
    return {j: comments[short_id(j)] for j in job_ids if comments.get(short_id(j))}
