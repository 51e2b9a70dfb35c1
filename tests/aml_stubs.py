"""A stand-in of the Azure ML workspace API, for the aml tests (Azure ML has no emulator).

``AmlWorkspace`` answers the Resource Manager calls azure-ai-ml makes for easylaunch
(workspace, compute, datastores, environments, jobs: create, get, list, cancel) in their wire
format, behind ``azure_stubs.ArmStub`` (which serves the cloud metadata the SDK reads from
``ARM_CLOUD_METADATA_URL``, and Entra ID's tokens). A created command job is played here
(``PlayedJob``): its command runs with bash once per process (nodes x processes per node), each
with the variables Azure ML's distribution sets (PyTorch: RANK, LOCAL_RANK, WORLD_SIZE,
NODE_RANK, MASTER_ADDR, MASTER_PORT; MPI: Open MPI's), its output in
``user_logs/std_log_process_<rank>.txt``, an Instance Metadata Service stand-in for the job's
managed identity, and its data folders "mounted": copied from Azurite before it starts
(read-only), and its output folder copied back when it ends.
"""

import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import azure_stubs
from helpers import free_port

WORKSPACE = "easylaunch-ws"
COMPUTES = {"cpu-cluster": "STANDARD_D2S_V3", "gpu-cluster": "STANDARD_NC24RS_V3"}
DATASTORE = "workspaceblobstore"
ENVIRONMENTS = {("pytorch-env", "3")}
ENDED = ("Completed", "Failed", "Canceled")
PROVIDER = "Microsoft.MachineLearningServices"


def _json(code, obj, **headers):
    return azure_stubs._json(code, obj, **headers)


def _error(code, error, message):
    return azure_stubs._error(code, error, message)


class PlayedJob:
    """An Azure ML command job played on this machine."""

    def __init__(self, ws: "AmlWorkspace", name: str, resource: dict) -> None:
        self.ws = ws
        self.name = name
        self.resource = resource
        self.root = ws.sandbox / name
        self.principal = str(uuid.uuid4())
        self.client_id = str(uuid.uuid4())
        self.procs: list[subprocess.Popen] = []
        self.imds = azure_stubs.ImdsStub(self)
        self.cancelled = False
        self.watcher: threading.Thread | None = None  # (uploads the outputs once it ends)

    # (what the IMDS stand-in asks of its owner)
    stub = property(lambda self: self.ws.arm)

    def has_identity(self) -> bool:
        return self.resource["properties"].get("identity", {}).get("identityType") == "Managed"

    def compute_metadata(self) -> dict:
        return {"name": self.name}

    def logs(self) -> dict[int, str]:
        folder = self.root / "user_logs"
        return {int(p.stem.rsplit("_", 1)[1]): p.read_text()
                for p in folder.glob("std_log_process_*.txt")}

    def start(self) -> None:
        props = self.resource["properties"]
        nodes = props.get("resources", {}).get("instanceCount", 1)
        dist = props.get("distribution") or {}
        per_node = dist.get("processCountPerInstance", 1)
        world = nodes * per_node
        mounts = self._mount(props)
        (self.root / "user_logs").mkdir(parents=True, exist_ok=True)
        port = str(free_port())
        for rank in range(world):
            node, local = divmod(rank, per_node)
            env = dict(self.ws.arm.instance_env, **props.get("environmentVariables", {}),
                       **mounts, AZUREML_RUN_ID=self.name,
                       PATH=os.environ["PATH"], HOME=str(self.root / f"node-{node}"),
                       AZURE_POD_IDENTITY_AUTHORITY_HOST=self.imds.url,
                       REQUESTS_CA_BUNDLE=str(self.ws.arm.tls[0]),
                       SSL_CERT_FILE=str(self.ws.arm.tls[0]))
            if world > 1 and dist.get("distributionType") == "PyTorch":
                env.update(RANK=str(rank), LOCAL_RANK=str(local), WORLD_SIZE=str(world),
                           NODE_RANK=str(node), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            elif world > 1:
                env.update(OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(world),
                           OMPI_COMM_WORLD_LOCAL_RANK=str(local))
            Path(env["HOME"]).mkdir(parents=True, exist_ok=True)
            with open(self.root / "user_logs" / f"std_log_process_{rank}.txt", "wb") as out:
                self.procs.append(subprocess.Popen(
                    ["bash", "-c", props["command"]], cwd=env["HOME"], env=env,
                    stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True))
        props["status"] = "Running"
        self.watcher = threading.Thread(target=self._watch, args=(mounts,), daemon=True)
        self.watcher.start()

    def _mount(self, props: dict) -> dict:
        """Copy the input folders from the datastore (what a read-only mount shows) and make
        the output folders; the variables Azure ML sets for them."""
        env = {}
        for kind, items in (("INPUT", props.get("inputs") or {}),
                            ("OUTPUT", props.get("outputs") or {})):
            for name, spec in items.items():
                folder = self.root / "mounts" / kind.lower() / name
                folder.mkdir(parents=True, exist_ok=True)
                if kind == "INPUT":
                    self.ws.download(spec["uri"], folder)
                env[f"AZURE_ML_{kind}_{name}"] = str(folder)
        return env

    def _watch(self, mounts: dict) -> None:
        codes = [proc.wait() for proc in self.procs]
        for name, spec in (self.resource["properties"].get("outputs") or {}).items():
            self.ws.upload(Path(mounts[f"AZURE_ML_OUTPUT_{name}"]), spec["uri"])
        with self.ws.lock:
            props = self.resource["properties"]
            props["status"] = "Canceled" if self.cancelled else \
                "Completed" if not any(codes) else "Failed"

    def cancel(self) -> None:
        """As Azure ML cancels: SIGTERM to the job's processes, then SIGKILL."""
        self.cancelled = True
        self.resource["properties"]["status"] = "CancelRequested"
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)

    def kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)


class AmlWorkspace:
    """One workspace's API, behind the Resource Manager stand-in."""

    def __init__(self, arm: "azure_stubs.ArmStub", account_url: str, container: str) -> None:
        self.arm = arm
        self.account_url = account_url
        self.container = container
        self.sandbox = Path("/nonexistent")  # set per test
        self.jobs: dict[str, dict] = {}
        self.played: dict[str, PlayedJob] = {}
        self.environments: dict[tuple[str, str], dict] = {}
        self.autostart = True
        self.lock = arm.lock
        arm.providers[PROVIDER] = self

    def close(self) -> None:
        for job in self.played.values():
            job.kill()
            if job.watcher is not None:  # (its last upload done while Azurite is up)
                job.watcher.join(30)
            job.imds.close()

    # -- the datastore, as a mount sees it -------------------------------------------------------

    def _blobs(self):
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(
            azure_stubs.connection_string(self.account_url)).get_container_client(self.container)

    def _prefix(self, uri: str) -> str:
        m = re.match(r"^azureml://datastores/([^/]+)/paths/(.*)$", uri)
        assert m and m.group(1) == DATASTORE, uri
        return m.group(2).strip("/") + "/"

    def download(self, uri: str, folder: Path) -> None:
        blobs, prefix = self._blobs(), self._prefix(uri)
        for item in blobs.list_blobs(name_starts_with=prefix):
            target = folder / item.name[len(prefix):]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(blobs.download_blob(item.name).readall())

    def upload(self, folder: Path, uri: str) -> None:
        blobs, prefix = self._blobs(), self._prefix(uri)
        for path in folder.rglob("*"):
            if path.is_file():
                blobs.upload_blob(prefix + str(path.relative_to(folder)), path.read_bytes(),
                                  overwrite=True)

    # -- the API --------------------------------------------------------------------------------

    def _base(self, group: str, workspace: str) -> str:
        return (f"/subscriptions/{azure_stubs.SUBSCRIPTION}/resourceGroups/{group}/providers/"
                f"{PROVIDER}/workspaces/{workspace}")

    def route(self, method, group, rest, query, body):
        m = re.match(r"^workspaces/([^/]+)(?:/(.*))?$", rest)
        if not m or m.group(1) != WORKSPACE:
            name = m.group(1) if m else rest
            return _error(404, "ResourceNotFound", f"The Resource '{PROVIDER}/workspaces/{name}'"
                                                   f" under resource group '{group}' was not "
                                                   "found.")
        base, tail = self._base(group, WORKSPACE), m.group(2) or ""
        if tail == "" and method == "GET":
            return _json(200, {"id": base, "name": WORKSPACE, "location": azure_stubs.LOCATION,
                               "type": f"{PROVIDER}/workspaces", "kind": "Default",
                               "properties": {"friendlyName": WORKSPACE,
                                              "provisioningState": "Succeeded",
                                              "workspaceId": str(uuid.UUID(int=7))}})
        m = re.match(r"^computes/([^/]+)$", tail)
        if m and method == "GET":
            size = COMPUTES.get(m.group(1))
            if size is None:
                return _error(404, "ResourceNotFound", f"Compute '{m.group(1)}' not found.")
            return _json(200, {"id": f"{base}/computes/{m.group(1)}", "name": m.group(1),
                               "type": f"{PROVIDER}/workspaces/computes",
                               "location": azure_stubs.LOCATION, "properties": {
                                   "computeType": "AmlCompute", "provisioningState": "Succeeded",
                                   "properties": {"vmSize": size, "vmPriority": "Dedicated",
                                                  "scaleSettings": {"maxNodeCount": 4,
                                                                    "minNodeCount": 0}}}})
        if tail.startswith("datastores"):
            return self._datastores(base, tail, query)
        m = re.match(r"^environments/([^/]+)/versions/([^/]+)$", tail)
        if m:
            return self._environment(method, base, m.group(1), m.group(2), body)
        m = re.match(r"^jobs(?:/([^/]+))?(/cancel)?$", tail)
        if m:
            return self._jobs(method, base, m.group(1), bool(m.group(2)), body)
        m = re.match(r"^operations/([^/]+)$", tail)
        if m and method == "GET":
            return 200, {}, b""
        return _error(404, "NotFound", f"{method} {tail} is not part of this stand-in")

    def _datastore(self, base: str) -> dict:
        return {"id": f"{base}/datastores/{DATASTORE}", "name": DATASTORE,
                "type": f"{PROVIDER}/workspaces/datastores", "properties": {
                    "datastoreType": "AzureBlob", "accountName": azure_stubs.DEV_ACCOUNT,
                    "containerName": self.container, "endpoint": "core.windows.net",
                    "protocol": "https", "isDefault": True,
                    "credentials": {"credentialsType": "None"}}}

    def _datastores(self, base, tail, query):
        if tail == "datastores":
            items = [self._datastore(base)]
            if query.get("isDefault") not in (None, "true", "True"):
                items = []
            return _json(200, {"value": items})
        name = tail.removeprefix("datastores/")
        if name != DATASTORE:
            return _error(404, "UserError", f"Datastore {name} not found.")
        return _json(200, self._datastore(base))

    def _environment(self, method, base, name, version, body):
        key = (name, version)
        if method == "PUT":
            resource = json.loads(body)
            resource.update(id=f"{base}/environments/{name}/versions/{version}", name=version)
            self.environments[key] = resource
            return _json(201, resource)
        if key in ENVIRONMENTS or key in self.environments:
            return _json(200, self.environments.get(key) or {
                "id": f"{base}/environments/{name}/versions/{version}", "name": version,
                "properties": {"image": "mcr.microsoft.com/azureml/openmpi4.1.0-ubuntu22.04"}})
        return _error(404, "UserError", f"Could not find asset with ID: azureml:{name}:"
                                        f"{version}")

    def _jobs(self, method, base, name, cancel, body):
        if name is None and method == "GET":
            return _json(200, {"value": list(self.jobs.values())})
        if cancel and method == "POST":
            job = self.jobs.get(name)
            if job is None:
                return _error(404, "UserError", f"Job {name} not found.")
            if job["properties"]["status"] in ENDED:
                return _error(400, "UserError", f"Job {name} is in a terminal state.")
            threading.Thread(target=self.played[name].cancel, daemon=True).start()
            op = f"{self.arm.url}{base}/operations/{secrets.token_hex(8)}?api-version=2024-04-01"
            return 202, {"Location": op, "Retry-After": "0"}, b""
        if method == "PUT":
            if name in self.jobs:
                return _error(400, "UserError", f"A job with this name already exists: {name}")
            resource = json.loads(body)
            props = resource["properties"]
            compute = props.get("computeId", "").rsplit("/", 1)[-1]
            if compute not in COMPUTES:
                return _error(400, "UserError", f"Compute {compute} not found in workspace.")
            resource.update(id=f"{base}/jobs/{name}", name=name,
                            type=f"{PROVIDER}/workspaces/jobs")
            props.update(status="Queued", services={})
            self.jobs[name] = resource
            self.played[name] = PlayedJob(self, name, resource)
            if self.autostart:
                self.played[name].start()
            return _json(201, resource)
        job = self.jobs.get(name)
        if job is None:
            return _error(404, "UserError", f"Job {name} not found.")
        return _json(200, job)
