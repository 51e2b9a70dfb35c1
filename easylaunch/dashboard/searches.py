"""What a sweep page shows of a search (``easylaunch.run_search``), as plain data: its trials
by state (pruned apart from failed), the best, a row per trial, and the objective over trials
for the browser's chart. Read from the search's ``summary.json``, as ``easylaunch ls`` reads
it (no Optuna)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from easylaunch.tracking import listing
from easylaunch.tracking.registry import Registry
from easylaunch.tracking.searches import summary_of

STATES = ("running", "complete", "pruned", "fail")  # Optuna's trial states, in the order shown


@dataclass(frozen=True)
class Trial:
    number: int
    state: str
    value: float | None  # the objective's (a pruned trial's: where it stopped)
    last_step: int | None
    reason: str
    runs: list[str]  # its runs' ids (a trial run again has several), the last its latest
    variant: str  # the keys the search varies, rounded
    variant_whole: str

    @property
    def value_text(self) -> str:
        return "" if self.value is None else listing.rounded(self.value)


@dataclass(frozen=True)
class SearchView:
    """A search's trials, newest last, and whether it goes on (its page follows it)."""

    id: str
    objective: str
    maximize: bool  # (the direction: whether a higher objective is better)
    finished: int
    n_trials: int
    counts: list[tuple[str, int]]  # trials by state, STATES' order first
    best: Trial | None
    trials: list[Trial]
    open: bool


def search_view(registry: Registry, sweep: str) -> SearchView | None:
    """The search whose trials' runs make ``sweep`` (a sweep's whole id); None where the sweep
    is no search."""
    entries = registry.list(sweep=sweep)[0]
    summary = summary_of(entries[0].log_dir, sweep) if entries else None
    if summary is None:
        return None
    ids = {e.log_dir: e.id for e in entries}
    keys = listing.differing_keys([t["variant"] for t in summary["trials"]])

    def trial(record: Mapping) -> Trial:
        values = listing.flat_items(record["variant"])
        value = record["value"]  # (NaN a pruned trial reported: none, as a chart's gap)
        return Trial(record["number"], record["state"],
                     value if value is None or math.isfinite(value) else None,
                     record["last_step"], record["reason"] or "",
                     [ids[r] for r in record["runs"] if r in ids],
                     "  ".join(f"{k}={listing.rounded(values[k])}" for k in keys if k in values),
                     "  ".join(f"{k}={values[k]}" for k in keys if k in values))

    counts = summary["counts"]
    return SearchView(
        summary["id"], summary["objective"], summary["direction"] == "maximize",
        summary["finished"], summary["n_trials"],
        [(s, counts[s]) for s in (*STATES, *sorted(set(counts) - set(STATES))) if s in counts],
        trial(summary["best"]) if summary["best"] else None,
        sorted((trial(t) for t in summary["trials"]), key=lambda t: t.number),
        bool(counts.get("running")) or summary["finished"] < summary["n_trials"])


def _best_so_far(trials: Sequence[Trial], maximize: bool) -> list[float | None]:
    """The best complete value up to each trial (None before the first)."""
    better = max if maximize else min
    found: list[float | None] = []
    for t in trials:
        last = found[-1] if found else None
        if t.state == "complete" and t.value is not None:
            last = t.value if last is None else better(last, t.value)
        found.append(last)
    return found


def objective_curves(view: SearchView) -> dict:
    """The objective over trials as the page's chart takes a sweep's curves (JSON, see
    :func:`easylaunch.dashboard.sweeps.curves`): x the trial numbers; the best so far (a step
    line), points for the complete trials' values and for the pruned trials' (where each
    stopped); followed while the search goes on."""
    trials = view.trials

    def values(state: str) -> list[float | None]:
        return [t.value if t.state == state else None for t in trials]

    series = [("best", "best so far", "steps", _best_so_far(trials, view.maximize)),
              ("complete", f"complete trials' {view.objective}", "points", values("complete")),
              ("pruned", f"pruned trials' {view.objective} where stopped", "points",
               values("pruned"))]  # (the line first: the points are drawn over it)
    return {"runs": [{"id": key, "label": label, "shape": shape, "open": view.open,
                      "apart": False} for key, label, shape, _ in series],
            "metrics": [view.objective], "counted": f"{len(trials)} of {view.n_trials} trials",
            "curves": {view.objective: {"x": [t.number for t in trials],
                                        "ys": [ys for *_, ys in series], "per_point": 1}}}
