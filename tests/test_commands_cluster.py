"""Commands as runs on the local Slurm cluster (arrays, htp packing, its PBS front ends, a
remote cluster over the test sshd), a command requeued at its time limit, two ranks of one
run, and shells driven through tmux: into a running job and into an interactive allocation,
directly and over SSH."""

import re
import subprocess
import sys
import time

from conftest import settings_file
from helpers import copy_to_cluster, shell_answers, tmux, wait_for

from easylaunch import JobState, get_job, run_command, run_commands, wait_all

EASYLAUNCH = [sys.executable, "-m", "easylaunch.cli"]
COUNT = [sys.executable, "cmdjobs.py", "count"]


def test_a_command_sweep_is_one_slurm_array_and_a_failure_keeps_its_code(slurm_cfg):
    jobs = run_commands("echo step {x} on $0", [{"x": 1}, {"x": 2}], mode="slurm",
                        exp_name="cmd-array", config=slurm_cfg)
    array = {j.launch_info["backend"]["array_job_id"] for j in jobs}
    assert len(array) == 1
    wait_all(jobs, timeout=120)
    assert [(j.log_dir / "stdout.log").read_text() for j in jobs] == \
        ["step 1 on $0\n", "step 2 on $0\n"]
    bad = run_command(["bash", "-c", "echo broke >&2; exit 3"], mode="slurm", config=slurm_cfg)
    assert bad.wait(timeout=120) is JobState.FAILED
    assert bad.info()["exit_code"] == 3 and bad.info()["error"].endswith("broke")


def test_commands_pack_into_one_htp_allocation(batch_cfg):
    batch_cfg["SSS_CPU_IMAGE"] = None  # (the packer's warm workers run them)
    jobs = run_commands("echo packed {i}", [{"i": i} for i in range(4)], mode="htp",
                        config=batch_cfg)
    cluster = copy_to_cluster(jobs[0])
    subprocess.run(["bash", f"{cluster}/submit.sh"], check=True, capture_output=True)
    assert [j.wait(timeout=180) for j in jobs] == [JobState.SUCCEEDED] * 4
    assert len({j.info()["job_id"] for j in jobs}) == 1  # one allocation
    for job in jobs:
        job.fetch()
    assert sorted((j.log_dir / "stdout.log").read_text() for j in jobs) == \
        [f"packed {i}\n" for i in range(4)]


def test_a_command_runs_as_a_pbs_job(pbs_cfg):
    job = run_command(["bash", "-c", 'echo "pbs job $PBS_JOBID$SLURM_JOB_ID"'], mode="pbs",
                      config=pbs_cfg)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.info()
    assert (job.log_dir / "stdout.log").read_text().startswith("pbs job ")


def test_a_command_on_a_one_minute_limit_is_requeued_and_goes_on_from_its_checkpoint(
        slurm_cfg):
    slurm_cfg["SLURM_CONFIGS"]["cpu"]["time_in_mins"] = 1
    slurm_cfg["SLURM_SIGNAL_SECONDS"] = 50
    job = run_command([*COUNT, "40", "1"], mode="slurm", max_restarts=4, config=slurm_cfg)
    assert job.wait(timeout=400) is JobState.SUCCEEDED, job.info()
    info = job.info()
    assert {r["reason"] for r in info["restarts"]} == {"time limit"}
    steps = [tuple(map(int, line.split()))
             for line in (job.log_dir / "steps.txt").read_text().splitlines()]
    assert steps[-1][1] == 40
    second = [s for a, s in steps if a == 2]
    assert second and second[0] > 1  # attempt 2 went on from the count attempt 1 saved
    out = (job.log_dir / "stdout.log").read_text()
    assert "stopped at" in out and "attempt 2 starts at" in out and "counted to 40" in out


def test_two_processes_of_one_run_get_their_ranks(slurm_cfg, tmp_path):
    settings = settings_file(tmp_path, SLURM_PYTHON=sys.executable,
                             SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])
    out = subprocess.run([*EASYLAUNCH, "--config", settings, "submit", "--mode", "slurm",
                          "-n", "2", "--multi-process", "--wait", "--",
                          sys.executable, "cmdjobs.py", "ranks"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    job = get_job(out.stdout.strip(), config=settings)
    ranks = sorted((job.log_dir / f"rank-{r}.txt").read_text() for r in (0, 1))
    assert ranks == ["0 0 2\n", "1 1 2\n"]


def _running(job) -> None:
    assert wait_for(lambda: job.status() is JobState.RUNNING, 120), job.info()


def test_a_shell_into_a_running_slurm_run(slurm_cfg, tmp_path):
    settings = settings_file(tmp_path, SLURM_PYTHON=sys.executable,
                             SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])
    job = run_command("sleep 120", mode="slurm", config=settings)
    try:
        _running(job)
        element = job.launch_info["backend"]["slurm_job_id"]
        own_id = subprocess.run(["squeue", "-h", "-j", element, "-o", "%A"],
                                capture_output=True, text=True).stdout.strip()
        shown = shell_answers([*EASYLAUNCH, "--config", settings, "shell", job.id],
                              'echo "J=$SLURM_JOB_ID R=$EASYLAUNCH_RUN_ID D=$(pwd) H=$(hostname) '
                              'END$((40+2))"', "END42")  # (only the answer holds END42)
        assert f"J={own_id} R={job.id} D={job.log_dir} H=" in shown
    finally:
        job.cancel()
    ended = subprocess.run([*EASYLAUNCH, "--config", settings, "shell", job.id],
                           capture_output=True, text=True)
    assert ended.returncode == 1 and "has ended (cancelled)" in ended.stderr


def test_a_shell_into_a_run_on_a_remote_cluster_goes_over_ssh(remote_cfg, tmp_path):
    settings = settings_file(tmp_path, **{k: v for k, v in remote_cfg.items()
                                          if k not in ("LOCAL_LOG_DIR", "CODE_DIRS_TO_MOUNT")})
    job = run_command("sleep 120", mode="slurm", config=settings)
    try:
        _running(job)
        there = job.launch_info["backend"]["job_log_dir"]
        shown = shell_answers([*EASYLAUNCH, "--config", settings, "shell", job.id],
                              'echo "U=$(whoami) J=$SLURM_JOB_ID D=$(pwd) END$((40+2))"',
                              "END42")
        assert "U=easyremote J=" in shown and f"D={there}" in shown
    finally:
        job.cancel()


def test_commands_run_over_ssh_in_ssh_and_slurm_modes(remote_cfg):
    on_host = run_command(["bash", "-c", "echo on $(whoami)"], mode="ssh", cluster="test",
                          config=remote_cfg)
    on_cluster = run_command(["bash", "-c", "echo job $(whoami)"], mode="slurm",
                             config=remote_cfg)
    wait_all([on_host, on_cluster], timeout=180)
    assert (on_host.log_dir / "stdout.log").read_text() == "on easyremote\n"
    assert (on_cluster.log_dir / "stdout.log").read_text() == "job easyremote\n"


def _allocations() -> list[str]:
    return subprocess.run(["squeue", "-h", "-n", "interactive", "-o", "%i"],
                          capture_output=True, text=True).stdout.split()


def _interactive(settings: str, *flags: str) -> str:
    def leave(session: str) -> None:
        tmux("send-keys", "-t", session, "exit", "Enter")
        assert wait_for(lambda: "SHELL-ENDED" in tmux("capture-pane", "-p", "-t", session), 60)

    shown = shell_answers([*EASYLAUNCH, "--config", settings, "interactive", "--time", "5",
                           *flags], 'echo "J=$SLURM_JOB_ID H=$(hostname) U=$(whoami) END$((40+2))"',
                          "END42", timeout=90, after=leave)
    assert wait_for(lambda: not _allocations(), 30), _allocations()
    return shown


def test_an_interactive_allocation_gives_a_shell_on_a_node_and_ends_with_it(slurm_cfg,
                                                                            tmp_path):
    assert not _allocations()
    settings = settings_file(tmp_path, SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])
    shown = _interactive(settings)
    assert re.search(r"^J=\d+ H=\S+ U=root END42$", shown, re.MULTILINE), shown


def test_an_interactive_allocation_on_a_remote_cluster(remote_cfg, tmp_path):
    settings = settings_file(tmp_path, **{k: v for k, v in remote_cfg.items()
                                          if k not in ("LOCAL_LOG_DIR", "CODE_DIRS_TO_MOUNT")})
    shown = _interactive(settings, "--cluster", "test")
    assert re.search(r"^J=\d+ H=\S+ U=easyremote END42$", shown, re.MULTILINE), shown


def test_interactive_refuses_resources_the_cluster_config_cannot_give(slurm_cfg, tmp_path):
    settings = settings_file(tmp_path, SLURM_CONFIGS=slurm_cfg["SLURM_CONFIGS"])
    started = time.monotonic()
    out = subprocess.run([*EASYLAUNCH, "--config", settings, "interactive", "--gpus", "1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "SLURM_CONFIGS" in out.stderr, out.stderr
    assert time.monotonic() - started < 30 and not _allocations()


def test_an_htp_command_with_no_code_folder_runs_where_it_was_launched(slurm_cluster, tmp_path):
    """A researcher's ``easylaunch submit --mode htp -- python train.py`` in their project
    folder, with no CODE_DIRS_TO_MOUNT: the command finds train.py there, as local and slurm
    runs do (it ran in the batch folder and exited 2)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "train.py").write_text("import os\nprint('trained in', os.getcwd())\n")
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(tmp_path / 'logs')!r}\n"
                        f"REGISTRY_PATH = {str(tmp_path / 'registry.sqlite3')!r}\n")
    out = subprocess.run([*EASYLAUNCH, "--config", str(settings), "submit", "--mode", "htp",
                          "--wait", "--", sys.executable, "train.py"], cwd=project,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"trained in {project}" in out.stdout
