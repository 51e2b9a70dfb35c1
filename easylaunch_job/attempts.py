"""A run's attempts across restarts.

status.json keeps ``attempt`` (1, 2, ...) and ``restarts``: one entry per attempt that ended
in a restart (its reason, end, error, host and job). Between attempts the run is "queued".
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, NamedTuple

from easylaunch_job.environment import signal_name
from easylaunch_job.records import (
    STATUS_JSON,
    DamagedRecord,
    read_for_update,
    read_json,
    status_lock,
    write_json_atomic,
)
from easylaunch_job.states import TERMINAL_STATES

ATTEMPT_FIELDS = ("pid", "signal", "exit_code", "error", "ended_at")  # of one attempt's end


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
    with status_lock(log_dir):
        status = read_for_update(path)
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
    with status_lock(log_dir):
        status = read_for_update(path)
        carrier = status.get("next_job_id") or (
            status.get("job_id") if status.get("state") == "running" else None)
        # (an element of the job array a run goes on with counts as that array)
        if carrier and job_id and carrier not in (job_id, job_id.split("_")[0]):
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
    with status_lock(log_dir):
        status = read_for_update(path)
        if status.get("state") != "queued" or not status.get("restarts"):
            return
        last = status["restarts"][-1]
        status.update(state=last["instead"], ended_at=last["ended_at"],
                      error=f"{last['error']}; the restart failed: {why}",
                      restarts=status["restarts"][:-1])
        write_json_atomic(path, status, durable=True)


def record_lost_end(log_dir: str, returncode: int, cancelled: bool = False,
                    policy: RestartPolicy = NO_RESTARTS) -> bool:
    """Give a run whose process ended without recording an outcome (killed, out of memory,
    ``os._exit``) its exit code or signal; a recorded outcome is left as it is. A run whose
    cancel was asked for ends as cancelled; with restarts left (``policy``) the run is queued
    for another attempt instead, and True returned."""
    try:
        status = read_json(os.path.join(log_dir, STATUS_JSON))
    except DamagedRecord:
        pass
    else:
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


def reopen_for_rerun(log_dir: str) -> None:
    """Let a run that failed (or was stopped, without a cancel request) run again."""
    path = os.path.join(log_dir, STATUS_JSON)
    with status_lock(log_dir):
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
