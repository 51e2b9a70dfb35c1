"""A sweep's runs as pandas tables: one row per run (:func:`load_sweep`) and the metric
histories in long form (:func:`load_histories`).

They read what the CLI reads: the registry picks the runs, ``refresh_entries`` brings their
states up to date (as ``easylaunch ls`` does), and each run's folder holds its record, result and
metrics. Runs whose files live elsewhere are read from what their mode brings back: see
:func:`metrics_folder`.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from easylaunch.errors import EasyLaunchError, did_you_mean, needed
from easylaunch.results.errors import NoSuchMetric, choices, named
from easylaunch.results.readers import PROGRESS_CSV, Metrics, last_values, read_run
from easylaunch.runs.record import VARIANT_JSON
from easylaunch.settings import load_settings
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.listing import flat_items, job_label, seconds_run
from easylaunch.tracking.refresh import refresh_entries
from easylaunch.tracking.registry import NoSuchRun, open_registry
from easylaunch.tracking.rows import LARGE_VARIANT_KEY, reason_of
from easylaunch_job.outcome import load_outcome
from easylaunch_job.records import METRICS_JSONL, DamagedRecord, read_json, read_status

if TYPE_CHECKING:
    import pandas as pd

    from easylaunch.settings import ConfigArg
    from easylaunch.tracking.listing import Shown
    from easylaunch.tracking.registry import Entry, Registry

Selection = str | Sequence[str]
RUN_COLUMNS = ("run_id", "exp_name", "sweep", "mode", "state", "note", "error", "restarts",
               "runtime_s", "host", "job_id", "log_dir")
POINT_COLUMNS = ("run_id", "source", "metric", "step", "time", "value")
HISTORY_COLUMNS = (*POINT_COLUMNS, "state")  # load_histories' columns before the variant's
CUT_SHORT = frozenset({"failed", "timeout", "cancelled"})  # states of runs that ended early


class SelectedRun(NamedTuple):
    """A selected run as a refresh saw it, and the folder its metric files are read from."""

    shown: Shown
    folder: Path


def select(registry: Registry, selection: Selection) -> list[Entry]:
    """The runs ``selection`` names, newest first: an experiment name, a sweep id (or its
    start), a run id (or a unique start or end), a part of an experiment name, tried in that
    order; or a list of these (the runs of all of them)."""
    parts = [selection] if isinstance(selection, str) else list(selection)
    if not parts:
        raise NoSuchRun("give an experiment name, a sweep id or run ids")
    found: dict[str, Entry] = {}
    for part in parts:
        found.update((e.id, e) for e in _select_one(registry, part))
    return sorted(found.values(), key=lambda e: e.created, reverse=True)


def _select_one(registry: Registry, part: str) -> list[Entry]:
    """The runs of the experiment ``part``; else of the sweep or the run it names (both: an
    error, as sweep and run ids look alike); else of the experiments it is a part of."""
    if part in registry.experiments():
        return registry.list(exp=part)[0]
    try:
        run: Entry | None = registry.find(part)
    except NoSuchRun as exc:
        run, as_run = None, exc
    if registry.list(sweep=part, limit=0)[1]:  # (some sweep id is or starts with it)
        sweep = registry.find_sweep(part)  # (several: an error listing them)
        if run is not None:
            raise NoSuchRun(f"{part!r} is the start of both run {run.id} ({run.exp_name}) and "
                            f"sweep {sweep}: give more characters")
        return registry.list(sweep=sweep)[0]
    if run is not None:
        return [run]
    in_exp = registry.list(exp=part)[0]
    if in_exp:
        return in_exp
    raise NoSuchRun(f"{part!r} is no experiment, sweep or run ({as_run}); experiments: "
                    f"{choices(registry.experiments(), 10)}"
                    + did_you_mean(part, registry.experiments(), cutoff=0.5))


def metrics_folder(shown: Shown, fetch: bool) -> Path:
    """Where a run's metric files are read from here: its own folder, or, for a run whose
    files live elsewhere (``remote_log_dir``), what its mode brings back. ``fetch``: the whole
    run folder, as ``easylaunch fetch`` does; else the folder the mode reads it from (the one
    a cluster's job writes, where the file system is shared; a remote cluster's runs come back
    whole when they end), with a cloud run's metric files as last synced to the bucket."""
    here = Path(shown.entry.log_dir)
    if shown.entry.remote_log_dir is None:
        return here
    try:
        job = Job.from_run_dir(here)
        if fetch:
            job.fetch()
            return here
        for name in (METRICS_JSONL, PROGRESS_CSV):
            job.mode.readable_log(job.record, name)  # (a cloud run's: copied here from the bucket)
        return job.mode.readable_folder(job.record)
    except (EasyLaunchError, OSError) as exc:
        warnings.warn(f"run {shown.entry.id}: its metrics could not be brought here ({exc}); "
                      "reading what its folder holds", stacklevel=3)
        return here


def runs_of(selection: Selection, fetch: bool = False,
            config: ConfigArg = None) -> list[SelectedRun]:
    """The selected runs, refreshed (states written back to the registry), with the folders
    their metrics are read from."""
    registry = open_registry(load_settings(config).REGISTRY_PATH)
    shown = refresh_entries(registry, select(registry, selection))
    return [SelectedRun(s, metrics_folder(s, fetch)) for s in shown]


def variant_of(entry: Entry) -> dict:
    """The run's variant: the registry's copy, or variant.json for one too large for it (a
    variant.json that cannot be read: an empty variant, with a warning saying why)."""
    if LARGE_VARIANT_KEY not in entry.variant:
        return entry.variant
    path = Path(entry.log_dir) / VARIANT_JSON
    try:
        whole, why = read_json(str(path)), f"{path} is missing"
    except (DamagedRecord, OSError) as exc:
        whole, why = {}, str(exc)
    if not whole:
        warnings.warn(f"run {entry.id}: its variant, too large for the registry, is left out "
                      f"({why})", stacklevel=2)
    return whole


def _table(records: list[Mapping], prefix: str, taken: Sequence[str]) -> pd.DataFrame:
    """Records as columns ``<prefix>a.b`` (nested keys flattened as ``easylaunch ls`` shows
    them); a name in ``taken`` gets ``variant.``."""
    pd = needed("pandas", "load_sweep", "results")
    table = pd.DataFrame([flat_items(r, prefix) for r in records], index=range(len(records)))
    return table.rename(columns={c: f"variant.{c}" for c in table.columns if c in taken})


def _points(runs: list[SelectedRun], metrics: Metrics = None) -> pd.DataFrame:
    """The points of the runs (each metric's from its first format; only ``metrics``, if
    given), a row each."""
    pd = needed("pandas", "load_sweep", "results")
    rows = [(run.shown.entry.id, *point) for run in runs
            for point in read_run(run.folder, metrics)]
    return pd.DataFrame(rows, columns=list(POINT_COLUMNS)).astype(
        {"run_id": str, "source": str, "metric": str, "step": float, "time": float,
         "value": float})


def _last_values(runs: list[SelectedRun]) -> pd.DataFrame:
    """Each run's last value (at its largest step; of equal steps, the last written) of each
    metric, as columns ``metric.<name>``, indexed by run id."""
    pd = needed("pandas", "load_sweep", "results")
    table = pd.DataFrame.from_dict(
        {run.shown.entry.id: last_values(run.folder) for run in runs}, orient="index")
    return table.add_prefix("metric.").astype(float) if len(table.columns) else table


def _result(log_dir: str, run_id: str) -> Any:
    """The run's return value from result.pkl (None: none, or it failed)."""
    try:
        outcome = load_outcome(log_dir)
    except Exception as exc:  # noqa: BLE001 - a result this process cannot unpickle
        warnings.warn(f"run {run_id}: its result cannot be loaded here ({exc!r})", stacklevel=3)
        return None
    return outcome[1] if outcome is not None and outcome[0] == "success" else None


def _run_row(shown: Shown, now: float) -> dict:
    entry = shown.entry
    status = read_status(entry.log_dir)
    state, _, note = shown.state.partition(" ")
    return {"run_id": entry.id, "exp_name": entry.exp_name, "sweep": entry.sweep or entry.id,
            "mode": entry.mode, "state": state, "note": note.strip("()") or None,
            "error": reason_of(status),
            "restarts": shown.restarts, "runtime_s": seconds_run(entry, now),
            "host": status.get("host"), "job_id": job_label(entry) or None,
            "log_dir": entry.log_dir}


def load_sweep(selection: Selection, *, fetch: bool = False,
               config: ConfigArg = None) -> pd.DataFrame:
    """One row per selected run (newest first): ``run_id, exp_name, sweep, mode, state, note``
    (what keeps a state from being read, else None), ``error`` (why a run that ended did not
    succeed, in one line, else None), ``restarts, runtime_s, host`` (where its
    last attempt ran), ``job_id, log_dir``, the variant's keys (nested ones as ``opt.lr``; one
    named like a column above as ``variant.<key>``), the result (a dict's keys as
    ``result.<key>``, another value as ``result``; a ``result`` column of None while no run has
    one) and the last value
    of each metric (``metric.<name>``).

    ``selection``: an experiment name (or part of one), a sweep id (or its start), run ids.
    ``fetch``: bring the whole folder of each run whose files live elsewhere first (as
    ``easylaunch fetch``). ``config``: a settings file or dict, as for ``run_experiment``.

    Args:
        selection: ``"lr-sweep"``: an experiment name (or part of one), a sweep id (or its
            start), a run id, or a list of these.
        fetch: First bring the whole folder of each run whose files live elsewhere.
        config: A settings file's path, or a dict of settings: their registry is read.

    Returns:
        A pandas DataFrame, one row per run, newest first.

    Raises:
        NoSuchRun: ``selection`` names no experiment, sweep or run.
        MissingExtra: pandas is not installed (``easylaunch[results]``).
    """
    pd = needed("pandas", "load_sweep", "results")
    runs = runs_of(selection, fetch, config)
    now = time.time()
    table = pd.DataFrame([_run_row(r.shown, now) for r in runs], columns=list(RUN_COLUMNS))
    variants = _table([variant_of(r.shown.entry) for r in runs], "", RUN_COLUMNS)
    values = [_result(r.shown.entry.log_dir, r.shown.entry.id) for r in runs]
    results = _table([v if isinstance(v, dict) else {} for v in values], "result.", ())
    if any(v is not None and not isinstance(v, dict) for v in values) or not len(results.columns):
        # (a value that is no dict; or none yet, as when every run failed: the column is there)
        results.insert(0, "result", [None if isinstance(v, dict) else v for v in values])
    table = pd.concat([table, variants, results], axis=1)
    metrics = _last_values(runs)
    return table.join(metrics, on="run_id") if len(metrics.columns) else table


def load_histories(selection: Selection, *, metrics: Sequence[str] | None = None,
                   fetch: bool = False, config: ConfigArg = None) -> pd.DataFrame:
    """The metric histories of the selected runs, one row per value: ``run_id, source``
    (metrics.jsonl, progress.csv or tensorboard), ``metric, step, time`` (Unix time; NaN
    where the format records none) and ``value``, in the order written, then the run's
    ``state`` (as in :func:`load_sweep`: ``failed`` runs stopped early) and its variant keys as
    in load_sweep. ``metrics``: only these (a name no run has raises :class:`NoSuchMetric`,
    listing those there are). Other arguments as for load_sweep.

    Args:
        selection: ``"lr-sweep"``: an experiment name (or part of one), a sweep id (or its
            start), a run id, or a list of these.
        metrics: ``["loss"]``: only these metrics (None: all).
        fetch: First bring the whole folder of each run whose files live elsewhere.
        config: A settings file's path, or a dict of settings: their registry is read.

    Returns:
        A pandas DataFrame in long form, one row per value.

    Raises:
        NoSuchRun: ``selection`` names no experiment, sweep or run.
        NoSuchMetric: No selected run logged a metric of ``metrics``.
        MissingExtra: pandas is not installed (``easylaunch[results]``).
    """
    needed("pandas", "load_histories", "results")
    runs = runs_of(selection, fetch, config)
    points = _points(runs, metrics)
    logged = set(points["metric"])
    missing = [m for m in metrics or () if m not in logged]
    if missing:
        there = sorted(set(_points(runs)["metric"]))
        raise NoSuchMetric(f"no run of {named(selection)} logged {', '.join(missing)}; "
                           f"metrics there: {choices(there)}"
                           + did_you_mean(missing[0], there, cutoff=0.5))
    variants = _table([variant_of(r.shown.entry) for r in runs], "", HISTORY_COLUMNS)
    variants.insert(0, "run_id", [r.shown.entry.id for r in runs])
    variants.insert(1, "state", [r.shown.state.split(" ", 1)[0] for r in runs])
    return points.merge(variants, on="run_id", how="left")
