"""What Slurm says about jobs: squeue and sacct asked together and read as easylaunch states
(a job array named by its own id too), why a job waits, and the cancel of one job or element.

Nothing here runs a command except :func:`query_states`, which takes the command runner as an
argument, so everything is testable without a cluster.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from easylaunch.errors import LaunchError

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Op

# squeue/sacct states -> easylaunch states (JobState values).
STATES = {
    "PENDING": "queued", "CONFIGURING": "queued", "REQUEUED": "queued", "REQUEUE_HOLD": "queued",
    "REQUEUE_FED": "queued", "RESV_DEL_HOLD": "queued", "SUSPENDED": "running",
    "RUNNING": "running", "COMPLETING": "running", "STAGE_OUT": "running",
    "SIGNALING": "running", "RESIZING": "running", "STOPPED": "running",
    "COMPLETED": "succeeded", "FAILED": "failed", "BOOT_FAIL": "failed", "NODE_FAIL": "failed",
    "OUT_OF_MEMORY": "failed", "DEADLINE": "timeout", "TIMEOUT": "timeout",
    "PREEMPTED": "cancelled", "CANCELLED": "cancelled", "REVOKED": "cancelled",
    "SPECIAL_EXIT": "failed",
}

Runner = Callable[[list[str]], subprocess.CompletedProcess]


def run_command(argv: list[str]) -> subprocess.CompletedProcess:
    """Run a Slurm command, capturing its output as text (a missing or hung one fails)."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: not found")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"{argv[0]}: no answer in 60 s")


def squeue_command(job_ids: Sequence[str]) -> list[str]:
    """squeue for these jobs or array tasks, finished ones included, one ``id state reason``
    a line (``--array``: pending array tasks one a line, not folded into ``123_[4-9]``)."""
    return ["squeue", "--noheader", "--array", "--states=all", "--format=%i %T %r", "--jobs",
            ",".join(job_ids)]


def parse_squeue(stdout: str) -> dict[str, str]:
    """``{job id: easylaunch state}`` from :func:`squeue_command` output."""
    states = {}
    for line in stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            states[parts[0]] = STATES.get(parts[1].rstrip("+"), "unknown")
    return states


def parse_waits(stdout: str) -> dict[str, str]:
    """``{job id: why it waits}`` for the pending jobs of :func:`squeue_command` output
    (``Resources``, ``PartitionConfig``; none before slurmctld has looked at a job)."""
    waits = {}
    for line in stdout.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and STATES.get(parts[1]) == "queued" and parts[2] != "None":
            waits[parts[0]] = parts[2].strip()
    return waits


def sacct_command(job_ids: Sequence[str]) -> list[str]:
    """sacct for these jobs, one ``id|state`` a line, without the steps. An array element is
    asked by its array's id: the elements cancelled before they ran are one record of the
    whole array (``92_[0-11]``), which sacct never finds by an element's id."""
    asked = dict.fromkeys(job_id.split("_")[0] for job_id in job_ids)
    return ["sacct", "--noheader", "--parsable2", "--allocations",
            "--format=JobID,State,ExitCode", "--jobs", ",".join(asked)]


def _array_ids(job_id: str) -> list[str]:
    """``123_[1-3,7]`` (array tasks folded into one line) as each task's id."""
    match = re.fullmatch(r"(\d+)_\[([\d,\-]+)(?:%\d+)?\]", job_id)
    if not match:
        return [job_id]
    ids = []
    for part in match.group(2).split(","):
        low, _, high = part.partition("-")
        ids += [f"{match.group(1)}_{i}" for i in range(int(low), int(high or low) + 1)]
    return ids


def parse_sacct(stdout: str) -> dict[str, str]:
    """``{job id: easylaunch state}`` from :func:`sacct_command` output (folded arrays too)."""
    states = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 2 and parts[1]:
            state = STATES.get(parts[1].split()[0].rstrip("+"), "unknown")
            states.update(dict.fromkeys(_array_ids(parts[0]), state))
    return states


def parse_exits(stdout: str) -> dict[str, str]:
    """``{job id: how its batch script ended, in words}`` from :func:`sacct_command` output:
    ``exit code 1``, ``killed by signal 9`` (none for a job that ended well or never ran)."""
    exits = {}
    for line in stdout.splitlines():
        parts = line.split("|")
        code, _, signal = parts[2].partition(":") if len(parts) >= 3 else ("", "", "")
        words = (f"killed by signal {signal}" if signal not in ("", "0")
                 else f"exit code {code}" if code not in ("", "0") else None)
        if words:
            exits.update(dict.fromkeys(_array_ids(parts[0]), words))
    return exits


def read_exits(job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
               backends: list[dict]) -> dict[str, str]:
    """How each of ``job_ids`` that sacct knows ended, in words (``killed by signal 9``), from
    the answers to squeue and sacct."""
    sacct = answers[1]
    exits = parse_exits(sacct.stdout) if sacct.returncode == 0 else {}
    return {job_id: exits[job_id] for job_id in job_ids if job_id in exits}


# A launch's questions about the user's room on the cluster: the QOS limits, the user's jobs,
# and the user's default QOS (asked with the preflight's other questions, in its round trip).
ROOM_OPS: list[Op] = [
    {"op": "run", "argv": ["sacctmgr", "--noheader", "--parsable2", "show", "qos",
                           "format=Name,MaxSubmitPU"]},
    {"op": "run", "argv": ["squeue", "--me", "--noheader", "--array", "--format=%i"]},
    {"op": "run", "argv": ["sh", "-c", 'sacctmgr --noheader --parsable2 show assoc '
                           'where user="$(id -un)" format=DefaultQOS']}]


def check_room(config_name: str, asked_qos: str | None, jobs: int, answers: list[dict]) -> None:
    """Refuse ``jobs`` more jobs that their QOS (``asked_qos``, else the user's default)
    would refuse: its MaxSubmitJobsPerUser, less the jobs the user has queued or running
    now, from the answers to :data:`ROOM_OPS`. (Nothing is checked where sacctmgr or squeue
    did not answer: no accounting, an old Slurm.)"""
    limits, mine, default = answers
    if limits.get("rc") != 0 or mine.get("rc") != 0:
        return
    default_qos = next(iter(default["out"].split()), None) if default.get("rc") == 0 else None
    qos = asked_qos or default_qos
    limit = dict(line.split("|")[:2] for line in limits["out"].splitlines()
                 if line.count("|") >= 1).get(qos or "")
    if not limit:
        return
    have = len(mine["out"].split())
    if have + jobs > int(limit):
        room = max(0, int(limit) - have)
        asks = f"asks QOS {qos!r}" if asked_qos else f"runs in your default QOS {qos!r}"
        raise LaunchError(
            f"SLURM_CONFIGS[{config_name!r}] {asks}, which lets a user have "
            f"at most {limit} jobs queued or running (MaxSubmitJobsPerUser); you have {have}, "
            f"and this launch would add {jobs} (each run of an array is a job): "
            + (f"launch at most {room} runs now" if room else "wait until some of yours end")
            + ", pack the runs into one job with mode='htp', or pick another QOS")


def reason_command(job_id: str) -> list[str] | None:
    """squeue's reason for one job or array task (``None`` once it runs)."""
    return ["squeue", "--noheader", "--array", "--format=%r", "--jobs", job_id]


def parse_reason(stdout: str) -> str | None:
    """The reason :func:`reason_command` printed; None when there is none."""
    reason = stdout.strip().splitlines()[0].strip() if stdout.strip() else ""
    return None if reason in ("", "None") else reason


def cancel_command(job_id: str) -> list[str]:
    """scancel one job or one array task (``123_4``), never the whole array by accident."""
    return ["scancel", job_id]


def states_from(job_ids: Sequence[str], squeue: subprocess.CompletedProcess,
                sacct: subprocess.CompletedProcess) -> dict[str, str | None]:
    """States of these jobs from the outputs of :func:`squeue_command` and
    :func:`sacct_command` (asked together: one round trip to a remote cluster).

    squeue's answer wins; sacct's counts for the jobs squeue does not list. None means Slurm
    has forgotten the job (squeue answered and listed it nowhere, and sacct did not know it
    either); "unknown" means Slurm could not be asked just now.
    """
    if squeue.returncode != 0 and "Invalid job id" not in squeue.stderr:  # (all unknown)
        return dict.fromkeys(job_ids, "unknown")
    states: dict[str, str | None] = dict(parse_squeue(squeue.stdout))
    known = parse_sacct(sacct.stdout) if sacct.returncode == 0 else {}
    states.update({j: known.get(j) or _whole_array(j, {**known, **states})
                   for j in job_ids if j not in states})
    return {j: states.get(j) for j in job_ids}


def _whole_array(job_id: str, states: dict[str, str | None]) -> str | None:
    """The state of a whole job array named by its own id (htp's allocations, before one of
    them took a run) from its elements': running while one runs, queued while one waits,
    else succeeded if all did, else the first other end (None: no element known)."""
    ends = [state for element, state in states.items()
            if element.startswith(f"{job_id}_") and state is not None]
    for state in ("running", "queued", "unknown"):
        if state in ends:
            return state
    return next((s for s in ends if s != "succeeded"), "succeeded" if ends else None)


def query_states(job_ids: Sequence[str], run: Runner = run_command) -> dict[str, str | None]:
    """:func:`states_from` squeue and sacct run here."""
    if not job_ids:
        return {}
    return states_from(job_ids, run(squeue_command(job_ids)), run(sacct_command(job_ids)))
