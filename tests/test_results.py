"""load_sweep, load_histories and plot_sweep (and ``easylaunch plot``) on real sweeps: local,
the test Slurm cluster, and EC2 against moto with the instance played here."""

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from test_ec2 import aws, ec2_cfg, moto, play  # noqa: F401 - its fixtures, used below

from easylaunch import (
    NoSuchRun,
    load_histories,
    load_sweep,
    plot_sweep,
    run_experiment,
    run_sweep,
    wait_all,
)
from easylaunch.cli import main
from easylaunch.dashboard import views
from easylaunch.results import NoSuchKey, NoSuchMetric, plot
from easylaunch.results.plot import _curves
from easylaunch.results.sweep import metrics_folder, select
from easylaunch.settings import load_settings
from easylaunch.tracking.listing import Shown, grouped_lines
from easylaunch.tracking.refresh import refresh_entries
from easylaunch.tracking.registry import Registry, open_registry

STEPS = 4
GRID = [dict(lr=lr, seed=seed, opt={"momentum": 0.9}) for lr in (0.1, 0.2) for seed in (0, 1)]


def last_loss(variant: dict) -> float:
    return variant["lr"] * 1 + variant["seed"]  # what log_curve logs at its last step


@pytest.fixture
def local_sweep(tmp_path):
    """A finished local sweep ("curves") of log_curve runs over GRID, and a settings file
    naming its registry."""
    config = settings_file(tmp_path)
    jobs = run_sweep(jobfns.log_curve, [dict(v, steps=STEPS) for v in GRID], exp_name="curves",
                     mode="local", config=config)
    wait_all(jobs)
    return config, jobs


def test_why_runs_failed_is_in_load_sweep_and_ls_even_when_every_run_failed(tmp_path):
    config = {"LOCAL_LOG_DIR": str(tmp_path / "logs"),
              "REGISTRY_PATH": str(tmp_path / "registry.sqlite3"),
              "CODE_DIRS_TO_MOUNT": [str(Path(jobfns.__file__).parent)]}
    jobs = run_sweep(jobfns.fail, [{"learning_rate": 1}, {"learning_rate": 2}],
                     exp_name="all-fail", config=config)
    [job.wait(timeout=60) for job in jobs]
    table = load_sweep("all-fail", config=config)
    assert sorted(table["error"]) == [f"ValueError: bad learning rate {lr}" for lr in (1, 2)]
    assert table["result"].isna().all()  # (there, though no run has a result)
    settings = tmp_path / "settings.py"
    settings.write_text("".join(f"{k} = {v!r}\n" for k, v in config.items()))
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(settings),
                          "ls"], capture_output=True, text=True, check=True).stdout
    header, *rows = [line.split("\t") for line in out.splitlines()]
    assert sorted(row[header.index("REASON")] for row in rows) == [
        f"ValueError: bad learning rate {lr}" for lr in (1, 2)]
    shown = grouped_lines(refresh_entries(open_registry(config["REGISTRY_PATH"]),
                                          open_registry(config["REGISTRY_PATH"]).list()[0]),
                          None, 100, time.time())
    assert {"    ↳ ValueError: bad learning rate 1", "    ↳ ValueError: bad learning rate 2"
            } <= set(shown)


def test_load_sweep_has_a_row_per_run_with_variant_result_and_last_metrics(local_sweep):
    config, jobs = local_sweep
    table = load_sweep("curves", config=config)
    assert list(table.columns[:12]) == ["run_id", "exp_name", "sweep", "mode", "state", "note",
                                        "error", "restarts", "runtime_s", "host", "job_id",
                                        "log_dir"]
    assert table["error"].isna().all()
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
    with pytest.raises(NoSuchRun, match=r"'nothing-here' is no experiment, sweep or run.*"
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


def test_a_plot_is_titled_by_its_experiment(local_sweep):
    from easylaunch.results.plot import _named

    config, jobs = local_sweep
    sweep = jobs[0].launch_info["sweep_id"]
    assert _named("curves", config) == "curves"
    assert _named(sweep, config) == f"curves ({sweep})"


def test_plot_sweep_writes_a_png_of_the_curves(local_sweep, tmp_path):
    from matplotlib import image

    config, _ = local_sweep
    path = plot_sweep("curves", "loss", by="lr", config=config)
    assert path == tmp_path / "loss-by-lr.png"  # (the test runs in tmp_path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert image.imread(path).shape == (500, 800, 4)
    out = plot_sweep("curves", "acc", x="time", out=tmp_path / "plots" / "acc.png",
                     config=config)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ticks = []
    import matplotlib.figure

    saved = matplotlib.figure.Figure.savefig
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: (
            ticks.extend(self.axes[0].get_xticks()), saved(self, *a, **k))[1])
        plot_sweep("curves", "loss", out=tmp_path / "steps.png", config=config)
    assert ticks and all(float(t).is_integer() for t in ticks)  # whole steps only
    with pytest.raises(NoSuchMetric, match="metrics there: acc, loss"):
        plot_sweep("curves", "reward", config=config)
    with pytest.raises(NoSuchKey, match=r"^by='batch' is no variant key.*keys: .*lr.*seed"):
        plot_sweep("curves", "loss", by="batch", config=config)  # (Python's name, from Python)
    with pytest.raises(NoSuchMetric, match="logged accuracy; metrics there: acc, loss; did you "
                                           "mean 'acc'"):
        plot_sweep("curves", "accuracy", config=config)


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
    assert "--by 'batch' is no variant key" in capsys.readouterr().err  # (the flag, from the CLI)
    assert main(["plot", "no-such-exp", "--metric", "loss", "--config", config]) == 1
    assert "'no-such-exp' is no experiment, sweep or run" in capsys.readouterr().err
    assert main(["plot", "curvs", "--metric", "loss", "--config", config]) == 1
    assert "did you mean 'curves'?" in capsys.readouterr().err
    assert main(["plot", "curves", "--metric", "accuracy", "--config", config]) == 1
    assert "no run of curves logged accuracy" in capsys.readouterr().err  # (not ['curves'])


def test_a_part_that_names_a_run_and_a_sweep_or_several_sweeps_is_refused(tmp_path):
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add(dict(id=run_id, exp_name=exp, mode="local", state="succeeded",
                      log_dir=str(tmp_path / run_id), created=1e9 + i, sweep=sweep)
                 for i, (run_id, exp, sweep) in enumerate([
                     ("abcd1234", "e", "feed0001"), ("0000aaaa", "e", "feed0001"),
                     ("1111bbbb", "e", "feed0002"), ("2222cccc", "f", "abcd9999")]))

    def ids(part: str) -> list[str]:
        return [e.id for e in select(registry, part)]

    assert ids("feed0001") == ["0000aaaa", "abcd1234"]
    assert ids("abcd1") == ["abcd1234"] and ids("abcd9") == ["2222cccc"]
    with pytest.raises(NoSuchRun, match=r"'abcd' is the start of both run abcd1234 \(e\) and "
                                        "sweep abcd9999: give more characters"):
        select(registry, "abcd")
    with pytest.raises(NoSuchRun, match="'feed' matches several sweeps: feed0002, feed0001; "
                                        "give more characters"):
        select(registry, "feed")
    registry.add([dict(id="3333dddd", exp_name="abcd", mode="local", state="succeeded",
                       log_dir=str(tmp_path), created=2e9)])
    assert ids("abcd") == ["3333dddd"]  # an experiment's name comes first


def test_a_metric_in_several_formats_is_read_from_the_first_everywhere(tmp_path, monkeypatch):
    def two_formats(doodad_config, variant):
        from torch.utils.tensorboard import SummaryWriter

        from easylaunch import log_metrics

        writer = SummaryWriter(log_dir=doodad_config.base_log_dir)
        for step, loss in enumerate((10.0, 5.0)):
            log_metrics(step=step, loss=loss)
            writer.add_scalar("loss", loss * 10, step)
            writer.add_scalar("reward", loss * 2, step)
        writer.close()

    config = settings_file(tmp_path)
    run_experiment(two_formats, variant={}, exp_name="formats", mode="here_no_doodad",
                   config=config).result()
    table = load_sweep("formats", config=config)
    assert table["metric.loss"].tolist() == [5.0] and table["metric.reward"].tolist() == [10.0]
    history = load_histories("formats", config=config)
    assert history[["source", "metric", "value"]].values.tolist() == [
        ["metrics.jsonl", "loss", 10.0], ["metrics.jsonl", "loss", 5.0],
        ["tensorboard", "reward", 20.0], ["tensorboard", "reward", 10.0]]
    drawn = []
    curves = plot._curves
    monkeypatch.setattr(plot, "_curves", lambda points, *args: drawn.append(points)
                        or curves(points, *args))
    plot_sweep("formats", "loss", config=config)
    assert drawn[0][["source", "value"]].values.tolist() == [["metrics.jsonl", 10.0],
                                                             ["metrics.jsonl", 5.0]]


def test_curves_are_each_groups_mean_min_and_max_at_each_step():
    import pandas as pd

    points = pd.DataFrame([  # run, lr, step, time, value
        ("c", 0.2, 0, 300.0, 9.0), ("c", 0.2, 1, 301.0, 8.0),
        ("c", 0.2, 1, 305.0, 7.0),  # step 1 again, by the attempt after a restart
        ("a", 0.1, 0, 100.0, 4.0), ("a", 0.1, 1, 101.0, 2.0),
        ("b", 0.1, 0, 200.0, 6.0), ("b", 0.1, 1, 202.0, 4.0),
        ("d", math.nan, 0, 400.0, 1.0)], columns=["run_id", "lr", "step", "time", "value"])
    curves = {label: group.curve for label, group in _curves(points, "lr", "step").items()}
    assert list(curves) == ["lr=0.1 (2 runs)", "lr=0.2 (1 run)", "lr=(not set) (1 run)"]
    assert curves["lr=0.1 (2 runs)"].to_dict("list") == {
        "x": [0.0, 1.0], "mean": [5.0, 3.0], "low": [4.0, 2.0], "high": [6.0, 4.0]}
    assert curves["lr=0.2 (1 run)"]["mean"].tolist() == [9.0, 7.0]  # the step redone: last
    assert curves["lr=(not set) (1 run)"]["mean"].tolist() == [1.0]
    by_time = _curves(points, "lr", "time")  # the runs' mean seconds since their first value
    assert by_time["lr=0.1 (2 runs)"].curve["x"].tolist() == [0.0, 1.5]
    assert by_time["lr=0.2 (1 run)"].curve["x"].tolist() == [0.0, 5.0]
    (label, group), = _curves(points, None, "step").items()
    assert label == "all (4 runs)" and group.curve["high"].tolist() == [9.0, 7.0]
    assert not group.apart  # (no states given: every run counts)


def drawn_lines(monkeypatch) -> list[list[tuple[str, str]]]:
    """For each figure plot_sweep saves: its lines' legend labels and styles."""
    import matplotlib.figure

    figures, saved = [], matplotlib.figure.Figure.savefig
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", lambda self, *a, **k: (
        figures.append([(line.get_label(), line.get_linestyle())
                        for line in self.axes[0].get_lines()]), saved(self, *a, **k))[1])
    return figures


def test_runs_that_failed_are_drawn_apart_from_the_means(tmp_path, monkeypatch):
    config = settings_file(tmp_path)
    variants = [dict(lr=0.1, seed=0, steps=4), dict(lr=0.1, seed=1, steps=4),
                dict(lr=0.1, seed=50, steps=4, fail_at=2),  # (far above the others, cut short)
                dict(lr=0.2, seed=0, steps=4, fail_at=1)]
    jobs = run_sweep(jobfns.log_curve, variants, exp_name="diverging", mode="local",
                     config=config)
    assert sorted(wait_all(jobs)) == sorted(["succeeded"] * 2 + ["failed"] * 2)
    points = load_histories("diverging", metrics=["loss"], config=config)
    assert dict(zip(points["run_id"], points["state"], strict=True)) == {
        job.id: ("failed" if "fail_at" in v else "succeeded")
        for job, v in zip(jobs, variants, strict=True)}

    groups = _curves(points, "lr", "step")
    assert list(groups) == ["lr=0.1 (2 runs)", "lr=0.2 (0 runs)"]
    kept = groups["lr=0.1 (2 runs)"]
    assert kept.curve["mean"].tolist() == pytest.approx([0.4 + 0.5, 0.3 + 0.5, 0.2 + 0.5,
                                                          0.1 + 0.5])  # seeds 0 and 1 only
    assert kept.curve["high"].tolist() == pytest.approx([1.4, 1.3, 1.2, 1.1])
    (state, run), = kept.apart.values()
    assert state == "failed" and run["value"].tolist() == pytest.approx([50.4, 50.3])
    assert groups["lr=0.2 (0 runs)"].curve.empty
    assert [s for s, _ in groups["lr=0.2 (0 runs)"].apart.values()] == ["failed"]
    counted = _curves(points, "lr", "step", include_failed=True)
    assert list(counted) == ["lr=0.1 (3 runs)", "lr=0.2 (1 run)"]
    assert counted["lr=0.1 (3 runs)"].curve["high"].tolist()[:2] == pytest.approx([50.4, 50.3])

    figures = drawn_lines(monkeypatch)
    plot_sweep("diverging", "loss", by="lr", out=tmp_path / "apart.png", config=config)
    assert main(["plot", "diverging", "--metric", "loss", "--by", "lr", "--include-failed",
                 "-o", str(tmp_path / "in.png"), "--no-show", "--config", config]) == 0
    apart, included = figures
    assert apart == [("lr=0.1 (2 runs)", "-"), ("lr=0.1: 1 failed, not in the mean", "--"),
                     ("lr=0.2: 1 failed, not in the mean", "--")]
    assert included == [("lr=0.1 (3 runs)", "-"), ("lr=0.2 (1 run)", "-")]


def test_variants_keep_empty_dicts_and_leave_out_what_cannot_be_read(tmp_path):
    config = settings_file(tmp_path)
    small = run_experiment(jobfns.double, variant={"x": 1, "opt": {}}, exp_name="v",
                           mode="here_no_doodad", config=config)
    large = run_experiment(jobfns.double, variant={"x": 2, "blob": "z" * 20_000},
                           exp_name="v", mode="here_no_doodad", config=config)
    (large.log_dir / "variant.json").write_text('{"x": 2, "blob": "zzz')  # (damaged)
    with pytest.warns(UserWarning, match=rf"run {large.id}: its variant, too large for the "
                                         r"registry, is left out \(.*variant.json is damaged"):
        table = load_sweep("v", config=config).set_index("run_id")
    assert table.loc[small.id, "opt"] == {} and table.loc[small.id, "x"] == 1  # as ls shows
    assert math.isnan(table.loc[large.id, "x"])
    assert not [c for c in table.columns if c.startswith("_large_variant")]


def test_a_cluster_runs_metrics_are_read_where_its_job_writes_them(tmp_path):
    """A shared file system: the job's folder is read, whatever formats it holds."""
    here, there = tmp_path / "here", tmp_path / "scratch"
    here.mkdir()
    there.mkdir()
    (here / "launch.json").write_text(json.dumps({
        "run_id": "abcd1234", "exp_name": "e", "mode": "slurm", "request": {},
        "backend": {"job_log_dir": str(there)}}))
    (there / "events.out.tfevents.1.node").write_bytes(b"")  # (event files alone)
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add([dict(id="abcd1234", exp_name="e", mode="slurm", state="succeeded",
                       log_dir=str(here), remote_log_dir=str(there), created=1e9)])
    shown = Shown(registry.find("abcd1234"), "succeeded", 0)
    assert metrics_folder(shown, fetch=False) == there
    (there / "events.out.tfevents.1.node").unlink()
    there.rmdir()  # (not reachable from here: the local copy)
    assert metrics_folder(shown, fetch=False) == here


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
    listed = views.runs_page(open_registry(load_settings(ec2_cfg).REGISTRY_PATH),
                             views.Filters(exp="cloud-curves"), 1)[0]
    assert {r.id: r.metrics[0] for g in listed for r in g.rows} == {
        job.id: ("loss", f"{0.25 + seed:g}") for seed, job in enumerate(jobs)}  # (as synced)
    table = load_sweep("cloud-curves", config=ec2_cfg).set_index("run_id")
    assert set(table["state"]) == {"succeeded"} and set(table["mode"]) == {"ec2"}
    for job in jobs:
        assert table.loc[job.id, "job_id"] == job.launch_info["backend"]["instance_id"]
        assert table.loc[job.id, "metric.loss"] == pytest.approx(0.25 + table.loc[job.id, "seed"])
    fetched = load_histories("cloud-curves", fetch=True, config=ec2_cfg)
    assert len(fetched) == 2 * 3 * 2
    assert (jobs[0].log_dir / "stdout.log").exists()  # fetch brought the whole folder


@pytest.mark.parametrize("text", [
    '{"step": 0, "loss": 1.0, "acc": 0.1, "ok": true}\n{"step": 1, "loss": 0.5}\n'
    '{"step": 1, "loss": 0.25}\n{"loss": 9}\n{"step": 0.5, "acc": 0.3}\n{"step": 2, "lo',
    '{"step": 0, "loss": 1.0, "acc": null}\n{"step": 1, "acc": 2}\n',  # null: NaN, kept
    '{"step": 3, "loss": "high", "acc": 1}\n[1, 2]\n\n{"step": 1, "acc": 5}\n',
    '{"step": 0, "train_time": 1700000000, "created_at": 5}\n',  # (no dates made of these)
    '', '{"step": 0, "lo'])
def test_a_runs_last_values_are_the_long_tables(tmp_path, text):
    from easylaunch.results.readers import last_points, last_values, read_run

    (tmp_path / "metrics.jsonl").write_text(text)
    (tmp_path / "progress.csv").write_text("Epoch,loss,other\n0,7,1\n1,8,2\n")
    expected = {m: value for m, (_, value) in last_points(read_run(tmp_path)).items()}
    got = last_values(tmp_path)
    assert got.keys() == expected.keys()
    assert all(got[k] == expected[k] or (got[k] != got[k] and expected[k] != expected[k])
               for k in got)
