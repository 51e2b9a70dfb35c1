"""Real jobs in the test cluster's default partition (scripts/slurm-up.sh)."""

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import jobfns
import pytest
from helpers import (
    alive,
    copy_to_cluster,
    holding_the_default_partition,
    run_pids,
    wait_for,
)

from easylaunch import JobState, LaunchError, run_experiment, run_sweep, wait_all
from easylaunch.modes.schedulers import slurm

TESTS_DIR = Path(__file__).resolve().parent


def test_a_sweep_is_one_job_array(slurm_cfg, capsys):
    jobs = run_sweep(jobfns.train, [dict(learning_rate=i) for i in range(4)], mode="slurm",
                     exp_name="arr", config=slurm_cfg)
    ids = [j.launch_info["backend"]["slurm_job_id"] for j in jobs]
    array = ids[0].split("_")[0]
    assert ids == [f"{array}_{i}" for i in range(4)]
    sweep = jobs[0].launch_info["sweep_id"]
    said = (f"easylaunch slurm: 4 runs of arr submitted as Slurm job {array} (an array of 4); "
            f"folders in {jobs[0].log_dir.parent}; follow: easylaunch ls --sweep {sweep}\n")
    assert said in capsys.readouterr().err
    assert [j.result(timeout=120)["lr"] for j in jobs] == [0, 1, 2, 3]
    assert all(j.info()["host"] for j in jobs)


def test_a_launch_sets_its_own_partition_memory_and_time(slurm_cfg):
    job = run_experiment(jobfns.sleep_a_while, variant={"seconds": 30}, mode="slurm",
                         config=slurm_cfg, partition="debug", mem="200M", time_in_mins="0:03:00")
    try:
        shown = subprocess.run(["scontrol", "show", "job", job.launch_info["backend"]
                                ["slurm_job_id"]], capture_output=True, text=True).stdout
        assert "Partition=debug" in shown and "TimeLimit=00:03:00" in shown, shown
        assert "MinMemoryNode=200M" in shown, shown
    finally:
        job.cancel()


def test_status_says_why_a_queued_run_waits(slurm_cfg, tmp_path):
    blocker = subprocess.run(holding_the_default_partition(120), capture_output=True, text=True,
                             check=True).stdout.strip()
    assert wait_for(lambda: subprocess.run(["squeue", "-h", "-o", "%T", "-j", blocker],
                                           capture_output=True, text=True).stdout.strip()
                    == "RUNNING", 60)
    job = run_experiment(jobfns.train, mode="slurm", config=slurm_cfg)
    try:
        settings = tmp_path / "settings.py"
        settings.write_text(f"LOCAL_LOG_DIR = {slurm_cfg['LOCAL_LOG_DIR']!r}\n")

        def shown() -> str:
            return subprocess.run([sys.executable, "-m", "easylaunch.cli", "status", job.id,
                                   "--config", str(settings)], capture_output=True, text=True,
                                  check=True).stdout

        # (until slurmctld's next pass has looked at the new job, its reason is "None")
        assert wait_for(lambda: re.search(r"waiting for:\s+(Resources|Priority)", shown()), 30)
        assert "state:            queued" in shown()
    finally:
        subprocess.run(["scancel", blocker])
        job.cancel()


def test_a_cancel_that_meets_a_busy_controller_is_asked_again(slurm_cfg, tmp_path,
                                                             monkeypatch):
    """scancel fails once as a busy slurmctld makes it fail; the cancel still lands."""
    flaky = tmp_path / "flaky"
    flaky.mkdir()
    (flaky / "scancel").write_text(
        "#!/bin/sh\necho call >> \"$0.calls\"\n"
        "if [ $(wc -l < \"$0.calls\") -eq 1 ]; then\n"
        "  echo 'scancel: error: Socket timed out on send/recv operation' >&2; exit 1\nfi\n"
        f"exec {shutil.which('scancel')} \"$@\"\n")
    (flaky / "scancel").chmod(0o755)
    job = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, mode="slurm",
                         config=slurm_cfg)
    assert wait_for(lambda: job.status() is JobState.RUNNING, 60)
    monkeypatch.setenv("PATH", f"{flaky}:{os.environ['PATH']}")
    job.cancel()
    assert job.wait(timeout=60) is JobState.CANCELLED
    assert (flaky / "scancel.calls").read_text().count("call") == 2


def test_arrays_are_split_at_max_array_size(slurm_cfg, monkeypatch):
    monkeypatch.setattr(slurm, "max_array_size", lambda _: 3)
    jobs = run_sweep(jobfns.train, [dict(learning_rate=i) for i in range(5)], mode="slurm",
                     config=slurm_cfg)
    arrays = [j.launch_info["backend"]["array_job_id"] for j in jobs]
    assert len(set(arrays)) == 3
    assert [j.launch_info["backend"]["array_index"] for j in jobs] == [0, 1, 0, 1, 0]
    assert [j.result(timeout=120)["lr"] for j in jobs] == list(range(5))


def test_array_parallelism_caps_concurrency(slurm_cfg):
    jobs = run_sweep(jobfns.interval, [dict(seconds=1.0)] * 3, mode="slurm", config=slurm_cfg,
                     array_parallelism=1)
    assert "#SBATCH --array=0-2%1" in Path(jobs[0].launch_info["backend"]["script"]).read_text()
    spans = sorted(j.result(timeout=120) for j in jobs)
    assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:], strict=False))


def test_failure_is_recorded_with_its_traceback(slurm_cfg):
    job = run_experiment(jobfns.fail, mode="slurm", variant={"learning_rate": 5},
                         config=slurm_cfg)
    assert job.wait(timeout=120) is JobState.FAILED
    assert "ValueError: bad learning rate 5" in job.info()["error"]
    assert "ValueError" in job.stderr_path.read_text()
    with pytest.raises(ValueError):
        job.result()


@pytest.mark.parametrize("mode", ["slurm", "pbs"])
def test_cancel_ends_one_array_task_not_the_array(mode, request):
    settings = request.getfixturevalue(f"{mode}_cfg")
    jobs = run_sweep(jobfns.sleep_with_child, [{}, {}], mode=mode, config=settings)
    pids = [run_pids(j.log_dir) for j in jobs]
    jobs[0].cancel()
    assert jobs[0].wait(timeout=60) is JobState.CANCELLED
    assert wait_for(lambda: not any(alive(p) for p in pids[0]))
    assert jobs[1].status() is JobState.RUNNING and all(alive(p) for p in pids[1])
    jobs[1].cancel()
    assert jobs[1].wait(timeout=60) is JobState.CANCELLED


def test_a_job_cancelled_before_it_started_still_ends(slurm_cfg):
    jobs = run_sweep(jobfns.sleep_with_child, [{}, {}], mode="slurm", config=slurm_cfg,
                     array_parallelism=1)
    run_pids(jobs[0].log_dir)
    assert jobs[1].status() is JobState.QUEUED
    jobs[1].cancel()
    assert jobs[1].wait(timeout=60) is JobState.CANCELLED
    assert "pid" not in jobs[1].info()
    jobs[0].cancel()
    assert jobs[0].wait(timeout=60) is JobState.CANCELLED


def test_a_job_slurm_has_forgotten_reaches_a_terminal_state(slurm_cfg):
    job = run_experiment(jobfns.train, mode="slurm", config=slurm_cfg)
    job.wait(timeout=120)
    lost = run_experiment(jobfns.sleep_with_child, mode="slurm", config=slurm_cfg)
    lost.mode.cancel(lost)
    lost_launch = lost.launch_info
    # A job that had started records "cancelled" as it ends: wait for that, then forge.
    cancelled = lost_launch["backend"]["slurm_job_id"]
    assert wait_for(lambda: not subprocess.run(["squeue", "-h", "-j", cancelled],
                                               capture_output=True, text=True).stdout.strip(),
                    60), f"Slurm job {cancelled} outlived its scancel"
    lost_launch["backend"]["slurm_job_id"] = "99999999_0"  # a job squeue never heard of
    (lost.log_dir / "launch.json").write_text(json.dumps(lost_launch))
    (lost.log_dir / "status.json").write_text('{"state": "queued"}')
    assert lost.wait(timeout=30) is JobState.FAILED
    assert "Slurm no longer knows job 99999999_0" in lost.info()["error"]


def test_time_limit_is_recorded_as_timeout(slurm_cfg):
    slurm_cfg["SLURM_CONFIGS"]["cpu"]["time_in_mins"] = 1
    slurm_cfg["SLURM_SIGNAL_SECONDS"] = 50
    job = run_experiment(jobfns.sleep_with_child, mode="slurm", config=slurm_cfg)
    assert job.wait(timeout=150) is JobState.TIMEOUT
    assert job.info()["signal"] == "SIGUSR1"
    assert "time limit" in job.info()["error"]


def test_a_time_limit_without_a_warning_is_a_timeout_not_a_cancel(slurm_cfg):
    """Slurm ends a job at its limit with SIGTERM, as scancel does. With no warning signal
    (SLURM_SIGNAL_SECONDS=0) the job script's EASYLAUNCH_TIME_LIMIT_AT tells them apart; the
    run was recorded "cancelled" before (seen on the realistic cluster)."""
    slurm_cfg["SLURM_CONFIGS"]["cpu"]["time_in_mins"] = 1
    slurm_cfg["SLURM_SIGNAL_SECONDS"] = 0
    job = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, mode="slurm",
                         config=slurm_cfg)
    assert job.wait(timeout=150) is JobState.TIMEOUT
    assert "the time limit is reached" in job.info()["error"]


def test_sbatch_rejection_shows_sbatchs_own_message(slurm_cfg):
    slurm_cfg["SLURM_CONFIGS"]["cpu"]["extra_flags"] = "--no-such-option"
    with pytest.raises(LaunchError, match="sbatch refused .*unrecognized option"):
        run_sweep(jobfns.train, [{}, {}], mode="slurm", config=slurm_cfg)
    folders = list((Path(slurm_cfg["LOCAL_LOG_DIR"]) / "default").glob("*_default_*"))
    assert len(folders) == 2
    states = {__import__("json").loads((f / "status.json").read_text())["state"]
              for f in folders}
    assert states == {"failed"}


def test_paths_with_spaces_quotes_and_dollars(slurm_cfg, tmp_path):
    slurm_cfg["LOCAL_LOG_DIR"] = str(tmp_path / "it's my $(touch pwned) logs")
    nasty = {"text": "a 'quoted' \"thing\" $(touch pwned2)\nsecond line"}
    job = run_experiment(jobfns.write_file, variant=nasty, mode="slurm", config=slurm_cfg)
    assert Path(job.result(timeout=120)).read_text() == nasty["text"]
    assert not list(tmp_path.rglob("pwned*"))


def test_cli_lists_and_cancels_slurm_runs(slurm_cfg, tmp_path):
    settings = tmp_path / "settings.py"
    settings.write_text("".join(f"{k} = {v!r}\n" for k, v in slurm_cfg.items()))
    job = run_experiment(jobfns.sleep_with_child, mode="slurm", config=str(settings))
    run_pids(job.log_dir)
    cli = [sys.executable, "-m", "easylaunch.cli", "--config", str(settings)]
    listed = subprocess.run(cli + ["ls", "--mode", "slurm"], capture_output=True, text=True,
                            check=True).stdout
    assert job.id in listed and "running" in listed
    status = subprocess.run(cli + ["status", job.id], capture_output=True, text=True,
                            check=True).stdout
    assert job.launch_info["backend"]["slurm_job_id"] in status
    out = subprocess.run(cli + ["cancel", job.id], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"{job.id}: cancelled"


def test_sss_runs_in_the_container_with_real_bind_mounts(batch_cfg, tmp_path):
    data = tmp_path / "cluster-data"
    data.mkdir()
    (data / "data.txt").write_text("good")
    mount_point = tmp_path / "in-container/data"
    batch_cfg["SSS_NON_CODE_DIRS_TO_MOUNT"] = [dict(local_dir=str(data),
                                                    mount_point=str(mount_point))]
    jobs = run_sweep(jobfns.check_data, [{"mount_point": str(mount_point)}] * 2, mode="sss",
                     config=batch_cfg)
    writer = run_experiment(jobfns.write_into_mount, mode="sss", config=batch_cfg,
                            variant={"mount_point": str(mount_point), "text": "from the job"})
    batch = writer.launch_info["backend"]["batch_dir"]
    assert jobs[0].launch_info["backend"]["batch_dir"] == batch  # one script's launches: one batch
    subprocess.run(["bash", f"{copy_to_cluster(writer)}/submit.sh"], check=True)
    assert [j.result(timeout=120) for j in jobs] == ["good", "good"]
    backend = jobs[0].launch_info["backend"]
    assert jobs[0].stdout_path == Path(backend["job_log_dir"]) / "stdout.log"  # logs read there
    writer.wait(timeout=120)
    assert (data / "written.txt").read_text() == "from the job"  # landed in local_dir
    assert not mount_point.exists() or not any(mount_point.iterdir())
    assert writer.fetch().startswith("brought ")
    assert (writer.log_dir / "stdout.log").exists()


@pytest.mark.parametrize("container", [True, False], ids=["in-container", "warm-workers"])
def test_htp_packer_runs_every_task_and_reruns_only_failures(batch_cfg, tmp_path, container):
    if not container:
        batch_cfg["SSS_CPU_IMAGE"] = None  # plain runner lines: the packer forks warm workers
    marker = tmp_path / "fixed"
    jobs = run_sweep(jobfns.fail_unless_exists,
                     [{"path": str(marker) if i == 2 else "/"} for i in range(5)],
                     mode="htp", config=batch_cfg)
    cluster = copy_to_cluster(jobs[0])
    assert (Path(cluster) / "runs.tsv").exists() is not container
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True)
    states = [j.wait(timeout=180) for j in jobs]
    assert states == [JobState.SUCCEEDED] * 2 + [JobState.FAILED] + [JobState.SUCCEEDED] * 2
    state_dir = Path(cluster) / "task-state"

    def packer_done():
        return all((state_dir / f"task-{i}.json").exists() and "running" not in
                   (state_dir / f"task-{i}.json").read_text() for i in range(5))

    assert wait_for(packer_done, 60)  # the runs' ends are recorded before the packer's
    first = {i: (state_dir / f"task-{i}.json").read_text() for i in range(5)}
    assert all((state_dir / f"task-{i}.out").exists() for i in range(5))
    marker.touch()
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True)
    assert wait_for(lambda: jobs[2].status() is JobState.SUCCEEDED, 180)
    assert jobs[2].info()["attempt"] == 2
    assert "FileNotFoundError" in jobs[2].info()["previous_attempt"]["error"]
    assert wait_for(lambda: "succeeded" in (state_dir / "task-2.json").read_text())
    again = {i: (state_dir / f"task-{i}.json").read_text() for i in range(5)}
    assert all(again[i] == first[i] for i in (0, 1, 3, 4))  # not run again


def test_htp_spreads_a_sweep_over_allocations_that_share_its_tasks(batch_cfg):
    batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1  # a worker each: both fit
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 1}] * 6, mode="htp", allocations=2,
                     config=batch_cfg)
    cluster = Path(copy_to_cluster(jobs[0]))
    script = (cluster / "htp.sbatch").read_text()
    assert "#SBATCH --array=0-1" in script and "--shared" in script
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True)
    assert [j.wait(timeout=180) for j in jobs] == [JobState.SUCCEEDED] * 6
    elements = {j.info()["job_id"] for j in jobs}
    array = elements.pop().split("_")[0]
    assert elements | {f"{array}_0", f"{array}_1"} == {f"{array}_0", f"{array}_1"}
    assert len({j.info()["job_id"] for j in jobs}) == 2  # both allocations took runs
    claims = list((cluster / "task-state").glob(f"claims-{array}/task-*"))
    assert len(claims) == 6  # each task taken once


def test_htp_starts_a_packer_on_each_node_of_an_allocation(batch_cfg):
    """n_nodes=2: srun starts a packer on each node (node1 and node2), and they share the task
    file."""
    batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1  # a worker each
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 1}] * 6, mode="htp", n_nodes=2,
                     config=batch_cfg)
    cluster = Path(copy_to_cluster(jobs[0]))
    script = (cluster / "htp.sbatch").read_text()
    assert "#SBATCH --nodes=2\n#SBATCH --ntasks=2\n#SBATCH --cpus-per-task=1\n" in script
    packer = script.splitlines()[-1]
    assert packer.startswith("exec srun -u -N 2 -n 2 --ntasks-per-node=1 --cpus-per-task=1 ")
    assert packer.endswith(" --workers 1 --runs " + f"{cluster}/runs.tsv --warm --shared")
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True)
    assert [j.wait(timeout=180) for j in jobs] == [JobState.SUCCEEDED] * 6
    assert {j.info()["host"] for j in jobs} == {"node1", "node2"}
    assert len(list((cluster / "task-state").glob("claims-*/task-*"))) == 6  # each taken once
    spans = sorted((r["started"], r["ended"]) for r in (
        json.loads((cluster / "task-state" / f"task-{i}.json").read_text()) for i in range(6)))
    # one worker a packer: runs overlap only if both packers ran them
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:], strict=False))


@pytest.mark.parametrize("container", [True, False], ids=["in-container", "warm-workers"])
def test_htp_cancels_one_task_without_touching_the_others(batch_cfg, container):
    if not container:
        batch_cfg["SSS_CPU_IMAGE"] = None
    batch_cfg["SLURM_CONFIGS"]["cpu"]["max_num_cores_per_node"] = 1  # one worker
    jobs = run_sweep(jobfns.sleep_with_child, [{}, {}, {}], mode="htp", config=batch_cfg)
    cluster = copy_to_cluster(jobs[0])
    jobs[2].cancel()  # before the allocation even starts
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True)
    job_log = Path(jobs[0].launch_info["backend"]["job_log_dir"])
    pids = run_pids(job_log)
    jobs[0].cancel()
    assert jobs[0].wait(timeout=60) is JobState.CANCELLED
    assert wait_for(lambda: not any(alive(p) for p in pids))
    run_pids(Path(jobs[1].launch_info["backend"]["job_log_dir"]))  # the next task started
    jobs[1].cancel()
    assert [j.wait(timeout=60) for j in jobs] == [JobState.CANCELLED] * 3
    time.sleep(1)
    assert not (Path(jobs[2].launch_info["backend"]["job_log_dir"]) / "pids").exists()


def test_pending_array_tasks_are_not_mistaken_for_lost_ones(slurm_cfg):
    jobs = run_sweep(jobfns.interval, [dict(seconds=0.5)] * 6, mode="slurm", config=slurm_cfg,
                     array_parallelism=1)
    early = wait_all(jobs, timeout=2, refresh_every=0)  # squeue asked at every turn
    assert JobState.FAILED not in early and JobState.QUEUED in early
    assert wait_all(jobs, timeout=120) == [JobState.SUCCEEDED] * 6
