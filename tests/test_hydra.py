"""Hydra's launcher (``hydra/launcher=easylaunch``): a Hydra app written as Hydra's tutorial
writes one, run as a multirun from the command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml
from conftest import REPO_DIR, settings_file
from helpers import wait_for

from easylaunch import load_sweep

APP = """
import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def train(cfg: DictConfig) -> float:
    time.sleep(cfg.sleep)
    if cfg.fail:
        raise ValueError(f"lr {cfg.lr} diverged")
    print(f"training with lr={cfg.lr} seed={cfg.seed}")
    return cfg.lr * 100 + cfg.seed


if __name__ == "__main__":
    train()
"""

CONFIG = "lr: 0.01\nseed: 0\nfail: false\nsleep: 0\n"

# An objective for Hydra's Optuna sweeper, least at x=2, y=0.
OBJECTIVE_APP = """
import hydra
from omegaconf import DictConfig


@hydra.main(version_base=None, config_path="conf", config_name="config")
def objective(cfg: DictConfig) -> float:
    return (cfg.x - 2) ** 2 + cfg.y


if __name__ == "__main__":
    objective()
"""

# A sweeper that prints the JobReturns the launcher gives back: the only way to see them from
# outside the app's process (Hydra's multirun keeps them to itself).
REPORTING_SWEEPER = """
from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class ReportingSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.reporting_sweeper.reporting_sweeper.ReportingSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="reporting", node=ReportingSweeperConf)


class ReportingSweeper(BasicSweeper):
    def sweep(self, arguments):
        returns = super().sweep(arguments)
        for batch in returns:
            for ret in batch:
                print("RETURNED", " ".join(ret.overrides), ret.return_value, ret.working_dir)
        return returns
"""


def tutorial_app(folder, source, config):
    """An app as Hydra's tutorial lays one out (app.py and conf/config.yaml) in ``folder``."""
    (folder / "conf").mkdir(parents=True)
    (folder / "conf" / "config.yaml").write_text(config)
    (folder / "app.py").write_text(source)
    return folder


@pytest.fixture
def app(tmp_path):
    """The tutorial app in a folder of its own, and the reporting sweeper."""
    folder = tutorial_app(tmp_path / "app", APP, CONFIG)
    sweeper = tmp_path / "plugins" / "hydra_plugins" / "reporting_sweeper"
    sweeper.mkdir(parents=True)
    (sweeper / "__init__.py").write_text("")
    (sweeper / "reporting_sweeper.py").write_text(REPORTING_SWEEPER)
    return folder


@pytest.fixture
def env(tmp_path):
    """The app's environment: this checkout's easylaunch and plugin, the test's settings."""
    return dict(os.environ, PYTHONPATH=f"{REPO_DIR}{os.pathsep}{tmp_path / 'plugins'}",
                EASYLAUNCH_CONFIG=settings_file(tmp_path))


def multirun(app, env, *overrides, timeout=120):
    return subprocess.run([sys.executable, "app.py", "-m", *overrides,
                           "hydra/launcher=easylaunch"], cwd=app, env=env, capture_output=True,
                          text=True, timeout=timeout)


def easylaunch(env, *args):
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", *args], env=env,
                          capture_output=True, text=True, check=True).stdout


def hydra_output(run_dir) -> Path:
    """The Hydra job's output folder (``${hydra.sweep.dir}/${hydra.sweep.subdir}``), as its
    run folder names it."""
    return Path((Path(run_dir) / "hydra_output_dir.txt").read_text().strip())


def rows(env):
    """``easylaunch ls``'s rows as dicts by column."""
    return rows_of(env)


def rows_of(env, *args):
    """``easylaunch ls ARGS``'s rows as dicts by column."""
    header, *lines = easylaunch(env, "ls", *args).splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]


def test_multirun_waits_and_returns_values(app, env):
    out = multirun(app, env, "lr=1e-3,1e-2", "seed=0,1", "hydra/sweeper=reporting")
    assert out.returncode == 0, out.stderr
    returned = {line.split()[1] + " " + line.split()[2]: line.split()[3:]
                for line in out.stdout.splitlines() if line.startswith("RETURNED")}
    assert {k: float(v[0]) for k, v in returned.items()} == pytest.approx({
        "lr=0.001 seed=0": 0.1, "lr=0.001 seed=1": 1.1, "lr=0.01 seed=0": 1.0,
        "lr=0.01 seed=1": 2.0})
    runs = rows(env)
    assert len(runs) == 4 and {r["STATE"] for r in runs} == {"succeeded"}
    assert len({r["SWEEP"] for r in runs}) == 1
    for run in runs:  # each job's folder is where Hydra's config says: multirun/DATE/TIME/NUM
        job_dir = hydra_output(run["LOG DIR"])
        assert job_dir.parents[2] == app / "multirun" and job_dir.name in "0123"
        assert str(job_dir) in {v[1] for v in returned.values()}
        assert (job_dir / ".hydra" / "config.yaml").exists()
        overrides = (job_dir / ".hydra" / "overrides.yaml").read_text()
        assert "training with" in (Path(run["LOG DIR"]) / "stdout.log").read_text()
        assert "lr=" in overrides and "seed=" in overrides


def test_dotted_and_added_keys_sweep_and_show_as_nested_params(app, env):
    out = multirun(app, env, "+model.depth=2,3", "+db=mysql", "+db.user=me", "lr=0.5")
    assert out.returncode == 0, out.stderr
    runs = rows_of(env, "--variant", "params.model.depth,params.db._choice,params.db.user")
    assert sorted(r["params.model.depth"] for r in runs) == ["2", "3"]
    assert {(r["params.db._choice"], r["params.db.user"]) for r in runs} == {("mysql", "me")}
    for run in runs:  # (the overrides reach the job as written)
        overrides = (hydra_output(run["LOG DIR"]) / ".hydra" / "overrides.yaml").read_text()
        assert "+model.depth=" in overrides and "+db.user=me" in overrides


def test_a_repeated_job_runs_again_in_a_folder_of_its_own(app, env):
    out = multirun(app, env, "seed=0,1,1", "hydra/sweeper=reporting")
    assert out.returncode == 0, out.stderr
    returned = [line.split() for line in out.stdout.splitlines() if line.startswith("RETURNED")]
    assert sorted(Path(r[3]).name for r in returned) == ["0", "1", "2"]
    runs = rows_of(env, "--variant", "repeat")
    assert sorted(hydra_output(r["LOG DIR"]).name for r in runs) == ["0", "1", "2"]
    assert sorted(r["repeat"] for r in runs) == ["", "", "1"]


def test_wait_false_returns_once_submitted(app, env):
    out = multirun(app, env, "lr=1e-3,1e-2", "sleep=6", "hydra.launcher.wait=false")
    assert out.returncode == 0, out.stderr
    sweep = json.loads(next(Path(app, "multirun").glob("*/*/easylaunch.json")).read_text())
    assert f"follow: easylaunch ls --config {env['EASYLAUNCH_CONFIG']} --sweep " \
           f"{sweep['sweep']}" in out.stdout + out.stderr
    assert {r["STATE"] for r in rows(env)} <= {"queued", "running"}
    assert wait_for(lambda: [r["STATE"] for r in rows(env)] == ["succeeded"] * 2, 60)
    assert {r["SWEEP"] for r in rows(env)} == {sweep["sweep"]}


def test_failing_job_is_reraised_by_hydra(app, env):
    out = multirun(app, env, "fail=false,true", "lr=0.5")
    assert out.returncode == 1
    assert "Error executing job with overrides: ['fail=True', 'lr=0.5']" in out.stderr
    assert "ValueError: lr 0.5 diverged" in out.stderr
    states = sorted(r["STATE"] for r in rows(env))
    assert states == ["failed", "succeeded"]


@pytest.mark.parametrize("sweeper", ["reporting", "optuna"])
def test_wait_false_refused_under_a_sweeper_that_needs_values(app, env, sweeper):
    out = multirun(app, env, "lr=1e-3,1e-2", f"hydra/sweeper={sweeper}",
                   "hydra.launcher.wait=false")
    assert out.returncode == 1
    assert "easylaunch: hydra.launcher.wait=false returns before the jobs end" in out.stderr
    assert "Traceback" not in out.stderr  # (Hydra shows the message alone)
    assert rows(env) == []  # refused before anything was launched


@pytest.mark.filterwarnings("ignore::FutureWarning")  # (the sweeper's distributions, read back)
def test_optunas_sweeper_gets_every_trial_run_in_one_sweep(tmp_path, env):
    app = tutorial_app(tmp_path / "objective", OBJECTIVE_APP, "x: 0\ny: 0.0\n")
    storage = f"sqlite:///{tmp_path / 'study.db'}"  # (to read every trial back)
    out = multirun(app, env, "hydra/sweeper=optuna", "hydra.sweeper.direction=minimize",
                   "hydra.sweeper.n_trials=6", "hydra.sweeper.n_jobs=2",
                   "hydra.sweeper.sampler.seed=7", "hydra.sweeper.study_name=xy",
                   f"hydra.sweeper.storage={storage}", "x=range(-5,5)", "y=interval(0,1)")
    assert out.returncode == 0, out.stderr
    sweep_dir = next(Path(app, "multirun").glob("*/*"))
    launched = json.loads((sweep_dir / "easylaunch.json").read_text())
    assert [r["SWEEP"] for r in rows(env)] == [launched["sweep"]] * 6  # 3 batches, one sweep
    runs = load_sweep(launched["sweep"], config=env["EASYLAUNCH_CONFIG"])
    job_of = {run_id: int(job) for job, run_id in launched["runs"].items()}
    runs = runs.set_index(runs.run_id.map(job_of)).sort_index()
    assert set(runs.state) == {"succeeded"} and list(runs.index) == list(range(6))
    for job, log_dir in runs.log_dir.items():  # (each run is Hydra's job of its number)
        hydra_cfg = yaml.safe_load((hydra_output(log_dir) / ".hydra" / "hydra.yaml").read_text())
        assert hydra_cfg["hydra"]["job"]["num"] == job
    params = [{"x": x, "y": y} for x, y in zip(runs["params.x"], runs["params.y"], strict=True)]
    assert list(runs.result) == [(p["x"] - 2) ** 2 + p["y"] for p in params]
    study = optuna.load_study(study_name="xy", storage=storage)  # (trial n is Hydra's job n)
    assert [(t.params, t.value) for t in study.trials] == list(zip(params, runs.result,
                                                                    strict=True))
    best = yaml.safe_load((sweep_dir / "optimization_results.yaml").read_text())
    assert best == {"name": "optuna", "best_params": params[runs.result.argmin()],
                    "best_value": runs.result.min()}
    for log_dir, trial in zip(runs.log_dir, params, strict=True):  # (Hydra's job folder)
        config = hydra_output(log_dir) / ".hydra" / "config.yaml"
        assert yaml.safe_load(config.read_text()) == trial


def test_hydra_finds_the_plugin_and_its_import_stays_cheap(app, env):
    plugins = subprocess.run([sys.executable, "app.py", "--info", "plugins"], cwd=app, env=env,
                             capture_output=True, text=True, check=True).stdout
    assert "EasylaunchLauncher" in plugins
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys; "
         "import hydra_plugins.easylaunch_launcher.easylaunch_launcher; "
         "print(sorted(m for m in sys.modules if m.startswith('easylaunch')))"],
        env=env, capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]"  # (Hydra imports every plugin at each app start)


def test_batches_make_one_sweep_and_resume_relaunches_only_failures(app, env):
    named = ("hydra.launcher.sweep=grid", "hydra.sweeper.max_batch_size=2")
    first = multirun(app, env, "fail=false,true", "seed=0,1", *named)
    assert first.returncode == 1, first.stderr
    runs = rows(env)
    assert len(runs) == 4 and {r["SWEEP"] for r in runs} == {"grid"}
    assert sorted(r["STATE"] for r in runs) == ["failed"] * 2 + ["succeeded"] * 2
    again = multirun(app, env, "fail=false,true", "seed=0,1", *named,
                     "hydra.launcher.resume=true")
    assert again.returncode == 1 and "ValueError: lr 0.01 diverged" in again.stderr
    runs = rows(env)  # only the two failed jobs ran again, in the same sweep
    assert len(runs) == 6 and {r["SWEEP"] for r in runs} == {"grid"}
    # a value added first renumbers the jobs: the ones that succeeded are kept all the same
    third = multirun(app, env, "fail=false", "seed=2,0,1", *named, "hydra.launcher.resume=true")
    assert third.returncode == 0, third.stderr
    assert len(rows(env)) == 7, third.stderr  # (the new seed's job alone, in batches of 2:)
    assert "1 of 2 variants launched (1 never launched); 1 kept" in third.stderr
    assert "0 of 1 variants launched; 1 kept" in third.stderr


def test_multirun_on_slurm(app, env, slurm_cfg, tmp_path):
    env = dict(env, EASYLAUNCH_CONFIG=settings_file(tmp_path, **slurm_cfg))
    out = multirun(app, env, "lr=1e-3,1e-2", "hydra/sweeper=reporting",
                   "hydra.launcher.mode=slurm", "hydra.launcher.slurm_config_name=cpu",
                   timeout=300)
    assert out.returncode == 0, out.stderr
    assert "submitted as Slurm job" in out.stdout + out.stderr
    returned = sorted(float(line.split()[2]) for line in out.stdout.splitlines()
                      if line.startswith("RETURNED"))
    assert returned == pytest.approx([0.1, 1.0])
    runs = rows(env)
    assert {r["MODE"] for r in runs} == {"slurm"} and len({r["SWEEP"] for r in runs}) == 1
    for run in runs:
        assert (hydra_output(run["LOG DIR"]) / ".hydra" / "config.yaml").exists()


def test_a_mode_option_under_options_reaches_the_mode(app, env):
    out = multirun(app, env, "lr=1e-3,1e-2", "+hydra.launcher.options.max_paralel=1")
    assert out.returncode == 1
    assert "easylaunch: mode 'local' does not take the option 'max_paralel'" in out.stderr
    assert "Traceback" not in out.stderr and rows(env) == []


def test_a_multirun_goes_to_a_warm_pool(app, env):
    """The pool starts from the app's shell (its runs see the environment it started with)."""
    from easylaunch import list_pools, stop_pool

    easylaunch(env, "pool", "start", "hydra", "--workers", "2")
    try:
        out = multirun(app, env, "lr=1e-3,1e-2", "hydra/sweeper=reporting",
                       "hydra.launcher.pool=hydra")
        assert out.returncode == 0, out.stderr
        assert len([ln for ln in out.stdout.splitlines() if ln.startswith("RETURNED")]) == 2
        assert [r["STATE"] for r in rows(env)] == ["succeeded"] * 2
        (pool,) = list_pools(env["EASYLAUNCH_CONFIG"])
        assert pool.done == 2
    finally:
        stop_pool("hydra", env["EASYLAUNCH_CONFIG"])
