"""Reading the metrics a run folder holds, as points of one long table.

Three formats: ``metrics.jsonl`` (``easylaunch.log_metrics``), ``progress.csv`` as rlkit writes
it (a header row of names, one row per epoch) and TensorBoard event files
(``events.out.tfevents.*``, anywhere in the folder; read with the ``tensorboard`` package,
``pip install 'easylaunch[tensorboard]'``). A metric found in several formats is taken from
the first of SOURCES. A last line cut short (a run writing, or one that crashed mid-write) is
left out, and so is any line that does not read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from easylaunch.errors import needed
from easylaunch_job.records import BUNDLE_DIR, CHECKPOINT_DIR, METRICS_JSONL

PROGRESS_CSV = "progress.csv"
TENSORBOARD = "tensorboard"  # the source of points read from event files
EVENTS_PREFIX = "events.out.tfevents."
CSV_STEP_COLUMNS = ("Epoch", "epoch")  # rlkit's names for the step, first found wins
SOURCES = (METRICS_JSONL, PROGRESS_CSV, TENSORBOARD)  # in the order a name is taken from
Metrics = Collection[str] | None  # the metric names to read (None: all)
_warned_no_tensorboard = False  # (said once a process, not once a run)


class Point(NamedTuple):
    """One value of one metric: a row of the long table, less the run id."""

    source: str
    metric: str
    step: float
    time: float
    value: float


def _whole_lines(path: Path) -> list[str]:
    """The file's complete lines: a last one without its newline is being written, or was
    cut by a crash."""
    text = path.read_bytes().decode(errors="replace")
    return text.split("\n")[:-1]


def _number(value: object) -> float | None:
    """A JSON value as a float (null: NaN); None for what is not a number."""
    if value is None:
        return math.nan
    if isinstance(value, (int, float)):
        return float(value)
    return None


def read_metrics_jsonl(path: Path, metrics: Metrics = None) -> list[Point]:
    """The points of a ``metrics.jsonl`` (only ``metrics``, if given); a line without a step
    gets its line number."""
    points: list[Point] = []
    for index, line in enumerate(_whole_lines(path)):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        step = _number(record.pop("step", None))
        when = _number(record.pop("time", None))
        step = float(index) if step is None or math.isnan(step) else step
        when = math.nan if when is None else when
        points.extend(Point(METRICS_JSONL, name, step, when, value)
                      for name, value in ((n, _number(v)) for n, v in record.items()
                                          if metrics is None or n in metrics)
                      if value is not None)
    return points


def _csv_number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def read_progress_csv(path: Path, metrics: Metrics = None) -> list[Point]:
    """The points of an rlkit ``progress.csv``: every numeric column (only ``metrics``, if
    given), against the ``Epoch`` (or ``epoch``) column, else the row's number. It records no
    times (NaN)."""
    rows = list(csv.reader(io.StringIO("\n".join(_whole_lines(path)))))
    if not rows:
        return []
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    step_at = next((header.index(c) for c in CSV_STEP_COLUMNS if c in header), None)
    wanted = {i for i, name in enumerate(header)
              if i != step_at and (metrics is None or name in metrics)}
    points: list[Point] = []
    for index, row in enumerate(body):
        step = _csv_number(row[step_at]) if step_at is not None else None
        step = float(index) if step is None else step
        points.extend(Point(PROGRESS_CSV, name, step, math.nan, value)
                      for i, (name, value) in enumerate(zip(header, map(_csv_number, row),
                                                            strict=True))
                      if i in wanted and value is not None)
    return points


def read_tensorboard(folder: Path, metrics: Metrics = None) -> list[Point]:
    """The scalars of the TensorBoard event files in ``folder`` (not below it; only the tags
    in ``metrics``, if given): those written as ``simple_value`` (torch's ``add_scalar``,
    tensorboardX) and one-value tensors (``new_style=True``, TensorFlow 2)."""
    what = "reading TensorBoard event files"
    accumulators = needed("tensorboard.backend.event_processing.event_accumulator", what,
                          "tensorboard", "tensorboard")
    tensor_util = needed("tensorboard.util.tensor_util", what, "tensorboard", "tensorboard")
    events = accumulators.EventAccumulator(str(folder), size_guidance={
        accumulators.SCALARS: 0, accumulators.TENSORS: 0})  # (0: keep every value)
    events.Reload()
    tags = {kind: [t for t in found if metrics is None or t in metrics]
            for kind, found in events.Tags().items() if isinstance(found, list)}
    points = [Point(TENSORBOARD, tag, float(e.step), e.wall_time, e.value)
              for tag in tags.get(accumulators.SCALARS, []) for e in events.Scalars(tag)]
    for tag in tags.get(accumulators.TENSORS, []):
        for e in events.Tensors(tag):
            array = tensor_util.make_ndarray(e.tensor_proto)
            if array.size == 1 and array.dtype.kind in "fiub":
                points.append(Point(TENSORBOARD, tag, float(e.step), e.wall_time,
                                    float(array.reshape(-1)[0])))
    return points


def event_folders(run_dir: Path) -> list[Path]:
    """The folders of ``run_dir`` holding TensorBoard event files (not the bundle's code or
    the checkpoints)."""
    found = []
    for folder, subfolders, files in os.walk(run_dir):
        if folder == str(run_dir):
            subfolders[:] = [d for d in subfolders if d not in (BUNDLE_DIR, CHECKPOINT_DIR)]
        if any(name.startswith(EVENTS_PREFIX) for name in files):
            found.append(Path(folder))
    return sorted(found)


def _all_points(run_dir: Path, metrics: Metrics) -> Iterator[Point]:
    """The points of each format in ``run_dir``, in the order of SOURCES."""
    path = run_dir / METRICS_JSONL
    if path.is_file():
        yield from read_metrics_jsonl(path, metrics)
    yield from _points_besides_jsonl(run_dir, metrics)


def _points_besides_jsonl(run_dir: Path, metrics: Metrics) -> Iterator[Point]:
    """The points of progress.csv and the event files in ``run_dir``. Event files found
    where the tensorboard package is missing are passed over with a warning (once a process)
    saying what to install."""
    global _warned_no_tensorboard
    path = run_dir / PROGRESS_CSV
    if path.is_file():
        yield from read_progress_csv(path, metrics)
    for folder in event_folders(run_dir):
        try:
            yield from read_tensorboard(folder, metrics)
        except ImportError as exc:
            if not _warned_no_tensorboard:
                _warned_no_tensorboard = True
                warnings.warn(f"TensorBoard event files (first in {folder}) are passed over: "
                              f"{exc}", stacklevel=3)
            return


def read_run(run_dir: Path, metrics: Metrics = None) -> Iterator[Point]:
    """The metric points in a run folder (only ``metrics``, if given), each metric's from the
    first format of SOURCES that holds it."""
    taken: dict[str, str] = {}  # metric -> the format it is taken from
    for point in _all_points(run_dir, metrics):
        if taken.setdefault(point.metric, point.source) == point.source:
            yield point


def last_points(points: Iterable[Point]) -> dict[str, tuple[float, float]]:
    """Each metric's (step, value) at its largest step (of equal steps, the last written)."""
    last: dict[str, tuple[float, float]] = {}
    for point in points:
        if point.metric not in last or point.step >= last[point.metric][0]:
            last[point.metric] = (point.step, point.value)
    return last


Series = tuple[list[float], list[float]]  # a metric's steps and values, in the order written
_JSON_NUMBERS = frozenset({int, float, bool, type(None)})


def _jsonl_series(path: Path) -> dict[str, Series] | None:
    """:func:`read_series` of a metrics.jsonl whose lines all read and whose values are all
    numbers or null, parsed in one go; None where the line-by-line reader is needed."""
    lines = _whole_lines(path)
    try:
        records = json.loads("[" + ",".join(lines) + "]")
    except ValueError:  # (a line that does not read, or an empty one)
        return None
    if not all(type(r) is dict for r in records):
        return None
    logged_steps = [_number(r.get("step")) if type(r.get("step")) in _JSON_NUMBERS else None
                    for r in records]
    steps = [float(i) if s is None or math.isnan(s) else s for i, s in enumerate(logged_steps)]
    found: dict[str, Series] = {}
    for name in dict.fromkeys(k for r in records for k in r):
        if name in ("step", "time"):
            continue
        logged = [(i, r[name]) for i, r in enumerate(records) if name in r]
        if not {type(v) for _, v in logged} <= _JSON_NUMBERS:
            return None
        found[name] = ([steps[i] for i, _ in logged],
                       [math.nan if v is None else float(v) for _, v in logged])
    return found


def _read_series(run_dir: Path) -> dict[str, Series]:
    path = run_dir / METRICS_JSONL
    fast = _jsonl_series(path) if path.is_file() else {}
    found: dict[str, Series] = {} if fast is None else dict(fast)
    points = read_run(run_dir) if fast is None else _points_besides_jsonl(run_dir, None)
    for point in points:
        if fast is None or point.metric not in fast:
            steps, values = found.setdefault(point.metric, ([], []))
            steps.append(point.step)
            values.append(point.value)
    return found


def _signature(run_dir: Path) -> tuple:
    """What changes when a run folder's metric files do."""
    files = [run_dir / METRICS_JSONL, run_dir / PROGRESS_CSV]
    files += [f for d in event_folders(run_dir) for f in sorted(d.iterdir())]
    found = []
    for path in files:
        try:
            stat = os.stat(path)
        except OSError:
            continue
        found.append((str(path), stat.st_mtime_ns, stat.st_size))
    return tuple(found)


_kept: dict[Path, tuple[tuple, dict[str, Series]]] = {}  # run folder -> its files, series
CACHED_FOLDERS = 4000


def read_series(run_dir: Path) -> dict[str, Series]:
    """Every metric of a run folder as its steps and values (what :func:`read_run` gives,
    grouped by metric; quicker for a plain metrics.jsonl). Kept for the process, and read
    again when the folder's metric files change (a dashboard asks again and again); the
    least recently read folders are dropped past CACHED_FOLDERS."""
    signature = _signature(run_dir)
    held = _kept.pop(run_dir, None)
    found = held[1] if held and held[0] == signature else _read_series(run_dir)
    _kept[run_dir] = (signature, found)
    while len(_kept) > CACHED_FOLDERS:
        _kept.pop(next(iter(_kept)))
    return found


def last_values(run_dir: Path) -> dict[str, float]:
    """Each metric's last value in a run folder: at its largest step, of equal steps the last
    written, each metric from the first format of SOURCES that holds it (what
    :func:`read_run` gives, from :func:`read_series`)."""
    last = {}
    for metric, (steps, values) in read_series(run_dir).items():
        top = max(steps)
        last[metric] = values[len(steps) - 1 - steps[::-1].index(top)]
    return last
