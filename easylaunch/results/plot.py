"""Learning curves of a sweep's runs: ``plot_sweep`` and the ``easylaunch plot`` command.

The runs are grouped by one variant key; each group is drawn as the mean across its runs (the
other keys: seeds, mostly) at each step, with the band from the lowest to the highest run
shaded; runs that ended early (failed, timed out, cancelled) are drawn apart, dashed, unless
asked for in the means. The figure is drawn without pyplot (safe from any thread, no window)
and written as a PNG; the command also shows it where a display and a GUI backend exist.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Hashable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, NamedTuple

from easylaunch.errors import EasyLaunchError, did_you_mean, needed
from easylaunch.results.errors import NoSuchKey, choices
from easylaunch.results.sweep import (
    CUT_SHORT,
    HISTORY_COLUMNS,
    Selection,
    load_histories,
    select,
)
from easylaunch.settings import load_settings
from easylaunch.tracking.listing import counts
from easylaunch.tracking.registry import open_registry

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from easylaunch.settings import ConfigArg

X_AXES = ("step", "time")
NOT_SET = "(not set)"  # the group of runs whose variant lacks the key


class Group(NamedTuple):
    """One group's drawing: its ``name`` (``lr=0.1``), ``curve`` (``x``, the mean, min and max
    across the runs it counts at each step; no rows where it counts none) and ``apart``: each
    run left out of them, by id, as its state and its own ``x`` and ``value`` at each step."""

    name: str
    curve: pd.DataFrame
    apart: dict[str, tuple[str, pd.DataFrame]]


def _curves(points: pd.DataFrame, by: str | None, x: str,
            include_failed: bool = False) -> dict[str, Group]:
    """Per group label, its :class:`Group`. Runs that ended early (a ``state`` in
    CUT_SHORT) are left out of the mean and band, and given apart (``include_failed``: counted
    like the others). A step logged twice in a run (an attempt that redid it) counts once, as
    logged last; ``x="time"`` places each step at the runs' mean seconds since their first
    value."""
    last = points.groupby(["run_id", "step"], sort=False).nth(-1)
    last = last.assign(
        x=last["step"] if x == "step" else
        last["time"] - last.groupby("run_id")["time"].transform("min"),
        apart=False if include_failed or "state" not in last else last["state"].isin(CUT_SHORT))
    keys = last[by].map(lambda v: v if isinstance(v, Hashable) else repr(v)) if by else None
    groups = {}
    for value, group in last.groupby(keys if by else [0] * len(last), dropna=False, sort=False):
        counted = group[~group["apart"]]
        curve = counted.groupby("step").agg(x=("x", "mean"), mean=("value", "mean"),
                                            low=("value", "min"), high=("value", "max"))
        apart = {run: (str(rows["state"].iloc[0]), rows.sort_values("step")[["x", "value"]])
                 for run, rows in group[group["apart"]].groupby("run_id", sort=False)}
        runs = counted["run_id"].nunique()
        groups[value] = (f"{_name(by, value)} ({runs} run{'s' * (runs != 1)})",
                         Group(_name(by, value), curve, apart))
    try:
        order = sorted(groups, key=lambda v: (v != v, v))  # (NaN: the key not set, last)
    except TypeError:
        order = sorted(groups, key=str)
    return dict(groups[value] for value in order)


def _name(by: str | None, value: object) -> str:
    shown = NOT_SET if value != value else value  # (NaN: not set)
    return f"{by}={shown}" if by else "all"


def _draw(axes: Axes, label: str, group: Group, colour: str) -> None:
    """A group's mean with its band shaded; its runs that ended early as thin dashed lines in
    its colour, under one legend entry that counts them."""
    if len(group.curve):
        axes.plot(group.curve["x"], group.curve["mean"], color=colour, label=label)
        axes.fill_between(group.curve["x"], group.curve["low"], group.curve["high"],
                          color=colour, alpha=0.2, linewidth=0)
    states = [state for state, _ in group.apart.values()]
    for index, (_, run) in enumerate(group.apart.values()):
        axes.plot(run["x"], run["value"], color=colour, linestyle="--", linewidth=0.9,
                  alpha=0.8, label=None if index else
                  f"{group.name}: {counts(states)}, not in the mean")


def _default_out(metric: str, by: str | None) -> Path:
    name = f"{metric}-by-{by}" if by else metric
    return Path(re.sub(r"[^\w.=-]+", "_", name).strip("_") + ".png")


def _named(selection: Selection, config: ConfigArg) -> str:
    """The experiments of the selected runs, and the selection where it says more (a sweep
    or run id)."""
    chosen = selection if isinstance(selection, str) else " ".join(selection)
    entries = select(open_registry(load_settings(config).REGISTRY_PATH), selection)
    names = ", ".join(dict.fromkeys(e.exp_name for e in entries))
    return names if names == chosen else f"{names} ({chosen})"


def _plotting(what: str) -> ModuleType:
    """matplotlib, once pandas and it are both there; else MissingExtra naming the extra."""
    needed("pandas", what, "results", "pandas and matplotlib")
    return needed("matplotlib", what, "results", "pandas and matplotlib")


def plot_sweep(selection: Selection, metric: str, by: str | None = None, x: str = "step",
               out: str | os.PathLike | None = None, config: ConfigArg = None,
               include_failed: bool = False) -> Path:
    """Draw ``metric`` of the selected runs (as :func:`load_sweep` selects them) against
    ``x`` (``step``, or ``time``: seconds since each run's first value), one curve per value
    of the variant key ``by`` (nested: ``opt.lr``; None: one curve of all runs): the mean
    across the group's runs with their min-max band shaded. Runs that failed, timed out or
    were cancelled are left out of the means and bands and drawn apart, each a thin dashed
    line in its group's colour (``include_failed``: counted in the means instead). Writes a
    PNG to ``out`` (default: ``<metric>-by-<by>.png`` here) and returns its path. A metric or
    key the runs lack raises :class:`NoSuchMetric` / :class:`NoSuchKey`, listing those there
    are.

    Args:
        selection: ``"lr-sweep"``: an experiment name (or part of one), a sweep id (or its
            start), a run id, or a list of these.
        metric: The metric to draw, as the runs logged it.
        by: ``"lr"``: the variant key whose values make the curves (None: one curve).
        x: ``"step"``, or ``"time"``: seconds since each run's first value.
        out: The PNG's path (None: ``<metric>-by-<by>.png``, or ``<metric>.png`` without
            ``by``, in the current folder).
        config: A settings file's path, or a dict of settings: their registry is read.
        include_failed: Count runs that ended early in the means, not apart.

    Returns:
        The PNG's absolute path.

    Raises:
        NoSuchRun: ``selection`` names no experiment, sweep or run.
        NoSuchMetric: No selected run logged ``metric``.
        NoSuchKey: No selected run's variant has the key ``by``.
        EasyLaunchError: ``x`` is neither ``"step"`` nor ``"time"``, or ``"time"`` for a
            metric logged without times.
        MissingExtra: pandas or matplotlib is not installed (``easylaunch[results]``).
    """
    if x not in X_AXES:
        raise EasyLaunchError(f"x={x!r}: plot against {' or '.join(X_AXES)}")
    matplotlib = _plotting("plot_sweep")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points = load_histories(selection, metrics=[metric], config=config)
    keys = [c for c in points.columns if c not in HISTORY_COLUMNS]
    if by is not None and by not in keys:
        raise NoSuchKey(f"by={by!r} is no variant key of these runs; keys: {choices(keys)}"
                        + did_you_mean(by, keys, cutoff=0.5))
    if x == "time" and points["time"].isna().all():
        raise EasyLaunchError(f"{metric} was logged without times (progress.csv records none): "
                              "plot it against step")
    if x == "time":
        points = points[points["time"].notna()]
    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.subplots()
    groups = _curves(points, by, x, include_failed)
    colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, group) in enumerate(groups.items()):
        _draw(axes, label, group, colours[index % len(colours)])
    apart = any(g.apart for g in groups.values())
    axes.set_title(f"{metric}: {_named(selection, config)}\n"
                   "mean across runs, shaded from min to max"
                   + ("; runs that ended early dashed, apart" if apart else
                      "; runs that ended early included" * include_failed))
    axes.set_xlabel("step" if x == "step" else "seconds since the run's first value")
    if x == "step":  # (whole steps: no tick at 0.5 on a short run)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend(title=by)
    path = Path(out) if out is not None else _default_out(metric, by)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    return path.resolve()


def _show(path: Path) -> None:
    """Show the PNG in a window where a display exists and a GUI backend loads."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return
    import matplotlib.pyplot as plt

    if plt.get_backend().lower() == "agg":  # (pyplot's choice when no GUI toolkit works)
        return
    image = plt.imread(path)
    height, width = image.shape[:2]
    figure = plt.figure(figsize=(width / 100, height / 100), dpi=100)
    figure.figimage(image)
    plt.show()


def plot_command(args: argparse.Namespace) -> int:
    """``easylaunch plot``: write the PNG, say where, and show it where a display exists."""
    _plotting("plot")
    try:
        path = plot_sweep(args.selection, args.metric, by=args.by, x=args.x, out=args.out,
                          config=args.config,
                          include_failed=args.include_failed)
    except NoSuchKey as exc:  # (said with the command's flag)
        raise NoSuchKey(str(exc).replace(f"by={args.by!r}", f"--by {args.by!r}", 1)) from None
    print(f"wrote {path}")
    if not args.no_show:
        _show(path)
    return 0
