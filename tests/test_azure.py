"""The azure mode end to end: Azurite (Microsoft's storage emulator, real) and a Resource
Manager stand-in.

Azure Compute has no emulator, so ``azure_stubs.ArmStub`` speaks Resource Manager's REST format
for the calls used (and Entra ID's token endpoint), and plays each created VM: its custom data
runs with bash in a sandbox folder, with an Instance Metadata Service stand-in whose managed
identity tokens Azurite (OAuth on, over HTTPS) accepts. The launching side signs in with doodad's
AZ_* keys (a service principal) through azure-identity's real flow; the VMs get no key.
"""

import base64
import json
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace

import azure_stubs
import jobfns
import pytest
from helpers import (
    assert_no_secrets,
    check_a_synced_run,
    launch_and_exit,
    wait_for,
    write_settings,
)

pytest.importorskip("azure.mgmt.compute")
blob = pytest.importorskip("azure.storage.blob")
pytest.importorskip("azure.identity")

from easylaunch import EasyLaunchError, JobState, run_command, run_experiment, run_sweep  # noqa: E402
from easylaunch.modes.cloud import base as cloud_base  # noqa: E402
from easylaunch_job.cloud.stores import AzureBlobStore  # noqa: E402

pytestmark = pytest.mark.skipif(not azure_stubs.AZURITE.exists(),
                                reason="Azurite is not installed: run scripts/setup.sh")

# made up here, so that a grep for it cannot find this file's own text in a code snapshot
SECRET = "az-secret-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def arm(azure_tls):
    stub = azure_stubs.ArmStub({"LANG": "C.UTF-8"}, azure_tls, SECRET)
    yield stub
    stub.close()


@pytest.fixture
def az(arm, azurite, azure_tls, monkeypatch, tmp_path):
    """The stand-ins' endpoints and certificate, a fresh container and sandbox."""
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
                 "AZURE_STORAGE_CONNECTION_STRING", "AZURE_SUBSCRIPTION_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(azure_tls[0]))
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", arm.url)
    monkeypatch.setenv("EASYLAUNCH_COMPUTE_URL", arm.url)
    monkeypatch.setattr(cloud_base, "AGENT_POLL_SECONDS", 0.2)
    arm.sandbox = tmp_path / "sandbox"
    service = blob.BlobServiceClient.from_connection_string(
        azure_stubs.connection_string(azurite))
    container = f"runs-{uuid.uuid4().hex[:12]}"
    service.create_container(container)
    return SimpleNamespace(container=service.get_container_client(container), name=container)


@pytest.fixture
def az_cfg(cfg, az, azurite, monkeypatch, tmp_path):
    """doodad's keys, as a doodad config fills them from the environment, and easylaunch's;
    also the settings file of later processes (launches save no credential: a process that
    takes a run up again reads them from its settings)."""
    values = dict(cfg, AZ_SUB_ID=azure_stubs.SUBSCRIPTION, AZ_TENANT_ID=azure_stubs.TENANT,
                AZ_CLIENT_ID=azure_stubs.CLIENT_ID, AZ_SECRET=SECRET, AZ_CONTAINER=az.name,
                AZ_CONN_STR=azure_stubs.connection_string(azurite),
                DEFAULT_AZURE_REGION=azure_stubs.LOCATION,
                DEFAULT_AZURE_INSTANCE_TYPE="Standard_D2s_v5",
                AZURE_RESOURCE_GROUP=azure_stubs.RESOURCE_GROUP,
                AZURE_IDENTITY=azure_stubs.IDENTITY, AZURE_SUBNET_ID=azure_stubs.SUBNET,
                AZURE_GPU_IMAGE=("Canonical:0001-com-ubuntu-server-jammy:22_04-lts-gen2:"
                                 "22.04.202410020"),
                AZURE_PIP_REQUIREMENTS=[], AZURE_PYTHON=sys.executable,
                AZURE_SYNC_INTERVAL_SECONDS=0.5)
    monkeypatch.setenv("EASYLAUNCH_CONFIG", str(write_settings(tmp_path / "settings.py",
                                                                values)))
    return values


def blob_text(az, key: str) -> str | None:
    client = az.container.get_blob_client(key)
    return client.download_blob().readall().decode() if client.exists() else None


def blob_keys(az, prefix: str = "") -> list[str]:
    return [b.name for b in az.container.list_blobs(name_starts_with=prefix)]


def blob_state(az, job) -> str | None:
    text = blob_text(az, f"{job.launch_info['backend']['log_prefix']}/status.json")
    return json.loads(text)["state"] if text else None


def vm_of(arm, job) -> azure_stubs.AzureVm:
    return arm.played[job.launch_info["backend"]["instance_id"]]


def vms_of(arm, exp_name: str) -> list[dict]:
    return [r for r in arm.vms.values() if r["tags"]["easylaunch-exp"] == exp_name]


def left_of(arm, name: str) -> list[str]:
    """Disks, NICs and IPs of VM ``name`` still there."""
    return [item for item, info in arm.attached.items() if info["vm"] == name]


# -- a run from launch to fetch -----------------------------------------------------------------


def test_a_run_boots_syncs_while_running_ends_and_deletes_itself(az_cfg, az, arm):
    job = run_experiment(jobfns.wait_for_release, variant={"tag": "a"}, exp_name="x",
                         mode="azure", use_gpu=True, config=dict(az_cfg, AZURE_SPOT=True,
                                                                 AZURE_SPOT_MAX_PRICE=0.25))
    backend = job.launch_info["backend"]
    name = backend["instance_id"]
    resource = arm.vm(name)
    props = resource["properties"]
    # what was created: the GPU size of doodad's GPU model, Spot, the identity, custom data
    assert props["hardwareProfile"]["vmSize"] == "Standard_NC4as_T4_v3"
    assert (props["priority"], props["evictionPolicy"]) == ("Spot", "Delete")
    assert props["billingProfile"]["maxPrice"] == 0.25
    assert resource["identity"] == {"type": "UserAssigned",
                                    "userAssignedIdentities": {azure_stubs.IDENTITY: {}}}
    assert resource["tags"]["easylaunch-run"] == job.id
    assert props["osProfile"]["linuxConfiguration"]["disablePasswordAuthentication"] is True
    assert sorted(left_of(arm, name)) == sorted([f"{name}-osdisk", f"{name}-nic", f"{name}-ip"])
    vm = arm.played[name]
    assert len(vm.custom_data.encode()) < 4096 and "function.pkl" not in vm.custom_data
    assert backend["log_url"] == f"az://{az.name}/{backend['log_prefix']}/"
    assert backend["log_prefix"].startswith("easylaunch/logs/x/")  # AZ_CONTAINER's layout

    result = check_a_synced_run(job, vm, lambda k: blob_text(az, k),
                                lambda p: blob_keys(az, p), root="easylaunch")
    assert result["gpu"] is True and result["tag"] == "a"
    # the VM deleted itself through Resource Manager with its managed identity, and its disk,
    # NIC and IP went with it
    assert wait_for(lambda: arm.deletes_by(name), 30), vm.boot_log()
    assert arm.deletes_by(name)[0].endswith(f"/resourceGroups/{azure_stubs.RESOURCE_GROUP}/"
                                            f"providers/Microsoft.Compute/virtualMachines/{name}")
    assert wait_for(lambda: arm.vm(name) is None, 40)
    assert left_of(arm, name) == [] and not vm.shutdown_log.exists()

    assert "fetched" in job.fetch()
    assert (job.log_dir / "progress.txt").read_text() == "halfway\n"
    later = subprocess.run(
        [sys.executable, "-c", "import sys; from easylaunch import Job; "
         "j = Job.from_run_dir(sys.argv[1]); print(j.status(), j.result()['tag'])",
         str(job.log_dir)], capture_output=True, text=True, timeout=60)
    assert later.stdout.strip() == "succeeded a", later.stderr
    # no credential anywhere: the custom data, the VM's environment and sandbox, every blob,
    # the run folder and the registry (the secret, the storage key, the client's token)
    client_tokens = [t for t, who in arm.tokens.items() if who == "client"]
    assert client_tokens
    secrets = [SECRET, azure_stubs.DEV_KEY, *client_tokens]
    texts = [vm.custom_data, json.dumps(vm.env), json.dumps(resource)]
    texts += [az.container.download_blob(k).readall().decode("latin-1") for k in blob_keys(az)]
    registry = Path(az_cfg["LOCAL_LOG_DIR"]).parent / "home"
    assert_no_secrets(texts, [vm.root, Path(az_cfg["LOCAL_LOG_DIR"]), registry], secrets)


def test_a_command_and_a_failing_function(az_cfg, az, arm):
    ok = run_command("bash -c 'echo fine'", mode="azure", config=az_cfg)
    bad = run_command(["bash", "-c", "echo gone >&2; exit 3"], mode="azure", config=az_cfg)
    fails = run_experiment(jobfns.fail, variant={"learning_rate": 5}, mode="azure",
                           config=az_cfg)
    assert ok.wait(timeout=60) is JobState.SUCCEEDED, vm_of(arm, ok).boot_log()
    assert bad.wait(timeout=60) is JobState.FAILED, vm_of(arm, bad).boot_log()
    assert bad.info()["exit_code"] == 3 and bad.info()["error"].endswith("gone")
    assert blob_text(az, f"{ok.launch_info['backend']['log_prefix']}/stdout.log") == "fine\n"
    assert fails.wait(timeout=60) is JobState.FAILED
    with pytest.raises(ValueError, match="bad learning rate 5"):
        fails.result()


# -- sweeps -------------------------------------------------------------------------------------


def test_a_sweep_packs_runs_per_vm_and_uploads_each_snapshot_once(az_cfg, az, arm,
                                                                  monkeypatch):
    uploaded = []
    real = AzureBlobStore.put_bytes
    monkeypatch.setattr(AzureBlobStore, "put_bytes", lambda self, key, data: (
        uploaded.append((key, len(data))), real(self, key, data))[1])
    jobs = run_sweep(jobfns.quick, [{"tag": i} for i in range(5)], exp_name="sw",
                     mode="azure", config=az_cfg, num_exps_per_instance=2)
    kinds = [k.split("/")[1] for k, _ in uploaded]
    assert kinds.count("snapshots") == 1 and kinds.count("bundles") == 1  # (one archive a fleet)
    assert kinds.count("manifests") == 1 and kinds.count("agent") == 1
    names = [j.launch_info["backend"]["instance_id"] for j in jobs]
    assert len(set(names)) == 3 and len(vms_of(arm, "sw")) == 3
    assert [arm.vm(n)["tags"]["easylaunch-index"] for n in dict.fromkeys(names)] == \
        ["0", "1", "2"]
    assert [j.result(timeout=60)["tag"] for j in jobs] == [0, 1, 2, 3, 4]
    assert wait_for(lambda: not vms_of(arm, "sw"), 40)
    uploaded.clear()
    run_sweep(jobfns.quick, [{"tag": 9}], exp_name="sw", mode="azure", config=az_cfg)
    assert [k.split("/")[1] for k, _ in uploaded] == ["bundles", "manifests"]


# -- eviction, cancel ---------------------------------------------------------------------------


def test_an_evicted_spot_vm_is_relaunched_once_and_the_run_resumes(az_cfg, az, arm, exp):
    job = launch_and_exit(dict(az_cfg, AZURE_SPOT=True), "azure", exp,
                          {"steps": 40, "step_seconds": 0.1, "every": 5})
    first = vm_of(arm, job)
    assert wait_for(lambda: len(jobfns.steps_done(first.run_dir(job))) >= 8, 60), \
        first.boot_log()
    arm.evict(first.name)  # a Preempt event the agent sees, then the VM goes with its disk
    prefix = job.launch_info["backend"]["log_prefix"]
    assert "Spot eviction scheduled" in json.loads(blob_text(az, f"{prefix}/agent.json"))[
        "spot_notice"]
    assert blob_state(az, job) == "queued", first.boot_log()
    assert arm.vm(first.name) is None and left_of(arm, first.name) == []
    stopped_at = jobfns.steps_done(first.run_dir(job))[-1][1]
    # the launcher is gone: this process, waiting, starts the new VM
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.info()
    second = vm_of(arm, job)
    assert second.name == f"{first.name}-r1"
    assert second.resource["properties"]["priority"] == "Spot"
    result = job.result()
    assert result["attempt"] == 2 and result["resumed_from"] == stopped_at
    assert [step for _, step in jobfns.steps_done(second.run_dir(job))] == list(range(1, 41))
    [restart] = job.info()["restarts"]
    assert restart["reason"] == "preempted"  # (the agent saw the notice)


def test_cancel_from_a_later_process_stops_the_run_and_deletes_the_vm(az_cfg, az, arm):
    job = run_experiment(jobfns.wait_for_release, mode="azure", config=az_cfg)
    vm = vm_of(arm, job)
    assert wait_for(lambda: blob_state(az, job) == "running", 30), vm.boot_log()
    out = subprocess.run([str(Path(sys.executable).parent / "easylaunch"), "cancel", job.id],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert job.status() is JobState.CANCELLED
    assert blob_state(az, job) == "cancelled"
    assert wait_for(lambda: arm.vm(vm.name) is None, 40)
    assert left_of(arm, vm.name) == []


# -- bad input: refused before anything starts --------------------------------------------------


@pytest.mark.parametrize("change, message", [
    ({"AZURE_IDENTITY": None}, "AZURE_IDENTITY is not set: the resource id of a user-assigned"),
    ({"AZURE_IDENTITY": "runs"}, "AZURE_IDENTITY must be a user-assigned identity's resource"),
    ({"AZ_CONTAINER": "no-such-container"},
     "the Blob container 'no-such-container' of AZURE_STORAGE_PATH does not exist"),
    ({"AZURE_RESOURCE_GROUP": "nope"}, "ResourceGroupNotFound: Resource group 'nope' could not "
                                       "be found.; fix AZURE_RESOURCE_GROUP, or create it"),
    ({"AZ_SUB_ID": "00000000-0000-0000-0000-000000000000"},
     "SubscriptionNotFound.*fix AZURE_SUBSCRIPTION_ID"),
    ({"AZ_SECRET": "wrong"}, "Azure refused the credentials.*Invalid client secret"),
    ({"DEFAULT_AZURE_INSTANCE_TYPE": "Standard_Huge"},
     "VM size 'Standard_Huge' is not offered in westus2; fix AZURE_VM_SIZE"),
    ({"AZURE_IMAGE": "Canonical:nope:1:latest"}, "image 'Canonical:nope:1:latest' is not "
                                                 "offered in westus2"),
    ({"DEFAULT_AZURE_INSTANCE_TYPE": "Standard_D4s_v5", "AZURE_NUM_EXPS_PER_INSTANCE": 1},
     "6 x Standard_D4s_v5 need 24 vCPUs, but westus2's regional vCPU quota leaves \\d+ of 20"),
    ({"AZ_CONN_STR": None}, "AZURE_STORAGE_ACCOUNT_URL is not set"),
])
def test_bad_settings_are_refused_before_anything_is_made(az_cfg, az, arm, change, message,
                                                          exp):
    with pytest.raises(EasyLaunchError, match=message):
        run_sweep(jobfns.quick, [{"i": i} for i in range(6)], exp_name=exp, mode="azure",
                  config=dict(az_cfg, **change))
    assert not (Path(az_cfg["LOCAL_LOG_DIR"]) / exp).exists()
    assert not vms_of(arm, exp) and not blob_keys(az)


def test_a_gpu_model_without_a_known_size_names_the_setting(az_cfg, az, arm, exp):
    with pytest.raises(EasyLaunchError, match="no Azure VM size known for 3 x 'nvidia-tesla-t4'"
                                              ".*set AZURE_GPU_VM_SIZE"):
        run_experiment(jobfns.quick, exp_name=exp, mode="azure", use_gpu=True,
                       config=dict(az_cfg, AZURE_GPU_COUNT=3))
    assert not vms_of(arm, exp) and not blob_keys(az)


def test_a_dry_run_counts_vms_and_their_spot_price(az_cfg, az, arm, exp):
    shown = run_sweep(jobfns.train, [dict(seed=s) for s in range(25)], mode="azure",
                      exp_name=exp, config=dict(az_cfg, AZURE_SPOT=True, AZURE_SPOT_MAX_PRICE=0.1),
                      num_exps_per_instance=10, dry_run=True)
    assert shown.resources["instances"] == 3
    assert shown.resources["market"] == "spot (max $0.1/hour each)"
    assert shown.resources["price"] == "at most $0.30/hour (3 x $0.1)"
    [script] = shown.files.values()
    assert "--cloud azure" in script and "--store az" in script and SECRET not in script
    assert not vms_of(arm, exp) and not blob_keys(az)


def test_the_vm_body_reads_back_through_the_sdks_own_model(az_cfg, az, arm):
    """The JSON easylaunch writes names what azure-mgmt-compute's VirtualMachine model reads (a
    misspelt key would read back as None)."""
    from azure.mgmt.compute.models import VirtualMachine

    from easylaunch.modes.cloud.azure import AzureMode
    from easylaunch.modes.cloud.fleet import Fleet
    from easylaunch.runs.record import LaunchRequest
    from easylaunch.settings import load_settings

    mode = AzureMode(load_settings(dict(az_cfg, AZURE_SPOT=True)), {"confirm": False,
                                                                     "num_exps_per_instance": 1})
    request = LaunchRequest(method_call=None, variants=[{}], exp_name="model", use_gpu=False,
                            gpu_id=None, log_root=Path(az_cfg["LOCAL_LOG_DIR"]),
                            slurm_config_name=None, script_name="t.py")
    target = mode.target(request)
    fleet = Fleet([["r1"]], None, "r1", "ctl", "#!/bin/bash\necho hi\n")
    vm = VirtualMachine(mode.vm_resource(request, target, fleet, 0, "el-model-r1"))
    p = vm.properties
    assert (p.priority, p.eviction_policy, p.billing_profile.max_price) == ("Spot", "Delete", -1)
    assert p.hardware_profile.vm_size == "Standard_D2s_v5"
    assert base64.b64decode(p.os_profile.custom_data) == b"#!/bin/bash\necho hi\n"
    assert p.os_profile.linux_configuration.ssh.public_keys[0].key_data.startswith("ssh-ed25519 ")
    assert p.storage_profile.os_disk.delete_option == "Delete"
    assert p.storage_profile.image_reference.offer == "0001-com-ubuntu-server-jammy"
    nic = p.network_profile.network_interface_configurations[0].properties
    assert nic.delete_option == "Delete" and nic.primary is True
    ip = nic.ip_configurations[0].properties
    assert ip.subnet.id == azure_stubs.SUBNET
    assert ip.public_ip_address_configuration.properties.delete_option == "Delete"
    assert list(vm.identity.user_assigned_identities) == [azure_stubs.IDENTITY]
    assert vm.tags["easylaunch-index"] == "0"


def test_doctor_names_what_the_azure_mode_lacks(tmp_path, capsys):
    from easylaunch.cli import main as cli

    settings = tmp_path / "settings.py"
    settings.write_text("AZ_SUB_ID = 'sub'\nAZ_CONTAINER = 'runs'\n")
    cli(["doctor", str(settings)])
    out = capsys.readouterr().out
    assert "AZ_CONTAINER (doodad) -> AZURE_STORAGE_PATH" in out
    assert "mode azure: AZURE_RESOURCE_GROUP is not set; AZURE_IDENTITY is not set; " \
           "AZURE_SUBNET_ID is not set" in out
