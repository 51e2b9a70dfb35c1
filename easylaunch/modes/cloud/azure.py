"""``azure``: each run on an Azure VM that syncs its log folder to a Blob container and deletes
itself when done (doodad's ``mode='azure'``).

The shared cloud path (modes/cloud/base.py) uploads, writes the manifest and tracks runs; this
module adds what is Azure's own: one ``virtualMachines`` PUT per VM (azure-mgmt-compute) with
the boot script as cloud-init custom data, a user-assigned managed identity (the VM reads and
writes the container and deletes itself with it: no key reaches the VM), the OS disk, NIC and
public IP created with the VM and deleted with it, Spot priority with a maximum price when
asked; one ``list`` call per resource group to see VMs end; ``delete`` for cancel.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import re
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, needed
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.base import CloudMode
from easylaunch.modes.cloud.fleet import Fleet, InstanceState, Target, instance_name
from easylaunch.runs.record import LaunchRequest
from easylaunch_job.cloud.platforms import AZURE_INDEX_TAG, ENV_COMPUTE_URL
from easylaunch_job.cloud.stores import ENV_AZURE_CONNECTION, AzureBlobStore

ADMIN_USER = "easylaunch"
NETWORK_API_VERSION = "2020-11-01"  # VMs that create (and delete) their own NICs
ENDED_POWER_STATES = frozenset({"stopping", "stopped", "deallocating", "deallocated"})
# The VM size of each GPU model doodad names (DEFAULT_AZURE_GPU_MODEL), by GPUs per VM.
GPU_VM_SIZES: dict[str, dict[int, str]] = {
    "nvidia-tesla-t4": {1: "Standard_NC4as_T4_v3", 4: "Standard_NC64as_T4_v3"},
    "nvidia-tesla-v100": {1: "Standard_NC6s_v3", 2: "Standard_NC12s_v3",
                          4: "Standard_NC24s_v3"},
    "nvidia-a100": {1: "Standard_NC24ads_A100_v4", 2: "Standard_NC48ads_A100_v4",
                    4: "Standard_NC96ads_A100_v4"},
    "nvidia-h100": {1: "Standard_NC40ads_H100_v5", 2: "Standard_NC80adis_H100_v5"},
}
_ARM_ID = r"/subscriptions/[^/]+/resourceGroups/[^/]+/providers/"
IDENTITY_ID = re.compile(_ARM_ID + r"Microsoft\.ManagedIdentity/userAssignedIdentities/[^/]+$",
                         re.IGNORECASE)
SUBNET_ID = re.compile(_ARM_ID + r"Microsoft\.Network/virtualNetworks/[^/]+/subnets/[^/]+$",
                       re.IGNORECASE)


def _sdk() -> Any:
    named = "azure-mgmt-compute, azure-storage-blob and azure-identity"  # (all are needed)
    needed("azure.storage.blob", "mode 'azure'", "azure", named)
    needed("azure.identity", "mode 'azure'", "azure", named)
    return needed("azure.mgmt.compute", "mode 'azure'", "azure", named)


@functools.lru_cache(maxsize=8)
def _credential(tenant: str | None, client: str | None, secret: str | None,
                _authority: str | None) -> Any:
    from azure.identity import ClientSecretCredential, DefaultAzureCredential

    if secret:
        # a service principal (doodad's AZ_TENANT_ID, AZ_CLIENT_ID, AZ_SECRET); an authority
        # other than Microsoft's own (Azure Stack, AZURE_AUTHORITY_HOST) is taken as given
        # (a tenant or client left unset: the SDK's ValueError says so)
        return ClientSecretCredential(tenant, client, secret,  # type: ignore[arg-type]
                                      authority=_authority,
                                      disable_instance_discovery=bool(_authority))
    return DefaultAzureCredential(exclude_interactive_browser_credential=True)


def credential(settings: Any) -> Any:
    """The service principal of the settings, else azure-identity's chain (environment,
    managed identity, ``az login``), once per process and settings."""
    _sdk()
    return _credential(settings.AZURE_TENANT_ID, settings.AZURE_CLIENT_ID,
                       settings.AZURE_CLIENT_SECRET, os.environ.get("AZURE_AUTHORITY_HOST"))


@functools.lru_cache(maxsize=8)
def _compute_client(subscription: str, cred: Any, url: str | None) -> Any:
    return _sdk().ComputeManagementClient(cred, subscription, base_url=url)


@functools.lru_cache(maxsize=8)
def _store(bucket: str, account_url: str | None, connection: str | None,
           cred: Any) -> AzureBlobStore:
    return AzureBlobStore.connect(bucket, account_url, connection, cred)


def connection_string(settings: Any) -> str | None:
    """The storage account's connection string for this machine (never sent anywhere): the
    settings', else the environment's."""
    return settings.AZURE_STORAGE_CONNECTION_STRING or os.environ.get(ENV_AZURE_CONNECTION)


def store(bucket: str, account_url: str | None, settings: Any) -> AzureBlobStore:
    """The container ``bucket``: through the storage connection string where there is one,
    else on ``account_url`` with :func:`credential` (one client per process and settings)."""
    return _store(bucket, account_url, connection_string(settings), credential(settings))


def _price(value: float | None) -> str:
    return f"max ${value}/hour each" if value and value > 0 else "up to the on-demand price"


@dataclass(frozen=True)
class AzureTarget(Target):
    """A target with what the VM resource and the checks need besides."""

    subscription: str
    resource_group: str
    spot_max_price: float | None  # None: not Spot; -1: up to the on-demand price
    instances: int  # how many VMs the launch starts (the quota check)


class AzureMode(CloudMode[AzureTarget]):
    """Runs on Azure VMs, tracked through Blob Storage and Azure Resource Manager."""

    name = "azure"
    cloud = "azure"
    store_scheme = "az"
    settings_prefix = "AZURE"
    machine_type_keys = ("AZURE_VM_SIZE", "AZURE_GPU_VM_SIZE")

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        return {"instance_type": self.vm_size(request.use_gpu),
                "docker_image": str(self.docker_image())}

    # -- settings -------------------------------------------------------------------------------

    def vm_size(self, use_gpu: bool) -> str:
        """AZURE_VM_SIZE, or for GPU runs AZURE_GPU_VM_SIZE, else the size of
        AZURE_GPU_COUNT x AZURE_GPU_MODEL."""
        s = self.settings
        if not use_gpu:
            return s.AZURE_VM_SIZE
        if s.AZURE_GPU_VM_SIZE:
            return s.AZURE_GPU_VM_SIZE
        sizes = GPU_VM_SIZES.get(str(s.AZURE_GPU_MODEL).lower(), {})
        if s.AZURE_GPU_COUNT not in sizes:
            known = ", ".join(f"{m} x {sorted(n)}" for m, n in GPU_VM_SIZES.items())
            raise LaunchError(
                f"no Azure VM size known for {s.AZURE_GPU_COUNT} x {s.AZURE_GPU_MODEL!r} "
                f"(AZURE_GPU_COUNT, AZURE_GPU_MODEL); set AZURE_GPU_VM_SIZE to the size you "
                f"want (az vm list-sizes), or pick one of: {known}")
        return sizes[s.AZURE_GPU_COUNT]

    def value_problems(self) -> list[str]:
        s = self.settings
        problems = []
        for key in ("AZURE_SUBSCRIPTION_ID", "AZURE_RESOURCE_GROUP", "AZURE_IDENTITY",
                    "AZURE_SUBNET_ID"):
            if not s[key]:
                problems.append(f"{key} is not set: {_WHY[key]}")
        if s.AZURE_IDENTITY and not IDENTITY_ID.match(s.AZURE_IDENTITY):
            problems.append(f"AZURE_IDENTITY must be a user-assigned identity's resource id, "
                            f"/subscriptions/SUB/resourceGroups/RG/providers/Microsoft."
                            f"ManagedIdentity/userAssignedIdentities/NAME, got "
                            f"{s.AZURE_IDENTITY!r} (az identity show --query id)")
        if s.AZURE_SUBNET_ID and not SUBNET_ID.match(s.AZURE_SUBNET_ID):
            problems.append(f"AZURE_SUBNET_ID must be a subnet's resource id, /subscriptions/"
                            f"SUB/resourceGroups/RG/providers/Microsoft.Network/virtualNetworks/"
                            f"VNET/subnets/SUBNET, got {s.AZURE_SUBNET_ID!r}")
        if len(s.AZURE_IMAGE.split(":")) != 4 or len(s.AZURE_GPU_IMAGE.split(":")) != 4:
            problems.append("AZURE_IMAGE and AZURE_GPU_IMAGE must be image URNs, "
                            "PUBLISHER:OFFER:SKU:VERSION (az vm image list), got "
                            f"{s.AZURE_IMAGE!r} and {s.AZURE_GPU_IMAGE!r}")
        if not (s.AZURE_STORAGE_ACCOUNT_URL or connection_string(s)):
            problems.append("AZURE_STORAGE_ACCOUNT_URL is not set: the blob endpoint of "
                            "AZURE_STORAGE_PATH's account, https://ACCOUNT.blob.core.windows.net"
                            f" (or {ENV_AZURE_CONNECTION}, in the settings or the environment)")
        return problems

    def import_sdk(self) -> None:
        _sdk()

    def target(self, request: LaunchRequest) -> AzureTarget:
        s = self.settings
        bucket, prefix = cloud.split_url(s.AZURE_STORAGE_PATH, "az", "AZURE_STORAGE_PATH")
        spot = (s.AZURE_SPOT_MAX_PRICE or -1) if s.AZURE_SPOT else None
        n = self.per_instance()
        return AzureTarget(
            location=s.AZURE_LOCATION, bucket=bucket, prefix=prefix,
            image=s.AZURE_GPU_IMAGE if request.use_gpu else s.AZURE_IMAGE,
            machine_type=self.vm_size(request.use_gpu),
            market=f"spot ({_price(spot)})" if spot else "on-demand",
            subscription=s.AZURE_SUBSCRIPTION_ID, resource_group=s.AZURE_RESOURCE_GROUP,
            spot_max_price=spot, instances=-(-len(request.variants) // n))

    def hourly_price(self, target: AzureTarget) -> float | None:
        price = target.spot_max_price
        return price if price and price > 0 else None

    # -- clients and checks ---------------------------------------------------------------------

    def compute(self, subscription: str) -> Any:
        """The Compute client (``EASYLAUNCH_COMPUTE_URL`` points Resource Manager elsewhere)."""
        return _compute_client(subscription, credential(self.settings),
                               os.environ.get(ENV_COMPUTE_URL))

    def store(self, bucket: str, location: str) -> AzureBlobStore:
        return store(bucket, self.settings.AZURE_STORAGE_ACCOUNT_URL, self.settings)

    def agent_region(self, target: Target) -> str:
        """The account's blob endpoint: the VMs sign in to it with their managed identity."""
        return self.settings.AZURE_STORAGE_ACCOUNT_URL or self.store(
            target.bucket, target.location).account_url

    def check_cloud(self, target: AzureTarget) -> None:
        """Credentials, subscription, resource group, VM size, image, vCPU quota and
        container, asked of Azure."""
        from azure.core.exceptions import (
            ClientAuthenticationError,
            HttpResponseError,
            ServiceRequestError,
        )

        api = self.compute(target.subscription)
        where = f"resource group {target.resource_group!r} of subscription {target.subscription}"
        try:
            next(iter(api.virtual_machines.list(target.resource_group)), None)
            size = next((z for z in api.virtual_machine_sizes.list(target.location)
                         if z.name.lower() == target.machine_type.lower()), None)
            if size is None:
                raise LaunchError(f"VM size {target.machine_type!r} is not offered in "
                                  f"{target.location}; fix AZURE_VM_SIZE / AZURE_GPU_VM_SIZE "
                                  f"(az vm list-sizes --location {target.location}) or "
                                  "AZURE_LOCATION")
            self._check_image(api, target)
            self._check_quota(api, target, size.number_of_cores)
            found = self.store(target.bucket, target.location).bucket_exists()
        except ClientAuthenticationError as exc:
            raise LaunchError(f"Azure refused the credentials: {exc.message}; sign in (az "
                              "login) or set AZURE_TENANT_ID, AZURE_CLIENT_ID and "
                              "AZURE_CLIENT_SECRET to a service principal's") from exc
        except HttpResponseError as exc:
            code = getattr(exc.error, "code", None) or ""
            said = getattr(exc.error, "message", None) or exc.reason
            fix = {"SubscriptionNotFound": "fix AZURE_SUBSCRIPTION_ID (az account list)",
                   "InvalidSubscriptionId": "fix AZURE_SUBSCRIPTION_ID (az account list)",
                   "ResourceGroupNotFound": "fix AZURE_RESOURCE_GROUP, or create it (az group "
                                            f"create -n {target.resource_group} -l "
                                            f"{target.location})",
                   "AuthorizationFailed": "give the signed-in identity Virtual Machine "
                                          f"Contributor on the {where}",
                   "ContainerNotFound": "create the container of AZURE_STORAGE_PATH"}.get(
                code, "check the settings it names")
            raise LaunchError(f"Azure refused a check before launching ({where}): "
                              f"{code or exc.status_code}: {said}; {fix}") from exc
        except ServiceRequestError as exc:
            raise LaunchError(f"cannot reach Azure: {exc}; check the network") from exc
        if not found:
            raise LaunchError(f"the Blob container {target.bucket!r} of AZURE_STORAGE_PATH does "
                              "not exist; create it (az storage container create -n "
                              f"{target.bucket}) or set AZURE_STORAGE_PATH to a container you "
                              "can write")

    @staticmethod
    def _check_image(api: Any, target: AzureTarget) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        publisher, offer, sku, version = target.image.split(":")
        try:
            versions = api.virtual_machine_images.list(target.location, publisher, offer, sku)
        except ResourceNotFoundError:
            versions = []
        if not versions or (version != "latest" and version not in {v.name for v in versions}):
            raise LaunchError(f"image {target.image!r} is not offered in {target.location}; fix "
                              f"AZURE_IMAGE / AZURE_GPU_IMAGE (az vm image list --location "
                              f"{target.location} --publisher {publisher} --offer {offer} "
                              f"--sku {sku} --all)")

    @staticmethod
    def _check_quota(api: Any, target: AzureTarget, cores_each: int) -> None:
        usage = next((u for u in api.usage.list(target.location) if u.name.value == "cores"),
                     None)
        wanted = cores_each * target.instances
        if usage is not None and usage.current_value + wanted > usage.limit:
            left = usage.limit - usage.current_value
            raise LaunchError(
                f"{target.instances} x {target.machine_type} need {wanted} vCPUs, but "
                f"{target.location}'s regional vCPU quota leaves {left} of {usage.limit}; "
                "ask for more quota (Azure portal: Quotas), use fewer or smaller VMs, or more "
                "runs per VM (num_exps_per_instance)")

    # -- starting VMs ---------------------------------------------------------------------------

    def vm_resource(self, request: LaunchRequest, target: AzureTarget, fleet: Fleet,
                    index: int, name: str) -> dict:
        """The body of one ``virtualMachines`` PUT, in Resource Manager's JSON."""
        s = self.settings
        publisher, offer, sku, version = target.image.split(":")
        delete = {"deleteOption": "Delete"}  # (goes with the VM)
        ip_config: dict[str, Any] = {"subnet": {"id": s.AZURE_SUBNET_ID}}
        if s.AZURE_PUBLIC_IP:
            ip_config["publicIPAddressConfiguration"] = {
                "name": f"{name}-ip", "sku": {"name": "Standard"}, "properties": delete}
        properties: dict[str, Any] = {
            "hardwareProfile": {"vmSize": target.machine_type},
            "storageProfile": {
                "imageReference": {"publisher": publisher, "offer": offer, "sku": sku,
                                   "version": version},
                "osDisk": {"createOption": "FromImage", "diskSizeGB": s.AZURE_DISK_SIZE_GB,
                           "managedDisk": {"storageAccountType": "StandardSSD_LRS"},
                           **delete}},
            "osProfile": {
                "computerName": name, "adminUsername": ADMIN_USER,
                "customData": base64.b64encode(fleet.boot_script.encode()).decode(),
                "linuxConfiguration": {"disablePasswordAuthentication": True, "ssh": {
                    "publicKeys": [{"path": f"/home/{ADMIN_USER}/.ssh/authorized_keys",
                                    "keyData": self.ssh_public_key()}]}}},
            "networkProfile": {"networkApiVersion": NETWORK_API_VERSION,
                               "networkInterfaceConfigurations": [{
                                   "name": f"{name}-nic",
                                   "properties": {"primary": True, **delete, "ipConfigurations": [
                                       {"name": "ipconfig1", "properties": ip_config}]}}]}}
        if target.spot_max_price is not None:
            properties.update(priority="Spot", evictionPolicy="Delete",
                              billingProfile={"maxPrice": target.spot_max_price})
        return {
            "location": target.location,
            "tags": {"easylaunch-exp": request.exp_name[:256],
                     "easylaunch-run": fleet.instances[index][0],
                     "easylaunch-launch": fleet.launch_id, AZURE_INDEX_TAG: str(index)},
            "identity": {"type": "UserAssigned",
                         "userAssignedIdentities": {s.AZURE_IDENTITY: {}}},
            "properties": properties}

    def ssh_public_key(self) -> str:
        """AZURE_SSH_PUBLIC_KEY, else a key whose private half no one has (the VMs need no
        logins; Azure asks for a key or a password)."""
        if self.settings.AZURE_SSH_PUBLIC_KEY:
            return self.settings.AZURE_SSH_PUBLIC_KEY
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.generate().public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()

    def start_fleet(self, request: LaunchRequest, target: AzureTarget,
                    fleet: Fleet) -> list[dict]:
        """One PUT per VM, then wait for their provisioning; on any failure, delete those
        created and raise the error with what was asked."""
        api = self.compute(target.subscription)
        record = {"subscription": target.subscription, "resource_group": target.resource_group}
        names = [instance_name(request.exp_name, ids[0], fleet.relaunch) for ids in fleet.instances]
        created: list[str] = []
        try:
            pollers = []
            for index, name in enumerate(names):
                pollers.append(api.virtual_machines.begin_create_or_update(
                    target.resource_group, name,
                    self.vm_resource(request, target, fleet, index, name)))
                created.append(name)
            for poller in pollers:
                poller.result()
        except Exception as exc:
            if created:
                self.end_instances(record, created)
            raise LaunchError(
                f"Azure did not start {len(names)} {target.machine_type} {target.market} VM(s) "
                f"of {target.image} in {target.location} ({target.resource_group}): "
                f"{getattr(exc, 'message', None) or exc}") from exc
        return [dict(record, instance_id=name, machine_type=target.machine_type,
                     market=target.market, launch_label=fleet.launch_id) for name in names]

    # -- tracking and ending --------------------------------------------------------------------

    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        """Delete the VMs (their disks, NICs and IPs go with them), without waiting; one
        already gone is left alone."""
        from azure.core.exceptions import ResourceNotFoundError

        api = self.compute(record["subscription"])
        for name in instance_ids:
            with contextlib.suppress(ResourceNotFoundError):
                api.virtual_machines.begin_delete(record["resource_group"], name)

    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """One ``list`` (with instance views) per resource group; VMs of these launches."""
        launches = {(b["subscription"], b["resource_group"]) for b in backends}
        labels = {b["launch_label"] for b in backends}
        states = {}
        for subscription, group in sorted(launches):
            for vm in self.compute(subscription).virtual_machines.list(
                    group, expand="instanceView"):
                if (vm.tags or {}).get("easylaunch-launch") not in labels:
                    continue
                states[vm.name] = _state(vm)
        return states


def _state(vm: Any) -> InstanceState:
    """A VM's provisioning and power state as easylaunch sees it."""
    view = vm.properties.instance_view
    codes = [status.code for status in (view.statuses if view else None) or []]
    power = next((c.split("/", 1)[1] for c in codes if c.startswith("PowerState/")), "")
    provisioning = vm.properties.provisioning_state or ""
    ended = power in ENDED_POWER_STATES or provisioning == "Deleting"
    name = power or provisioning.lower()
    return InstanceState(name, ended, "" if not ended else f"{provisioning}, {name}", False)


_WHY = {
    "AZURE_SUBSCRIPTION_ID": "the subscription VMs start in (doodad's AZ_SUB_ID; az account "
                             "show --query id)",
    "AZURE_RESOURCE_GROUP": "the resource group VMs start in (az group list)",
    "AZURE_IDENTITY": "the resource id of a user-assigned managed identity the VMs use to read "
                      "and write AZURE_STORAGE_PATH (Storage Blob Data Contributor) and to "
                      "delete themselves (Virtual Machine Contributor on the resource group)",
    "AZURE_SUBNET_ID": "the resource id of the subnet VMs join (az network vnet subnet list)",
}
