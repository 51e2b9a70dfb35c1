"""One bundle's run: load the pickled function and variant, call ``fn(doodad_config, variant)``
and record how it went in the run folder (``status.json`` and ``result.pkl``)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from typing import Any

from easylaunch_job.attempts import (
    NO_RESTARTS,
    RestartPolicy,
    begin_attempt,
    finish_attempt,
    reopen_for_rerun,
)
from easylaunch_job.checkpoint import CHECKPOINT_API
from easylaunch_job.command import ENV_CODE_DIR, CommandFailed
from easylaunch_job.config import DoodadConfig, make_doodad_config
from easylaunch_job.environment import (
    ENV_CHECKPOINT_DIR,
    ENV_PARENT_PID,
    ENV_RERUN,
    ENV_WATCH_CANCEL,
    cloudpickle_version,
    own_job_id,
    process_start_time,
    python_minor,
    rank_info,
    signal_name,
)
from easylaunch_job.metrics import PACKAGE_API, metrics_into
from easylaunch_job.outcome import save_error, save_result
from easylaunch_job.records import (
    BUNDLE_JSON,
    CHECKPOINT_DIR,
    FUNCTION_PKL,
    VARIANT_PKL,
    DamagedRecord,
    read_json,
    read_status,
    update_status,
)
from easylaunch_job.stops import (
    Terminated,
    end_grace,
    handle_stops,
    recording,
    stop_words,
    stopped,
)
from easylaunch_job.trackers import open_mirror

# Exit codes of the runner itself (the function's own failure exits with 1).
EXIT_FAILED = 1
EXIT_BAD_BUNDLE = 2
EXIT_WRONG_PYTHON = 3
EXIT_NOT_STARTED = 4  # cancelled (or ended otherwise) before the runner took the run
EXIT_RESTART = 5  # the attempt ended and the run is queued for another (see finish_attempt)


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


# The settings that pick the Python runs start with, for messages (the job side does not know
# which mode launched it).
PYTHON_SETTINGS = ("SLURM_PYTHON, PBS_PYTHON, SSS_PYTHON (htp, sss) or the cluster's 'python' "
                   "in CLUSTERS")


def python_versions(python: Sequence[int] | str | None, pickler: str | None) -> str:
    """``Python 3.11.7 and cloudpickle 3.1.1`` (``python``: its version numbers, or as
    written); the launch side's messages say it the same way."""
    written = python if isinstance(python, str) or python is None \
        else ".".join(map(str, python))
    return (f"Python {written or '?'} and "
            + (f"cloudpickle {pickler}" if pickler else "no cloudpickle"))


def wanted_python(minor: str | None, pickler: str | None) -> str:
    """``a Python 3.11 that has cloudpickle 3.x``: one that can load what ``pickler`` on
    Python ``minor`` pickled."""
    return (f"a Python {minor or '?'} that has cloudpickle "
            f"{(pickler or '?').split('.', 1)[0]}.x")


def _versions_apart(meta: dict) -> str:
    """Both sides' Python and cloudpickle (the launch side's from bundle.json), and how to
    start the run on a Python like the launch side's."""
    minor, launched = meta.get("python_minor"), meta.get("cloudpickle")
    return (f"{sys.executable} has {python_versions(sys.version_info[:3], cloudpickle_version())}"
            f"; the run was pickled with {python_versions(minor, launched)}. Start runs with "
            f"{wanted_python(minor, launched)}: set {PYTHON_SETTINGS} to it")


def user_traceback(exc: BaseException) -> str:
    """The traceback of an exception the function raised, from the function's own frame down
    (this module's call of it left out)."""
    tb = exc.__traceback__
    inner = tb.tb_next if tb is not None and tb.tb_frame.f_code is call_and_record.__code__ \
        else tb
    return "".join(traceback.format_exception(type(exc), exc, inner or tb))


def call_and_record(fn: Any, config: DoodadConfig, variant: Any, log_dir: str,
                    policy: RestartPolicy = NO_RESTARTS, reraise: bool = False,
                    trackers: dict | None = None) -> tuple[int, Any]:
    """Call the function, record its value and the attempt's end; return (exit code, value).

    The exit code is EXIT_RESTART when the run is queued for another attempt (``policy``). A
    KeyboardInterrupt is recorded as a cancellation and raised again; with ``reraise`` (the
    caller runs the function in its own process), so is every exception the function raised,
    once recorded, instead of being printed. ``trackers`` (bundle.json's) names the trackers
    its metrics are mirrored to.
    """
    held = contextlib.ExitStack()  # (a stop until the function returned is the function's;
    try:                           # then, until its result is recorded, it comes too late)
        with metrics_into(log_dir, open_mirror(trackers, log_dir, variant)):
            value = fn(config, variant)
            held.enter_context(recording())
        end_grace()  # (it returned after a stop notice: its result is recorded, not cut short)
    except KeyboardInterrupt:
        name = signal_name(signal.SIGINT)
        update_status(log_dir, state="cancelled", ended_at=time.time(),
                      exit_code=128 + signal.SIGINT, signal=name, error=f"received {name}")
        raise
    except BaseException as exc:  # noqa: BLE001 - SystemExit is a failure of the run too
        stop = stopped(exc)
        if stop is not None:
            name = signal_name(stop.signum)
            restarting = finish_attempt(
                log_dir, policy, stop.restart_reason, state=stop.state,
                exit_code=128 + stop.signum, signal=name,
                error=f"received {name} ({stop_words(stop, policy)})")
            if reraise:
                raise
            return (EXIT_RESTART if restarting else 128 + stop.signum), None
        command = isinstance(exc, CommandFailed)  # (its own exit code and stderr, no traceback)
        tb_text = str(exc) if command else user_traceback(exc)
        if not reraise:  # (in the log before the record says the run failed: a reader of both
            print(tb_text, file=sys.stderr, end="", flush=True)  # never finds the log empty)
        save_error(log_dir, exc, tb_text)
        restarting = finish_attempt(log_dir, policy, "error" if policy.on_error else None,
                                    state="failed", error=tb_text,
                                    exit_code=exc.exit_code if isinstance(exc, CommandFailed)
                                    else EXIT_FAILED)
        if reraise:
            raise
        return (EXIT_RESTART if restarting else EXIT_FAILED), None
    else:
        problem, recorded = save_result(log_dir, value)
        if problem:
            return _fail(log_dir, EXIT_FAILED, problem), None
        update_status(log_dir, state="succeeded", ended_at=time.time(), exit_code=0, **recorded)
        return 0, value
    finally:
        held.close()


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
    package.__dict__["checkpoint"] = module  # (the attribute, which ModuleType's type lacks)
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
    while True:
        time.sleep(every)
        if read_status(log_dir).get("cancel_requested"):  # (damaged: read again next time)
            break
    if os.getpgrp() in (os.getpid(), os.getppid()):
        os.killpg(os.getpgrp(), signal.SIGTERM)
    else:
        os.kill(os.getpid(), signal.SIGTERM)


def _run_other_rank(bundle_dir: str, meta: dict, log_dir: str) -> int:
    """A rank other than 0 runs the function too; rank 0 alone keeps the run's record. A stop
    ends it quietly (exit 0), so the launcher does not end rank 0 before it saved."""
    try:
        fn, variant = _load_payload(bundle_dir)
        # (rank 0 counts attempts: ended ones + 1)
        attempt = len(read_status(log_dir).get("restarts", [])) + 1
        fn(make_doodad_config(meta, log_dir, attempt), variant)
    except BaseException as exc:  # noqa: BLE001 - reported in this rank's own log
        if stopped(exc) is not None:
            return 0
        traceback.print_exc()
        return EXIT_FAILED
    return 0


def _set_up(bundle_dir: str, meta: dict, log_dir: str) -> RestartPolicy:
    """The process-wide setup of a run: code folders on sys.path, stop handlers, the
    checkpoint folder, ``easylaunch``'s helpers where it is not installed."""
    code_dirs = [os.path.join(bundle_dir, code_dir) for code_dir in meta.get("code_dirs", [])]
    sys.path[:0] = code_dirs
    # where a command runs: the first code folder's snapshot, else the folder the launch was
    # made in, where it is there (this machine, or a cluster's shared file system)
    launch_dir = meta.get("launch_dir") or ""  # (bundles made before it: none)
    if code_dirs:
        os.environ[ENV_CODE_DIR] = code_dirs[0]
    elif os.path.isdir(launch_dir):
        os.environ[ENV_CODE_DIR] = launch_dir
    policy = RestartPolicy.of(meta)
    handle_stops(log_dir, policy)
    os.environ[ENV_CHECKPOINT_DIR] = os.path.join(log_dir, CHECKPOINT_DIR)
    _provide_easylaunch_module()
    return policy


def _take_the_run(log_dir: str, policy: RestartPolicy) -> dict | None:
    """Begin this process's attempt (watching the launcher, reopening a rerun); its status, or
    None when the run must not start here."""
    if os.environ.get(ENV_PARENT_PID):
        pid, started = os.environ[ENV_PARENT_PID].split(":", 1)
        threading.Thread(target=_watch_launcher, args=(int(pid), started), daemon=True).start()
    if os.environ.get(ENV_RERUN):
        reopen_for_rerun(log_dir)
    status = begin_attempt(log_dir, policy, own_job_id())
    if status is None:
        return None
    if status.get("state") != "running" or status.get("cancel_requested"):
        if status.get("state") == "running":
            _fail(log_dir, EXIT_NOT_STARTED, "cancelled before it started", state="cancelled")
        print(f"easylaunch runner: not starting: the run is {status.get('state')}",
              file=sys.stderr)
        return None
    if os.environ.get(ENV_WATCH_CANCEL):
        threading.Thread(target=_watch_cancel, daemon=True,
                         args=(log_dir, float(os.environ[ENV_WATCH_CANCEL]))).start()
    return status


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
            "pickled functions only load on the Python minor version that pickled them: "
            + _versions_apart(meta)))
    policy = _set_up(bundle_dir, meta, log_dir)
    if rank_info()[0] != 0:
        return _run_other_rank(bundle_dir, meta, log_dir)
    status = _take_the_run(log_dir, policy)
    if status is None:
        return EXIT_NOT_STARTED
    try:  # (a stop signal from here on ends the run as that stop: cancelled, not failed)
        if meta.get("cloudpickle") != cloudpickle_version():
            print(f"easylaunch runner: warning: the run was pickled with cloudpickle "
                  f"{meta.get('cloudpickle')}; this machine has {cloudpickle_version()}",
                  file=sys.stderr)
        if status.get("restarts"):
            last = status["restarts"][-1]
            print(f"easylaunch runner: attempt {status['attempt']} of run "
                  f"{meta.get('run_id')} (the last one ended: {last['reason']})",
                  file=sys.stderr)
        fn, variant = _load_payload(bundle_dir)
    except ModuleNotFoundError as exc:
        if exc.name == "cloudpickle":
            return _fail(log_dir, EXIT_BAD_BUNDLE, (
                f"cloudpickle is not installed for {sys.executable}; install cloudpickle "
                f"{meta.get('cloudpickle')} there (pip install cloudpickle)"))
        return _fail(log_dir, EXIT_BAD_BUNDLE, (
            f"cannot load the pickled function: {exc}. The module {exc.name!r} is not "
            "importable on this machine: add the folder that holds it to CODE_DIRS_TO_MOUNT."))
    except Terminated as term:
        return _fail(log_dir, 128 + term.signum, "stopped before the function started",
                     state=term.state)
    except Exception as exc:  # noqa: BLE001
        return _fail(log_dir, EXIT_BAD_BUNDLE, f"cannot load the pickled payload: {exc!r}; "
                                               + _versions_apart(meta))
    try:
        return call_and_record(fn, make_doodad_config(meta, log_dir, status["attempt"]),
                               variant, log_dir, policy, trackers=meta.get("trackers"))[0]
    except KeyboardInterrupt:
        return 128 + signal.SIGINT
