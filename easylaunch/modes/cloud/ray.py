"""``ray``: each run (or ``num_exps_per_instance`` runs) as a job on a Ray cluster.

A Ray job is submitted through Ray's Job Submission API (``JobSubmissionClient``) with the
cloud family's boot script as its entrypoint: it fetches the instance agent from the storage
path (``RAY_STORAGE_PATH``: S3, GCS or Azure Blob, which the cluster and this machine both
reach), and the agent runs the job's share of the launch manifest as it does on a cloud
instance, mirroring each run's folder to the storage path. So a Ray job is the family's
"instance": code snapshots and bundles are uploaded once per content, status, logs, results,
cancel, ``fetch`` and restarts work as for ``ec2``/``gcp`` from any later process, and what is
Ray's own is here: submitting (with CPUs and GPUs as entrypoint resources, the job's variables
in its runtime environment; no credential travels: the workers reach the storage with the
cluster's own), the jobs' states (one ``list_jobs`` call per cluster), and ``stop_job``.

Why a storage path rather than Ray's ``working_dir`` and job logs: the run folder (results,
checkpoints, metrics, every file the run writes) must come back whole and be kept while a job
is relaunched on another node, and Ray keeps only the entrypoint's log; the same path serves the
clouds already, so nothing in tracking, restarts or fetching is Ray's own.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, install_hint, needed
from easylaunch.modes.cloud import ec2
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.base import CloudMode
from easylaunch.modes.cloud.fleet import Fleet, InstanceState, Target
from easylaunch.modes.hosts.transport import HostError
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.cloud.platforms import (
    ENV_INDEX,
    ENV_RAY_JOB,
    ENV_SNAPSHOTS,
    ENV_WORKDIR,
)
from easylaunch_job.cloud.stores import ENV_AZURE_CONNECTION, STORES, AzureBlobStore, Store

ENDED_JOB_STATES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
FEW_JOBS = 8  # asked about one by one; more: one list_jobs call (it lists every job)


def _sdk() -> Any:
    return needed("ray.job_submission", "mode 'ray'", "ray", "Ray's job client")


@functools.lru_cache(maxsize=8)
def job_client(address: str) -> Any:
    """A JobSubmissionClient of the cluster at ``address``, one per process (it asks the
    cluster's version when made); LaunchError when the cluster does not answer."""
    sdk = _sdk()
    try:
        return sdk.JobSubmissionClient(address)
    except Exception as exc:  # ConnectionError, or RuntimeError from an old or odd server
        raise HostError(
            f"cannot reach the Ray cluster at {address} (RAY_ADDRESS): {exc}; start it "
            "('ray start --head'), or set RAY_ADDRESS (or the mode option address=) to its "
            "dashboard's address, http://HEAD:8265") from None


@dataclass(frozen=True)
class RayTarget(Target):
    """A target with what each job asks of the cluster."""

    cpus: float
    gpus: float


@functools.lru_cache(maxsize=8)
def _store(scheme: str, bucket: str, where: str, _connection: str | None) -> Store:
    """A GCS or Azure store, one per process and settings (its client and credential are
    made once)."""
    return STORES[scheme].default(bucket, where)


def job_name(first_run_id: str, relaunch: int) -> str:
    """A job's submission id: named by its first run (runs belong to one job of a launch), and
    by the relaunch it starts."""
    return f"easylaunch-{first_run_id}" + (f"-relaunch{relaunch}" if relaunch else "")


class RayMode(CloudMode[RayTarget]):
    """Runs as Ray jobs, tracked through the storage path and the cluster's job API."""

    name = "ray"
    cloud = "ray"
    settings_prefix = "RAY"
    own_machines = False
    options: dict[str, Any] = {"num_exps_per_instance": None, "address": None,
                               "num_cpus": None, "num_gpus": None,
                               "check_resources": True}

    @property
    def store_scheme(self) -> str:  # type: ignore[override]
        return self._storage()[0]

    def _storage(self) -> tuple[str, str, str]:
        """RAY_STORAGE_PATH as (scheme, bucket, prefix)."""
        url = self.settings.RAY_STORAGE_PATH
        scheme = url.split("://", 1)[0] if isinstance(url, str) and "://" in url else ""
        if scheme not in STORES:
            raise LaunchError(
                "RAY_STORAGE_PATH must look like s3://bucket/prefix, gs://bucket/prefix or "
                f"az://container/prefix, got "
                f"{url!r}; set it to a bucket this machine and the Ray cluster's workers can "
                "both write (the run folders come back through it)")
        return (scheme, *cloud.split_url(url, scheme, "RAY_STORAGE_PATH"))

    def _asked(self, name: str, use_gpu: bool = True) -> float:
        """``num_cpus`` or ``num_gpus`` one job asks for: the option, else the setting (GPUs:
        none without use_gpu, unless the option asks)."""
        value = self.opts[name]
        if value is None:
            value = self.setting(name.upper()) if use_gpu or name == "num_cpus" else 0
        return value

    def value_problems(self) -> list[str]:
        problems = []
        for name in ("num_cpus", "num_gpus"):
            value = self._asked(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                problems.append(f"{name} / RAY_{name.upper()} must be a number >= 0, got "
                                f"{value!r}")
        return problems

    def address(self) -> str:
        """The cluster's dashboard address: the option, RAY_ADDRESS, or Ray's own variable."""
        address = self.opts["address"] or self.settings.RAY_ADDRESS or os.environ.get(
            "RAY_ADDRESS")
        if not address:
            raise LaunchError("no Ray cluster given: set RAY_ADDRESS in your settings (or the "
                              "RAY_ADDRESS environment variable, or the mode option address=) "
                              "to its dashboard's address, http://HEAD:8265")
        return address if "://" in address else f"http://{address}"

    def import_sdk(self) -> None:
        _sdk()

    def target(self, request: LaunchRequest) -> RayTarget:
        _, bucket, prefix = self._storage()
        cpus, gpus = self._asked("num_cpus"), self._asked("num_gpus", request.use_gpu)
        asked = f"{cpus:g} CPU" + (f", {gpus:g} GPU" if gpus else "")
        return RayTarget(self.address(), bucket, prefix, "", asked, "", cpus, gpus)

    def docker_image(self) -> str | None:
        return None  # the cluster's own environment (RAY_PYTHON)

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        target = self.target(request)
        return {"ray_address": target.location, "resources": target.machine_type}

    def resources(self, target: Target, count: int) -> dict[str, Any]:
        return {"Ray jobs": count, "runs per job": self.per_instance(),
                "each job asks for": target.machine_type, "cluster": target.location}

    def agent_region(self, target: Target) -> str:
        """Where the workers find the storage: the S3 region, or the Azure account's
        endpoint (from the client here, which may come from a connection string)."""
        if self.store_scheme == "az":
            store = self.store(target.bucket, target.location)
            assert isinstance(store, AzureBlobStore)  # (STORES["az"])
            return store.account_url
        return self.settings.RAY_STORAGE_LOCATION or ""

    def store(self, bucket: str, location: str) -> Store:
        """The storage path's bucket (``location`` is the cluster's address: the bucket's kind
        and whereabouts come from the settings)."""
        scheme, where = self.store_scheme, self.settings.RAY_STORAGE_LOCATION
        if scheme == "s3":
            needed("boto3", "an s3:// RAY_STORAGE_PATH", "aws")  # (the ec2 mode's clients)
            return STORES[scheme](bucket, ec2.client("s3", where))
        if scheme == "az" and not where and not os.environ.get(ENV_AZURE_CONNECTION):
            raise LaunchError(
                "an az:// RAY_STORAGE_PATH needs its account: set RAY_STORAGE_LOCATION to "
                "https://ACCOUNT.blob.core.windows.net (signing in with azure-identity: az "
                f"login, a managed identity), or {ENV_AZURE_CONNECTION} in the environment")
        try:
            return _store(scheme, bucket, where or "", os.environ.get(ENV_AZURE_CONNECTION))
        except ImportError:
            extra = {"gs": "gcp", "az": "azure"}[scheme]
            raise LaunchError(f"a {scheme}:// RAY_STORAGE_PATH needs its storage library: "
                              f"{install_hint(extra)}") from None

    def check_cloud(self, target: RayTarget) -> None:
        """The cluster answers, the storage path's bucket exists, and a node of the cluster
        has the CPUs and GPUs one job asks for (a job asking for more waits forever)."""
        store = self.store(target.bucket, target.location)  # (its settings first: no network)
        client = job_client(target.location)
        try:
            found = store.bucket_exists()
        except Exception as exc:  # noqa: BLE001 - named in the message
            raise LaunchError(f"cannot use the bucket of RAY_STORAGE_PATH "
                              f"{self.settings.RAY_STORAGE_PATH!r}: {exc}") from None
        if not found:
            raise LaunchError(f"the bucket {target.bucket!r} of RAY_STORAGE_PATH does not "
                              "exist; create it, or set RAY_STORAGE_PATH to a bucket you can "
                              "write")
        most = largest_node(client) if self.opts["check_resources"] else None
        for name, asked in (("CPU", target.cpus), ("GPU", target.gpus)):
            if most is not None and asked > most[name]:
                raise LaunchError(
                    f"each job asks for {asked:g} {name} but no node of the Ray cluster at "
                    f"{target.location} has more than {most[name]:g}, so its jobs would wait "
                    f"forever; ask for less (num_{name.lower()}s= or RAY_NUM_{name}S), add "
                    "nodes, or, where the cluster adds nodes itself, pass "
                    "check_resources=False")

    def start_fleet(self, request: LaunchRequest, target: RayTarget,
                    fleet: Fleet) -> list[dict]:
        """One submit_job call per job; those submitted are stopped if a later one fails."""
        client = job_client(target.location)
        entrypoint = f"bash -c {shlex.quote(fleet.boot_script)}"
        workdir = self.settings.RAY_WORKDIR
        started: list[str] = []
        for index, ids in enumerate(fleet.instances):
            name = job_name(ids[0], fleet.relaunch)
            try:
                client.submit_job(
                    entrypoint=entrypoint, submission_id=name,
                    runtime_env={"env_vars": {
                        ENV_WORKDIR: f"{workdir}/{name}", ENV_SNAPSHOTS: f"{workdir}/.snapshots",
                        ENV_RAY_JOB: name, ENV_INDEX: str(index)}},
                    entrypoint_num_cpus=target.cpus, entrypoint_num_gpus=target.gpus or None,
                    metadata={"easylaunch_exp": request.exp_name[:200],
                              "easylaunch_runs": " ".join(ids)[:1000]})
            except Exception as exc:
                self.end_instances({"address": target.location}, started)
                raise LaunchError(f"the Ray cluster at {target.location} did not take job "
                                  f"{name}: {exc}") from exc
            started.append(name)
        return [{"instance_id": name, "address": target.location,
                 "resources": target.machine_type} for name in started]

    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        """Stop the jobs (Ray sends SIGTERM, then SIGKILL); one that ended is left alone."""
        client = job_client(record["address"])
        for name in instance_ids:
            with contextlib.suppress(RuntimeError):  # an unknown or ended job
                client.stop_job(name)

    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """A few jobs one by one, more with one list_jobs call per cluster."""
        wanted: dict[str, set[str]] = {}
        for backend in backends:
            wanted.setdefault(backend["address"], set()).add(backend["instance_id"])
        states = {}
        for address, names in wanted.items():
            client = job_client(address)
            try:
                if len(names) <= FEW_JOBS:
                    found = []
                    for name in names:
                        with contextlib.suppress(RuntimeError):  # a job the cluster forgot
                            found.append(client.get_job_info(name))
                else:
                    found = [d for d in client.list_jobs() if d.submission_id in names]
            except OSError as exc:  # (requests' ConnectionError is one)
                raise HostError(f"the Ray cluster at {address} did not answer: "
                                f"{type(exc).__name__}") from None
            for details in found:
                status = str(getattr(details.status, "value", details.status))
                reason = (details.message or "").strip().split("\n", 1)[0]
                states[details.submission_id] = InstanceState(
                    status, status in ENDED_JOB_STATES, reason, False)
        return states

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        backend = job.launch_info.get("backend", {})
        raise LaunchError(
            f"easylaunch does not open shells in Ray jobs: find the node of job "
            f"{backend.get('instance_id', '?')} in the Ray dashboard ({backend.get('address')}) "
            "and ssh to it; the run's logs sync to "
            f"{backend.get('log_url', 'the storage path')}")


def largest_node(client: Any) -> dict[str, float] | None:
    """The most of each resource one live node of the cluster has ({"CPU": 2.0, ...}), as
    its dashboard reports them; None where it does not say."""
    try:
        nodes = client._do_request("GET", "/nodes?view=summary").json()["data"]["summary"]
        totals = [n["raylet"]["resourcesTotal"] for n in nodes
                  if n["raylet"].get("state") == "ALIVE"]
    except Exception:  # noqa: BLE001 - a dashboard that does not say: the check is skipped
        return None
    return {name: max(t.get(name, 0.0) for t in totals) for name in ("CPU", "GPU")}
