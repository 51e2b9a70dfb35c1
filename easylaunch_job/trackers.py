"""Mirrors of ``log_metrics`` to W&B, MLflow and TensorBoard (bundle.json's ``trackers``).

Each tracker's run is the easylaunch run: W&B's run id is the run id (``resume="allow"``), the
MLflow run is found again by the id kept in ``trackers.json`` (or its ``easylaunch.run_id``
tag), TensorBoard writes to ``<run folder>/tensorboard``. So a restarted, requeued or relaunched
run goes on with the same tracker run, its steps continuing. A tracker is sent the lines of
metrics.jsonl as they are written; ``trackers.json`` keeps the last step each one took for
certain, and an attempt first sends each tracker the lines after that step (what a killed
attempt had not sent, or a tracker had buffered and lost). Lines are sent from a thread of
their own, so ``log_metrics`` never waits on a tracker (an MLflow server's round trip). A
tracker that fails, to start or later, is dropped with one warning on stderr: the run goes on.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable, Dict, Tuple

from easylaunch_job.records import METRICS_JSONL, flat_items, read_json, write_json_atomic

TRACKERS_JSON = "trackers.json"  # in the run folder: each tracker's id and last step taken
TRACKER_NAMES = ("wandb", "mlflow", "tensorboard")  # what TRACKERS may name

StepValues = Tuple[int, float, Dict[str, float]]  # (step, time, values) of one metrics line


def _metric_float(value: Any) -> float:
    """A metrics.jsonl value as a float (null: NaN)."""
    return float("nan") if value is None else float(value)


class _Steps:
    """The step of each metrics line: its own step when a whole number, else its place in
    metrics.jsonl (counted over the lines earlier attempts wrote)."""

    def __init__(self) -> None:
        self.index = 0

    def point(self, line: Mapping[str, Any]) -> StepValues:
        step = line.get("step")
        if not (isinstance(step, (int, float)) and float(step).is_integer()):
            step = self.index
        point = (int(step), float(line.get("time") or time.time()),
                 {k: _metric_float(v) for k, v in line.items() if k not in ("step", "time")})
        self.index += 1
        return point


def _read_lines(path: str) -> list[dict[str, Any]]:
    """The whole lines of a metrics file (one cut short by a crash is left out)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return []
    lines = []
    for raw in data.splitlines():
        try:
            lines.append(json.loads(raw))
        except ValueError:
            continue
    return lines


class _WandB:
    """A W&B run with the run's id; its steps count as taken once it finished cleanly (W&B
    loses what it buffered when its process is killed). Its files go where WANDB_DIR says,
    else to the run folder; WANDB_PROJECT names the project (else the experiment), and W&B
    reads WANDB_ENTITY, WANDB_MODE and WANDB_TAGS itself. The group is always the sweep."""

    confirms_each_batch = False

    def __init__(self, spec: Mapping[str, Any], log_dir: str, variant: Any, state: dict
                 ) -> None:
        import wandb

        self.run = wandb.init(
            id=spec["run_id"], resume="allow", name=spec["run_id"],
            project=os.environ.get("WANDB_PROJECT") or spec["exp_name"],
            group=spec["sweep"], job_type="run", config=_config(variant),
            dir=None if os.environ.get("WANDB_DIR") else log_dir,
            settings=wandb.Settings(console="off", disable_git=True, x_disable_stats=True,
                                    silent=True))

    def send(self, points: list[StepValues]) -> None:
        for step, _, values in points:
            self.run.log(values, step=step)

    def close(self, outcome: str) -> None:
        self.run.finish(exit_code=0 if outcome == "FINISHED" else 1)


class _MLflow:
    """An MLflow run, tagged with the run's id, kept across attempts (its id in
    trackers.json). The store is MLFLOW_TRACKING_URI, else ``mlruns`` in the log root; the
    experiment is MLFLOW_EXPERIMENT_NAME, else the run's experiment name."""

    confirms_each_batch = True

    def __init__(self, spec: Mapping[str, Any], log_dir: str, variant: Any, state: dict
                 ) -> None:
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or \
            "file:" + os.path.join(os.path.dirname(os.path.dirname(log_dir)), "mlruns")
        if uri.startswith("file:") or "://" not in uri:
            # (MLflow 3 refuses its file store unless asked; one folder per run suits the
            # shared file systems where SQLite's locks fail)
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = MlflowClient(uri)
        self.experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or spec["exp_name"]
        self.run_id = state.get("run_id") or self._found(spec) or self._made(spec, variant)
        state["run_id"] = self.run_id
        self.client.update_run(self.run_id, status="RUNNING")

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except Exception:  # noqa: BLE001 - another run may have made it meanwhile
            found = self.client.get_experiment_by_name(name)
            if found is None:
                raise
            return found.experiment_id

    def _found(self, spec: Mapping[str, Any]) -> str | None:
        """The run made by an attempt that died before it wrote trackers.json."""
        runs = self.client.search_runs(
            [self._experiment(self.experiment)],
            f"tags.`easylaunch.run_id` = '{spec['run_id']}'", max_results=1)
        return runs[0].info.run_id if runs else None

    def _made(self, spec: Mapping[str, Any], variant: Any) -> str:
        from mlflow.entities import Param

        run = self.client.create_run(
            self._experiment(self.experiment), run_name=spec["run_id"],
            tags={"easylaunch.run_id": spec["run_id"], "easylaunch.sweep": spec["sweep"],
                  "easylaunch.exp": spec["exp_name"]})
        params = [Param(k, str(v)[:6000]) for k, v in flat_items(_config(variant)).items()]
        for start in range(0, len(params), 100):  # (log_batch takes 100 params at most)
            self.client.log_batch(run.info.run_id, params=params[start:start + 100])
        return run.info.run_id

    def send(self, points: list[StepValues]) -> None:
        from mlflow.entities import Metric

        metrics = [Metric(k, v, int(t * 1000), step) for step, t, values in points
                   for k, v in values.items()]
        for start in range(0, len(metrics), 1000):  # (log_batch takes 1000 metrics at most)
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def close(self, outcome: str) -> None:
        self.client.set_terminated(self.run_id, outcome)


class _TensorBoard:
    """Scalars in ``<run folder>/tensorboard``; each attempt begins with a session start at
    its first step, so readers drop what a killed attempt wrote from that step on."""

    confirms_each_batch = True

    def __init__(self, spec: Mapping[str, Any], log_dir: str, variant: Any, state: dict
                 ) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.writer = EventFileWriter(os.path.join(log_dir, "tensorboard"))
        self.started = False

    def send(self, points: list[StepValues]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary

        for step, wall_time, values in points:
            if not self.started:
                self.started = True
                self.writer.add_event(Event(step=step, wall_time=wall_time,
                                            session_log=SessionLog(status=SessionLog.START)))
            self.writer.add_event(Event(step=step, wall_time=wall_time, summary=Summary(
                value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()])))
        self.writer.flush()

    def close(self, outcome: str) -> None:
        self.writer.close()


OPENERS: dict[str, Callable[..., Any]] = {
    "wandb": _WandB, "mlflow": _MLflow, "tensorboard": _TensorBoard}


def _config(variant: Any) -> dict[str, Any]:
    """What a tracker keeps as the run's configuration: the variant."""
    return dict(variant) if isinstance(variant, Mapping) else {"variant": variant}




def _warn(name: str, what: str, exc: BaseException) -> None:
    hint = f" (pip install 'easylaunch[{name}]')" \
        if isinstance(exc, ImportError) else ""
    print(f"easylaunch: tracker {name} {what}: {type(exc).__name__}: {exc}{hint}; the run "
          "goes on without it", file=sys.stderr)


class Mirror:
    """The run's trackers, sent each batch of metrics lines written (``send``, from a thread
    of the mirror's own) and closed when the function ends (``close``)."""

    def __init__(self, log_dir: str, trackers: dict[str, Any], state: dict[str, dict],
                 steps: _Steps) -> None:
        self.log_dir, self.trackers, self.state, self.steps = log_dir, trackers, state, steps
        self.sent: dict[str, int] = {}  # tracker -> the last step this attempt sent it
        self.pending: queue.Queue[list[str] | None] = queue.Queue()  # batches; None: the end
        self.sender = threading.Thread(target=self._send_pending, name="easylaunch-trackers",
                                       daemon=True)
        self.sender.start()

    def _each(self, what: str, call: Callable[[str, Any], None]) -> None:
        for name, tracker in list(self.trackers.items()):
            try:
                call(name, tracker)
            except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
                del self.trackers[name]
                _warn(name, what, exc)
        # (a failed write: written again next batch; at worst an attempt sends steps twice)
        with contextlib.suppress(OSError):
            write_json_atomic(os.path.join(self.log_dir, TRACKERS_JSON), self.state)

    def _send(self, name: str, tracker: Any, points: list[StepValues]) -> None:
        if not points:
            return
        tracker.send(points)
        self.sent[name] = points[-1][0]
        if tracker.confirms_each_batch:
            self.state[name]["step"] = points[-1][0]

    def replay(self, lines: list[dict[str, Any]]) -> None:
        """Send each tracker the lines after the last step it took for certain."""
        points = [self.steps.point(line) for line in lines]

        def missed(name: str, tracker: Any) -> None:
            taken = self.state[name].get("step")
            self._send(name, tracker, [p for p in points if taken is None or p[0] > taken])

        self._each("failed", missed)

    def send(self, lines: list[str]) -> None:
        """Queue the metrics lines just written (JSON text) for every tracker left."""
        self.pending.put(list(lines))

    def _send_pending(self) -> None:
        """The sender thread: each batch queued, in order, until the end (None)."""
        while True:
            lines = self.pending.get()
            if lines is None:
                return
            self._send_all([self.steps.point(json.loads(line)) for line in lines])

    def _send_all(self, points: list[StepValues]) -> None:
        self._each("failed", lambda name, tracker: self._send(name, tracker, points))

    def close(self, outcome: str) -> None:
        """Send the lines other processes wrote (a command's own ``log_metrics``), then end
        every tracker's run (``outcome``: FINISHED, FAILED or KILLED, MLflow's words); what was
        sent to them counts as taken from then on."""
        self.pending.put(None)  # (what was queued is sent first; the rest, below)
        self.sender.join()
        steps = _Steps()  # (the file's lines numbered as the attempts before numbered them)
        points = [steps.point(line)
                  for line in _read_lines(os.path.join(self.log_dir, METRICS_JSONL))]

        def catch_up(name: str, tracker: Any) -> None:
            last = [s for s in (self.state[name].get("step"), self.sent.get(name))
                    if s is not None]
            self._send(name, tracker, [p for p in points if not last or p[0] > max(last)])

        self._each("failed", catch_up)

        def close(name: str, tracker: Any) -> None:
            tracker.close(outcome)
            if name in self.sent:
                self.state[name]["step"] = self.sent[name]

        self._each("did not finish", close)


def open_mirror(spec: Mapping[str, Any] | None, log_dir: str, variant: Any
                ) -> Mirror | None:
    """Start the trackers ``spec`` names (bundle.json's ``trackers``) for the run in
    ``log_dir``, and send them the lines they missed; None when it names none."""
    names = list((spec or {}).get("names") or ())
    if not spec or not names:
        return None
    path = os.path.join(log_dir, TRACKERS_JSON)
    try:
        state = read_json(path)
    except ValueError:
        state = {}
    trackers: dict[str, Any] = {}
    for name in names:
        try:
            trackers[name] = OPENERS[name](spec, log_dir, variant, state.setdefault(name, {}))
        except Exception as exc:  # noqa: BLE001 - a tracker never fails the run
            _warn(name, "not started", exc)
    mirror = Mirror(log_dir, trackers, state, _Steps())
    mirror.replay(_read_lines(os.path.join(log_dir, METRICS_JSONL)))
    return mirror
