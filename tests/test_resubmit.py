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

from easylaunch import jobpack, resubmit, resubmit_launch, run_sweep
from easylaunch.jobs import JobState


def test_the_job_side_is_the_same_bytes_whatever_the_process_interned_before():
    """Bytecode names a string constant by whether it is interned, which the process's history
    decides (one that had used Ray had interned its own "[", so its launches named another job
    side than a later process's resubmit): the job side's bytecode must not depend on it."""
    build = ("import hashlib; from easylaunch.jobpack import _bytecode; print(hashlib.sha256("
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
