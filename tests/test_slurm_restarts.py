"""Restarts on the local Slurm cluster: time limits, preemption (a signal, Slurm's own requeue)
and lost processes end an attempt; the run's element is submitted again with the same run id
and folder and resumes from its checkpoint; a cancel while it waits ends it for good."""

import signal
import subprocess
import sys
import time
from pathlib import Path

import jobfns
import pytest
from helpers import (
    batch_runs_under_way,
    copy_to_cluster,
    holding_the_default_partition,
    wait_for,
)
from jobfns import steps_done

from easylaunch import JobState, run_experiment, run_sweep


def _slurm(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=True)


def _started(job, steps: int = 3) -> str:
    """The Slurm id of the run's attempt, once it did ``steps`` steps."""
    assert wait_for(lambda: len(steps_done(job.log_dir)) >= steps, timeout=120), job.info()
    return job.info()["job_id"]


def _assert_resumed(job, result: dict, every: int, log_dir: Path | None = None) -> None:
    """The run went on from its checkpoints: the count never restarted from zero, and each
    restart redid fewer than ``every`` steps."""
    steps = steps_done(log_dir or job.log_dir)
    assert result["resumed_from"] > 0 and result["attempt"] >= 2
    for attempt in range(2, result["attempt"] + 1):
        before = max(s for a, s in steps if a < attempt)
        done = [s for a, s in steps if a == attempt]
        if not done:  # (stopped after its last save, it had nothing left to count)
            assert before == result["steps"] == result["resumed_from"], (attempt, steps)
            continue
        assert before - every < min(done) <= before + 1, (attempt, steps)


def test_time_limits_requeue_each_array_element_until_it_succeeds(slurm_cfg):
    slurm_cfg["SLURM_CONFIGS"]["cpu"]["time_in_mins"] = 1
    slurm_cfg["SLURM_SIGNAL_SECONDS"] = 50
    jobs = run_sweep(jobfns.count_steps, [{"steps": 45, "every": 5, "step_seconds": 1}] * 2,
                     mode="slurm", max_restarts=4, config=slurm_cfg)
    for job in jobs:
        result = job.result(timeout=400)
        info = job.info()
        assert info["state"] == "succeeded" and result["steps"] == 45
        assert {r["reason"] for r in info["restarts"]} == {"time limit"}
        assert "SIGUSR1" in info["restarts"][0]["error"]
        _assert_resumed(job, result, every=5)
        launched = job.launch_info["backend"]["slurm_job_id"]
        assert info["restarts"][0]["job_id"] == launched != info["job_id"]  # a new element


@pytest.mark.parametrize("mode", ["slurm", "slurm_singularity"])
def test_preemption_signal_saves_and_resumes_at_once(slurm_cfg, mode, request):
    config = slurm_cfg
    if mode == "slurm_singularity":  # the image has no sbatch: the job script resubmits
        config = dict(slurm_cfg, SINGULARITY_IMAGE=str(request.getfixturevalue("stand_in")),
                      SINGULARITY_PYTHON=sys.executable)
    job = run_experiment(jobfns.count_steps, variant={"steps": 30, "every": 1000,
                                                      "step_seconds": 0.2},
                         mode=mode, max_restarts=2, config=config)
    _slurm("scancel", "--full", "--signal=TERM", _started(job))
    result = job.result(timeout=120)
    (restart,) = job.info()["restarts"]
    assert restart["reason"] == "preempted"
    stopped_at = max(s for a, s in steps_done(job.log_dir) if a == 1)
    assert result["resumed_from"] == stopped_at  # the save at the notice: nothing redone
    assert "the run goes on as job" in job.stderr_path.read_text()


def test_slurms_own_requeue_is_taken_over_once(slurm_cfg):
    job = run_experiment(jobfns.count_steps, variant={"steps": 30, "every": 2,
                                                      "step_seconds": 0.2},
                         mode="slurm", max_restarts=2, config=slurm_cfg)
    first = _started(job)
    _slurm("scontrol", "requeue", first)
    try:
        result = job.result(timeout=120)
        assert [r["reason"] for r in job.info()["restarts"]] == ["preempted"]
        assert result["attempt"] == 2
    finally:
        subprocess.run(["scancel", first])  # Slurm's requeued copy (held back two minutes)


def test_a_lost_process_restarts_in_its_own_job_until_restarts_are_used_up(slurm_cfg):
    job = run_experiment(jobfns.kill_self, variant={"signal": signal.SIGKILL},
                         mode="slurm", max_restarts=1, config=slurm_cfg)
    assert job.wait(timeout=120) is JobState.FAILED
    info = job.info()
    assert [r["reason"] for r in info["restarts"]] == ["lost"]
    assert info["attempt"] == 2 and "max_restarts=1 used up" in info["error"]
    assert info["restarts"][0]["job_id"] == info["job_id"]  # the job outlived its process
    assert "next_job_id" not in info


def test_cancel_while_the_next_attempt_waits_ends_the_run(slurm_cfg):
    job = run_experiment(jobfns.count_steps, variant={"steps": 400, "step_seconds": 0.2},
                         mode="slurm", max_restarts=3, config=slurm_cfg)
    first = _started(job)
    blocker = _slurm(*holding_the_default_partition(120)).stdout.strip()
    try:
        _slurm("scancel", "--full", "--signal=TERM", first)
        assert wait_for(lambda: job.info().get("next_job_id"), timeout=60), job.info()
        assert job.status() is JobState.QUEUED
        job.cancel()
        assert job.wait(timeout=60) is JobState.CANCELLED
    finally:
        subprocess.run(["scancel", blocker])
    time.sleep(3)
    assert job.status() is JobState.CANCELLED
    assert {a for a, _ in steps_done(job.log_dir)} == {1}


# -- runs in an image: it has no sbatch, so the job script submits the next attempt outside it

def test_an_image_run_whose_runner_died_is_recorded_and_restarted_outside(slurm_cfg,
                                                                         stand_in):
    config = dict(slurm_cfg, SINGULARITY_IMAGE=str(stand_in), SINGULARITY_PYTHON=sys.executable)
    job = run_experiment(jobfns.kill_self, variant={"signal": signal.SIGKILL, "and_parent": True},
                         mode="slurm_singularity", max_restarts=1, config=config)
    assert job.wait(timeout=120) is JobState.FAILED
    info = job.info()
    assert [r["reason"] for r in info["restarts"]] == ["lost"]
    assert info["attempt"] == 2 and "max_restarts=1 used up" in info["error"]
    assert "SIGKILL" in info["error"] and info["restarts"][0]["job_id"] != info["job_id"]


def test_sss_runs_requeue_at_the_time_limit_warning(batch_cfg):
    """The warning goes to the job's shell alone (``--signal=B:USR1``, played here by
    ``scancel --batch``): it passes it on into the image, and submits the next attempt."""
    job = run_experiment(jobfns.count_steps, variant={"steps": 30, "every": 5,
                                                      "step_seconds": 0.2},
                         mode="sss", max_restarts=2, config=batch_cfg)
    subprocess.run(["bash", f"{copy_to_cluster(job)}/submit.sh"], check=True,
                   capture_output=True)
    log_dir = Path(job.launch_info["backend"]["job_log_dir"])
    assert wait_for(lambda: len(steps_done(log_dir)) >= 3, timeout=120), job.info()
    _slurm("scancel", "--batch", "--signal=USR1", job.info()["job_id"])
    result = job.result(timeout=120)
    info = job.info()
    assert info["state"] == "succeeded" and result["steps"] == 30
    assert [r["reason"] for r in info["restarts"]] == ["time limit"]
    _assert_resumed(job, result, every=5, log_dir=log_dir)


@pytest.mark.parametrize("container", [True, False], ids=["in-image", "warm-workers"])
def test_an_htp_allocation_stopped_at_its_time_limit_goes_on_in_a_new_one(batch_cfg, container):
    """Two workers, three runs: at the warning the two running save; the allocation submits
    itself again for them and the one never started, and only those run there."""
    if not container:
        batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 2
    jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2}] * 3,
                     mode="htp", max_restarts=2, config=batch_cfg)
    subprocess.run(["bash", f"{copy_to_cluster(jobs[0])}/submit.sh"], check=True,
                   capture_output=True)
    log_dirs = batch_runs_under_way(jobs)
    allocation = jobs[0].info()["job_id"]
    _slurm("scancel", "--batch", "--signal=USR1", allocation)
    results = [j.result(timeout=180) for j in jobs]
    assert [r["steps"] for r in results] == [30] * 3
    stopped = [(j, r, d) for j, r, d in zip(jobs, results, log_dirs, strict=True)
               if j.info().get("restarts")]
    assert len(stopped) == 2
    for job, result, log_dir in stopped:
        assert [r["reason"] for r in job.info()["restarts"]] == ["time limit"]
        _assert_resumed(job, result, every=5, log_dir=log_dir)
    assert {j.info()["job_id"] for j in jobs} == {jobs[0].info()["next_job_id"]} != {allocation}


def test_a_stopped_allocation_of_several_goes_on_with_its_runs_and_those_left(batch_cfg):
    """Two allocations of one worker, three runs: when one allocation is stopped, its run
    saves, and a new array goes on with it and the run no allocation had taken; the other
    allocation's run ends where it is."""
    batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1
    jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2}] * 3,
                     mode="htp", max_restarts=2, allocations=2, config=batch_cfg)
    subprocess.run(["bash", f"{copy_to_cluster(jobs[0])}/submit.sh"], check=True,
                   capture_output=True)
    log_dirs = batch_runs_under_way(jobs)
    running = [j for j, d in zip(jobs, log_dirs, strict=True) if len(steps_done(d)) >= 3]
    stopped_element = running[0].info()["job_id"]
    _slurm("scancel", "--batch", "--signal=USR1", stopped_element)
    results = [j.result(timeout=180) for j in jobs]
    assert [r["steps"] for r in results] == [30] * 3
    restarted = [j for j in jobs if j.info().get("restarts")]
    assert [j.id for j in restarted] == [running[0].id]
    assert [r["reason"] for r in running[0].info()["restarts"]] == ["time limit"]
    _assert_resumed(running[0], results[jobs.index(running[0])], every=5,
                    log_dir=log_dirs[jobs.index(running[0])])
    going_on = running[0].info()["next_job_id"]
    assert going_on.split("_")[0] != stopped_element.split("_")[0]  # a new array
    untaken = next(j for j in jobs if j not in running)
    assert untaken.info()["job_id"].startswith(going_on.split("_")[0])  # it ran there
    assert running[1].info()["job_id"].split("_")[0] == stopped_element.split("_")[0]


def test_a_stopped_allocation_of_two_nodes_goes_on_as_one_new_allocation(batch_cfg):
    """n_nodes=2 (a packer on node1, one on node2), one worker each, three runs:
    at the warning the two running save; packer 0 waits for the other and submits the
    allocation once for both and the run never started, which all end there."""
    batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1
    jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2}] * 3,
                     mode="htp", max_restarts=2, n_nodes=2, config=batch_cfg)
    cluster = Path(copy_to_cluster(jobs[0]))
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True)
    log_dirs = batch_runs_under_way(jobs)
    allocation = jobs[0].info()["job_id"]
    _slurm("scancel", "--batch", "--signal=USR1", allocation)  # (srun passes it to both)
    results = [j.result(timeout=180) for j in jobs]
    assert [r["steps"] for r in results] == [30] * 3
    stopped = [j for j in jobs if j.info().get("restarts")]
    assert len(stopped) == 2
    for job in stopped:
        assert [r["reason"] for r in job.info()["restarts"]] == ["time limit"]
        _assert_resumed(job, results[jobs.index(job)], every=5,
                        log_dir=log_dirs[jobs.index(job)])
    going_on = {j.info()["next_job_id"] for j in stopped}
    assert len(going_on) == 1 and going_on != {allocation}  # one new allocation, for all
    assert {j.info()["job_id"] for j in jobs} == going_on
    claims = cluster / "task-state" / f"claims-{allocation}"
    assert sorted(p.name for p in claims.glob("stopped-*")) == ["stopped-0-1"]
