"""What the job side knows of each batch scheduler, one table each, chosen by its name (a job
script exports it as EASYLAUNCH_SCHEDULER; the packer takes ``--scheduler``), never by a tool's
file name: its submit command and the job id that command prints, how an attempt submits its
job script again, and which variables of a job's own a job it submits must not inherit.

A new scheduler's job side is one more table here (and :data:`SCHEDULERS`)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from easylaunch_job.environment import ENV_ENTRY, ENV_SCHEDULER
from easylaunch_job.records import write_bytes_atomic

if TYPE_CHECKING:  # (annotations only: the job side runs on Python 3.8)
    from collections.abc import Callable

    ReadJobId = Callable[[str], str]  # the submit command's output -> the job id ("" if none)
    # (a job id, when its time limit comes if its pool knows) -> where it stands (None: ended)
    Standing = Callable[[str, "float | None"], "str | None"]


@dataclass(frozen=True)
class JobSide:
    """One scheduler, as the job side uses it."""

    name: str  # EASYLAUNCH_SCHEDULER's value: "slurm", "pbs"
    label: str  # how messages name it: "Slurm", "PBS"
    tool: str  # the submit command: "sbatch", "qsub"
    always: tuple[str, ...]  # options every submit gives ("--parsable")
    job_id: ReadJobId
    # resubmission(script): the command that submits the job script again for this job's
    # entry, and what reads the new job's id (an array element's, where it is one)
    resubmission: Callable[[str], tuple[list, ReadJobId]]
    index: str  # shell word in a job script: the entry (from 0) this job or array element runs
    own_prefixes: tuple[str, ...]  # a job's own variables: a job it submits must not take them
    cluster_variables: tuple[str, ...] = ()  # ... but these, which name the cluster
    # (warm pools) the command that ends a pool's job, and where a pool's job stands in words
    # (None: it has ended, or the scheduler forgot it); None: no pool holds a job of it
    cancel: str = ""
    standing: Standing | None = None
    requeues: bool = False  # whether a preemption puts a pool's job back in the queue

    def command(self, script: str, *options: str) -> list:
        """The submit command of ``script`` (run it in the script's folder: PBS writes the
        job's output file where it is submitted from)."""
        return [self.tool, *self.always, *options, script]


# What ``sbatch --parsable`` prints (``123`` or ``123;cluster``), and what plain ``sbatch``
# prints (``Submitted batch job 123``, as the seed's ht_helper command is submitted).
_SBATCH_ID = re.compile(r"(?:Submitted batch job )?(\d+)(?:;\S*)?")
# What qsub prints: ``123.server`` for a job, ``123[].server`` for an array, ``123`` from front
# ends that print only the number.
_QSUB_ID = re.compile(r"\d+(?:\[\])?(?:\.[\w.-]+)?")


def _printed_last(out: str) -> str:
    lines = out.strip().splitlines()
    return lines[-1].strip() if lines else ""


def sbatch_job_id(out: str) -> str:
    """The job id sbatch printed on its last line; "" when it printed none."""
    found = _SBATCH_ID.fullmatch(_printed_last(out))
    return found.group(1) if found else ""


def qsub_job_id(out: str) -> str:
    """The job id qsub printed on its last line; "" when it printed none."""
    last = _printed_last(out)
    return last if _QSUB_ID.fullmatch(last) else ""


def _asked(argv: list[str]) -> str | None:
    """What a scheduler's command printed (None: it failed, or printed nothing)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def _squeue_standing(job_id: str, _time_limit_at: float | None = None) -> str | None:
    """Where a Slurm job stands: waiting (and why), or its node and time left (squeue's)."""
    said = _asked(["squeue", "-h", "-j", job_id, "-o", "%T|%L|%N|%r"])
    if said is None:
        return None
    state, left, node, reason = said.split("|")
    if state == "PENDING":  # (squeue says None before the scheduler gave a reason)
        why = f" ({reason})" if reason not in ("", "None") else ""
        return f"Slurm job {job_id}, waiting for its allocation{why}"
    return f"Slurm job {job_id} on {node}, {left} left"


def qstat_blocks(text: str) -> dict[str, dict[str, str]]:
    """``qstat -f`` text (PBS Pro, Torque, Slurm's front ends) as ``{job id: {name: value}}``:
    ``Job Id: X`` blocks of ``name = value`` lines."""
    blocks: dict[str, dict[str, str]] = {}
    attrs: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("Job Id:"):
            attrs = blocks.setdefault(line.split(":", 1)[1].strip(), {})
        elif " = " in line:
            key, _, value = line.strip().partition(" = ")
            attrs[key] = value
    return blocks


# PBS's job_state letters -> easylaunch states ("ended" is settled by the exit status).
PBS_STATES = {"Q": "queued", "H": "queued", "W": "queued", "T": "queued", "M": "queued",
              "R": "running", "B": "running", "E": "running", "S": "running", "U": "running",
              "F": "ended", "X": "ended", "C": "ended"}  # C: Torque's (and Slurm's wrappers') done


def _qstat_standing(job_id: str, time_limit_at: float | None = None) -> str | None:
    """Where a PBS job stands: waiting, or running on its first host (and the time left
    until ``time_limit_at``: qstat prints the time used, Slurm's front ends not even that)."""
    said = _asked(["qstat", "-f", job_id])
    attrs = next(iter(qstat_blocks(said or "").values()), {})
    letter = attrs.get("job_state", "")[:1]
    state = PBS_STATES.get(letter)
    if state == "queued":
        return f"PBS job {job_id}, waiting for its allocation (state {letter})"
    if state == "running":
        host = attrs.get("exec_host", "?").split("/")[0].split("+")[0]
        left = time_limit_at - time.time() if time_limit_at else 0
        return f"PBS job {job_id} on {host}" + (f", {_clock(left)} left" if left > 0 else "")
    return None  # (ended, or no longer known)


def _clock(seconds: float) -> str:
    """``H:MM:SS``, as squeue prints a time left."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _slurm_again(script: str) -> tuple[list, ReadJobId]:
    """The same element of a new array, and its id ``<job>_<index>``."""
    index = os.environ.get("SLURM_ARRAY_TASK_ID") or "0"

    def element(out: str) -> str:
        job = sbatch_job_id(out)
        return f"{job}_{index}" if job else ""

    return SLURM_SIDE.command(script, f"--array={index}"), element


def _pbs_again(script: str) -> tuple[list, ReadJobId]:
    """A plain job of the script without its array line, told its entry (``-V``: the job's
    environment, as sbatch passes it on by default)."""
    entry = os.environ.get(ENV_ENTRY) or "0"
    return PBS_SIDE.command(_without_array(script), "-V", "-v", f"{ENV_ENTRY}={entry}"), qsub_job_id


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


SLURM_SIDE = JobSide("slurm", "Slurm", "sbatch", ("--parsable",), sbatch_job_id, _slurm_again,
                    index="${SLURM_ARRAY_TASK_ID:-0}", own_prefixes=("SLURM_", "SBATCH_"),
                    cluster_variables=("SLURM_CONF", "SLURM_CLUSTERS"), cancel="scancel",
                    standing=_squeue_standing, requeues=True)
# A PBS run's entry: the one a restart was submitted for, else the array index (PBS Pro numbers
# elements from 1; Slurm's PBS front ends set SLURM_ARRAY_TASK_ID instead of PBS_ARRAY_INDEX).
_PBS_INDEX = "$(( ${PBS_ARRAY_INDEX:-${SLURM_ARRAY_TASK_ID:-1}} - 1 ))"
PBS_SIDE = JobSide("pbs", "PBS", "qsub", (), qsub_job_id, _pbs_again,
                  index=f"${{{ENV_ENTRY}:-{_PBS_INDEX}}}", own_prefixes=("PBS_",),
                  cancel="qdel", standing=_qstat_standing)
SCHEDULERS = {side.name: side for side in (SLURM_SIDE, PBS_SIDE)}


def scheduler_named(name: str) -> JobSide:
    """The scheduler called ``name``; refused, naming the known ones, if there is none."""
    try:
        return SCHEDULERS[name]
    except KeyError:
        raise ValueError(f"no scheduler {name!r} on the job side; known: "
                         f"{', '.join(SCHEDULERS)}") from None


def this_jobs() -> JobSide:
    """The scheduler of the job this process runs in, as its job script said (Slurm where it
    said none)."""
    return scheduler_named(os.environ.get(ENV_SCHEDULER) or SLURM_SIDE.name)
