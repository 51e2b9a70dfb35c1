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

import contextlib
import json
import os
import signal
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


def update_status(log_dir: str, **fields: Any) -> dict:
    """Merge ``fields`` into ``<log_dir>/status.json``; return the status as it now is.

    Writers hold a lock, and the first terminal state wins: a later ``state`` never replaces
    it (other fields still merge in). Callers compare the returned state with the one they asked.
    A terminal state is flushed to disk before it replaces the old record.
    """
    path = os.path.join(log_dir, STATUS_JSON)
    with _status_lock(log_dir):
        try:
            status = read_json(path)
        except DamagedRecord as exc:  # this write repairs it; say what was lost
            status = {"damaged_record": str(exc)}
        if status.get("state") in TERMINAL_STATES and "state" in fields:
            return status
        status.update(fields)
        write_json_atomic(path, status, durable=fields.get("state") in TERMINAL_STATES)
    return status


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
    """Raised in the main thread on SIGTERM (cancel; timeout at the job's time limit) or the
    time-limit warning signal (timeout)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.at_limit = signum == signal.SIGTERM and _at_time_limit()

    @property
    def state(self) -> str:
        return "cancelled" if self.signum == signal.SIGTERM and not self.at_limit else "timeout"


def _raise_terminated(signum: int, _frame: Any) -> None:
    # Stop signals often come twice (scancel signals every process of the step, Singularity
    # forwards its own); a repeat must not cut short the recording of the first.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signum, signal.SIG_IGN)
    raise _Terminated(signum)


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


def make_doodad_config(meta: dict, log_dir: str) -> DoodadConfig:
    """Build the DoodadConfig the function receives from a bundle's metadata."""
    gpu_id: int | str | None = meta.get("gpu_id")
    if gpu_id is None:
        gpu_id = 0  # doodad's default
    rank, local_rank, world_size = rank_info()
    extra = dict(meta.get("extra_launch_info", {}), host=os.uname().nodename, rank=rank,
                 local_rank=local_rank, world_size=world_size)
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


def call_and_record(fn: Any, config: DoodadConfig, variant: Any,
                    log_dir: str) -> tuple[int, Any]:
    """Call the function, write result.pkl and the final status; return (exit code, value).

    A KeyboardInterrupt is recorded as a cancellation and raised again.
    """
    try:
        value = fn(config, variant)
    except (_Terminated, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, _Terminated) else signal.SIGINT
        state = stop.state if isinstance(stop, _Terminated) else "cancelled"
        name = signal_name(signum)
        reason = ("the time limit is reached" if getattr(stop, "at_limit", False) else
                  "the time limit is near" if state == "timeout" else "cancelled")
        update_status(log_dir, state=state, ended_at=time.time(), exit_code=128 + signum,
                      signal=name, error=f"received {name} ({reason})")
        if isinstance(stop, KeyboardInterrupt):
            raise
        return 128 + signum, None
    except BaseException as exc:  # noqa: BLE001 - SystemExit is a failure of the run too
        tb_text = traceback.format_exc()
        print(tb_text, file=sys.stderr, end="")
        save_error(log_dir, exc, tb_text)
        update_status(log_dir, state="failed", ended_at=time.time(), exit_code=EXIT_FAILED,
                      error=tb_text)
        return EXIT_FAILED, None
    problem = save_result(log_dir, value)
    if problem:
        return _fail(log_dir, EXIT_FAILED, problem), None
    update_status(log_dir, state="succeeded", ended_at=time.time(), exit_code=0)
    return 0, value


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
    if rank_info()[0] != 0:
        return _run_other_rank(bundle_dir, meta, log_dir)
    signal.signal(signal.SIGTERM, _raise_terminated)
    if os.environ.get(ENV_TIMEOUT_SIGNAL):
        signal.signal(signal.Signals["SIG" + os.environ[ENV_TIMEOUT_SIGNAL]], _raise_terminated)
    if os.environ.get(ENV_PARENT_PID):
        pid, started = os.environ[ENV_PARENT_PID].split(":", 1)
        threading.Thread(target=_watch_launcher, args=(int(pid), started), daemon=True).start()
    if os.environ.get(ENV_RERUN):
        _reopen_for_rerun(log_dir)
    job_id = {"job_id": os.environ[ENV_JOB_ID]} if os.environ.get(ENV_JOB_ID) else {}
    status = update_status(log_dir, state="running", started_at=time.time(), pid=os.getpid(),
                           host=os.uname().nodename, **job_id)
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
        return call_and_record(fn, make_doodad_config(meta, log_dir), variant, log_dir)[0]
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
                "queued_at": old.get("queued_at"), "attempt": old.get("attempt", 1) + 1,
                "previous_attempt": {k: old.get(k) for k in ("state", "ended_at", "error")}})


def _run_other_rank(bundle_dir: str, meta: dict, log_dir: str) -> int:
    """A rank other than 0 runs the function too; rank 0 alone keeps the run's record."""
    try:
        fn, variant = _load_payload(bundle_dir)
        fn(make_doodad_config(meta, log_dir), variant)
    except BaseException:  # noqa: BLE001 - reported in this rank's own log
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


def record_lost_end(log_dir: str, returncode: int, cancelled: bool = False) -> None:
    """Give a run whose process ended without recording an outcome its exit code or signal
    (killed, out of memory, ``os._exit``); a recorded outcome is left as it is. A run whose
    cancel was asked for ends as cancelled."""
    with contextlib.suppress(DamagedRecord):
        status = read_json(os.path.join(log_dir, STATUS_JSON))
        if status.get("state") in TERMINAL_STATES:
            return  # the usual case, settled without a lock or a write
        cancelled = cancelled or bool(status.get("cancel_requested"))
    if returncode < 0:
        how, fields = f"was killed by {signal_name(-returncode)}", \
            {"signal": signal_name(-returncode)}
    else:
        how, fields = f"exited with code {returncode}", {}
    update_status(log_dir, state="cancelled" if cancelled else "failed", ended_at=time.time(),
                  exit_code=returncode, **fields,
                  error=f"the run's process {how} before recording an outcome; see stderr.log")


# Signals a supervising runner passes on to the run (stop, Ctrl-C, time-limit warnings).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                     signal.SIGUSR2)


def run_supervised(bundle_dir: str, log_dir: str | None = None) -> int:
    """Run the bundle in a forked child and record how it ended when it could not itself.

    The parent passes stop and time-limit signals on to the child, so it can stand where the
    scheduler signals (a batch script's process). Other ranks of a multi-process run, and
    systems without fork, run the bundle directly.
    """
    if not hasattr(os, "fork") or rank_info()[0] != 0:
        return run_bundle(bundle_dir, log_dir)
    try:
        meta = read_json(os.path.join(os.path.abspath(bundle_dir), BUNDLE_JSON))
    except DamagedRecord:
        meta = {}
    log_dir = os.path.abspath(log_dir or meta.get("log_dir") or bundle_dir)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        return run_bundle(bundle_dir, log_dir)  # the child ends as a normal interpreter would
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, lambda sig, _frame: os.kill(pid, sig))
    returncode = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if os.path.isdir(log_dir):
        with contextlib.suppress(OSError):
            record_lost_end(log_dir, returncode)
    return 128 - returncode if returncode < 0 else returncode


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the runner."""
    args = list(sys.argv[1:] if argv is None else argv)
    log_dir = None
    if "--log-dir" in args:
        i = args.index("--log-dir")
        log_dir = args[i + 1]
        del args[i:i + 2]
    if len(args) != 1:
        print("usage: runner.py BUNDLE_DIR [--log-dir DIR]", file=sys.stderr)
        return EXIT_BAD_BUNDLE
    return run_supervised(args[0], log_dir)


if __name__ == "__main__":
    sys.exit(main())
