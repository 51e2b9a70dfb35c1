"""load_sweep, load_histories and plot_sweep (and ``easylaunch plot``) on real sweeps: local,
the one-node Slurm cluster, and EC2 against moto with the instance played here."""

import math

import jobfns
import pytest
from conftest import settings_file
from test_ec2 import aws, ec2_cfg, moto, play  # noqa: F401 - its fixtures, used below

from easylaunch import (
    NoSuchJob,
    load_histories,
    load_sweep,
    plot_sweep,
    run_experiment,
    run_sweep,
    wait_all,
)
from easylaunch.cli import main
from easylaunch.results import NoSuchKey, NoSuchMetric

STEPS = 4
GRID = [dict(lr=lr, seed=seed, opt={"momentum": 0.9}) for lr in (0.1, 0.2) for seed in (0, 1)]


def last_loss(variant: dict) -> float:
    return variant["lr"] * 1 + variant["seed"]  # what log_curve logs at its last step


@pytest.fixture
def local_sweep(tmp_path):
    """A finished local sweep of log_curve runs (and a failing run and one returning a
    tuple in the same experiment), with a settings file naming its registry."""
    config = settings_file(tmp_path)
    jobs = run_sweep(jobfns.log_curve, [dict(v, steps=STEPS) for v in GRID], exp_name="curves",
                     mode="local", config=config)
    wait_all(jobs)
    return config, jobs


def test_load_sweep_has_a_row_per_run_with_variant_result_and_last_metrics(local_sweep):
    config, jobs = local_sweep
    table = load_sweep("curves", config=config)
    assert list(table.columns[:11]) == ["run_id", "exp_name", "sweep", "mode", "state", "note",
                                        "restarts", "runtime_s", "host", "job_id", "log_dir"]
    assert {"lr", "seed", "opt.momentum", "steps", "result.steps", "result.lr",
            "result.on_disk_before_end", "metric.loss", "metric.acc"} <= set(table.columns)
    assert sorted(table["run_id"]) == sorted(j.id for j in jobs)
    assert set(table["state"]) == {"succeeded"} and set(table["mode"]) == {"local"}
    assert table["sweep"].nunique() == 1 and (table["restarts"] == 0).all()
    assert (table["runtime_s"] > 0).all() and table["host"].notna().all()
    assert (table["opt.momentum"] == 0.9).all() and (table["result.steps"] == STEPS).all()
    for _, row in table.iterrows():
        assert row["metric.loss"] == pytest.approx(last_loss(row))
        assert row["metric.acc"] == pytest.approx((STEPS - 1) / STEPS)
        assert row["result.lr"] == row["lr"]
    assert str(jobs[0].log_dir) in set(table["log_dir"])


def test_runs_are_selected_by_sweep_ids_experiment_part_or_run_ids(local_sweep):
    config, jobs = local_sweep
    other = run_experiment(jobfns.interval, variant={"seconds": 0}, exp_name="other",
                           config=config)
    failed = run_experiment(jobfns.fail, variant={"lr": 3}, exp_name="other", config=config)
    wait_all([other, failed])
    sweep = load_sweep("curves", config=config)["sweep"][0]
    assert len(load_sweep(sweep[:5], config=config)) == 4
    assert len(load_sweep("curv", config=config)) == 4  # part of an experiment's name
    both = load_sweep([jobs[0].id[:6], other.id, failed.id[-5:]], config=config)
    assert list(both["run_id"]) == [failed.id, other.id, jobs[0].id]  # newest first
    # a result that is no dict is one column; a failed run has none
    by_id = both.set_index("run_id")
    assert by_id.loc[failed.id, "state"] == "failed" and by_id.loc[failed.id, "result"] is None
    assert len(by_id.loc[other.id, "result"]) == 2  # (start, end)
    assert math.isnan(by_id.loc[other.id, "metric.loss"])
    with pytest.raises(NoSuchJob, match=r"'nothing-here' is no experiment, sweep or run.*"
                                        r"experiments: other, curves"):
        load_sweep("nothing-here", config=config)


def test_load_histories_is_a_long_table_with_the_variants_joined(local_sweep):
    config, jobs = local_sweep
    histories = load_histories("curves", config=config)
    assert list(histories.columns[:6]) == ["run_id", "source", "metric", "step", "time", "value"]
    assert {"lr", "seed", "opt.momentum"} <= set(histories.columns)
    assert len(histories) == len(jobs) * STEPS * 2 and set(histories["source"]) == {
        "metrics.jsonl"}
    one = histories[(histories["run_id"] == jobs[0].id) & (histories["metric"] == "loss")]
    assert list(one["step"]) == [0.0, 1.0, 2.0, 3.0]
    assert one["value"].is_monotonic_decreasing and (one["time"] > 1e9).all()
    assert set(load_histories("curves", metrics=["acc"], config=config)["metric"]) == {"acc"}
    with pytest.raises(NoSuchMetric, match="logged reward; metrics there: acc, loss"):
        load_histories("curves", metrics=["reward"], config=config)


def test_plot_sweep_writes_a_png_of_the_curves(local_sweep, tmp_path):
    image = pytest.importorskip("matplotlib.image")
    config, _ = local_sweep
    path = plot_sweep("curves", "loss", by="lr", config=config)
    assert path == tmp_path / "loss-by-lr.png"  # (the test runs in tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(path).shape == (500, 800, 4)
    out = plot_sweep("curves", "acc", x="time", out=tmp_path / "plots" / "acc.png",
                     config=config)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(NoSuchMetric, match="metrics there: acc, loss"):
        plot_sweep("curves", "reward", config=config)
    with pytest.raises(NoSuchKey, match=r"--by 'batch' is no variant key.*keys: .*lr.*seed"):
        plot_sweep("curves", "loss", by="batch", config=config)


def test_the_plot_command_says_where_the_png_is_and_why_it_cannot_draw(local_sweep, tmp_path,
                                                                       capsys):
    config, _ = local_sweep
    assert main(["plot", "curves", "--metric", "loss", "--by", "opt.momentum", "-o", "c.png",
                 "--config", config]) == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 'c.png'}\n"
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["plot", "curves", "--metric", "reward", "--config", config]) == 1
    assert "metrics there: acc, loss" in capsys.readouterr().err
    assert main(["plot", "curves", "--metric", "loss", "--by", "batch", "--config", config]) == 1
    assert "keys: " in capsys.readouterr().err
    assert main(["plot", "no-such-exp", "--metric", "loss", "--config", config]) == 1
    assert "'no-such-exp' is no experiment, sweep or run" in capsys.readouterr().err


def test_load_sweep_of_a_slurm_sweep(slurm_cfg):
    jobs = run_sweep(jobfns.log_curve, [dict(lr=0.5, seed=s, steps=3) for s in (0, 1)],
                     exp_name="slurm-curves", mode="slurm", config=slurm_cfg)
    wait_all(jobs, timeout=120)
    table = load_sweep("slurm-curves", config=slurm_cfg).set_index("run_id")
    assert set(table["state"]) == {"succeeded"} and set(table["mode"]) == {"slurm"}
    for job in jobs:
        row = table.loc[job.id]
        assert row["job_id"] == job.launch_info["backend"]["slurm_job_id"]
        assert row["metric.loss"] == pytest.approx(0.5 + row["seed"])
        assert row["result.steps"] == 3


def test_load_sweep_of_an_ec2_sweep_reads_the_metrics_the_instance_synced(ec2_cfg, play):  # noqa: F811
    jobs = run_sweep(jobfns.log_curve, [dict(lr=0.25, seed=s, steps=3) for s in (0, 1)],
                     exp_name="cloud-curves", mode="ec2", config=ec2_cfg,
                     num_exps_per_instance=2)
    box = play(jobs[0])
    assert [j.result(timeout=60)["steps"] for j in jobs] == [3, 3]
    assert box.wait() == 0  # its last sync done
    assert not (jobs[0].log_dir / "metrics.jsonl").exists()  # (only the record came back)
    table = load_sweep("cloud-curves", config=ec2_cfg).set_index("run_id")
    assert set(table["state"]) == {"succeeded"} and set(table["mode"]) == {"ec2"}
    for job in jobs:
        assert table.loc[job.id, "job_id"] == job.launch_info["backend"]["instance_id"]
        assert table.loc[job.id, "metric.loss"] == pytest.approx(0.25 + table.loc[job.id, "seed"])
    fetched = load_histories("cloud-curves", fetch=True, config=ec2_cfg)
    assert len(fetched) == 2 * 3 * 2
    assert (jobs[0].log_dir / "stdout.log").exists()  # fetch brought the whole folder
