"""The registry says what the runs' own records say (state, restarts, times, reason), whichever
path saw them end: wait_all, Job.wait, ls, watch, status, cancel, the dashboard. A run killed
once under max_restarts showed plain ``succeeded`` in ls and ``restarts=0`` in load_sweep
after a wait_all (issue 39)."""

import shutil
import sqlite3
import subprocess
import sys

import jobfns
import pytest
from conftest import settings_file
from helpers import wait_for

from easylaunch import JobState, run_sweep, wait_all
from easylaunch.dashboard import views
from easylaunch.results import load_sweep
from easylaunch.tracking.registry import Registry
from easylaunch.tracking.rows import record_fields
from easylaunch_job.records import read_status
from easylaunch_job.states import TERMINAL_STATES

# one run dies on its first attempt and succeeds on the second; one dies on both
VARIANTS = [{"die_on": [1]}, {"die_on": [1, 2]}]


def cli(config: str, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config, *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr
    return out.stdout


def _launch(tmp_path):
    config = settings_file(tmp_path)
    jobs = run_sweep(jobfns.die_on_attempts, VARIANTS, exp_name="agree", max_restarts=1,
                     config=config)
    return config, jobs


def _ended_unseen(jobs) -> None:
    """Wait for the runs' own records to end, through no path that writes the registry."""
    assert wait_for(lambda: all(read_status(str(j.log_dir)).get("state") in TERMINAL_STATES
                                for j in jobs), 60)


def _rows_agree(tmp_path, jobs) -> None:
    """Each run's registry row holds what its status.json says, a restart counted."""
    registry = Registry(tmp_path / "registry.sqlite3")
    for job in jobs:
        entry = registry.find(job.id)
        fields = record_fields(read_status(str(job.log_dir)))
        assert {k: getattr(entry, k) for k in fields} == fields
    entries = [registry.find(job.id) for job in jobs]
    assert [(e.state, e.restarts) for e in entries] == [("succeeded", 1), ("failed", 1)]
    assert entries[0].reason == "" and "SIGKILL" in entries[1].reason
    assert all(e.started and e.ended and e.ended >= e.started for e in entries)


def _dashboard(config, jobs, tmp_path):
    views.runs_page(Registry(tmp_path / "registry.sqlite3"), views.Filters(), 1)


PATHS = {
    "wait_all": lambda config, jobs, tmp_path: wait_all(jobs),
    "job.wait": lambda config, jobs, tmp_path: [job.wait() for job in jobs],
    "ls": lambda config, jobs, tmp_path: cli(config, "ls"),
    "watch": lambda config, jobs, tmp_path: cli(config, "watch", "--once"),
    "status": lambda config, jobs, tmp_path: [cli(config, "status", job.id) for job in jobs],
    "cancel": lambda config, jobs, tmp_path: cli(config, "cancel", *(job.id for job in jobs)),
    "dashboard": _dashboard,
}
WAITS = {"wait_all", "job.wait"}  # (the others look once the runs have ended)


@pytest.mark.parametrize("path", PATHS)
def test_every_path_that_sees_an_end_writes_the_same_fields(tmp_path, path):
    config, jobs = _launch(tmp_path)
    if path not in WAITS:
        _ended_unseen(jobs)
    PATHS[path](config, jobs, tmp_path)
    _rows_agree(tmp_path, jobs)


def test_a_run_killed_once_shows_its_restart_everywhere_after_wait_all(tmp_path):
    config, jobs = _launch(tmp_path)
    assert wait_all(jobs) == [JobState.SUCCEEDED, JobState.FAILED]
    _rows_agree(tmp_path, jobs)  # (before anything else looks)
    expected = {jobs[0].id: "succeeded (1 restart)", jobs[1].id: "failed (1 restart)"}
    listed = [line.split("\t") for line in cli(config, "ls").splitlines()[1:]]
    assert {row[0]: row[3] for row in listed} == expected
    table = load_sweep("agree", config=config)
    assert dict(zip(table.run_id, table.restarts, strict=True)) == {j.id: 1 for j in jobs}
    assert dict(zip(table.run_id, table.state, strict=True)) == {
        jobs[0].id: "succeeded", jobs[1].id: "failed"}
    groups, _ = views.runs_page(Registry(tmp_path / "registry.sqlite3"), views.Filters(), 1)
    assert {row.id: row.state for group in groups for row in group.rows} == expected


def test_rows_an_older_wait_all_left_without_restarts_are_read_again(tmp_path):
    """Registries of schema 5 hold runs whose wait_all wrote the state alone (and a later ls
    the times): their records are read again once, so their restarts show; a run whose
    folder is gone keeps its row as it was (its end time and reason not lost)."""
    config, jobs = _launch(tmp_path)
    (gone,) = run_sweep(jobfns.die_on_attempts, [{"die_on": [1, 2]}], exp_name="gone",
                        max_restarts=1, config=config)
    wait_all([*jobs, gone])
    path = tmp_path / "registry.sqlite3"
    kept = Registry(path).find(gone.id)
    assert kept.ended and "SIGKILL" in kept.reason
    shutil.rmtree(gone.log_dir)
    with sqlite3.connect(path) as old:  # as the older easylaunch left them
        old.execute("UPDATE runs SET restarts = 0")
        old.execute("PRAGMA user_version = 5")
    listed = [line.split("\t") for line in cli(config, "ls").splitlines()[1:]]
    assert {row[0]: row[3] for row in listed if row[0] != gone.id} == {
        jobs[0].id: "succeeded (1 restart)", jobs[1].id: "failed (1 restart)"}
    _rows_agree(tmp_path, jobs)
    after = Registry(path).find(gone.id)
    assert (after.state, after.ended, after.reason) == (kept.state, kept.ended, kept.reason)
