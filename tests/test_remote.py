"""Remote clusters over SSH: a real OpenSSH server on 127.0.0.1 (scripts/ssh-up.sh) whose user
`easyremote` is the cluster side. That user shares no folder with the launching side: its runs
reach this side only through easylaunch's copies."""

import os
import pwd
import subprocess
import sys
import uuid
from pathlib import Path

import jobfns
import pytest
from conftest import REPO_DIR, TESTS_DIR

from easylaunch import JobState, get_job, run_experiment, run_sweep
from easylaunch.errors import LaunchError
from easylaunch.hosts.transport import Transport

SSH_DIR = REPO_DIR / ".test-ssh"
REMOTE_USER = "easyremote"


@pytest.fixture(scope="session")
def ssh_cluster(slurm_cluster):
    """The remote user's home, once its sshd answers (else skip: run scripts/ssh-up.sh)."""
    if not (SSH_DIR / "config").exists():
        pytest.skip("no test sshd: run scripts/ssh-up.sh as root")
    out = subprocess.run(["ssh", "-F", str(SSH_DIR / "config"), "-o", "BatchMode=yes",
                          "easylaunch-test-cluster", "true"], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"the test sshd does not answer ({out.stderr.strip()}): run "
                    "scripts/ssh-up.sh as root")
    return Path(pwd.getpwnam(REMOTE_USER).pw_dir)


@pytest.fixture
def remote_cfg(cfg, ssh_cluster):
    """Settings submitting to the test cluster over SSH, each test in its own folders there."""
    tag = uuid.uuid4().hex[:8]
    return dict(cfg, DEFAULT_CLUSTER="test", SLURM_SIGNAL_SECONDS=30,
                CLUSTERS={"test": {"host": "easylaunch-test-cluster", "log_dir": f"~/runs/{tag}",
                                   "python": "~/venv/bin/python",
                                   "ssh_config": str(SSH_DIR / "config")}},
                SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=os.cpu_count(),
                                            time_in_mins=10)),
                SSS_LOG_DIR=f"{ssh_cluster}/sss-logs/{tag}", SSS_SCRIPT_PATH=None)


def _there(home: Path, job) -> Path:
    return home / job.launch_info["backend"]["job_log_dir"].split(f"{home}/", 1)[1]


@pytest.fixture
def pushes(monkeypatch):
    """The relative paths of every copy to the far side."""
    seen = []
    push = Transport.push

    def spy(self, local_root, rels, dest):
        seen.append(list(rels))
        return push(self, local_root, rels, dest)

    monkeypatch.setattr(Transport, "push", spy)
    return seen


def test_a_slurm_sweep_runs_on_the_cluster_and_results_come_back(remote_cfg, ssh_cluster,
                                                                  pushes):
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="slurm",
                     config=remote_cfg)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    for job in jobs:
        there = _there(ssh_cluster, job)
        assert there.is_dir() and there.stat().st_uid == pwd.getpwnam(REMOTE_USER).pw_uid
        assert (job.log_dir / "result.pkl").exists() and (job.log_dir / "stdout.log").exists()
        assert job.info()["host"] and job.launch_info["backend"]["slurm_job_id"]
    assert any(rel.startswith(".snapshots/") for rel in pushes[0])
    again = run_sweep(jobfns.double, [{"x": 5}], mode="slurm", config=remote_cfg)
    assert not any(rel.startswith((".snapshots/", ".blobs/")) for rel in pushes[-1]), pushes[-1]
    assert again[0].result(timeout=120) == {"x": 5, "y": 10}
    root = ssh_cluster / "runs" / remote_cfg["CLUSTERS"]["test"]["log_dir"].split("/")[-1]
    assert not any((root / ".incoming").iterdir())  # everything placed, nothing half-made


def test_a_later_process_lists_tails_cancels_and_resubmits(remote_cfg, tmp_path):
    config = tmp_path / "settings.py"
    config.write_text("".join(f"{key} = {value!r}\n" for key, value in remote_cfg.items()))
    slow, = run_sweep(jobfns.sleep_a_while, [{"seconds": 120}], mode="slurm", config=remote_cfg)
    quick, = run_sweep(jobfns.double, [{"x": 1}], mode="slurm", config=remote_cfg)
    assert quick.wait(timeout=120) is JobState.SUCCEEDED, quick.info()
    def cli(*args):
        return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(config),
                               *args], capture_output=True, text=True, timeout=120)

    listing = cli("ls")
    assert slow.id in listing.stdout and quick.id in listing.stdout, listing
    assert "succeeded" in listing.stdout
    out = cli("cancel", slow.id)
    assert out.returncode == 0 and "cancelled" in out.stdout, out
    assert get_job(slow.id, config=remote_cfg).status() is JobState.CANCELLED
    again = cli("resubmit", quick.id)
    assert again.returncode == 0, again
    new_id = again.stdout.split()[3].rstrip(":")
    assert get_job(new_id, config=remote_cfg).result(timeout=120) == {"x": 1, "y": 2}
    logs = cli("logs", new_id)
    assert logs.returncode == 0 and "doubling 1" in logs.stdout, logs


@pytest.mark.parametrize("mode", ["htp", "sss"])
def test_batch_modes_submit_over_ssh(remote_cfg, ssh_cluster, mode, tmp_path):
    if mode == "sss":
        image = ssh_cluster / "image.sif"
        image.write_text("test image")
        remote_cfg.update(SSS_CPU_IMAGE=str(image), SSS_PYTHON=f"{ssh_cluster}/venv/bin/python",
                          CODE_DIRS_TO_MOUNT=[dict(local_dir=str(TESTS_DIR),
                                                   mount_point="/tmp/easylaunch-test-code")])
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(4)], mode=mode, config=remote_cfg)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(4)]
    assert all(j.launch_info["backend"]["slurm_job_id"] for j in jobs)
    assert (jobs[0].log_dir / "stdout.log").exists()


def test_the_ssh_mode_runs_on_a_machine_without_a_scheduler(remote_cfg, ssh_cluster):
    remote_cfg["SSH_DEFAULT_HOST"] = "test"
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="ssh", config=remote_cfg,
                     max_parallel=2)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    slow = run_experiment(jobfns.sleep_a_while, mode="ssh", config=remote_cfg,
                          variant={"seconds": 300})
    assert slow.wait(timeout=0) in (JobState.QUEUED, JobState.RUNNING)
    slow.cancel()
    assert slow.wait(timeout=60) is JobState.CANCELLED


def test_faults_name_the_host_and_the_fix_before_anything_is_submitted(remote_cfg):
    bad = dict(remote_cfg, CLUSTERS={"test": dict(remote_cfg["CLUSTERS"]["test"],
                                                  host="no-such-host.invalid")})
    with pytest.raises(LaunchError, match="no-such-host.invalid.*unknown"):
        run_experiment(jobfns.train, mode="slurm", config=bad)
    refused = dict(remote_cfg, CLUSTERS={"test": dict(remote_cfg["CLUSTERS"]["test"],
                                                      host="easyremote@127.0.0.1:1")})
    with pytest.raises(LaunchError, match="refused"):
        run_experiment(jobfns.train, mode="slurm", config=refused)
    no_python = dict(remote_cfg, CLUSTERS={"test": dict(remote_cfg["CLUSTERS"]["test"],
                                                        python="/nope/python3")})
    with pytest.raises(LaunchError, match="no Python '/nope/python3'"):
        run_experiment(jobfns.train, mode="slurm", config=no_python)
