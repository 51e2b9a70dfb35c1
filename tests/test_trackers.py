"""TRACKERS: a run's log_metrics lines mirrored to W&B (offline), MLflow (a local file store)
and TensorBoard from inside the run, each tracker's run being the easylaunch run, across a
restart too; a tracker that cannot start is a warning, never a failed run. Nothing leaves the
machine."""

import glob
import json
import os
import signal
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trackerfns
from helpers import wait_for
from jobfns import steps_done

from easylaunch import EasyLaunchError, run_command, run_experiment, run_sweep
from easylaunch.results.readers import read_tensorboard

ALL = ["wandb", "mlflow", "tensorboard"]


@pytest.fixture
def offline(tmp_path, monkeypatch):
    """W&B offline, its own files in tmp_path (its runs in the run folders); MLflow's store
    is the log root's mlruns."""
    for name, value in {"WANDB_MODE": "offline", "WANDB_SILENT": "true",
                        "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
                        "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
                        "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
                        "MLFLOW_ALLOW_FILE_STORE": "true"}.items():
        monkeypatch.setenv(name, value)
    for name in ("WANDB_PROJECT", "WANDB_DIR", "WANDB_TAGS", "MLFLOW_TRACKING_URI",
                 "MLFLOW_EXPERIMENT_NAME", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def _wandb_records(path: str):
    """The records of a W&B offline ``.wandb`` file: a 7-byte header, then LevelDB-log
    records in 32 KB blocks (crc32c, length, type: 1 full, 2 first, 3 middle, 4 last)."""
    from wandb.proto import wandb_internal_pb2

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, parts = 7, 32768, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:  # the rest of a block, padded
            pos += left
            continue
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        parts = chunk if kind in (1, 2) else parts + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(parts)
            yield record


def wandb_run(log_dir: Path, run_id: str) -> tuple[list[dict], list[tuple[int, float]]]:
    """The run records and the (step, loss) history of every offline folder of ``run_id``
    in the run folder, in the folders' order (one per attempt)."""
    runs, history = [], []
    folders = sorted(glob.glob(f"{log_dir}/wandb/offline-run-*-{run_id}"))
    assert folders, os.listdir(log_dir)
    for folder in folders:
        for record in _wandb_records(f"{folder}/run-{run_id}.wandb"):
            if record.HasField("run"):
                runs.append({"id": record.run.run_id, "group": record.run.run_group,
                             "project": record.run.project,
                             "config": {u.key: json.loads(u.value_json)
                                        for u in record.run.config.update}})
            if record.HasField("history"):
                items = {i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in record.history.item}
                history.append((items["_step"], items["loss"]))
    return runs, history


def mlflow_run(job, cfg: dict):
    """The MLflow runs tagged with the job's run id, and the first one's loss history."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"file:{cfg['LOCAL_LOG_DIR']}/mlruns")
    experiment = client.get_experiment_by_name("tracked")
    runs = client.search_runs([experiment.experiment_id],
                              f"tags.`easylaunch.run_id` = '{job.id}'")
    return runs, client.get_metric_history(runs[0].info.run_id, "loss")


def test_each_tracker_holds_the_run_under_its_id(cfg, offline):
    variant = {"steps": 6, "every": 3, "step_seconds": 0.01, "lr": 0.1}
    job = run_experiment(trackerfns.train, exp_name="tracked", variant=variant,
                         trackers=ALL, sweep="lr-grid", config=cfg)
    assert job.result(timeout=120) == 6
    runs, history = wandb_run(job.log_dir, job.id)
    assert {r["id"] for r in runs} == {job.id}
    assert runs[0]["group"] == "lr-grid" and runs[0]["project"] == "tracked"
    assert runs[0]["config"]["lr"] == 0.1
    assert history == [(s, 1.0 / s) for s in range(1, 7)]
    found, losses = mlflow_run(job, cfg)
    assert len(found) == 1 and found[0].info.status == "FINISHED"
    assert found[0].data.params["lr"] == "0.1"
    assert found[0].data.tags["easylaunch.sweep"] == "lr-grid"
    assert [(m.step, m.value) for m in losses] == [(s, 1.0 / s) for s in range(1, 7)]
    board = read_tensorboard(job.log_dir / "tensorboard")
    assert [(p.step, p.value) for p in board] == [(s, pytest.approx(1.0 / s))
                                                  for s in range(1, 7)]
    assert "tracker" not in (job.log_dir / "stderr.log").read_text()


def test_trackers_go_where_their_own_variables_say(cfg, offline, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "where-wandb-users-look"))
    monkeypatch.setenv("WANDB_PROJECT", "lab-project")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path / 'lab-mlruns'}")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "lab-experiment")
    variant = {"steps": 2, "every": 1, "step_seconds": 0.01}
    job = run_experiment(trackerfns.train, exp_name="tracked", variant=variant,
                         trackers=["wandb", "mlflow"], config=cfg)
    assert job.result(timeout=120) == 2
    assert not (job.log_dir / "wandb").exists()  # (wandb sync finds it under WANDB_DIR)
    runs, history = wandb_run(tmp_path / "where-wandb-users-look", job.id)
    assert runs[0]["project"] == "lab-project" and history == [(1, 1.0), (2, 0.5)]
    client = MlflowClient(f"file:{tmp_path / 'lab-mlruns'}")
    experiment = client.get_experiment_by_name("lab-experiment")
    found = client.search_runs([experiment.experiment_id],
                               f"tags.`easylaunch.run_id` = '{job.id}'")
    assert len(found) == 1 and found[0].info.status == "FINISHED"
    assert not (Path(cfg["LOCAL_LOG_DIR"]) / "mlruns").exists()


def test_a_commands_own_log_metrics_reach_its_trackers(cfg, offline):
    script = ("from easylaunch import log_metrics\n"
              "for s in range(1, 5): log_metrics(step=s, loss=1 / s)")
    job = run_command([sys.executable, "-c", script], exp_name="tracked", trackers=ALL,
                      config=cfg)
    assert job.wait(timeout=120).value == "succeeded", job.info()
    runs, history = wandb_run(job.log_dir, job.id)
    assert {r["id"] for r in runs} == {job.id}
    assert history == [(s, 1.0 / s) for s in range(1, 5)]
    found, losses = mlflow_run(job, cfg)
    assert [(m.step, m.value) for m in losses] == [(s, 1.0 / s) for s in range(1, 5)]


def test_a_killed_run_goes_on_in_the_same_tracker_runs(cfg, offline):
    """SIGKILLed after step 12 (checkpoint at 10), restarted: the steps go on from the
    checkpoint in the same W&B run id and the same MLflow run; none starts again at step 1."""
    job = run_experiment(trackerfns.train, exp_name="tracked", max_restarts=1, trackers=ALL,
                         variant={"steps": 20, "every": 5, "step_seconds": 0.1}, config=cfg)
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= 12, timeout=60), job.info()
    os.kill(job.info()["pid"], signal.SIGKILL)
    assert job.result(timeout=120) == 20
    assert job.info()["attempt"] == 2
    runs, history = wandb_run(job.log_dir, job.id)
    assert {r["id"] for r in runs} == {job.id}
    assert {step for step, _ in history} == set(range(1, 21))
    assert [step for step, _ in history].count(1) == 1  # (attempt 2 sent what attempt 1 lost)
    found, losses = mlflow_run(job, cfg)
    assert len(found) == 1 and found[0].info.status == "FINISHED"
    steps = [m.step for m in losses]
    assert set(steps) == set(range(1, 21)) and steps.count(1) == 1
    board = sorted(p.step for p in read_tensorboard(job.log_dir / "tensorboard"))
    assert board == list(range(1, 21))  # (what attempt 1 wrote past the checkpoint, dropped)


def test_runs_in_this_process_are_tracked_each_in_its_own_tracker_run(cfg, offline):
    variants = [{"steps": 3, "lr": lr} for lr in (0.1, 0.2)]
    jobs = run_sweep(trackerfns.log_loss, variants, exp_name="tracked", mode="here_no_doodad",
                     trackers=ALL, config=cfg)
    for job, variant in zip(jobs, variants, strict=True):
        runs, history = wandb_run(job.log_dir, job.id)
        assert runs[0]["id"] == job.id and runs[0]["config"]["lr"] == variant["lr"]
        assert [step for step, _ in history] == [1, 2, 3]
        found, losses = mlflow_run(job, cfg)
        assert found[0].data.params["lr"] == str(variant["lr"])
        assert [m.step for m in losses] == [1, 2, 3]


def test_a_tracker_that_cannot_start_is_a_warning(cfg, offline, tmp_path, monkeypatch):
    """wandb not importable where the run runs, MLflow given a store it cannot use: the run
    succeeds, with TensorBoard's events, and says why the others are left out."""
    fake = tmp_path / "no-wandb" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError(\"No module named 'wandb'\")\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        filter(None, [str(fake.parent), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "nowhere-scheme://x")
    job = run_experiment(trackerfns.train, exp_name="tracked", trackers=ALL, config=cfg,
                         variant={"steps": 3, "every": 3, "step_seconds": 0.01})
    assert job.result(timeout=120) == 3
    log = (job.log_dir / "stderr.log").read_text()
    assert "tracker wandb not started" in log and "easylaunch[wandb]" in log
    assert "tracker mlflow not started" in log
    assert [p.step for p in read_tensorboard(job.log_dir / "tensorboard")] == [1, 2, 3]


def test_an_unknown_tracker_is_refused_before_anything_is_made(cfg):
    with pytest.raises(EasyLaunchError, match="TRACKERS must be a list of .wandb., .mlflow."):
        run_experiment(trackerfns.train, trackers=["neptune"], config=cfg,
                       variant={"steps": 1, "every": 1, "step_seconds": 0})
    assert not Path(cfg["LOCAL_LOG_DIR"]).exists()


def test_a_run_on_the_cluster_is_tracked_the_same_way(slurm_cfg, offline):
    job = run_experiment(trackerfns.log_loss, exp_name="tracked", mode="slurm",
                         trackers=ALL, config=slurm_cfg, variant={"steps": 4, "lr": 0.5})
    assert job.result(timeout=180) == 4
    runs, history = wandb_run(job.log_dir, job.id)
    assert {r["id"] for r in runs} == {job.id}
    assert history == [(s, 0.5 / s) for s in range(1, 5)]
    found, losses = mlflow_run(job, slurm_cfg)
    assert len(found) == 1 and [m.step for m in losses] == [1, 2, 3, 4]


def test_a_requeued_cluster_run_goes_on_in_the_same_tracker_runs(slurm_cfg, offline):
    job = run_experiment(trackerfns.train, exp_name="tracked", mode="slurm", max_restarts=1,
                         trackers=ALL, config=slurm_cfg,
                         variant={"steps": 20, "every": 5, "step_seconds": 0.2})
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= 12, timeout=120), job.info()
    subprocess.run(["scontrol", "requeue", job.info()["job_id"]], check=True)
    assert job.result(timeout=240) == 20
    assert {attempt for attempt, _ in steps_done(job.log_dir)} == {1, 2}
    runs, history = wandb_run(job.log_dir, job.id)
    assert {r["id"] for r in runs} == {job.id}
    assert {step for step, _ in history} == set(range(1, 21))
    found, losses = mlflow_run(job, slurm_cfg)
    steps = [m.step for m in losses]
    assert len(found) == 1 and set(steps) == set(range(1, 21)) and steps.count(1) == 1


def test_log_metrics_never_waits_on_a_tracker(tmp_path):
    from easylaunch_job.trackers import Mirror, _Steps

    release = threading.Event()

    class Busy:  # (a tracker whose server takes its time)
        confirms_each_batch = True

        def __init__(self):
            self.points, self.outcome = [], None

        def send(self, points):
            assert release.wait(30)
            self.points += points

        def close(self, outcome):
            self.outcome = outcome

    tracker = Busy()
    mirror = Mirror(str(tmp_path), {"busy": tracker}, {"busy": {}}, _Steps())
    mirror.send(['{"step": 1, "loss": 1.0}'])
    mirror.send(['{"step": 2, "loss": 0.5}'])  # (queued: the tracker still holds the first)
    assert tracker.points == []
    release.set()
    mirror.close("FINISHED")
    assert [(step, values) for step, _, values in tracker.points] == [
        (1, {"loss": 1.0}), (2, {"loss": 0.5})]
    assert tracker.outcome == "FINISHED"
    assert json.loads((tmp_path / "trackers.json").read_text()) == {"busy": {"step": 2}}
