"""Line charts of a metric's history as SVG geometry, computed on the server: no chart library
and no script; a template draws a :class:`Chart` as an ``<svg>``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from easylaunch.results.readers import Point

WIDTH, HEIGHT = 420, 220
LEFT, RIGHT, TOP, BOTTOM = 60, 12, 12, 30  # margins around the plot area
MAX_MARKERS = 200  # a longer series is drawn as a line alone


@dataclass(frozen=True)
class Chart:
    """One metric's curve in a WIDTH x HEIGHT box: the polyline, its points as markers (short
    series), axis ticks as (position, label), and the last value; or, for a series that could
    not be drawn, why (``failed``)."""

    title: str
    line: str  # "x,y x,y ..." for <polyline points>
    markers: list[tuple[float, float]]
    x_ticks: list[tuple[float, str]]
    y_ticks: list[tuple[float, str]]
    points: int
    last: str
    failed: str | None = None
    width: int = WIDTH
    height: int = HEIGHT
    left: int = LEFT
    top: int = TOP
    right: int = WIDTH - RIGHT
    bottom: int = HEIGHT - BOTTOM


def _share(value: float, lo: float, hi: float) -> float:
    """Where ``value`` lies from ``lo`` (0) to ``hi`` (1); halves first, so that spans wider
    than the largest float (-1e308 to 1e308) do not overflow."""
    return (value / 2 - lo / 2) / (hi / 2 - lo / 2)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) within [lo, hi]."""
    raw = hi / count - lo / count
    if not (hi > lo and math.isfinite(raw) and raw > 0):  # (no span, or none a float holds)
        return [lo] if math.isfinite(lo) else []
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int(hi / step - first / step + 1e-9) + 1)]


def label(value: float) -> str:
    """A short axis label: ``0.001``, ``2.5e+04``, ``120``."""
    return f"{value:.4g}"


def thin(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points of a line, sorted by x, that draw it as all of them do: in each pixel column
    its first, lowest, highest and last (at most four a column, however long the series)."""
    kept: list[tuple[float, float]] = []
    for _, column in itertools.groupby(points, key=lambda p: int(p[0])):
        group = list(column)
        ys = [y for _, y in group]
        picks = {0, ys.index(min(ys)), ys.index(max(ys)), len(group) - 1}
        kept.extend(group[i] for i in sorted(picks))
    return kept


def line_chart(title: str, xs: Sequence[float], ys: Sequence[float]) -> Chart | None:
    """The chart of ``ys`` against ``xs`` (points that are not finite numbers left out); None
    when no point is left."""
    pairs = sorted((float(x), float(y)) for x, y in zip(xs, ys, strict=True)
                   if math.isfinite(x) and math.isfinite(y))
    if not pairs:
        return None
    x_lo, x_hi = pairs[0][0], pairs[-1][0]
    y_lo, y_hi = min(y for _, y in pairs), max(y for _, y in pairs)
    if y_hi == y_lo:  # a flat line sits in the middle
        pad = abs(y_lo) * 0.1 or 1.0
        y_lo, y_hi = y_lo - pad, y_hi + pad
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    right, bottom = WIDTH - RIGHT, HEIGHT - BOTTOM

    def px(x: float) -> float:
        return round(LEFT + _share(x, x_lo, x_hi) * (right - LEFT), 1)

    def py(y: float) -> float:
        return round(bottom - _share(y, y_lo, y_hi) * (bottom - TOP), 1)

    points = [(px(x), py(y)) for x, y in pairs]
    return Chart(
        title=title, line=" ".join(f"{x},{y}" for x, y in thin(points)),
        markers=points if len(points) <= MAX_MARKERS else [],
        x_ticks=[(px(t), label(t)) for t in nice_ticks(x_lo, x_hi)],
        y_ticks=[(py(t), label(t)) for t in nice_ticks(y_lo, y_hi)],
        points=len(points), last=label(pairs[-1][1]))


def metric_charts(points: Iterable[Point]) -> list[Chart]:
    """A chart per metric of a run's points (as ``read_run`` gives them: each metric's from
    one format), against the step, in the order first logged. A series that cannot be drawn
    gets a chart saying why (the others, and the page, still show)."""
    found: dict[str, list[Point]] = {}  # metric -> its points
    for point in points:
        found.setdefault(point.metric, []).append(point)
    charts = []
    for metric, series in found.items():
        try:
            chart = line_chart(metric, [p.step for p in series], [p.value for p in series])
        except Exception as exc:  # (one series that cannot be drawn must not hide the run)
            chart = Chart(metric, "", [], [], [], len(series), "-",
                          failed=f"{type(exc).__name__}: {exc}")
        if chart is not None:
            charts.append(chart)
    return charts
