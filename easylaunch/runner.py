"""Job-side entry point: ``python runner.py BUNDLE_DIR [--log-dir DIR]``.

This module needs only the standard library and cloudpickle, so a copy travels inside every run
bundle and runs on any machine with the same Python minor version, whether or not easylaunch is
installed there. It loads the pickled function and variant, calls ``fn(doodad_config, variant)``
and records how that went in the run folder: ``status.json`` and ``result.pkl``, each written to
a temporary name and then renamed, so a reader never sees half a file.

The launching side imports the record types and file helpers from here, so both sides agree on
the bundle format by construction.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import numbers
import os
import pickle
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from typing import Any, NamedTuple

BUNDLE_FORMAT = 1
BUNDLE_JSON = "bundle.json"
FUNCTION_PKL = "function.pkl"
VARIANT_PKL = "variant.pkl"
STATUS_JSON = "status.json"
RESULT_PKL = "result.pkl"

# Exit codes of the runner itself (the function's own failure exits with 1).
EXIT_FAILED = 1
EXIT_BAD_BUNDLE = 2
EXIT_WRONG_PYTHON = 3
EXIT_NOT_STARTED = 4  # cancelled (or ended otherwise) before the runner took the run
EXIT_RESTART = 5  # the attempt ended and the run is queued for another (see finish_attempt)

TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled", "timeout"})

# Where launchers put a process's place in a multi-process job, first match wins
# (torchrun, MPICH/PMI, Open MPI, Slurm; PALS and MPI for the local rank).
RANK_VARS = ("RANK", "PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")
LOCAL_RANK_VARS = ("LOCAL_RANK", "PALS_LOCAL_RANKID", "PMI_LOCAL_RANK",
                   "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                   "SLURM_NTASKS")


def first_int(env: dict, names: tuple[str, ...]) -> int | None:
    """The first of ``names`` set in ``env``, as an integer (None if none is set)."""
    for name in names:
        value = env.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def rank_info(env: dict | None = None) -> tuple[int, int, int]:
    """(rank, local rank, world size) from the launcher's variables; (0, 0, 1) alone."""
    env = os.environ if env is None else env
    rank = first_int(env, RANK_VARS) or 0
    local = first_int(env, LOCAL_RANK_VARS)
    return rank, rank if local is None else local, first_int(env, WORLD_SIZE_VARS) or 1

ENV_PARENT_PID = "EASYLAUNCH_PARENT_PID"  # "<pid>:<start time>" of the launching process
ENV_GPU_ID = "EASYLAUNCH_GPU_ID"
ENV_TIMEOUT_SIGNAL = "EASYLAUNCH_TIMEOUT_SIGNAL"  # e.g. USR1: the scheduler's time-limit warning
ENV_RERUN = "EASYLAUNCH_RERUN"  # set by htp's packer when it runs a task again
# When the scheduler ends the job with SIGTERM at its time limit, with no warning signal (PBS):
# the epoch second of that limit; a SIGTERM from then on (less TIME_LIMIT_SLACK) is a timeout.
ENV_TIME_LIMIT_AT = "EASYLAUNCH_TIME_LIMIT_AT"
TIME_LIMIT_SLACK = 30
ENV_JOB_ID = "EASYLAUNCH_JOB_ID"  # the scheduler's id of the job running this attempt
# Seconds between looks at the run's record for a cancel request, for jobs the scheduler's
# cancel command cannot name (array elements behind some PBS front ends).
ENV_WATCH_CANCEL = "EASYLAUNCH_WATCH_CANCEL"
# A job script's own path: an attempt that ends to restart submits it again for its entry, with
# ENV_RESUBMIT_WITH's tool ("sbatch", the default, or "qsub").
ENV_RESUBMIT_SCRIPT = "EASYLAUNCH_RESUBMIT_SCRIPT"
ENV_RESUBMIT_WITH = "EASYLAUNCH_RESUBMIT_WITH"
# The entry (from 0) of a job script a job runs, where no array index says it (a PBS restart).
ENV_ENTRY = "EASYLAUNCH_ENTRY"
# Shared by the runner and the checkpoint helpers through the environment, so they agree even
# where the function's copy of these helpers is not this module (easylaunch.checkpoint).
ENV_CHECKPOINT_DIR = "EASYLAUNCH_CHECKPOINT_DIR"
ENV_STOPPING = "EASYLAUNCH_STOPPING"  # why the run is being stopped, once a stop notice came
ENV_CHECKPOINTING = "EASYLAUNCH_CHECKPOINTING"  # set once the function saved or loaded a checkpoint
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_SUFFIX = ".pkl"


class GitInfo(NamedTuple):
    """The state of one git repository among the code directories at launch time."""

    directory: str
    code_diff: str
    code_diff_staged: str
    commit_hash: str | None
    branch_name: str | None


class DoodadConfig(NamedTuple):
    """What the launched function learns about its run (first argument of ``fn``)."""

    exp_name: str
    base_log_dir: str
    use_gpu: bool
    gpu_id: int | str | None
    git_infos: list[GitInfo]
    script_name: str
    extra_launch_info: dict


class DamagedRecord(ValueError):
    """A run's JSON record cannot be read (empty or cut short by a crash mid-write)."""


def write_bytes_atomic(path: str, data: bytes, durable: bool = False,
                       private: bool = False) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A failed write (a full disk) removes its temporary file. ``durable`` flushes the data to
    disk before the rename, so a crash of the machine leaves the old file or the new one, never
    an empty or cut one; ``private`` makes the file readable by its owner alone.
    """
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: str, obj: Any, durable: bool = False) -> None:
    """Write ``obj`` as indented JSON to ``path`` atomically (non-JSON values become strings)."""
    write_bytes_atomic(path, json.dumps(obj, indent=2, default=repr).encode(), durable)


def read_json(path: str) -> dict:
    """Read a JSON object from ``path``; a missing file reads as an empty dict, a damaged one
    raises :class:`DamagedRecord` naming the file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return {}
    try:
        obj = json.loads(data)
    except ValueError as exc:
        raise DamagedRecord(f"{path} is damaged ({len(data)} bytes that are not JSON: "
                            f"{exc})") from None
    if not isinstance(obj, dict):
        raise DamagedRecord(f"{path} is damaged (it holds a {type(obj).__name__}, not an "
                            "object)")
    return obj


@contextlib.contextmanager
def _status_lock(log_dir: str):
    """An exclusive lock on a run's status (a no-op where the file system refuses locks)."""
    try:
        import fcntl

        fd = os.open(os.path.join(log_dir, f".{STATUS_JSON}.lock"), os.O_CREAT | os.O_RDWR)
    except (ImportError, OSError):
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_for_update(path: str) -> dict:
    try:
        return read_json(path)
    except DamagedRecord as exc:  # the coming write repairs it; say what was lost
        return {"damaged_record": str(exc)}


def update_status(log_dir: str, **fields: Any) -> dict:
    """Merge ``fields`` into ``<log_dir>/status.json``; return the status as it now is.

    Writers hold a lock, and the first terminal state wins: a later ``state`` never replaces
    it (other fields still merge in). Callers compare the returned state with the one they asked.
    A terminal state is flushed to disk before it replaces the old record.
    """
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        status = _read_for_update(path)
        if status.get("state") in TERMINAL_STATES and "state" in fields:
            return status
        status.update(fields)
        write_json_atomic(path, status, durable=fields.get("state") in TERMINAL_STATES)
    return status


# -- attempts: a run's record across restarts ---------------------------------------------------
# status.json keeps ``attempt`` (1, 2, ...) and ``restarts``: one entry per attempt that ended
# in a restart (its reason, end, error, host and job). Between attempts the run is "queued".

ATTEMPT_FIELDS = ("pid", "signal", "exit_code", "error", "ended_at")  # of one attempt's end


def _end_attempt(status: dict, policy: RestartPolicy, reason: str | None,
                 end: dict) -> bool:
    """Give ``status`` (held under the lock) an attempt's end: queued again, the attempt added
    to ``restarts``, when ``reason`` is restartable, restarts are left and no cancel was asked
    (True); else the terminal ``end`` (False)."""
    restarts = list(status.get("restarts", []))
    if reason and not status.get("cancel_requested") and len(restarts) < policy.max_restarts:
        restarts.append({"attempt": status.get("attempt", 1), "reason": reason,
                         "ended_at": end.get("ended_at", time.time()), "error": end.get("error"),
                         "host": status.get("host"), "job_id": status.get("job_id"),
                         "instead": end["state"]})
        for name in ATTEMPT_FIELDS:
            status.pop(name, None)
        status.update(state="queued", restarts=restarts)
        return True
    if reason and restarts and not status.get("cancel_requested"):
        end = dict(end, error=f"{end.get('error')} (max_restarts={policy.max_restarts} used up)")
    status.update(end)
    return False


def finish_attempt(log_dir: str, policy: RestartPolicy, reason: str | None,
                   **end: Any) -> bool:
    """Record how an attempt ended (``end``: state, error, ...; ``reason``: why it may restart,
    None if it may not); True if the run is queued for another attempt. A run that already
    recorded a terminal state keeps it."""
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        status = _read_for_update(path)
        if status.get("state") in TERMINAL_STATES:
            return False
        if status.get("state") == "queued" and status.get("restarts") and \
                status["restarts"][-1].get("attempt") == status.get("attempt"):
            return True  # this attempt's end is recorded already (its job saw it end first)
        restarting = _end_attempt(status, policy, reason, dict(end, ended_at=time.time()))
        write_json_atomic(path, status, durable=True)
    return restarting


def begin_attempt(log_dir: str, policy: RestartPolicy, job_id: str | None) -> dict | None:
    """Take a queued run for this process's attempt and return its status; None when this
    process must leave it alone (it goes on as another job: a restart submitted that one, or
    another job runs it). A run still "running" in this same job lost its last attempt (the
    scheduler started the job again, after a node failure or a requeue): that attempt ends
    here, and this one starts when restarts are left."""
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        status = _read_for_update(path)
        carrier = status.get("next_job_id") or (
            status.get("job_id") if status.get("state") == "running" else None)
        if carrier and job_id and job_id != carrier:
            print(f"easylaunch runner: not starting: the run goes on as job {carrier}",
                  file=sys.stderr)
            return None
        if status.get("state") == "running":
            lost = {"state": "failed", "ended_at": time.time(), "error": (
                f"its attempt {status.get('attempt', 1)} on {status.get('host')} ended without "
                "recording an outcome (node failure?) and the job started again")}
            if not _end_attempt(status, policy, "lost", lost):
                write_json_atomic(path, status, durable=True)
        if status.get("state") in ("queued", None):  # (None: a new folder, or a damaged record)
            status.update(state="running", started_at=time.time(), pid=os.getpid(),
                          host=os.uname().nodename, attempt=status.get("attempt", 0) + 1,
                          **({"job_id": job_id} if job_id else {}))
            write_json_atomic(path, status)
    return status


def give_up_restart(log_dir: str, why: str) -> None:
    """The next attempt could not be started: end the run as its last attempt would have
    ended without a restart, saying why."""
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        status = _read_for_update(path)
        if status.get("state") != "queued" or not status.get("restarts"):
            return
        last = status["restarts"][-1]
        status.update(state=last["instead"], ended_at=last["ended_at"],
                      error=f"{last['error']}; the restart failed: {why}",
                      restarts=status["restarts"][:-1])
        write_json_atomic(path, status, durable=True)


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


def signal_name(signum: int) -> str:
    """``SIGTERM`` for 15; ``signal 40`` for numbers without a name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def python_minor() -> str:
    """This interpreter's ``major.minor`` version."""
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def _at_time_limit() -> bool:
    """Whether the job's time limit (ENV_TIME_LIMIT_AT, when set) has come."""
    try:
        limit = float(os.environ[ENV_TIME_LIMIT_AT])
    except (KeyError, ValueError):
        return False
    return time.time() >= limit - TIME_LIMIT_SLACK


class _Terminated(BaseException):
    """Raised in the main thread on SIGTERM (cancel or preemption; timeout at the job's time
    limit) or the time-limit warning signal (timeout)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.at_limit = signum == signal.SIGTERM and _at_time_limit()

    @property
    def state(self) -> str:
        return "cancelled" if self.signum == signal.SIGTERM and not self.at_limit else "timeout"

    @property
    def restart_reason(self) -> str:
        """What this stop is, should the run restart after it."""
        return "time limit" if self.state == "timeout" else "preempted"


def _raise_terminated(signum: int, _frame: Any) -> None:
    # Stop signals often come twice (scancel signals every process of the step, Singularity
    # forwards its own); a repeat must not cut short the recording of the first.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signum, signal.SIG_IGN)
    raise _Terminated(signum)


class RestartPolicy(NamedTuple):
    """When a run starts again (bundle.json's ``restart``): up to ``max_restarts`` times after a
    time limit, a preemption or a lost process, and after an exception when ``on_error``.
    ``grace`` is how long a checkpointing function has after a stop notice to reach its next
    checkpoint save."""

    max_restarts: int = 0
    on_error: bool = False
    grace: float = 20.0

    @classmethod
    def of(cls, meta: dict) -> RestartPolicy:
        given = meta.get("restart") or {}
        return cls(int(given.get("max_restarts", 0)), bool(given.get("on_error", False)),
                   float(given.get("grace_seconds", cls.grace)))


NO_RESTARTS = RestartPolicy()
_stop: dict[str, Any] = {}  # this process's stop handling: log_dir, grace, the notice's signal


def _cancel_asked() -> bool:
    log_dir = _stop.get("log_dir")
    with contextlib.suppress(DamagedRecord, OSError):
        return bool(log_dir and read_json(os.path.join(log_dir, STATUS_JSON)).get(
            "cancel_requested"))
    return False


def _stop_notice(signum: int, frame: Any) -> None:
    """A stop that the run may restart after: tell the function (``stop_requested()``); one
    that checkpoints gets ``grace`` seconds to save (its save then ends it), others stop now.
    A cancel asked through easylaunch stops at once."""
    if _cancel_asked():
        _raise_terminated(signal.SIGTERM, frame)
    if os.environ.get(ENV_STOPPING):
        return  # a repeat of the notice
    _stop["signum"] = signum
    os.environ[ENV_STOPPING] = _Terminated(signum).restart_reason
    if os.environ.get(ENV_CHECKPOINTING) and _stop.get("grace", 0) > 0:
        signal.signal(signal.SIGALRM, lambda *_: _raise_terminated(signum, None))
        signal.setitimer(signal.ITIMER_REAL, _stop["grace"])
        return
    _raise_terminated(signum, frame)


def _handle_stops(log_dir: str, policy: RestartPolicy) -> None:
    """Install this process's handlers of SIGTERM and the time-limit warning signal."""
    for name in (ENV_STOPPING, ENV_CHECKPOINTING):  # (not the launching side's, if inherited)
        os.environ.pop(name, None)
    _stop.update(log_dir=log_dir, grace=policy.grace)
    handler = _stop_notice if policy.max_restarts > 0 else _raise_terminated
    signal.signal(signal.SIGTERM, handler)
    if os.environ.get(ENV_TIMEOUT_SIGNAL):
        signal.signal(signal.Signals["SIG" + os.environ[ENV_TIMEOUT_SIGNAL]], handler)


def _stopped(exc: BaseException) -> _Terminated | None:
    """The stop ``exc`` is: a stop signal itself, or whatever ended the function (its
    checkpoint save, mostly) once a stop notice came."""
    if isinstance(exc, _Terminated):
        return exc
    if os.environ.get(ENV_STOPPING) and "signum" in _stop:
        _end_grace()
        return _Terminated(_stop["signum"])
    return None


def _end_grace() -> None:
    """Disarm the grace timer of a stop notice (the function ended within it)."""
    if os.environ.get(ENV_STOPPING):
        signal.setitimer(signal.ITIMER_REAL, 0)


# -- checkpoints: what the run's function calls (``easylaunch.checkpoint`` names them) ----------

class Stopped(BaseException):
    """Ends the function at :func:`save_checkpoint` when the run is being stopped: the run
    restarts from the checkpoint just written. (Not an ``Exception``: ``except Exception``
    does not catch it.)"""


def checkpoint_dir() -> str:
    """The run's checkpoint folder, ``<run folder>/checkpoint`` (``./checkpoint`` outside a
    run), made if missing. It survives restarts; cloud modes sync it to the bucket."""
    path = os.environ.get(ENV_CHECKPOINT_DIR) or os.path.abspath(CHECKPOINT_DIR)
    os.makedirs(path, exist_ok=True)
    return path


def _checkpoint_path(name: str) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or \
            not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
        raise ValueError(f"checkpoint name {name!r}: use letters, digits and . _ - only")
    return os.path.join(checkpoint_dir(), name + CHECKPOINT_SUFFIX)


def stop_requested() -> str | None:
    """Why the run is being stopped (``"time limit"``, ``"preempted"``), None while it is not:
    save a checkpoint now."""
    return os.environ.get(ENV_STOPPING) or None


def save_checkpoint(state: Any, name: str = "state") -> str:
    """Pickle ``state`` into the checkpoint folder (rank 0 writes; other ranks skip), through a
    temporary file flushed to disk, so a crash leaves the previous checkpoint whole; return its
    path. When the run is being stopped, raise :class:`Stopped` once it is written."""
    os.environ[ENV_CHECKPOINTING] = "1"
    path = _checkpoint_path(name)
    if rank_info()[0] == 0:
        write_bytes_atomic(path, pickle.dumps(state, pickle.HIGHEST_PROTOCOL), durable=True)
    reason = stop_requested()
    if reason:
        raise Stopped(f"checkpoint saved; the run stops ({reason}) and restarts from it")
    return path


def load_checkpoint(default: Any = None, name: str = "state") -> Any:
    """The state last saved under ``name`` (by this attempt or an earlier one), or ``default``
    when there is none yet."""
    os.environ[ENV_CHECKPOINTING] = "1"
    try:
        with open(_checkpoint_path(name), "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        return default


# ``easylaunch.checkpoint``'s names for the helpers above.
CHECKPOINT_API = {"save": save_checkpoint, "load": load_checkpoint,
                  "stop_requested": stop_requested, "folder": checkpoint_dir,
                  "Stopped": Stopped}


# -- metrics: what the run's function logs (``easylaunch.log_metrics``) -------------------------
# One JSON object a line in <run folder>/metrics.jsonl: {"step": ..., "time": ..., name: value}.
# Lines are buffered and written whole, with O_APPEND, by rank 0 alone: when the buffer passes
# METRICS_FLUSH_BYTES, its oldest line is METRICS_FLUSH_SECONDS old (checked on each call and by
# a background thread), the run's function returns or raises, and the process exits. A crash
# mid-write can leave a last line cut short: readers skip it, and the next writer ends it first.

METRICS_JSONL = "metrics.jsonl"
ENV_METRICS_FILE = "EASYLAUNCH_METRICS_FILE"  # set by the runner for the function's call
METRICS_FLUSH_BYTES = 64 * 1024
METRICS_FLUSH_SECONDS = 2.0
_metric_keys: dict[str, str] = {}  # name -> its JSON text, checked once


def _metric_key(name: str) -> str:
    key = _metric_keys.get(name)
    if key is None:
        if name == "time":
            raise TypeError("log_metrics: 'time' is each line's own time; give the metric "
                             "another name")
        key = _metric_keys[name] = json.dumps(name)
    return key


def _is_numpy_bool(value: Any) -> bool:
    """A numpy bool (``np.bool_``: neither Integral nor Real), told without importing numpy."""
    kind = type(value)
    return kind.__module__ == "numpy" and kind.__name__ in ("bool", "bool_")


def _metric_value(name: str, value: Any) -> str:
    """``value`` as JSON: a number, NaN as null, infinities as +-1e999 (still JSON; Python and
    JavaScript read it back as infinite). Anything but a real number is a TypeError."""
    if type(value) is not float:
        if isinstance(value, numbers.Integral) or _is_numpy_bool(value):  # (int, bool, numpy)
            return int.__repr__(int(value))
        if not isinstance(value, numbers.Real):
            hint = " (a tensor or array: log its .item())" if hasattr(value, "item") else ""
            raise TypeError(f"log_metrics: {name}= must be a number, not a "
                            f"{type(value).__name__}{hint}")
        value = float(value)
    if value - value == 0:  # finite
        return float.__repr__(value)
    return "null" if value != value else ("1e999" if value > 0 else "-1e999")


class _MetricsFile:
    """The buffered lines of one metrics file; a process of a rank other than 0 drops them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.writes = rank_info()[0] == 0
        self.lines: list[str] = []  # (ASCII: json.dumps escapes the rest, so a char is a byte)
        self.size = 0
        self.oldest = 0.0
        self.fd: int | None = None
        self.warned = False  # about a failed write (a full disk), said once

    def add(self, line: str, now: float) -> None:
        if not self.writes:
            return
        if not self.lines:
            self.oldest = now
        self.lines.append(line)
        self.size += len(line)
        if self.size >= METRICS_FLUSH_BYTES or now - self.oldest >= METRICS_FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Append the buffered lines. A failed write (a full disk) drops them, says so once and
        leaves the run going; a stop signal raised during the write keeps the lines it did not
        write whole, for a later flush."""
        if not self.lines:
            return
        data = memoryview("".join(self.lines).encode())
        written = 0
        try:
            if self.fd is None:
                self.fd = self._open()
            while written < len(data):
                written += os.write(self.fd, data[written:])
        except BaseException as exc:
            self.close()  # opened again next time, ending the line this write may have cut
            if not isinstance(exc, OSError):
                self._drop_written(written)
                raise
            if not self.warned:
                self.warned = True
                print(f"easylaunch: {len(self.lines)} line(s) of metrics could not be written "
                      f"to {self.path}: {exc} (later failures to write it are not reported)",
                      file=sys.stderr)
        self._drop_written(len(data))

    def _drop_written(self, written: int) -> None:
        """Forget the lines of the first ``written`` bytes; a line written in part stays, to
        be written whole after the line end :meth:`_open` adds."""
        done = count = 0
        while count < len(self.lines) and done + len(self.lines[count]) <= written:
            done += len(self.lines[count])
            count += 1
        del self.lines[:count]
        self.size -= done

    def _open(self) -> int:
        """Open for appending; a last line cut short (a crash mid-write) is ended first, so
        it spoils no line after it."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
        return fd

    def close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


_metrics_files: dict[str, _MetricsFile] = {}
_metrics_lock = threading.Lock()
_metrics_flusher: threading.Thread | None = None  # the background flusher, once started


def _start_flusher() -> None:
    """Start the thread that writes lines waiting longer than METRICS_FLUSH_SECONDS."""
    global _metrics_flusher
    if _metrics_flusher is None:
        _metrics_flusher = threading.Thread(target=_flush_periodically,
                                            name="easylaunch-metrics", daemon=True)
        _metrics_flusher.start()


def log_metrics(step: int | float | None = None, **values: float) -> None:
    """Record metric values (``log_metrics(step=epoch, loss=0.3, acc=0.9)``) as one line of
    ``metrics.jsonl`` in the run's folder (outside a run: ``./metrics.jsonl``).

    Cheap enough to call every step: lines are buffered and written in batches (at the
    latest every 2 s, and when the function returns or raises). Values must be numbers
    (a TypeError names the one that is not); NaN is written as null. In a run of several
    ranks, rank 0 writes and the others' calls are dropped. ``step`` None leaves the step to
    the readers: the line's place in the file.
    """
    if not values:
        raise TypeError("log_metrics: give at least one value, e.g. log_metrics(loss=0.3)")
    now = time.time()
    head = "null" if step is None else _metric_value("step", step)
    line = "".join([f'{{"step": {head}, "time": {float.__repr__(now)}',
                    *[f", {_metric_key(k)}: {_metric_value(k, v)}" for k, v in values.items()],
                    "}\n"])
    path = os.environ.get(ENV_METRICS_FILE) or os.path.abspath(METRICS_JSONL)
    with _metrics_lock:
        target = _metrics_files.get(path)
        if target is None:
            target = _metrics_files[path] = _MetricsFile(path)
            _start_flusher()
        target.add(line, now)


def flush_metrics() -> None:
    """Write every metrics line this process still holds."""
    with _metrics_lock:
        for target in _metrics_files.values():
            target.flush()


def close_metrics(path: str) -> None:
    """Write out the lines held for the metrics file ``path``, close it and forget it (a
    later line opens it again). Lines a stop signal kept from being written stay held."""
    with _metrics_lock:
        target = _metrics_files.get(path)
        if target is not None:
            target.flush()
            target.close()
            del _metrics_files[path]


def _flush_periodically() -> None:
    while True:
        time.sleep(METRICS_FLUSH_SECONDS)
        flush_metrics()


def _forget_metrics() -> None:
    """In a forked child: the parent's buffered lines are the parent's to write."""
    global _metrics_lock, _metrics_flusher
    _metrics_lock = threading.Lock()
    for target in _metrics_files.values():
        target.close()
    _metrics_files.clear()
    _metrics_flusher = None


atexit.register(flush_metrics)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_metrics)


@contextlib.contextmanager
def _metrics_into(log_dir: str):
    """Point log_metrics at the run's folder while its function runs; write out every line it
    logged before the run's end is recorded, and close the file, in this copy of these helpers
    and in an installed easylaunch's, should the function have imported that one."""
    before = os.environ.get(ENV_METRICS_FILE)
    path = os.environ[ENV_METRICS_FILE] = os.path.join(log_dir, METRICS_JSONL)
    try:
        yield
    finally:
        copies = {sys.modules.get(__name__), sys.modules.get("easylaunch.runner")} - {None}
        try:  # (a stop signal may cut a flush short: the environment is put back all the same)
            for copy in copies:
                if hasattr(copy, "close_metrics"):  # (an easylaunch older than metrics: none)
                    copy.close_metrics(path)
        finally:
            if before is None:
                os.environ.pop(ENV_METRICS_FILE, None)
            else:
                os.environ[ENV_METRICS_FILE] = before


# ``easylaunch``'s own names for the helpers a run's function calls (beside easylaunch.checkpoint).
PACKAGE_API = {"log_metrics": log_metrics, "flush_metrics": flush_metrics}


def _provide_easylaunch_module() -> None:
    """Make ``easylaunch.checkpoint`` and ``easylaunch.log_metrics`` importable where easylaunch
    is not installed (cloud instances), so functions that use them load and run there."""
    import importlib.util
    import types

    if "easylaunch.checkpoint" in sys.modules or importlib.util.find_spec("easylaunch"):
        return
    package = types.ModuleType("easylaunch")
    package.__path__ = []
    package.__dict__.update(PACKAGE_API)
    module = types.ModuleType("easylaunch.checkpoint")
    module.__dict__.update(CHECKPOINT_API)
    package.checkpoint = module
    sys.modules.update({"easylaunch": package, "easylaunch.checkpoint": module})


def _watch_launcher(pid: int, started: str) -> None:
    """End this run's process group when the launching process is gone (no orphans)."""
    while process_start_time(pid) == started:
        time.sleep(0.5)
    os.killpg(os.getpgrp(), signal.SIGTERM)


def _watch_cancel(log_dir: str, every: float) -> None:
    """Stop this run once its record asks for a cancel: its process group when this runner
    (or the supervising runner, its parent) leads one, else this process; the main thread
    then records it cancelled."""
    path = os.path.join(log_dir, STATUS_JSON)
    while True:
        time.sleep(every)
        with contextlib.suppress(DamagedRecord):  # (being replaced: read again next time)
            if read_json(path).get("cancel_requested"):
                break
    if os.getpgrp() in (os.getpid(), os.getppid()):
        os.killpg(os.getpgrp(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


def make_doodad_config(meta: dict, log_dir: str, attempt: int = 1) -> DoodadConfig:
    """Build the DoodadConfig the function receives from a bundle's metadata."""
    gpu_id: int | str | None = meta.get("gpu_id")
    if gpu_id is None:
        gpu_id = 0  # doodad's default
    rank, local_rank, world_size = rank_info()
    extra = dict(meta.get("extra_launch_info", {}), host=os.uname().nodename, rank=rank,
                 local_rank=local_rank, world_size=world_size, attempt=attempt,
                 checkpoint_dir=os.path.join(log_dir, CHECKPOINT_DIR))
    if os.environ.get("SLURM_JOB_ID"):
        extra["slurm-job-id"] = os.environ["SLURM_JOB_ID"]  # doodad's name for it
    if os.environ.get(ENV_GPU_ID):  # pinned through CUDA_VISIBLE_DEVICES: device 0 inside
        extra["physical_gpu_id"] = os.environ[ENV_GPU_ID]
        gpu_id = 0
    return DoodadConfig(
        exp_name=meta["exp_name"],
        base_log_dir=log_dir,
        use_gpu=bool(meta.get("use_gpu")),
        gpu_id=gpu_id,
        git_infos=[GitInfo(*g) for g in meta.get("git_infos", [])],
        script_name=meta.get("script_name", ""),
        extra_launch_info=extra,
    )


def _fail(log_dir: str, code: int, message: str, state: str = "failed") -> int:
    update_status(log_dir, state=state, ended_at=time.time(), exit_code=code, error=message)
    print(f"easylaunch runner: {message}", file=sys.stderr)
    return code


def _load_payload(bundle_dir: str) -> tuple[Any, Any]:
    import cloudpickle

    with open(os.path.join(bundle_dir, FUNCTION_PKL), "rb") as f:
        fn = cloudpickle.load(f)
    with open(os.path.join(bundle_dir, VARIANT_PKL), "rb") as f:
        variant = cloudpickle.load(f)
    return fn, variant


def save_result(log_dir: str, value: Any) -> str | None:
    """Pickle a return value to result.pkl; return an error message if it cannot be pickled."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(("success", value))
    except Exception as exc:  # noqa: BLE001 - any pickling failure is reported the same way
        return f"the function returned a value that cannot be pickled: {exc!r}"
    try:
        write_bytes_atomic(os.path.join(log_dir, RESULT_PKL), data, durable=True)
    except OSError as exc:
        return (f"the function returned, but its result ({len(data)} bytes) could not be "
                f"written to {RESULT_PKL}: {exc}. Free space in {log_dir}, or return less "
                "and write large outputs to files yourself")
    return None


def load_outcome(log_dir: str) -> tuple | None:
    """What result.pkl holds: ``("success", value)`` or ``("error", exception or None,
    traceback text)``; None where there is none. Raises what unpickling it here raises."""
    import cloudpickle

    try:
        with open(os.path.join(log_dir, RESULT_PKL), "rb") as f:
            return cloudpickle.load(f)
    except FileNotFoundError:
        return None


def save_error(log_dir: str, exc: BaseException, tb_text: str) -> None:
    """Pickle a raised exception (or only its traceback text when it cannot be pickled)."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(("error", exc, tb_text))
        cloudpickle.loads(data)  # some exceptions pickle but cannot be rebuilt
    except Exception:  # noqa: BLE001
        data = cloudpickle.dumps(("error", None, tb_text))
    with contextlib.suppress(OSError):  # status.json keeps the traceback either way
        write_bytes_atomic(os.path.join(log_dir, RESULT_PKL), data, durable=True)


def _stop_words(stop: _Terminated, policy: RestartPolicy) -> str:
    if stop.at_limit:
        return "the time limit is reached"
    if stop.state == "timeout":
        return "the time limit is near"
    return "preempted" if policy.max_restarts and not _cancel_asked() else "cancelled"


def call_and_record(fn: Any, config: DoodadConfig, variant: Any, log_dir: str,
                    policy: RestartPolicy = NO_RESTARTS) -> tuple[int, Any]:
    """Call the function, write result.pkl and the attempt's end; return (exit code, value).

    The exit code is EXIT_RESTART when the run is queued for another attempt (``policy``). A
    KeyboardInterrupt is recorded as a cancellation and raised again.
    """
    try:
        with _metrics_into(log_dir):
            value = fn(config, variant)
        _end_grace()  # (it returned after a stop notice: its result is recorded, not cut short)
    except KeyboardInterrupt:
        name = signal_name(signal.SIGINT)
        update_status(log_dir, state="cancelled", ended_at=time.time(),
                      exit_code=128 + signal.SIGINT, signal=name, error=f"received {name}")
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit is a failure of the run too
        stop = _stopped(exc)
        if stop is not None:
            name = signal_name(stop.signum)
            restarting = finish_attempt(
                log_dir, policy, stop.restart_reason, state=stop.state,
                exit_code=128 + stop.signum, signal=name,
                error=f"received {name} ({_stop_words(stop, policy)})")
            return (EXIT_RESTART if restarting else 128 + stop.signum), None
        tb_text = traceback.format_exc()
        print(tb_text, file=sys.stderr, end="")
        save_error(log_dir, exc, tb_text)
        restarting = finish_attempt(log_dir, policy, "error" if policy.on_error else None,
                                    state="failed", exit_code=EXIT_FAILED, error=tb_text)
        return (EXIT_RESTART if restarting else EXIT_FAILED), None
    problem = save_result(log_dir, value)
    if problem:
        return _fail(log_dir, EXIT_FAILED, problem), None
    update_status(log_dir, state="succeeded", ended_at=time.time(), exit_code=0)
    return 0, value


def own_job_id() -> str | None:
    """The scheduler's id of the job (or array element) this process runs in: what the job
    script exported (PBS), else Slurm's ``<array job>_<task>`` or job id."""
    env = os.environ
    if env.get(ENV_JOB_ID):
        return env[ENV_JOB_ID]
    if env.get("SLURM_ARRAY_JOB_ID") and env.get("SLURM_ARRAY_TASK_ID"):
        return f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}"
    return env.get("SLURM_JOB_ID") or None


def run_bundle(bundle_dir: str, log_dir: str | None = None) -> int:
    """Run the function of one bundle and record the outcome; return the process exit code."""
    bundle_dir = os.path.abspath(bundle_dir)
    try:
        meta = read_json(os.path.join(bundle_dir, BUNDLE_JSON))
    except DamagedRecord as exc:
        print(f"easylaunch runner: {exc}", file=sys.stderr)
        return EXIT_BAD_BUNDLE
    if not meta:
        print(f"easylaunch runner: no {BUNDLE_JSON} in {bundle_dir}", file=sys.stderr)
        return EXIT_BAD_BUNDLE
    log_dir = os.path.abspath(log_dir or meta["log_dir"])
    os.makedirs(log_dir, exist_ok=True)
    if meta.get("python_minor") != python_minor():
        return _fail(log_dir, EXIT_WRONG_PYTHON, (
            f"this run was launched with Python {meta.get('python_minor')}, but "
            f"{sys.executable} is Python {python_minor()}; pickled functions only load on the "
            f"same minor version. Run it with a Python {meta.get('python_minor')} interpreter."))
    for code_dir in reversed(meta.get("code_dirs", [])):
        sys.path.insert(0, os.path.join(bundle_dir, code_dir))
    policy = RestartPolicy.of(meta)
    _handle_stops(log_dir, policy)
    os.environ[ENV_CHECKPOINT_DIR] = os.path.join(log_dir, CHECKPOINT_DIR)
    _provide_easylaunch_module()
    if rank_info()[0] != 0:
        return _run_other_rank(bundle_dir, meta, log_dir)
    if os.environ.get(ENV_PARENT_PID):
        pid, started = os.environ[ENV_PARENT_PID].split(":", 1)
        threading.Thread(target=_watch_launcher, args=(int(pid), started), daemon=True).start()
    if os.environ.get(ENV_RERUN):
        _reopen_for_rerun(log_dir)
    status = begin_attempt(log_dir, policy, own_job_id())
    if status is None:
        return EXIT_NOT_STARTED
    if status.get("state") != "running" or status.get("cancel_requested"):
        if status.get("state") == "running":
            _fail(log_dir, EXIT_NOT_STARTED, "cancelled before it started", state="cancelled")
        print(f"easylaunch runner: not starting: the run is {status.get('state')}",
              file=sys.stderr)
        return EXIT_NOT_STARTED
    if os.environ.get(ENV_WATCH_CANCEL):
        threading.Thread(target=_watch_cancel, daemon=True,
                         args=(log_dir, float(os.environ[ENV_WATCH_CANCEL]))).start()
    if meta.get("cloudpickle") != _cloudpickle_version():
        print(f"easylaunch runner: warning: the run was pickled with cloudpickle "
              f"{meta.get('cloudpickle')}; this machine has {_cloudpickle_version()}",
              file=sys.stderr)
    if status.get("restarts"):
        last = status["restarts"][-1]
        print(f"easylaunch runner: attempt {status['attempt']} of run {meta.get('run_id')} "
              f"(the last one ended: {last['reason']})", file=sys.stderr)
    try:
        fn, variant = _load_payload(bundle_dir)
    except ModuleNotFoundError as exc:
        if exc.name == "cloudpickle":
            return _fail(log_dir, EXIT_BAD_BUNDLE, (
                f"cloudpickle is not installed for {sys.executable}; install cloudpickle "
                f"{meta.get('cloudpickle')} there (pip install cloudpickle)"))
        return _fail(log_dir, EXIT_BAD_BUNDLE, (
            f"cannot load the pickled function: {exc}. The module {exc.name!r} is not "
            "importable on this machine: add the folder that holds it to CODE_DIRS_TO_MOUNT."))
    except _Terminated as term:
        return _fail(log_dir, 128 + term.signum, "stopped before the function started",
                     state=term.state)
    except Exception as exc:  # noqa: BLE001
        return _fail(log_dir, EXIT_BAD_BUNDLE, f"cannot load the pickled payload: {exc!r}")
    try:
        return call_and_record(fn, make_doodad_config(meta, log_dir, status["attempt"]),
                               variant, log_dir, policy)[0]
    except KeyboardInterrupt:
        return 128 + signal.SIGINT


def _reopen_for_rerun(log_dir: str) -> None:
    """Let a run that failed (or was stopped, without a cancel request) run again."""
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        try:
            old = read_json(path)
        except DamagedRecord as exc:
            old = {"state": "failed", "error": str(exc)}
        if old.get("state") in ("failed", "timeout", "cancelled") and \
                not old.get("cancel_requested"):
            write_json_atomic(path, {
                "state": "queued", "run_id": old.get("run_id"),
                "queued_at": old.get("queued_at"), "attempt": old.get("attempt", 1),
                "previous_attempt": {k: old.get(k) for k in ("state", "ended_at", "error")}})


def _run_other_rank(bundle_dir: str, meta: dict, log_dir: str) -> int:
    """A rank other than 0 runs the function too; rank 0 alone keeps the run's record. A stop
    ends it quietly (exit 0), so the launcher does not end rank 0 before it saved."""
    try:
        fn, variant = _load_payload(bundle_dir)
        attempt = 1
        with contextlib.suppress(DamagedRecord):  # (rank 0 counts attempts: ended ones + 1)
            attempt = len(read_json(os.path.join(log_dir, STATUS_JSON)).get("restarts", [])) + 1
        fn(make_doodad_config(meta, log_dir, attempt), variant)
    except BaseException as exc:  # noqa: BLE001 - reported in this rank's own log
        if _stopped(exc) is not None:
            return 0
        traceback.print_exc()
        return EXIT_FAILED
    return 0


def _cloudpickle_version() -> str | None:
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle.__version__


def recorded_state(log_dir: str) -> str | None:
    """The state in a run's status.json (None if it has none or the record is damaged)."""
    try:
        return read_json(os.path.join(log_dir, STATUS_JSON)).get("state")
    except DamagedRecord:
        return None


def record_lost_end(log_dir: str, returncode: int, cancelled: bool = False,
                    policy: RestartPolicy = NO_RESTARTS) -> bool:
    """Give a run whose process ended without recording an outcome (killed, out of memory,
    ``os._exit``) its exit code or signal; a recorded outcome is left as it is. A run whose
    cancel was asked for ends as cancelled; with restarts left (``policy``) the run is queued
    for another attempt instead, and True returned."""
    with contextlib.suppress(DamagedRecord):
        status = read_json(os.path.join(log_dir, STATUS_JSON))
        if status.get("state") in TERMINAL_STATES or status.get("state") == "queued":
            return False  # the usual case, settled without a lock or a write
        cancelled = cancelled or bool(status.get("cancel_requested"))
    if returncode < 0:
        how, fields = f"was killed by {signal_name(-returncode)}", \
            {"signal": signal_name(-returncode)}
    else:
        how, fields = f"exited with code {returncode}", {}
    return finish_attempt(
        log_dir, policy, None if cancelled else "lost",
        state="cancelled" if cancelled else "failed", exit_code=returncode, **fields,
        error=f"the run's process {how} before recording an outcome; see stderr.log")


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


def _resubmission(script: str) -> tuple[list[str], Any]:
    """The command that submits ``script`` again for this job's entry, and the function that
    reads the new job's id from its output."""
    if os.environ.get(ENV_RESUBMIT_WITH) == "qsub":  # a plain job told its entry
        entry = os.environ.get(ENV_ENTRY) or "0"
        # (-V: the job's environment, as sbatch passes it on by default)
        return (["qsub", "-V", "-v", f"{ENV_ENTRY}={entry}", _without_array(script)],
                lambda out: out.strip())
    index = os.environ.get("SLURM_ARRAY_TASK_ID") or "0"  # the same element of a new array
    return (["sbatch", "--parsable", f"--array={index}", script],
            lambda out: f"{out.strip().split(';')[0]}_{index}")


def submit_from_job(argv: list[str], cwd: str | None = None,
                    **env: str) -> tuple[str, str | None]:
    """Run a submit command (sbatch, qsub) from inside a job, with ``env`` added and without
    this job's own scheduler values (they would bend the new job's resources): (its output,
    what went wrong or None)."""
    env = {**{k: v for k, v in os.environ.items()
              if not k.startswith(("SLURM_", "SBATCH_", "PBS_")) and k != ENV_ENTRY}, **env}
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
    try:
        argv, job_of = _resubmission(script)
    except OSError as exc:  # (the PBS script's copy could not be written)
        out, problem = "", repr(exc)
    else:  # (PBS writes the job's output where it is submitted from)
        out, problem = submit_from_job(argv, cwd=os.path.dirname(script) or None)
    job = job_of(out) if problem is None else ""
    if problem is None and " " in job:
        problem = f"{argv[0]} printed no job id: {out.strip()!r}"
    if problem is not None:
        give_up_restart(log_dir, f"{' '.join(argv)}: {problem}")
        return
    update_status(log_dir, next_job_id=job)
    print(f"easylaunch runner: the run goes on as job {job}", file=sys.stderr)


def _queued_by_this_job(log_dir: str) -> dict | None:
    """The run's record if its last attempt, in this job, ended queued for another that
    nobody has submitted yet; else None."""
    try:
        status = read_json(os.path.join(log_dir, STATUS_JSON))
    except DamagedRecord:
        return None
    job = own_job_id()
    queued = (status.get("state") == "queued" and bool(status.get("restarts"))
              and status["restarts"][-1].get("job_id") == job
              and status.get("next_job_id") in (None, job))
    return status if queued else None


def _wait_for_the_run(log_dir: str, timeout: float = 60.0) -> None:
    """Wait (up to ``timeout`` seconds) for a run's process still running on this machine to
    end: a container can end before the processes it started (its starter stopped by the
    scheduler's signal while the run saves)."""
    with contextlib.suppress(DamagedRecord):
        status = read_json(os.path.join(log_dir, STATUS_JSON))
        if status.get("state") != "running" or status.get("host") != os.uname().nodename:
            return
        deadline = time.time() + timeout
        while is_alive(status.get("pid"), None) and time.time() < deadline:
            time.sleep(0.1)


def _record_end(log_dir: str, returncode: int, policy: RestartPolicy) -> None:
    """Record an end the run's process (ended with ``returncode``) could not record itself:
    killed, out of memory."""
    if returncode not in (EXIT_NOT_STARTED, EXIT_RESTART) and os.path.isdir(log_dir):
        with contextlib.suppress(OSError):
            _wait_for_the_run(log_dir)
            record_lost_end(log_dir, returncode, policy=policy)


def _job_exit(log_dir: str, returncode: int, queued: dict | None) -> int:
    """Submit the next attempt of a run this job ``queued`` again; the job's exit code:
    EXIT_RESTART when the run goes on."""
    if queued:
        resubmit_self(log_dir)
        return EXIT_RESTART
    return 128 - returncode if returncode < 0 else returncode


def end_of_job(log_dir: str, returncode: int, policy: RestartPolicy) -> int:
    """What a job does once the run's process ended (``returncode``): record an end the run
    could not record itself, and submit the next attempt of a run queued again. Returns the
    job's exit code: EXIT_RESTART when the run goes on.

    A job script whose runs start in a container calls it (``--after-exit``), outside the
    container, where the scheduler's commands are; so does the packer."""
    _record_end(log_dir, returncode, policy)
    return _job_exit(log_dir, returncode, _queued_by_this_job(log_dir))


RESTART_IN_PLACE = ("lost", "error")  # ends a job outlives: its next attempt starts in it


# Signals a supervising runner passes on to the run (stop, Ctrl-C, time-limit warnings).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                     signal.SIGUSR2)


def run_supervised(bundle_dir: str, log_dir: str | None = None) -> int:
    """Run the bundle in a forked child and record how it ended when it could not itself.

    The parent passes stop and time-limit signals on to the child, so it can stand where the
    scheduler signals (a batch script's process), and starts the next attempt of a run that
    ends to restart: in this job when the job goes on (a lost process, an exception, in a
    one-process run), else by submitting the job again. Other ranks of a multi-process run,
    and systems without fork, run the bundle directly.
    """
    if not hasattr(os, "fork") or rank_info()[0] != 0:
        return run_bundle(bundle_dir, log_dir)
    try:
        meta = read_json(os.path.join(os.path.abspath(bundle_dir), BUNDLE_JSON))
    except DamagedRecord:
        meta = {}
    log_dir = os.path.abspath(log_dir or meta.get("log_dir") or bundle_dir)
    policy = RestartPolicy.of(meta)
    child, signalled = [0], []

    def forward(signum: int, _frame: Any) -> None:
        signalled.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], signum)

    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forward)
    while True:
        sys.stdout.flush()
        sys.stderr.flush()
        child[0] = os.fork()
        if child[0] == 0:
            return run_bundle(bundle_dir, log_dir)  # the child ends as an interpreter would
        returncode = os.waitstatus_to_exitcode(os.waitpid(child[0], 0)[1])
        _record_end(log_dir, returncode, policy)
        queued = _queued_by_this_job(log_dir)
        # an end the job outlives (its process lost, an exception): the next attempt starts
        # in it at once, instead of waiting in the queue again
        if signalled or rank_info()[2] != 1 or not queued or \
                queued["restarts"][-1]["reason"] not in RESTART_IN_PLACE:
            return _job_exit(log_dir, returncode, queued)
        print("easylaunch runner: the next attempt starts in this same job", file=sys.stderr)


def _settle_after_exit(bundle_dir: str, log_dir: str | None, returncode: str) -> int:
    """``--after-exit CODE``: :func:`end_of_job` for a run whose processes ran elsewhere (in a
    container) and ended with ``returncode``."""
    try:
        meta = read_json(os.path.join(os.path.abspath(bundle_dir), BUNDLE_JSON))
    except DamagedRecord:
        meta = {}
    log_dir = os.path.abspath(log_dir or meta.get("log_dir") or bundle_dir)
    code = int(returncode) if returncode.lstrip("-").isdigit() else EXIT_FAILED
    # (a shell gives 128 + N for a process killed by signal N)
    return end_of_job(log_dir, 128 - code if code > 128 else code, RestartPolicy.of(meta))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the runner."""
    args = list(sys.argv[1:] if argv is None else argv)
    options: dict[str, str | None] = {"--log-dir": None, "--after-exit": None}
    for name in options:
        if name in args:
            i = args.index(name)
            options[name] = args[i + 1] if i + 1 < len(args) else ""
            del args[i:i + 2]
    if len(args) != 1:
        print("usage: runner.py BUNDLE_DIR [--log-dir DIR] [--after-exit CODE]",
              file=sys.stderr)
        return EXIT_BAD_BUNDLE
    if options["--after-exit"] is not None:
        return _settle_after_exit(args[0], options["--log-dir"], options["--after-exit"])
    return run_supervised(args[0], options["--log-dir"])


if __name__ == "__main__":
    sys.exit(main())
