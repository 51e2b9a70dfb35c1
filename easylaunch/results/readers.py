"""Reading the metrics a run folder holds, as points of one long table.

Three formats: ``metrics.jsonl`` (``easylaunch.log_metrics``), ``progress.csv`` as rlkit writes
it (a header row of names, one row per epoch) and TensorBoard event files
(``events.out.tfevents.*``, anywhere in the folder; read with the ``tensorboard`` package,
``pip install 'easylaunch[tensorboard]'``). A last line cut short (a run writing, or one that
crashed mid-write) is left out, and so is any line that does not read.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from easylaunch.bundle import BUNDLE_DIR
from easylaunch.results.errors import need
from easylaunch.runner import CHECKPOINT_DIR, METRICS_JSONL

PROGRESS_CSV = "progress.csv"
EVENTS_PREFIX = "events.out.tfevents."
CSV_STEP_COLUMNS = ("Epoch", "epoch")  # rlkit's names for the step, first found wins
SOURCES = ("metrics.jsonl", "progress.csv", "tensorboard")  # in the order a name is taken from


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


def read_metrics_jsonl(path: Path) -> list[Point]:
    """The points of a ``metrics.jsonl``; a line without a step gets its line number."""
    points = []
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
                      for name, value in ((n, _number(v)) for n, v in record.items())
                      if value is not None)
    return points


def _csv_number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def read_progress_csv(path: Path) -> list[Point]:
    """The points of an rlkit ``progress.csv``: every numeric column, against the ``Epoch``
    (or ``epoch``) column, else the row's number. It records no times (NaN)."""
    rows = list(csv.reader(io.StringIO("\n".join(_whole_lines(path)))))
    if not rows:
        return []
    header, body = rows[0], [r for r in rows[1:] if len(r) == len(rows[0])]
    step_at = next((header.index(c) for c in CSV_STEP_COLUMNS if c in header), None)
    points = []
    for index, row in enumerate(body):
        step = _csv_number(row[step_at]) if step_at is not None else None
        step = float(index) if step is None else step
        points.extend(Point(PROGRESS_CSV, name, step, math.nan, value)
                      for i, (name, value) in enumerate(zip(header, map(_csv_number, row),
                                                            strict=True))
                      if i != step_at and value is not None)
    return points


def read_tensorboard(folder: Path) -> list[Point]:
    """The scalars of the TensorBoard event files in ``folder`` (not below it): those written
    as ``simple_value`` (torch's ``add_scalar``, tensorboardX) and one-value tensors
    (``new_style=True``, TensorFlow 2)."""
    accumulators = need("tensorboard.backend.event_processing.event_accumulator",
                        "tensorboard", "to read TensorBoard event files")
    tensor_util = need("tensorboard.util.tensor_util", "tensorboard",
                       "to read TensorBoard event files")
    events = accumulators.EventAccumulator(str(folder), size_guidance={
        accumulators.SCALARS: 0, accumulators.TENSORS: 0})  # (0: keep every value)
    events.Reload()
    tags = events.Tags()
    points = [Point("tensorboard", tag, float(e.step), e.wall_time, e.value)
              for tag in tags.get(accumulators.SCALARS, []) for e in events.Scalars(tag)]
    for tag in tags.get(accumulators.TENSORS, []):
        for e in events.Tensors(tag):
            array = tensor_util.make_ndarray(e.tensor_proto)
            if array.size == 1 and array.dtype.kind in "fiub":
                points.append(Point("tensorboard", tag, float(e.step), e.wall_time,
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


def read_run(run_dir: Path) -> Iterator[Point]:
    """Every metric point in a run folder, from each format it holds. Event files found where
    the tensorboard package is missing are passed over with a warning saying what to install."""
    for name, reader in ((METRICS_JSONL, read_metrics_jsonl), (PROGRESS_CSV, read_progress_csv)):
        path = run_dir / name
        if path.is_file():
            yield from reader(path)
    for folder in event_folders(run_dir):
        try:
            yield from read_tensorboard(folder)
        except ImportError as exc:
            warnings.warn(f"{folder}: {exc}", stacklevel=2)
            return
