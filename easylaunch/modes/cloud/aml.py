"""``aml``: each run (or ``num_exps_per_instance`` runs) as an Azure ML command job, the
seed's ``aml_client`` with easylaunch's registry on top.

An Azure ML job is the cloud family's "instance", as a Ray job is: its command is the family's
boot script, which fetches the instance agent from the workspace's datastore container (where
code snapshots, blobs and bundles are uploaded once per content) with the job's managed
identity, and the agent runs the job's share of the launch manifest and mirrors each run folder
there. So ``status``, ``wait``, ``result``, ``logs``, ``q``, ``fetch``, ``cancel``, ``resubmit``
and restarts work as for the other cloud modes. What is Azure ML's own: the job (through
azure-ai-ml: a compute target, an environment from a Docker image or a registered one, nodes and
processes per node with PyTorch or MPI distribution, extra environment variables, data folders
mounted read-only and an output folder mounted read-write from a datastore), the jobs' states,
and cancelling. In a job of several processes, each runs the agent: rank 0 keeps the runs'
records, the others run their rank of each run (``stdout.rank<k>.log``).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from easylaunch.errors import LaunchError, needed
from easylaunch.modes.cloud import azure
from easylaunch.modes.cloud.base import CloudMode
from easylaunch.modes.cloud.fleet import Fleet, InstanceState, Target, instance_name
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.cloud.platforms import ENV_INDEX, ENV_SNAPSHOTS, ENV_WORKDIR
from easylaunch_job.cloud.stores import AzureBlobStore

ENDED_JOB_STATES = frozenset({"Completed", "Failed", "Canceled", "NotResponding"})
FEW_JOBS = 8  # asked about one by one; more: one list call (it lists the workspace's jobs)
SUBMIT_THREADS = 8
DISTRIBUTIONS = ("pytorch", "mpi")
# The seed's aml.yaml keys easylaunch reads, and the settings they fill (where not set).
YAML_KEYS = {"compute_target": "AML_COMPUTE", "experiment_name": "AML_EXPERIMENT",
             "multi_process": "AML_MULTI_PROCESS", "gpu_per_node": "AML_GPU_PER_NODE",
             "env": "AML_ENV", "datastore_name": "AML_DATASTORE", "aml_config": "AML_CONFIG"}


def _sdk() -> Any:
    needed("azure.storage.blob", "mode 'aml'", "aml", "azure-ai-ml and azure-storage-blob")
    return needed("azure.ai.ml", "mode 'aml'", "aml", "azure-ai-ml and azure-storage-blob")


@functools.lru_cache(maxsize=8)
def _client(subscription: str, group: str, workspace: str, cred: Any,
            _cloud: str | None) -> Any:
    return _sdk().MLClient(cred, subscription, group, workspace, show_progress=False,
                           enable_telemetry=False)


def read_seed_files(values: dict[str, Any]) -> dict[str, Any]:
    """The settings with what the seed's aml.yaml (AML_YAML) and workspace config.json
    (AML_CONFIG, or aml.yaml's aml_config) say, where the settings do not say it. Of the
    blob account files they name, nothing is read: keys never leave them."""
    out = dict(values)
    if out.get("AML_YAML"):
        import yaml  # type: ignore[import-untyped]  # (PyYAML has no types; no stubs installed)

        path = Path(out["AML_YAML"]).expanduser()
        seed = _read_seed_file(path, yaml.safe_load) or {}
        for key, setting in YAML_KEYS.items():
            if seed.get(key) is not None and out.get(setting) in (None, {}):
                value = seed[key]
                if setting == "AML_CONFIG" and not Path(value).is_absolute():
                    value = str(_seed_root(path) / value)
                out[setting] = value
        image = (seed.get("docker") or {}).get("image")
        if image and seed.get("use_custom_docker", True) and not out.get("AML_ENVIRONMENT"):
            out["AML_IMAGE"] = out.get("AML_IMAGE") or image
        folders = {k.removesuffix("_folder"): (v or {}).get("path")
                   for k, v in (seed.get("config_param") or {}).items() if k.endswith("_folder")}
        if folders.get("output") and not out.get("AML_OUTPUT_FOLDER"):
            out["AML_OUTPUT_FOLDER"] = folders.pop("output")
        folders.pop("output", None)
        if not out.get("AML_DATA_FOLDERS"):
            out["AML_DATA_FOLDERS"] = {k: v for k, v in folders.items() if v}
    if out.get("AML_CONFIG"):
        workspace = _read_seed_file(Path(out["AML_CONFIG"]).expanduser(), json.load) or {}
        for key, setting in (("subscription_id", "AML_SUBSCRIPTION_ID"),
                             ("resource_group", "AML_RESOURCE_GROUP"),
                             ("workspace_name", "AML_WORKSPACE")):
            out[setting] = out.get(setting) or workspace.get(key)
    return out


def _seed_root(yaml_path: Path) -> Path:
    """The folder the seed's relative paths start from: the one holding ``aux_data``."""
    for parent in yaml_path.resolve().parents:
        if parent.name == "aux_data":
            return parent.parent
    return yaml_path.parent


def _read_seed_file(path: Path, load: Any) -> Any:
    try:
        with open(path) as f:
            return load(f)
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot read {path}: {exc}; fix AML_YAML / AML_CONFIG") from None


@dataclass(frozen=True)
class AmlTarget(Target):
    """A target with the workspace and the job's shape (``location``: the datastore account's
    blob endpoint; ``machine_type``: the compute target)."""

    subscription: str
    resource_group: str
    workspace: str
    datastore: str
    environment: str  # "azureml:name:version", or "" for the image
    nodes: int
    processes: int  # per node
    inputs: dict[str, str] = field(default_factory=dict)  # name -> azureml:// path


class AmlMode(CloudMode[AmlTarget]):
    """Runs as Azure ML command jobs, tracked through the datastore and the jobs API."""

    name = "aml"
    cloud = "aml"
    store_scheme = "az"
    settings_prefix = "AML"
    own_machines = False
    per_rank = True
    options: dict[str, Any] = {"num_exps_per_instance": None, "num_gpus": None,
                               "multi_process": None, "compute": None}

    @functools.cached_property
    def values(self) -> dict[str, Any]:
        """The settings with the seed's files read in (when a launch or a check needs them:
        tracking a run does not, so runs stay tracked if the files move)."""
        return read_seed_files(dict(self.settings))

    def docker_image(self) -> str | None:
        return None  # the job's environment is the image

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        v = self.values
        return {"workspace": str(v.get("AML_WORKSPACE")), "compute": str(self._compute()),
                "environment": str(v.get("AML_ENVIRONMENT") or v.get("AML_IMAGE"))}

    # -- the job's shape ------------------------------------------------------------------------

    def _compute(self) -> str | None:
        return self.opts["compute"] or self.values.get("AML_COMPUTE")

    def shape(self, use_gpu: bool) -> tuple[int, int]:
        """(nodes, processes per node): the seed's ``-n`` GPUs over ``gpu_per_node`` GPUs a
        node, a process per GPU with ``multi_process`` (else one a node)."""
        v = self.values
        per_node = v.get("AML_GPU_PER_NODE") or 1
        gpus = self.opts["num_gpus"]
        if gpus is None:
            gpus = per_node if use_gpu else 0
        multi = self.opts["multi_process"]
        if multi is None:
            multi = v.get("AML_MULTI_PROCESS") is not False  # (the seed's default: True)
        nodes = max(1, -(-gpus // per_node))
        return nodes, per_node if multi and gpus else 1

    def value_problems(self) -> list[str]:
        v = self.values
        problems = [f"{key} is not set: {why}" for key, why in _WHY.items() if not v.get(key)
                    and not (key == "AML_COMPUTE" and self.opts["compute"])]
        if not (v.get("AML_IMAGE") or v.get("AML_ENVIRONMENT")):
            problems.append("neither AML_IMAGE nor AML_ENVIRONMENT is set: the Docker image the "
                            "jobs run in (aml.yaml's docker.image), or a registered environment "
                            "'azureml:NAME:VERSION'")
        if v.get("AML_DISTRIBUTION") not in DISTRIBUTIONS:
            problems.append(f"AML_DISTRIBUTION must be one of {', '.join(DISTRIBUTIONS)}, got "
                            f"{v.get('AML_DISTRIBUTION')!r}")
        gpus, per_node = self.opts["num_gpus"], v.get("AML_GPU_PER_NODE") or 1
        if gpus is not None and (not isinstance(gpus, int) or gpus < 0 or gpus % per_node):
            problems.append(f"num_gpus={gpus!r} must be a multiple of AML_GPU_PER_NODE "
                            f"({per_node}): the jobs take whole nodes")
        return problems

    def import_sdk(self) -> None:
        _sdk()

    def target(self, request: LaunchRequest) -> AmlTarget:
        v = self.values
        nodes, processes = self.shape(request.use_gpu)
        if nodes * processes > 1 and self.settings.MAX_RESTARTS:
            raise LaunchError(f"a job of {nodes} node(s) x {processes} process(es) does not "
                              "restart its runs yet (its other ranks would not start again); "
                              "launch it with max_restarts=0")
        datastore = self._datastore()
        environment = str(v.get("AML_ENVIRONMENT") or "")
        if environment and not environment.startswith("azureml:"):
            environment = f"azureml:{environment}"
        inputs = {name: self._path(path) for name, path in (v.get("AML_DATA_FOLDERS") or
                                                            {}).items()}
        return AmlTarget(
            location=self._account_url(datastore), bucket=datastore.container_name,
            prefix=v.get("AML_STORAGE_PREFIX") or "", image=environment or v["AML_IMAGE"],
            machine_type=str(self._compute()),
            market=f"{nodes} node(s) x {processes} process(es)",
            subscription=v["AML_SUBSCRIPTION_ID"], resource_group=v["AML_RESOURCE_GROUP"],
            workspace=v["AML_WORKSPACE"], datastore=datastore.name, environment=environment,
            nodes=nodes, processes=processes, inputs=inputs)

    def _path(self, path: str) -> str:
        """A folder of the datastore as Azure ML names it (an azureml:// path stays)."""
        if str(path).startswith("azureml://"):
            return path
        return (f"azureml://datastores/{self._datastore().name}/paths/"
                f"{str(path).strip('/')}/")

    # -- clients, storage and checks ------------------------------------------------------------

    def client(self, subscription: str | None = None, group: str | None = None,
               workspace: str | None = None) -> Any:
        """The workspace's MLClient (``ARM_CLOUD_METADATA_URL`` points it at another cloud)."""
        v = self.values
        return _client(subscription or v["AML_SUBSCRIPTION_ID"],
                       group or v["AML_RESOURCE_GROUP"], workspace or v["AML_WORKSPACE"],
                       azure.credential(self.settings), os.environ.get("ARM_CLOUD_METADATA_URL"))

    @functools.cache  # noqa: B019 - one datastore lookup per launch (the mode lives that long)
    def _datastore(self) -> Any:
        """AML_DATASTORE, else the workspace's default datastore."""
        from azure.core.exceptions import ResourceNotFoundError

        name = self.values.get("AML_DATASTORE")
        with _azure_errors(self.values):
            self._check_workspace()
            try:
                found = self.client().datastores.get(name) if name else \
                    self.client().datastores.get_default()
            except ResourceNotFoundError:
                raise LaunchError(f"the datastore {name!r} (AML_DATASTORE, aml.yaml's "
                                  f"datastore_name) is not in workspace "
                                  f"{self.values['AML_WORKSPACE']!r}; fix it, or leave it unset "
                                  "for the workspace's default (az ml datastore list)") from None
        if getattr(found, "container_name", None) is None:
            raise LaunchError(f"the datastore {found.name!r} is not an Azure Blob container; "
                              "set AML_DATASTORE to one that is")
        return found

    def _check_workspace(self) -> None:
        """The workspace is there (its resource group and subscription too)."""
        from azure.core.exceptions import ResourceNotFoundError

        v = self.values
        try:
            self.client().workspaces.get(v["AML_WORKSPACE"])
        except ResourceNotFoundError as exc:
            if getattr(exc.error, "code", None) in ("ResourceGroupNotFound",
                                                    "SubscriptionNotFound"):
                raise
            raise LaunchError(f"the workspace {v['AML_WORKSPACE']!r} is not in resource group "
                              f"{v['AML_RESOURCE_GROUP']!r}; fix AML_WORKSPACE (or "
                              "config.json's workspace_name): az ml workspace list") from None

    def _account_url(self, datastore: Any) -> str:
        return self.values.get("AML_STORAGE_ACCOUNT_URL") or (
            f"{datastore.protocol or 'https'}://{datastore.account_name}.blob."
            f"{datastore.endpoint or 'core.windows.net'}")

    def store(self, bucket: str, location: str) -> AzureBlobStore:
        return azure.store(bucket, location, self.settings)

    def agent_region(self, target: Target) -> str:
        return target.location  # the account's endpoint: the job signs in with its identity

    def check_cloud(self, target: AmlTarget) -> None:
        """Compute target, registered environment and the datastore's container, asked of
        Azure (the workspace and datastore were, for the target)."""
        from azure.core.exceptions import ResourceNotFoundError

        api = self.client()
        with _azure_errors(self.values):
            for what, call, fix in (
                    ("compute target", lambda: api.compute.get(target.machine_type),
                     "fix AML_COMPUTE (aml.yaml's compute_target, or compute=): az ml compute "
                     "list"),
                    *([("environment", lambda: api.environments.get(
                        *target.environment.removeprefix("azureml:").split(":", 1)),
                        "fix AML_ENVIRONMENT ('azureml:NAME:VERSION'): az ml environment list")]
                      if target.environment else [])):
                try:
                    call()
                except ResourceNotFoundError:
                    name = {"compute target": target.machine_type,
                            "environment": target.environment}[what]
                    raise LaunchError(f"the {what} {name!r} is not in workspace "
                                      f"{target.workspace!r} of resource group "
                                      f"{target.resource_group!r}; {fix}") from None
            found = self.store(target.bucket, target.location).bucket_exists()
        if not found:
            raise LaunchError(f"the Blob container {target.bucket!r} of datastore "
                              f"{target.datastore!r} does not exist; fix the datastore")

    # -- jobs -----------------------------------------------------------------------------------

    def job(self, request: LaunchRequest, target: AmlTarget, fleet: Fleet, index: int,
            name: str) -> Any:
        """The command job of the fleet's ``index``-th share."""
        sdk = _sdk()
        from azure.ai.ml.entities import Environment, ManagedIdentityConfiguration

        v = self.values
        workdir = v.get("AML_WORKDIR")
        distribution = None
        if target.processes > 1 or target.nodes > 1:
            distribution = (sdk.PyTorchDistribution if v["AML_DISTRIBUTION"] == "pytorch"
                            else sdk.MpiDistribution)(process_count_per_instance=target.processes)
        output = v.get("AML_OUTPUT_FOLDER")
        job = sdk.command(
            command=f"bash -c {shlex.quote(fleet.boot_script)}",
            environment=target.environment or Environment(image=target.image),
            compute=target.machine_type, instance_count=target.nodes, distribution=distribution,
            environment_variables={**{str(k): str(x) for k, x in (v.get("AML_ENV") or
                                                                  {}).items()},
                                   ENV_WORKDIR: f"{workdir}/{name}",
                                   ENV_SNAPSHOTS: f"{workdir}/.snapshots", ENV_INDEX: str(index)},
            inputs={k: sdk.Input(type="uri_folder", path=p, mode="ro_mount")
                    for k, p in target.inputs.items()},
            outputs={"output": sdk.Output(type="uri_folder", path=self._path(output),
                                          mode="rw_mount")} if output else None,
            identity=ManagedIdentityConfiguration(),
            experiment_name=v.get("AML_EXPERIMENT") or request.exp_name,
            display_name=f"{request.exp_name} {fleet.instances[index][0]}",
            tags={"easylaunch-exp": request.exp_name, "easylaunch-launch": fleet.launch_id,
                  "easylaunch-runs": " ".join(fleet.instances[index])})
        job.name = name
        return job

    def start_fleet(self, request: LaunchRequest, target: AmlTarget,
                    fleet: Fleet) -> list[dict]:
        """The fleet's jobs created at once (a few at a time); those created are cancelled if
        one is refused."""
        api = self.client()
        names = [instance_name(request.exp_name, ids[0], fleet.relaunch)
                 for ids in fleet.instances]
        record = {"subscription": target.subscription, "resource_group": target.resource_group,
                  "workspace": target.workspace}
        jobs = [self.job(request, target, fleet, i, name) for i, name in enumerate(names)]
        created, failed = [], []
        with concurrent.futures.ThreadPoolExecutor(SUBMIT_THREADS) as pool:
            futures = {pool.submit(api.jobs.create_or_update, job): job.name for job in jobs}
            for future in concurrent.futures.as_completed(futures):
                try:
                    future.result()
                    created.append(futures[future])
                except Exception as exc:  # noqa: BLE001 - named in the error below
                    failed.append((futures[future], exc))
        if failed:
            self.end_instances(record, created)
            name, error = failed[0]
            raise LaunchError(f"Azure ML did not take job {name} ({len(failed)} of {len(jobs)} "
                              f"refused) on {target.machine_type} in workspace "
                              f"{target.workspace}: {getattr(error, 'message', None) or error}")
        return [dict(record, instance_id=name, compute=target.machine_type,
                     shape=target.market) for name in names]

    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        """Cancel the jobs (Azure ML sends SIGTERM, then ends them); one that ended or is
        unknown is left alone."""
        from azure.core.exceptions import HttpResponseError

        api = self.client(record["subscription"], record["resource_group"],
                          record["workspace"])
        for name in instance_ids:
            with contextlib.suppress(HttpResponseError):  # (ended: a 400; unknown: a 404)
                api.jobs.begin_cancel(name)

    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """A few jobs one by one, more with one list call per workspace."""
        from azure.core.exceptions import ResourceNotFoundError

        wanted: dict[tuple, set[str]] = {}
        for b in backends:
            key = (b["subscription"], b["resource_group"], b["workspace"])
            wanted.setdefault(key, set()).add(b["instance_id"])
        states = {}
        for key, names in wanted.items():
            api = self.client(*key)
            if len(names) <= FEW_JOBS:
                found = []
                for name in names:
                    with contextlib.suppress(ResourceNotFoundError):
                        found.append(api.jobs.get(name))
            else:
                found = [j for j in api.jobs.list() if j.name in names]
            for job in found:
                status = str(job.status)
                states[job.name] = InstanceState(status, status in ENDED_JOB_STATES, status,
                                                 False)
        return states

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        backend = job.launch_info.get("backend", {})
        raise LaunchError(
            f"easylaunch does not open shells in Azure ML jobs: open job "
            f"{backend.get('instance_id', '?')} in Azure ML studio (its Outputs + logs, or "
            "ssh where the compute allows it); the run's logs sync to "
            f"{backend.get('log_url', 'the datastore')}")


@contextlib.contextmanager
def _azure_errors(values: dict) -> Any:
    """Azure's refusals as LaunchErrors that name the fix."""
    from azure.core.exceptions import (
        ClientAuthenticationError,
        HttpResponseError,
        ServiceRequestError,
    )

    try:
        yield
    except ClientAuthenticationError as exc:
        raise LaunchError(f"Azure refused the credentials: {exc.message}; sign in (az login) or "
                          "set AZURE_TENANT_ID, AZURE_CLIENT_ID and AZURE_CLIENT_SECRET to a "
                          "service principal's") from exc
    except HttpResponseError as exc:
        code = getattr(exc.error, "code", None) or exc.status_code
        said = getattr(exc.error, "message", None) or exc.reason
        raise LaunchError(f"Azure refused a check before launching (workspace "
                          f"{values.get('AML_WORKSPACE')!r} of resource group "
                          f"{values.get('AML_RESOURCE_GROUP')!r}, subscription "
                          f"{values.get('AML_SUBSCRIPTION_ID')}): {code}: {said}; check "
                          "AML_SUBSCRIPTION_ID, AML_RESOURCE_GROUP and AML_WORKSPACE (or "
                          "config.json)") from exc
    except ServiceRequestError as exc:
        raise LaunchError(f"cannot reach Azure: {exc}; check the network") from exc


_WHY = {
    "AML_SUBSCRIPTION_ID": "the workspace's subscription (config.json's subscription_id, "
                           "through AML_CONFIG)",
    "AML_RESOURCE_GROUP": "the workspace's resource group (config.json's resource_group)",
    "AML_WORKSPACE": "the Azure ML workspace (config.json's workspace_name)",
    "AML_COMPUTE": "the compute target jobs run on (aml.yaml's compute_target, or compute=)",
}
