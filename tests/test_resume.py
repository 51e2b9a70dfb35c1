"""Resuming a sweep, as a researcher does: the sweep script run again with ``resume=True`` (or
its loop of ``run_experiment`` calls naming the sweep), or ``easylaunch resume SWEEP``, launches
only the variants that did not succeed, once each, in the same sweep."""

from __future__ import annotations

import errno
import json
import shutil
import socket
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from helpers import wait_for

from easylaunch import LaunchError, get_job, run_sweep
from easylaunch.runs.preview import Preview
from easylaunch.runs.variants import variant_key
from easylaunch.tracking import sweeps
from easylaunch.tracking.registry import Registry, open_registry

SWEEP_SCRIPT = """
import json, sys, time
from pathlib import Path
from easylaunch import run_experiment, run_sweep

CONTROL = Path(__file__).resolve().with_name("control.json")


def train(doodad_config, variant):
    control = json.loads(CONTROL.read_text())
    if variant["i"] in control["fail"]:
        raise ValueError(f"bad variant {variant['i']}")
    if variant["i"] in control["hang"] + control["sleep"]:
        time.sleep(300)
    return {"i": variant["i"], "code": 1}


if __name__ == "__main__":
    variants = [{"i": i} for i in range(6)]
    if sys.argv[2] == "sweep":
        jobs = run_sweep(train, variants, exp_name="grid", config=sys.argv[1], resume=True)
    else:  # a loop of single launches, the sweep named or found
        named = {"sweep": "lr-grid"} if sys.argv[2] == "named" else {}
        jobs = [run_experiment(train, variant=v, exp_name="loop", config=sys.argv[1],
                               resume=True, **named) for v in variants]
    hang = json.loads(CONTROL.read_text())["hang"]
    for job, variant in zip(jobs, variants):
        if variant["i"] in hang:
            job.cancel()
    print(json.dumps([[job.id, job.wait(timeout=120).value, job.launch_info["sweep_id"]]
                      for job in jobs]))
"""


@pytest.fixture
def sweep(tmp_path):
    """The user's sweep script (6 variants) and its settings; ``run(fail=, hang=)`` runs it
    (variants in ``fail`` raise, those in ``hang`` are cancelled by the script, those in
    ``sleep`` sleep) and returns each
    variant's (run id, state, sweep id) and the script's stderr."""
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP_SCRIPT)
    config = settings_file(tmp_path, CODE_DIRS_TO_MOUNT=[])

    def started(form: str = "sweep", fail: tuple = (), hang: tuple = (), sleep: tuple = ()
                ) -> subprocess.Popen:
        (tmp_path / "control.json").write_text(json.dumps({"fail": fail, "hang": hang,
                                                           "sleep": sleep}))
        return subprocess.Popen([sys.executable, str(script), config, form], text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def finish(proc: subprocess.Popen) -> tuple[list[list[str]], str]:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, err
        return json.loads(out), err

    class Sweep:
        start = staticmethod(started)

        def run(self, form: str = "sweep", fail: tuple = (), hang: tuple = ()):
            return finish(started(form, fail, hang))

        def runs_at_once(self, count: int):
            return [finish(p) for p in [started() for _ in range(count)]]

        def cli(self, *args: str) -> subprocess.CompletedProcess:
            proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config,
                                   *args], capture_output=True, text=True, timeout=180)
            assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
            return proc

        def registry_runs(self, sweep_id: str) -> list:
            return open_registry(tmp_path / "registry.sqlite3").of_sweep(sweep_id)

    Sweep.script, Sweep.config = script, config
    return Sweep()


def _states(runs: list[list[str]]) -> list[str]:
    return [state for _, state, _ in runs]


def _first_round(sweep, form: str = "sweep") -> list[list[str]]:
    """The sweep's first run: variants 1 and 3 fail, 5 is cancelled, the rest succeed."""
    first, _ = sweep.run(form, fail=[1, 3], hang=[5])
    assert _states(first) == ["succeeded", "failed", "succeeded", "failed", "succeeded",
                              "cancelled"]
    assert len({sweep_id for _, _, sweep_id in first}) == 1
    return first


def test_a_resume_launches_only_what_did_not_succeed_then_nothing(sweep):
    first = _first_round(sweep)
    sweep_id = first[0][2]
    second, said = sweep.run()
    assert _states(second) == ["succeeded"] * 6
    assert {s for _, _, s in second} == {sweep_id}  # the same sweep
    kept = [0, 2, 4]
    assert [second[i][0] for i in kept] == [first[i][0] for i in kept]  # kept, not rerun
    new = {second[i][0] for i in (1, 3, 5)} - {run_id for run_id, _, _ in first}
    assert len(new) == 3
    assert (f"resume of sweep {sweep_id}: 3 of 6 variants launched (1 cancelled, 2 failed); "
            "3 kept (3 succeeded)") in said
    rows = {e.id: e for e in sweep.registry_runs(sweep_id)}
    assert len(rows) == 9
    assert {rows[run_id].resubmitted_from for run_id in new} == {first[i][0] for i in (1, 3, 5)}

    third, said = sweep.run()
    assert [run_id for run_id, _, _ in third] == [run_id for run_id, _, _ in second]
    assert "0 of 6 variants launched; 6 kept (6 succeeded)" in said
    assert len(sweep.registry_runs(sweep_id)) == 9


def test_two_resumes_at_once_launch_each_variant_once(sweep):
    first = _first_round(sweep)
    sweep_id = first[0][2]
    (one, _), (two, _) = sweep.runs_at_once(2)
    assert _states(one) == _states(two) == ["succeeded"] * 6
    assert [run_id for run_id, _, _ in one] == [run_id for run_id, _, _ in two]
    rows = sweep.registry_runs(sweep_id)
    assert len(rows) == 9
    assert sorted(e.variant["i"] for e in rows if e.state == "succeeded") == list(range(6))


def test_two_first_resumes_at_once_make_one_sweep(sweep):
    (one, _), (two, _) = sweep.runs_at_once(2)
    assert _states(one) == _states(two) == ["succeeded"] * 6
    assert [run_id for run_id, _, _ in one] == [run_id for run_id, _, _ in two]
    assert len(sweep.registry_runs(one[0][2])) == 6


def test_easylaunch_resume_reruns_a_recorded_sweep_with_the_code_as_it_is_now(sweep):
    sweep_id = _first_round(sweep)[0][2]
    (sweep.script.parent / "control.json").write_text(json.dumps({"fail": [], "hang": [],
                                                                  "sleep": []}))
    sweep.script.write_text(SWEEP_SCRIPT.replace('"code": 1', '"code": 2'))
    done = sweep.cli("resume", sweep_id[:6], "--current-code")
    assert (f"resume of sweep {sweep_id}: 3 of 6 runs launched (1 cancelled, 2 failed); "
            "3 kept (3 succeeded)") in done.stderr
    assert "runs the code as it is now" in done.stderr
    assert done.stdout.count("resubmitted ") == 3
    rows = sweep.registry_runs(sweep_id)
    new = [e for e in rows if e.resubmitted_from]
    assert len(rows) == 9 and len(new) == 3
    assert [get_job(e.id, sweep.config).result(timeout=60)["code"] for e in new] == [2] * 3

    again = sweep.cli("resume", sweep_id)
    assert "0 of 6 runs launched; 6 kept (6 succeeded)" in again.stderr
    assert "resubmitted" not in again.stdout and len(sweep.registry_runs(sweep_id)) == 9


def test_a_sweep_whose_script_was_killed_resumes_what_it_left(sweep):
    """The launching script is killed while its runs run: its local runs end with it, the
    registry still says running; a resume sees how they ended and launches them again."""
    killed = sweep.start(sleep=list(range(6)))
    registry = open_registry(Path(sweep.config).with_name("registry.sqlite3"))
    assert wait_for(lambda: len(registry.list()[0]) == 6 and any(
        get_job(e.id, sweep.config).status().value == "running" for e in registry.list()[0]),
        60)
    killed.kill()
    killed.communicate()
    runs = registry.list()[0]
    ended = [get_job(e.id, sweep.config).wait(timeout=60).value for e in runs]
    assert "running" not in [e.state for e in registry.list()[0]], ended
    again, said = sweep.run()
    assert _states(again) == ["succeeded"] * 6
    assert {run_id for run_id, _, _ in again}.isdisjoint(e.id for e in runs)
    assert "6 of 6 variants launched (" in said and "; 0 kept" in said, said


@pytest.mark.parametrize("form", ["named", "found"])
def test_a_scripts_loop_of_run_experiment_calls_resumes_its_sweep(sweep, form):
    first = _first_round(sweep, form)
    sweep_id = first[0][2]
    if form == "named":
        assert sweep_id == "lr-grid"
    second, _ = sweep.run(form)
    assert _states(second) == ["succeeded"] * 6 and {s for _, _, s in second} == {sweep_id}
    assert [second[i][0] for i in (0, 2, 4)] == [first[i][0] for i in (0, 2, 4)]
    assert len(sweep.registry_runs(sweep_id)) == 9


def test_a_variant_listed_twice_keeps_two_runs(tmp_path):
    config = settings_file(tmp_path)
    twice = [{"x": 1}, {"x": 1}]
    jobs = run_sweep(jobfns.double, twice, config=config, sweep="twice")
    assert [j.result(timeout=60) for j in jobs] == [{"x": 1, "y": 2}] * 2
    again = run_sweep(jobfns.double, [*twice, {"x": 1}, {"x": 2}], config=config,
                      sweep="twice", resume=True)
    assert [j.id for j in again[:2]] == [j.id for j in jobs]
    assert [j.result(timeout=60) for j in again[2:]] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    assert len(open_registry(tmp_path / "registry.sqlite3").of_sweep("twice")) == 4
    preview = run_sweep(jobfns.double, [*twice, {"x": 2}], config=config, sweep="twice",
                        resume=True, dry_run=True)  # (nothing to launch: an empty preview)
    assert isinstance(preview, Preview) and len(preview) == 0
    assert "0 of 3 variants launched; 3 kept" in preview.notes[0]


def test_what_a_resume_keeps_is_a_variants_run_of_this_experiment_still_on_disk(tmp_path):
    config = settings_file(tmp_path)
    registry = open_registry(tmp_path / "registry.sqlite3")
    failed, = run_sweep(jobfns.fail, [{"x": 0}], config=config, sweep="g2", exp_name="a")
    assert failed.wait(timeout=60).value == "failed"
    # the variant run again by a plain launch into the sweep, and succeeding there
    fine, = run_sweep(jobfns.double, [{"x": 0}], config=config, sweep="g2", exp_name="a")
    assert fine.result(timeout=60) == {"x": 0, "y": 0}
    cli = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config,
                          "resume", "g2"], capture_output=True, text=True, timeout=120)
    assert "0 of 1 runs launched; 1 kept (1 succeeded)" in cli.stderr, cli.stderr
    assert len(registry.of_sweep("g2")) == 2  # (by variant: the failed run is not rerun)

    with pytest.raises(LaunchError, match="sweep g2 holds runs of experiment.*a, not b"):
        run_sweep(jobfns.double, [{"x": 0}], config=config, sweep="g2", exp_name="b",
                  resume=True)

    shutil.rmtree(fine.log_dir)  # a kept run's folder deleted by hand: its variant runs again
    again, = run_sweep(jobfns.double, [{"x": 0}], config=config, sweep="g2", exp_name="a",
                       resume=True)
    assert again.id not in (fine.id, failed.id) and again.result(timeout=60)["y"] == 0


def test_a_sweep_recorded_before_the_upgrade_resumes(tmp_path):
    """Runs registered by an easylaunch whose registry had no variant keys (schema 6) are
    matched by their variants once the registry is upgraded."""
    path = tmp_path / "registry.sqlite3"
    old = sqlite3.connect(path)
    old.executescript(textwrap.dedent("""
        CREATE TABLE runs (
            id TEXT PRIMARY KEY, exp_name TEXT NOT NULL, mode TEXT NOT NULL,
            state TEXT NOT NULL, log_dir TEXT NOT NULL, remote_log_dir TEXT,
            backend TEXT NOT NULL DEFAULT '{}', variant TEXT NOT NULL DEFAULT '{}',
            git_commit TEXT, created REAL NOT NULL, updated REAL NOT NULL,
            resubmitted_from TEXT, host TEXT, restarts INTEGER NOT NULL DEFAULT 0,
            sweep TEXT, started REAL, ended REAL, job_id TEXT, reason TEXT, command TEXT);
        CREATE INDEX runs_by_sweep ON runs (sweep, created DESC);
        CREATE TABLE notices (key TEXT PRIMARY KEY, at REAL NOT NULL);
        INSERT INTO runs (id, exp_name, mode, state, log_dir, variant, created, updated, sweep,
                          ended, reason)
        VALUES ('aaaa0001', 'default', 'local', 'succeeded', '/gone/1', '{"x": 1}', 1, 1,
                'old-sweep', 2, ''),
               ('aaaa0002', 'default', 'local', 'failed', '/gone/2', '{"x": 2}', 1, 1,
                'old-sweep', 2, 'ValueError');
        PRAGMA user_version = 6;"""))
    old.close()
    config = settings_file(tmp_path)
    jobs = run_sweep(jobfns.double, [{"x": 2}], config=config, resume="old-sw")
    assert jobs[0].result(timeout=60) == {"x": 2, "y": 4}
    rows = {e.id: e for e in open_registry(path).of_sweep("old-sweep")}
    assert rows["aaaa0001"].variant_key == variant_key({"x": 1})
    assert len(rows) == 3 and rows[jobs[0].id].resubmitted_from == "aaaa0002"
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 7


def test_where_flock_is_refused_a_claim_file_keeps_resumes_apart(tmp_path, monkeypatch):
    """On a file system that refuses flock (some NFS mounts), resumes of one sweep still take
    turns, and a claim left by a process that was killed does not block them."""
    def refused(fd, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(sweeps.fcntl, "flock", refused)
    registry = Registry(tmp_path / "registry.sqlite3")
    claim = tmp_path / "locks" / "sweep-lr-grid.claim"
    claim.parent.mkdir()
    killed = subprocess.Popen(["true"])
    killed.wait()
    claim.write_text(json.dumps({"host": socket.gethostname(), "pid": killed.pid,
                                 "started": "1"}))
    seen: list[str] = []

    def resume(name: str) -> None:
        with sweeps.sweep_lock(registry, "lr-grid"):
            seen.append(f"{name} in")
            time.sleep(0.2)
            seen.append(f"{name} out")

    threads = [threading.Thread(target=resume, args=(name,)) for name in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert seen in (["a in", "a out", "b in", "b out"], ["b in", "b out", "a in", "a out"])
    assert not claim.exists()
