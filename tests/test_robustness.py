"""Regressions for races and edge cases found in review."""

import copy
import json
import os
import pickle
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jobfns
import pytest
from helpers import alive, wait_for

from easylaunch import (
    Job,
    JobFailedError,
    JobState,
    LaunchError,
    SettingsError,
    run_experiment,
    run_sweep,
)
from easylaunch.settings import load_settings
from easylaunch_job.records import update_status


def test_first_terminal_state_wins(tmp_path):
    update_status(str(tmp_path), state="cancelled", error="cancelled")
    after = update_status(str(tmp_path), state="running", pid=1)
    assert after["state"] == "cancelled" and after["error"] == "cancelled"
    assert update_status(str(tmp_path), cancel_requested=True)["cancel_requested"] is True


_TWO_SIGTERMS = """
import json, os, signal, sys, time
from easylaunch_job import run, stops

signal.signal(signal.SIGTERM, stops.raise_terminated)
record = run.update_status

def second_sigterm_while_recording(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # as scancel and Singularity both send one
    time.sleep(0.1)
    return record(*args, **kwargs)

def fn(config, variant):
    run.update_status = second_sigterm_while_recording
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)

code, _ = run.call_and_record(fn, None, None, sys.argv[1])
print(code, json.load(open(os.path.join(sys.argv[1], "status.json")))["state"])
"""


def test_a_second_sigterm_does_not_cut_short_the_record_of_the_first(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _TWO_SIGTERMS, str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["143", "cancelled"], proc.stderr


_SIGTERM_AS_THE_RESULT_IS_RECORDED = """
import json, os, signal, sys, time
from easylaunch_job import run, stops

signal.signal(signal.SIGTERM, stops.raise_terminated)
save = run.save_result

def sigterm_while_saving(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # the launcher's end, seen by its watcher thread
    time.sleep(0.1)
    return save(*args, **kwargs)

run.save_result = sigterm_while_saving
code, value = run.call_and_record(lambda config, variant: {"loss": 0.5}, None, None,
                                  sys.argv[1])
print(code, value["loss"], json.load(open(os.path.join(sys.argv[1], "status.json")))["state"])
try:  # (once recorded, a stop stops again: a run nested in another, an exit waiting on threads)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)
except stops.Terminated:
    print("stopped-again")
"""


def test_a_stop_after_the_function_returned_never_loses_its_result(tmp_path):
    """A SIGTERM while a returned value is recorded (a launcher that died, a late cancel)
    comes too late: the run succeeded, and says so. It once left the record half-written.
    Once recorded, a SIGTERM stops the process again."""
    proc = subprocess.run([sys.executable, "-c", _SIGTERM_AS_THE_RESULT_IS_RECORDED,
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.stdout.split() == ["0", "0.5", "succeeded", "stopped-again"], proc.stderr


def test_runner_never_starts_a_run_cancelled_before_it_took_it(cfg, tmp_path):
    job = run_experiment(jobfns.write_file, variant={"text": "ran"}, config=cfg)
    job.wait(timeout=60)
    out = tmp_path / "again"
    out.mkdir()
    update_status(str(out), state="cancelled", error="cancelled before it started")
    bundle = job.log_dir / "bundle"
    proc = subprocess.run([sys.executable, str(bundle / "job.pyz"), "run", str(bundle),
                           "--log-dir", str(out)], capture_output=True, text=True)
    assert proc.returncode == 4
    assert not (out / "output.txt").exists()


def test_exception_that_cannot_be_rebuilt_still_reports_its_traceback(cfg):
    job = run_experiment(jobfns.raise_shape_error, mode="local", config=cfg)
    assert job.wait(timeout=60) is JobState.FAILED
    with pytest.raises(JobFailedError, match="ShapeError: wrong shape"):
        job.result()
    with pytest.raises(Exception, match="wrong shape"):  # (in this process: raised as it is)
        run_experiment(jobfns.raise_shape_error, mode="here_no_doodad", config=cfg)


def test_result_carries_the_runs_traceback_as_cause(cfg):
    job = run_experiment(jobfns.fail, variant={"learning_rate": 9}, config=cfg)
    with pytest.raises(ValueError) as caught:
        job.result(timeout=60)
    assert "jobfns.py" in str(caught.value.__cause__)
    assert job.id in str(caught.value.__cause__)


SCRIPT_THAT_CHANGES = """
import sys, time
from pathlib import Path
from easylaunch import run_experiment

def crash(doodad_config, variant):
    time.sleep(1)
    return variant["x"] / 0  # the launched line

job = run_experiment(crash, variant={"x": 1}, mode="local", config=sys.argv[1])
Path(__file__).write_text("# edited after the launch\\n")  # the script changes meanwhile
job.wait(timeout=60)
print(job.info()["error"])
"""


def test_tracebacks_show_the_launching_scripts_lines_as_launched(cfg, tmp_path):
    """A function defined in the launching script travels by value; its traceback names the
    script and shows its lines as they were at launch, without easylaunch's own frames."""
    script = tmp_path / "experiment.py"
    script.write_text(SCRIPT_THAT_CHANGES)
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {cfg['LOCAL_LOG_DIR']!r}\n")
    out = subprocess.run([sys.executable, str(script), str(settings)], capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f'File "{script}", line 8, in crash' in out.stdout
    assert 'return variant["x"] / 0  # the launched line' in out.stdout
    assert "ZeroDivisionError" in out.stdout
    assert "easylaunch_job" not in out.stdout and "<dynamic-code>" not in out.stdout


def test_ctrl_c_during_a_here_sweep_leaves_no_run_queued(cfg):
    calls = []

    def interrupt_second(doodad_config, variant):
        calls.append(variant["i"])
        if variant["i"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_sweep(interrupt_second, [{"i": i} for i in range(4)], mode="here_no_doodad",
                  config=cfg)
    assert calls == [0, 1]
    folders = (Path(cfg["LOCAL_LOG_DIR"]) / "default").iterdir()
    states = sorted(Job.from_run_dir(f).status().value for f in folders)
    assert states == ["cancelled", "cancelled", "cancelled", "succeeded"]


def test_symlinked_code_folders_travel(cfg, tmp_path, monkeypatch):
    real = tmp_path / "real_helpers"
    real.mkdir()
    (real / "helpermod.py").write_text("def f(c, v):\n    return 'from a linked folder'\n")
    code = tmp_path / "code"
    code.mkdir()
    (code / "linked").symlink_to(real)
    (code / "loop").symlink_to(code)  # a cycle must not hang the walk
    os.mkfifo(code / "a-fifo")  # neither may a FIFO
    monkeypatch.syspath_prepend(str(code / "linked"))
    import helpermod
    cfg["CODE_DIRS_TO_MOUNT"] = [str(code), str(code / "linked")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job = run_experiment(helpermod.f, config=cfg)
    assert job.result(timeout=60) == "from a linked folder"
    assert any("a-fifo" in str(w.message) for w in caught)


def test_a_python_wrapper_script_as_local_python(cfg, tmp_path):
    wrapper = tmp_path / "py-wrapper"
    wrapper.write_text(f"#!/bin/sh\n{sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    cfg["LOCAL_PYTHON"] = str(wrapper)
    assert run_experiment(jobfns.train, config=cfg).result(timeout=60)["loss"] == 0.1


def test_local_python_may_be_a_name_on_path(cfg, monkeypatch):
    monkeypatch.setenv("PATH", f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    cfg["LOCAL_PYTHON"] = os.path.basename(sys.executable)
    assert run_experiment(jobfns.train, config=cfg).result(timeout=60)["loss"] == 0.1


def test_background_processes_do_not_outlive_a_finished_run(cfg):
    job = run_experiment(jobfns.leave_background_child, config=cfg)
    child = job.result(timeout=60)
    assert wait_for(lambda: not alive(child), 10)


def test_death_by_an_unnamed_signal_is_reported(cfg):
    job = run_experiment(jobfns.kill_self, variant={"signal": 40}, config=cfg)
    assert job.wait(timeout=60) is JobState.FAILED
    assert "killed by signal 40" in job.info()["error"]


def test_cancel_kills_children_that_ignore_sigterm(cfg):
    cfg["LOCAL_CANCEL_GRACE_SECONDS"] = 0.5
    job = run_experiment(jobfns.echo, config=cfg)  # warm up the pool
    job.wait(timeout=60)
    stubborn = run_experiment(_stubborn, config=cfg)
    assert wait_for(lambda: (stubborn.log_dir / "pid").exists())
    pid = int((stubborn.log_dir / "pid").read_text())
    stubborn.cancel()
    assert stubborn.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not alive(pid), 10)


def _stubborn(doodad_config, variant):
    import subprocess
    import time
    child = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300"])
    with open(f"{doodad_config.base_log_dir}/pid", "w") as f:
        f.write(str(child.pid))
    time.sleep(300)


@pytest.mark.parametrize("variants, problem", [
    ([{("a", "b"): 1}], "variant keys must be strings"),
    ({"lr": 1}, "variants must be a list of dicts"),
])
def test_more_bad_variants(cfg, variants, problem):
    with pytest.raises(LaunchError, match=problem):
        run_sweep(jobfns.train, variants, config=cfg)
    assert not os.path.exists(cfg["LOCAL_LOG_DIR"])


@pytest.mark.parametrize("values, problem", [
    ({"CODE_SNAPSHOT_MAX_MB": -5}, "must be a positive number"),
    ({"LOCAL_CANCEL_GRACE_SECONDS": float("nan")}, "0 or more seconds"),
    ({"LOCAL_CANCEL_GRACE_SECONDS": float("inf")}, "0 or more seconds"),
    ({"CODE_SNAPSHOT_EXCLUDES": [None]}, "a list of strings"),
    ({"HTP_RUNNER": "mpi"}, '"packer" or "ht_helper"'),
    ({1: "x"}, "setting names must be strings"),
])
def test_setting_values_are_checked(values, problem):
    with pytest.raises(SettingsError, match=problem):
        load_settings(values)


def test_lowercase_keys_in_a_settings_dict_are_not_silently_dropped():
    with pytest.warns(UserWarning, match="'local_log_dir' is ignored: settings are UPPERCASE"):
        load_settings({"local_log_dir": "/x"})


def test_settings_accept_paths_and_can_be_copied(tmp_path):
    settings = load_settings({"LOCAL_LOG_DIR": tmp_path})
    assert settings.LOCAL_LOG_DIR == str(tmp_path)
    assert copy.copy(settings).LOCAL_LOG_DIR == str(tmp_path)
    assert pickle.loads(pickle.dumps(settings)).LOCAL_LOG_DIR == str(tmp_path)


def test_git_diffs_of_same_named_folders_are_both_kept(cfg, tmp_path):
    dirs = []
    for parent in ("ga", "gb"):
        repo = tmp_path / parent / "src"
        repo.mkdir(parents=True)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        (repo / "f.py").write_text(parent)
        subprocess.run(["git", "-C", str(repo), "add", "f.py"], check=True)
        dirs.append(str(repo))
    cfg["CODE_DIRS_TO_MOUNT"] = dirs
    job = run_experiment(jobfns.train, mode="here_no_doodad", config=cfg)
    staged = sorted(p.name for p in (job.log_dir / "git").iterdir())
    assert staged == ["0-src.staged.diff", "1-src.staged.diff"]


def test_ctrl_c_while_waiting_says_one_line_and_cancels_the_runs(cfg, tmp_path):
    script = tmp_path / "waits.py"
    script.write_text(
        f"import sys; sys.path.insert(0, {str(Path(jobfns.__file__).parent)!r})\n"
        "import jobfns\nfrom easylaunch import run_sweep, wait_all\n"
        f"jobs = run_sweep(jobfns.sleep_a_while, [{{'seconds': 60}}] * 2, config={cfg!r})\n"
        "print(' '.join(j.id for j in jobs), flush=True)\nwait_all(jobs)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ids = proc.stdout.readline().split()
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err
    assert err.splitlines()[-1] == "easylaunch: interrupted (Ctrl-C); cancelling 2 local runs"
    states = [json.loads((p / "status.json").read_text())["state"]
              for p in Path(cfg["LOCAL_LOG_DIR"], "default").iterdir() if p.name.endswith(
                  tuple(ids))]
    assert states == ["cancelled", "cancelled"]
