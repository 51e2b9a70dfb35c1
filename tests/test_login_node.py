"""A researcher on the cluster's login node (this machine: sbatch and qsub answer here): the
batch modes submit by themselves and their runs start on the launching interpreter; a batch
written to copy says so and is never waited for; a runs' Python that cannot load what this
machine pickles is refused at launch, or (where it could not be asked) names both sides'
versions when the run fails."""

import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import cloudpickle
import jobfns
import pytest
from conftest import REMOTE_USER, TESTS_DIR, settings_file

from easylaunch import JobState, get_job, run_sweep, wait_all
from easylaunch.errors import LaunchError, NotSubmittedError

PYENV = Path("/root/.pyenv/versions/3.11.7")  # its own site-packages hold cloudpickle 2.1.0
CLI = [sys.executable, "-m", "easylaunch.cli"]

# A newcomer's sweep: six variants, one that raises; nothing but the mode chosen.
SWEEP = """\
import sys
from easylaunch import run_sweep, wait_all


def train(doodad_config, variant):
    if variant["lr"] == 3:
        raise ValueError("lr 3 diverged")
    return {"lr": variant["lr"], "python": sys.executable}


jobs = run_sweep(train, [{"lr": lr} for lr in range(6)], exp_name="sweep", mode="htp"OPTIONS)
print("states", [s.value for s in wait_all(jobs, timeout=180)])
for job in jobs:
    print("result", job.id, job.result() if job.status().value == "succeeded" else "-")
"""


def _settings(tmp_path, **values) -> str:
    """The newcomer's settings: their folders and this cluster's CPU allocation, no Python."""
    return settings_file(tmp_path, SLURM_SIGNAL_SECONDS=30, SLURM_CONFIGS=dict(
        cpu=dict(max_num_cores_per_node=os.cpu_count(), time_in_mins=10)), **values)


def _launch(tmp_path, settings: str, options: str = "") -> subprocess.CompletedProcess:
    script = tmp_path / "sweep.py"
    script.write_text(SWEEP.replace("OPTIONS", options))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=240, cwd=tmp_path, env=dict(os.environ,
                                                              EASYLAUNCH_CONFIG=settings))


def _cli(settings: str, *args: str) -> str:
    out = subprocess.run([*CLI, *args, "--config", settings], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_htp_on_a_login_node_submits_by_itself_on_the_launching_python(tmp_path,
                                                                        slurm_cluster):
    settings = _settings(tmp_path)
    out = _launch(tmp_path, settings)
    assert out.returncode == 0, out.stderr
    assert "submitted as Slurm job " in out.stderr and "rsync" not in out.stderr
    states = out.stdout.splitlines()[0]
    assert states == "states " + str(["succeeded"] * 3 + ["failed"] + ["succeeded"] * 2)
    results = [line.split(" ", 2)[2] for line in out.stdout.splitlines()[1:]]
    assert results[3] == "-" and results[0] == f"{{'lr': 0, 'python': {sys.executable!r}}}"
    batch = next((tmp_path / "logs/.batches").iterdir())  # in the launch's own log folder
    packer = (batch / "htp.sbatch").read_text().splitlines()[-1]
    assert packer.startswith(f"exec {sys.executable} {batch}/.blobs/")
    listed = _cli(settings, "ls")
    assert listed.count("\tsucceeded\t") == 5 and "lr 3 diverged" in listed


def test_a_batch_written_to_copy_says_so_and_a_wait_raises_at_once(tmp_path, slurm_cluster):
    settings = _settings(tmp_path)
    out = _launch(tmp_path, settings, options=", submit=False")
    assert out.returncode == 1
    assert "NotSubmittedError: run " in out.stderr and "Traceback" in out.stderr
    batch = next((tmp_path / "logs/.batches").iterdir())
    submit = f"bash {batch}/submit.sh"
    said = f"written to batch {batch}, not submitted: run on this machine: {submit}"
    assert said in out.stderr.splitlines()[-1]
    assert f"  submit it on this machine: {submit}\n" in out.stderr  # (the launch's note)
    listed = _cli(settings, "ls")
    assert listed.count(f"queued: {said}") == 6
    run_id = listed.splitlines()[1].split("\t")[0]
    assert f"waiting for:      {said}\n" in _cli(settings, "status", run_id)
    job = get_job(run_id, config=settings)
    with pytest.raises(NotSubmittedError, match=f"run {run_id} was {said}"):
        job.result()  # (no timeout: it would wait forever)
    subprocess.run(submit.split(), check=True, capture_output=True)  # as the note says
    assert job.wait(timeout=180) in (JobState.SUCCEEDED, JobState.FAILED)
    assert "not submitted" not in _cli(settings, "ls")


def test_sss_on_a_login_node_submits_by_itself(cfg, slurm_cluster, stand_in, tmp_path):
    cfg.update(SSS_CPU_IMAGE=str(stand_in), SSS_PYTHON=sys.executable, SLURM_SIGNAL_SECONDS=30,
               SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=1, time_in_mins=10)),
               CODE_DIRS_TO_MOUNT=[dict(local_dir=str(TESTS_DIR),
                                        mount_point=str(tmp_path / "in-image/code"))])
    jobs = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="sss", config=cfg)
    assert [j.result(timeout=180) for j in jobs] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    backend = jobs[0].launch_info["backend"]
    assert backend["slurm_job_id"] and backend["job_log_dir"] == str(jobs[0].log_dir)
    submit = Path(backend["batch_dir"], "submit.sh").read_text()
    assert f"submit() {{ {sys.executable} .blobs/" in submit  # (outside the image)


def test_pbs_htp_on_a_login_node_submits_by_itself(cfg, pbs_front_end):
    cfg["PBS_CONFIGS"] = dict(cpu=dict(select=1, ncpus=1, walltime=10))
    jobs = run_sweep(jobfns.double, [{"x": 1}, {"x": 2}], mode="pbs_htp", config=cfg)
    assert wait_all(jobs, timeout=180) == [JobState.SUCCEEDED] * 2
    assert [j.result() for j in jobs] == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    backend = jobs[0].launch_info["backend"]
    assert backend["pbs_job_id"]
    packer = Path(backend["batch_dir"], "htp.pbs").read_text().splitlines()[-1]
    assert packer.startswith(f"exec {sys.executable} ")


def test_sss_python_starts_htp_runs_outside_an_image(cfg, tmp_path):
    cfg.update(SSS_SUBMIT=False, SSS_CLUSTER_HOST="me@login.example.org",
               SSS_LOG_DIR="/scratch/me/logs", SSS_PYTHON="/scratch/me/env/bin/python",
               SLURM_PYTHON="/usr/bin/python3", SSS_SCRIPT_PATH=None,
               SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=4, time_in_mins=10)))
    (job,) = run_sweep(jobfns.train, [{}], mode="htp", config=cfg)
    batch = Path(job.launch_info["backend"]["batch_dir"])
    there = job.launch_info["backend"]["cluster_batch_dir"]
    assert (batch / "htp.sbatch").read_text().splitlines()[-1].startswith(
        f"exec /scratch/me/env/bin/python {there}/.blobs/")
    assert "exec /scratch/me/env/bin/python \"$BUNDLE\"/job.pyz run" in (
        batch / "tasks.txt").read_text()
    assert (batch / "submit.sh").read_text().splitlines()[4].startswith(
        "submit() { /scratch/me/env/bin/python .blobs/")


def _venv_with_cloudpickle_2(folder: Path, base: str) -> Path:
    """A venv of ``base`` (a Python 3.11) whose cloudpickle is 2.1.0 (pyenv's own copy)."""
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True)
    site = folder / "lib/python3.11/site-packages"
    packages = PYENV / "lib/python3.11/site-packages"
    for name in ("cloudpickle", "cloudpickle-2.1.0.dist-info"):
        shutil.copytree(packages / name, site / name)
    python = folder / "bin/python"
    said = subprocess.run([python, "-c", "import cloudpickle; print(cloudpickle.__version__)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    assert said == "2.1.0" != cloudpickle.__version__
    return python


@pytest.mark.parametrize("setting", ["python", "SLURM_PYTHON"])
def test_a_cluster_python_of_another_cloudpickle_major_is_refused_at_launch(
        remote_cfg, ssh_cluster, setting):
    from test_remote import _with, assert_nothing_made

    folder = ssh_cluster / f"cp2-venv-{setting}"
    shutil.rmtree(folder, ignore_errors=True)
    old = _venv_with_cloudpickle_2(folder, "/usr/bin/python3")
    user = pwd.getpwnam(REMOTE_USER)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(folder)], check=True)
    config = _with(remote_cfg, python=str(old)) if setting == "python" \
        else dict(remote_cfg, SLURM_PYTHON=str(old))
    fix = "'python' in CLUSTERS['test'] (or SLURM_PYTHON)" if setting == "python" \
        else "SLURM_PYTHON to"
    for mode in ("slurm", "htp"):
        with pytest.raises(LaunchError) as refused:
            run_sweep(jobfns.double, [{"x": 1}], mode=mode, config=config)
        said = str(refused.value)
        assert f"{old} on cluster 'test'" in said and "cloudpickle 2.1.0" in said
        assert f"cloudpickle {cloudpickle.__version__}" in said
        assert "cloudpickle 2.x cannot load what cloudpickle 3.x pickles" in said
        assert f"Set {fix}" in said
        assert_nothing_made(remote_cfg)


def test_a_run_on_a_python_that_cannot_load_it_names_both_sides_versions(cfg, tmp_path,
                                                                         slurm_cluster):
    """A batch written to copy is never asked about its Python: submitted by hand with
    SSS_PYTHON set to a cloudpickle 2 venv, its runs fail saying why."""
    old = _venv_with_cloudpickle_2(tmp_path / "cp2-venv", str(PYENV / "bin/python3"))
    cfg.update(SSS_SUBMIT=False, SSS_PYTHON=str(old), SLURM_SIGNAL_SECONDS=30,
               SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=1, time_in_mins=10)))

    def train(doodad_config, variant):  # (pickled by value, as a script's own function is)
        return variant["x"]

    (job,) = run_sweep(train, [{"x": 1}], mode="htp", config=cfg)
    batch = job.launch_info["backend"]["batch_dir"]
    subprocess.run(["bash", f"{batch}/submit.sh"], check=True, capture_output=True)
    assert job.wait(timeout=180) is JobState.FAILED
    error = job.info()["error"]
    assert error.startswith("cannot load the pickled payload: ")
    assert f"{old} has Python 3.11.7 and cloudpickle 2.1.0" in error
    assert (f"pickled with Python 3.11 and cloudpickle {cloudpickle.__version__}. Start runs "
            f"with a Python 3.11 that has cloudpickle 3.x: set SLURM_PYTHON, PBS_PYTHON, "
            "SSS_PYTHON") in error


def test_off_a_login_node_htp_writes_a_batch_whose_steps_name_no_placeholder(cfg, monkeypatch,
                                                                           capsys):
    monkeypatch.setenv("PATH", "/nonexistent")  # a laptop: no sbatch here
    cfg.update(SSS_LOG_DIR="/scratch/me/logs", SSS_SCRIPT_PATH=None,
               SLURM_CONFIGS=dict(cpu=dict(max_num_cores_per_node=4, time_in_mins=10)))
    (job,) = run_sweep(jobfns.train, [{}], mode="htp", config=cfg)
    backend = job.launch_info["backend"]
    note = capsys.readouterr().err
    assert "CLUSTER:" not in note
    assert (f"  copy it:  copy {backend['batch_dir']}/ to {backend['cluster_batch_dir']}/ on "
            "the cluster (SSS_CLUSTER_HOST=user@login-node makes this an rsync command)\n"
            f"  then, on the cluster: bash {backend['cluster_batch_dir']}/submit.sh\n") in note
    assert (Path(backend["batch_dir"]) / "submit.sh").read_text().splitlines()[4].startswith(
        "submit() { python3 .blobs/")  # (a cluster this machine does not know)
    with pytest.raises(NotSubmittedError, match="not submitted: copy "):
        wait_all([job])
    cfg["SSS_CLUSTER_HOST"] = "me@login.example.org"
    run_sweep(jobfns.train, [{}], mode="htp", config=cfg, exp_name="named")
    assert "  copy it:  rsync -a " in capsys.readouterr().err


def test_a_batch_written_for_a_cluster_over_ssh_names_it_in_its_steps(remote_cfg, ssh_cluster,
                                                                      capsys):
    (job,) = run_sweep(jobfns.double, [{"x": 1}], mode="htp", config=remote_cfg,
                       submit=False)
    there = job.launch_info["backend"]["cluster_batch_dir"]
    note = capsys.readouterr().err
    assert f" easylaunch-test-cluster:{there}/\n" in note  # the rsync names the host
    assert f"  then, on cluster 'test' (easylaunch-test-cluster): bash {there}/submit.sh\n" in note
    submit = Path(job.launch_info["backend"]["batch_dir"], "submit.sh").read_text()
    assert f"submit() {{ {ssh_cluster}/venv/bin/python .blobs/" in submit  # (~ made absolute)
    assert not job.launch_info["backend"].get("slurm_job_id")


def test_a_batch_written_over_ssh_needs_no_sss_log_dir(remote_cfg, ssh_cluster, capsys):
    del remote_cfg["SSS_LOG_DIR"]  # (the cluster's log_dir is the default)
    (job,) = run_sweep(jobfns.double, [{"x": 1}], mode="htp", config=remote_cfg,
                       submit=False)
    there = job.launch_info["backend"]["cluster_batch_dir"]
    assert there.startswith(f"{ssh_cluster}/runs/")  # (under the cluster's log_dir, ~ made
    assert f"bash {there}/submit.sh\n" in capsys.readouterr().err  # absolute)
    assert Path(job.launch_info["backend"]["batch_dir"], "submit.sh").is_file()


def test_the_runs_python_of_htp_is_asked_after_sss_pre_cmds(remote_cfg, ssh_cluster):
    """htp's runs outside an image start after SSS_PRE_CMDS: the preflight asks their
    Python the same way (here a PATH that finds a cloudpickle 2 venv's ``python``)."""
    folder = ssh_cluster / "cp2-venv-pre-cmds"
    shutil.rmtree(folder, ignore_errors=True)
    _venv_with_cloudpickle_2(folder, "/usr/bin/python3")
    user = pwd.getpwnam(REMOTE_USER)
    subprocess.run(["chown", "-R", f"{user.pw_uid}:{user.pw_gid}", str(folder)], check=True)
    config = dict(remote_cfg, SSS_PYTHON="python",
                  SSS_PRE_CMDS=[f"export PATH={folder}/bin:$PATH"])
    with pytest.raises(LaunchError, match=r"python on cluster 'test' \(easylaunch-test-cluster"
                                          r"\) has Python 3\.\d+\.\d+ and cloudpickle 2\.1"):
        run_sweep(jobfns.double, [{"x": 1}], mode="htp", config=config)


@pytest.mark.parametrize("mode, key", [("slurm", "SLURM_PYTHON"), ("htp", "SSS_PYTHON")])
def test_a_runs_python_under_the_far_home_starts_the_runs(remote_cfg, ssh_cluster, mode, key):
    """(Job scripts name the Python in quotes: its ~ is made the cluster's home at launch.)"""
    (job,) = run_sweep(jobfns.double, [{"x": 2}], mode=mode, config=dict(
        remote_cfg, **{key: "~/venv/bin/python"}))
    assert job.result(timeout=120)["y"] == 4
