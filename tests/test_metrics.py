"""easylaunch.log_metrics (the runner's metrics writer) and the readers of run folders'
metrics: metrics.jsonl, rlkit's progress.csv, TensorBoard event files."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import jobfns
import pytest
from helpers import wait_for

import easylaunch
from easylaunch import log_metrics, run_experiment, run_sweep
from easylaunch.errors import install_hint
from easylaunch.results import readers
from easylaunch.results.readers import Point, read_metrics_jsonl, read_progress_csv, read_run
from easylaunch_job.environment import ENV_METRICS_FILE
from easylaunch_job.metrics import (
    METRICS_FLUSH_BYTES,
    METRICS_FLUSH_SECONDS,
    PACKAGE_API,
    _metrics_files,
    flush_metrics,
    metrics_into,
)


@pytest.fixture
def here(tmp_path, monkeypatch):
    """Outside a run, in a folder of the test's own: log_metrics writes ./metrics.jsonl."""
    for name in (ENV_METRICS_FILE, "RANK", "LOCAL_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / "metrics.jsonl"


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_local_run_logs_buffered_lines_that_are_on_disk_when_it_ends(cfg):
    job = run_experiment(jobfns.log_curve, variant={"lr": 0.1, "steps": 4}, config=cfg)
    result = job.result(timeout=60)
    assert result["on_disk_before_end"] is False  # buffered while the function ran
    logged = lines(job.log_dir / "metrics.jsonl")  # written before the run's end was recorded
    assert [line["step"] for line in logged] == [0, 1, 2, 3]
    assert [set(line) for line in logged] == [{"step", "time", "loss", "acc"}] * 4
    assert logged[0]["loss"] == pytest.approx(0.4) and logged[3]["acc"] == 0.75
    assert all(abs(line["time"] - time.time()) < 120 for line in logged)


def test_here_no_doodad_logs_into_the_run_folder_and_leaves_this_process_as_it_was(cfg, here):
    job = run_experiment(jobfns.log_curve, variant={"lr": 1, "steps": 2}, config=cfg,
                         mode="here_no_doodad")
    assert len(lines(job.log_dir / "metrics.jsonl")) == 2
    assert ENV_METRICS_FILE not in os.environ
    log_metrics(x=1)
    flush_metrics()
    assert lines(here)[0]["x"] == 1


def test_outside_a_run_it_writes_metrics_jsonl_here_with_nan_as_null(here):
    import numpy as np

    log_metrics(step=0, loss=0.5, nan=math.nan, up=math.inf, down=-math.inf, ok=True,
                f32=np.float32(0.25), i64=np.int64(7), done=np.bool_(True))
    log_metrics(loss=0.25)
    assert not here.exists()  # still buffered
    flush_metrics()
    first, second = lines(here)
    assert first == {"step": 0, "time": first["time"], "loss": 0.5, "nan": None,
                     "up": math.inf, "down": -math.inf, "ok": 1, "f32": 0.25, "i64": 7,
                     "done": 1}
    assert second["step"] is None and second["loss"] == 0.25
    # a line without a step is placed at its line number
    assert [(p.metric, p.step) for p in read_metrics_jsonl(here)][-1] == ("loss", 1.0)
    assert math.isnan(next(p.value for p in read_metrics_jsonl(here) if p.metric == "nan"))


def test_values_as_wandb_log_takes_them_and_the_step_first(here):
    log_metrics({"loss": 0.5, "acc": 0.25}, step=2)
    log_metrics({"loss": 0.4}, lr=0.1)
    log_metrics(3, loss=0.3)
    flush_metrics()
    assert [{k: v for k, v in line.items() if k != "time"} for line in lines(here)] == [
        {"step": 2, "loss": 0.5, "acc": 0.25}, {"step": None, "loss": 0.4, "lr": 0.1},
        {"step": 3, "loss": 0.3}]
    with pytest.raises(TypeError, match=r"give the step once"):
        log_metrics(3, step=4, loss=0.3)


def test_a_value_that_is_not_a_number_is_a_type_error_naming_its_key(here):
    with pytest.raises(TypeError, match="loss= must be a number, not a str"):
        log_metrics(step=1, acc=0.5, loss="low")
    with pytest.raises(TypeError, match=r"weights= must be a number, not a list"):
        log_metrics(weights=[1, 2])
    with pytest.raises(TypeError, match=r"step= must be a number"):
        log_metrics(step="one", loss=1)
    with pytest.raises(TypeError, match="at least one value"):
        log_metrics(step=3)
    with pytest.raises(TypeError, match="'time' is each line's own time"):
        log_metrics(time=3.5)
    import torch

    with pytest.raises(TypeError, match=r"not a Tensor \(a tensor or array: log its .item\(\)\)"):
        log_metrics(loss=torch.tensor([0.5, 0.25]))
    flush_metrics()
    assert not here.exists()  # no half line of a refused call


def test_only_rank_0_writes(here, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    log_metrics(step=0, loss=1.0)
    with pytest.raises(TypeError, match="loss="):  # other ranks check values all the same
        log_metrics(loss=None)
    flush_metrics()
    assert not here.exists()
    rank0 = here.parent / "rank0"
    rank0.mkdir()
    monkeypatch.chdir(rank0)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    log_metrics(step=0, loss=1.0)
    flush_metrics()
    assert lines(rank0 / "metrics.jsonl")[0]["loss"] == 1.0


def test_a_line_cut_short_is_skipped_and_ended_by_the_next_writer(here):
    here.write_text('{"step": 0, "time": 1.0, "loss": 3}\n{"step": 1, "time": 2.0, "loss": 2}\n'
                    '{"step": 2, "time": 3.0, "lo')  # a crash mid-write
    assert read_metrics_jsonl(here) == [Point("metrics.jsonl", "loss", 0.0, 1.0, 3.0),
                                        Point("metrics.jsonl", "loss", 1.0, 2.0, 2.0)]
    log_metrics(step=2, loss=1)  # the run's next attempt
    flush_metrics()
    assert [p.value for p in read_metrics_jsonl(here)] == [3.0, 2.0, 1.0]
    assert here.read_text().splitlines()[2] == '{"step": 2, "time": 3.0, "lo'


def test_the_buffer_is_written_past_its_size_and_after_a_quiet_while(here):
    log_metrics(step=0, loss=1.0)
    assert not here.exists()
    assert wait_for(here.exists, METRICS_FLUSH_SECONDS + 3)  # the flush thread
    for step in range(METRICS_FLUSH_BYTES // 40):
        log_metrics(step=step, loss=0.5)
    assert here.stat().st_size > METRICS_FLUSH_BYTES // 2


def test_a_run_that_raises_has_its_lines_on_disk_when_it_ends(cfg, here):
    def log_then_fail(doodad_config, variant):
        from easylaunch import log_metrics

        log_metrics(step=0, loss=2.0)
        raise ValueError("diverged")

    with pytest.raises(ValueError, match="diverged"):
        run_experiment(log_then_fail, variant={}, exp_name="fails", config=cfg,
                       mode="here_no_doodad")
    (log_dir,) = (Path(cfg["LOCAL_LOG_DIR"]) / "fails").iterdir()
    assert [line["loss"] for line in lines(log_dir / "metrics.jsonl")] == [2.0]


def test_runs_in_this_process_close_their_metrics_files(cfg, here):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    run_experiment(jobfns.log_curve, variant={"lr": 1, "steps": 1}, config=cfg,
                   mode="here_no_doodad")  # (opens the registry and the like once)
    before = fds()
    jobs = run_sweep(jobfns.log_curve, [{"lr": lr, "steps": 2} for lr in range(30)],
                     config=cfg, mode="here_no_doodad")
    assert all(len(lines(j.log_dir / "metrics.jsonl")) == 2 for j in jobs)
    assert fds() - before < 10
    assert not {str(j.log_dir / "metrics.jsonl") for j in jobs} & set(
        _metrics_files)


def test_a_stop_during_the_last_flush_keeps_its_lines_and_puts_the_environment_back(
        here, monkeypatch):
    write = os.write

    def stopped(fd, data):  # the stop signal's exception, raised during the write
        monkeypatch.setattr(os, "write", write)
        raise KeyboardInterrupt

    run_dir = here.parent / "run"
    with pytest.raises(KeyboardInterrupt), metrics_into(str(run_dir)):
        log_metrics(step=0, loss=1.0)
        log_metrics(step=1, loss=0.5)
        monkeypatch.setattr(os, "write", stopped)
    assert ENV_METRICS_FILE not in os.environ
    flush_metrics()  # (as at the process's exit)
    assert [line["loss"] for line in lines(run_dir / "metrics.jsonl")] == [1.0, 0.5]


def test_a_full_disk_is_reported_once_and_the_run_goes_on(here, monkeypatch, capsys):
    def full(fd, data):
        raise OSError(28, "No space left on device")

    write = os.write
    monkeypatch.setattr(os, "write", full)
    for step in range(3):
        log_metrics(step=step, loss=1.0)
        flush_metrics()
    monkeypatch.setattr(os, "write", write)
    # (this test's file: an earlier test's writer, still flushing, meets the full disk too)
    said = [line for line in capsys.readouterr().err.splitlines() if str(here) in line]
    assert len(said) == 1 and "could not be written" in said[0]
    assert "No space left on device" in said[0]
    log_metrics(step=3, loss=0.5)  # room again: later lines are written
    flush_metrics()
    assert [line["step"] for line in lines(here)] == [3]


def test_log_metrics_works_where_easylaunch_is_not_installed(cfg, tmp_path):
    """The runner gives a function that imports easylaunch.log_metrics its own helpers."""
    from test_bundle import _standalone_python

    job = run_experiment(jobfns.log_curve, variant={"lr": 0.5, "steps": 3}, config=cfg)
    job.wait(timeout=60)
    python, env = _standalone_python(tmp_path)
    env["PYTHONPATH"] += os.pathsep + str(next((job.log_dir / "bundle" / "code").iterdir()))
    out_dir = tmp_path / "out"
    proc = subprocess.run(python + [str(job.log_dir / "bundle/job.pyz"), "run",
                                    str(job.log_dir / "bundle"), "--log-dir", str(out_dir)],
                          env=env, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [line["step"] for line in lines(out_dir / "metrics.jsonl")] == [0, 1, 2]
    assert {n: getattr(easylaunch, n) for n in PACKAGE_API} == PACKAGE_API  # the same names


# -- readers ------------------------------------------------------------------------------------

# What rlkit's logger.dump_tabular writes: sorted keys, one row per epoch, "Epoch" among them.
RLKIT_CSV = """\
Epoch,evaluation/Average Returns,exploration/num steps total,time/epoch (s),trainer/QF1 Loss
0,-1203.5,1000,4.1,12.5
1,-840.25,2000,3.9,8.0
2,-512.0,3000,4.0,nan
3,-301.5,4000,4.2,"""


def test_progress_csv_as_rlkit_writes_it(tmp_path):
    path = tmp_path / "progress.csv"
    path.write_text(RLKIT_CSV + "\n4,-120.0,50")  # a row being written: left out
    points = read_progress_csv(path)
    returns = [(p.step, p.value) for p in points if p.metric == "evaluation/Average Returns"]
    assert returns == [(0.0, -1203.5), (1.0, -840.25), (2.0, -512.0), (3.0, -301.5)]
    assert {p.metric for p in points} == {"evaluation/Average Returns", "time/epoch (s)",
                                          "exploration/num steps total", "trainer/QF1 Loss"}
    loss = [p.value for p in points if p.metric == "trainer/QF1 Loss"]
    assert loss[:2] == [12.5, 8.0] and math.isnan(loss[2]) and len(loss) == 3  # "" left out
    assert all(p.source == "progress.csv" and math.isnan(p.time) for p in points)
    path.write_text("loss,acc\n0.5,0.1\n0.25,0.2\n")  # no epoch column: the row's number
    assert [(p.metric, p.step) for p in read_progress_csv(path)] == [
        ("loss", 0.0), ("acc", 0.0), ("loss", 1.0), ("acc", 1.0)]


def test_tensorboard_event_files_anywhere_in_the_run_folder(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(tmp_path / "tb" / "train"))
    for step in range(3):
        writer.add_scalar("loss", 1.0 / (step + 1), step)
        writer.add_scalar("reward", float(step * 10), step, new_style=True)
    writer.close()
    board = {(p.metric, p.step): p.value for p in read_run(tmp_path)}
    assert board == {("loss", 0.0): 1.0, ("loss", 1.0): 0.5, ("loss", 2.0): pytest.approx(1 / 3),
                     ("reward", 0.0): 0.0, ("reward", 1.0): 10.0, ("reward", 2.0): 20.0}
    assert all(p.time > 1e9 and p.source == "tensorboard" for p in read_run(tmp_path))
    only = list(read_run(tmp_path, metrics=["reward"]))  # only that tag's points are built
    assert [(p.metric, p.value) for p in only] == [("reward", 0.0), ("reward", 10.0),
                                                    ("reward", 20.0)]
    # a metric found in several formats is taken from the first: metrics.jsonl here
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "time": 1.5, "loss": 9}\n')
    (tmp_path / "progress.csv").write_text("Epoch,loss,reward\n0,7,8\n")
    assert [(p.source, p.metric, p.value) for p in read_run(tmp_path)] == [
        ("metrics.jsonl", "loss", 9.0), ("progress.csv", "reward", 8.0)]


def test_event_files_without_the_tensorboard_package_are_passed_over_saying_why_once(
        tmp_path, monkeypatch, recwarn):
    monkeypatch.setattr(readers, "_warned_no_tensorboard", False)
    runs = [tmp_path / "a", tmp_path / "b"]
    for run in runs:
        run.mkdir()
        (run / "events.out.tfevents.1.host").write_bytes(b"")
        (run / "metrics.jsonl").write_text('{"step": 0, "time": 1.5, "loss": 9}\n')
    monkeypatch.setitem(sys.modules, "tensorboard.backend.event_processing.event_accumulator",
                        None)
    assert [p.metric for run in runs for p in read_run(run)] == ["loss", "loss"]
    assert len(recwarn) == 1  # once a process, not once a run
    assert install_hint("tensorboard") in str(recwarn[0].message)  # (-e '<checkout>[...]' here)
    assert readers.event_folders(runs[0]) == [runs[0]]
