"""The driver of a search: asks Optuna for trials, launches each as a run, feeds the runs'
metrics to the pruner as they are written, stops pruned runs, and tells Optuna how each ended.

One driver at a time holds a search (``driver.lock`` in its folder); it alone writes the
journal, which runs never touch. A new trial starts as soon as one ends, at most
``max_parallel`` at once. A driver that starts finds the trials the last one left running and
carries them on: runs still going are followed, runs that its death stopped run again under the
same trial number, and finished trials are never run again.

Optuna (the ``search`` extra) is imported where used: a search's handle reads its records, and
tells whether its driver is alive, without it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easylaunch.api.search_space import import_optuna
from easylaunch.errors import LaunchError
from easylaunch.modes.local.machine import launcher_gone
from easylaunch.runs.record import DamagedRecordError
from easylaunch.tracking.interrupts import config_flag, interrupt_saying, interrupted
from easylaunch.tracking.jobs import Job
from easylaunch.tracking.notify import record_ends
from easylaunch.tracking.rows import reason_of
from easylaunch.tracking.searches import DRIVER_LOCK, SUMMARY
from easylaunch_job.outcome import load_outcome
from easylaunch_job.records import METRICS_JSONL, update_status, write_json_atomic

JOURNAL = "journal.log"
# The driver's pause between looks: four times what its last look that found nothing new
# took, so that looking uses at most a fifth of a core, between these bounds (a pool starts a
# trial in milliseconds: a slot that frees waits for the next look).
POLL_SECONDS = (0.01, 0.05)
NOT_LAUNCHED = "not_launched"  # a trial's user attribute: its run was refused at launch
STOPPED_WITH_DRIVER = "stopped_with_driver"  # one whose driver a Ctrl-C stopped while it ran


def storage(folder: Path) -> Any:
    """Optuna's journal in the search's folder: one file, safe on NFS, no server."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    return JournalStorage(JournalFileBackend(str(folder / JOURNAL)))


@contextlib.contextmanager
def driver_lock(folder: Path) -> Iterator[None]:
    """Hold the search for this process: an flock on ``driver.lock`` (released when the
    process ends, however it ends), which names the driver. Raises if a live driver holds it."""
    path = folder / DRIVER_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(path)
            raise LaunchError(f"search {folder.name} is driven by pid {holder.get('pid')} on "
                              f"{holder.get('host')}; follow it with Search.get("
                              f"{folder.name!r})") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid()}).encode())
        # a journal write cut by the last driver's death leaves Optuna's lock: this driver is
        # now the only writer, so it is stale
        with contextlib.suppress(FileNotFoundError):
            (folder / f"{JOURNAL}.lock").unlink()
        yield
    finally:
        os.close(fd)


def _holder(path: Path) -> dict:
    """What the lock file says of the driver that holds it."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


@dataclass
class _Live:
    """A trial whose run is going: what of its metrics the driver has read."""

    trial: Any  # optuna.trial.Trial
    job: Job
    offset: int = 0  # bytes of metrics.jsonl read
    lines: int = 0  # lines read (the step of a line without one)
    reported: set[int] = field(default_factory=set)  # steps the trial has values of
    last_value: float | None = None  # the objective's value in the last line read
    pruned: dict | None = None  # set once the pruner stopped it


@dataclass
class Driver:
    """One driver's run of a search (see the module's docstring)."""

    study: Any
    folder: Path
    objective: str
    n_trials: int
    max_parallel: int
    launch: Callable[[dict, dict], Job]  # (variant, launch.json fields) -> the trial's run
    variant_of: Callable[[Mapping[str, Any]], dict]
    distributions: dict[str, Any]
    live: dict[int, _Live] = field(default_factory=dict)  # by trial number
    settled: list[Job] = field(default_factory=list)  # ended: their ends go to the registry

    def drive(self) -> None:
        """Carry on the trials left running, then run trials until n_trials are finished. A
        Ctrl-C stops the driver, its trials noted as stopped by it (run again when the search
        is carried on), and says how to carry it on."""
        try:
            self._drive()
        except KeyboardInterrupt:
            for live in self.live.values():
                live.trial.set_user_attr(STOPPED_WITH_DRIVER, True)
            going = interrupted([live.job for live in self.live.values()
                                 if not _ended(live.job)])
            path = next(iter(self.live.values())).job.mode.settings.path if self.live else None
            said = f"{going}; carry the search on with `easylaunch search resume" \
                   f"{config_flag(path)} {self.folder.name}`"
            raise interrupt_saying(said) from None

    def _drive(self) -> None:
        self._carry_on()
        self._write_summary()
        asked: dict[int, float] = {}  # when each mode's backend was last asked
        look = 0.0  # what the last look that found nothing new took
        while True:
            looked = time.monotonic()
            changed = False
            self._ask_backends(asked)
            for live in list(self.live.values()):
                changed |= self._follow(live)
            while len(self.live) < self.max_parallel and \
                    len(_counted(self.study.get_trials(deepcopy=False))) < self.n_trials:
                self._start(self.study.ask(self.distributions))
                changed = True
            if self.settled:  # (after the next trials started: a free slot waits for none)
                for job in self.settled:
                    job.record.reload()
                record_ends(self.settled)
                self.settled.clear()
            if changed:
                self._write_summary()
            if not self.live:
                return
            if not changed:
                look = time.monotonic() - looked
            fastest, slowest = POLL_SECONDS
            time.sleep(min(max(4 * look, fastest), slowest))

    # starting and carrying on

    def _start(self, trial: Any, rerun_of: Job | None = None) -> None:
        """Launch ``trial``'s run (again, for one its last driver's death stopped)."""
        fields: dict[str, Any] = {"search": {"id": self.folder.name, "trial": trial.number}}
        if rerun_of is not None:
            fields["resubmitted_from"] = rerun_of.id
        try:
            job = self.launch(self.variant_of(trial.params), fields)
        except KeyboardInterrupt:  # (left running with no run: carried on, it starts again)
            raise
        except BaseException as exc:  # (a launch refused: the trial is not left running)
            optuna = import_optuna()
            trial.set_user_attr("reason", f"its run could not be launched: {exc}")
            trial.set_user_attr(NOT_LAUNCHED, True)  # (not one of n_trials: fixed, it runs)
            self._tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        frozen = self._frozen(trial)
        trial.set_user_attr("runs", [*frozen.user_attrs.get("runs", []), str(job.log_dir)])
        if frozen.user_attrs.get(STOPPED_WITH_DRIVER):
            trial.set_user_attr(STOPPED_WITH_DRIVER, False)
        self.live[trial.number] = _Live(trial, job, reported=set(frozen.intermediate_values))

    def _frozen(self, trial: Any) -> Any:
        """The trial as the study holds it now."""
        return self.study.get_trials(deepcopy=False)[trial.number]

    def _carry_on(self) -> None:
        """The trials a driver left running: follow their runs, or run them again."""
        optuna = import_optuna()
        for frozen in self.study.get_trials(deepcopy=False,
                                            states=(optuna.trial.TrialState.RUNNING,)):
            trial = optuna.trial.Trial(self.study, frozen._trial_id)
            runs = frozen.user_attrs.get("runs") or []
            if not runs:  # asked, never launched
                self._start(trial)
                continue
            self.live[frozen.number] = _Live(trial, Job.from_run_dir(runs[-1]),
                                             reported=set(frozen.intermediate_values))

    # following a run

    def _ask_backends(self, asked: dict[int, float]) -> None:
        """Ask each mode of the live runs about them, and bring their metrics here, at the
        mode's pace (this machine's processes each poll; a scheduler, a far side or a bucket
        each ``backend_poll_seconds``), once for all its runs."""
        by_mode: dict[int, list[Job]] = {}
        for live in self.live.values():
            by_mode.setdefault(id(live.job.mode), []).append(live.job)
        for key, jobs in by_mode.items():
            mode = jobs[0].mode
            if time.monotonic() - asked.get(key, -math.inf) < mode.backend_poll_seconds:
                continue
            asked[key] = time.monotonic()
            records = []
            for job in jobs:
                with contextlib.suppress(DamagedRecordError):
                    if not job.resolve_unsubmitted() and not job.recorded_state().terminal:
                        records.append(job.record)
            with contextlib.suppress(DamagedRecordError):
                mode.refresh_many(records)
            mode.bring_metrics(records)

    def _follow(self, live: _Live) -> bool:
        """Read the run's new metrics (pruning it if the pruner says so) and settle its end;
        True if anything changed."""
        try:
            live.job.record.reload()
            live.job.mode.sync_record(live.job.record)
            state = live.job.recorded_state()
        except DamagedRecordError:
            return False
        read = self._read_metrics(live, prune=not state.terminal)
        if not state.terminal:
            return read
        live.job.record.reload()
        self._read_metrics(live, prune=False)  # (the last lines: an ended run is not pruned)
        self._settle(live, live.job.info())
        return True

    def _read_metrics(self, live: _Live, prune: bool) -> bool:
        """Report the objective's new values to the trial; stop the run when it is pruned
        (with ``prune``)."""
        path = _metrics(live.job)
        try:
            with open(path, "rb") as f:
                f.seek(live.offset)
                data = f.read()
        except FileNotFoundError:
            return False
        whole = data[:data.rfind(b"\n") + 1]
        live.offset += len(whole)
        reported = False
        for line in whole.decode(errors="replace").splitlines():
            index, live.lines = live.lines, live.lines + 1
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if not isinstance(record, dict) or self.objective not in record:
                continue
            value = live.last_value = _number(record[self.objective])
            if live.pruned:
                continue
            step = _step(record.get("step"), index)
            if step in live.reported:
                continue  # (reported already: by the run's earlier attempt)
            live.trial.report(value, step)
            live.reported.add(step)
            reported = True
            # (asked of an ended run too: successive halving notes its rungs as it is asked)
            if live.trial.should_prune() and prune:
                self._prune(live, step, value)
        return reported

    def _prune(self, live: _Live, step: int, value: float) -> None:
        """Stop the run; its status.json says it was pruned, and why."""
        reason = prune_reason(self.study, live.trial, self.objective, step, value)
        live.pruned = {"step": step, "value": value, "reason": reason}
        live.trial.set_user_attr("reason", reason)
        update_status(str(live.job.log_dir), cancel_requested=True, pruned=live.pruned)
        live.job.mode.cancel(live.job.record)

    def _settle(self, live: _Live, status: dict) -> None:
        """Tell Optuna how the trial's run ended (or run it again, if its driver's death
        stopped it), and write the run's end to the registry."""
        states = import_optuna().trial.TrialState
        trial, job = live.trial, live.job
        del self.live[trial.number]
        state = status.get("state")
        # (a far run's record, brought back, has no word of the prune: the driver's has)
        pruned = status.get("pruned") or live.pruned
        if pruned and state != "succeeded":
            update_status(str(job.log_dir), pruned=pruned, error=pruned["reason"])
            trial.set_user_attr("reason", pruned["reason"])
            trial.set_user_attr("last_step", pruned["step"])
            self._tell(trial, state=states.PRUNED)
        elif state == "succeeded":  # (one that ended before its prune stopped it, too)
            if self._frozen(trial).user_attrs.get("reason") is not None:  # (an earlier run's)
                trial.set_user_attr("reason", None)
            value = self._value(live)
            if value is None or math.isnan(value):
                trial.set_user_attr("reason", f"run {job.id} returned no number for "
                                              f"{self.objective!r} and logged none (None "
                                              "and NaN are none)")
                self._tell(trial, state=states.FAIL)
            else:
                self._tell(trial, value)
        elif _stopped_by_its_driver(job, status, bool(
                self._frozen(trial).user_attrs.get(STOPPED_WITH_DRIVER))):
            self._start(trial, rerun_of=job)
        else:
            reason = reason_of(status) or str(state)
            if state == "cancelled":
                reason = f"cancelled by hand: {reason}"
            trial.set_user_attr("reason", reason)
            self._tell(trial, state=states.FAIL)
        self.settled.append(job)

    def _tell(self, trial: Any, value: float | None = None, state: Any = None) -> None:
        """Tell Optuna the trial's end (its value, or its state)."""
        try:
            self.study.tell(trial, value, state=state)
        except RuntimeError as exc:  # GridSampler's tell that ends the grid, after recording
            if "Study.stop" not in str(exc):
                raise

    def _value(self, live: _Live) -> float | None:
        """The objective: the key of the run's returned dict, else the last value it logged
        (read already, as the run's metrics were followed)."""
        outcome = load_outcome(str(live.job.log_dir))
        if outcome is not None and outcome[0] == "success" and \
                isinstance(outcome[1], Mapping) and self.objective in outcome[1]:
            return _number(outcome[1][self.objective])
        return live.last_value

    def _write_summary(self) -> None:
        write_json_atomic(str(self.folder / SUMMARY), summary(
            self.study, self.n_trials, self.objective, self.variant_of))


def _ended(job: Job) -> bool:
    """Whether the run's record says it ended (a damaged one: not yet)."""
    try:
        return job.recorded_state().terminal
    except DamagedRecordError:
        return False


def _number(value: Any) -> float:
    """An objective's value as Optuna takes it: NaN for None, or for what is no number."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _counted(trials: list[Any]) -> list[Any]:
    """The trials that count towards ``n_trials``: all but those whose run was refused at
    launch (bad options, a host out of reach), which a corrected call runs in their place."""
    return [t for t in trials if not t.user_attrs.get(NOT_LAUNCHED)]


def _step(step: Any, index: int) -> int:
    """A line's step as Optuna takes it: its own, when a whole number, else its place."""
    if isinstance(step, (int, float)) and not isinstance(step, bool) and \
            float(step).is_integer() and step >= 0:
        return int(step)
    return index


def _metrics(job: Job) -> Path:
    """Where the run's metrics.jsonl is read here (where it writes it, on this machine or a
    shared file system; else the copy its mode brings over)."""
    return job.mode.readable_folder(job.record) / METRICS_JSONL


def _stopped_by_its_driver(job: Job, status: dict, noted: bool) -> bool:
    """A run that ended because the driver that launched it died (an attached local run is
    stopped with its launcher), or was stopped by a Ctrl-C (``noted`` by the driver), not by
    its own failure or a cancel."""
    if status.get("state") not in ("cancelled", "failed"):
        return False
    if not noted and (status.get("cancel_requested") or launcher_gone(job.launch_info) is False):
        return False
    outcome = load_outcome(str(job.log_dir))
    return status["state"] == "cancelled" or outcome is None


def prune_reason(study: Any, trial: Any, objective: str, step: int, value: float) -> str:
    """One line saying why ``trial`` was pruned, from what the pruner compared it with."""
    optuna = import_optuna()
    pruner = study.pruner
    head = f"pruned at step {step}: {objective} {value:.4g}"
    minimize = study.direction == optuna.study.StudyDirection.MINIMIZE
    trials = study.get_trials(deepcopy=False)
    others = [t for t in trials if t.number != trial.number]
    if isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner):
        mine = trials[trial.number].system_attrs
        rungs = sorted(int(k.rsplit("_", 1)[1]) for k in mine if k.startswith("completed_rung_"))
        if rungs:
            key = f"completed_rung_{rungs[-1]}"
            values = sorted((t.system_attrs[key] for t in others if key in t.system_attrs),
                            reverse=not minimize)
            rf = pruner._reduction_factor
            if values:
                cut = values[max(len(values) // rf - 1, 0)]
                return (f"{head} not in the best 1/{rf} of {len(values) + 1} trials at rung "
                        f"{rungs[-1]} (cut-off {cut:.4g})")
    if isinstance(pruner, optuna.pruners.MedianPruner):
        at_step = [t.intermediate_values[step] for t in others if step in t.intermediate_values]
        if at_step:
            middle = statistics.median(at_step)
            return (f"{head} worse than the median {middle:.4g} of "
                    f"{len(at_step)} trials at step {step}")
    return f"{head} (by {type(pruner).__name__})"


def summary(study: Any, n_trials: int, objective: str,
            variant_of: Callable[[Mapping[str, Any]], dict]) -> dict:
    """What ``ls``, ``status`` and a search's handle read without opening Optuna: trials by
    state, the best trial, and each trial's run, value and reason."""
    trials = _counted(study.get_trials(deepcopy=False))
    counts: dict[str, int] = {}
    rows = []
    for t in trials:
        runs = t.user_attrs.get("runs") or []
        state = t.state.name.lower()
        counts[state] = counts.get(state, 0) + 1
        rows.append({"number": t.number, "state": state, "value": t.value,
                     "variant": variant_of(t.params), "runs": runs,
                     "reason": t.user_attrs.get("reason"),
                     "last_step": max(t.intermediate_values, default=None)})
    complete = [r for r in rows if r["state"] == "complete" and r["value"] is not None]
    best = None
    if complete:
        pick = min if study.direction.name == "MINIMIZE" else max
        best = pick(complete, key=lambda r: r["value"])
    return {"id": study.study_name, "n_trials": n_trials, "objective": objective,
            "direction": study.direction.name.lower(),
            "finished": sum(r["state"] in ("complete", "pruned", "fail") for r in rows),
            "counts": counts, "best": best, "trials": rows, "updated": time.time()}
