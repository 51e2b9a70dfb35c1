"""Resubmitting runs: what a resubmit runs, and what it finds again where the runs run.

A resubmit reruns a run's code and settings as launched, and says so; ``--current-code`` and
``--current-settings`` take the script, code folders and settings file as they are now. What a
run needs that is gone (a purged store, a removed job side) or differs (easylaunch upgraded since
the launch) is sent again, or named with the fix.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import jobfns
import pytest

from easylaunch import get_job, resubmit, resubmit_launch, run_command, run_sweep
from easylaunch.runs import jobpack
from easylaunch.tracking.jobs import JobState


def test_the_job_side_is_the_same_bytes_whatever_the_process_interned_before():
    """Bytecode names a string constant by whether it is interned, which the process's history
    decides (one that had used Ray had interned its own "[", so its launches named another job
    side than a later process's resubmit): the job side's bytecode must not depend on it."""
    build = ("import hashlib; from easylaunch.runs.jobpack import _bytecode; print(hashlib.sha256("
             "_bytecode('m.py', b'SECTION = \"\\xc2\\xa7\"\\n')).hexdigest())")
    plain, interned = (subprocess.run([sys.executable, "-c", before + build], check=True,
                                      capture_output=True, text=True).stdout
                       for before in ("", "import sys; sys.intern(chr(0xa7)); "))
    assert plain == interned


@pytest.fixture
def upgraded():
    """This process's easylaunch a later release than the one that launched the runs: its job
    side is other bytes (their digest's start, as blob names have it)."""
    original = jobpack._ZIP_MAIN
    jobpack._ZIP_MAIN = original + b"# a later release\n"
    jobpack.job_archive.cache_clear()
    try:
        yield hashlib.sha256(jobpack.job_archive()).hexdigest()[:32]
    finally:
        jobpack._ZIP_MAIN = original
        jobpack.job_archive.cache_clear()


def _job_side(job) -> str:
    return (job.log_dir / "bundle" / "job.pyz").resolve().name


@pytest.mark.parametrize("mode", ["htp", "ssh"])
def test_runs_go_again_after_an_upgrade_and_a_purge_of_the_store_there(
        remote_cfg, ssh_cluster, mode, request):
    jobs = run_sweep(jobfns.fail_unless_exists, [{"path": "/"}, {"path": "/nonexistent"}],
                     mode=mode, exp_name="purged", config=remote_cfg, cluster="test")
    assert [j.wait(timeout=120) for j in jobs] == [JobState.SUCCEEDED, JobState.FAILED]
    roots = [ssh_cluster / remote_cfg["CLUSTERS"]["test"]["log_dir"].removeprefix("~/"),
             Path(remote_cfg["SSS_LOG_DIR"])]  # (the ssh mode's, the Slurm modes')
    stores = [p for root in roots for name in (".blobs", ".snapshots")
              for p in root.rglob(name) if ".snapshots" not in p.parent.parts]
    assert stores
    for store in stores:  # scratch purged of old files
        shutil.rmtree(store)
    launched_with = _job_side(jobs[0])
    new_release = request.getfixturevalue("upgraded")
    assert not launched_with.startswith(new_release)
    again = resubmit_launch([j.id for j in jobs], config=remote_cfg)
    assert [j.wait(timeout=120) for j in again] == [JobState.SUCCEEDED, JobState.FAILED]
    assert [_job_side(j) for j in again] == [launched_with] * 2  # as launched
    assert any((store.parent / ".blobs" / launched_with).is_file() for store in stores)


def test_a_run_whose_job_side_was_removed_here_gets_this_releases(cfg):
    [job] = run_sweep(jobfns.double, [{"x": 2}], mode="local", config=cfg)
    assert job.result(timeout=60) == {"x": 2, "y": 4}
    (job.log_dir / "bundle" / "job.pyz").resolve().unlink()
    again = resubmit(job.id, config=cfg)
    assert again.result(timeout=60) == {"x": 2, "y": 4}
    assert _job_side(again).startswith(hashlib.sha256(jobpack.job_archive()).hexdigest()[:32])


def test_a_run_whose_function_was_removed_names_it_and_the_fix(cfg):
    [job] = run_sweep(jobfns.double, [{"x": 2}], mode="local", config=cfg)
    job.wait(timeout=60)
    pickled = (job.log_dir / "bundle" / "function.pkl").resolve()
    pickled.unlink()
    with pytest.raises(Exception, match="--current-code") as refused:
        resubmit(job.id, config=cfg)
    assert str(pickled) in str(refused.value)


# A researcher's sweep script, in their project folder (the code folder), with a bug in a
# module beside it; launched as `python sweep.py MODE SETTINGS`.
SWEEP = """
import sys

import helper
from easylaunch import run_sweep

OFFSET = {offset}
MODE, SETTINGS = sys.argv[1:]  # (read at import: a resubmit imports it with the launch's argv)


def train(doodad_config, variant):
    return helper.scale(variant["x"]) + OFFSET


if __name__ == "__main__":
    jobs = run_sweep(train, [{{"x": 1}}, {{"x": 2}}], exp_name="fixme", mode=MODE,
                     config=SETTINGS)
    print("launched", *(job.id for job in jobs))
"""
BUGGY = "def scale(x):\n    raise ValueError('bug in scale')\n"
FIXED = "def scale(x):\n    return 10 * x\n"


@pytest.fixture
def project(tmp_path):
    """The researcher's project folder (sweep.py, helper.py with the bug) and settings file."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "sweep.py").write_text(SWEEP.format(offset=0))
    (folder / "helper.py").write_text(BUGGY)
    return folder


def _settings(path: Path, values: dict) -> Path:
    path.write_text("".join(f"{key} = {value!r}\n" for key, value in values.items()))
    return path


def _easylaunch(settings: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(settings),
                           *args], capture_output=True, text=True, timeout=180, cwd=cwd)


def _launch(project: Path, mode: str, settings: Path) -> list:
    out = subprocess.run([sys.executable, "sweep.py", mode, str(settings)], cwd=project,
                         capture_output=True, text=True, timeout=180)
    ids = next(line.split()[1:] for line in out.stdout.splitlines()
               if line.startswith("launched "))
    return [get_job(i, config=str(settings)) for i in ids]


def _resubmitted(out: subprocess.CompletedProcess, settings: Path) -> list:
    assert out.returncode == 0, out
    return [get_job(line.split()[3].rstrip(":"), config=str(settings))
            for line in out.stdout.splitlines() if line.startswith("resubmitted ")]


@pytest.mark.parametrize("mode", ["local", "slurm"])
def test_a_fixed_script_runs_with_current_code_and_as_launched_without(
        project, cfg, mode, request, tmp_path):
    values = dict(cfg, CODE_DIRS_TO_MOUNT=[str(project)])
    if mode == "slurm":
        values = dict(request.getfixturevalue("slurm_cfg"), **values)
    settings = _settings(tmp_path / "settings.py", values)
    jobs = _launch(project, mode, settings)
    assert [j.wait(timeout=120) for j in jobs] == [JobState.FAILED] * 2
    (project / "helper.py").write_text(FIXED)  # the researcher fixes the bug
    (project / "sweep.py").write_text(SWEEP.format(offset=1))

    out = _easylaunch(settings, "resubmit", jobs[0].id, cwd=tmp_path)
    assert "runs the code as launched" in out.stderr
    assert "--current-code and --current-settings take them as they are now" in out.stderr
    [again] = _resubmitted(out, settings)
    assert again.wait(timeout=120) == JobState.FAILED
    assert "bug in scale" in again.info()["error"]

    sweep = jobs[0].launch_info["sweep_id"]
    out = _easylaunch(settings, "resubmit", "--sweep", sweep, "--state", "failed",
                      "--current-code", "--yes", cwd=tmp_path)
    assert "runs the code as it is now" in out.stderr
    fixed = _resubmitted(out, settings)
    assert len(fixed) == 3 and all(j.wait(timeout=120) == JobState.SUCCEEDED for j in fixed)
    by_old = {j.launch_info["resubmitted_from"]: j for j in fixed}
    assert by_old[jobs[0].id].result() == 11 and by_old[jobs[1].id].result() == 21
    assert by_old[again.id].result() == 11
    # the new runs say which code they ran: a snapshot of the project as it is now
    before, after = (j.launch_info["code_snapshots"][0]["digest"] for j in (jobs[0], fixed[0]))
    assert before != after
    assert fixed[0].launch_info["resubmitted_with"] == {"code": "current",
                                                       "settings": "as launched"}
    shown = _easylaunch(settings, "status", fixed[0].id, cwd=tmp_path).stdout
    assert "code current, settings as launched" in shown
    assert f"{after[:8]} ({project})" in shown
    assert {j.launch_info["sweep_id"] for j in fixed} == {sweep}
    assert {j.launch_info["launch_id"] for j in fixed} != {jobs[0].launch_info["launch_id"]}


NEEDS_DATA = """
import os
import sys

from easylaunch import run_sweep


def train(doodad_config, variant):
    return os.environ["DATA_ROOT"] + variant["name"]


if __name__ == "__main__":
    jobs = run_sweep(train, [{"name": "/a"}], exp_name="data", mode=sys.argv[1],
                     config=sys.argv[2])
    print("launched", *(job.id for job in jobs))
"""


def test_current_settings_reads_the_changed_settings_file(tmp_path, slurm_cfg):
    """A run that failed for a setting the researcher then fixed in the settings file (as
    SLURM_PYTHON in the story): as launched it fails again, --current-settings takes the fix."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "sweep.py").write_text(NEEDS_DATA)
    settings = _settings(tmp_path / "settings.py", dict(slurm_cfg, CODE_DIRS_TO_MOUNT=[]))
    [job] = _launch(project, "slurm", settings)
    assert job.wait(timeout=120) == JobState.FAILED
    _settings(settings, dict(slurm_cfg, CODE_DIRS_TO_MOUNT=[],
                             SLURM_PRE_CMDS=["export DATA_ROOT=/data"]))
    out = _easylaunch(settings, "resubmit", job.id, cwd=tmp_path)
    [again] = _resubmitted(out, settings)
    assert again.wait(timeout=120) == JobState.FAILED
    out = _easylaunch(settings, "resubmit", job.id, "--current-settings", cwd=tmp_path)
    assert f"the settings of {settings} as it is now" in out.stderr
    assert "--current-code takes it as it is now" in out.stderr
    [fixed] = _resubmitted(out, settings)
    assert fixed.result(timeout=120) == "/data/a"
    # and from Python, with the code as it is now too
    newer = resubmit(job.id, config=str(settings), current_code=True, current_settings=True)
    assert newer.result(timeout=120) == "/data/a"


def test_what_cannot_be_found_again_is_named(project, cfg, tmp_path):
    settings = _settings(tmp_path / "settings.py", dict(cfg, CODE_DIRS_TO_MOUNT=[str(project)]))
    jobs = _launch(project, "local", settings)
    script = project / "sweep.py"
    script.write_text(SWEEP.format(offset=0).replace("def train(", "def fit("))
    out = _easylaunch(settings, "resubmit", "--current-code", jobs[0].id, cwd=tmp_path)
    assert out.returncode == 1
    assert f"{script} no longer defines train" in out.stderr
    script.write_text(SWEEP.format(offset=0).replace('if __name__ == "__main__":', "if True:"))
    out = _easylaunch(settings, "resubmit", "--current-code", jobs[0].id, cwd=tmp_path)
    assert out.returncode == 1
    assert 'launches runs when it is imported' in out.stderr
    assert 'if __name__ == "__main__":' in out.stderr
    script.unlink()
    out = _easylaunch(settings, "resubmit", "--current-code", jobs[0].id, cwd=tmp_path)
    assert out.returncode == 1
    assert f"its launching script {script} is gone" in out.stderr and "train" in out.stderr
    runs = [line for line in _easylaunch(settings, "ls", cwd=tmp_path).stdout.splitlines()
            if "fixme" in line]
    assert len(runs) == 2  # nothing was launched by the refused resubmits


def test_a_command_run_takes_its_folders_code_as_it_is_now(project, cfg, tmp_path):
    (project / "tool.py").write_text("import helper\nprint(helper.scale(4))\n")
    settings = dict(cfg, CODE_DIRS_TO_MOUNT=[str(project)])
    job = run_command("python tool.py", mode="local", config=settings)
    assert job.wait(timeout=60) == JobState.FAILED
    (project / "helper.py").write_text(FIXED)
    assert resubmit(job.id, config=settings).wait(timeout=60) == JobState.FAILED
    fixed = resubmit(job.id, config=settings, current_code=True)
    assert fixed.wait(timeout=60) == JobState.SUCCEEDED
    assert "40" in (fixed.log_dir / "stdout.log").read_text()
    assert fixed.launch_info["command"] == job.launch_info["command"]


def test_a_function_of_a_code_folders_module_is_found_there(cfg, tmp_path):
    """A function the runs import from the code folder (pickled by reference) is found in
    that folder again by a later `easylaunch` process."""
    [job] = run_sweep(jobfns.double, [{"x": 3}], mode="local", config=cfg)
    job.wait(timeout=60)
    settings = _settings(tmp_path / "settings.py", cfg)
    out = _easylaunch(settings, "resubmit", "--current-code", job.id, cwd=tmp_path)
    [again] = _resubmitted(out, settings)
    assert again.result(timeout=60) == {"x": 3, "y": 6}


def test_current_code_from_the_process_that_imported_the_module_takes_its_file_as_now(
        cfg, tmp_path, monkeypatch):
    """A notebook (or a script that launched, then resubmits) imported the function's module
    from its working folder; the module is fixed, and resubmit(current_code=True) in the same
    process runs it as its file is now, not as the process imported it."""
    project = tmp_path / "notebook"
    project.mkdir()
    module = project / "nb_model.py"
    module.write_text("def train(doodad_config, variant):\n    raise ValueError('bug')\n")
    monkeypatch.chdir(project)
    monkeypatch.syspath_prepend(str(project))
    try:
        import nb_model
        [job] = run_sweep(nb_model.train, [{"x": 2}], mode="local", config=cfg)
        assert job.wait(timeout=60) == JobState.FAILED
        module.write_text("def train(doodad_config, variant):\n    return variant['x'] * 100\n")
        fixed = resubmit(job.id, config=cfg, current_code=True)
        assert fixed.result(timeout=60) == 200
        assert sys.modules["nb_model"] is nb_model  # the process's own module is left as is
        again = resubmit(job.id, config=cfg)  # as launched: the bug again
        assert again.wait(timeout=60) == JobState.FAILED
    finally:
        sys.modules.pop("nb_model", None)


def test_current_settings_whose_file_is_gone_reads_the_file_given_or_names_the_fix(
        cfg, tmp_path):
    """The settings file a launch read is gone: --current-settings reads the one given instead
    (--config; Python: config=), or, given none, says so with the file named."""
    launched_with = _settings(tmp_path / "settings.py", cfg)
    [job] = run_sweep(jobfns.double, [{"x": 2}], mode="local", config=str(launched_with))
    job.wait(timeout=60)
    launched_with.unlink()
    found = _settings(tmp_path / "easylaunch_config.py", cfg)  # the lookup's, in the folder
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "resubmit",
                          "--current-settings", job.id], capture_output=True, text=True,
                         timeout=180, cwd=tmp_path)
    assert out.returncode == 1
    assert f"the settings file {launched_with} the runs were launched with is gone" in out.stderr
    assert "--config FILE" in out.stderr
    instead = _settings(tmp_path / "instead.py", dict(cfg, MAX_RESTARTS=1))
    out = _easylaunch(instead, "resubmit", "--current-settings", job.id, cwd=tmp_path)
    [fixed] = _resubmitted(out, found)
    assert fixed.result(timeout=60) == {"x": 2, "y": 4}
    assert fixed.launch_info["request"]["settings_path"] == str(instead)
    again = resubmit(job.id, config=str(instead), current_settings=True)
    assert again.result(timeout=60) == {"x": 2, "y": 4}
    assert again.launch_info["resubmitted_with"]["settings"] == str(instead)
    assert again.launch_info["request"]["settings_path"] == str(instead)
