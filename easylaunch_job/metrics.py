"""Metrics: what the run's function logs (``easylaunch.log_metrics``).

One JSON object a line in <run folder>/metrics.jsonl: {"step": ..., "time": ..., name: value}.
Lines are buffered and written whole, with O_APPEND, by rank 0 alone: when the buffer passes
METRICS_FLUSH_BYTES, its oldest line is METRICS_FLUSH_SECONDS old (checked on each call and by
a background thread), the run's function returns or raises, and the process exits. A crash
mid-write can leave a last line cut short: readers skip it, and the next writer ends it first.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import numbers
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from easylaunch_job.environment import ENV_METRICS_FILE, rank_info
from easylaunch_job.records import METRICS_JSONL

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


class LinesMirror(Protocol):
    """What is sent the lines of a metrics file once written (the run's trackers)."""

    def send(self, lines: list[str]) -> None: ...

    def close(self, outcome: str) -> None: ...


_mirrors: dict[str, LinesMirror] = {}  # metrics file -> where its written lines go too


class _MetricsFile:
    """The buffered lines of one metrics file; a process of a rank other than 0 drops them."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.mirror = _mirrors.get(path)
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
        batch = list(self.lines)
        data = memoryview("".join(batch).encode())
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
            batch = []
        self._drop_written(len(data))
        if self.mirror is not None and batch:
            self.mirror.send(batch)

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


def log_metrics(step_or_values: int | float | Mapping[str, float] | None = None, /,
                step: int | float | None = None, **values: float) -> None:
    """Record metric values (``log_metrics(step=epoch, loss=0.3, acc=0.9)``, or as W&B's
    ``wandb.log`` takes them: ``log_metrics({"loss": 0.3}, step=epoch)``) as one line of
    ``metrics.jsonl`` in the run's folder (outside a run: ``./metrics.jsonl``).

    Cheap enough to call every step: lines are buffered and written in batches (at the
    latest every 2 s, and when the function returns or raises). Values must be numbers
    (a TypeError names the one that is not); NaN is written as null. In a run of several
    ranks, rank 0 writes and the others' calls are dropped. ``step`` None leaves the step to
    the readers: the line's place in the file.

    Args:
        step_or_values: ``{"loss": 0.3}``: values as a dict, as ``wandb.log`` takes them. A
            number here is the step.
        step: The step the values belong to, such as the epoch (None: the line's place).
        **values: ``loss=0.3``: values by name, each a number (NaN is written as null).

    Raises:
        TypeError: A value is not a number, none is given, the step is given twice, or a
            metric is named ``time``.
    """
    if isinstance(step_or_values, Mapping):
        values = {**step_or_values, **values}
    elif step_or_values is not None:
        if step is not None:
            raise TypeError("log_metrics: give the step once, e.g. log_metrics(step=3, loss=0.3)")
        step = step_or_values
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
    _mirrors.clear()  # (the trackers' runs are the parent's too)
    _metrics_flusher = None


atexit.register(flush_metrics)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_metrics)


@contextlib.contextmanager
def metrics_into(log_dir: str, mirror: LinesMirror | None = None) -> Iterator[None]:
    """Point log_metrics at the run's folder while its function runs; write out every line it
    logged before the run's end is recorded, and close the file, in this copy of these helpers
    and in the runner module of an installed easylaunch older than this package, should the
    function have imported that one. ``mirror`` (the run's trackers) is sent the lines once
    written, and closed at the end: FINISHED, FAILED, or KILLED by a stop signal."""
    before = os.environ.get(ENV_METRICS_FILE)
    path = os.environ[ENV_METRICS_FILE] = os.path.join(log_dir, METRICS_JSONL)
    if mirror is not None:
        _mirrors[path] = mirror
    outcome = "FAILED"
    try:
        yield
        outcome = "FINISHED"
    except BaseException as exc:
        if not isinstance(exc, (Exception, SystemExit)):  # (a stop signal, a Ctrl-C)
            outcome = "KILLED"
        raise
    finally:
        copies = {copy for copy in (sys.modules.get(__name__), sys.modules.get("easylaunch.runner"))
                  if copy is not None}
        try:  # (a stop signal may cut a flush short: the environment is put back all the same)
            for copy in copies:
                if hasattr(copy, "close_metrics"):  # (an easylaunch older than metrics: none)
                    copy.close_metrics(path)
        finally:
            if before is None:
                os.environ.pop(ENV_METRICS_FILE, None)
            else:
                os.environ[ENV_METRICS_FILE] = before
            mirrored = _mirrors.pop(path, None)
            if mirrored is not None:
                mirrored.close(outcome)


class FlushingEvery:
    """A run's function whose ``log_metrics`` lines are written at least every ``seconds``
    (a search's runs: its pruner reads their values as they come). Recorded under the
    function's own name."""

    def __init__(self, function: Any, seconds: float) -> None:
        self.function, self.seconds = function, seconds
        self.__module__ = getattr(function, "__module__", "")
        self.__qualname__ = getattr(function, "__qualname__", "")

    def __call__(self, doodad_config: Any, variant: Any) -> Any:
        global METRICS_FLUSH_SECONDS
        METRICS_FLUSH_SECONDS = self.seconds
        return self.function(doodad_config, variant)


# ``easylaunch``'s own names for the helpers a run's function calls (beside easylaunch.checkpoint).
PACKAGE_API = {"log_metrics": log_metrics, "flush_metrics": flush_metrics}
