"""Azure for the azure tests: Microsoft's own storage emulator, and stand-ins where nothing real
can run here.

* ``start_azurite``: Azurite (real; npm, installed into .tools/ by scripts/setup.sh) serving Blob
  Storage over HTTPS with OAuth on ("basic": a bearer token's issuer, audience and lifetime are
  checked), so VMs reach the container with their managed identity's tokens, no key.
* ``ArmStub``: a stand-in of Microsoft Entra ID's token endpoint (client credentials) and of the
  Azure Resource Manager calls easylaunch makes (virtualMachines PUT/GET/DELETE/list, vmSizes,
  usages, image versions, async operations), in their wire format (error bodies, long-running
  operations through ``Azure-AsyncOperation``), over HTTPS with a test certificate. Every ARM
  call must carry a token it issued.
* ``AzureVm``: a created VM played here: its custom data runs with bash in a sandbox folder,
  with a stand-in of its Instance Metadata Service (instance metadata, managed identity tokens,
  scheduled events). Deleting or evicting it stops it as Azure does (SIGTERM, then off), and
  removes the disk, NIC and IP created with it when their deleteOption says so.
"""

import base64
import contextlib
import datetime
import ipaddress
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

from helpers import LoopbackServer, PlayedInstance, free_port

TESTS = Path(__file__).resolve().parent
AZURITE = TESTS.parent / ".tools" / "azurite" / "node_modules" / "azurite" / "dist" / "src" / \
    "blob" / "main.js"  # (scripts/setup.sh installs it)
# Azurite's well-known development account (published by Microsoft: no secret)
DEV_ACCOUNT = "devstoreaccount1"
DEV_KEY = ("Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGM"
           "Gw==")
SUBSCRIPTION = "0b1f6471-1bf0-4dda-aec3-111122223333"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "5a0a4a7c-6c1e-4d7e-9f5d-444455556666"
RESOURCE_GROUP = "easylaunch-rg"
LOCATION = "westus2"
IDENTITY = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/"
            "Microsoft.ManagedIdentity/userAssignedIdentities/easylaunch-runs")
SUBNET = (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{RESOURCE_GROUP}/providers/"
          "Microsoft.Network/virtualNetworks/vnet/subnets/default")
VM_SIZES = {"Standard_D2s_v5": 2, "Standard_D4s_v5": 4, "Standard_NC4as_T4_v3": 4}
IMAGES = {("Canonical", "0001-com-ubuntu-server-jammy", "22_04-lts-gen2"): ["22.04.202410020"]}
CORE_QUOTA = 20
NAME_RE = re.compile(r"^[a-zA-Z0-9]([-a-zA-Z0-9.]{0,62}[a-zA-Z0-9])?$")
STOP_GRACE_SECONDS = 30
API_PREFIX = "/subscriptions/"


def make_certificate(folder: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in ``folder``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    cert_file, key_file = folder / "cert.pem", folder / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def start_azurite(root: Path, tls: tuple[Path, Path]) -> tuple[subprocess.Popen, str]:
    """Azurite's blob service over HTTPS with OAuth: (process, the account's blob endpoint)."""
    port = free_port()
    proc = subprocess.Popen(
        ["node", str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port),
         "--location", str(root), "--disableTelemetry", "--skipApiVersionCheck",
         "--cert", str(tls[0]), "--key", str(tls[1]), "--oauth", "basic"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, f"https://127.0.0.1:{port}/{DEV_ACCOUNT}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("Azurite did not start")


def connection_string(account_url: str) -> str:
    return (f"DefaultEndpointsProtocol=https;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
            f"BlobEndpoint={account_url};")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(audience: str, subject: str, lifetime: int = 3600) -> str:
    """An Entra ID-shaped access token (Azurite checks issuer, audience and lifetime)."""
    now = int(time.time())
    claims = {"aud": audience, "iss": f"https://sts.windows.net/{TENANT}/", "iat": now - 60,
              "nbf": now - 60, "exp": now + lifetime, "oid": subject, "sub": subject,
              "tid": TENANT, "ver": "1.0"}
    return ".".join([_b64(b'{"alg":"RS256","typ":"JWT"}'), _b64(json.dumps(claims).encode()),
                     _b64(secrets.token_bytes(64))])


def _json(code: int, obj, **headers) -> tuple[int, dict, bytes]:
    return code, {"Content-Type": "application/json; charset=utf-8", **headers}, \
        json.dumps(obj).encode()


def _error(code: int, error: str, message: str) -> tuple[int, dict, bytes]:
    return _json(code, {"error": {"code": error, "message": message}})


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat()


class ImdsStub:
    """One VM's (or Azure ML job's) Instance Metadata Service (``Metadata: true`` on every
    request)."""

    def __init__(self, vm) -> None:
        self.vm = vm
        self.events: list[dict] = []
        self.incarnation = 1
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def _handle(self, method, path, headers, body):
        parts = urllib.parse.urlsplit(path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
        if headers.get("Metadata") != "true":
            return _json(400, {"error": "Bad request. Required metadata header not specified"})
        if "api-version" not in query:
            return _json(400, {"error": "Bad request. api-version was not specified"})
        if parts.path == "/metadata/instance/compute":
            return _json(200, self.vm.compute_metadata())
        if parts.path == "/metadata/scheduledevents":
            return _json(200, {"DocumentIncarnation": self.incarnation, "Events": self.events})
        if parts.path == "/metadata/identity/oauth2/token":
            return self._token(query.get("resource", ""))
        return _json(404, {"error": "Not found"})

    def _token(self, resource: str):
        if not self.vm.has_identity():
            return _json(400, {"error": "invalid_request",
                               "error_description": "Identity not found"})
        if resource.rstrip("/") == "https://storage.azure.com":
            token = jwt("https://storage.azure.com", self.vm.principal)
        elif resource.rstrip("/") == "https://management.azure.com":
            token = self.vm.stub.issue(self.vm.name)
        else:
            return _json(400, {"error": "invalid_resource",
                               "error_description": f"AADSTS500011: resource {resource} not "
                                                    "found"})
        now = int(time.time())
        return _json(200, {"access_token": token, "client_id": self.vm.client_id,
                           "expires_in": "86399", "expires_on": str(now + 86399),
                           "ext_expires_in": "86399", "not_before": str(now),
                           "resource": resource, "token_type": "Bearer"})

    def schedule_eviction(self) -> None:
        self.incarnation += 1
        self.events = [{"EventId": str(uuid.uuid4()), "EventType": "Preempt",
                        "ResourceType": "VirtualMachine", "Resources": [self.vm.name],
                        "EventStatus": "Scheduled", "NotBefore": time.strftime(
                            "%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30)),
                        "Description": "Virtual machine is being evicted from Azure Spot",
                        "EventSource": "Platform", "DurationInSeconds": -1}]

    def close(self) -> None:
        self._server.close()


_FAKE_SHUTDOWN = """#!/bin/bash
echo "shutdown $*" >> "$FAKE_SHUTDOWN_LOG"
"""


class AzureVm(PlayedInstance):
    """One Azure VM played on this machine: its custom data runs in a sandbox."""

    def __init__(self, stub: "ArmStub", resource: dict) -> None:
        self.stub = stub
        self.resource = resource
        self.name = resource["name"]
        self.principal = str(uuid.uuid4())
        self.client_id = str(uuid.uuid4())
        self.imds = ImdsStub(self)
        bin_dir = self.make_sandbox(stub.sandbox / self.name, _FAKE_SHUTDOWN)
        self.custom_data = base64.b64decode(
            resource["properties"]["osProfile"]["customData"]).decode()
        (self.root / "custom-data").write_text(self.custom_data)
        self.env = dict(stub.instance_env, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                        HOME=str(self.root), EASYLAUNCH_METADATA_URL=self.imds.url,
                        AZURE_POD_IDENTITY_AUTHORITY_HOST=self.imds.url,
                        EASYLAUNCH_COMPUTE_URL=stub.url, EASYLAUNCH_WORKDIR=str(self.workdir),
                        REQUESTS_CA_BUNDLE=str(stub.tls[0]), SSL_CERT_FILE=str(stub.tls[0]),
                        FAKE_SHUTDOWN_LOG=str(self.shutdown_log))
        self.proc: subprocess.Popen | None = None

    def has_identity(self) -> bool:
        return bool(self.resource.get("identity", {}).get("userAssignedIdentities"))

    def compute_metadata(self) -> dict:
        tags = self.resource.get("tags", {})
        return {"name": self.name, "location": self.resource["location"],
                "resourceGroupName": self.stub.group_of(self.name),
                "subscriptionId": SUBSCRIPTION, "vmId": self.resource["properties"]["vmId"],
                "vmSize": self.resource["properties"]["hardwareProfile"]["vmSize"],
                "priority": self.resource["properties"].get("priority", "Regular"),
                "tags": ";".join(f"{k}:{v}" for k, v in tags.items()),
                "tagsList": [{"name": k, "value": v} for k, v in tags.items()]}

    def boot(self) -> None:
        self.proc = subprocess.Popen(["bash", str(self.root / "custom-data")], cwd=self.root,
                                     env=self.env, start_new_session=True,
                                     stdin=subprocess.DEVNULL)
        self.stub.power[self.name] = "running"

    def halt(self) -> None:
        """What Azure does to a VM it stops, deletes or evicts: the OS shuts down (SIGTERM to
        its processes, then, after a grace period, off)."""
        self.stub.power[self.name] = "stopping"
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(STOP_GRACE_SECONDS)
        self.kill()
        self.stub.power[self.name] = "stopped"

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class ArmStub:
    """Entra ID's client-credentials token endpoint and the Resource Manager calls easylaunch
    makes, over HTTPS."""

    def __init__(self, instance_env: dict, tls: tuple[Path, Path], client_secret: str) -> None:
        self.instance_env = instance_env
        self.tls = tls
        self.client_secret = client_secret
        self.sandbox = Path("/nonexistent")  # set per test
        self.vms: dict[tuple[str, str], dict] = {}  # (group, name) -> resource
        self.played: dict[str, AzureVm] = {}
        self.power: dict[str, str] = {}
        self.attached: dict[str, dict] = {}  # disk/NIC/IP name -> {"vm":..., "deleteOption":..}
        self.operations: dict[str, dict] = {}
        self.tokens: dict[str, str] = {}  # token -> "client" or a VM's name
        self.calls: list[tuple[str, str, str]] = []  # (method, path, caller)
        self.groups = {RESOURCE_GROUP}
        self.providers: dict = {}  # other resource providers' stand-ins (aml_stubs)
        self.core_usage = 0  # vCPUs used by others
        self.lock = threading.RLock()
        self._server = LoopbackServer(self._handle, tls)
        self.url = self._server.url

    def close(self) -> None:
        for vm in self.played.values():
            vm.kill()
            vm.imds.close()
        self._server.close()

    # -- helpers for tests ----------------------------------------------------------------------

    def issue(self, who: str) -> str:
        token = jwt("https://management.azure.com/", who)
        self.tokens[token] = who
        return token

    def group_of(self, name: str) -> str:
        return next(g for (g, n) in self.vms if n == name)

    def vm(self, name: str) -> dict | None:
        return next((r for (_, n), r in self.vms.items() if n == name), None)

    def deletes_by(self, caller: str) -> list[str]:
        return [p for m, p, c in self.calls if m == "DELETE" and c == caller]

    def evict(self, name: str, notice_seconds: float = 3.0) -> None:
        """Spot eviction as Azure does it: a Preempt scheduled event, then (with evictionPolicy
        Delete) the VM stops and is deleted with what was created with it."""
        vm = self.played[name]
        group = self.group_of(name)
        vm.imds.schedule_eviction()
        time.sleep(notice_seconds)
        vm.halt()
        with self.lock:
            self._remove(group, name)

    # -- the API --------------------------------------------------------------------------------

    def _handle(self, method, path, headers, body):
        parts = urllib.parse.urlsplit(path)
        query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
        m = re.match(r"^/([^/]+)/(v2\.0/\.well-known/openid-configuration|oauth2/v2\.0/token)$",
                     parts.path)
        if m:
            return self._entra(method, m.group(1), m.group(2), body)
        if parts.path == "/metadata/endpoints":
            return self._cloud_metadata()
        token = headers.get("Authorization", "").removeprefix("Bearer ")
        caller = self.tokens.get(token)
        self.calls.append((method, parts.path, caller or "anonymous"))
        if caller is None:
            return _error(401, "InvalidAuthenticationToken",
                          "The access token is invalid.")
        if "api-version" not in query:
            return _error(400, "MissingApiVersionParameter",
                          "The api-version query parameter (?api-version=) is required for all "
                          "requests.")
        with self.lock:
            return self._route(method, parts.path, query, body, caller)

    def _entra(self, method, tenant, what, body):
        base = f"{self.url}/{tenant}"
        if what.startswith("v2.0"):
            return _json(200, {"token_endpoint": f"{base}/oauth2/v2.0/token",
                               "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                               "issuer": f"{base}/v2.0", "tenant_region_scope": "NA"})
        form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
        if tenant != TENANT:
            return _json(400, {"error": "invalid_request", "error_description":
                               f"AADSTS90002: Tenant '{tenant}' not found."})
        if form.get("client_id") != CLIENT_ID or form.get("client_secret") != self.client_secret:
            return _json(401, {"error": "invalid_client", "error_description":
                               "AADSTS7000215: Invalid client secret provided."})
        return _json(200, {"token_type": "Bearer", "expires_in": 3599, "ext_expires_in": 3599,
                           "access_token": self.issue("client")})

    def _route(self, method, path, query, body, caller):
        m = re.match(r"^/subscriptions/([^/]+)(/.*)?$", path)
        if not m or m.group(1) != SUBSCRIPTION:
            return _error(404, "SubscriptionNotFound",
                          f"The subscription '{m.group(1) if m else ''}' could not be found.")
        rest = m.group(2) or ""
        m = re.match(r"^/resourceGroups/([^/]+)/providers/([^/]+)/(.*)$", rest)
        if m and m.group(2) in self.providers:
            if m.group(1) not in self.groups:
                return _error(404, "ResourceGroupNotFound",
                              f"Resource group '{m.group(1)}' could not be found.")
            return self.providers[m.group(2)].route(method, m.group(1), m.group(3), query, body)
        m = re.match(r"^/providers/Microsoft\.Compute/locations/([^/]+)/(.*)$", rest)
        if m and method == "GET":
            return self._location(m.group(1), m.group(2))
        m = re.match(r"^/resourceGroups/([^/]+)/providers/Microsoft\.Compute/virtualMachines"
                     r"(?:/([^/]+))?$", rest, re.IGNORECASE)
        if not m:
            return _error(404, "InvalidResourceType", f"{method} {rest} is not part of this "
                                                      "stand-in")
        group, name = m.group(1), m.group(2)
        if group not in self.groups:
            return _error(404, "ResourceGroupNotFound",
                          f"Resource group '{group}' could not be found.")
        if name is None and method == "GET":
            expand = query.get("$expand") == "instanceView"
            return _json(200, {"value": [self._view(r, expand) for (g, _), r in self.vms.items()
                                         if g == group]})
        if name is not None and method == "PUT":
            return self._create(group, name, json.loads(body))
        resource = self.vms.get((group, name or ""))
        if resource is None:
            return _error(404, "ResourceNotFound",
                          f"The Resource 'Microsoft.Compute/virtualMachines/{name}' under "
                          f"resource group '{group}' was not found.")
        if method == "GET":
            return _json(200, self._view(resource, query.get("$expand") == "instanceView"))
        if method == "DELETE":
            return self._delete(group, resource)
        return _error(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _cloud_metadata(self):
        """This cloud's endpoints, as Resource Manager's metadata/endpoints lists them (what
        azure-ai-ml reads from ARM_CLOUD_METADATA_URL)."""
        return _json(200, [{
            "name": "EasylaunchStandIn", "portal": "https://portal.azure.com",
            "resourceManager": self.url + "/",
            "authentication": {"loginEndpoint": self.url + "/",
                               "audiences": ["https://management.azure.com/"],
                               "tenant": "common", "identityProvider": "AAD"},
            "suffixes": {"storage": "core.windows.net"}}])

    def _location(self, location, what):
        if what == "vmSizes":
            return _json(200, {"value": [
                {"name": n, "numberOfCores": c, "osDiskSizeInMB": 1047552,
                 "resourceDiskSizeInMB": 0, "memoryInMB": c * 4096, "maxDataDiskCount": 4}
                for n, c in VM_SIZES.items()] if location == LOCATION else []})
        if what == "usages":
            used = self.core_usage + sum(
                VM_SIZES.get(r["properties"]["hardwareProfile"]["vmSize"], 0)
                for r in self.vms.values())
            return _json(200, {"value": [
                {"unit": "Count", "currentValue": used, "limit": CORE_QUOTA,
                 "name": {"value": "cores", "localizedValue": "Total Regional vCPUs"}}]})
        m = re.match(r"^publishers/([^/]+)/artifacttypes/vmimage/offers/([^/]+)/skus/([^/]+)"
                     r"/versions$", what)
        if m:
            versions = IMAGES.get(m.groups()) if location == LOCATION else None
            if versions is None:
                return _error(404, "NotFound", f"Artifact: VMImage was not found. "
                                               f"({'/'.join(m.groups())})")
            return _json(200, [{"location": location, "name": v, "id": (
                f"/Subscriptions/{SUBSCRIPTION}/Providers/Microsoft.Compute/Locations/"
                f"{location}/Publishers/{m.group(1)}/ArtifactTypes/VMImage/Offers/{m.group(2)}"
                f"/Skus/{m.group(3)}/Versions/{v}")} for v in versions])
        m = re.match(r"^operations/([^/]+)$", what)
        if m and m.group(1) in self.operations:
            return _json(200, self.operations[m.group(1)])
        return _error(404, "NotFound", f"{what} is not part of this stand-in")

    def _operation(self, location: str, done: bool = True) -> tuple[str, str]:
        op_id = str(uuid.uuid4())
        self.operations[op_id] = {"name": op_id, "startTime": _now(),
                                  "status": "Succeeded" if done else "InProgress"}
        return op_id, (f"{self.url}/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Compute/"
                       f"locations/{location}/operations/{op_id}?api-version=2024-07-01")

    def _id(self, group: str, name: str) -> str:
        return (f"/subscriptions/{SUBSCRIPTION}/resourceGroups/{group}/providers/"
                "Microsoft.Compute/virtualMachines/" + name)

    def _view(self, resource: dict, expand: bool) -> dict:
        view = dict(resource, properties=dict(resource["properties"]))
        if expand:
            power = self.power.get(resource["name"], "starting")
            state = view["properties"]["provisioningState"]
            view["properties"]["instanceView"] = {"statuses": [
                {"code": f"ProvisioningState/{state.lower()}", "level": "Info"},
                {"code": f"PowerState/{power}", "level": "Info",
                 "displayStatus": f"VM {power}"}]}
        return view

    def _create(self, group, name, resource):
        props = resource.get("properties", {})
        if not NAME_RE.match(name):
            return _error(400, "InvalidParameter", f"The VM name '{name}' is invalid.")
        if (group, name) in self.vms:
            return _error(409, "OperationNotAllowed", f"VM '{name}' exists already.")
        location = resource.get("location")
        size = props.get("hardwareProfile", {}).get("vmSize")
        if location != LOCATION or size not in VM_SIZES:
            return _error(409, "SkuNotAvailable", f"The requested VM size {size} is currently "
                                                  f"not available in location '{location}'.")
        image = props["storageProfile"]["imageReference"]
        if (image["publisher"], image["offer"], image["sku"]) not in IMAGES:
            return _error(404, "PlatformImageNotFound", f"The platform image '{image}' is not "
                                                        "available.")
        identities = resource.get("identity", {}).get("userAssignedIdentities", {})
        if any(i.lower() != IDENTITY.lower() for i in identities):
            return _error(400, "FailedIdentityOperation", f"Identity {list(identities)} not "
                                                          "found.")
        nic = props["networkProfile"]["networkInterfaceConfigurations"][0]
        ip_config = nic["properties"]["ipConfigurations"][0]["properties"]
        if ip_config["subnet"]["id"].lower() != SUBNET.lower():
            return _error(400, "InvalidResourceReference", f"Resource {ip_config['subnet']['id']}"
                                                           " referenced by resource was not found.")
        resource["id"] = self._id(group, name)
        resource["name"] = name
        resource["type"] = "Microsoft.Compute/virtualMachines"
        props.update(provisioningState="Creating", vmId=str(uuid.uuid4()),
                     timeCreated=_now())
        self.vms[(group, name)] = resource
        disk = props["storageProfile"]["osDisk"]
        self.attached[f"{name}-osdisk"] = {"vm": name, "deleteOption": disk.get("deleteOption")}
        self.attached[nic["name"]] = {"vm": name, "deleteOption": nic["properties"].get(
            "deleteOption")}
        ip = ip_config.get("publicIPAddressConfiguration")
        if ip:
            self.attached[ip["name"]] = {"vm": name, "deleteOption": ip.get(
                "properties", {}).get("deleteOption")}
        box = AzureVm(self, resource)
        self.played[name] = box
        box.boot()
        props["provisioningState"] = "Succeeded"  # (reported through the operation)
        _, url = self._operation(location)
        view = self._view(resource, False)
        view["properties"]["provisioningState"] = "Creating"
        return _json(201, view, **{"Azure-AsyncOperation": url, "Retry-After": "0"})

    def _remove(self, group: str, name: str) -> None:
        self.vms.pop((group, name), None)
        for item, info in list(self.attached.items()):
            if info["vm"] == name and info["deleteOption"] == "Delete":
                del self.attached[item]

    def _delete(self, group, resource):
        name = resource["name"]
        resource["properties"]["provisioningState"] = "Deleting"
        op_id, url = self._operation(resource["location"], done=False)
        box = self.played.get(name)

        def end():
            if box is not None:
                box.halt()
            with self.lock:
                self._remove(group, name)
                self.operations[op_id]["status"] = "Succeeded"

        threading.Thread(target=end, daemon=True).start()
        return 202, {"Azure-AsyncOperation": url, "Location": url, "Retry-After": "0"}, b""


@contextlib.contextmanager
def stand_ins(root: Path, secret: str):
    """Azurite and the Resource Manager stand-in, with this process's environment pointed at
    them (for the benches): yields (ArmStub, Azurite's account URL)."""
    tls = make_certificate(root / "tls")
    azurite, account = start_azurite(root / "azurite", tls)
    arm = ArmStub({"LANG": "C.UTF-8"}, tls, secret)
    arm.sandbox = root / "sandbox"
    os.environ.update(REQUESTS_CA_BUNDLE=str(tls[0]), AZURE_AUTHORITY_HOST=arm.url,
                      EASYLAUNCH_COMPUTE_URL=arm.url, HOME=str(root / "home"),
                      ARM_CLOUD_METADATA_URL=f"{arm.url}/metadata/endpoints?api-version=2019-05-01",
                      AZUREML_CURRENT_CLOUD="EasylaunchStandIn")
    try:
        yield arm, account
    finally:
        arm.close()
        azurite.terminate()
        azurite.wait(10)
