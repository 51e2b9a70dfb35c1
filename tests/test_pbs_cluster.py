"""The pbs mode's job scripts run end to end through qsub/qstat/qdel: Slurm's PBS front ends
(Debian's slurm-wlm-torque) over the test cluster. No PBS Pro server can run here;
what those front ends lack (qstat -x -F json, PBS_ARRAY_INDEX, PBS_NODEFILE, max_array_size,
mpiexec's PALS options) is covered by tests/test_pbs_scripts.py only. (Cancelling one element
of a running array: test_slurm_cluster.py, for both modes.)"""

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import jobfns
import pytest
from conftest import pbs_settings
from helpers import batch_runs_under_way, copy_to_cluster, run_pids, wait_for

from easylaunch import JobState, LaunchError, run_experiment, run_sweep


def test_a_sweep_is_one_job_array(pbs_cfg):
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="pbs", config=pbs_cfg)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    backends = [j.launch_info["backend"] for j in jobs]
    array = backends[0]["array_job_id"]
    assert [b["pbs_job_id"] for b in backends] == [f"{array}[{i}]" for i in (1, 2, 3)]
    script = Path(backends[0]["script"]).read_text()
    assert "#PBS -J 1-3\n" in script and "#PBS -l select=1:ncpus=1:mpiprocs=1\n" in script
    # each element ran as its own job, recorded by the run itself
    assert len({j.info()["job_id"] for j in jobs}) == 3


def test_a_run_that_never_started_is_settled_by_qstat(pbs_cfg, tmp_path):
    venv = tmp_path / "venv"  # this venv, there at launch (the preflight asks it), not after
    venv.symlink_to(Path(sys.executable).parent.parent)
    python = venv / "bin" / "python"
    pbs_cfg["PBS_PYTHON"] = str(python)
    job = run_experiment(jobfns.train, mode="pbs", config=pbs_cfg)
    venv.unlink()
    assert "[" not in job.launch_info["backend"]["pbs_job_id"]  # one run: a plain job
    assert job.wait(timeout=120) is JobState.FAILED
    error = job.info()["error"]
    assert re.search(r"PBS job \d+ ended without the run recording an outcome; see .*stderr.log",
                     error), error
    assert str(python) in (job.log_dir / "stderr.log").read_text()


def test_an_element_cancelled_before_it_started_never_runs(pbs_cfg):
    jobs = run_sweep(jobfns.sleep_with_child, [{}, {}], mode="pbs", config=pbs_cfg,
                     array_parallelism=1)
    assert "#PBS -J 1-2%1\n" in Path(jobs[0].launch_info["backend"]["script"]).read_text()
    run_pids(jobs[0].log_dir)
    assert jobs[1].status() is JobState.QUEUED
    jobs[1].cancel()
    assert jobs[1].wait(timeout=60) is JobState.CANCELLED
    jobs[0].cancel()
    assert jobs[0].wait(timeout=60) is JobState.CANCELLED
    # the second element starts once the first is gone, and ends at once without running
    stderr = jobs[1].log_dir / "stderr.log"
    assert wait_for(lambda: stderr.exists() and "not starting" in stderr.read_text(), 60)
    assert not (jobs[1].log_dir / "pids").exists()
    assert jobs[1].status() is JobState.CANCELLED


def test_qsub_refusing_leaves_nothing_submitted(pbs_cfg, exp):
    pbs_cfg["PBS_CONFIGS"]["cpu"]["queue"] = "nosuchqueue"
    with pytest.raises(LaunchError, match="(?s)qsub refused .*[Ii]nvalid partition"):
        run_sweep(jobfns.train, [{}, {}], exp_name=exp, mode="pbs", config=pbs_cfg)
    names = subprocess.run(["squeue", "-h", "--states=all", "-o", "%j"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert not [name for name in names if exp in name]  # (other tests' jobs run beside it)


def test_walltime_is_recorded_as_timeout(cfg, pbs_front_end):
    job = run_experiment(jobfns.sleep_with_child, mode="pbs", config=pbs_settings(cfg, 1))
    assert job.wait(timeout=200) is JobState.TIMEOUT
    info = job.info()
    assert info["signal"] == "SIGTERM" and "the time limit is reached" in info["error"]


def test_a_preempted_array_element_is_submitted_again_for_its_own_entry(pbs_cfg):
    from jobfns import steps_done

    jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2,
                                           "tag": i} for i in range(2)],
                     mode="pbs", max_restarts=1, config=pbs_cfg)
    second = jobs[1]
    assert wait_for(lambda: len(steps_done(second.log_dir)) >= 8, timeout=120)
    info = second.info()
    element = info["job_id"]
    os.kill(info["pid"], signal.SIGTERM)  # (Slurm's PBS front ends cannot name one element)
    results = [j.result(timeout=120) for j in jobs]
    assert [r["steps"] for r in results] == [30, 30]
    assert "restarts" not in jobs[0].info()
    info = second.info()
    assert [r["reason"] for r in info["restarts"]] == ["preempted"]
    assert info["job_id"] == info["next_job_id"] != element and "[" not in info["job_id"]
    assert results[1]["attempt"] == 2 and results[1]["resumed_from"] >= 8
    assert "not starting" not in second.stderr_path.read_text()  # one job, not an array again


def test_cli_lists_cancels_and_resubmits_pbs_runs(pbs_cfg, tmp_path):
    settings = tmp_path / "settings.py"
    settings.write_text("".join(f"{k} = {v!r}\n" for k, v in pbs_cfg.items()))
    jobs = run_sweep(jobfns.sleep_with_child, [{}, {}], mode="pbs", config=str(settings))
    run_pids(jobs[0].log_dir)
    cli = [sys.executable, "-m", "easylaunch.cli", "--config", str(settings)]
    listed = subprocess.run(cli + ["ls", "--mode", "pbs"], capture_output=True, text=True,
                            check=True).stdout
    assert jobs[0].id in listed and "running" in listed
    status = subprocess.run(cli + ["status", jobs[0].id], capture_output=True, text=True,
                            check=True).stdout
    assert jobs[0].launch_info["backend"]["pbs_job_id"] in status
    for job in jobs:
        out = subprocess.run(cli + ["cancel", job.id], capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == f"{job.id}: cancelled", out
    out = subprocess.run(cli + ["resubmit", jobs[1].id], capture_output=True, text=True,
                         check=True).stdout
    again = re.search(r" as ([0-9a-f]+): ", out).group(1)
    assert subprocess.run(cli + ["cancel", again], capture_output=True, text=True,
                          check=True).stdout.strip() == f"{again}: cancelled"


def _htp_settings(pbs_cfg: dict, tmp_path: Path, ncpus: int) -> dict:
    """pbs_htp batches written for the "cluster" folders in tmp_path (submitted there)."""
    return dict(pbs_cfg, SSS_SUBMIT=False,
                PBS_CONFIGS=dict(cpu=dict(select=1, ncpus=ncpus, walltime=10)),
                SLURM_DIRECTORY_FOR_JOB_SCRIPT=str(tmp_path / "cluster/batches"),
                SSS_LOG_DIR=str(tmp_path / "cluster/logs"), SSS_SCRIPT_PATH=None)


def test_pbs_htp_packs_a_sweep_into_allocations_that_share_its_task_file(pbs_cfg, tmp_path):
    # (runs of 4 s: one allocation alone would take 16 s, so the other, started within them
    # even on a busy machine, takes runs too)
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 4}] * 4, mode="pbs_htp",
                     allocations=2, config=_htp_settings(pbs_cfg, tmp_path, ncpus=1))
    cluster = Path(copy_to_cluster(jobs[0]))
    script = (cluster / "htp.pbs").read_text()
    assert "#PBS -l select=1:ncpus=1:mpiprocs=1\n" in script and "#PBS -J 1-2\n" in script
    assert script.splitlines()[-1].endswith(" --workers 1 --runs "
                                            f"{cluster}/runs.tsv --warm --shared")
    out = subprocess.run(["bash", f"{cluster}/submit.sh"], capture_output=True, text=True,
                         check=True).stdout
    assert re.fullmatch(r"submitted (\w+, ){3}\w+ as PBS job \S+\n", out), out
    assert [j.wait(timeout=120) for j in jobs] == [JobState.SUCCEEDED] * 4
    assert [j.result() for j in jobs] == ["slept"] * 4
    assert len({j.info()["job_id"] for j in jobs}) == 2  # both allocations took runs
    assert len(list((cluster / "task-state").glob("claims-*/task-*"))) == 4  # each once


def test_a_stopped_pbs_htp_allocation_goes_on_in_a_new_one(pbs_cfg, tmp_path):
    """Two workers, three runs, max_restarts: a SIGTERM before the walltime (a preemption)
    reaches both running runs, which save; the packer submits its script again with qsub for
    them and the run never started, which all end there."""
    jobs = run_sweep(jobfns.count_steps, [{"steps": 30, "every": 5, "step_seconds": 0.2}] * 3,
                     mode="pbs_htp", max_restarts=2,
                     config=_htp_settings(pbs_cfg, tmp_path, ncpus=2))
    cluster = Path(copy_to_cluster(jobs[0]))
    assert "--resubmit " f"{cluster}/htp.pbs --scheduler pbs" in (
        cluster / "htp.pbs").read_text()
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True)
    batch_runs_under_way(jobs)
    allocation = jobs[0].info()["job_id"]
    subprocess.run(["scancel", "--batch", "--signal=TERM", allocation], check=True)
    results = [j.result(timeout=180) for j in jobs]
    assert [r["steps"] for r in results] == [30] * 3
    stopped = [j for j in jobs if j.info().get("restarts")]
    assert len(stopped) == 2
    for job in stopped:
        assert [r["reason"] for r in job.info()["restarts"]] == ["preempted"]
        assert results[jobs.index(job)]["resumed_from"] > 0
    going_on = {j.info()["next_job_id"] for j in stopped}
    assert len(going_on) == 1 and going_on != {allocation}
    assert {j.info()["job_id"] for j in jobs} == going_on  # the untaken run ran there too
    assert list(cluster.glob("htp.pbs.o*"))  # (qsub ran in the batch folder)
