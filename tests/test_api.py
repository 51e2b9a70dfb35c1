"""run_experiment / run_sweep end to end in the local and here_no_doodad modes."""

import json
import os
import time
from pathlib import Path

import jobfns
import pytest

from easylaunch import DoodadConfig, Job, JobState, run_experiment, run_sweep


def test_local_run_returns_result_and_fills_its_run_folder(cfg):
    job = run_experiment(jobfns.train, exp_name="mnist-lr", mode="local", config=cfg,
                         variant=dict(learning_rate=1e-4, parameter="awesome"))
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert job.result() == {"loss": 0.1, "lr": 1e-4}
    folder = job.log_dir
    assert folder.parent.name == "mnist-lr"
    assert folder.name.endswith(f"_mnist-lr_{job.id}")
    assert json.loads((folder / "variant.json").read_text()) == {
        "learning_rate": 1e-4, "parameter": "awesome"}
    launch = json.loads((folder / "launch.json").read_text())
    assert launch["mode"] == "local" and launch["run_id"] == job.id
    assert launch["python"].startswith(f"{os.sys.version_info[0]}.")
    assert launch["cloudpickle"] and launch["command_line"] and launch["host"]
    assert launch["backend"]["pid"] != os.getpid()
    status = json.loads((folder / "status.json").read_text())
    assert status["state"] == "succeeded" and status["exit_code"] == 0
    assert status["ended_at"] >= status["started_at"] >= status["queued_at"]
    assert f"logs to {folder}" in (folder / "stdout.log").read_text()


def test_every_run_gets_its_own_folder(cfg):
    jobs = [run_experiment(jobfns.train, exp_name="same", config=cfg) for _ in range(3)]
    jobs += run_sweep(jobfns.train, [{}, {}], exp_name="same", config=cfg)
    for job in jobs:
        job.wait(timeout=60)
    folders = {job.log_dir for job in jobs}
    assert len(folders) == 5
    assert len({job.id for job in jobs}) == 5


def test_failure_records_traceback_and_result_raises_it(cfg):
    job = run_experiment(jobfns.fail, variant=dict(learning_rate=3), config=cfg)
    assert job.wait(timeout=60) is JobState.FAILED
    status = job.info()
    assert status["exit_code"] == 1
    assert "ValueError: bad learning rate 3" in status["error"]
    assert "jobfns.py" in status["error"]
    with pytest.raises(ValueError, match="bad learning rate 3"):
        job.result()


def test_function_receives_doodad_config(cfg):
    job = run_experiment(jobfns.echo, exp_name="cfg", variant={"a": 1}, config=cfg)
    out = job.result(timeout=60)
    config = DoodadConfig(**out["config"])
    assert config.exp_name == time.strftime("%y-%m-%d-cfg")  # dated, as doodad's
    assert config.extra_launch_info["base_exp_name"] == "cfg"
    assert config.extra_launch_info["instance_type"] == "None"
    assert config.base_log_dir == str(job.log_dir)
    assert config.use_gpu is False and config.gpu_id == 0  # doodad's default
    assert config.script_name
    assert config.extra_launch_info["run_id"] == job.id
    assert config.extra_launch_info["mode"] == "local"
    assert out["variant"] == {"a": 1}
    assert out["cwd"] == os.getcwd()


def test_sweep_runs_every_variant_with_a_concurrency_cap(cfg):
    jobs = run_sweep(jobfns.interval, [dict(seconds=0.5)] * 4, exp_name="cap", config=cfg,
                     max_parallel=2)
    spans = sorted(job.result(timeout=60) for job in jobs)
    most_at_once = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most_at_once == 2


def test_here_no_doodad_runs_in_this_process(cfg):
    job = run_experiment(jobfns.echo, mode="here_no_doodad", variant={"x": 1}, config=cfg)
    assert job.status() is JobState.SUCCEEDED  # finished when returned
    assert job.result()["pid"] == os.getpid()
    assert json.loads((job.log_dir / "status.json").read_text())["state"] == "succeeded"
    assert not (job.log_dir / "bundle").exists()


def test_here_no_doodad_keeps_unpicklable_results_and_records_failures(cfg, capsys):
    job = run_experiment(lambda c, v: print("hello") or (x for x in ()), mode="here_no_doodad",
                         config=cfg)
    assert job.status() is JobState.FAILED  # the generator cannot be saved for later processes
    assert "cannot be pickled" in job.info()["error"]
    assert "hello" in (job.log_dir / "stdout.log").read_text()


def test_a_launch_says_what_it_started_in_one_line_unless_quiet(cfg, capsys):
    jobs = run_sweep(jobfns.echo, [{"x": 1}, {"x": 2}], exp_name="said", config=cfg)
    sweep = jobs[0].launch_info["sweep_id"]
    assert capsys.readouterr().err == (
        f"easylaunch local: 2 runs of said launched; folders in {jobs[0].log_dir.parent}; "
        f"follow: easylaunch ls --sweep {sweep}\n")
    (job,) = run_sweep(jobfns.echo, [{"x": 1}], exp_name="said", config=cfg)
    assert capsys.readouterr().err == (
        f"easylaunch local: run {job.id} of said launched; folder {job.log_dir}; follow: "
        f"easylaunch logs -f {job.id}\n")
    run_sweep(jobfns.echo, [{"x": 1}], exp_name="said", config={**cfg, "LAUNCH_LINE": False})
    assert capsys.readouterr().err == ""
    # settings from a file a bare `easylaunch` would not read: the follow command names it
    settings = Path(cfg["LOCAL_LOG_DIR"]).parent / "elsewhere.py"
    settings.write_text("".join(f"{key} = {value!r}\n" for key, value in cfg.items()))
    (job,) = run_sweep(jobfns.echo, [{"x": 1}], exp_name="said", config=str(settings))
    assert capsys.readouterr().err.endswith(
        f"follow: easylaunch logs --config {settings} -f {job.id}\n")
    [j.result(timeout=60) for j in jobs]


def test_variants_are_recorded_as_data_and_reach_the_function_as_given(cfg):
    import datetime

    import numpy as np

    def kinds(doodad_config, variant):
        return {k: type(v).__name__ for k, v in variant.items()}

    variant = {"seed": np.int64(3), "lr": np.float32(0.5), "sizes": np.arange(2),
               "shape": (2, 3), "day": datetime.date(2026, 1, 2), "out": Path("/data/x")}
    with pytest.warns(UserWarning, match=r"'day', 'out' hold values JSON cannot hold"):
        job = run_experiment(kinds, variant=variant, exp_name="as-data", config=cfg)
    assert job.result(timeout=60) == {"seed": "int64", "lr": "float32", "sizes": "ndarray",
                                      "shape": "tuple", "day": "date", "out": "PosixPath"}
    assert json.loads((job.log_dir / "variant.json").read_text()) == {
        "seed": 3, "lr": 0.5, "sizes": [0, 1], "shape": [2, 3], "day": "2026-01-02",
        "out": "/data/x"}


def test_here_no_doodad_raises_the_functions_exception_in_the_caller(cfg):
    """As doodad's did: a debugger's post-mortem lands in the function; the run is recorded
    failed (its log keeps the traceback) and the runs after it as not run."""
    with pytest.raises(ValueError, match="bad learning rate") as raised:
        run_sweep(jobfns.fail, [{}, {}], exp_name="raises", mode="here_no_doodad", config=cfg)
    assert raised.traceback[-1].name == "fail"  # the function's own frame
    first, second = sorted((Path(cfg["LOCAL_LOG_DIR"]) / "raises").iterdir(),
                           key=lambda p: json.loads((p / "launch.json").read_text())["sweep_index"])
    failed, skipped = Job.from_run_dir(first), Job.from_run_dir(second)
    assert failed.status() is JobState.FAILED and "bad learning rate" in failed.info()["error"]
    assert "ValueError: bad learning rate" in failed.stderr_path.read_text()
    with pytest.raises(ValueError, match="bad learning rate"):
        failed.result()
    assert skipped.status() is JobState.CANCELLED
    assert "not run" in skipped.info()["error"]


def test_job_reconnects_from_its_run_folder(cfg):
    job = run_experiment(jobfns.train, variant=dict(learning_rate=2), config=cfg)
    job.wait(timeout=60)
    again = Job.from_run_dir(job.log_dir)
    assert again.id == job.id and again.status() is JobState.SUCCEEDED
    assert again.result() == {"loss": 0.1, "lr": 2}


def test_variant_with_shell_characters_arrives_intact(cfg):
    nasty = {"text": "it's \"quoted\" $(touch /tmp/pwned-easylaunch) `id`\nnew line; rm -rf ~"}
    job = run_experiment(jobfns.write_file, exp_name="nasty", variant=nasty, config=cfg)
    path = job.result(timeout=60)
    with open(path) as f:
        assert f.read() == nasty["text"]
    assert not os.path.exists("/tmp/pwned-easylaunch")
    assert json.loads((job.log_dir / "variant.json").read_text()) == nasty


def test_a_later_process_tracks_a_run_with_the_settings_it_was_launched_with(cfg):
    cfg["LOCAL_CANCEL_GRACE_SECONDS"] = 7.5  # not the default, and in no settings file
    job = run_experiment(jobfns.train, config=cfg, max_parallel=1)
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    later = Job.from_run_dir(job.log_dir)
    assert later.mode.settings.LOCAL_CANCEL_GRACE_SECONDS == 7.5
    assert later.mode.opts["max_parallel"] == 1
