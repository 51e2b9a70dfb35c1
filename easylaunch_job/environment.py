"""What a job learns from its environment (the variables launchers and job scripts set, its
rank, its scheduler job) and the few facts about processes both sides need."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Mapping

ENV_PARENT_PID = "EASYLAUNCH_PARENT_PID"  # "<pid>:<start time>" of the launching process
ENV_GPU_ID = "EASYLAUNCH_GPU_ID"
ENV_TIMEOUT_SIGNAL = "EASYLAUNCH_TIMEOUT_SIGNAL"  # e.g. USR1: the scheduler's time-limit warning
# The time-limit warning Slurm jobs ask for (sbatch --signal), which the packer passes on to
# its tasks as theirs.
TIMEOUT_SIGNAL = "USR1"
ENV_RERUN = "EASYLAUNCH_RERUN"  # set by the packer when it runs a task again
# Set in an allocation that goes on with a stopped one's runs: "1", or (packers that share a
# task file) the file of the tasks the stopped one left.
ENV_CONTINUE = "EASYLAUNCH_CONTINUE"
# When the scheduler ends the job with SIGTERM at its time limit, with no warning signal (PBS):
# the epoch second of that limit; a SIGTERM from then on (less TIME_LIMIT_SLACK) is a timeout.
ENV_TIME_LIMIT_AT = "EASYLAUNCH_TIME_LIMIT_AT"
TIME_LIMIT_SLACK = 30
ENV_JOB_ID = "EASYLAUNCH_JOB_ID"  # the scheduler's id of the job running this attempt
# Seconds between looks at the run's record for a cancel request, for jobs the scheduler's
# cancel command cannot name (array elements behind some PBS front ends).
ENV_WATCH_CANCEL = "EASYLAUNCH_WATCH_CANCEL"
# A job script's own path: an attempt that ends to restart submits it again for its entry, as
# ENV_SCHEDULER's scheduler does (schedulers.py: "slurm", the default, or "pbs").
ENV_RESUBMIT_SCRIPT = "EASYLAUNCH_RESUBMIT_SCRIPT"
ENV_SCHEDULER = "EASYLAUNCH_SCHEDULER"
# The entry (from 0) of a job script a job runs, where no array index says it (a PBS restart).
ENV_ENTRY = "EASYLAUNCH_ENTRY"
# Shared by the runner and the checkpoint helpers through the environment, so they agree even
# where the function's copy of these helpers is not this package's.
ENV_CHECKPOINT_DIR = "EASYLAUNCH_CHECKPOINT_DIR"
ENV_STOPPING = "EASYLAUNCH_STOPPING"  # why the run is being stopped, once a stop notice came
ENV_CHECKPOINTING = "EASYLAUNCH_CHECKPOINTING"  # set once the function saved or loaded a checkpoint
ENV_METRICS_FILE = "EASYLAUNCH_METRICS_FILE"  # set by the runner for the function's call

# Where launchers put a process's place in a multi-process job, first match wins
# (torchrun, MPICH/PMI, Open MPI, Slurm; PALS and MPI for the local rank).
RANK_VARS = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                   "SLURM_NTASKS")


def first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` set in ``env``, as an integer (None if none is set)."""
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def rank_info(env: Mapping[str, str] | None = None) -> tuple[int, int, int]:
    """(rank, local rank, world size) from the launcher's variables; (0, 0, 1) alone."""
    env = os.environ if env is None else env
    rank = first_int(env, RANK_VARS) or 0
    local = first_int(env, LOCAL_RANK_VARS)
    return rank, rank if local is None else local, first_int(env, WORLD_SIZE_VARS) or 1


def forget_rank() -> None:
    """Drop the launcher's rank variables from this process's environment: a packer that
    srun started (one a node) starts runs that are processes of their own, rank 0 of 1."""
    for name in (*RANK_VARS, *LOCAL_RANK_VARS, *WORLD_SIZE_VARS):
        os.environ.pop(name, None)


def submission_id() -> str:
    """What the processes of one submission share (a job array's id), and no other does."""
    env = os.environ
    return env.get("SLURM_ARRAY_JOB_ID") or env.get("SLURM_JOB_ID") or \
        env.get("PBS_JOBID", "").split("[")[0] or f"pid{os.getppid()}"


def array_index() -> str:
    """This job's index in its job array (Slurm's or PBS's); "0" outside an array."""
    env = os.environ
    return env.get("SLURM_ARRAY_TASK_ID") or env.get("PBS_ARRAY_INDEX") or "0"


def own_job_id() -> str | None:
    """The scheduler's id of the job (or array element) this process runs in: what the job
    script exported (PBS), else Slurm's ``<array job>_<task>`` or job id."""
    env = os.environ
    if env.get(ENV_JOB_ID):
        return env[ENV_JOB_ID]
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def process_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` from /proc (None if unknown or gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else fields[19]


def is_alive(pid: int | None, started: str | None) -> bool:
    """True if ``pid`` runs (not a zombie) and is the process that started at ``started``."""
    if not pid:
        return False
    now = process_start_time(pid)
    if now is not None:
        return started is None or now == started
    if os.path.exists(f"/proc/{pid}"):
        return False  # a zombie
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return started is None  # no /proc: trust the pid only when no start time was recorded


def exit_code(wait_status: int) -> int:
    """A wait status as an exit code: -N for a process killed by signal N."""
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def shell_exit_code(returncode: int) -> int:
    """A process's return code as a shell gives it: 128 + N for one killed by signal N."""
    return 128 - returncode if returncode < 0 else returncode


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 40`` for numbers without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def signal_group(pid: int, signum: int) -> None:
    """Send ``signum`` to the process group ``pid`` leads, if it is still there."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


def python_minor() -> str:
    """This interpreter's ``major.minor`` version."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def cloudpickle_version() -> str | None:
    """The version of the cloudpickle this interpreter imports (None: it has none). Imported
    here, not at the top: 10 ms that reading records does not need."""
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle.__version__
