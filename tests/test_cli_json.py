"""``--json``: ``ls``, ``status`` and ``search`` print one JSON document that ``json.loads``
reads whole (the schema: docs/reference/json.md), notes on stderr, exit codes unchanged
(issue 47)."""

import json
import subprocess
import sys

import jobfns
import searchfns
from conftest import settings_file

from easylaunch import run_search, run_sweep

EASYLAUNCH = [sys.executable, "-m", "easylaunch.cli"]


def cli_json(config: str, *args: str) -> dict:
    """The command's stdout as JSON (all of it: no human line mixed in)."""
    out = subprocess.run([*EASYLAUNCH, "--config", config, *args, "--json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    document = json.loads(out.stdout)
    assert document["version"] == 1
    return document


def _sweep_of_one_success_and_one_failure(config: str, **launch) -> tuple:
    jobs = run_sweep(jobfns.log_curve, [dict(lr=0.1, steps=3), dict(lr=0.2, fail_at=1)],
                     exp_name="json", config=config, **launch)
    for job in jobs:
        job.wait(timeout=120)
    return jobs


def _check_runs(config: str, done, failed, mode: str) -> None:
    runs = {run["id"]: run for run in cli_json(config, "ls")["runs"]}
    assert set(runs) == {done.id, failed.id}
    ok, bad = runs[done.id], runs[failed.id]
    assert ok["state"] == "succeeded" and ok["mode"] == mode and ok["experiment"] == "json"
    assert ok["variant"] == {"lr": 0.1, "steps": 3} and ok["sweep"] == bad["sweep"]
    assert ok["metrics"] == {"loss": 0.1, "acc": 2 / 3}  # (each metric's last value)
    assert ok["launched_at"] <= ok["started_at"] <= ok["ended_at"] and ok["restarts"] == 0
    assert ok["log_dir"] == str(done.log_dir) and ok["reason"] is None
    assert bad["state"] == "failed" and "diverged at step 1" in bad["reason"]
    status = cli_json(config, "status", failed.id)["runs"]
    assert [run["id"] for run in status] == [failed.id]
    assert "RuntimeError: diverged at step 1" in status[0]["error"]
    assert status[0]["exit_code"] not in (None, 0) and status[0]["result"] is None


def test_ls_and_status_json_of_local_runs(tmp_path):
    config = settings_file(tmp_path)
    done, failed = _sweep_of_one_success_and_one_failure(config)
    _check_runs(config, done, failed, "local")
    out = subprocess.run([*EASYLAUNCH, "--config", config, "ls", "--exp", "none", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and json.loads(out.stdout)["runs"] == []
    assert out.stderr.strip()  # (the note that nothing matched: on stderr, not in the JSON)
    missing = subprocess.run([*EASYLAUNCH, "--config", config, "status", "nosuchrun", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""


def test_ls_and_status_json_of_slurm_runs(tmp_path, slurm_cluster):
    config = settings_file(tmp_path, SLURM_PYTHON=sys.executable, SLURM_CONFIGS=dict(
        cpu=dict(max_num_cores_per_node=1, time_in_mins=10)))
    done, failed = _sweep_of_one_success_and_one_failure(config, mode="slurm")
    _check_runs(config, done, failed, "slurm")
    assert {run["job"] for run in cli_json(config, "ls")["runs"]} != {None}  # (the array's id)


def test_search_json_lists_searches_and_one_searchs_trials(tmp_path):
    config = settings_file(tmp_path)
    search = run_search(searchfns.judged, {"kind": ["returned", "raises"]}, "score",
                        sampler="grid", n_trials=2, max_parallel=2, pruner=None,
                        exp_name="judged", config=config)
    listed = cli_json(config, "search")["searches"]
    assert [s["id"] for s in listed] == [search.id]
    one = cli_json(config, "search", search.id)["searches"][0]
    assert one["objective"] == "score" and one["direction"] == "minimize"
    assert one["best"]["value"] == 1.0 and one["driver_alive"] is False
    trials = {t["variant"]["kind"]: t for t in one["trials"]}
    assert trials["returned"]["state"] == "complete" and trials["returned"]["value"] == 1.0
    assert trials["raises"]["state"] == "fail"
    assert trials["raises"]["reason"] == "ValueError: diverged"
    assert trials["returned"]["run"] == one["best"]["run"]
    unknown = subprocess.run([*EASYLAUNCH, "--config", config, "search", "nosuch", "--json"],
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 1 and unknown.stdout == "" and "nosuch" in unknown.stderr


def test_values_json_has_no_number_for_are_null_and_others_text():
    from pathlib import Path

    from easylaunch.cli.as_json import document

    text = document("runs", [{"loss": float("nan"), "best": float("inf"), "dir": Path("/x")}])
    assert json.loads(text)["runs"] == [{"loss": None, "best": None, "dir": "/x"}]
