"""Commands as runs on this machine: run_command / run_commands / easylaunch submit, their
exit codes, records and listing, bad input refused before anything is made, and
easylaunch shell into a running local run, driven through tmux."""

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import settings_file
from helpers import shell_answers, wait_for

from easylaunch import Job, JobState, LaunchError, run_command, run_commands, wait_all
from easylaunch.tracking.registry import open_registry
from easylaunch_job.command import CommandFailed

EASYLAUNCH = [sys.executable, "-m", "easylaunch.cli"]


def cli(settings: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*EASYLAUNCH, "--config", settings, *args], capture_output=True,
                          text=True, **kwargs)


def test_a_command_that_exits_3_ends_failed_with_its_code_and_stderr_tail(cfg):
    job = run_command(["bash", "-c", "echo out; echo first >&2; echo 'the last words' >&2; "
                       "exit 3"], exp_name="c", config=cfg)
    assert job.wait(timeout=60) is JobState.FAILED
    info = job.info()
    assert info["exit_code"] == 3
    assert info["error"].startswith("the command exited with code 3: bash -c")
    assert info["error"].endswith("first\nthe last words")
    with pytest.raises(CommandFailed, match="exited with code 3") as raised:
        job.result()
    assert raised.value.exit_code == 3
    assert (job.log_dir / "stdout.log").read_text() == "out\n"
    assert "the last words" in (job.log_dir / "stderr.log").read_text()


def test_a_command_runs_in_the_code_snapshot_with_the_run_s_variables(cfg):
    job = run_command("bash -c 'pwd; ls cmdjobs.py; env | grep ^EASYLAUNCH_ | sort'",
                      exp_name="c", config=cfg)
    assert job.wait(timeout=60) is JobState.SUCCEEDED, job.info()
    out = (job.log_dir / "stdout.log").read_text().splitlines()
    snapshot = Path(out[0])
    assert snapshot.parent.name == ".snapshots" and (snapshot / "cmdjobs.py").is_file()
    env = dict(line.split("=", 1) for line in out[2:])
    assert env["EASYLAUNCH_RUN_ID"] == job.id
    assert env["EASYLAUNCH_RUN_DIR"] == str(job.log_dir)
    assert env["EASYLAUNCH_ATTEMPT"] == "1"
    assert env["EASYLAUNCH_STOP_SIGNAL"] == "USR1"
    assert env["EASYLAUNCH_CHECKPOINT_DIR"] == str(job.log_dir / "checkpoint")
    assert job.launch_info["command"] == ["bash", "-c", "pwd; ls cmdjobs.py; env | grep "
                                          "^EASYLAUNCH_ | sort"]


def test_a_sweep_of_commands_fills_each_run_s_fields_and_keeps_quotes_as_they_are(cfg):
    tricky = "it's $(touch pwned) `x` ; *"
    jobs = run_commands(["printf", "%s|%s\\n", "lr={lr}", tricky], [{"lr": 0.1}, {"lr": 3}],
                        exp_name="sweep", config=cfg)
    wait_all(jobs)
    assert [(j.log_dir / "stdout.log").read_text() for j in jobs] == \
        [f"lr=0.1|{tricky}\n", f"lr=3|{tricky}\n"]
    assert not list(Path(cfg["CODE_DIRS_TO_MOUNT"][0]).glob("pwned"))
    assert [json.loads((j.log_dir / "variant.json").read_text()) for j in jobs] == \
        [{"lr": 0.1}, {"lr": 3}]
    listed = run_commands(["echo one", ["echo", "two words"]], exp_name="list", config=cfg)
    wait_all(listed)
    assert [(j.log_dir / "stdout.log").read_text() for j in listed] == ["one\n", "two words\n"]


def test_bad_commands_are_refused_before_anything_is_made(cfg, tmp_path):
    logs = Path(cfg["LOCAL_LOG_DIR"])
    cases = [
        ([], "the command is empty"),
        ("", "the command is empty"),
        ("echo 'unclosed", "cannot split the command"),
        (["echo", 3], "a command is a string or a list of strings"),
        ("no-such-program-here --flag", "'no-such-program-here' is not on PATH on this machine"),
        ("./missing.sh", "is not in"),
        ("./conftest.py", r"is not executable: chmod \+x it"),
    ]
    for command, said in cases:
        with pytest.raises(LaunchError, match=said):
            run_command(command, config=cfg)
    with pytest.raises(LaunchError, match=r"names \{lr\}, which variants\[1\] lacks"):
        run_commands("echo {lr}", [{"lr": 1}, {"seed": 2}], config=cfg)
    with pytest.raises(LaunchError, match="takes no GPU or process counts"):
        run_command("true", config=cfg, n_gpus=2, multi_process=True)
    assert not logs.exists() or not any(p for p in logs.rglob("status.json"))


def test_submit_from_a_shell_lists_shows_and_waits(tmp_path):
    settings = settings_file(tmp_path)
    out = cli(settings, "submit", "--exp", "shell", "--wait", "--grid", "n=1,2", "--",
              "sh", "-c", 'echo "n={n} $1"', "sh", "a '$(b)'")
    assert out.returncode == 0, out.stderr
    ids = out.stdout.split()
    assert len(ids) == 2
    assert "easylaunch local: 2 runs of shell launched" in out.stderr
    listed = cli(settings, "ls", "--exp", "shell").stdout.splitlines()
    header = listed[0].split("\t")
    assert header[-1] == "command"
    commands = sorted(line.split("\t")[-1] for line in listed[1:])
    assert commands == [shlex.join(["sh", "-c", f'echo "n={n} $1"', "sh", "a '$(b)'"])
                        for n in (1, 2)]
    status = cli(settings, "status", ids[0]).stdout
    assert "command:" in status and "succeeded" in status
    assert cli(settings, "logs", ids[0]).stdout.startswith("n=")
    again = cli(settings, "resubmit", ids[0])
    assert again.returncode == 0, again.stderr
    registry = open_registry(tmp_path / "registry.sqlite3")
    entries = registry.list(exp="shell")[0]
    assert len(entries) == 3 and len({e.command for e in entries}) == 2


def test_a_submitted_command_records_its_working_folder_s_commit(tmp_path):
    project = tmp_path / "project"  # the user's repository, easylaunch installed elsewhere
    git = ["git", "-C", str(project), "-c", "user.email=t@e", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    (project / "train.py").write_text("print('trained')\n")
    subprocess.run([*git, "add", "train.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(tmp_path / 'logs')!r}\n"
                        f"REGISTRY_PATH = {str(tmp_path / 'registry.sqlite3')!r}\n")
    out = cli(str(settings), "submit", "--wait", "--", sys.executable, "train.py",
              cwd=project)
    assert out.returncode == 0, out.stderr
    entry = open_registry(tmp_path / "registry.sqlite3").find(out.stdout.split()[0])
    assert entry.git_commit == head
    assert Job.from_run_dir(entry.log_dir).launch_info["git_commits"] == {str(project): head}


def test_submit_refuses_what_it_cannot_run(tmp_path):
    settings = settings_file(tmp_path)
    none = cli(settings, "submit")  # usage errors: 2, with the usage, as --help says
    assert none.returncode == 2 and "no command: give it after --" in none.stderr
    assert none.stderr.startswith("usage: easylaunch submit")
    missing = cli(settings, "submit", "python", "train.py")
    assert missing.returncode == 2 and "put -- before the command" in missing.stderr
    empty = cli(settings, "submit", "--")
    assert empty.returncode == 2 and "no command after --" in empty.stderr
    slurm_word = cli(settings, "submit", "--partition", "gpu", "--", "true")
    assert slurm_word.returncode == 1 and "does not take the option 'partition'" in \
        slurm_word.stderr
    assert not (tmp_path / "logs").exists()


def test_a_detached_submit_outlives_the_command_and_exits_at_once(tmp_path):
    settings = settings_file(tmp_path)
    started = time.monotonic()
    out = cli(settings, "submit", "--", "sleep", "2")
    assert out.returncode == 0 and time.monotonic() - started < 10
    entry = open_registry(tmp_path / "registry.sqlite3").find(out.stdout.strip())
    assert entry.command == "sleep 2"
    assert wait_for(lambda: cli(settings, "status", entry.id).stdout.count("succeeded"), 30)


def test_a_shell_into_a_running_local_run_is_in_its_folder_with_its_environment(tmp_path):
    settings = settings_file(tmp_path)
    run_id = cli(settings, "submit", "--", "sleep", "60").stdout.strip()
    try:
        shown = shell_answers([*EASYLAUNCH, "--config", settings, "shell", run_id],
                              'echo "ID=$EASYLAUNCH_RUN_ID DIR=$(pwd) END$((40+2))"', "END42")
        folder = next(p for p in (tmp_path / "logs" / "default").iterdir()
                      if p.name.endswith(run_id))
        assert f"ID={run_id} DIR={folder} END42\n" in shown
    finally:
        cli(settings, "cancel", run_id)
    ended = cli(settings, "shell", run_id)
    assert ended.returncode == 1 and "has ended (cancelled)" in ended.stderr


def test_the_scheduler_shell_and_allocation_lines():
    from easylaunch.modes.base import shell_in
    from easylaunch.modes.schedulers import pbs, slurm

    inner = shell_in("/runs/a b", {"EASYLAUNCH_RUN_ID": "ab12"})
    assert inner == ["env", "EASYLAUNCH_RUN_ID=ab12", "bash", "-c",
                     'cd -- "$1" || exit 1; shift; exec bash -i', "easylaunch-shell",
                     "/runs/a b"]
    line = "JobId=1836 ArrayJobId=1834 ArrayTaskId=1 JobState=RUNNING NodeList=n01"
    assert slurm.SCHEDULER.shell_argv(line, "1834_1", ["bash"]) == \
        ["srun", "--jobid=1836", "--overlap", "-N1", "-n1", "--pty", "bash"]
    with pytest.raises(LaunchError, match="Slurm job 7 is PENDING, not running"):
        slurm.SCHEDULER.shell_argv("JobId=7 JobState=PENDING", "7", ["bash"])
    qstat = "Job Id: 12.pbs01\n    job_state = R\n    exec_host = x1001c0s0b0n0/0*64+x1002/0\n"
    assert pbs.SCHEDULER.shell_argv(qstat, "12.pbs01", inner) == \
        ["ssh", "-t", "x1001c0s0b0n0", shlex.join(inner)]
    with pytest.raises(LaunchError, match="PBS job 12 is not running .*job_state Q"):
        pbs.SCHEDULER.shell_argv("    job_state = Q\n", "12", ["bash"])
    res = slurm.resolve_resources({"gpu": {"partition": "g2", "n_gpus": 1, "time_in_mins": 60,
                                           "n_cpus_per_task": 4,
                                           "max_num_cores_per_node": 8}}, "gpu", True)
    assert slurm.SCHEDULER.interactive_argv(res, ["bash", "-i"]) == [
        "salloc", "--job-name=interactive", "--time=60", "--nodes=1", "--cpus-per-task=4",
        "--partition=g2", "--gres=gpu:1", "srun", "--overlap", "-N1", "-n1", "--pty",
        "bash", "-i"]
    res = pbs.resolve_resources({"cpu": {"select": 2, "ncpus": 8, "walltime": 30,
                                         "queue": "debug", "project": "p1"}}, "cpu", False)
    assert pbs.SCHEDULER.interactive_argv(res, ["bash", "-i"]) == [
        "qsub", "-I", "-N", "interactive", "-l", "select=2:ncpus=8:mpiprocs=1",
        "-l", "walltime=00:30:00", "-q", "debug", "-A", "p1", "--", "bash", "-i"]
