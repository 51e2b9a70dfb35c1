"""What the sweep and compare pages show, as plain data: a sweep's results table with names a
person reads, runs' curves for the browser's chart, and hyperparameters against a metric.
Built on ``load_sweep`` and the readers the CLI uses."""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easylaunch.dashboard.curves import align
from easylaunch.dashboard.hparams import Parallel, parallel
from easylaunch.dashboard.views import is_open, registered
from easylaunch.errors import EasyLaunchError
from easylaunch.results.readers import last_values, read_series
from easylaunch.results.sweep import (
    CUT_SHORT,
    RUN_COLUMNS,
    load_sweep,
    metrics_folder,
    variant_of,
)
from easylaunch.settings import ConfigArg
from easylaunch.tracking import listing
from easylaunch.tracking.refresh import STATES, refresh_entries
from easylaunch.tracking.registry import Registry

MAX_CURVES = 500  # runs one chart draws at most
RUN_TITLES = {"run_id": "run", "state": "state", "error": "why", "note": "note",
              "restarts": "restarts", "runtime_s": "time run", "job_id": "job"}  # shown first
LIVE_FIELDS = {"state": "state", "error": "reason", "runtime_s": "duration"}


@dataclass(frozen=True)
class Column:
    key: str  # load_sweep's name
    title: str  # what the header says


@dataclass(frozen=True)
class Cell:
    text: str
    sort: str  # what the column sorts by (a number's whole value)
    title: str  # shown on hover: the whole value


@dataclass(frozen=True)
class SweepRow:
    id: str
    open: bool
    reason: str  # why it ended: its error, else its state ("": open)
    cells: list[Cell]


@dataclass(frozen=True)
class Ended:
    """One "why runs ended" button: a reason (or the state of runs that ended without one),
    how many runs ended so, and whether it is a state."""

    reason: str
    runs: int
    is_state: bool


@dataclass(frozen=True)
class SweepView:
    """A sweep's results table (the run first), the metrics it holds, the variant keys that
    differ, and why its runs ended, commonest first."""

    sweep: str
    exp_name: str
    counts: str
    columns: list[Column]
    rows: list[SweepRow]
    metrics: list[str]
    keys: list[str]
    reasons: list[Ended]


def title(column: str) -> str:
    """A load_sweep column as a header reads: ``loss (last)``, ``lr``, ``acc (result)``."""
    if column in RUN_TITLES:
        return RUN_TITLES[column]
    for prefix, kind in (("metric.", "last"), ("result.", "result"), ("variant.", "variant")):
        if column.startswith(prefix):
            return f"{column.removeprefix(prefix)} ({kind})"
    return column


def _cell(column: str, value: Any) -> Cell:  # (a DataFrame's cell: numpy's scalars too)
    import pandas as pd

    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return Cell("", "", "")
    if column == "runtime_s":
        return Cell(listing.duration(float(value)), repr(float(value)), "")
    if isinstance(value, float):
        return Cell(listing.rounded(value), repr(value), repr(value))
    if isinstance(value, (int, bool)):
        return Cell(str(value), str(int(value)), "")
    return Cell(str(value), str(value), str(value))


def _why(state: str, error: object) -> str:
    """Why a run ended: its error, else its state ("" while it is open)."""
    if is_open(state):
        return ""
    return error if isinstance(error, str) and error else state.split(" ", 1)[0]


def sweep_view(sweep: str, config: ConfigArg) -> SweepView:
    """The runs of ``sweep`` (its id or start) as ``load_sweep`` reads them, newest first."""
    full = load_sweep(sweep, config=config)
    variant = [c for c in full.columns if c not in RUN_COLUMNS
               and not c.startswith(("result", "metric."))]
    table = full[[*RUN_TITLES, *(c for c in full.columns if c not in RUN_COLUMNS)]]
    table = table.dropna(axis=1, how="all")  # (a note or job id no run has)
    rows = [SweepRow(run["run_id"], is_open(run["state"]), _why(run["state"], run["error"]),
                     [_cell(c, record[c]) for c in table.columns])
            for run, record in zip(full[["run_id", "state", "error"]].to_dict("records"),
                                   table.to_dict("records"), strict=True)]
    found = collections.Counter(r.reason for r in rows if r.reason)
    return SweepView(
        sweep=full["sweep"].iloc[0], exp_name=", ".join(full["exp_name"].unique()),
        counts=listing.counts(list(full["state"])),
        columns=[Column(c, title(c)) for c in table.columns], rows=rows,
        metrics=[c.removeprefix("metric.") for c in table.columns if c.startswith("metric.")],
        keys=[c for c in variant if full[c].astype(str).nunique() > 1],
        reasons=[Ended(why, n, why in STATES) for why, n in found.most_common()])


def chosen_runs(registry: Registry, ids: Sequence[str], sweep: str | None) -> list:
    """The runs a chart draws, refreshed: a sweep's (its id or start; at most MAX_CURVES),
    else those of ``ids`` found in the registry."""
    entries = registry.list(sweep=registry.find_sweep(sweep), limit=MAX_CURVES)[0] if sweep \
        else registered(registry, ids)
    if not entries:
        raise EasyLaunchError("no run to draw: give runs=ID,ID,... or sweep=ID")
    return refresh_entries(registry, entries)


def labels(shown: Sequence[listing.Shown]) -> list[str]:
    """What a legend calls each run: the variant keys that tell it from the others, its
    command, and its experiment where the runs come from several (else its id); each name
    once: runs that these leave alike get their ids too."""
    variants = [listing.shown_variant(s.entry) for s in shown]
    keys = listing.differing_keys(variants)
    several = len({s.entry.exp_name for s in shown}) > 1
    found = []
    for s, values in zip(shown, variants, strict=True):
        parts = [s.entry.exp_name if several else "",
                 "  ".join(f"{k}={values[k]}" for k in keys if k in values),
                 f"$ {s.entry.command}" if s.entry.command and len(shown) > 1 else ""]
        found.append(" · ".join(p for p in parts if p) or s.entry.id)
    alike = collections.Counter(found)
    return [f"{label} · {s.entry.id}" if alike[label] > 1 else label
            for s, label in zip(shown, found, strict=True)]


def ended_early(shown: listing.Shown) -> bool:
    """Whether a run ended without succeeding (failed, timed out, cancelled): the charts draw
    it apart."""
    return shown.state.split(" ", 1)[0] in CUT_SHORT


def curves(shown: Sequence[listing.Shown], metrics: Sequence[str] | None, lo: float | None,
           hi: float | None) -> dict:
    """The runs' curves as the page's chart takes them (JSON): ``runs`` (id, label (with its
    state where it ended early), experiment, sweep, state, whether open, whether it ended early:
    drawn apart), every metric they logged (``metrics``) and, for
    each of ``metrics`` (None: the first only; ``["*"]``: all), the runs' values on one step axis
    within [lo, hi] (all: None), thinned for a first draw (``per_point`` > 1)."""
    series = [read_series(metrics_folder(s, fetch=False)) for s in shown]
    logged = list(dict.fromkeys(m for found in series for m in found))
    wanted = logged[:1] if metrics is None else logged if list(metrics) == ["*"] \
        else [m for m in metrics if m in logged]
    drawn = {}
    for metric in wanted:
        aligned = align([found.get(metric) for found in series], lo, hi)
        drawn[metric] = {"x": aligned.x, "ys": aligned.ys, "per_point": aligned.per_point}
    return {"runs": [{"id": s.entry.id, "exp": s.entry.exp_name, "sweep": s.entry.sweep or "",
                      "label": f"{label} ({s.state.split()[0]})" if ended_early(s) else label,
                      "state": s.state_text, "open": is_open(s.state), "apart": ended_early(s)}
                     for s, label in zip(shown, labels(shown), strict=True)],
            "metrics": logged, "curves": drawn}


def hparams_view(registry: Registry, sweep: str, metric: str | None) -> Parallel | None:
    """Parallel coordinates of a sweep's runs: the variant keys that differ, then ``metric``'s
    last value (None: the first metric logged); None when no key differs."""
    shown = chosen_runs(registry, [], sweep)
    variants = [listing.flat_items(variant_of(s.entry)) for s in shown]
    keys = listing.differing_keys(variants)
    if not keys:
        return None
    last = [_last_values(metrics_folder(s, fetch=False)) for s in shown]
    logged = list(dict.fromkeys(m for values in last for m in values))
    metric = metric if metric in logged else (logged[0] if logged else "(no metric)")
    return parallel([(s.entry.id, v, values.get(metric))
                     for s, v, values in zip(shown, variants, last, strict=True)],
                    keys, metric, {s.entry.id: s.state.split()[0] for s in shown if ended_early(s)})


def _last_values(folder: Path) -> Mapping[str, float]:
    return {k: v for k, v in last_values(folder).items() if math.isfinite(v)}
