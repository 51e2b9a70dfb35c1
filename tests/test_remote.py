"""Remote clusters over SSH: a real OpenSSH server on 127.0.0.1 (scripts/ssh-up.sh) whose user
`easyremote` is the cluster side. That user shares no folder with the launching side: its runs
reach this side only through easylaunch's copies."""

import json
import os
import pwd
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jobfns
import pytest
from conftest import REMOTE_USER, SSH_DIR, TESTS_DIR
from helpers import wait_for

from easylaunch import JobState, get_job, run_experiment, run_sweep
from easylaunch.errors import LaunchError


def _there(home: Path, job) -> Path:
    return home / job.launch_info["backend"]["job_log_dir"].split(f"{home}/", 1)[1]


@pytest.fixture
def pushes(monkeypatch):
    """The items of every upload to the far side that were copied (not there yet)."""
    from easylaunch.modes.hosts import staging

    seen = []
    upload = staging.upload

    def spy(*args, **kwargs):
        done = upload(*args, **kwargs)
        seen.append(done.items)
        return done

    monkeypatch.setattr(staging, "upload", spy)
    return seen


def test_a_slurm_sweep_runs_on_the_cluster_and_results_come_back(remote_cfg, ssh_cluster,
                                                                  pushes):
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="slurm",
                     config=remote_cfg)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    for job in jobs:
        there = _there(ssh_cluster, job)
        assert there.is_dir() and there.stat().st_uid == pwd.getpwnam(REMOTE_USER).pw_uid
        assert (job.log_dir / "stdout.log").exists()  # (the value came back with status.json)
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
    (quick.log_dir / "stdout.log").unlink()
    fetched = cli("fetch", quick.id)
    assert fetched.returncode == 0 and fetched.stdout.startswith("brought "), fetched
    assert "doubling 1" in (quick.log_dir / "stdout.log").read_text()


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


def test_a_run_that_ended_there_is_not_failed_when_bringing_it_back_fails_once(
        remote_cfg, monkeypatch):
    """The queue says done and the record there says succeeded, but the copy back breaks (a
    dropped connection): the run waits for the next poll's copy, never marked failed."""
    from easylaunch.modes.hosts.ssh import SshTransport
    from easylaunch.modes.hosts.transport import HostError

    job = run_experiment(jobfns.double, variant={"x": 3}, mode="slurm", config=remote_cfg)
    assert wait_for(lambda: _squeue_state(job) in ("", "COMPLETED"), 120)
    real, broken = SshTransport.pull, []

    def pull_breaking_once(self, remote_root, rels, local_root, exclude=()):
        if not broken:
            broken.append(rels)
            raise HostError("the connection dropped")
        return real(self, remote_root, rels, local_root, exclude)

    monkeypatch.setattr(SshTransport, "pull", pull_breaking_once)
    first = job.status()
    assert broken  # (the first copy back broke)
    assert first in (JobState.QUEUED, JobState.RUNNING), first
    assert job.result(timeout=60) == {"x": 3, "y": 6}


def _squeue_state(job) -> str:
    return subprocess.run(["squeue", "-h", "-o", "%T", "-j",
                           job.launch_info["backend"]["slurm_job_id"]], capture_output=True,
                          text=True).stdout.strip()


def test_htp_over_ssh_needs_nothing_but_the_cluster_entry(remote_cfg, ssh_cluster):
    settings = {k: v for k, v in remote_cfg.items() if not k.startswith("SSS_")}
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="htp", config=settings)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    tag = settings["CLUSTERS"]["test"]["log_dir"].removeprefix("~/")
    backend = jobs[0].launch_info["backend"]
    assert backend["job_log_dir"].startswith(f"{ssh_cluster}/{tag}/")  # the cluster's log_dir
    assert backend["cluster_batch_dir"].startswith(f"{ssh_cluster}/{tag}/.batches/")


def test_failed_runs_of_a_packed_sweep_go_again_in_one_allocation(remote_cfg, tmp_path):
    config = tmp_path / "settings.py"
    config.write_text("".join(f"{key} = {value!r}\n" for key, value in remote_cfg.items()))
    jobs = run_sweep(jobfns.fail_unless_exists, [{"path": "/"}, {"path": "/nonexistent-1"},
                                                 {"path": "/nonexistent-2"}],
                     mode="htp", exp_name="flaky", config=str(config))
    assert [j.wait(timeout=120) for j in jobs] == [JobState.SUCCEEDED] + [JobState.FAILED] * 2
    sweep = jobs[0].launch_info["sweep_id"]
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", str(config),
                          "resubmit", "--sweep", sweep, "--state", "failed"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.count("resubmitted ") == 2, out
    again = [get_job(line.split()[3].rstrip(":"), config=str(config))
             for line in out.stdout.splitlines() if line.startswith("resubmitted ")]
    assert [j.wait(timeout=120) for j in again] == [JobState.FAILED] * 2
    assert {j.launch_info["sweep_id"] for j in again} == {sweep}
    # one batch and one allocation for both, as the sweep had
    assert len({j.launch_info["backend"]["cluster_batch_dir"] for j in again}) == 1
    assert len({j.launch_info["backend"]["slurm_job_id"] for j in again}) == 1


def test_cancelling_a_packed_sweep_marks_all_its_tasks_in_one_round_trip(remote_cfg,
                                                                          monkeypatch):
    from easylaunch.modes.hosts.ssh import SshTransport
    from easylaunch.settings import load_settings
    from easylaunch.tracking.refresh import cancel_entries
    from easylaunch.tracking.registry import open_registry

    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 300}] * 20, mode="htp",
                     config=remote_cfg)  # (2 workers: 2 run, 18 wait)
    assert wait_for(lambda: [j.status() for j in jobs[:2]] == [JobState.RUNNING] * 2, 120)
    sent = []
    run_ops = SshTransport.run_ops

    def counted(self, ops, *args, **kwargs):
        sent.append([op["op"] for op in ops])
        return run_ops(self, ops, *args, **kwargs)

    monkeypatch.setattr(SshTransport, "run_ops", counted)
    registry = open_registry(load_settings(remote_cfg).REGISTRY_PATH)
    try:
        outcomes = cancel_entries(registry, [registry.find(j.id) for j in jobs], timeout=60)
    finally:  # (a failure here must not leave the allocation holding the test node)
        subprocess.run(["scancel", jobs[0].launch_info["backend"]["slurm_job_id"]],
                       check=False)
    assert [(state, was_open) for _, state, was_open in outcomes] == \
        [(JobState.CANCELLED, True)] * 20
    assert [ops for ops in sent if "touch" in ops] == [["update_status", "touch", "exists"]]
    assert sum("before it started" in j.info()["error"] for j in jobs) == 18
    assert {e.state for e in (registry.find(j.id) for j in jobs)} == {"cancelled"}


def test_pbs_htp_over_ssh_needs_nothing_but_the_cluster_entry(remote_cfg, ssh_cluster,
                                                              pbs_front_end):
    settings = {k: v for k, v in remote_cfg.items() if not k.startswith("SSS_")}
    settings["PBS_CONFIGS"] = {"cpu": {"select": 1, "ncpus": 1, "walltime": 10}}
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(4)], mode="pbs_htp",
                     allocations=2, config=settings)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(4)]
    backend = jobs[0].launch_info["backend"]
    assert {j.launch_info["backend"]["pbs_job_id"] for j in jobs} == {backend["pbs_job_id"]}
    assert "qstat_json" in backend  # (what the cluster's qstat can say, asked at launch)
    assert "#PBS -J 1-2\n" in (_there(ssh_cluster, jobs[0]).parent.parent / ".batches").joinpath(
        Path(backend["cluster_batch_dir"]).name, "htp.pbs").read_text()


def test_a_pbs_sweep_runs_on_the_cluster_over_ssh(remote_cfg, ssh_cluster, pbs_front_end):
    remote_cfg["PBS_CONFIGS"] = {"cpu": {"select": 1, "ncpus": 1, "walltime": 10}}
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(3)], mode="pbs", config=remote_cfg)
    assert [j.result(timeout=120) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(3)]
    assert all("[" in j.launch_info["backend"]["pbs_job_id"] for j in jobs)
    assert _there(ssh_cluster, jobs[0]).is_dir() and (jobs[0].log_dir / "stdout.log").exists()
    slow = run_sweep(jobfns.sleep_a_while, [{"seconds": 300}] * 2, mode="pbs",
                     config=remote_cfg)
    assert wait_for(lambda: slow[0].status() is JobState.RUNNING, 60)
    slow[0].cancel()  # a running element, over SSH: stopped by its record
    assert slow[0].wait(timeout=60) is JobState.CANCELLED
    slow[1].cancel()
    assert slow[1].wait(timeout=60) is JobState.CANCELLED


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


def test_an_ssh_run_whose_process_died_resumes_there(remote_cfg, ssh_cluster):
    from jobfns import steps_done

    remote_cfg["SSH_DEFAULT_HOST"] = "test"
    job = run_experiment(jobfns.count_steps, variant={"steps": 30, "every": 5,
                                                      "step_seconds": 0.1},
                         mode="ssh", config=remote_cfg, max_restarts=2)
    there = _there(ssh_cluster, job)
    assert wait_for(lambda: len(steps_done(there)) >= 8, timeout=60)
    pid = json.loads((there / "status.json").read_text())["pid"]
    os.kill(pid, signal.SIGKILL)  # (root here: the run is easyremote's)
    result = job.result(timeout=120)
    assert result["attempt"] == 2 and 5 <= result["resumed_from"] <= 30
    assert [r["reason"] for r in job.info()["restarts"]] == ["lost"]
    assert "SIGKILL" in job.info()["restarts"][0]["error"]


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
        run_sweep(jobfns.train, [{}] * 5, mode="slurm", config=no_python)
    assert_nothing_made(remote_cfg)


def assert_nothing_made(cfg) -> None:
    """No run folder here and no run in the registry (the runs made while the cluster was
    asked were taken back when it refused)."""
    from easylaunch.tracking.registry import open_registry

    root = Path(cfg["LOCAL_LOG_DIR"])
    assert not root.exists() or not [p for p in root.iterdir() if not p.name.startswith(".")]
    assert open_registry().list()[0] == []


def _with(cfg, **fields):
    """``cfg`` with fields of its cluster entry replaced."""
    return dict(cfg, CLUSTERS={"test": dict(cfg["CLUSTERS"]["test"], **fields)})


def _ssh_config(tmp_path, **changes) -> str:
    """A copy of the test ssh config with some of its lines replaced."""
    lines = (SSH_DIR / "config").read_text().splitlines()
    for key, value in changes.items():
        lines = [f"    {key} {value}" if line.split()[:1] == [key] else line for line in lines]
    path = tmp_path / "ssh_config"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _close_master() -> None:
    """End the multiplexed connection to the test host (a later login starts afresh)."""
    from easylaunch.modes.hosts.ssh import SshTransport

    good = SshTransport("test", "easylaunch-test-cluster", None, "python3", "~",
                        str(SSH_DIR / "config"))
    subprocess.run(["ssh", *good.ssh_options(), "-O", "exit", good.destination],
                   capture_output=True)


def test_a_login_that_fails_says_why_and_never_prompts(remote_cfg, tmp_path):
    key = tmp_path / "not_authorized"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    wrong_key = _with(remote_cfg, ssh_config=_ssh_config(tmp_path, IdentityFile=key))
    _close_master()  # (a live one would let any key in: it is logged in already)
    with pytest.raises(LaunchError, match=f"authentication failed; keys tried: {key}"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="slurm", config=wrong_key)
    (tmp_path / "empty_known_hosts").write_text("")
    unknown = _with(remote_cfg, ssh_config=_ssh_config(
        tmp_path, UserKnownHostsFile=tmp_path / "empty_known_hosts"))
    _close_master()
    with pytest.raises(LaunchError, match="host key is not known here: run `ssh easylaunch-"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="slurm", config=unknown)


def _remote_file(home: Path, name: str, text: str, mode: int = 0o644) -> Path:
    path = home / name
    path.write_text(text)
    path.chmod(mode)
    os.chown(path, pwd.getpwnam(REMOTE_USER).pw_uid, pwd.getpwnam(REMOTE_USER).pw_gid)
    return path


def test_a_cluster_python_of_another_minor_version_is_refused(remote_cfg, ssh_cluster):
    old = _remote_file(ssh_cluster, "python3.9-like", (
        "#!/bin/sh\n# python -c CODE, as a Python 3.9 would answer\n"
        "exec ~/venv/bin/python -c 'import sys; sys.version_info = (3, 9, 18, \"final\", 0); "
        "exec(sys.argv[2])' \"$@\"\n"), 0o755)
    with pytest.raises(LaunchError, match=r"has Python 3\.9\.18 and cloudpickle .*, but runs "
                                          r"are pickled here .* with Python "
                                          rf"{sys.version_info[0]}\.{sys.version_info[1]}"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="slurm",
                       config=_with(remote_cfg, python=str(old)))
    assert_nothing_made(remote_cfg)


def test_a_folder_there_that_cannot_be_written_or_is_full_is_refused(remote_cfg, ssh_cluster,
                                                                     tmp_path):
    with pytest.raises(LaunchError, match="/root/easylaunch.* cannot be written"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="slurm",
                       config=_with(remote_cfg, log_dir="/root/easylaunch"))
    full = ssh_cluster / f"full-{uuid.uuid4().hex[:6]}"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,uid=easyremote", "tmpfs", str(full)],
                   check=True)
    try:
        code = tmp_path / "code"
        code.mkdir()
        (code / "weights.bin").write_bytes(os.urandom(3_000_000))
        cfg = dict(_with(remote_cfg, log_dir=str(full)),
                   CODE_DIRS_TO_MOUNT=[str(TESTS_DIR), str(code)])
        with pytest.raises(LaunchError, match=r"MB free in .*full-.*free space there"):
            run_experiment(jobfns.double, variant={"x": 1}, mode="slurm", config=cfg)
        assert [p.name for p in full.iterdir()] == [".incoming"]  # nothing half-copied
    finally:
        subprocess.run(["umount", str(full)], check=True)


def test_sbatch_refusing_the_job_there_leaves_no_run_looking_submitted(remote_cfg):
    remote_cfg["SLURM_CONFIGS"]["cpu"]["extra_flags"] = "--constraint=no-such-feature"
    with pytest.raises(LaunchError, match="sbatch refused .* on cluster 'test'.*feature"):
        run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="slurm", config=remote_cfg)
    from easylaunch.tracking.registry import open_registry

    entries, _ = open_registry().list()
    assert len(entries) == 2 and {e.state for e in entries} == {"failed"}


def test_strings_reach_the_remote_shell_quoted(remote_cfg, ssh_cluster, tmp_path):
    odd = f"~/runs/it's $(touch {tmp_path}/pwned) {uuid.uuid4().hex[:6]}"
    job = run_experiment(jobfns.double, variant={"x": 3}, mode="slurm",
                         config=_with(remote_cfg, log_dir=odd))
    assert job.result(timeout=120) == {"x": 3, "y": 6}
    assert "it's $(touch" in job.launch_info["backend"]["job_log_dir"]
    assert not (tmp_path / "pwned").exists() and not (ssh_cluster / "pwned").exists()


def test_tracking_survives_the_cluster_going_out_of_reach(remote_cfg):
    from easylaunch.modes.hosts.ssh import SshTransport

    job = run_experiment(jobfns.double, variant={"x": 4}, mode="slurm", config=remote_cfg)
    online = job.mode.transport
    job.mode.transport = SshTransport(online.name, online.destination, 1, online.python,
                                      online.log_dir, online.ssh_config)  # nothing answers
    assert job.status() in (JobState.QUEUED, JobState.RUNNING)
    assert job.wait(timeout=3) in (JobState.QUEUED, JobState.RUNNING)
    job.mode.transport = online  # back: the state catches up, the result comes back
    assert job.result(timeout=120) == {"x": 4, "y": 8}


@pytest.mark.parametrize("stream", ["works", "breaks"])
def test_runs_are_copied_while_the_launch_makes_them(remote_cfg, ssh_cluster, monkeypatch,
                                                     stream):
    """Once the first check reached the cluster, each run's files stream there as the run is
    made; the upload then sends only what did not arrive (all of it, where the stream broke)."""
    from easylaunch.modes.hosts import staging
    from easylaunch.modes.hosts.ssh import SshTransport

    run_sweep(jobfns.double, [{"x": 0}], mode="slurm", config=remote_cfg)  # (connection open)
    if stream == "breaks":  # the far side's tar is missing
        monkeypatch.setattr(SshTransport, "untar_argv", lambda self, folder: [
            "ssh", *self.ssh_options(), "--", self.destination, "no-such-tar -x"])
    arrived, uploads = [], []
    finish, upload, made = staging.RunStream.finish, staging.upload, staging.RunStream.made

    made_runs = []

    def made_tenth_once_ready(self, run):  # (40 runs can be made before the preflight's round
        made_runs.append(run)              # trip ends: the tenth waits for it, so some stream)
        if len(made_runs) == 10:
            wait_for(self.ready, 10)
        made(self, run)

    monkeypatch.setattr(staging.RunStream, "made", made_tenth_once_ready)
    monkeypatch.setattr(staging.RunStream, "finish",
                        lambda self: arrived.append(finish(self)) or arrived[-1])
    monkeypatch.setattr(staging, "upload", lambda *a, **k: uploads.append(upload(*a, **k))
                        or uploads[-1])
    jobs = run_sweep(jobfns.double, [{"x": i} for i in range(40)], mode="slurm",
                     config=remote_cfg)
    assert [j.result(timeout=180) for j in jobs] == [{"x": i, "y": 2 * i} for i in range(40)]
    (streamed,) = arrived
    sent_inline = [rel for rel in uploads[0].items if "/bundle" in rel or rel.endswith(".json")]
    if stream == "works":
        assert streamed and len(sent_inline) + len(streamed) == 3 * 40
        assert not set(sent_inline) & streamed
    else:
        assert streamed == frozenset() and len(sent_inline) == 3 * 40
    root = ssh_cluster / "runs" / remote_cfg["CLUSTERS"]["test"]["log_dir"].split("/")[-1]
    assert not any((root / ".incoming").iterdir())  # everything placed, nothing left there


def test_a_copy_cut_off_mid_way_submits_nothing_and_the_next_launch_resumes_it(
        remote_cfg, ssh_cluster, tmp_path, pushes, monkeypatch):
    import threading

    from easylaunch.modes.hosts import transport
    from easylaunch.modes.hosts.ssh import SshTransport

    code = tmp_path / "code"
    code.mkdir()
    size = 150_000_000  # (copied at 50 MB/s: time to cut the copy)
    with open(code / "weights.bin", "wb") as f:
        for _ in range(size // 10_000_000):
            f.write(os.urandom(10_000_000))
    cfg = dict(remote_cfg, CODE_DIRS_TO_MOUNT=[str(TESTS_DIR), str(code)],
               CODE_SNAPSHOT_MAX_MB=1000)
    root = ssh_cluster / "runs" / cfg["CLUSTERS"]["test"]["log_dir"].split("/")[-1]
    sent = []
    push = SshTransport.push

    def push_and_cut(self, local_root, rels, dest):
        def cut_when_half_there():  # kill the ssh master once the copy is under way
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                parts = list((root / ".incoming").rglob(".weights.bin.*"))
                if parts and parts[0].stat().st_size > size // 10:
                    check = subprocess.run(["ssh", *self.ssh_options(), "-O", "check",
                                            self.destination], capture_output=True, text=True)
                    pid = int(check.stderr.split("pid=")[1].split(")")[0])
                    os.kill(pid, signal.SIGKILL)
                    return
                time.sleep(0.01)

        if not sent:
            threading.Thread(target=cut_when_half_there, daemon=True).start()
        try:
            sent.append(push(self, local_root, rels, dest))
        except LaunchError:
            sent.append(None)
            raise
        return sent[-1]

    monkeypatch.setattr(SshTransport, "push", push_and_cut)
    monkeypatch.setattr(transport, "RSYNC_FLAGS", (*transport.RSYNC_FLAGS, "--bwlimit=50m"))
    with pytest.raises(LaunchError, match="(?s)cut off .* nothing was submitted. Launch again"):
        run_experiment(jobfns.double, variant={"x": 1}, mode="slurm", config=cfg)
    assert sent == [None]
    assert not (root / "default").exists()  # no run there: it is not submitted either
    from easylaunch.tracking.registry import open_registry

    assert [e.state for e in open_registry().list()[0]] == ["failed"]
    job = run_experiment(jobfns.double, variant={"x": 2}, mode="slurm", config=cfg)
    assert sent[1] < size * 0.95  # the part copied before the cut was not sent again
    assert job.result(timeout=120) == {"x": 2, "y": 4}
