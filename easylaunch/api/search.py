"""``run_search``: an adaptive search (Optuna's samplers and pruners) whose trials are runs of
any mode, resumable, with its journal and records in the search's own folder.

``<log root>/.searches/<search id>/``: ``search.json`` (what defines it), ``journal.log``
(Optuna's journal: the one store of trials), ``summary.json`` (trials by state and the best,
rewritten by the driver as trials end), ``call.json`` (the last call's arguments, for
``easylaunch search resume ID``) and ``driver.lock`` (locked by the live driver). The trials'
runs make one sweep, whose id is the search's.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import functools
import html
import json
import os
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from easylaunch.api.launch import launch_variants, run_experiment
from easylaunch.api.options import (
    LaunchOptions,
    check_exp_name,
    launch_options,
    mode_for,
    script_name,
)
from easylaunch.api.search_driver import (
    Driver,
    driver_lock,
    storage,
)
from easylaunch.api.search_space import Space, import_optuna, make_pruner, make_sampler, search_key
from easylaunch.errors import EasyLaunchError, LaunchError, check_count
from easylaunch.modes import get_mode
from easylaunch.modes.console import line
from easylaunch.modes.display import html_table
from easylaunch.runs.payload import pickle_payload
from easylaunch.runs.preview import Preview
from easylaunch.runs.rebuild import function_name
from easylaunch.settings import ConfigArg, load_settings
from easylaunch.tracking.interrupts import config_flag, goes_on, interrupt_saying
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.notify import record_ends
from easylaunch.tracking.searches import SEARCHES, SUMMARY, driver_alive, search_line
from easylaunch_job.metrics import FlushingEvery
from easylaunch_job.records import read_json, write_json_atomic

SEARCH_JSON = "search.json"
DRIVER_RUN = "driver_run.json"  # a detached search's driver: the run that drives it
STARTING_LOCK = "starting.lock"  # held while a detached driver is started
CALL = "call.json"  # the last run_search call's arguments, for resume_search
SEARCH_FLUSH_SECONDS = 0.1  # how often a trial's log_metrics lines reach the pruner (local)


@dataclass(frozen=True)
class BestTrial:
    """The best finished trial: its number, variant, objective value and run."""

    number: int
    variant: dict
    value: float
    job: Job


@dataclass(frozen=True)
class Search:
    """A handle on a search, from its folder's records (no Optuna needed but for ``study``).

    Attributes:
        id: The search's id: its ``name``, else the experiment's name and a hash.
        folder: The search's folder, ``<log root>/.searches/<id>``.
    """

    id: str
    folder: Path

    @classmethod
    def get(cls, search_id: str, config: ConfigArg = None,
            base_log_dir: str | os.PathLike | None = None) -> Search:
        """The search ``search_id`` (as ``run_search`` returned it), from any process.

        Args:
            search_id: The search's id, as ``Search.id`` holds it.
            config: A settings file's path, or a dict of settings: their log root is searched.
            base_log_dir: The log root, in place of the LOCAL_LOG_DIR setting.

        Returns:
            A handle on the search.

        Raises:
            LaunchError: No search of that id is under the log root.
        """
        folder = _searches(config, base_log_dir) / search_id
        if not folder.is_dir():
            raise LaunchError(f"no search {search_id!r} in {folder.parent}")
        return cls(search_id, folder)

    def summary(self) -> dict:
        """Trials by state, the best, and each trial's state, value, runs and reason (none
        yet, while a detached driver starts).

        Returns:
            ``id``, ``n_trials``, ``finished``, ``counts`` (trials by state), ``best`` and
            ``trials``, as summary.json holds them.
        """
        if not (self.folder / SUMMARY).exists():
            return {"id": self.id, "n_trials": None, "finished": 0, "counts": {},
                    "best": None, "trials": []}
        return read_json(str(self.folder / SUMMARY))

    def wait(self, timeout: float | None = None) -> Search:
        """Block until the search's driver has finished its trials (or ``timeout`` seconds
        pass); raises if a detached driver's run ended before its search did. Ctrl-C (a
        notebook's stop button) ends the wait, not the search, and says how to cancel it.

        Args:
            timeout: Seconds to wait at most (None: until the search ends).

        Returns:
            This search.

        Raises:
            LaunchError: The detached driver's run ended before the search did.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        driver = None
        if (self.folder / DRIVER_RUN).exists():
            driver = Job.from_run_dir(read_json(str(self.folder / DRIVER_RUN))["run"])
        try:
            while driver is not None:
                ended = driver.status().terminal
                summary = self.summary()
                if ended:
                    record_ends([driver])  # (the driver's run ended: the registry says so too)
                    if summary["n_trials"] is not None and \
                            summary["finished"] >= summary["n_trials"]:
                        break
                    raise LaunchError(f"search {self.id}'s driver, run {driver.id}, ended "
                                      f"{driver.status()} before the search did (see "
                                      f"easylaunch logs {driver.id}); call run_search again to "
                                      "carry it on")
                if deadline is not None and time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
        except KeyboardInterrupt:
            assert driver is not None  # (no wait without a driver)
            flag = config_flag(driver.mode.settings.path)
            said = line(goes_on(f"search {self.id} (its driver: run {driver.id})", 1, [
                f"easylaunch cancel{flag} {driver.id}",
                f"easylaunch cancel{flag} --sweep {self.id}"]))
            raise interrupt_saying(said) from None
        return self

    @property
    def best(self) -> BestTrial | None:
        """The best completed trial (number, variant, value and Job), None before one."""
        best = self.summary().get("best")
        if not best:
            return None
        return BestTrial(best["number"], best["variant"], best["value"],
                         Job.from_run_dir(best["runs"][-1]))

    def trials(self) -> list[dict]:
        """Each trial's number, state, value, variant, runs and reason, as in :meth:`summary`.

        Returns:
            The trials, by trial number.
        """
        return self.summary()["trials"]

    def study(self) -> Any:
        """The Optuna study (for Optuna's own plots and tables).

        Returns:
            The ``optuna.Study`` read from the search's journal.

        Raises:
            MissingExtra: Optuna is not installed (``easylaunch[search]``).
        """
        optuna = import_optuna()
        return optuna.load_study(study_name=self.id, storage=storage(self.folder))

    def __repr__(self) -> str:
        s = self.summary()
        best = s.get("best")
        return (f"Search(id={self.id!r}, finished={s['finished']}/{s['n_trials']}, "
                f"counts={s['counts']}, best={best and best['value']!r})")

    def _repr_html_(self) -> str:
        """Jupyter's view: the search's line, then a table of its trials."""
        trials = self.trials()
        keys = sorted({k for t in trials for k in (t.get("variant") or {})})
        rows = [[t.get("number"), t.get("state"), t.get("value"),
                 *((t.get("variant") or {}).get(k) for k in keys)] for t in trials]
        return (f"<p>{html.escape(repr(self))}</p>"
                + html_table(["trial", "state", "value", *keys], rows))


def run_search(fn: Callable[..., Any], space: Mapping[str, Any], objective: str,
               direction: str = "minimize", n_trials: int = 20, max_parallel: int = 4,
               sampler: Any = "tpe", pruner: Any = "asha", exp_name: str = "default",
               mode: str = "local", detach: bool = False, name: str | None = None,
               seed: int | None = None, min_resource: int = 1, config: ConfigArg = None,
               base_log_dir: str | os.PathLike | None = None, **launch: Any) -> Search:
    """Search ``space`` for the variant that minimizes (or maximizes) ``objective``: each trial
    is a run of ``fn(doodad_config, variant)`` in ``mode``, its variant drawn by ``sampler``
    ("tpe", "random", "grid", "cmaes" or an Optuna sampler) from ``space`` (Optuna
    distributions; lists are choices; other values constants). ``objective`` is a key of the
    dict ``fn`` returns, else a metric it logs with ``log_metrics``, whose values reach
    ``pruner`` ("asha": successive halving from step ``min_resource``, "median", None, or an
    Optuna pruner) as they are written: a pruned run is stopped, recorded cancelled with the
    reason (``pruned at step 12: loss 0.93 ...``). A new trial starts as soon as one ends, at
    most ``max_parallel`` at once, until ``n_trials`` are finished.

    ``detach=True`` runs the driver as a detached local run of its own (it goes on after this
    script ends, the terminal closes or the SSH session drops) and returns at once; follow it
    with :meth:`Search.wait` or ``Search.get(id)``.

    Calling it again with the same experiment, function, space, objective and direction (or
    the same ``name``) carries the search on: finished trials are kept, trials whose runs
    stopped with the last driver are run again, and a larger ``n_trials`` adds trials.
    ``launch`` takes :func:`easylaunch.run_sweep`'s keywords. Returns the :class:`Search`.

    Args:
        fn: The function each trial's run calls, as ``fn(doodad_config, variant)``.
        space: ``{"lr": FloatDistribution(1e-3, 0.1), "opt": ["adam", "sgd"]}``: Optuna
            distributions, lists of choices, and constants.
        objective: A key of the dict ``fn`` returns, or a metric it logs.
        direction: ``"minimize"`` or ``"maximize"`` the objective.
        n_trials: Trials to finish in all, counting those of earlier calls.
        max_parallel: Trials run at once at most; a mode with a ``max_parallel`` option gets
            it too.
        sampler: ``"tpe"``, ``"random"``, ``"grid"``, ``"cmaes"``, or an Optuna sampler.
        pruner: ``"asha"``, ``"median"``, None (no pruning), or an Optuna pruner.
        exp_name: The experiment's name, used as a folder name: letters, digits and ``. _ + -``.
        mode: Where the trials' runs go: ``"local"``, ``"slurm"``...
        detach: True runs the driver as a detached local run and returns at once.
        name: The search's id (None: the experiment's name and a hash of the search).
        seed: The sampler's seed, for draws that repeat (None: random).
        min_resource: Steps a trial runs before ``"asha"`` or ``"median"`` may stop it.
        config: A settings file's path, or a dict of settings (None: the usual lookup).
        base_log_dir: The root of the run folders and the search's, in place of LOCAL_LOG_DIR.
        **launch: :func:`run_sweep`'s other keywords and the mode's options; no ``dry_run``.

    Returns:
        A handle on the search, once its trials are finished (``detach``: at once).

    Raises:
        LaunchError: An argument is refused (``direction``, a count, ``objective``, ``space``,
            a mode option, ``dry_run``).
        MissingExtra: Optuna is not installed (``easylaunch[search]``).
    """
    if direction not in ("minimize", "maximize"):
        raise LaunchError(f"direction must be 'minimize' or 'maximize', got {direction!r}")
    for label, number in (("n_trials", n_trials), ("max_parallel", max_parallel)):
        check_count(label, number)
    if not isinstance(objective, str) or not objective:
        raise LaunchError("objective must name a key of the dict the function returns, or a "
                          f"metric it logs with log_metrics; got {objective!r}")
    checked = Space.of(space)
    exp_name = check_exp_name(exp_name)
    key = search_key(exp_name, function_name(fn), checked.key(), objective, direction)
    search_id = check_exp_name(name, "name") if name is not None else \
        f"{exp_name[:88]}-{key}"  # (a folder name: at most 100 characters)
    search = Search(search_id, _searches(config, base_log_dir) / search_id)
    opts = _trial_launch(exp_name, mode, max_parallel, config, base_log_dir, launch)
    mode_for(opts)  # (a mode option it does not take: refused before anything is written)
    _private_folder(search.folder, load_settings(config).RUN_FOLDER_MODE)
    call = dict(fn=fn, space=space, objective=objective, direction=direction,
                n_trials=n_trials, max_parallel=max_parallel, sampler=sampler, pruner=pruner,
                exp_name=exp_name, mode=mode, name=search.id, seed=seed,
                min_resource=min_resource, config=config, base_log_dir=base_log_dir, **launch)
    if detach:
        with _starting(search.folder):
            if not _driven(search.folder):  # (driven already: followed, not driven twice)
                driver = run_experiment(functools.partial(_drive_detached, call), mode="local",
                                        detach=True, exp_name=exp_name, config=config,
                                        base_log_dir=base_log_dir,
                                        variant={"search": search.id})
                assert not isinstance(driver, Preview)  # (dry_run: refused above)
                write_json_atomic(str(search.folder / DRIVER_RUN),
                                  {"run": str(driver.log_dir)})
        return search
    if sampler == "grid":
        n_trials = min(n_trials, _grid_size(checked))
    optuna = import_optuna()
    with driver_lock(search.folder):
        _keep(call, search.folder / CALL, config)
        study = optuna.create_study(
            storage=storage(search.folder), study_name=search.id, direction=direction,
            load_if_exists=True, pruner=make_pruner(pruner, min_resource))
        earlier = len(study.get_trials(deepcopy=False))
        # (a resumed sampler with the seed it began with would draw its first trials again)
        study.sampler = make_sampler(sampler, checked, None if seed is None else seed + earlier)
        settings = load_settings(config)
        if settings.LAUNCH_LINE:
            print(_start_line(search, mode, exp_name, n_trials, max_parallel, earlier,
                              settings.path), file=sys.stderr)
        write_json_atomic(str(search.folder / SEARCH_JSON), {
            "id": search.id, "exp_name": exp_name, "mode": mode, "objective": objective,
            "direction": direction, "n_trials": n_trials, "max_parallel": max_parallel,
            "sampler": sampler if isinstance(sampler, str) else type(sampler).__name__,
            "pruner": pruner if pruner is None or isinstance(pruner, str)
            else type(pruner).__name__, "function": function_name(fn), "space": checked.key()})
        trial_fn = FlushingEvery(fn, SEARCH_FLUSH_SECONDS)

        def launch_trial(variant: dict, fields: dict) -> Job:
            jobs = launch_variants(trial_fn, [variant], opts, sweep_id=search.id, again=(fields,))
            assert isinstance(jobs, list)  # (dry_run=False)
            return jobs[0]

        Driver(study, search.folder, objective, n_trials, max_parallel, launch_trial,
               checked.variant, checked.distributions).drive()
    return search


def _start_line(search: Search, mode: str, exp_name: str, n_trials: int, max_parallel: int,
                earlier: int, settings_path: str | None) -> str:
    """``easylaunch local: search S of lr: 24 trials, 3 at once; runs in F; follow: easylaunch
    search S`` (its trials' runs say nothing each); a search carried on says so, and what it
    is matched by."""
    head = f"easylaunch {mode}: "
    if earlier:
        head += (f"carrying on search {search.id} ({search_line(search.summary(), search.folder)}"
                 "; it is named by the function's name, not its code: after a change to what "
                 "the trials measure, pass name= for a new search)")
    else:
        head += f"search {search.id} of {exp_name}"
    return (f"{head}: {n_trials} trials, {max_parallel} at once; runs in "
            f"{search.folder.parent.parent / exp_name}; follow: easylaunch search"
            f"{config_flag(settings_path)} {search.id}")


def resume_search(search_id: str, config: ConfigArg = None, detach: bool = True) -> Search:
    """Carry on the search ``search_id`` (its id or a unique start of one) as its last
    ``run_search`` call was made (kept in its folder), its driver detached unless ``detach``
    is False."""
    folder = _searches(config, None)
    found = [p for p in folder.glob(f"{search_id}*") if (p / CALL).exists()]
    exact = [p for p in found if p.name == search_id]
    if len(exact or found) != 1:
        raise LaunchError(f"{len(found) or 'no'} searches with a recorded call match "
                          f"{search_id!r} in {folder}" + (
                              f": {', '.join(p.name for p in found)}" if found else
                              " (a search under another log folder: pass its settings with "
                              "--config)"))
    kept = json.loads((exact or found)[0].joinpath(CALL).read_bytes())
    # (the modules it names by reference: in the code folders and the script's, as for runs)
    sys.path[:0] = [p for p in kept["paths"] if p not in sys.path]
    call = cloudpickle.loads(base64.b64decode(kept["call"]))
    return run_search(**call, detach=detach)


def _keep(call: dict, path: Path, config: ConfigArg) -> None:
    """Keep the call's arguments (the function by value where the runs would need it so)
    for :func:`resume_search`."""
    code_dirs = [str(m.local_dir) for m in load_settings(config).code_mounts()]
    script_dir = os.path.dirname(script_name()) or None
    data = pickle_payload(call, "run_search's arguments", code_dirs, script_dir)
    write_json_atomic(str(path), {"paths": [*code_dirs, *filter(None, [script_dir])],
                                  "call": base64.b64encode(data).decode()})


@contextlib.contextmanager
def _starting(folder: Path) -> Iterator[None]:
    """Hold the search's start (an flock on ``starting.lock``, waited for): two detached
    starts at once make one driver, the second finding the first's."""
    fd = os.open(folder / STARTING_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _driven(folder: Path) -> bool:
    """Whether a driver holds the search, or a detached one was started and has not ended
    (it takes the driver's lock once it is up)."""
    if driver_alive(folder):
        return True
    if not (folder / DRIVER_RUN).exists():
        return False
    try:
        driver = Job.from_run_dir(read_json(str(folder / DRIVER_RUN))["run"])
    except EasyLaunchError:  # (its folder deleted: no driver)
        return False
    return not driver.status().terminal


def _private_folder(folder: Path, mode: int) -> None:
    """Make the search's folder, and ``.searches``, with the run folders' mode (RUN_FOLDER_MODE:
    call.json holds the call's settings and function, as a run's bundle does)."""
    folder.parent.parent.mkdir(parents=True, exist_ok=True)
    for made in (folder.parent, folder):
        made.mkdir(mode=mode, exist_ok=True)
        if made.stat().st_mode & 0o777 != mode:
            os.chmod(made, mode)


def _drive_detached(call: dict, doodad_config: Any, variant: dict) -> dict:
    """A detached search's driver, as a detached local run of its own."""
    return run_search(**call).summary()


def _searches(config: ConfigArg, base_log_dir: str | os.PathLike | None) -> Path:
    """The folder of the searches whose runs are under the log root."""
    root = base_log_dir or load_settings(config).LOCAL_LOG_DIR
    return Path(os.path.expanduser(os.fspath(root))).resolve() / SEARCHES


def _trial_launch(exp_name: str, mode: str, max_parallel: int, config: ConfigArg,
                  base_log_dir: str | os.PathLike | None, launch: dict[str, Any]
                  ) -> LaunchOptions:
    """The launch options of every trial's run; a mode that runs a limited number at once
    (``local``) runs as many as the search does (a pool: as many as it has workers)."""
    if "dry_run" in launch:
        raise LaunchError("run_search launches as it goes: it has no dry_run")
    # (no line per trial: the search says one line for them all)
    keywords = dict(launch, config=config, base_log_dir=base_log_dir, dry_run=False,
                    launch_line=False)
    if "max_parallel" in get_mode(mode).options and launch.get("pool") is None:
        keywords["max_parallel"] = max_parallel
    return launch_options(exp_name, mode, keywords)


def _grid_size(space: Space) -> int:
    size = 1
    for choices in space.grid().values():
        size *= len(choices)
    return size
