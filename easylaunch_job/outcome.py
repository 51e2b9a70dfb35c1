"""A run's outcome in ``result.pkl``: ``("success", value)`` or ``("error", exception or None,
traceback text)``, pickled with cloudpickle and flushed to disk before the run's end is
recorded."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from easylaunch_job.records import RESULT_PKL, write_bytes_atomic


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
    """What result.pkl holds; None where there is none. Raises what unpickling it here
    raises."""
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
