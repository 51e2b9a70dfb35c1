"""A run's outcome: ``("success", value)`` or ``("error", exception or None, traceback
text)``, pickled with cloudpickle. A small value rides in status.json's ``result_pickle``, in
the one write that records the run's end; a larger one, and an error, go to ``result.pkl``,
flushed to disk before the end is recorded."""

from __future__ import annotations

import base64
import contextlib
import os
from typing import Any

from easylaunch_job.records import RESULT_PKL, read_status, write_bytes_atomic

INLINE_RESULT = "result_pickle"  # in status.json: a small outcome's pickle, base64
INLINE_RESULT_BYTES = 4096  # larger outcomes go to result.pkl


def save_result(log_dir: str, value: Any) -> tuple[str | None, dict]:
    """Pickle a return value; return an error message if it cannot be pickled or written,
    and the status.json fields that record it (a small one whole; a larger one is written
    to result.pkl, the field then None)."""
    import cloudpickle

    try:
        data = cloudpickle.dumps(("success", value))
    except Exception as exc:  # noqa: BLE001 - any pickling failure is reported the same way
        return f"the function returned a value that cannot be pickled: {exc!r}", {}
    if len(data) <= INLINE_RESULT_BYTES:
        return None, {INLINE_RESULT: base64.b64encode(data).decode()}
    try:
        write_bytes_atomic(os.path.join(log_dir, RESULT_PKL), data, durable=True)
    except OSError as exc:
        return (f"the function returned, but its result ({len(data)} bytes) could not be "
                f"written to {RESULT_PKL}: {exc}. Free space in {log_dir}, or return less "
                "and write large outputs to files yourself"), {}
    return None, {INLINE_RESULT: None}


def load_outcome(log_dir: str, status: dict | None = None) -> tuple | None:
    """The run's outcome (status.json's, else result.pkl's); None where there is none.
    ``status``: status.json as the caller read it already. Raises what unpickling it here
    raises."""
    import cloudpickle

    inline = (read_status(log_dir) if status is None else status).get(INLINE_RESULT)
    if inline:
        return cloudpickle.loads(base64.b64decode(inline))
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
