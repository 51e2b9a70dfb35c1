"""``easylaunch.run_search`` in ``local`` mode, as a user runs it: a search over a synthetic
objective with a known optimum (tests/searchfns.py: the loss ends at (x - 0.3)**2, plus 0.5
with "sgd"; bad configurations are bad from their first steps), pruned by successive halving,
and a search whose driver is killed and carried on."""

import json
import os
import pty
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import optuna
import pytest
import searchfns
from conftest import TESTS_DIR, settings_file
from helpers import wait_for

from easylaunch import JobState, LaunchError, Search, run_search, run_sweep
from easylaunch.api.search_driver import prune_reason
from easylaunch.api.search_space import Space, make_pruner, make_sampler
from easylaunch.tracking.registry import open_registry

SPACE = {"x": optuna.distributions.FloatDistribution(-1.0, 1.0), "opt": ["adam", "sgd"]}
TOLERANCE = 0.05  # of the best loss found over the optimum (searchfns.OPTIMUM = 0)


def cli(config_file: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                           *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def on_a_terminal(config_file: str, *args: str) -> str:
    """What ``easylaunch ARGS`` prints on a terminal (200 columns)."""
    reader, writer = pty.openpty()
    try:
        subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file, *args],
                       stdout=writer, stderr=subprocess.DEVNULL, timeout=120, check=True,
                       env=dict(os.environ, COLUMNS="200"))
        os.close(writer)
        said = b""
        while chunk := _read(reader):
            said += chunk
        return said.decode()
    finally:
        os.close(reader)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except OSError:  # (the terminal's other end closed: all was read)
        return b""


def last_step(run_dir: str) -> int:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return max(json.loads(line)["step"] for line in lines)


def test_search_finds_the_optimum_and_stops_bad_trials_early(tmp_path, capsys):
    config = settings_file(tmp_path)
    search = run_search(searchfns.curve, dict(SPACE, step_s=0.05), "loss", n_trials=24,
                        max_parallel=3, min_resource=2, seed=1, exp_name="curve",
                        config=config)
    said = capsys.readouterr().err  # (one line for the search, none for each of its runs)
    assert [line for line in said.splitlines() if line.startswith("easylaunch")] == [
        f"easylaunch local: search {search.id} of curve: 24 trials, 3 at once; runs in "
        f"{tmp_path / 'logs' / 'curve'}; follow: easylaunch search --config {config} "
        f"{search.id}"], said

    summary = search.summary()
    assert summary["finished"] == 24 and len(summary["trials"]) == 24
    best = search.best
    assert best.value - searchfns.OPTIMUM <= TOLERANCE, summary["trials"]
    assert best.variant["opt"] == "adam" and abs(best.variant["x"] - 0.3) < 0.25
    assert best.job.status() is JobState.SUCCEEDED
    assert best.job.result()["loss"] == best.value

    pruned = [t for t in summary["trials"] if t["state"] == "pruned"]
    assert pruned, "no trial was pruned"
    steps = [last_step(t["runs"][-1]) for t in pruned]
    assert max(steps) < searchfns.STEPS and min(steps) <= 12, steps  # stopped, not run out
    for trial in pruned:
        assert trial["reason"].startswith("pruned at step"), trial
        info = json.loads((Path(trial["runs"][-1]) / "status.json").read_text())
        assert info["state"] == "cancelled" and info["error"] == trial["reason"]
    complete = [t for t in summary["trials"] if t["state"] == "complete"]
    assert all(last_step(t["runs"][-1]) == searchfns.STEPS for t in complete)

    listed = cli(config, "ls", "--sweep", search.id)
    assert "pruned at step" in listed
    assert sum(1 for line in listed.splitlines() if "succeeded" in line) == len(complete)
    on_terminal = on_a_terminal(config, "ls")
    best_run = best.job.id
    assert f"search: 24/24 trials finished ({len(complete)} complete, {len(pruned)} " \
           f"pruned); best loss {best.value:.4g} (trial {best.number}, run {best_run})" \
           in on_terminal, on_terminal
    assert "↳ pruned at step" in on_terminal
    assert cli(config, "search").startswith(f"{search.id}  24/24 trials finished")
    trial_rows = cli(config, "search", search.id[:10]).splitlines()[2:]
    assert len(trial_rows) == 24
    assert sum("pruned at step" in row for row in trial_rows) == len(pruned)
    shown = cli(config, "status", Path(pruned[0]["runs"][-1]).name.rsplit("_", 1)[1])
    assert f"why:              {pruned[0]['reason']}" in shown
    assert f"search:           {search.id}, trial {pruned[0]['number']}; 24/24 trials" in shown

    # a resume of the search's sweep would run its pruned trials again outside the search
    refused = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config,
                              "resume", search.id], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert f"easylaunch search resume {search.id}" in refused.stderr, refused.stderr
    with pytest.raises(LaunchError, match="is a search's"):
        run_sweep(searchfns.curve, [{"x": 0.3, "opt": "adam"}], exp_name="curve",
                  sweep=search.id, resume=True, config=config)
    assert len(search.trials()) == 24  # (and no run was launched:)
    assert len(cli(config, "ls", "--sweep", search.id).splitlines()) == len(listed.splitlines())
    # the search's records are private, as run folders are (call.json holds the settings)
    assert search.folder.stat().st_mode & 0o777 == 0o700
    assert search.folder.parent.stat().st_mode & 0o777 == 0o700
    # the journal is the study Optuna's own tools read
    assert len(search.study().trials) == 24
    assert Search.get(search.id, config=config).best.number == best.number


def _driver_script(config: str) -> str:
    return textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import optuna, searchfns
        from easylaunch import run_search
        space = {{"x": optuna.distributions.FloatDistribution(-1.0, 1.0), "opt": ["adam", "sgd"],
                  "step_s": 0.1, "steps": 20}}
        run_search(searchfns.curve, space, "loss", n_trials=12, max_parallel=3,
                   min_resource=2, seed=2, exp_name="killed", name="killed", config={config!r})
    """)


def test_a_ctrl_c_during_a_trials_launch_leaves_it_to_start_again(tmp_path, monkeypatch):
    """The trial whose launch a Ctrl-C cut short is no failed launch: carried on, it starts
    under its own number (it was once dropped, and a thirteenth trial asked instead)."""
    from easylaunch.api import search as search_api

    config = settings_file(tmp_path)
    launch = search_api.launch_variants
    calls = []

    def third_launch_interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return launch(*args, **kwargs)

    monkeypatch.setattr(search_api, "launch_variants", third_launch_interrupted)
    space = dict(SPACE, step_s=0.01, steps=2)
    with pytest.raises(KeyboardInterrupt):
        run_search(searchfns.curve, space, "loss", n_trials=4, max_parallel=1, seed=0,
                   name="cut", config=config)
    search = run_search(searchfns.curve, space, "loss", n_trials=4, max_parallel=1, seed=0,
                        name="cut", config=config)
    assert [(t["number"], t["state"]) for t in search.trials()] == \
        [(n, "complete") for n in range(4)]
    assert len(search.study().trials) == 4


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "Ctrl-C"])
def test_a_stopped_driver_is_carried_on_without_running_a_finished_trial_again(tmp_path, stop):
    config = settings_file(tmp_path)
    script = tmp_path / "search.py"
    script.write_text(_driver_script(config))
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True)
    summary_file = tmp_path / "logs" / ".searches" / "killed" / "summary.json"

    def finished() -> int:
        try:
            return json.loads(summary_file.read_text())["finished"]
        except (OSError, ValueError):
            return 0

    assert wait_for(lambda: finished() >= 4 or driver.poll() is not None, 60)
    os.kill(driver.pid, stop)
    _, said = driver.communicate(timeout=60)
    if stop == signal.SIGINT:  # (its runs cancelled: they stop with their launcher)
        assert driver.returncode in (130, -signal.SIGINT) and "Traceback" not in said, said
        assert f"carry the search on with `easylaunch search resume --config {config} killed`" \
            in said, said  # (the settings file, as the cancel command in that line names it)
    before = {t["number"]: t for t in json.loads(summary_file.read_text())["trials"]}
    done_before = {n: t for n, t in before.items() if t["state"] in ("complete", "pruned")}
    running_before = {n for n, t in before.items() if t["state"] == "running"}
    assert 4 <= len(done_before) < 12 and running_before
    assert "no driver: carry it on with `easylaunch search resume killed`" in \
        cli(config, "search")

    # the same call again carries the search on
    search = run_search(searchfns.curve, dict(SPACE, step_s=0.1, steps=20), "loss",
                        n_trials=12, max_parallel=3, min_resource=2, seed=2,
                        exp_name="killed", name="killed", config=config)
    after = {t["number"]: t for t in search.trials()}
    assert sorted(after) == list(range(12))
    unfinished = {n: (t["state"], t.get("reason"), t["runs"]) for n, t in after.items()
                  if t["state"] not in ("complete", "pruned")}
    assert not unfinished, unfinished
    for number, trial in done_before.items():  # finished trials are never run again
        assert after[number]["runs"] == trial["runs"]
        assert after[number]["value"] == trial["value"]
    rerun = 0
    for number in running_before:
        runs = after[number]["runs"]
        first = json.loads((Path(runs[0]) / "status.json").read_text())
        if len(runs) == 1:  # it ended (or was being pruned) before the driver died
            assert first["state"] == "succeeded" or "pruned" in first, first
            continue
        rerun += 1  # stopped with the driver: run again, under its number
        assert len(runs) == 2 and first["state"] in ("cancelled", "failed"), after[number]
        if stop == signal.SIGKILL:  # (stopped by its launcher's end, not a cancel)
            assert not first.get("cancel_requested"), first
        launch = json.loads((Path(runs[1]) / "launch.json").read_text())
        assert launch["resubmitted_from"] == Path(runs[0]).name.rsplit("_", 1)[1]
        assert launch["search"] == {"id": "killed", "trial": number}
    assert rerun, "no trial was stopped with its driver"
    made = [d for d in (tmp_path / "logs" / "killed").iterdir() if (d / "launch.json").exists()]
    assert len(made) == sum(len(t["runs"]) for t in after.values())


def test_a_detached_search_goes_on_after_its_script_ends(tmp_path):
    config = settings_file(tmp_path)
    script = tmp_path / "detached.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import searchfns
        from easylaunch import run_search
        search = run_search(searchfns.curve, {{"x": [0.0, 0.3, 0.9], "opt": ["adam", "sgd"],
                                               "step_s": 0.05, "steps": 10}},
                            "loss", sampler="grid", n_trials=6, max_parallel=2, pruner=None,
                            exp_name="far", detach=True, config={config!r})
        print(search.id)
    """))
    # (the script run twice at once: one driver, the second call following the first's)
    launchers = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for _ in range(2)]
    said = [launcher.communicate(timeout=120) for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], said
    assert said[0][0] == said[1][0]
    search = Search.get(said[0][0].split()[-1], config=config)
    assert search.summary()["finished"] < 6  # the script ended before its search did
    summary = search.wait(timeout=90).summary()
    assert summary["finished"] == 6 and summary["counts"] == {"complete": 6}
    assert sorted((t["variant"]["x"], t["variant"]["opt"]) for t in summary["trials"]) == \
        sorted((x, opt) for x in (0.0, 0.3, 0.9) for opt in ("adam", "sgd"))
    assert search.best.variant["x"] == 0.3 and search.best.variant["opt"] == "adam"
    # the driver's own run ended, and the registry says so (a later `ls` refreshes nothing)
    driver_run = json.loads((search.folder / "driver_run.json").read_text())["run"]
    registry = open_registry(str(tmp_path / "registry.sqlite3"))
    assert registry.find(Path(driver_run).name.rsplit("_", 1)[1]).state == "succeeded"
    drivers = [e for e in registry.list(exp="far")[0] if e.variant == {"search": search.id}]
    assert len(drivers) == 1, drivers


def test_the_objective_is_returned_else_logged_and_a_trial_without_one_fails(tmp_path):
    config = settings_file(tmp_path)
    search = run_search(searchfns.judged,
                        {"kind": ["returned", "logged", "silent", "none", "raises"]},
                        "score", sampler="grid", n_trials=10, max_parallel=2, pruner=None,
                        exp_name="judged", config=config)
    trials = {t["variant"]["kind"]: t for t in search.trials()}
    assert len(search.trials()) == 5  # (the grid's size, though 10 were asked for)
    assert trials["returned"]["state"] == "complete" and trials["returned"]["value"] == 1.0
    assert trials["logged"]["state"] == "complete" and trials["logged"]["value"] == 2.0
    for kind in ("silent", "none"):  # (a trial told failed, not a driver stuck on it)
        assert trials[kind]["state"] == "fail"
        assert "returned no number for 'score' and logged none" in trials[kind]["reason"]
    assert trials["raises"]["state"] == "fail"
    assert trials["raises"]["reason"] == "ValueError: diverged"
    assert search.best.value == 1.0 and search.best.variant == {"kind": "returned"}


def test_a_space_of_distributions_choices_groups_and_constants():
    space = Space.of({"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
                      "model": {"width": [64, 128], "shape": [(3, 3), (5, 5)]},
                      "epochs": 10})
    assert sorted(space.distributions) == ["lr", "model.shape", "model.width"]
    params = {"lr": 0.01, "model.width": 128, "model.shape": 1}  # (tuples drawn by index)
    assert space.variant(params) == {"epochs": 10, "lr": 0.01,
                                     "model": {"width": 128, "shape": (5, 5)}}
    with pytest.raises(LaunchError, match="sampler='grid' needs choices for 'lr'"):
        make_sampler("grid", space, None)
    assert isinstance(make_sampler("tpe", space, 0), optuna.samplers.TPESampler)
    assert isinstance(make_pruner("asha", 2), optuna.pruners.SuccessiveHalvingPruner)
    assert isinstance(make_pruner(None, 1), optuna.pruners.NopPruner)
    for bad in ({}, {"x": []}, {"x": 1}, {"a.b": [1, 2]}):
        with pytest.raises(LaunchError):
            Space.of(bad)
    with pytest.raises(LaunchError, match="sampler must be one of"):
        make_sampler("bayes", space, None)
    with pytest.raises(LaunchError, match="pruner must be"):
        make_pruner("hyperband", 1)


def test_a_trial_cancelled_by_hand_fails_and_a_second_driver_is_refused(tmp_path):
    config = settings_file(tmp_path)
    space = {"x": [0.0, 0.3], "opt": ["adam"], "step_s": 0.15, "steps": 30}
    search = run_search(searchfns.curve, space, "loss", sampler="grid", n_trials=2,
                        max_parallel=2, pruner=None, exp_name="byhand", detach=True,
                        config=config)
    assert wait_for(lambda: len(search.trials()) == 2, 60), search.summary()
    with pytest.raises(LaunchError, match="is driven by pid"):
        run_search(searchfns.curve, space, "loss", sampler="grid", n_trials=2, max_parallel=2,
                   pruner=None, exp_name="byhand", config=config)
    cancelled = search.trials()[0]
    cli(config, "cancel", Path(cancelled["runs"][0]).name.rsplit("_", 1)[1])
    trials = search.wait(timeout=60).trials()
    assert trials[0]["state"] == "fail" and trials[0]["reason"].startswith("cancelled by hand")
    assert trials[1]["state"] == "complete"


def test_a_killed_search_is_carried_on_from_the_command_line(tmp_path):
    config = settings_file(tmp_path)
    script = tmp_path / "search.py"
    script.write_text(_driver_script(config).replace("n_trials=12", "n_trials=6"))
    driver = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    search = Search("killed", tmp_path / "logs" / ".searches" / "killed")
    assert wait_for(lambda: search.summary()["finished"] >= 2 or driver.poll() is not None, 60)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    assert search.summary()["finished"] < 6
    cli(config, "search", "resume", "kill")
    trials = search.wait(timeout=90).trials()
    assert [t["number"] for t in trials] == list(range(6))
    assert all(t["state"] in ("complete", "pruned") for t in trials), trials


def test_a_median_prune_says_what_the_trial_was_compared_with():
    study = optuna.create_study(pruner=make_pruner("median", 0))
    for value in (0.2, 0.4, 0.6, 0.3, 0.5):
        study.add_trial(optuna.trial.create_trial(value=value, intermediate_values={3: value}))
    trial = study.ask()
    trial.report(0.9, 3)
    assert trial.should_prune()
    assert prune_reason(study, trial, "loss", 3, 0.9) == \
        "pruned at step 3: loss 0.9 worse than the median 0.4 of 5 trials at step 3"


def test_a_trial_whose_run_is_refused_is_not_one_of_n_trials(tmp_path, capsys):
    config = settings_file(tmp_path)
    space = dict(SPACE, steps=3, step_s=0.01)
    with pytest.raises(LaunchError, match="does not take the option"):  # (before anything)
        run_search(searchfns.curve, space, "loss", n_trials=3, name="typo", config=config,
                   max_parralel=2)
    assert not (tmp_path / "logs" / ".searches" / "typo").exists()
    with pytest.raises(LaunchError, match="needs a machine"):  # (mode ssh: no host given)
        run_search(searchfns.curve, space, "loss", n_trials=3, max_parallel=1, name="typo",
                   mode="ssh", config=config)
    search = run_search(searchfns.curve, space, "loss", n_trials=3, max_parallel=1,
                        name="typo", config=config)
    trials = search.trials()
    assert len(trials) == 3 and search.summary()["finished"] == 3
    assert all(t["state"] == "complete" and t["runs"] for t in trials), trials
    said = capsys.readouterr().err
    assert "easylaunch local: carrying on search typo (0/3 trials finished" in said, said
    assert "3 trials, 1 at once" in said and "easylaunch local: run " not in said


def test_a_search_opens_in_plain_optuna_and_in_optuna_dashboard(tmp_path):
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    config = settings_file(tmp_path)
    search = run_search(searchfns.judged, {"kind": ["returned", "logged", "raises"]}, "score",
                        sampler="grid", n_trials=3, max_parallel=3, pruner=None,
                        exp_name="opened", config=config)
    journal = search.folder / "journal.log"  # (what the search guide tells Optuna's users)
    study = optuna.load_study(study_name=search.id,
                              storage=JournalStorage(JournalFileBackend(str(journal))))
    ours = {t["number"]: (t["state"], t["value"], t["variant"]) for t in search.trials()}
    assert {t.number: (t.state.name.lower(), t.value, t.params) for t in study.trials} == ours
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dashboard = subprocess.Popen(
        [str(Path(sys.executable).parent / "optuna-dashboard"), str(journal), "--host",
         "127.0.0.1", "--port", str(port), "--storage-class", "JournalFileStorage", "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        studies = _fetched(f"http://127.0.0.1:{port}/api/studies", dashboard)["study_summaries"]
        assert [s["study_name"] for s in studies] == [search.id]
        shown = _fetched(f"http://127.0.0.1:{port}/api/studies/{studies[0]['study_id']}",
                         dashboard)["trials"]
        assert {t["number"]: (t["state"].lower(), t["values"][0] if t.get("values") else None)
                for t in shown} == {n: (state, value) for n, (state, value, _) in ours.items()}
        page = urllib.request.urlopen(f"http://127.0.0.1:{port}/dashboard", timeout=10).read()
        assert b"<html" in page.lower()
    finally:
        dashboard.terminate()
        dashboard.wait(timeout=10)


def _fetched(url: str, server: subprocess.Popen) -> dict:
    """``url``'s JSON, once the server answers (it says why where it ended first)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return json.loads(urllib.request.urlopen(url, timeout=10).read())
        except OSError:
            assert server.poll() is None, server.stderr.read() if server.stderr else ""
            assert time.monotonic() < deadline, f"optuna-dashboard did not answer {url}"
            time.sleep(0.1)
