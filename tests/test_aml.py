"""The aml mode end to end: azure-ai-ml against an Azure ML workspace stand-in, Azurite for the
datastore.

Azure ML has no emulator, so ``aml_stubs.AmlWorkspace`` answers the workspace calls behind the
Resource Manager stand-in (``azure_stubs.ArmStub``, which also serves Entra ID's tokens and the
cloud metadata azure-ai-ml reads from ARM_CLOUD_METADATA_URL), and plays each created job: its
command once per process with Azure ML's distribution variables, its managed identity through
an Instance Metadata Service stand-in whose tokens Azurite (OAuth on, over HTTPS) checks. The
settings are the seed's own files: aml.yaml, the workspace's config.json, a blob account file.
"""

import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import aml_stubs
import azure_stubs
import jobfns
import pytest
from helpers import assert_no_secrets, wait_for, write_settings

pytest.importorskip("azure.ai.ml")
blob = pytest.importorskip("azure.storage.blob")

from easylaunch import (  # noqa: E402
    EasyLaunchError,
    Job,
    JobState,
    run_command,
    run_experiment,
    run_sweep,
)
from easylaunch_job.cloud.stores import AzureBlobStore  # noqa: E402

pytestmark = pytest.mark.skipif(not azure_stubs.AZURITE.exists(),
                                reason="Azurite is not installed: run scripts/setup.sh")

# made up here, so that a grep for them cannot find this file's own text in a code snapshot
SECRET = "aml-secret-" + uuid.uuid4().hex
ACCOUNT_KEY = "key-" + uuid.uuid4().hex  # in the seed's blob account file, never to be read
CONTAINER = "azureml-blobstore"
EASYLAUNCH = str(Path(sys.executable).parent / "easylaunch")


@pytest.fixture(scope="module")
def arm(azure_tls, azurite):
    blob.BlobServiceClient.from_connection_string(
        azure_stubs.connection_string(azurite), connection_verify=str(azure_tls[0])
    ).create_container(CONTAINER)
    stub = azure_stubs.ArmStub({"LANG": "C.UTF-8"}, azure_tls, SECRET)
    workspace = aml_stubs.AmlWorkspace(stub, azurite, CONTAINER)
    yield SimpleNamespace(stub=stub, ws=workspace)
    workspace.close()
    stub.close()


@pytest.fixture
def aml(arm, azurite, azure_tls, monkeypatch, tmp_path):
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
                 "AZURE_STORAGE_CONNECTION_STRING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(azure_tls[0]))
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", arm.stub.url)
    monkeypatch.setenv("ARM_CLOUD_METADATA_URL",
                       f"{arm.stub.url}/metadata/endpoints?api-version=2019-05-01")
    monkeypatch.setenv("AZUREML_CURRENT_CLOUD", "EasylaunchStandIn")  # (the SDK sets it)
    arm.ws.sandbox = tmp_path / "sandbox"
    arm.ws.autostart = True
    container = blob.BlobServiceClient.from_connection_string(
        azure_stubs.connection_string(azurite)).get_container_client(CONTAINER)
    return SimpleNamespace(container=container, ws=arm.ws, stub=arm.stub)


def seed_files(root: Path, **yaml_changes) -> Path:
    """The seed's aux_data: aml.yaml, the workspace's config.json, a blob account file."""
    import yaml

    (root / "aux_data/aml").mkdir(parents=True)
    (root / "aux_data/configs").mkdir(parents=True)
    (root / "aux_data/aml/config.json").write_text(json.dumps({
        "subscription_id": azure_stubs.SUBSCRIPTION,
        "resource_group": azure_stubs.RESOURCE_GROUP, "workspace_name": aml_stubs.WORKSPACE}))
    (root / "aux_data/configs/blob_account.yaml").write_text(yaml.safe_dump({
        "account_name": azure_stubs.DEV_ACCOUNT, "account_key": ACCOUNT_KEY,
        "sas_token": "?sv=" + ACCOUNT_KEY, "container_name": CONTAINER}))
    account = "./aux_data/configs/blob_account.yaml"
    seed = {"azure_blob_config_file": None, "datastore_name": None,
            "aml_config": "aux_data/aml/config.json",
            "config_param": {"code_path": {"azure_blob_config_file": account,
                                           "path": "me/code/quickdetection.zip"},
                             "data_folder": {"azure_blob_config_file": account,
                                             "path": "me/data"},
                             "output_folder": {"azure_blob_config_file": account,
                                               "path": "me/output"}},
            "use_custom_docker": True, "compute_target": "cpu-cluster", "aks_compute": False,
            "docker": {"image": "amsword/setup:py36pt16"}, "experiment_name": "me",
            "use_cli_auth": True, "multi_process": True, "gpu_per_node": 2,
            "env": {"NCCL_IB_DISABLE": "0"}, **yaml_changes}
    path = root / "aux_data/aml/aml.yaml"
    path.write_text(yaml.safe_dump(seed))
    return path


@pytest.fixture
def aml_cfg(cfg, aml, azurite, tmp_path, monkeypatch):
    """The seed's files, a service principal, and the settings file later processes read."""
    values = dict(cfg, AML_YAML=str(seed_files(tmp_path / "seed")),
                  AZ_TENANT_ID=azure_stubs.TENANT, AZ_CLIENT_ID=azure_stubs.CLIENT_ID,
                  AZ_SECRET=SECRET, AZ_CONN_STR=azure_stubs.connection_string(azurite),
                  AML_STORAGE_ACCOUNT_URL=azurite, AML_PYTHON=sys.executable,
                  AML_WORKDIR=str(tmp_path / "nodes"), AML_SYNC_INTERVAL_SECONDS=0.5)
    monkeypatch.setenv("EASYLAUNCH_CONFIG", str(write_settings(tmp_path / "settings.py",
                                                                values)))
    return values


def blob_keys(aml, prefix: str = "") -> list[str]:
    return [b.name for b in aml.container.list_blobs(name_starts_with=prefix)]


def blob_text(aml, key: str) -> str | None:
    client = aml.container.get_blob_client(key)
    return client.download_blob().readall().decode() if client.exists() else None


def job_of(aml, job) -> dict:
    return aml.ws.jobs[job.launch_info["backend"]["instance_id"]]


def played(aml, job) -> aml_stubs.PlayedJob:
    return aml.ws.played[job.launch_info["backend"]["instance_id"]]


def data_and_output(doodad_config, variant):
    """Read the mounted data folder, write into the mounted output folder."""
    import os

    data = Path(os.environ["AZURE_ML_INPUT_data"]) / "numbers.txt"  # noqa: SIM112 - its name
    out = Path(os.environ["AZURE_ML_OUTPUT_output"]) / f"{variant['tag']}.txt"  # noqa: SIM112
    out.write_text(f"seen {data.read_text()}")
    return {"tag": variant["tag"], "nccl": os.environ.get("NCCL_IB_DISABLE")}


# -- a sweep from launch to results -------------------------------------------------------------


def test_a_sweep_runs_as_jobs_with_the_seeds_settings_and_comes_back(aml_cfg, aml,
                                                                     monkeypatch):
    aml.container.upload_blob("me/data/numbers.txt", b"1 2 3", overwrite=True)
    uploaded = []
    real = AzureBlobStore.put_bytes
    monkeypatch.setattr(AzureBlobStore, "put_bytes", lambda self, key, data: (
        uploaded.append(key), real(self, key, data))[1])
    jobs = run_sweep(data_and_output, [{"tag": t} for t in ("a", "b")], exp_name="sweep",
                     mode="aml", config=aml_cfg)
    results = [j.result(timeout=90) for j in jobs]
    assert results == [{"tag": "a", "nccl": "0"}, {"tag": "b", "nccl": "0"}]
    # what was submitted: the seed's compute, image, experiment, env, folders; an identity
    props = job_of(aml, jobs[0])["properties"]
    assert props["computeId"].endswith("/computes/cpu-cluster")
    assert props["experimentName"] == "me" and props["identity"] == {"identityType": "Managed"}
    assert props["environmentVariables"]["NCCL_IB_DISABLE"] == "0"
    assert props["inputs"]["data"] == {"uri": "azureml://datastores/workspaceblobstore/paths/"
                                              "me/data/", "mode": "ReadOnlyMount",
                                       "jobInputType": "uri_folder"}
    assert props["outputs"]["output"]["mode"] == "ReadWriteMount"
    assert "distribution" not in props or props["distribution"] is None  # one process
    [env] = aml.ws.environments.values()
    assert env["properties"]["image"] == "amsword/setup:py36pt16"
    assert wait_for(lambda: blob_text(aml, "me/output/b.txt") == "seen 1 2 3", 30)
    # code snapshots once, and the second sweep uploads only its bundles and manifest
    kinds = [k.split("/")[1] for k in uploaded]
    assert kinds.count("snapshots") == 1 and kinds.count("bundles") == 1  # (one archive a fleet)
    uploaded.clear()
    again = run_sweep(data_and_output, [{"tag": "c"}], exp_name="sweep", mode="aml",
                      config=aml_cfg)
    assert [k.split("/")[1] for k in uploaded] == ["bundles", "manifests"]
    assert again[0].result(timeout=90)["tag"] == "c"
    # no credential anywhere: the jobs' bodies, the datastore, the run folders, the registry
    secrets = [SECRET, ACCOUNT_KEY, azure_stubs.DEV_KEY,
               *[t for t, who in aml.stub.tokens.items() if who == "client"]]
    texts = [json.dumps(aml.ws.jobs), json.dumps(list(aml.ws.environments.values()))]
    texts += [aml.container.download_blob(k).readall().decode("latin-1")
              for k in blob_keys(aml, "easylaunch/")]
    assert_no_secrets(texts, [j.log_dir for j in jobs] + [Path(aml_cfg["LOCAL_LOG_DIR"]).parent
                                                          / "home"], secrets)


def test_two_nodes_of_two_processes_see_their_ranks_and_q_brings_every_ranks_log(
        aml_cfg, aml, tmp_path):
    pytest.importorskip("torch")
    job = run_experiment(jobfns.allreduce, mode="aml", config=aml_cfg, num_gpus=4,
                         exp_name="ranks")
    props = job_of(aml, job)["properties"]
    assert props["resources"]["instanceCount"] == 2
    assert props["distribution"] == {"distributionType": "PyTorch",
                                     "processCountPerInstance": 2}
    assert job.wait(timeout=180) is JobState.SUCCEEDED, played(aml, job).logs()
    # (each rank added rank + 1: all four took part)
    assert job.result() == {"sum": 10.0, "world_size": 4, "backend": "gloo",
                            "ranks": (0, 0, 4)}
    assert wait_for(lambda: aml.ws.jobs[played(aml, job).name]["properties"]["status"]
                    == "Completed", 30), (aml.ws.jobs[played(aml, job).name]["properties"][
                        "status"], played(aml, job).logs())
    # `easylaunch q <end of id>`: every rank's log downloaded, rank 0's tail shown
    out = subprocess.run([EASYLAUNCH, "q", job.id[-5:]], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "state:            succeeded" in out.stdout
    assert "stdout.rank1.log ... stdout.rank3.log (3 ranks" in out.stdout
    for rank in (1, 2, 3):
        assert (job.log_dir / f"stdout.rank{rank}.log").exists()
    assert f"instance_id={played(aml, job).name}" in out.stdout


def test_a_command_sweep_and_its_exit_codes(aml_cfg, aml):
    ok, bad = (run_command(argv, mode="aml", config=aml_cfg, exp_name="cmds")
               for argv in (["bash", "-c", "echo fine"], ["bash", "-c", "echo gone >&2; exit 3"]))
    assert ok.wait(timeout=90) is JobState.SUCCEEDED, played(aml, ok).logs()
    assert bad.wait(timeout=90) is JobState.FAILED
    assert bad.info()["exit_code"] == 3 and bad.info()["error"].endswith("gone")


# -- cancel, resubmit ---------------------------------------------------------------------------


def test_cancel_from_a_later_process_and_resubmit(aml_cfg, aml):
    job = run_experiment(jobfns.wait_for_release, mode="aml", config=aml_cfg, exp_name="cr")
    prefix = job.launch_info["backend"]["log_prefix"]
    assert wait_for(lambda: '"running"' in (blob_text(aml, f"{prefix}/status.json") or ""),
                    60), played(aml, job).logs()
    out = subprocess.run([EASYLAUNCH, "cancel", job.id], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert job.status() is JobState.CANCELLED
    # the agent stopped the run and synced it; its job then ended (or was cancelled)
    assert wait_for(lambda: job_of(aml, job)["properties"]["status"] in ("Completed",
                                                                         "Canceled"), 40)
    assert '"cancelled"' in blob_text(aml, f"{prefix}/status.json")
    out = subprocess.run([EASYLAUNCH, "resubmit", job.id, "-y"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    line = [x for x in out.stdout.splitlines() if x.startswith(f"resubmitted {job.id} as ")][0]
    again = Job.from_run_dir(line.split()[-1])
    name = again.launch_info["backend"]["instance_id"]
    run_dir = Path(aml_cfg["AML_WORKDIR"]) / name / again.exp_name / again.log_dir.name
    assert wait_for(lambda: run_dir.is_dir(), 60), aml.ws.played[name].logs()
    (run_dir / jobfns.RELEASE).write_text("go")
    assert again.wait(timeout=90) is JobState.SUCCEEDED
    assert again.launch_info["resubmitted_from"] == job.id


# -- bad input: refused before anything is made -------------------------------------------------


@pytest.mark.parametrize("change, message", [
    ({"AML_WORKSPACE": "nope"}, "the workspace 'nope' is not in resource group "
                                "'easylaunch-rg'; fix AML_WORKSPACE"),
    ({"AML_COMPUTE": "tpu-cluster"}, "the compute target 'tpu-cluster' is not in workspace "
                                     "'easylaunch-ws'.*az ml compute list"),
    ({"AML_ENVIRONMENT": "azureml:nope:1"}, "the environment 'azureml:nope:1' is not in"),
    ({"AML_DATASTORE": "elsewhere"}, "the datastore 'elsewhere' .* is not in workspace"),
    ({"AML_RESOURCE_GROUP": "nope"}, "ResourceGroupNotFound: Resource group 'nope' could not "
                                     "be found.; check AML_SUBSCRIPTION_ID"),
    ({"AZ_SECRET": "wrong"}, "Azure refused the credentials.*Invalid client secret"),
    ({"AML_YAML": None}, "AML_SUBSCRIPTION_ID is not set"),
    ({"AML_DISTRIBUTION": "horovod"}, "AML_DISTRIBUTION must be one of pytorch, mpi"),
])
def test_bad_settings_are_refused_before_anything_is_made(aml_cfg, aml, change, message, exp):
    before = set(aml.ws.jobs)
    with pytest.raises(EasyLaunchError, match=message):
        run_sweep(jobfns.quick, [{}, {}], exp_name=exp, mode="aml",
                  config=dict(aml_cfg, **change))
    assert not (Path(aml_cfg["LOCAL_LOG_DIR"]) / exp).exists()
    assert set(aml.ws.jobs) == before and not blob_keys(aml, f"easylaunch/logs/{exp}")


def test_restarts_of_a_job_of_several_processes_are_refused(aml_cfg, aml, exp):
    with pytest.raises(EasyLaunchError, match="a job of 2 node.* does not restart its runs yet"
                                              ".*max_restarts=0"):
        run_experiment(jobfns.quick, exp_name=exp, mode="aml", config=aml_cfg, num_gpus=4,
                       max_restarts=2)
    assert not (Path(aml_cfg["LOCAL_LOG_DIR"]) / exp).exists()


def test_gpus_that_do_not_fill_whole_nodes_are_refused(aml_cfg, aml, exp):
    with pytest.raises(EasyLaunchError, match="num_gpus=3 must be a multiple of "
                                              "AML_GPU_PER_NODE"):
        run_experiment(jobfns.quick, exp_name=exp, mode="aml", config=aml_cfg, num_gpus=3)


def test_the_seeds_files_fill_what_the_settings_leave_unset(tmp_path):
    """aml.yaml and config.json as the seed wrote them; a setting wins over them; the blob
    account files they name are not opened (here they do not even exist)."""
    from easylaunch.modes.cloud.aml import read_seed_files

    path = seed_files(tmp_path / "repo")
    (tmp_path / "repo/aux_data/configs/blob_account.yaml").unlink()
    values = read_seed_files({"AML_YAML": str(path), "AML_COMPUTE": "gpu-cluster",
                              "AML_IMAGE": None, "AML_ENVIRONMENT": None})
    assert values["AML_COMPUTE"] == "gpu-cluster"  # the setting, not compute_target
    assert values["AML_IMAGE"] == "amsword/setup:py36pt16"
    assert values["AML_WORKSPACE"] == aml_stubs.WORKSPACE  # through aml_config, relative to
    assert values["AML_CONFIG"] == str(tmp_path / "repo/aux_data/aml/config.json")  # aux_data's
    assert (values["AML_GPU_PER_NODE"], values["AML_MULTI_PROCESS"]) == (2, True)
    assert values["AML_DATA_FOLDERS"] == {"data": "me/data"}  # (code_path: not a folder)
    assert values["AML_OUTPUT_FOLDER"] == "me/output"
    assert values["AML_ENV"] == {"NCCL_IB_DISABLE": "0"}
    with pytest.raises(EasyLaunchError, match="cannot read .*nope.yaml.*fix AML_YAML"):
        read_seed_files({"AML_YAML": str(tmp_path / "nope.yaml")})


def test_doctor_names_what_the_aml_mode_lacks(tmp_path, capsys):
    from easylaunch.cli import main as cli

    settings = tmp_path / "settings.py"
    settings.write_text(f"AML_YAML = {str(tmp_path / 'nope.yaml')!r}\n")
    cli(["doctor", str(settings)])
    assert f"mode aml: AML_YAML names no file ({tmp_path / 'nope.yaml'})" in \
        capsys.readouterr().out
    settings.write_text(f"AML_YAML = {str(seed_files(tmp_path / 'repo'))!r}\n")
    cli(["doctor", str(settings)])
    assert "mode aml: settings complete" in capsys.readouterr().out
    settings.write_text("AML_WORKSPACE = 'ws'\n")
    cli(["doctor", str(settings)])
    assert "mode aml: AML_SUBSCRIPTION_ID is not set; AML_RESOURCE_GROUP is not set; " \
           "AML_COMPUTE is not set" in capsys.readouterr().out
