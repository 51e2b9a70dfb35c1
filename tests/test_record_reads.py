"""A look at a run reads its launch.json and status.json once: ``easylaunch status`` and
``easylaunch ls`` of an ended run, each poll of a wait for a running one, the dashboard's run
page."""

import builtins
import collections
import os
import threading

import jobfns
import pytest
from conftest import settings_file
from helpers import wait_for

from easylaunch import run_experiment, wait_all
from easylaunch.cli import main
from easylaunch.dashboard.views import run_view
from easylaunch.runs.record import LAUNCH_JSON
from easylaunch.tracking.registry import Registry
from easylaunch_job.records import STATUS_JSON

RECORDS = (LAUNCH_JSON, STATUS_JSON)


@pytest.fixture
def reads(monkeypatch):
    """How many times the command (this test's main thread) opened each record for reading
    since the last ``clear()``; the supervisor threads of the local runs the test launched
    earlier may still be reaping their processes and are not the command's reads."""
    counted: collections.Counter = collections.Counter()
    real_open = builtins.open

    def counting_open(file, mode="r", *args, **kwargs):
        name = os.path.basename(str(file))
        if name in RECORDS and not any(c in mode for c in "wax+") \
                and threading.current_thread() is threading.main_thread():
            counted[name] += 1
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    return counted


@pytest.fixture
def config(tmp_path, monkeypatch):
    path = settings_file(tmp_path)
    monkeypatch.setenv("EASYLAUNCH_CONFIG", path)
    return path


def test_status_of_an_ended_run_reads_each_record_once(config, reads, capsys):
    job = run_experiment(jobfns.quick, mode="local", config=config)
    job.wait(timeout=60)
    reads.clear()
    assert main(["--config", config, "status", job.id]) == 0
    assert "succeeded" in capsys.readouterr().out
    assert all(reads[name] <= 1 for name in RECORDS), dict(reads)


def test_ls_of_an_ended_run_reads_each_record_at_most_once(config, reads, capsys):
    job = run_experiment(jobfns.quick, mode="local", config=config)
    job.wait(timeout=60)
    reads.clear()
    assert main(["--config", config, "ls"]) == 0
    assert job.id in capsys.readouterr().out
    assert all(reads[name] <= 1 for name in RECORDS), dict(reads)


def test_each_poll_of_a_wait_reads_status_json_once(config, reads, monkeypatch):
    job = run_experiment(jobfns.wait_for_release, mode="local", config=config)
    try:
        for _ in range(3):
            reads.clear()
            assert not job.wait(timeout=0).terminal  # one poll
            assert reads[STATUS_JSON] == 1 and reads[LAUNCH_JSON] <= 1, dict(reads)
        polls = []
        pause = job.mode.wait_for_change
        monkeypatch.setattr(job.mode, "wait_for_change",
                            lambda record, timeout: polls.append(1) or pause(record, timeout))
        reads.clear()
        assert not wait_all([job], timeout=1.0, refresh_every=0.2)[0].terminal
        assert polls and reads[STATUS_JSON] <= len(polls) + 1, (dict(reads), len(polls))
        assert reads[LAUNCH_JSON] <= 1
    finally:
        (job.log_dir / jobfns.RELEASE).write_text("")
    assert wait_all([job], timeout=60)[0].value == "succeeded"  # (a poll sees the run's end)


def test_the_dashboards_run_page_reads_each_record_once(config, reads, tmp_path):
    registry = Registry(tmp_path / "registry.sqlite3")
    ended = run_experiment(jobfns.quick, mode="local", config=config)
    ended.wait(timeout=60)
    running = run_experiment(jobfns.wait_for_release, mode="local", config=config)
    try:
        assert wait_for(lambda: (running.log_dir / "progress.txt").exists())  # (it started)
        for job, state in ((ended, "succeeded"), (running, "running")):
            reads.clear()
            assert run_view(registry, job.id).state == state
            assert all(reads[name] == 1 for name in RECORDS), (state, dict(reads))
    finally:
        (running.log_dir / jobfns.RELEASE).write_text("")
    assert running.wait(timeout=60).value == "succeeded"
