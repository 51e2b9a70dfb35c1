"""The job around a run: ``python job.pyz run BUNDLE_DIR [--log-dir DIR] [--after-exit CODE]``.

The supervising process forks the run (:func:`~easylaunch_job.run.run_bundle`), passes the
scheduler's signals on to it, records an end the run could not record itself (killed, out of
memory), and starts the next attempt of a run that ends to restart: in this job when the job
goes on, else by submitting the job again.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from typing import Any

from easylaunch_job.attempts import RestartPolicy, record_lost_end
from easylaunch_job.environment import (
    exit_code,
    is_alive,
    own_job_id,
    rank_info,
    shell_exit_code,
)
from easylaunch_job.records import BUNDLE_JSON, DamagedRecord, read_json, read_status
from easylaunch_job.resubmit import resubmit_self
from easylaunch_job.run import (
    EXIT_BAD_BUNDLE,
    EXIT_FAILED,
    EXIT_NOT_STARTED,
    EXIT_RESTART,
    run_bundle,
)

RESTART_IN_PLACE = ("lost", "error")  # ends a job outlives: its next attempt starts in it

# Signals a supervising runner passes on to the run (stop, Ctrl-C, time-limit warnings).
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1,
                     signal.SIGUSR2)


def _queued_by_this_job(log_dir: str) -> dict | None:
    """The run's record if its last attempt, in this job, ended queued for another that
    nobody has submitted yet; else None."""
    status = read_status(log_dir)
    job = own_job_id()
    queued = (status.get("state") == "queued" and bool(status.get("restarts"))
              and status["restarts"][-1].get("job_id") == job
              and status.get("next_job_id") in (None, job))
    return status if queued else None


def _wait_for_the_run(log_dir: str, timeout: float = 60.0) -> None:
    """Wait (up to ``timeout`` seconds) for a run's process still running on this machine to
    end: a container can end before the processes it started (its starter stopped by the
    scheduler's signal while the run saves)."""
    status = read_status(log_dir)
    if status.get("state") != "running" or status.get("host") != os.uname().nodename:
        return
    deadline = time.time() + timeout
    while is_alive(status.get("pid"), None) and time.time() < deadline:
        time.sleep(0.1)


def _record_end(log_dir: str, returncode: int, policy: RestartPolicy) -> None:
    """Record an end the run's process (ended with ``returncode``) could not record itself:
    killed, out of memory."""
    if returncode not in (EXIT_NOT_STARTED, EXIT_RESTART) and os.path.isdir(log_dir):
        try:
            _wait_for_the_run(log_dir)
            record_lost_end(log_dir, returncode, policy=policy)
        except OSError:
            pass


def _job_exit(log_dir: str, returncode: int, queued: dict | None) -> int:
    """Submit the next attempt of a run this job ``queued`` again; the job's exit code:
    EXIT_RESTART when the run goes on."""
    if queued:
        resubmit_self(log_dir)
        return EXIT_RESTART
    return shell_exit_code(returncode)


def end_of_job(log_dir: str, returncode: int, policy: RestartPolicy) -> int:
    """What a job does once the run's process ended (``returncode``): record an end the run
    could not record itself, and submit the next attempt of a run queued again. Returns the
    job's exit code: EXIT_RESTART when the run goes on.

    A job script whose runs start in a container calls it (``--after-exit``), outside the
    container, where the scheduler's commands are; so does the packer."""
    _record_end(log_dir, returncode, policy)
    return _job_exit(log_dir, returncode, _queued_by_this_job(log_dir))


def _bundle_meta(bundle_dir: str) -> dict:
    try:
        return read_json(os.path.join(os.path.abspath(bundle_dir), BUNDLE_JSON))
    except DamagedRecord:
        return {}


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
    meta = _bundle_meta(bundle_dir)
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
        returncode = exit_code(os.waitpid(child[0], 0)[1])
        _record_end(log_dir, returncode, policy)
        queued = _queued_by_this_job(log_dir)
        # an end the job outlives (its process lost, an exception): the next attempt starts
        # in it at once, instead of waiting in the queue again
        if signalled or rank_info()[2] != 1 or not queued or \
                queued["restarts"][-1]["reason"] not in RESTART_IN_PLACE:
            return _job_exit(log_dir, returncode, queued)
        print("easylaunch runner: the next attempt starts in this same job", file=sys.stderr)


def settle_after_exit(bundle_dir: str, log_dir: str | None, returncode: str) -> int:
    """``--after-exit CODE``: :func:`end_of_job` for a run whose processes ran elsewhere (in a
    container) and ended with ``returncode``."""
    meta = _bundle_meta(bundle_dir)
    log_dir = os.path.abspath(log_dir or meta.get("log_dir") or bundle_dir)
    code = int(returncode) if returncode.lstrip("-").isdigit() else EXIT_FAILED
    # (a shell gives 128 + N for a process killed by signal N)
    return end_of_job(log_dir, 128 - code if code > 128 else code, RestartPolicy.of(meta))


def main(argv: list[str] | None = None) -> int:
    """``run BUNDLE_DIR [--log-dir DIR] [--after-exit CODE]``: run (or settle) one bundle."""
    args = list(sys.argv[1:] if argv is None else argv)
    options: dict = {"--log-dir": None, "--after-exit": None}
    for name in options:
        if name in args:
            i = args.index(name)
            options[name] = args[i + 1] if i + 1 < len(args) else ""
            del args[i:i + 2]
    if len(args) != 1:
        print("usage: job.pyz run BUNDLE_DIR [--log-dir DIR] [--after-exit CODE]",
              file=sys.stderr)
        return EXIT_BAD_BUNDLE
    if options["--after-exit"] is not None:
        return settle_after_exit(args[0], options["--log-dir"], options["--after-exit"])
    return run_supervised(args[0], options["--log-dir"])
