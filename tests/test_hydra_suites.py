"""Hydra's own launcher conformance suites (hydra-core's ``hydra.test_utils``), run against
``hydra/launcher=easylaunch`` as Hydra's official launcher plugins run them (issue 47)."""

import os
import sys

import pytest
from hydra.test_utils.launcher_common_tests import (
    BatchedSweeperTestSuite,
    IntegrationTestSuite,
    LauncherTestSuite,
)

LOCAL = ["hydra.launcher.mode=local", "hydra.launcher.wait=true"]
SLURM = ["hydra.launcher.mode=slurm", "hydra.launcher.wait=true"]


@pytest.fixture(autouse=True)
def _settings(tmp_path, monkeypatch, request):
    """The test's own settings (on the test cluster where the launch goes to slurm); after
    the test, its runs were of that mode."""
    from conftest import settings_file

    slurm = {}
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and SLURM[0] in callspec.params.get("overrides", []):
        request.getfixturevalue("slurm_cluster")
        slurm = dict(SLURM_PYTHON=sys.executable, SLURM_CONFIGS=dict(
            cpu=dict(max_num_cores_per_node=os.cpu_count(), time_in_mins=10)))
    monkeypatch.setenv("EASYLAUNCH_CONFIG", settings_file(tmp_path, **slurm))
    yield
    from easylaunch.tracking.registry import open_registry

    runs = open_registry(tmp_path / "registry.sqlite3").list(limit=None)[0]
    assert {run.mode for run in runs} <= {"slurm" if slurm else "local"}  # (the suite's jobs)


@pytest.mark.parametrize("launcher_name, overrides",
                         [("easylaunch", LOCAL), ("easylaunch", SLURM)], ids=["local", "slurm"])
class TestEasylaunchLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("launcher_name, overrides", [
    ("easylaunch", [*LOCAL, "hydra/sweeper=basic", "hydra.sweeper.max_batch_size=2"])])
class TestEasylaunchBatched(BatchedSweeperTestSuite):
    pass


@pytest.mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [({"defaults": [{"override hydra/launcher": "easylaunch"}],
       "hydra": {"launcher": {"mode": "local", "wait": True}}},
      ["-m"])])
class TestEasylaunchIntegration(IntegrationTestSuite):
    pass
