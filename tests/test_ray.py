"""The ray mode end to end on a real Ray cluster (``ray start --head``) with moto's S3 server
and Azurite as storage paths, all in a network namespace of this module's own where only ``lo``
is up (tests/ray_cluster.py). Every launch and every ``easylaunch`` command runs in the namespace;
the tests read the run folders they leave on the shared file system."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import jobfns
import pytest
from helpers import assert_no_secrets, wait_for, write_settings
from ray_cluster import (
    AZURITE,
    BUCKET,
    DASHBOARD_PORT,
    KEYS,
    S3_PORT,
    RayCluster,
    job_processes,
    wait_until_up,
)

from easylaunch import LaunchError, run_experiment
from easylaunch_job.cloud.platforms import ENV_RAY_JOB

CANARY = "canary-secret-" + os.urandom(8).hex()


@pytest.fixture(scope="module")
def ray():
    if os.geteuid() != 0:
        pytest.skip("the Ray tests make a network namespace: run them as root (scripts/test.sh)")
    if not AZURITE.exists():
        pytest.skip(f"Azurite is not installed at {AZURITE}: run scripts/setup.sh")
    # (a short folder: Ray's socket paths under it must stay within AF_UNIX's 107 bytes, which
    # pytest-xdist's tmp_path of a worker passes)
    root = Path(tempfile.mkdtemp(prefix="el-ray-", dir="/tmp"))
    cluster = RayCluster(f"el-ray-{os.getpid()}", root)
    try:
        cluster.start()
        wait_until_up(cluster)
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ray_cfg(ray, tmp_path):
    """Settings for launches onto the cluster, also as a settings file (``--config``)."""
    cfg = ray.config(tmp_path / "logs")
    write_settings(tmp_path / "ray_settings.py", cfg)
    return cfg


def easylaunch(ray, tmp_path, *args, **kw):
    """``easylaunch ARGS --config <the test's settings>`` in the namespace."""
    return ray.easylaunch(*args, "--config", str(tmp_path / "ray_settings.py"), **kw)


SWEEPS = """
import json, sys
import jobfns
from easylaunch import run_commands, run_sweep
cfg = json.loads(sys.argv[1])
fns = run_sweep(jobfns.double, [dict(x=x) for x in (1, 2, 3)], exp_name="ray-fns", mode="ray",
                config=cfg)
cmds = run_commands("sh -c 'echo ran {x} in $EASYLAUNCH_RUN_ID; exit {code}'",
                    [dict(x=7, code=0), dict(x=8, code=3)], exp_name="ray-cmds", mode="ray",
                    config=cfg)
for job in fns + cmds:
    job.wait(timeout=180)
    job.fetch()
print(json.dumps({"runs": [[j.id, str(j.log_dir), j.status().value] for j in fns + cmds],
                  "results": [j.result() for j in fns]}))
"""


def test_a_function_sweep_and_a_command_sweep_run_as_ray_jobs_and_come_back(ray, ray_cfg,
                                                                           tmp_path):
    out = json.loads(ray.python(SWEEPS, json.dumps(ray_cfg), timeout=300,
                                env={"EASYLAUNCH_CANARY": CANARY}).splitlines()[-1])
    runs = out["runs"]
    assert [state for _, _, state in runs] == ["succeeded"] * 4 + ["failed"]
    assert out["results"] == [{"x": x, "y": 2 * x} for x in (1, 2, 3)]
    folders = [Path(folder) for _, folder, _ in runs]
    assert "doubling 2" in (folders[1] / "stdout.log").read_text()  # fetched from the bucket
    assert f"ran 7 in {runs[3][0]}" in (folders[3] / "stdout.log").read_text()
    failed = json.loads((folders[4] / "status.json").read_text())
    assert failed["exit_code"] == 3

    jobs = ray.jobs()
    mine = {f"easylaunch-{run_id}": jobs[f"easylaunch-{run_id}"] for run_id, _, _ in runs}
    assert {j["status"] for j in mine.values()} == {"SUCCEEDED"}  # the agent ended each job
    assert [j["metadata"]["easylaunch_runs"] for j in mine.values()] == [r for r, _, _ in runs]
    # nothing Ray holds of the jobs, the run folders or the bucket carries a credential
    assert_no_secrets([json.dumps(j) for j in mine.values()] + ray.s3_keys(),
                      [tmp_path / "logs", tmp_path / "home"], [KEYS[1], CANARY])
    # each job's work folder is gone; the code snapshot was unpacked once for all of them
    left = list(Path(ray_cfg["RAY_WORKDIR"]).iterdir())
    assert [p.name for p in left] == [".snapshots"] and len(list(left[0].iterdir())) == 1
    # a second sweep with the same code uploads no snapshot and no job side again
    shared = sorted(k for k in ray.s3_keys("exps/") if "/snapshots/" in k or "/agent/" in k)
    again = ("import json, sys, jobfns; from easylaunch import run_sweep; "
             "jobs = run_sweep(jobfns.double, [dict(x=5)], exp_name='ray-fns', mode='ray', "
             "config=json.loads(sys.argv[1])); print(jobs[0].result(timeout=120))")
    assert ray.python(again, json.dumps(ray_cfg)).split()[-1] == "10}"
    assert sorted(k for k in ray.s3_keys("exps/") if "/snapshots/" in k or "/agent/" in k) \
        == shared
    # Ray and the S3 server listen on loopback alone, and only in the namespace
    inside = ray.listening()
    assert f"127.0.0.1:{DASHBOARD_PORT}" in inside
    assert all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")) for a in inside)
    outside = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    assert not {f":{DASHBOARD_PORT}", f":{S3_PORT}", ":6379"} & {
        line.split()[3][line.split()[3].rindex(":"):] for line in outside.splitlines()}


LAUNCH_AND_EXIT = """
import json, sys
import jobfns
from easylaunch import run_experiment
cfg, fn, variant, restarts = (json.loads(a) for a in sys.argv[1:5])
job = run_experiment(getattr(jobfns, fn), variant=variant, exp_name="ray-later", mode="ray",
                     config=cfg, max_restarts=restarts)
print(job.id, job.log_dir)
"""


def launch_and_exit(ray, cfg, fn, variant, restarts=0) -> tuple[str, Path]:
    """Launch one run from a process that then ends; its id and folder."""
    run_id, folder = ray.python(LAUNCH_AND_EXIT, json.dumps(cfg), json.dumps(fn),
                                json.dumps(variant), json.dumps(restarts)).split()[-2:]
    return run_id, Path(folder)


def on_worker(cfg, run_id: str, folder: Path, name: str) -> Path:
    """A file of the run's folder where its job runs it."""
    return Path(cfg["RAY_WORKDIR"]) / f"easylaunch-{run_id}" / "ray-later" / folder.name / name


def test_a_run_is_stopped_from_a_later_process(ray, ray_cfg, tmp_path):
    run_id, folder = launch_and_exit(ray, ray_cfg, "wait_for_release", {"limit": 300})
    assert wait_for(lambda: on_worker(ray_cfg, run_id, folder, "progress.txt").exists(), 60)
    assert wait_for(lambda: "state:            running" in easylaunch(
        ray, tmp_path, "status", run_id).stdout, 30)
    assert wait_for(lambda: "started None" in easylaunch(ray, tmp_path, "logs", run_id).stdout,
                    30)  # the log as last synced

    assert "cancelled" in easylaunch(ray, tmp_path, "cancel", run_id).stdout
    assert json.loads((folder / "status.json").read_text())["state"] == "cancelled"
    assert wait_for(lambda: ray.jobs()[f"easylaunch-{run_id}"]["status"] != "RUNNING", 30)
    assert not on_worker(ray_cfg, run_id, folder, "progress.txt").exists()


def test_a_job_whose_worker_processes_are_killed_is_relaunched_from_its_checkpoint(
        ray, ray_cfg, tmp_path):
    variant = {"steps": 40, "step_seconds": 0.1, "every": 5}
    run_id, folder = launch_and_exit(ray, ray_cfg, "count_steps", variant, restarts=2)
    steps = on_worker(ray_cfg, run_id, folder, "steps.log")
    assert wait_for(lambda: steps.exists() and len(steps.read_text().split("\n")) > 12, 60)
    name = f"easylaunch-{run_id}"
    for pid in job_processes(f"{ENV_RAY_JOB}={name}"):  # a lost worker: all the job's processes
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: ray.jobs()[name]["status"] == "FAILED", 30)

    code = ("import sys; from easylaunch import Job; job = Job.from_run_dir(sys.argv[1]); "
            "print(job.wait(timeout=180).value); print(job.result())")
    state, result = ray.python(code, str(folder), timeout=240).splitlines()[-2:]
    assert state == "succeeded"
    result = eval(result)  # noqa: S307 - a dict the run returned, printed by the test itself
    assert result["attempt"] == 2 and result["steps"] == 40 and result["resumed_from"] >= 5
    restarts = json.loads((folder / "status.json").read_text())["restarts"]
    assert [r["reason"] for r in restarts] == ["lost"]
    assert "Job supervisor actor died" in restarts[0]["error"]
    assert ray.jobs()[f"{name}-relaunch1"]["status"] == "SUCCEEDED"


def test_a_run_resubmitted_from_the_command_line_runs_again(ray, ray_cfg, tmp_path):
    run_id, folder = launch_and_exit(ray, ray_cfg, "double", {"x": 4})
    code = ("import sys; from easylaunch import Job; "
            "print(Job.from_run_dir(sys.argv[1]).wait(timeout=120).value)")
    assert ray.python(code, str(folder)).split()[-1] == "succeeded"
    out = easylaunch(ray, tmp_path, "resubmit", run_id, timeout=180).stdout
    line = [x for x in out.splitlines() if x.startswith(f"resubmitted {run_id} as ")][0]
    new_id, new_folder = line.split()[3].rstrip(":"), Path(line.split()[-1])
    again = ray.python(code, str(new_folder)).split()[-1]
    assert again == "succeeded"
    assert json.loads((new_folder / "launch.json").read_text())["resubmitted_from"] == run_id
    listed = easylaunch(ray, tmp_path, "ls", "--all").stdout
    assert new_id in listed and run_id in listed
    assert "mode:             ray" in easylaunch(ray, tmp_path, "status", new_id).stdout


def test_a_dry_run_says_what_each_job_asks_for_and_submits_nothing(ray, ray_cfg):
    code = ("import json, sys, jobfns; from easylaunch import run_sweep; "
            "p = run_sweep(jobfns.double, [dict(x=x) for x in range(5)], exp_name='ray-dry', "
            "mode='ray', config=json.loads(sys.argv[1]), num_exps_per_instance=2, "
            "dry_run=True); print(json.dumps(p.resources))")
    before = set(ray.jobs())
    shown = json.loads(ray.python(code, json.dumps(ray_cfg)).splitlines()[-1])
    assert shown == {"Ray jobs": 3, "runs per job": 2, "each job asks for": "1 CPU",
                     "cluster": ray.address}
    assert set(ray.jobs()) == before


@pytest.mark.parametrize("change, message", [
    ({"RAY_STORAGE_PATH": None}, "RAY_STORAGE_PATH must look like s3://bucket/prefix"),
    ({"RAY_STORAGE_PATH": "/shared/runs"}, "RAY_STORAGE_PATH must look like"),
    ({"RAY_ADDRESS": "http://127.0.0.1:9"}, "cannot reach the Ray cluster at http://127.0.0.1:9"),
    ({"RAY_NUM_CPUS": -1}, "num_cpus / RAY_NUM_CPUS must be a number >= 0"),
])
def test_bad_settings_are_refused_before_anything_is_made(ray, ray_cfg, tmp_path, change,
                                                          message):
    with pytest.raises(LaunchError, match=message):
        run_experiment(jobfns.double, variant={"x": 1}, exp_name="ray-bad", mode="ray",
                       config=dict(ray_cfg, **change))
    assert not (tmp_path / "logs" / "ray-bad").exists()


@pytest.mark.parametrize("change, kwargs, message", [
    ({"RAY_STORAGE_PATH": "s3://no-such-bucket/x"}, {}, "the bucket 'no-such-bucket' of "
     "RAY_STORAGE_PATH does not exist"),
    ({"RAY_STORAGE_PATH": "az://no-such-container/x"}, {}, "the bucket 'no-such-container' "
     "of RAY_STORAGE_PATH does not exist"),
    ({}, {"use_gpu": True}, "each job asks for 1 GPU but no node of the Ray cluster"),
    ({}, {"num_cpus": 3}, "each job asks for 3 CPU but no node"),
])
def test_what_the_cluster_cannot_do_is_refused_before_anything_is_made(ray, ray_cfg, tmp_path,
                                                                       change, kwargs, message):
    code = ("import json, sys, jobfns; from easylaunch import run_experiment\n"
            "try:\n"
            "    run_experiment(jobfns.double, variant={'x': 1}, exp_name='ray-bad', mode='ray', "
            "config=json.loads(sys.argv[1]), **json.loads(sys.argv[2]))\n"
            "except Exception as exc:\n"
            "    print(type(exc).__name__, exc)\n")
    before = set(ray.jobs())
    out = ray.python(code, json.dumps(dict(ray_cfg, **change)), json.dumps(kwargs))
    assert out.startswith("LaunchError") and message in out, out
    assert not (tmp_path / "logs" / "ray-bad").exists()
    assert set(ray.jobs()) == before


AZURE_SWEEP = """
import json, sys
import jobfns
from easylaunch import run_sweep
jobs = run_sweep(jobfns.double, [dict(x=1), dict(x=2)], exp_name="ray-az", mode="ray",
                 config=json.loads(sys.argv[1]))
print(json.dumps([j.result(timeout=180) for j in jobs] + [j.fetch() for j in jobs]))
"""


def test_runs_come_back_through_azure_blob_storage(ray, ray_cfg, tmp_path):
    """An az:// storage path: Azurite's container holds the code and the run folders; the
    workers sign in with the cluster's own connection string, which no job carries."""
    cfg = dict(ray_cfg, RAY_STORAGE_PATH=f"az://{BUCKET}/exps")
    *results, fetched, _ = json.loads(ray.python(AZURE_SWEEP, json.dumps(cfg)).splitlines()[-1])
    assert results == [{"x": 1, "y": 2}, {"x": 2, "y": 4}]
    assert f"fetched 4 file(s) from az://{BUCKET}/exps/logs/ray-az/" in fetched
    runs = sorted((tmp_path / "logs" / "ray-az").iterdir())
    assert "doubling 1" in (runs[0] / "stdout.log").read_text() + \
        (runs[1] / "stdout.log").read_text()
    code = ("import os, sys; from azure.storage.blob import BlobServiceClient as S; "
            "c = S.from_connection_string(os.environ['AZURE_STORAGE_CONNECTION_STRING']); "
            "print(len(list(c.get_container_client(sys.argv[1]).list_blobs("
            "name_starts_with='exps/logs/ray-az/'))))")
    assert int(ray.python(code, BUCKET).split()[-1]) >= 2 * 4  # status, result, logs of each
    mine = [j for j in ray.jobs().values() if j["metadata"].get("easylaunch_exp") == "ray-az"]
    assert len(mine) == 2 and all("--store az" in j["entrypoint"] for j in mine)
    assert not [j for j in mine if "AccountKey" in json.dumps(j)]


# A launch whose cluster then refuses its dashboard's connections for one poll.
BLIP = """
import json, sys, warnings
import jobfns
from easylaunch import run_experiment
from easylaunch.modes.cloud import ray as ray_mode
job = run_experiment(jobfns.double, variant=dict(x=4), exp_name="ray-blip", mode="ray",
                     config=json.loads(sys.argv[1]))
client = type(ray_mode.job_client(job.launch_info["backend"]["address"]))
answering = client.get_job_info
client.get_job_info = lambda self, name: (_ for _ in ()).throw(ConnectionRefusedError(111))
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    first = job.status().value
client.get_job_info = answering
print(json.dumps([first, [str(w.message) for w in seen], job.result(timeout=120)]))
"""


def test_a_cluster_that_stops_answering_for_a_poll_leaves_its_runs_as_they_were(ray, ray_cfg):
    first, warned, result = json.loads(ray.python(BLIP, json.dumps(ray_cfg)).splitlines()[-1])
    assert first in ("queued", "running")  # not failed, and no traceback
    assert any("the Ray cluster at http://127.0.0.1:8265 did not answer: "
               "ConnectionRefusedError; its runs keep the states last heard until it answers"
               in w for w in warned), warned
    assert result == {"x": 4, "y": 8}


def test_an_azure_path_without_its_account_names_the_fix(cfg, monkeypatch):
    monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
    with pytest.raises(LaunchError, match="an az:// RAY_STORAGE_PATH needs its account: set "
                                          "RAY_STORAGE_LOCATION"):
        run_experiment(jobfns.double, variant={"x": 1}, exp_name="ray-bad", mode="ray",
                       config=dict(cfg, RAY_STORAGE_PATH="az://runs/x",
                                   RAY_ADDRESS="http://127.0.0.1:9"))
    assert not (Path(cfg["LOCAL_LOG_DIR"]) / "ray-bad").exists()


def test_a_missing_cluster_address_names_the_setting(cfg, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(LaunchError, match="no Ray cluster given: set RAY_ADDRESS"):
        run_experiment(lambda c, v: None, exp_name="ray-bad", mode="ray",
                       config=dict(cfg, RAY_STORAGE_PATH=f"s3://{BUCKET}/x"))
    assert not (Path(cfg["LOCAL_LOG_DIR"]) / "ray-bad").exists()


def test_doctor_names_what_the_ray_mode_lacks(tmp_path, monkeypatch, capsys):
    from easylaunch.cli import main as cli

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    settings = tmp_path / "settings.py"
    settings.write_text(f"LOCAL_LOG_DIR = {str(tmp_path / 'logs')!r}\n")
    cli(["doctor", str(settings)])
    assert "mode ray: RAY_STORAGE_PATH is not set; RAY_ADDRESS is not set" in \
        capsys.readouterr().out
    settings.write_text(f"RAY_STORAGE_PATH = 's3://{BUCKET}/x'\n")
    monkeypatch.setenv("RAY_ADDRESS", "http://127.0.0.1:8265")
    cli(["doctor", str(settings)])
    assert "mode ray: settings complete" in capsys.readouterr().out
