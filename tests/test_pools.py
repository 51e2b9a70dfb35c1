"""Warm pools on this machine (easylaunch.pools): started, launched into from a user's script
three times with its code changed between, preloaded modules, a killed run, cancels, the idle
end and pool stop."""

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from helpers import batch_runs_under_way, pool_record, run_pids, wait_for, write_settings

from easylaunch import JobState, list_pools, run_experiment, run_sweep, start_pool, stop_pool
from easylaunch.errors import LaunchError


@pytest.fixture
def pool(cfg):
    """A pool of two workers with numpy preloaded; stopped at the end."""
    start_pool("warm", workers=2, preload=["numpy"], idle="10m", config=cfg)
    yield "warm"
    if any(p.name == "warm" for p in list_pools(cfg)):
        stop_pool("warm", cfg)


SCRIPT = """
import json, sys
import helpers_of_mine
from easylaunch import run_sweep

def train(doodad_config, variant):
    import sys
    return {"version": VERSION, "helper": helpers_of_mine.scale(variant["x"]),
            "numpy_was_loaded": "numpy" in sys.modules}

jobs = run_sweep(train, [{"x": 1}, {"x": 2}], mode="local", pool="warm", config=sys.argv[1])
print(json.dumps([job.result(timeout=60) for job in jobs]))
"""


def test_three_sweeps_into_a_pool_each_run_their_own_code(pool, cfg, tmp_path):
    """A researcher's loop: edit the script and the module beside it, launch again. Each
    sweep runs the code as it was at its launch, with numpy already imported by the pool."""
    settings = settings_file(tmp_path)
    folder = tmp_path / "project"
    folder.mkdir()
    outputs = []
    for version in (1, 2, 3):
        (folder / "sweep.py").write_text(f"VERSION = {version}\n" + SCRIPT)
        (folder / "helpers_of_mine.py").write_text(
            f"def scale(x):\n    return x * {10 ** version}\n")
        out = subprocess.run([sys.executable, "sweep.py", str(settings)], cwd=folder,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "added to pool 'warm'" in out.stderr
        outputs.append(json.loads(out.stdout.splitlines()[-1]))
    assert outputs == [[{"version": v, "helper": x * 10 ** v, "numpy_was_loaded": True}
                        for x in (1, 2)] for v in (1, 2, 3)]
    (shown,) = list_pools(settings)
    assert (shown.name, shown.workers, shown.done, shown.busy, shown.queued) == \
        ("warm", 2, 6, 0, 0)


def test_only_the_pools_preloads_are_loaded_before_a_run(cfg):
    start_pool("bare", workers=1, idle="10m", config=cfg)
    try:
        job = run_experiment(jobfns.loaded, variant={"modules": ["numpy"]}, mode="local",
                             pool="bare", config=cfg)
        assert job.result(timeout=60) == {"numpy": False}
    finally:
        stop_pool("bare", cfg)


def test_a_learning_pool_preloads_the_libraries_its_earlier_runs_imported(cfg):
    """learn=True: a library one run imported is loaded before the next run starts. The
    pool records installed libraries only: the test's own module is not among them."""
    pool = start_pool("learning", workers=1, idle="10m", learn=True, config=cfg)
    try:
        first = run_experiment(jobfns.loaded, variant={"modules": ["numpy"],
                                                       "then_import": ["numpy"]},
                               mode="local", pool="learning", config=cfg)
        assert first.result(timeout=60) == {"numpy": False}
        later = run_experiment(jobfns.loaded, variant={"modules": ["numpy"]}, mode="local",
                               pool="learning", config=cfg)
        assert later.result(timeout=60) == {"numpy": True}
    finally:
        stop_pool("learning", cfg)
    recorded = {name for path in Path(pool.folder, "learned").iterdir()
                for name in json.loads(path.read_text())["imported"]}
    assert "numpy" in recorded and "jobfns" not in recorded, recorded


def test_a_killed_run_leaves_its_worker_and_the_pool_going(pool, cfg):
    victim = run_experiment(jobfns.sleep_with_child, mode="local", pool=pool, config=cfg)
    runner, _ = run_pids(victim.log_dir)
    os.kill(runner, signal.SIGKILL)
    assert victim.wait(timeout=60) is JobState.FAILED
    after = run_sweep(jobfns.double, [{"x": i} for i in range(4)], mode="local", pool=pool,
                      config=cfg)
    assert [j.result(timeout=60)["y"] for j in after] == [0, 2, 4, 6]


def test_cancel_one_run_and_a_whole_sweep_in_a_pool(pool, cfg):
    first = run_sweep(jobfns.sleep_with_child, [{}, {}], mode="local", pool=pool, config=cfg)
    waiting = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="local", pool=pool,
                        config=cfg)  # (both workers are busy: these wait)
    pids = run_pids(first[0].log_dir)
    for job in waiting:  # (a sweep that waits for a worker)
        job.cancel()
    assert [j.wait(timeout=60) for j in waiting] == [JobState.CANCELLED] * 2
    first[0].cancel()  # (a run that runs: its processes end)
    assert first[0].wait(timeout=60) is JobState.CANCELLED
    assert wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids), 30)
    assert not any((j.log_dir / "result.pkl").exists() for j in waiting)
    assert first[1].status() is JobState.RUNNING  # (the other run goes on)
    first[1].cancel()
    assert first[1].wait(timeout=60) is JobState.CANCELLED


def test_an_idle_pool_ends_and_a_launch_into_it_is_refused_before_anything_is_made(cfg):
    start_pool("brief", workers=1, idle=1, config=cfg)
    job = run_experiment(jobfns.double, variant={"x": 3}, mode="local", pool="brief",
                         config=cfg)
    assert job.result(timeout=60)["y"] == 6
    assert wait_for(lambda: not list_pools(cfg), 20)
    (ended,) = list_pools(cfg, everything=True)
    assert ended.ended == "no run for 1 s (its idle time)"
    made = sorted(Path(cfg["LOCAL_LOG_DIR"]).glob("*/*/status.json"))
    with pytest.raises(LaunchError, match=r"pool 'brief' has ended: no run for 1 s \(its "
                                          r"idle time\); start it again: easylaunch pool "
                                          r"start brief"):
        run_experiment(jobfns.double, variant={"x": 3}, mode="local", pool="brief", config=cfg)
    assert sorted(Path(cfg["LOCAL_LOG_DIR"]).glob("*/*/status.json")) == made
    with pytest.raises(LaunchError, match=r"no pool named 'brie' on this machine; did you mean "
                                          r"'brief'\?$"):  # (a typo: not started by advice)
        run_experiment(jobfns.double, mode="local", pool="brie", config=cfg)
    with pytest.raises(LaunchError, match=r"no pool named 'other' on this machine; start one: "
                                          r"easylaunch pool start other"):
        run_experiment(jobfns.double, mode="local", pool="other", config=cfg)


def test_pool_stop_cancels_what_runs_and_what_waits(cfg, tmp_path):
    settings = settings_file(tmp_path)
    cli = [sys.executable, "-m", "easylaunch.cli", "pool"]
    out = subprocess.run([*cli, "start", "held", "--workers", "1", "--config", settings],
                         capture_output=True, text=True, check=True)
    assert "pool held: 1 worker; it ends after 20m with no run" in out.stdout
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 300}] * 2, mode="local", pool="held",
                     config=settings)
    assert wait_for(lambda: jobs[0].status() is JobState.RUNNING, 30)
    listed = subprocess.run([*cli, "ls", "--config", settings], capture_output=True,
                            text=True, check=True).stdout
    assert "held\t1\t1\t0\t1\t0\t" in listed, listed  # workers, busy, free, queued, done
    assert listed.rstrip().endswith("\trunning\tthis machine"), listed
    (held,) = json.loads(subprocess.run([*cli, "ls", "--json", "--config", settings],
                                        capture_output=True, text=True,
                                        check=True).stdout)["pools"]
    assert {k: held[k] for k in ("name", "workers", "busy", "free", "queued", "done",
                                 "ended", "where")} == {
        "name": "held", "workers": 1, "busy": 1, "free": 0, "queued": 1, "done": 0,
        "ended": None, "where": "this machine"}, held
    subprocess.run([*cli, "stop", "held", "--config", settings], check=True,
                   capture_output=True)
    assert [j.wait(timeout=60) for j in jobs] == [JobState.CANCELLED] * 2
    refused = subprocess.run([*cli, "stop", "held", "--config", settings],
                             capture_output=True, text=True)
    assert refused.returncode == 1
    assert "pool 'held' has ended: stopped by easylaunch pool stop" in refused.stderr
    none = subprocess.run([*cli, "ls", "--json", "--config", settings], capture_output=True,
                          text=True, check=True)
    assert json.loads(none.stdout) == {"version": 1, "pools": []}
    assert "no pool is running" in none.stderr


def test_a_dry_run_into_a_pool_shows_the_lines_it_would_add(pool, cfg):
    shown = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="local", pool=pool,
                      config=cfg, dry_run=True)
    (lines,) = shown.files.values()
    assert len(lines.splitlines()) == 2 and "appended to pool 'warm'" in shown.commands[0]
    assert not list(Path(cfg["LOCAL_LOG_DIR"]).glob("*/*/status.json"))  # nothing made
    (state,) = list_pools(cfg)
    assert (state.queued, state.done) == (0, 0)


def test_a_second_start_of_a_running_pool_is_refused(pool, cfg):
    with pytest.raises(LaunchError, match="pool 'warm' is running already .* stop it first: "
                                          "easylaunch pool stop warm"):
        start_pool("warm", config=cfg)
    with pytest.raises(LaunchError, match="gpus= on a machine reached over SSH without a "
                                          "scheduler: not yet"):
        start_pool("gpus", gpus=1, cluster="me@workstation", config=cfg)
    with pytest.raises(LaunchError, match=r"gpus=3, but this machine shows only 3, 5 "
                                          r"\(LOCAL_GPU_IDS.*ask fewer"):
        start_pool("gpus", gpus=3, config=dict(cfg, LOCAL_GPU_IDS=["3", "5"]))
    with pytest.raises(LaunchError, match=r"runs_left='jobs' \(--runs-left jobs\) sends runs "
                                          r"left to Slurm or PBS, but this pool is on='local': "
                                          r"add on='slurm' or 'pbs'"):
        start_pool("alone", runs_left="jobs", config=cfg)
    with pytest.raises(LaunchError, match="neither SLURM_JOB_ID nor PBS_JOBID is set: run "
                                          "this inside salloc"):
        start_pool("held", on="allocation", config=cfg)
    assert [p.name for p in list_pools(cfg)] == ["warm"]


def test_a_pool_here_with_gpus_runs_each_worker_on_its_own(cfg):
    """``--gpus 2`` on this machine: a worker on each of its first two GPUs (LOCAL_GPU_IDS
    here: this machine has none), pinned as ``mode="local"`` pins them."""
    gpu_cfg = dict(cfg, LOCAL_GPU_IDS=["3", "5", "7"])
    started = start_pool("gpus", gpus=2, idle="10m", config=gpu_cfg)
    try:
        assert (started.workers, started.gpus) == (2, 2)
        jobs = run_sweep(jobfns.node_facts, [{"n": i, "hold": 1} for i in range(4)],
                         mode="local", pool="gpus", use_gpu=True, config=gpu_cfg)
        facts = [job.result(timeout=60) for job in jobs]
    finally:
        stop_pool("gpus", gpu_cfg)
    # (each run holds its GPU a second: both workers serve, each on its own GPU)
    assert {f["cuda_visible_devices"] for f in facts} == {"3", "5"}, facts
    assert all(f["gpu_id"] == 0 for f in facts), facts


@pytest.mark.parametrize("options, said", [
    (dict(use_gpu=True), "use_gpu=True, but pool 'warm' holds no GPUs: start it with --gpus N"),
    (dict(max_parallel=3), "leave max_parallel out"),
    (dict(detach=False), "a pool's runs outlive the launching script"),
])
def test_what_a_pool_cannot_do_is_refused_at_launch(pool, cfg, options, said):
    with pytest.raises(LaunchError, match=said):
        run_experiment(jobfns.double, variant={"x": 1}, mode="local", pool=pool, config=cfg,
                       **options)


def test_a_mode_with_a_container_refuses_a_pool(pool, cfg):
    with pytest.raises(LaunchError, match="mode 'local_docker' cannot run in a pool"):
        run_experiment(jobfns.double, mode="local_docker", pool=pool, config=cfg)


# -- a pool in a Slurm allocation (the test cluster's debug partition) ------------------------

def test_a_pool_on_slurm_holds_one_allocation_that_takes_each_sweep(slurm_cfg):
    pool = start_pool("nodes", on="slurm", workers=2, preload=["numpy"], idle="10m",
                      time_limit="10m", config=slurm_cfg)
    allocation = pool_record(pool)["job_id"]
    try:
        for _ in range(2):
            jobs = run_sweep(jobfns.node_facts, [{"n": i} for i in range(3)], mode="local",
                             pool="nodes", config=slurm_cfg)
            facts = [j.result(timeout=120) for j in jobs]
            assert {f["host"] for f in facts} <= {"node1", "node2"}, facts
            assert {j.launch_info["backend"]["pool_job"] for j in jobs} == {allocation}
        loaded = run_experiment(jobfns.loaded, variant={"modules": ["numpy"]}, mode="local",
                                pool="nodes", config=slurm_cfg)
        assert loaded.result(timeout=60) == {"numpy": True}
        (shown,) = list_pools(slurm_cfg)
        assert (shown.done, shown.ended) == (7, None)
        assert re.fullmatch(rf"Slurm job {allocation} on node[12], \d+:\d\d left",
                            shown.where), shown.where
    finally:
        stop_pool("nodes", slurm_cfg)
    assert wait_for(lambda: not subprocess.run(
        ["squeue", "-h", "-j", allocation, "-o", "%T"], capture_output=True,
        text=True).stdout.strip(), 60), "the pool's allocation is still queued or running"
    with pytest.raises(LaunchError, match="pool 'nodes' has ended: stopped by easylaunch pool "
                                          "stop"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="local", pool="nodes",
                       config=slurm_cfg)


def _left_when_ended_from_outside(pool, end, label, on, cfg):
    """Two runs into ``pool`` (workers=1), then its allocation ended by the command ``end``:
    the run that ran gets SIGTERM, and the one that waited fails saying what to do. The
    waiting run."""
    allocation = end[-1]
    running, waiting = run_sweep(jobfns.sleep_a_while, [{"seconds": 300}, {"seconds": 1}],
                                 mode="local", pool=pool, config=cfg)
    assert wait_for(lambda: running.status() is JobState.RUNNING, 60)
    subprocess.run(end, check=True)
    assert running.wait(timeout=120) in (JobState.CANCELLED, JobState.FAILED)
    assert waiting.wait(timeout=120) is JobState.FAILED
    assert f"pool '{pool}''s {label} allocation {allocation} ended before this run recorded " \
           f"an outcome (its time limit?); start the pool again (easylaunch pool start {pool} " \
           f"--on {on}), then run it again: easylaunch resubmit {waiting.id}" in \
        waiting.info()["error"]
    return waiting


def test_runs_a_pools_allocation_leaves_behind_end_saying_so(slurm_cfg):
    """The allocation is cancelled from outside (as its time limit would end it): the run
    that ran gets SIGTERM, and the one that waited fails with what to do."""
    pool = start_pool("short", on="slurm", workers=1, idle="10m", time_limit="10m",
                      config=slurm_cfg)
    allocation = pool_record(pool)["job_id"]
    waiting = _left_when_ended_from_outside("short", ["scancel", allocation], "Slurm", "slurm",
                                            slurm_cfg)
    start_pool("short", on="slurm", workers=1, idle="10m", time_limit="10m", config=slurm_cfg)
    try:  # (as the message says)
        from easylaunch import resubmit

        again = resubmit(waiting.id, config=slurm_cfg)
        assert again.result(timeout=120) == "slept"
    finally:
        stop_pool("short", slurm_cfg)


def test_a_pool_on_pbs_takes_sweeps_and_its_runs_end_saying_so_with_its_job(pbs_cfg):
    """A pool whose allocation is a PBS job (qsub; Slurm's PBS front ends here): sweeps run in
    it, pool ls names the job, and a qdel from outside (as its walltime would end it) fails
    the run that waited, saying what to do."""
    pool = start_pool("pbs-pool", on="pbs", workers=1, preload=["numpy"], idle="10m",
                      time_limit="10m", config=pbs_cfg)
    meta = pool_record(pool)
    allocation = meta["job_id"]
    assert meta["scheduler"] == "pbs" and (Path(pool.folder) / "pool.qsub").is_file()
    script = (Path(pool.folder) / "pool.qsub").read_text()
    assert "#PBS -l select=1:ncpus=1:mpiprocs=1\n#PBS -l walltime=00:10:00\n" in script
    try:
        jobs = run_sweep(jobfns.node_facts, [{"n": i} for i in range(2)], mode="local",
                         pool="pbs-pool", config=pbs_cfg)
        facts = [j.result(timeout=120) for j in jobs]
        assert {f["host"] for f in facts} <= {"node1", "node2"}, facts
        assert {j.launch_info["backend"]["pool_job"] for j in jobs} == {allocation}
        (shown,) = list_pools(pbs_cfg)
        assert re.fullmatch(rf"PBS job {allocation} on node[12], 0:(09|10):\d\d left",
                            shown.where), shown.where
        _left_when_ended_from_outside("pbs-pool", ["qdel", allocation], "PBS", "pbs", pbs_cfg)
        (ended,) = list_pools(pbs_cfg, everything=True)
        assert ended.ended is not None and ended.where == f"PBS job {allocation}, ended"
    finally:
        if any(p.name == "pbs-pool" for p in list_pools(pbs_cfg)):
            stop_pool("pbs-pool", pbs_cfg)


POOL_SBATCH = """#!/bin/bash
#SBATCH --job-name="pool-quick"
#SBATCH --output="/logs/.pools/quick/1 st/packer.log"
#SBATCH --time=120
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=4
#SBATCH --signal=B:USR1@120
#SBATCH --partition="gpu"
#SBATCH --gres=gpu:2
#SBATCH --open-mode=append
#SBATCH --requeue
# Generated by easylaunch: the packer of a warm pool.
exec >>'/logs/.pools/quick/1 st/packer.log' 2>&1
exec python3 '/logs/.pools/quick/1 st/job.pyz' pack --gpus granted
"""
POOL_QSUB = """#!/bin/bash
#PBS -N pool-quick
#PBS -l select=1:ncpus=4:ngpus=2:mpiprocs=1
#PBS -l walltime=02:00:00
#PBS -j oe
# Generated by easylaunch: the packer of a warm pool.
export EASYLAUNCH_TIME_LIMIT_AT=$(( $(date +%s) + 7200 ))
exec >>'/logs/.pools/quick/1 st/packer.log' 2>&1
exec python3 '/logs/.pools/quick/1 st/job.pyz' pack --gpus granted --warn-before 120
"""


@pytest.mark.parametrize(("on", "golden", "alone"), [
    ("slurm", POOL_SBATCH, [("=\"pool-quick\"", "=\"pool-quick-run\""),
                            ("cpus-per-task=4", "cpus-per-task=1"), ("gpu:2", "gpu:1")]),
    ("pbs", POOL_QSUB, [("pool-quick", "pool-quick-run"), ("ncpus=4:ngpus=2", "ncpus=1:ngpus=1")]),
])
def test_pool_job_scripts_golden(on, golden, alone):
    """A pool of 4 workers and 2 GPUs for 2 hours: Slurm warns it (--signal) and requeues it;
    on PBS, which warns no one, its packer warns itself 120 s before the walltime. A job of
    its own for a run left (``runs_left="jobs"``) asks one CPU and one GPU, and is warned
    likewise."""
    from easylaunch.modes.local import pool_jobs
    from easylaunch.settings import load_settings

    class NoSinfo:  # (sinfo's check is the cluster tests')
        def run_ops(self, ops):
            return [{"rc": 1}]

    settings = load_settings({"SLURM_CONFIGS": {"gpu": {"partition": "gpu", "n_gpus": 1}}})
    scheduler = pool_jobs.POOL_SCHEDULERS[on]
    res = pool_jobs.asked(settings, NoSinfo(), "quick", scheduler, 4, 2, 7200)
    folder = "/logs/.pools/quick/1 st"
    argv = ["python3", f"{folder}/job.pyz", "pack"]
    assert pool_jobs.job_script(scheduler, res, "pool-quick", folder, argv, settings) == golden
    for was, now in alone:
        golden = golden.replace(was, now)
    assert pool_jobs.job_script(scheduler, pool_jobs.one_run(scheduler, res), "pool-quick-run",
                                folder, argv, settings) == golden


def test_a_pbs_pool_warns_its_runs_before_its_walltime_and_goes_on_in_a_new_job(pbs_cfg):
    """PBS warns no one before the walltime, so the pool's packer does, PBS_SIGNAL_SECONDS
    before it (15 s into each 1-minute job here). Both runs save at the warning and finish
    from their checkpoints in the job the pool submitted again; pool ls shows that job and
    its time left."""
    pbs_cfg["PBS_SIGNAL_SECONDS"] = 45
    pool = start_pool("pbs-going", on="pbs", workers=2, idle="10m", time_limit="1m",
                      config=pbs_cfg)
    first = pool_record(pool)["job_id"]
    script = Path(pool.folder, "pool.qsub").read_text()
    assert "\nexport EASYLAUNCH_TIME_LIMIT_AT=$(( $(date +%s) + 60 ))\n" in script
    assert script.endswith(" --warn-before 45\n"), script
    try:
        jobs = run_sweep(jobfns.count_steps, [{"steps": 80, "every": 1000,
                                               "step_seconds": 0.25}] * 2,
                         mode="local", pool="pbs-going", max_restarts=2, config=pbs_cfg)
        results = [j.result(timeout=180) for j in jobs]
        for job, result in zip(jobs, results, strict=True):
            assert [r["reason"] for r in job.info()["restarts"]] == ["time limit"]
            stopped_at = max(s for a, s in jobfns.steps_done(job.log_dir) if a == 1)
            assert (result["steps"], result["resumed_from"]) == (80, stopped_at)
        (shown,) = list_pools(pbs_cfg)
        now = pool_record(pool)
        assert now["job_id"] != first and now["earlier_jobs"] == [first]
        assert re.fullmatch(rf"PBS job {now['job_id']} on node[12], 0:00:[0-5]\d left",
                            shown.where), shown.where
    finally:
        stop_pool("pbs-going", pbs_cfg)


@pytest.mark.parametrize("on", ["slurm", "pbs"])
def test_a_pool_warned_at_once_is_refused_before_anything_is_made(slurm_cfg, pbs_cfg, on):
    """A time-limit warning as long as the time limit would stop the pool as it starts."""
    key = f"{on.upper()}_SIGNAL_SECONDS"
    cfg = dict(pbs_cfg if on == "pbs" else slurm_cfg, **{key: 60})
    with pytest.raises(LaunchError, match=rf"pool 'soon': {key}=60 is not shorter than its "
                       r"time limit \(1 min\), so the warning would come at once; raise "
                       rf"time_limit= or lower {key} \(0: no warning\)"):
        start_pool("soon", on=on, time_limit="1m", config=cfg)
    assert not list_pools(cfg, everything=True)


def test_a_pool_at_its_time_limit_goes_on_in_a_new_allocation_with_its_runs(slurm_cfg):
    """The time limit's warning (SIGUSR1) stops the pool's allocation: the run that ran saves,
    and goes on from its checkpoint with the one that waited, in the allocation the pool
    submitted again; the pool takes the next launch there."""
    pool = start_pool("going", on="slurm", workers=1, idle="10m", time_limit="10m",
                      config=slurm_cfg)
    first = pool_record(pool)["job_id"]
    try:
        jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2}] * 2,
                         mode="local", pool="going", max_restarts=2, config=slurm_cfg)
        batch_runs_under_way(jobs, count=1)
        subprocess.run(["scancel", "--batch", "--signal=USR1", first], check=True)
        assert [j.result(timeout=180)["steps"] for j in jobs] == [30, 30]
        assert [r["reason"] for r in jobs[0].info()["restarts"]] == ["time limit"]
        attempts = {attempt for attempt, _ in jobfns.steps_done(
            jobs[0].launch_info["backend"]["job_log_dir"])}
        assert attempts == {1, 2}, attempts  # (the second went on from the checkpoint)
        (shown,) = list_pools(slurm_cfg)
        assert shown.ended is None and f"Slurm job {first} " not in shown.where, shown
        later = run_experiment(jobfns.double, variant={"x": 2}, mode="local", pool="going",
                               config=slurm_cfg)
        assert later.result(timeout=60) == {"x": 2, "y": 4}
        assert later.launch_info["backend"]["pool_job"] != first
    finally:
        stop_pool("going", slurm_cfg)


@pytest.mark.parametrize("on", ["slurm", "pbs"])
def test_runs_left_at_the_time_limit_go_on_each_in_a_job_of_its_own(request, on):
    """``runs_left="jobs"``: at the time limit's warning the pool ends, and each run left goes
    on in a job of its own (one CPU), the one that ran from its checkpoint. At that job's own
    warning, its run goes on in another, alone: the other runs stay where they are. (The
    warnings are sent by hand: Slurm's PBS front ends run PBS jobs as Slurm jobs.)"""
    cfg = request.getfixturevalue(f"{on}_cfg")
    pool = start_pool("alone", on=on, workers=1, idle="10m", time_limit="10m",
                      runs_left="jobs", config=cfg)
    first = pool_record(pool)["job_id"]
    try:
        jobs = run_sweep(jobfns.count_steps, [{"steps": 40, "every": 5, "step_seconds": 0.2}] * 2,
                         mode="local", pool="alone", max_restarts=2, config=cfg)
        waiting = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, mode="local",
                                 pool="alone", config=cfg)
        (saves, _) = batch_runs_under_way(jobs, count=1)
        subprocess.run(["scancel", "--batch", "--signal=USR1", first], check=True)
        assert wait_for(lambda: all(j.status() is JobState.RUNNING for j in [*jobs, waiting])
                        and 2 in {a for a, _ in jobfns.steps_done(saves)}, 90)
        own = [j.info()["next_job_id"] for j in [*jobs, waiting]]
        subprocess.run(["scancel", "--batch", "--signal=USR1", own[0]], check=True)
        assert [j.result(timeout=180)["steps"] for j in jobs] == [40, 40]
        # (a run in a job of its own is cancelled as any run of the pool, and its job ends)
        waiting.cancel()
        assert waiting.wait(timeout=60) is JobState.CANCELLED
        gone = waiting.info()["next_job_id"]
        assert wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", gone],
                                                   capture_output=True, text=True).stdout, 60)
    finally:
        if any(p.name == "alone" for p in list_pools(cfg)):
            stop_pool("alone", cfg)
    assert [r["reason"] for r in jobs[0].info()["restarts"]] == ["time limit"] * 2
    attempts = {a for a, _ in jobfns.steps_done(saves)}
    assert attempts == {1, 2, 3}, attempts  # (each went on from the last checkpoint)
    again = jobs[0].info()["next_job_id"]
    assert len({first, *own, again}) == 5, (own, again)  # (a job each)
    assert [j.info()["next_job_id"] for j in [jobs[1], waiting]] == own[1:]  # (left alone)
    asked = subprocess.run(["sacct", "-n", "-X", "-P", "-j", ",".join([*own, again]), "-o",
                            "JobName,AllocCPUS"], capture_output=True, text=True,
                           check=True).stdout.split()
    assert asked == ["pool-alone-run|1"] * 4, asked
    (shown,) = list_pools(cfg, everything=True)
    assert shown.ended == (f"its time limit came; its 3 run(s) left went on each in a "
                           f"{'PBS' if on == 'pbs' else 'Slurm'} job of its own: "
                           f"{', '.join(own)}"), shown.ended
    with pytest.raises(LaunchError, match="pool 'alone' has ended"):
        run_experiment(jobfns.double, mode="local", pool="alone", config=cfg)


def test_a_preempted_pool_goes_on_in_its_requeued_job_with_its_runs(slurm_cfg):
    """The pool holds node4's four CPUs in the preemptible partition; a job of the cpu
    partition asks for them. Slurm sends the pool SIGTERM (its runs save), requeues its job,
    and starts it again once node4 is free: the pool takes up the runs left, and the next
    launch."""
    from jobfns import steps_done

    slurm_cfg["SLURM_CONFIGS"]["cpu"].update(partition="preempt",
                                             extra_flags="--nodelist=node4")
    pool = start_pool("preempted", on="slurm", workers=4, idle="10m", time_limit="10m",
                      config=slurm_cfg)
    allocation = pool_record(pool)["job_id"]
    try:
        jobs = run_sweep(jobfns.count_steps, [{"steps": 160, "every": 1000,
                                               "step_seconds": 0.25}] * 2,
                         mode="local", pool="preempted", max_restarts=2, config=slurm_cfg)
        assert wait_for(lambda: all(len(steps_done(j.log_dir)) >= 3 for j in jobs), 60)
        urgent = subprocess.run(["sbatch", "--parsable", "--partition=cpu", "--nodelist=node4",
                                 "--cpus-per-task=4", "--output=/dev/null", "--wrap=sleep 2"],
                                capture_output=True, text=True, check=True).stdout.strip()
        try:
            results = [j.result(timeout=240) for j in jobs]
        finally:
            subprocess.run(["scancel", urgent])
        for job, result in zip(jobs, results, strict=True):
            # (another worker's job that needs node4, a GPU test's, may preempt it again)
            reasons = [r["reason"] for r in job.info()["restarts"]]
            assert reasons and set(reasons) == {"preempted"}, reasons
            stopped_at = max(s for a, s in steps_done(job.log_dir) if a == len(reasons))
            assert (result["steps"], result["resumed_from"], result["attempt"]) == \
                (160, stopped_at, len(reasons) + 1)
        (shown,) = list_pools(slurm_cfg)
        assert shown.ended is None and f"Slurm job {allocation} on node4" in shown.where
        later = run_experiment(jobfns.double, variant={"x": 3}, mode="local",
                               pool="preempted", config=slurm_cfg)
        assert later.result(timeout=60) == {"x": 3, "y": 6}
    finally:
        stop_pool("preempted", slurm_cfg)


def test_a_search_runs_its_trials_in_a_pool(pool, cfg):
    """Each trial is a run the pool takes as soon as one of its workers is free."""
    import searchfns

    from easylaunch import run_search

    search = run_search(searchfns.curve, {"x": [0.1, 0.3, 0.9], "opt": "adam", "steps": 3},
                        "loss", n_trials=5, sampler="random", pruner=None, seed=1,
                        mode="local", pool=pool, config=cfg)
    assert search.summary()["counts"] == {"complete": 5}, search
    (shown,) = list_pools(cfg)
    assert shown.done == 5


def test_commands_run_as_runs_in_a_pool(pool, cfg):
    """run_command and run_commands with pool=: each command is a run the pool takes; its
    exit code and output are the run's."""
    from easylaunch import run_command, run_commands

    ok = run_command("python -c 'print(6 * 7)'", mode="local", pool=pool, config=cfg)
    failing = run_commands(["sh -c 'echo no >&2; exit 3'", "true"], mode="local",
                           pool=pool, config=cfg)
    assert ok.wait(timeout=60) is JobState.SUCCEEDED
    assert (ok.log_dir / "stdout.log").read_text() == "42\n"
    assert [j.wait(timeout=60) for j in failing] == [JobState.FAILED, JobState.SUCCEEDED]
    assert failing[0].info()["exit_code"] == 3
    (shown,) = list_pools(cfg)
    assert shown.done == 3


def test_a_slurm_pool_its_partition_cannot_hold_is_refused_before_anything_is_made(slurm_cfg):
    with pytest.raises(LaunchError, match=r"pool 'long' cannot have its allocation of 1 CPUs, "
                                          r"0 GPUs and 480 minutes \(.*partition 'debug' allows "
                                          r"at most 60.*\); ask less with workers=, gpus= or "
                                          r"time_limit="):
        start_pool("long", on="slurm", time_limit="8h", config=slurm_cfg)
    assert not (Path(slurm_cfg["LOCAL_LOG_DIR"]) / ".pools").exists()


INSIDE_ALLOCATION = """
import json, os, sys
import jobfns
from easylaunch import run_sweep, start_pool, stop_pool
started = start_pool("inside", on="allocation", workers=2, gpus=int(sys.argv[2]),
                     idle="10m", config=sys.argv[1])
try:
    jobs = run_sweep(jobfns.node_facts, [{"n": i, "hold": 1} for i in range(4)], mode="local",
                     pool="inside", use_gpu=bool(int(sys.argv[2])), config=sys.argv[1])
    facts = [job.result(timeout=120) for job in jobs]
finally:
    stop_pool("inside", sys.argv[1])
job = os.environ.get("SLURM_JOB_ID") or os.environ["PBS_JOBID"]
print(json.dumps({"job": job, "facts": facts, "where": started.where}))
"""


@pytest.mark.parametrize("gpus", [0, 2])
def test_a_pool_in_the_allocation_a_user_holds_submits_no_job(slurm_cfg, tmp_path, gpus):
    """Inside salloc, the pool is a job step of the allocation: its runs run on the
    allocation's node (with GPUs, each worker on one of the GPUs Slurm granted)."""
    settings = write_settings(tmp_path / "settings.py", slurm_cfg)
    script = tmp_path / "inside.py"
    script.write_text(INSIDE_ALLOCATION)
    ask = ["-p", "gpu", f"--gres=gpu:{gpus}"] if gpus else ["-p", "debug"]
    out = subprocess.run(["salloc", "-N1", "-c", "2", "-t", "10", *ask, sys.executable,
                          str(script), str(settings), str(gpus)],
                         capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(Path(jobfns.__file__).parent)))
    assert out.returncode == 0, out.stderr
    said = json.loads(out.stdout.splitlines()[-1])
    node = subprocess.run(["sacct", "-n", "-X", "-j", said["job"], "-o", "NodeList%20"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert {f["host"] for f in said["facts"]} == {node}, (node, said)
    assert said["where"] == f"inside Slurm job {said['job']}"
    jobs_of_the_test = subprocess.run(["sacct", "-n", "-X", "-S", "now-5minutes", "-o",
                                       "JobName%30"], capture_output=True, text=True).stdout
    assert "pool-inside" not in jobs_of_the_test  # (no job of its own)
    if gpus:  # (Slurm set CUDA_VISIBLE_DEVICES=0,1 for the step; a worker on each, and the
        # runs hold theirs a while, so both serve)
        assert {f["cuda_visible_devices"] for f in said["facts"]} == {"0", "1"}, said
        assert all(f["gpu_id"] == 0 for f in said["facts"]), said


def test_a_pool_in_a_pbs_job_a_user_holds_runs_on_its_node(pbs_cfg, tmp_path):
    """Inside a PBS job (PBS_JOBID set, no SLURM_JOB_ID, as on PBS Pro), the pool's packer
    runs in the job itself, on its node: no job is submitted."""
    settings = write_settings(tmp_path / "settings.py", pbs_cfg)
    (tmp_path / "inside.py").write_text(INSIDE_ALLOCATION)
    said = tmp_path / "said.txt"
    (tmp_path / "job.sh").write_text(
        "#!/bin/bash\n#PBS -l select=1:ncpus=2\n#PBS -l walltime=00:10:00\n"
        # (as PBS Pro sets them: Slurm's PBS front ends give Slurm's variables instead)
        "export PBS_JOBID=$SLURM_JOB_ID.server; unset SLURM_JOB_ID SLURM_JOBID\n"
        f"export PYTHONPATH={Path(jobfns.__file__).parent}\n"
        f"exec {sys.executable} {tmp_path}/inside.py {settings} 0 > {said} 2>&1\n")
    job = subprocess.run(["qsub", "job.sh"], cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout.strip()
    assert wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", job], capture_output=True,
                                               text=True).stdout.strip(), 180)
    out = json.loads(said.read_text().splitlines()[-1])
    assert out["job"].split(".")[0] == job.split(".")[0]
    assert out["where"] == f"inside PBS job {out['job']}"
    assert len({f["host"] for f in out["facts"]}) == 1, out  # (the job's node)
    assert "pool-inside" not in subprocess.run(
        ["squeue", "-h", "-o", "%j"], capture_output=True, text=True).stdout


def test_a_pool_on_the_cluster_from_a_laptop_takes_sweeps_over_ssh(remote_cfg):
    """The pool's folder is in the cluster's log_dir (user easyremote's home), reached over
    SSH: start, launch, follow, list and stop, each a round trip."""
    pool = start_pool("far", on="slurm", workers=2, idle="10m", time_limit="10m",
                      cluster="test", config=remote_cfg)
    assert pool.folder.startswith("/home/easyremote/runs/")
    try:
        jobs = run_sweep(jobfns.node_facts, [{"n": i} for i in range(3)], pool="far",
                         cluster="test", config=remote_cfg)
        facts = [j.result(timeout=120) for j in jobs]
        assert {f["host"] for f in facts} <= {"node1", "node2"}, facts
        waiting = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, pool="far",
                                 cluster="test", config=remote_cfg)
        assert wait_for(lambda: waiting.status() is JobState.RUNNING, 60)
        waiting.cancel()
        assert waiting.wait(timeout=60) is JobState.CANCELLED
        (shown,) = list_pools(remote_cfg, cluster="test")
        assert (shown.done, shown.busy) == (4, 0) and shown.where.startswith("Slurm job")
    finally:
        stop_pool("far", remote_cfg, cluster="test")
    assert list_pools(remote_cfg, cluster="test") == []
    with pytest.raises(LaunchError, match="takes cluster= only with pool="):
        run_experiment(jobfns.double, cluster="test", config=remote_cfg)


def test_a_pool_on_a_machine_without_a_scheduler_reached_over_ssh(remote_cfg):
    """on='local' with cluster=: the packer runs on that machine (here as user easyremote,
    over SSH), no scheduler involved; sweeps, ls and stop go there."""
    pool = start_pool("host", workers=2, idle="10m", cluster="test", config=remote_cfg)
    assert pool.folder.startswith("/home/easyremote/runs/") and pool.workers == 2
    try:
        jobs = run_sweep(jobfns.whoami, [{"n": i} for i in range(3)], pool="host",
                         cluster="test", config=remote_cfg)
        assert [j.result(timeout=120) for j in jobs] == ["easyremote"] * 3
        (shown,) = list_pools(remote_cfg, cluster="test")
        assert (shown.done, shown.ended) == (3, None)
        assert "job" not in shown.where, shown.where  # (its machine, no scheduler's job)
    finally:
        stop_pool("host", remote_cfg, cluster="test")
    assert list_pools(remote_cfg, cluster="test") == []
