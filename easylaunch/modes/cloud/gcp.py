"""``gcp``: each run on a Compute Engine instance that syncs its log folder to Google Cloud
Storage and deletes itself when done.

The shared cloud path (modes/cloud/base.py) uploads, writes the manifest and tracks runs; this
module adds what is Google's own: ``InstancesClient.insert`` per instance with the boot script as
``startup-script`` metadata, a ``shutdown-script`` that lets the agent sync a last time
(preemption, stop, delete), the instance's index in the manifest as metadata, labels for the
experiment, run and launch, ``onHostMaintenance: TERMINATE`` and accelerators for GPUs; one
``list`` call per launch to see instances end; ``delete`` for cancel. Instances delete themselves
at the end through the Compute API with their metadata server's token.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, did_you_mean, needed
from easylaunch.modes.base import Composed
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.base import CloudMode
from easylaunch.modes.cloud.fleet import Fleet, InstanceState, Target, instance_name, name_part
from easylaunch.runs.record import LaunchRequest
from easylaunch.settings import Settings, override
from easylaunch_job.cloud.platforms import ENV_COMPUTE_URL, GCE_INDEX_KEY
from easylaunch_job.cloud.stores import GcsStore

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
CHECK_TIMEOUT_SECONDS = 30.0
OPERATION_TIMEOUT_SECONDS = 300.0
ENDED_STATUSES = frozenset({"STOPPING", "STOPPED", "SUSPENDING", "SUSPENDED", "TERMINATED"})
_CLIENT_ENV = ("GOOGLE_APPLICATION_CREDENTIALS", "GOOGLE_CLOUD_PROJECT", ENV_COMPUTE_URL,
               "STORAGE_EMULATOR_HOST", "CLOUDSDK_CONFIG")


def _compute() -> Any:
    named = "google-cloud-compute and google-cloud-storage"  # (both are needed)
    needed("google.cloud.storage", "mode 'gcp'", "gcp", named)
    return needed("google.cloud.compute_v1", "mode 'gcp'", "gcp", named)


def _environment() -> tuple:
    return tuple(os.environ.get(k) for k in _CLIENT_ENV)


@functools.lru_cache(maxsize=8)
def _credentials(_environment: tuple) -> tuple[Any, str | None]:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError:
        raise LaunchError(
            "no Google Cloud credentials found: run 'gcloud auth application-default login', "
            "or set GOOGLE_APPLICATION_CREDENTIALS to a service account key file") from None


def credentials() -> tuple[Any, str | None]:
    """Application Default Credentials and their project, once per process and environment."""
    _compute()
    return _credentials(_environment())


@dataclass(frozen=True)
class Clients:
    """The API clients a launch and its tracking use."""

    instances: Any
    zones: Any
    machine_types: Any
    operations: Any
    storage: Any


@functools.lru_cache(maxsize=8)
def _clients(project: str, _environment: tuple) -> Clients:
    from google.cloud import storage

    compute_v1 = _compute()
    creds, _ = credentials()
    url = os.environ.get(ENV_COMPUTE_URL)
    kwargs = dict(credentials=creds, transport="rest",
                  client_options={"api_endpoint": url} if url else None)
    return Clients(compute_v1.InstancesClient(**kwargs), compute_v1.ZonesClient(**kwargs),
                   compute_v1.MachineTypesClient(**kwargs),
                   compute_v1.ZoneOperationsClient(**kwargs),
                   storage.Client(project=project, credentials=creds))


def clients(project: str) -> Clients:
    """API clients for ``project`` (``EASYLAUNCH_COMPUTE_URL`` points Compute elsewhere)."""
    return _clients(project, _environment())


@dataclass(frozen=True)
class GcpTarget(Target):
    """A target with what the instance resource needs besides."""

    project: str
    image_project: str
    gpu_type: str | None
    gpu_count: int


class GcpMode(CloudMode[GcpTarget]):
    """Runs on Compute Engine instances, tracked through GCS and the Compute API."""

    name = "gcp"
    cloud = "gcp"
    store_scheme = "gs"
    settings_prefix = "GCP"
    machine_type_keys = ("GCP_MACHINE_TYPE", "GCP_GPU_MACHINE_TYPE")
    options = {**CloudMode.options, "gcp_kwargs": None}

    def __init__(self, settings: Settings, mode_options: dict[str, Any],
                 kind: Composed | None = None) -> None:
        super().__init__(settings, mode_options, kind)
        self.settings = _with_gcp_kwargs(settings, self.opts["gcp_kwargs"])

    # -- checks ---------------------------------------------------------------------------------

    def project(self) -> str:
        """GCP_PROJECT, else the project of the credentials."""
        project = self.settings.GCP_PROJECT or credentials()[1]
        if not project:
            raise LaunchError("no Google Cloud project: set GCP_PROJECT in your settings (or "
                              "GOOGLE_CLOUD_PROJECT in the environment)")
        return project

    def value_problems(self) -> list[str]:
        s = self.settings
        if s.GCP_PREEMPTIBLE and s.GCP_SPOT:
            return ["GCP_PREEMPTIBLE and GCP_SPOT are both set: choose one (Spot is the newer "
                    "kind of preemptible instance)"]
        return []

    def import_sdk(self) -> None:
        _compute()

    def target(self, request: LaunchRequest) -> GcpTarget:
        s = self.settings
        bucket, prefix = cloud.split_url(s.GCP_GCS_PATH, "gs", "GCP_GCS_PATH")
        project = self.project()
        gpu = request.use_gpu
        market = "spot" if s.GCP_SPOT else "preemptible" if s.GCP_PREEMPTIBLE else "on-demand"
        return GcpTarget(
            location=s.GCP_ZONE, bucket=bucket, prefix=prefix,
            image=s.GCP_GPU_IMAGE if gpu else s.GCP_IMAGE,
            machine_type=s.GCP_GPU_MACHINE_TYPE if gpu else s.GCP_MACHINE_TYPE, market=market,
            project=project, image_project=s.GCP_GPU_IMAGE_PROJECT if gpu else s.GCP_IMAGE_PROJECT,
            gpu_type=s.GCP_GPU_TYPE if gpu else None, gpu_count=s.GCP_GPU_COUNT if gpu else 0)

    def check_cloud(self, target: GcpTarget) -> None:
        """Zone, machine type and bucket, asked of Google Cloud."""
        from google.api_core import exceptions
        from google.auth.exceptions import GoogleAuthError
        from requests.exceptions import RequestException

        api = clients(target.project)
        zone, project = target.location, target.project
        try:
            _found(lambda: api.zones.get(project=project, zone=zone,
                                         timeout=CHECK_TIMEOUT_SECONDS),
                   f"GCP zone {zone!r} is unknown in project {project!r}; fix GCP_ZONE (gcloud "
                   "compute zones list) or GCP_PROJECT")
            _found(lambda: api.machine_types.get(project=project, zone=zone,
                                                 machine_type=target.machine_type,
                                                 timeout=CHECK_TIMEOUT_SECONDS),
                   f"GCP_MACHINE_TYPE / GCP_GPU_MACHINE_TYPE: {target.machine_type!r} is not "
                   f"offered in zone {zone}; fix the setting (gcloud compute machine-types "
                   f"list --zones {zone})")
            _found(lambda: api.storage.get_bucket(target.bucket, timeout=CHECK_TIMEOUT_SECONDS),
                   f"the GCS bucket {target.bucket!r} of GCP_GCS_PATH does not exist; create it "
                   f"(gcloud storage buckets create gs://{target.bucket}) or set GCP_GCS_PATH "
                   "to a bucket you can write")
        except exceptions.Forbidden as exc:
            raise LaunchError(f"Google Cloud refused a check before launching (permission "
                              f"denied): {exc.message}") from exc
        except exceptions.GoogleAPICallError as exc:
            raise LaunchError(f"Google Cloud refused a check before launching: {exc}") from exc
        except (GoogleAuthError, RequestException) as exc:
            raise LaunchError(f"cannot reach Google Cloud for project {project!r}: {exc}; check "
                              "the network and your credentials") from exc

    # -- starting instances ---------------------------------------------------------------------

    def instance_resource(self, request: LaunchRequest, target: GcpTarget, fleet: Fleet,
                          index: int, name: str) -> Any:
        """The Instance one ``insert`` call creates."""
        compute_v1 = _compute()
        s = self.settings
        zone = target.location
        image = f"projects/{target.image_project}/global/images/{target.image}"
        scheduling = compute_v1.Scheduling(automatic_restart=False, on_host_maintenance=(
            "TERMINATE" if target.gpu_count or target.market != "on-demand" else "MIGRATE"))
        if s.GCP_SPOT:
            scheduling.provisioning_model = "SPOT"
            scheduling.instance_termination_action = "DELETE"
        elif s.GCP_PREEMPTIBLE:
            scheduling.preemptible = True
        items = {"startup-script": fleet.boot_script,
                 "shutdown-script": cloud.shutdown_script(), GCE_INDEX_KEY: str(index)}
        run_ids = fleet.instances[index]
        disk = compute_v1.AttachedDiskInitializeParams(source_image=image,
                                                       disk_size_gb=s.GCP_DISK_SIZE_GB)
        instance = compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{target.machine_type}",
            labels={"easylaunch-exp": name_part(request.exp_name, 63) or "none",
                    "easylaunch-run": run_ids[0],
                    "easylaunch-launch": fleet.launch_id},
            disks=[compute_v1.AttachedDisk(boot=True, auto_delete=True, initialize_params=disk)],
            network_interfaces=[compute_v1.NetworkInterface(
                network=s.GCP_NETWORK, access_configs=[compute_v1.AccessConfig(
                    name="External NAT", type_="ONE_TO_ONE_NAT")])],
            metadata=compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v)
                                                for k, v in items.items()]),
            scheduling=scheduling,
            service_accounts=[compute_v1.ServiceAccount(
                email=s.GCP_SERVICE_ACCOUNT or "default", scopes=list(s.GCP_SCOPES))])
        if target.gpu_count:
            instance.guest_accelerators = [compute_v1.AcceleratorConfig(
                accelerator_type=f"zones/{zone}/acceleratorTypes/{target.gpu_type}",
                accelerator_count=target.gpu_count)]
        return instance

    def start_fleet(self, request: LaunchRequest, target: GcpTarget, fleet: Fleet) -> list[dict]:
        """One insert per instance, then wait for their operations; on any failure, delete
        those inserted and raise the error with what was asked."""
        api = clients(target.project)
        record = {"project": target.project, "zone": target.location}
        names = [instance_name(request.exp_name, ids[0], fleet.relaunch)
                 for ids in fleet.instances]
        inserted: list[str] = []
        try:
            operations = []
            for index, name in enumerate(names):
                operations.append(api.instances.insert_unary(
                    project=target.project, zone=target.location,
                    instance_resource=self.instance_resource(request, target, fleet, index,
                                                             name),
                    timeout=CHECK_TIMEOUT_SECONDS))
                inserted.append(name)
            for operation in operations:
                _wait(api, target.project, target.location, operation)
        except Exception as exc:
            if inserted:
                self.end_instances(record, inserted)
            raise LaunchError(
                f"Compute Engine did not start {len(names)} {target.machine_type} "
                f"{target.market} instance(s) of {target.image_project}/{target.image} in "
                f"{target.location}: {getattr(exc, 'message', None) or exc}") from exc
        return [dict(record, instance_id=name, machine_type=target.machine_type,
                     market=target.market, launch_label=fleet.launch_id) for name in names]

    # -- tracking and ending --------------------------------------------------------------------

    def store(self, bucket: str, location: str) -> GcsStore:
        return GcsStore(bucket, clients(self.project()).storage)

    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        """Delete the instances (without waiting); one already gone is left alone."""
        from google.api_core.exceptions import NotFound

        api = clients(record["project"])
        for name in instance_ids:
            with contextlib.suppress(NotFound):
                api.instances.delete_unary(project=record["project"], zone=record["zone"],
                                     instance=name, timeout=CHECK_TIMEOUT_SECONDS)

    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """One filtered ``list`` call per launch."""
        launches = {(b["project"], b["zone"], b["launch_label"]) for b in backends}
        states = {}
        for project, zone, label in sorted(launches):
            query = {"project": project, "zone": zone,
                     "filter": f'labels.easylaunch-launch = "{label}"'}
            for inst in clients(project).instances.list(request=query,
                                                        timeout=CHECK_TIMEOUT_SECONDS):
                reason = inst.status_message or ""
                states[inst.name] = InstanceState(inst.status, inst.status in ENDED_STATUSES,
                                                  reason, "preempt" in reason.lower())
        return states


def _wait(api: Clients, project: str, zone: str, operation: Any) -> None:
    """Wait for a zone operation to end (``zoneOperations.wait``); raise its error."""
    from google.api_core.exceptions import from_http_status

    deadline = time.monotonic() + OPERATION_TIMEOUT_SECONDS
    while operation.status != operation.Status.DONE:
        if time.monotonic() > deadline:
            raise TimeoutError(f"operation {operation.name} did not end in "
                               f"{OPERATION_TIMEOUT_SECONDS:.0f} s")
        operation = api.operations.wait(project=project, zone=zone, operation=operation.name,
                                        timeout=CHECK_TIMEOUT_SECONDS)
    if operation.error.errors:
        message = "; ".join(f"{e.code}: {e.message}" for e in operation.error.errors)
        raise from_http_status(operation.http_error_status_code or 500, message)


def _found(call: Any, message: str) -> Any:
    """``call()``, with Not Found turned into a LaunchError saying ``message``."""
    from google.api_core.exceptions import NotFound

    try:
        return call()
    except NotFound as exc:
        raise LaunchError(message) from exc


def _with_gcp_kwargs(settings: Settings, kwargs: Any) -> Settings:
    """The settings with ``gcp_kwargs`` (lowercase GCP_ names without the prefix) applied."""
    if kwargs is None:
        return settings
    names = {k[len("GCP_"):].lower(): k for k in settings if k.startswith("GCP_")}
    if not isinstance(kwargs, dict):
        raise LaunchError(f"gcp_kwargs must be a dict such as dict(zone='us-central1-a', "
                          f"preemptible=True), got {type(kwargs).__name__}")
    for key in kwargs:
        if key not in names:
            raise LaunchError(f"gcp_kwargs: unknown key {key!r}{did_you_mean(key, names)} "
                              "(keys are the GCP_ "
                              f"settings in lowercase: {', '.join(sorted(names))})")
    return override(settings, {names[k]: v for k, v in kwargs.items()}, "gcp_kwargs")
