"""Learning curves as the browser's chart draws them: runs' metric histories on one shared
step axis (uPlot's aligned data), thinned on the server for the first draw and read whole
within a zoomed range."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from easylaunch.results.readers import Series

BUCKETS = 400  # points per curve at most, for a first draw (a chart is ~800 px wide)
DIGITS = 7  # significant digits a value keeps on the way to the browser


@dataclass(frozen=True)
class Aligned:
    """Curves on one step axis: ``x``, and for each run its values there (None: no value at
    that step), each point the mean of ``per_point`` steps on average (1: every point)."""

    x: list[float | None]  # (as _rounded gives them: an infinite step is None)
    ys: list[list[float | None]]
    per_point: float


def _rounded(values: np.ndarray) -> list[float | None]:
    """Values for JSON: DIGITS significant digits; NaN and infinities as None (a gap)."""
    return [float(f"{v:.{DIGITS}g}") if math.isfinite(v) else None for v in values.tolist()]


def _within(steps: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """A mask of the steps in [lo, hi] and one on either side (a zoomed line runs on to
    the chart's edges)."""
    inside = (steps >= lo) & (steps <= hi)
    before, after = np.flatnonzero(steps < lo), np.flatnonzero(steps > hi)
    if len(before):
        inside[before[np.argmax(steps[before])]] = True
    if len(after):
        inside[after[np.argmin(steps[after])]] = True
    return inside


def align(curves: Sequence[Series | None], lo: float | None = None, hi: float | None = None,
          buckets: int = BUCKETS) -> Aligned:
    """``curves`` (a run's steps and values; None: the run lacks the metric) on one axis,
    within [lo, hi] when given. Where more than ``2 * buckets`` distinct steps are in range,
    the range is cut into ``buckets`` equal spans and each curve drawn through the mean of its
    values in each span (at the mean step of all curves there); else every point is kept (of
    a step written twice, the last value)."""
    arrays = [(np.asarray(c[0], float), np.asarray(c[1], float)) if c else None
              for c in curves]
    present = [a for a in arrays if a is not None and len(a[0])]
    if not present:
        return Aligned([], [[] for _ in curves], 1.0)
    everywhere = np.concatenate([s for s, _ in present])
    lo = float(everywhere.min()) if lo is None else lo
    hi = float(everywhere.max()) if hi is None else hi
    masks = [None if a is None else _within(a[0], lo, hi) for a in arrays]
    kept = [None if a is None else (a[0][m], a[1][m]) for a, m in zip(arrays, masks, strict=True)]
    steps = np.unique(np.concatenate([k[0] for k in kept if k is not None]))
    if len(steps) <= 2 * buckets:
        ys = []
        for k in kept:
            y = np.full(len(steps), np.nan)
            if k is not None:
                y[np.searchsorted(steps, k[0])] = k[1]  # (of repeated steps, the last)
            ys.append(_rounded(y))
        return Aligned(_rounded(steps), ys, 1.0)
    edges = np.linspace(steps[0], steps[-1], buckets + 1)

    def bucket_of(s: np.ndarray) -> np.ndarray:
        return np.clip(np.searchsorted(edges, s, side="right") - 1, 0, buckets - 1)

    where = bucket_of(steps)
    counts = np.bincount(where, minlength=buckets)
    used = counts > 0
    x = np.bincount(where, weights=steps, minlength=buckets)[used] / counts[used]
    ys = []
    for k in kept:
        if k is None:
            ys.append([None] * int(used.sum()))
            continue
        finite = np.isfinite(k[1])
        at = bucket_of(k[0][finite])
        n = np.bincount(at, minlength=buckets)
        total = np.bincount(at, weights=k[1][finite], minlength=buckets)
        with np.errstate(invalid="ignore", divide="ignore"):
            ys.append(_rounded((total / n)[used]))
    return Aligned(_rounded(x), ys, len(steps) / int(used.sum()))
