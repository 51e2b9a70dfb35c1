"""The machine the instance agent runs on: who it is, interruption notices, its end.

The metadata service and the compute API (Compute Engine's, Azure Resource Manager) are reached
with urllib alone. Environment overrides (tests point them at stand-ins): ``EASYLAUNCH_WORKDIR``,
``EASYLAUNCH_METADATA_URL``, ``EASYLAUNCH_COMPUTE_URL`` and ``EASYLAUNCH_SHUTDOWN_CMD``
(``shutdown -h now``).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

from easylaunch_job.cloud.stores import AzureBlobStore, GcsStore, S3Store, Store

DEFAULT_SHUTDOWN_CMD = "shutdown -h now"
DEFAULT_COMPUTE_URL = "https://compute.googleapis.com"
ENV_METADATA_URL = "EASYLAUNCH_METADATA_URL"
ENV_COMPUTE_URL = "EASYLAUNCH_COMPUTE_URL"
ENV_SHUTDOWN_CMD = "EASYLAUNCH_SHUTDOWN_CMD"
ENV_WORKDIR = "EASYLAUNCH_WORKDIR"  # the folder runs live in
ENV_SNAPSHOTS = "EASYLAUNCH_SNAPSHOTS"  # a code snapshot store shared by the work folders
ENV_RAY_JOB = "EASYLAUNCH_RAY_JOB"  # a Ray job's submission id, in its own environment
ENV_AML_JOB = "AZUREML_RUN_ID"  # an Azure ML job's name, which Azure ML sets
ENV_INDEX = "EASYLAUNCH_INDEX"  # a managed job's share of the manifest, in its environment
GCE_INDEX_KEY = "easylaunch-index"  # the instance's share of the manifest, in its metadata
AZURE_INDEX_TAG = "easylaunch-index"  # the same, as a tag of an Azure VM
DEFAULT_ARM_URL = "https://management.azure.com"
ARM_VM_API_VERSION = "2024-07-01"
IMDS_API_VERSION = "2021-02-01"
SCHEDULED_EVENTS_API_VERSION = "2020-07-01"
TOKEN_TTL_SECONDS = 21600
HTTP_TIMEOUT_SECONDS = 5


def log(message: str) -> None:
    """One timestamped line in the instance log."""
    now = time.time()
    print(f"[easylaunch agent {time.strftime('%H:%M:%S', time.localtime(now))}"
          f".{int(now % 1 * 1000):03d}] {message}", flush=True)


def http(url: str, method: str = "GET", headers: dict | None = None) -> str | None:
    """The body of a reply, or None for an error status or an unreachable server."""
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_SECONDS) as reply:
            return reply.read().decode()
    except (OSError, ValueError):  # urllib.error.HTTPError is an OSError
        return None


def shutdown() -> None:
    command = os.environ.get(ENV_SHUTDOWN_CMD) or DEFAULT_SHUTDOWN_CMD
    log(f"shutting down: {command}")
    subprocess.run(shlex.split(command), check=False)


class Platform:
    """What the agent asks of the cloud it runs in: who it is, interruption notices, the end."""

    store_class: type[Store] = Store

    def __init__(self, region: str) -> None:
        self.region = region

    def describe(self) -> dict:
        """instance_id, where it runs and its index in the manifest."""
        raise NotImplementedError

    def interruption_notice(self) -> str | None:
        """A notice that the cloud takes the machine back soon, or None."""
        raise NotImplementedError

    def tag(self, instance: dict, tags: dict) -> None:
        """Label the instance with the agent's state (best effort)."""

    def end(self, instance: dict) -> None:
        """Make the instance go away."""
        shutdown()


class Aws(Platform):
    """EC2: IMDSv2 (a session token before any read), tags, shutdown with terminate behaviour."""

    store_class = S3Store
    base_url = "http://169.254.169.254"

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.base = (os.environ.get(ENV_METADATA_URL) or self.base_url).rstrip("/")
        self.token: str | None = None

    def _token(self) -> str | None:
        if self.token is None:
            self.token = http(self.base + "/latest/api/token", "PUT", {
                "X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)})
        return self.token

    def get(self, path: str) -> str | None:
        """``/latest/meta-data/<path>``, or None when absent or unreachable."""
        for _ in range(2):  # a token that expired is renewed once
            token = self._token()
            if token is None:
                return None
            req = urllib.request.Request(f"{self.base}/latest/meta-data/{path}",
                                         headers={"X-aws-ec2-metadata-token": token})
            try:
                with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT_SECONDS) as reply:
                    return reply.read().decode()
            except urllib.error.HTTPError as exc:
                if exc.code != 401:
                    return None
                self.token = None
            except (OSError, ValueError):
                return None
        return None

    def describe(self) -> dict:
        return {"instance_id": self.get("instance-id"),
                "region": self.get("placement/region") or self.region,
                "index": self.get("ami-launch-index") or "0"}

    def interruption_notice(self) -> str | None:
        return self.get("spot/instance-action")

    def tag(self, instance: dict, tags: dict) -> None:
        """Tag this instance (needs ec2:CreateTags; best effort)."""
        if not instance.get("instance_id"):
            return
        try:
            import boto3

            boto3.client("ec2", region_name=instance["region"]).create_tags(
                Resources=[instance["instance_id"]],
                Tags=[{"Key": k, "Value": v} for k, v in tags.items()])
        except Exception as exc:  # noqa: BLE001 - tags help people, the runs do not need them
            log(f"could not tag {instance['instance_id']}: {exc!r}")


class Gce(Platform):
    """Compute Engine: the metadata server (``Metadata-Flavor: Google``), preemption, and
    deleting itself through the Compute API with the service account's token."""

    store_class = GcsStore
    base_url = "http://metadata.google.internal"

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.base = (os.environ.get(ENV_METADATA_URL) or self.base_url).rstrip("/")

    def get(self, path: str) -> str | None:
        """``/computeMetadata/v1/<path>``, or None when absent or unreachable."""
        return http(f"{self.base}/computeMetadata/v1/{path}",
                    headers={"Metadata-Flavor": "Google"})

    def describe(self) -> dict:
        zone = (self.get("instance/zone") or "").rsplit("/", 1)[-1]
        return {"instance_id": self.get("instance/name"), "zone": zone,
                "project": self.get("project/project-id"),
                "index": self.get(f"instance/attributes/{GCE_INDEX_KEY}") or "0"}

    def interruption_notice(self) -> str | None:
        return "preempted" if (self.get("instance/preempted") or "").upper() == "TRUE" else None

    def end(self, instance: dict) -> None:
        """Delete this instance; shut down if the delete request is refused."""
        token = json.loads(self.get("instance/service-accounts/default/token") or "{}")
        url = (f"{os.environ.get(ENV_COMPUTE_URL) or DEFAULT_COMPUTE_URL}/compute/v1/projects/"
               f"{instance['project']}/zones/{instance['zone']}/instances/"
               f"{instance['instance_id']}")
        log(f"deleting this instance: DELETE {url}")
        if token.get("access_token") and http(url, "DELETE", {
                "Authorization": f"Bearer {token['access_token']}"}) is not None:
            return
        log("the delete request failed (does the service account have compute.instances"
            ".delete?); shutting down instead")
        shutdown()


class Azure(Platform):
    """An Azure VM: the Instance Metadata Service (``Metadata: true``), Spot eviction as a
    scheduled ``Preempt`` event, and deleting itself (with the disk and NIC created with it)
    through Azure Resource Manager with its managed identity's token."""

    store_class = AzureBlobStore
    base_url = "http://169.254.169.254"

    def __init__(self, region: str) -> None:
        super().__init__(region)
        self.base = (os.environ.get(ENV_METADATA_URL) or self.base_url).rstrip("/")

    def get(self, path: str, **query: str) -> dict:
        """``/metadata/<path>`` as JSON ({} when absent or unreachable)."""
        params = urllib.parse.urlencode(query)
        return json.loads(http(f"{self.base}/metadata/{path}?{params}",
                               headers={"Metadata": "true"}) or "{}")

    def describe(self) -> dict:
        compute = self.get("instance/compute", **{"api-version": IMDS_API_VERSION})
        tags = {t["name"]: t["value"] for t in compute.get("tagsList", [])}
        return {"instance_id": compute.get("name"), "region": compute.get("location"),
                "subscription": compute.get("subscriptionId"),
                "resource_group": compute.get("resourceGroupName"),
                "index": tags.get(AZURE_INDEX_TAG, "0")}

    def interruption_notice(self) -> str | None:
        events = self.get("scheduledevents", **{"api-version": SCHEDULED_EVENTS_API_VERSION})
        for event in events.get("Events", []):
            if event.get("EventType") == "Preempt":
                return f"Spot eviction scheduled (not before {event.get('NotBefore') or 'now'})"
        return None

    def end(self, instance: dict) -> None:
        """Delete this VM; shut down if the delete request is refused (a VM shut down from
        inside is stopped, not deallocated: the launching side deletes it when it looks)."""
        token = self.get("identity/oauth2/token", **{
            "api-version": "2018-02-01", "resource": DEFAULT_ARM_URL + "/"}).get("access_token")
        url = (f"{os.environ.get(ENV_COMPUTE_URL) or DEFAULT_ARM_URL}/subscriptions/"
               f"{instance['subscription']}/resourceGroups/{instance['resource_group']}/"
               f"providers/Microsoft.Compute/virtualMachines/{instance['instance_id']}"
               f"?api-version={ARM_VM_API_VERSION}")
        log(f"deleting this VM: DELETE {url}")
        if token and http(url, "DELETE", {"Authorization": f"Bearer {token}"}) is not None:
            return
        log("the delete request failed (may the VM's managed identity delete it: Virtual "
            "Machine Contributor on the resource group?); shutting down instead")
        shutdown()


class ManagedJob(Platform):
    """A job of a managed job service, whose entrypoint is the agent: who it is comes from its
    environment (``job_var``, ``EASYLAUNCH_INDEX``); no interruption notice (a lost job is
    seen by the launching side); at the end only the job's work folder goes (everything in it
    is synced), the machine stays: it is the service's."""

    job_var = ""

    def describe(self) -> dict:
        return {"instance_id": os.environ.get(self.job_var, ""), "region": "",
                "index": os.environ.get(ENV_INDEX, "0"),
                "workdir": os.environ.get(ENV_WORKDIR, "")}

    def interruption_notice(self) -> str | None:
        return None

    def end(self, instance: dict) -> None:
        workdir = instance.get("workdir")
        if workdir and os.path.basename(workdir) == instance.get("instance_id"):
            shutil.rmtree(workdir, ignore_errors=True)


class RayJob(ManagedJob):
    """A Ray job (``EASYLAUNCH_RAY_JOB``: its submission id)."""

    job_var = ENV_RAY_JOB


class AmlJob(ManagedJob):
    """An Azure ML command job (``AZUREML_RUN_ID``: its name); each of its processes runs the
    agent, rank 0 as the agent, the others as followers."""

    job_var = ENV_AML_JOB


PLATFORMS: dict[str, type[Platform]] = {"aws": Aws, "gcp": Gce, "azure": Azure,
                                         "ray": RayJob, "aml": AmlJob}
