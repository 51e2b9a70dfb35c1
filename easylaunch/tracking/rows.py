"""What is written to the registry: each run's first row (a large variant kept as its size
and digest), the fields of its record every later look writes, and, when the launch fails
part way, the end of the runs it made."""

from __future__ import annotations

import hashlib
import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from easylaunch.runs.record import VARIANT_JSON, abandoned_partials, place_abandoned, sweep_of
from easylaunch.runs.variants import as_data, variant_key
from easylaunch.tracking.registry import LARGE_VARIANT_KEY, NO_TIME, Registry
from easylaunch_job.records import update_status
from easylaunch_job.states import TERMINAL_STATES

if TYPE_CHECKING:
    from easylaunch.runs.bundle import Run

REGISTRY_VARIANT_BYTES = 16384  # larger variants are kept in the registry as size and digest


def registry_variant(variant: dict) -> dict:
    """The variant as the registry keeps it: a large one as its size and digest alone (the
    run folder's variant.json holds it whole)."""
    data = as_data(variant)[0]
    text = json.dumps(data)
    if len(text) <= REGISTRY_VARIANT_BYTES:
        return data
    return {LARGE_VARIANT_KEY: {"bytes": len(text), "sha256": hashlib.sha256(
        text.encode()).hexdigest(), "whole in": VARIANT_JSON}}


def registry_row(run: Run) -> dict[str, Any]:
    """A run's row as its launch adds it (queued)."""
    launch = run.launch
    return {"id": run.run_id, "exp_name": run.exp_name, "mode": run.mode, "state": "queued",
            "log_dir": str(run.log_dir), "variant": registry_variant(run.variant),
            "variant_key": variant_key(run.variant),
            "host": launch["host"], "sweep": sweep_of(launch),
            "git_commit": next(iter(launch["git_commits"].values()), None),
            "resubmitted_from": launch.get("resubmitted_from"),
            "command": shlex.join(launch["command"]) if "command" in launch else None}


def record_fields(info: dict) -> dict[str, Any]:
    """The registry fields of a run's status.json: state, restarts, start and end, the
    scheduler's job id and why it ended. Every path that looks at a run (``wait_all``,
    ``Job.wait``, ``ls``, ``watch``, the dashboard, ``load_sweep``) writes these, so the
    registry says what the record says whichever of them saw the end."""
    restarts = info.get("restarts")
    fields = {"state": info.get("state") or "unknown",
              "restarts": len(restarts) if isinstance(restarts, list) else 0,
              **record_times(info), "job_id": info.get("next_job_id") or info.get("job_id"),
              "reason": reason_of(info) or ""}
    if fields["state"] in TERMINAL_STATES:  # (NO_TIME: looked for, so not read again)
        fields.setdefault("ended", NO_TIME)
    return {k: v for k, v in fields.items() if v is not None}


def record_times(info: dict) -> dict[str, float]:
    """A status.json's start and end, as the registry's ``started`` and ``ended`` (only
    numbers: a hand-edited record must not spoil every listing)."""
    return {k: info[f"{k}_at"] for k in ("started", "ended")
            if isinstance(info.get(f"{k}_at"), (int, float))
            and not isinstance(info.get(f"{k}_at"), bool)}


def aborted(runs: list[Run], exc: BaseException) -> list[tuple[str, dict[str, Any]]]:
    """Give runs that were made but never started a terminal state naming why.

    Returns each run's state now, as registry changes.
    """
    state = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
    error = f"the launch was aborted before this run started: {exc!r}"
    return [(run.run_id, {"state": update_status(str(run.log_dir), state=state,
                                                 error=error)["state"]})
            for run in runs]


KILLED_WHILE_MAKING = ("never started: the launch was killed while making its runs; run it "
                      "with `easylaunch resubmit {}`")


def settle_abandoned(root: Path, registry: Registry) -> None:
    """The half-made run folders under ``root`` of launchers of this machine that died: one
    the launch registered is moved into place as failed, saying so; the others are removed."""
    found = abandoned_partials(root)
    registered = registry.states(found) if found else {}
    for run_id, tmp in found.items():
        if run_id in registered:
            place_abandoned(tmp, KILLED_WHILE_MAKING.format(run_id))
            registry.update(run_id, state="failed")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


REASON_CHARS = 200  # a longer reason is cut


def reason_of(status: dict) -> str | None:
    """One line from a run's status.json: the exception (type and message) of a traceback,
    else the first line of the recorded error, else what the exit says; None for a run that
    succeeded or has not ended."""
    state = status.get("state")
    if state in (None, "queued", "running", "succeeded"):
        return None
    error = str(status.get("error") or "").strip()
    lines = [line for line in error.splitlines() if line.strip()]
    if lines and lines[0].startswith("Traceback (most recent call last)"):
        # the exception's own line: the last one that is not a frame (indented) or a note
        text = next((line for line in reversed(lines) if not line[:1].isspace()), lines[-1])
    elif lines:
        text = lines[0]
    elif status.get("signal"):
        text = f"ended by {status['signal']}"
    elif status.get("exit_code") not in (None, 0):
        text = f"exited with code {status['exit_code']}"
    else:
        text = {"timeout": "its time limit came", "cancelled": "cancelled"}.get(state, state)
    text = text.strip()
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS - 1] + "…"
