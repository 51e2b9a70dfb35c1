"""Stop signals in the run's process: a cancel, a preemption, a time limit or its warning.

SIGTERM (and the scheduler's time-limit warning signal, ENV_TIMEOUT_SIGNAL) raise
:class:`Terminated` in the main thread. A run that may restart gets a stop *notice* instead:
``stop_requested()`` says why, and a function that checkpoints has ``grace`` seconds to reach
its next save (which then ends it).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

from easylaunch_job.attempts import RestartPolicy
from easylaunch_job.environment import (
    ENV_CHECKPOINTING,
    ENV_STOPPING,
    ENV_TIME_LIMIT_AT,
    ENV_TIMEOUT_SIGNAL,
    TIME_LIMIT_SLACK,
)
from easylaunch_job.records import read_status

_stop: dict = {}  # this process's stop handling: log_dir, grace, the notice's signal


def _at_time_limit() -> bool:
    """Whether the job's time limit (ENV_TIME_LIMIT_AT, when set) has come."""
    try:
        limit = float(os.environ[ENV_TIME_LIMIT_AT])
    except (KeyError, ValueError):
        return False
    return time.time() >= limit - TIME_LIMIT_SLACK


class Terminated(BaseException):
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


def raise_terminated(signum: int, _frame: Any) -> None:
    """The handler of a stop signal that ends the function at once (while a returned
    function's result is recorded, a stop comes too late: it is let go; see ``recording``)."""
    if _stop.get("returned"):
        return
    # Stop signals often come twice (scancel signals every process of the step, Singularity
    # forwards its own); a repeat must not cut short the recording of the first.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signum, signal.SIG_IGN)
    raise Terminated(signum)


def cancel_asked() -> bool:
    """Whether the run's record asks for a cancel (through easylaunch)."""
    log_dir = _stop.get("log_dir")
    return bool(log_dir and read_status(log_dir).get("cancel_requested"))


def _stop_notice(signum: int, frame: Any) -> None:
    """A stop that the run may restart after: tell the function (``stop_requested()``); one
    that checkpoints gets ``grace`` seconds to save (its save then ends it), others stop now.
    A cancel asked through easylaunch stops at once."""
    if _stop.get("returned"):
        return
    if cancel_asked():
        raise_terminated(signal.SIGTERM, frame)
    if os.environ.get(ENV_STOPPING):
        return  # a repeat of the notice
    _stop["signum"] = signum
    os.environ[ENV_STOPPING] = Terminated(signum).restart_reason
    if os.environ.get(ENV_CHECKPOINTING) and _stop.get("grace", 0) > 0:
        signal.signal(signal.SIGALRM, lambda *_: raise_terminated(signum, None))
        signal.setitimer(signal.ITIMER_REAL, _stop["grace"])
        return
    raise_terminated(signum, frame)


def handle_stops(log_dir: str, policy: RestartPolicy) -> None:
    """Install this process's handlers of SIGTERM and the time-limit warning signal."""
    for name in (ENV_STOPPING, ENV_CHECKPOINTING):  # (not the launching side's, if inherited)
        os.environ.pop(name, None)
    _stop.update(log_dir=log_dir, grace=policy.grace)
    handler = _stop_notice if policy.max_restarts > 0 else raise_terminated
    signal.signal(signal.SIGTERM, handler)
    if os.environ.get(ENV_TIMEOUT_SIGNAL):
        signal.signal(signal.Signals["SIG" + os.environ[ENV_TIMEOUT_SIGNAL]], handler)


def stopped(exc: BaseException) -> Terminated | None:
    """The stop ``exc`` is: a stop signal itself, or whatever ended the function (its
    checkpoint save, mostly) once a stop notice came."""
    if isinstance(exc, Terminated):
        return exc
    if os.environ.get(ENV_STOPPING) and "signum" in _stop:
        end_grace()
        return Terminated(_stop["signum"])
    return None


@contextlib.contextmanager
def recording() -> Iterator[None]:
    """While a returned function's result is recorded: a stop signal then comes too late to
    stop anything, and is let go, so the record is never left half-written. Stops act again
    afterwards (a run nested in this process's own run, an exit waiting on threads)."""
    before = _stop.get("returned", False)
    _stop["returned"] = True
    try:
        yield
    finally:
        _stop["returned"] = before


def end_grace() -> None:
    """Disarm the grace timer of a stop notice (the function ended within it)."""
    if os.environ.get(ENV_STOPPING):
        signal.setitimer(signal.ITIMER_REAL, 0)


def stop_words(stop: Terminated, policy: RestartPolicy) -> str:
    """Why the run stopped, in words for its record."""
    if stop.at_limit:
        return "the time limit is reached"
    if stop.state == "timeout":
        return "the time limit is near"
    return "preempted" if policy.max_restarts and not cancel_asked() else "cancelled"
