"""What a launch writes to the registry: each run's first row (a large variant kept as its
size and digest) and, when the launch fails part way, the end of the runs it made."""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import Any

from easylaunch.bundle import VARIANT_JSON, Run, sweep_of
from easylaunch.variants import as_data
from easylaunch_job.records import update_status

REGISTRY_VARIANT_BYTES = 16384  # larger variants are kept in the registry as size and digest
LARGE_VARIANT_KEY = "_large_variant"


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
            "host": launch["host"], "sweep": sweep_of(launch),
            "git_commit": next(iter(launch["git_commits"].values()), None),
            "resubmitted_from": launch.get("resubmitted_from"),
            "command": shlex.join(launch["command"]) if "command" in launch else None}


def aborted(runs: list[Run], exc: BaseException) -> list[tuple[str, dict[str, Any]]]:
    """Give runs that were made but never started a terminal state naming why.

    Returns each run's state now, as registry changes.
    """
    state = "cancelled" if isinstance(exc, KeyboardInterrupt) else "failed"
    error = f"the launch was aborted before this run started: {exc!r}"
    return [(run.run_id, {"state": update_status(str(run.log_dir), state=state,
                                                 error=error)["state"]})
            for run in runs]
