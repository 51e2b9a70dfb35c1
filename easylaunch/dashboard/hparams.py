"""Hyperparameters against a result: parallel coordinates as SVG geometry, laid out on the
server (a template draws a :class:`Parallel`). One axis per variant key that differs within
the runs, then the metric's last value; one line per run, coloured by that value, but for runs
that ended early (failed, timed out, cancelled): grey and dashed, outside the colour scale."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from easylaunch.tracking.listing import rounded

WIDTH, HEIGHT = 860, 300
LEFT, RIGHT, TOP, BOTTOM = 70, 70, 28, 16  # margins around the axes
MAX_AXES = 10


@dataclass(frozen=True)
class Axis:
    """A vertical axis: its x, name and ticks as (y, label)."""

    x: float
    name: str
    ticks: list[tuple[float, str]]


@dataclass(frozen=True)
class Line:
    """One run's line: its points, colour and what hovering it shows."""

    run_id: str
    points: str  # "x,y x,y ..." for <polyline points>
    colour: str
    title: str
    apart: bool = False  # it ended early: grey and dashed, not coloured by its value


@dataclass(frozen=True)
class Parallel:
    axes: list[Axis]
    lines: list[Line]
    metric: str
    width: int = WIDTH
    height: int = HEIGHT
    top: int = TOP
    bottom: int = HEIGHT - BOTTOM

    @property
    def apart(self) -> int:
        """How many lines are drawn apart (runs that ended early)."""
        return sum(line.apart for line in self.lines)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) within [lo, hi]."""
    raw = hi / count - lo / count
    if not (hi > lo and math.isfinite(raw) and raw > 0):  # (no span, or none a float holds)
        return [lo] if math.isfinite(lo) else []
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int(hi / step - first / step + 1e-9) + 1)]


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)


class _Scale:
    """Where a value sits on an axis, from 0 (bottom) to 1 (top): numbers on a linear scale,
    or a log one when all are positive and span 100x or more; other values as categories,
    evenly spaced in sorted order."""

    def __init__(self, values: Sequence[object]) -> None:
        present = [v for v in values if v is not None]
        self.numeric = bool(present) and all(_is_number(v) for v in present)
        if self.numeric:
            numbers = [v for v in present if _is_number(v)]  # (all of them)
            lo, hi = min(numbers), max(numbers)
            self.log = lo > 0 and hi / lo >= 100
            self.lo, self.hi = (math.log10(lo), math.log10(hi)) if self.log else (lo, hi)
            if self.hi == self.lo:
                self.lo, self.hi = self.lo - 1, self.hi + 1
        else:
            self.categories = sorted({str(v) for v in present}, key=_natural)

    def share(self, value: object) -> float:
        if not self.numeric:
            names = self.categories
            return names.index(str(value)) / (len(names) - 1) if len(names) > 1 else 0.5
        assert isinstance(value, (int, float))  # (a numeric scale is given only its numbers)
        v = math.log10(value) if self.log else value
        return (v / 2 - self.lo / 2) / (self.hi / 2 - self.lo / 2)

    def ticks(self) -> list[tuple[float, str]]:
        if not self.numeric:
            return [(self.share(c), c) for c in self.categories[:12]]
        if self.log:
            return [(self.share(10.0 ** p), rounded(10.0 ** p))
                    for p in range(math.ceil(self.lo), math.floor(self.hi) + 1)]
        return [(self.share(t), rounded(float(t))) for t in nice_ticks(self.lo, self.hi)]


def _natural(text: str) -> tuple:
    try:
        return (0, float(text), text)
    except ValueError:
        return (1, 0.0, text)


def colour(share: float | None) -> str:
    """Blue (lowest) to red (highest); grey for a run without the metric or apart."""
    if share is None:
        return "hsl(0, 0%, 70%)"
    return f"hsl({240 - 240 * share:.0f}, 70%, 45%)"


def parallel(runs: Sequence[tuple[str, Mapping[str, object], float | None]],
             keys: Sequence[str], metric: str, apart: Mapping[str, str] | None = None
             ) -> Parallel:
    """Parallel coordinates of ``runs`` (id, flattened variant, the metric's last value or
    None) over ``keys`` (at most MAX_AXES - 1 of them) and ``metric``. ``apart``: the runs
    that ended early, by id, with their state: their lines are placed on the axes as the
    others' but grey, and the colour scale spans the other runs' values only."""
    apart = apart or {}
    names = [*keys[:MAX_AXES - 1], metric]
    columns = [[variant.get(k) for _, variant, _ in runs] for k in keys[:MAX_AXES - 1]]
    columns.append([value for *_, value in runs])
    scales = [_Scale(c) for c in columns]
    span = (WIDTH - LEFT - RIGHT) / max(len(names) - 1, 1)
    xs = [LEFT + i * span for i in range(len(names))] if len(names) > 1 else [WIDTH / 2]
    bottom = HEIGHT - BOTTOM

    def y(share: float) -> float:
        return round(bottom - share * (bottom - TOP), 1)

    axes = [Axis(x, name, [(y(s), text) for s, text in scale.ticks()])
            for x, name, scale in zip(xs, names, scales, strict=True)]
    colours = _Scale([v for (run_id, _, v) in runs if run_id not in apart])
    lines = []
    for row, (run_id, _, value) in enumerate(runs):
        points = [f"{x:.1f},{y(scale.share(column[row]))}"
                  for x, scale, column in zip(xs, scales, columns, strict=True)
                  if column[row] is not None]
        shown = [f"{n}={rounded(v)}"
                 for n, v in zip(names, (c[row] for c in columns), strict=True)
                 if v is not None]
        share = colours.share(value) if value is not None and colours.numeric \
            and run_id not in apart else None
        state = f" ({apart[run_id]})" if run_id in apart else ""
        lines.append(Line(run_id, " ".join(points), colour(share),
                          f"{run_id}{state}: {'  '.join(shown) or 'no values'}",
                          run_id in apart))
    return Parallel(axes, lines, metric)
