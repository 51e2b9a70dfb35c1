"""``ec2``: each run on an AWS instance that syncs its log folder to S3 and terminates when done.

A launch uploads what is not in the bucket yet (code snapshots and bundles are named by content,
so a sweep uploads each snapshot once), a manifest, and the instance agent; then one
``run_instances`` call per batch starts the instances (spot when AWS_SPOT_PRICE is set) with a
short boot script as user-data, ``InstanceInitiatedShutdownBehavior="terminate"`` and the IAM
instance profile they use for S3. ``launch.json`` records each run's instance, spot request and
S3 prefix, so ``status``, ``wait``, ``fetch`` and ``cancel`` work from any later process: the
run's ``status.json`` is read from S3, and an instance that is gone while the run recorded no
end gives the run a terminal state with the reason.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easylaunch import cloud, runner
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.instance_agent import CANCEL_SUFFIX
from easylaunch.jobs import Job
from easylaunch.modes.base import Mode
from easylaunch.request import LaunchRequest

AGENT_POLL_SECONDS = 5.0  # how often the agent looks at statuses, cancels and the spot notice
CANCEL_WAIT_SECONDS = 30.0  # how long cancel waits for the agent's last sync
MAX_INSTANCES_PER_CALL = 100
ENDED_INSTANCE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_NOT_FOUND = ("NoSuchKey", "404", "NotFound", "NoSuchBucket")
_SESSION_ENV = ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise LaunchError("mode 'ec2' needs boto3: pip install 'easylaunch[aws]'") from None
    return boto3


@functools.lru_cache(maxsize=8)
def _session(_environment: tuple) -> Any:
    return _boto3().session.Session()


def session() -> Any:
    """A boto3 session, one per process while the AWS environment variables stay the same
    (a session loads the service models once, which takes longer than most calls)."""
    return _session(tuple(os.environ.get(k) for k in _SESSION_ENV))


def _client(service: str, region: str) -> Any:
    from botocore.config import Config

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5,
                    read_timeout=60)
    return session().client(service, region_name=region, config=config)


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))


class S3Storage(cloud.Storage):
    """An S3 bucket through boto3."""

    url_scheme = "s3"

    def __init__(self, bucket: str, region: str) -> None:
        super().__init__(bucket)
        self.client = _client("s3", region)

    def exists(self, key: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND:
                return False
            raise
        return True

    def upload_bytes(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data)

    def upload_file(self, key: str, path: str | os.PathLike) -> None:
        self.client.upload_file(os.fspath(path), self.bucket, key)

    def read_bytes(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if _error_code(exc) in _NOT_FOUND:
                return None
            raise

    def list(self, prefix: str) -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


@dataclass(frozen=True)
class Target:
    """Where and on what a request runs, from the settings."""

    region: str
    bucket: str
    prefix: str
    image_id: str
    instance_type: str
    spot_price: float | None


@dataclass(frozen=True)
class Batch:
    """Instances started by one run_instances call: their runs (by launch index), manifest."""

    instances: list[list[Run]]
    manifest: cloud.Archive
    control_prefix: str
    user_data: str


@dataclass(frozen=True)
class Ec2Plan:
    """Everything a launch uploads and starts."""

    target: Target
    archives: list[cloud.Archive]
    batches: list[Batch]


def _instance_profile(value: str) -> dict:
    return {"Arn": value} if value.startswith("arn:") else {"Name": value}


class Ec2Mode(Mode):
    """Runs on EC2 instances, tracked through S3 and the EC2 API."""

    name = "ec2"
    options = {"confirm": True, "num_exps_per_instance": None}

    # -- checks ---------------------------------------------------------------------------------

    def per_instance(self) -> int:
        """Runs per instance: the mode option, else AWS_NUM_EXPS_PER_INSTANCE."""
        n = self.opts["num_exps_per_instance"]
        return self.settings.AWS_NUM_EXPS_PER_INSTANCE if n is None else n

    def target(self, request: LaunchRequest) -> Target:
        """The settings this request needs, checked without asking AWS."""
        s = self.settings
        bucket, prefix = cloud.split_url(s.AWS_S3_PATH, "s3", "AWS_S3_PATH")
        aws = session()
        region = s.AWS_REGION or aws.region_name
        if not region:
            raise LaunchError("no AWS region: set AWS_REGION in your settings (or "
                              "AWS_DEFAULT_REGION in the environment)")
        regions = {r for p in aws.get_available_partitions()
                   for r in aws.get_available_regions("ec2", partition_name=p)}
        if region not in regions:
            raise LaunchError(f"AWS region {region!r} is unknown (AWS_REGION); known regions: "
                              f"{', '.join(sorted(regions))}")
        key = "AWS_GPU_IMAGE_IDS" if request.use_gpu else "AWS_IMAGE_IDS"
        image_id = s[key].get(region)
        if not image_id:
            raise LaunchError(f"{key} has no image for region {region!r}: add "
                              f"{{{region!r}: 'ami-...'}} to {key} in your settings")
        instance_type = s.AWS_GPU_INSTANCE_TYPE if request.use_gpu else s.AWS_INSTANCE_TYPE
        return Target(region, bucket, prefix, image_id, instance_type, s.AWS_SPOT_PRICE)

    def _check_values(self) -> None:
        s = self.settings
        problems = []
        if not isinstance(self.opts["confirm"], bool):
            problems.append(f"confirm must be True or False, got {self.opts['confirm']!r}")
        n = self.per_instance()
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            problems.append(f"num_exps_per_instance / AWS_NUM_EXPS_PER_INSTANCE must be a "
                            f"positive integer, got {n!r}")
        if not s.AWS_IAM_INSTANCE_PROFILE:
            problems.append("AWS_IAM_INSTANCE_PROFILE is not set: instances reach S3 through "
                            "their own role (no credentials are sent to them); set it to an "
                            "instance profile allowed to read and write AWS_S3_PATH")
        if problems:
            raise LaunchError("mode 'ec2': " + "; ".join(problems))

    def check(self, request: LaunchRequest) -> None:
        self._check_values()
        target = self.target(request)
        self._check_aws(target)
        self._confirm(request, target)

    def _check_aws(self, target: Target) -> None:
        """Credentials, region, bucket, image, instance type and network settings, asked of AWS."""
        from botocore.exceptions import BotoCoreError, ClientError

        if _boto3().session.Session().get_credentials() is None:  # looked for afresh
            raise LaunchError(
                "no AWS credentials found: run 'aws configure' (or 'aws sso login'), or set "
                "AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in the environment")
        try:
            self._check_bucket(target)
            self._check_ec2(target)
        except BotoCoreError as exc:
            raise LaunchError(f"cannot reach AWS in {target.region}: {exc}; check the network "
                              "and AWS_ENDPOINT_URL if set") from exc
        except ClientError as exc:
            raise LaunchError(f"AWS refused a check before launching: {exc}") from exc

    def _check_bucket(self, target: Target) -> None:
        from botocore.exceptions import ClientError

        try:
            _client("s3", target.region).head_bucket(Bucket=target.bucket)
        except ClientError as exc:
            code = _error_code(exc)
            why = ("does not exist" if code in _NOT_FOUND else
                   "is not accessible with these credentials" if code in ("403", "AccessDenied")
                   else f"cannot be used ({exc})")
            raise LaunchError(f"the S3 bucket {target.bucket!r} of AWS_S3_PATH {why}; create "
                              "it, or set AWS_S3_PATH to a bucket you can write") from exc

    def _check_ec2(self, target: Target) -> None:
        from botocore.exceptions import ClientError

        s = self.settings
        ec2 = _client("ec2", target.region)
        checks = [
            ("AWS_GPU_IMAGE_IDS / AWS_IMAGE_IDS", target.image_id, ec2.describe_images,
             {"ImageIds": [target.image_id]}, "Images"),
            ("AWS_INSTANCE_TYPE / AWS_GPU_INSTANCE_TYPE", target.instance_type,
             ec2.describe_instance_types, {"InstanceTypes": [target.instance_type]},
             "InstanceTypes")]
        if s.AWS_KEY_NAME:
            checks.append(("AWS_KEY_NAME", s.AWS_KEY_NAME, ec2.describe_key_pairs,
                           {"KeyNames": [s.AWS_KEY_NAME]}, "KeyPairs"))
        if s.AWS_SECURITY_GROUP_IDS:
            checks.append(("AWS_SECURITY_GROUP_IDS", s.AWS_SECURITY_GROUP_IDS,
                           ec2.describe_security_groups,
                           {"GroupIds": list(s.AWS_SECURITY_GROUP_IDS)}, "SecurityGroups"))
        if s.AWS_SUBNET_ID:
            checks.append(("AWS_SUBNET_ID", s.AWS_SUBNET_ID, ec2.describe_subnets,
                           {"SubnetIds": [s.AWS_SUBNET_ID]}, "Subnets"))
        for setting, value, call, kwargs, field in checks:
            try:
                found = call(**kwargs)[field]
            except ClientError as exc:
                if not _error_code(exc).startswith(("Invalid", "MissingParameter")):
                    raise
                found = []
            if not found:
                raise LaunchError(f"{setting}: {value!r} is not known in region {target.region}; "
                                  "fix the setting (each region has its own ids)")

    def _confirm(self, request: LaunchRequest, target: Target) -> None:
        """Ask once before starting paid instances, on an interactive terminal only."""
        if self.opts["confirm"] is False or not (sys.stdin.isatty() and sys.stderr.isatty()):
            return
        count = -(-len(request.variants) // self.per_instance())
        market = (f"spot (max ${target.spot_price}/hour each)" if target.spot_price
                  else "on-demand")
        print(f"easylaunch ec2: {count} {target.instance_type} {market} instance(s) will start "
              f"in {target.region} for {len(request.variants)} run(s) of "
              f"{request.exp_name!r}.", file=sys.stderr)
        answer = input("Start them? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise LaunchError("not launched: the start of EC2 instances was declined "
                              "(pass confirm=False to skip the question)")

    # -- prepare and submit ---------------------------------------------------------------------

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> Ec2Plan:
        target = self.target(request)
        prefix = target.prefix
        agent = cloud.agent_archive(prefix)
        snapshots = cloud.pack_snapshots(runs, request.log_root, prefix)
        bundles = {run.run_id: cloud.pack_bundle(run, prefix) for run in runs}
        n = self.per_instance()
        instances = [runs[i:i + n] for i in range(0, len(runs), n)]
        batches = [self._batch(target, instances[i:i + MAX_INSTANCES_PER_CALL], bundles,
                               agent.key, request.use_gpu)
                   for i in range(0, len(instances), MAX_INSTANCES_PER_CALL)]
        return Ec2Plan(target, [agent, *snapshots, *bundles.values()], batches)

    def _batch(self, target: Target, instances: list[list[Run]], bundles: dict,
               agent_key: str, use_gpu: bool) -> Batch:
        s = self.settings
        prefix = target.prefix
        control = cloud.join_key(prefix, "control", instances[0][0].run_id)
        snapshots = {snap["digest"]: cloud.snapshot_key(prefix, snap["digest"])
                     for snap in instances[0][0].launch["code_snapshots"]}
        manifest = cloud.manifest_archive(prefix, {
            "format": cloud.MANIFEST_FORMAT, "python": s.AWS_PYTHON,
            "docker_image": s.AWS_DOCKER_IMAGE, "use_gpu": use_gpu,
            "sync_interval": float(s.AWS_SYNC_INTERVAL_SECONDS),
            "poll_seconds": min(AGENT_POLL_SECONDS, float(s.AWS_SYNC_INTERVAL_SECONDS)),
            "patterns": list(s.AWS_FILE_PATTERNS_TO_SAVE), "snapshots": snapshots,
            "control_prefix": control,
            "instances": [[cloud.manifest_run(r, prefix, bundles[r.run_id].key) for r in group]
                          for group in instances]})
        user_data = cloud.boot_script(cloud.BootSpec(
            python=s.AWS_PYTHON, pip_requirements=tuple(s.AWS_PIP_REQUIREMENTS),
            bucket=target.bucket, region=target.region, agent_key=agent_key,
            manifest_key=manifest.key))
        return Batch(instances, manifest, control, user_data)

    def run_instances_args(self, request: LaunchRequest, target: Target, batch: Batch) -> dict:
        """The run_instances arguments of one batch."""
        s = self.settings
        count = len(batch.instances)
        tags = [{"Key": "Name", "Value": f"easylaunch-{request.exp_name}"},
                {"Key": "easylaunch:exp", "Value": request.exp_name},
                {"Key": "easylaunch:launch", "Value": batch.control_prefix.rsplit("/", 1)[-1]}]
        args: dict[str, Any] = dict(
            ImageId=target.image_id, InstanceType=target.instance_type, MinCount=count,
            MaxCount=count, UserData=batch.user_data,
            InstanceInitiatedShutdownBehavior="terminate",
            IamInstanceProfile=_instance_profile(s.AWS_IAM_INSTANCE_PROFILE),
            TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        if target.spot_price:
            args["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "MaxPrice": str(target.spot_price), "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate"}}
        if s.AWS_KEY_NAME:
            args["KeyName"] = s.AWS_KEY_NAME
        if s.AWS_SECURITY_GROUP_IDS:
            args["SecurityGroupIds"] = list(s.AWS_SECURITY_GROUP_IDS)
        if s.AWS_SUBNET_ID:
            args["SubnetId"] = s.AWS_SUBNET_ID
        return args

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: Ec2Plan) -> list[Job]:
        target = prepared.target
        storage = S3Storage(target.bucket, target.region)
        cloud.upload_missing(storage, [*prepared.archives,
                                       *(b.manifest for b in prepared.batches)])
        ec2 = _client("ec2", target.region)
        started: dict[str, list[Run]] = {}  # instance id -> its runs
        try:
            for batch in prepared.batches:
                reply = _start_instances(ec2, self.run_instances_args(request, target, batch))
                instances = sorted(reply["Instances"], key=lambda i: i.get("AmiLaunchIndex", 0))
                for instance, group in zip(instances, batch.instances, strict=True):
                    started[instance["InstanceId"]] = group
                    self._record(group, instance, batch, storage, target)
        except BaseException:
            _withdraw(storage, ec2, started)
            raise
        return [Job(run.run_id, run.exp_name, run.log_dir, self) for run in runs]

    def _record(self, group: list[Run], instance: dict, batch: Batch, storage: S3Storage,
                target: Target) -> None:
        prefixes = {r.run_id: cloud.run_log_prefix(target.prefix, r) for r in group}
        for run in group:
            run.record_backend(
                instance_id=instance["InstanceId"],
                spot_request_id=instance.get("SpotInstanceRequestId"),
                launch_index=instance.get("AmiLaunchIndex", 0), region=target.region,
                instance_type=target.instance_type, spot_price=target.spot_price,
                bucket=target.bucket, s3_log_prefix=prefixes[run.run_id],
                s3_log_url=storage.url(prefixes[run.run_id]) + "/",
                manifest_key=batch.manifest.key,
                cancel_key=f"{batch.control_prefix}/{run.run_id}{CANCEL_SUFFIX}",
                instance_runs=prefixes)

    # -- tracking -------------------------------------------------------------------------------

    @staticmethod
    def _backend(job: Job) -> dict:
        backend = job.launch_info.get("backend", {})
        if "instance_id" not in backend:
            raise LaunchError(f"run {job.id} has no EC2 instance recorded (its launch failed "
                              "before the instance started)")
        return backend

    def _storage(self, backend: dict) -> S3Storage:
        return S3Storage(backend["bucket"], backend["region"])

    def _mirror(self, job: Job, storage: S3Storage, prefix: str) -> dict:
        """Bring the run's status.json (and result.pkl once it ended) from S3; return it."""
        data = storage.read_bytes(f"{prefix}/{runner.STATUS_JSON}")
        if data is None:
            return {}
        remote = json.loads(data)
        if remote.get("state") in runner.TERMINAL_STATES:
            result = storage.read_bytes(f"{prefix}/{runner.RESULT_PKL}")
            if result is not None:
                runner.write_bytes_atomic(str(job.log_dir / runner.RESULT_PKL), result)
            elif remote["state"] == "succeeded":
                return remote  # its result is on the way: take the end with the result
        runner.update_status(str(job.log_dir), **remote)
        return remote

    def refresh(self, job: Job) -> None:
        self.refresh_many([job])

    def refresh_many(self, jobs: list[Job]) -> None:
        """Read each run's status from S3; ask EC2 once per region about those not ended."""
        open_jobs: dict[str, list[Job]] = {}
        for job in jobs:
            backend = job.launch_info.get("backend", {})
            if "instance_id" not in backend:
                continue
            self._mirror(job, self._storage(backend), backend["s3_log_prefix"])
            if not job.recorded_state().terminal:
                open_jobs.setdefault(backend["region"], []).append(job)
        for region, group in open_jobs.items():
            ids = sorted({j.launch_info["backend"]["instance_id"] for j in group})
            states = _instance_states(_client("ec2", region), ids)
            for job in group:
                self._settle(job, states.get(job.launch_info["backend"]["instance_id"]))

    def _settle(self, job: Job, instance: dict | None) -> None:
        """Give a run whose instance is gone the terminal state it did not record."""
        backend = job.launch_info["backend"]
        iid = backend["instance_id"]
        state = instance["State"]["Name"] if instance else None
        if state not in ENDED_INSTANCE_STATES and state is not None:
            return
        self._mirror(job, self._storage(backend), backend["s3_log_prefix"])  # the final sync
        if job.recorded_state().terminal:
            return
        reason = (instance or {}).get("StateReason", {}).get("Message", "")
        if job.info().get("cancel_requested"):
            job.record_end("cancelled", f"cancelled (instance {iid} is {state or 'gone'})")
        elif state is None:
            job.record_end("failed", f"EC2 no longer knows instance {iid} and the run recorded "
                                   "no outcome")
        elif "Spot" in reason:
            job.record_end("failed", f"spot instance {iid} was reclaimed by AWS ({reason}) before "
                                   "the run ended; its last sync is in S3 (job.fetch())")
        else:
            job.record_end("failed", f"instance {iid} is {state} ({reason or 'no reason given'}) "
                                   "and the run recorded no outcome; job.fetch() brings "
                                   "instance.log and the run's logs")

    def cancel(self, job: Job) -> None:
        """Ask the agent to stop the run and sync it, then terminate the instance if it is not
        running other runs; the run ends as cancelled."""
        backend = self._backend(job)
        storage = self._storage(backend)
        storage.upload_bytes(backend["cancel_key"], b"")
        runner.update_status(str(job.log_dir), cancel_requested=True)
        if self._mirror(job, storage, backend["s3_log_prefix"]):  # the agent is up: let it sync
            deadline = time.monotonic() + CANCEL_WAIT_SECONDS
            while not job.recorded_state().terminal and time.monotonic() < deadline:
                time.sleep(0.5)
                self._mirror(job, storage, backend["s3_log_prefix"])
        others = [p for r, p in backend["instance_runs"].items() if r != job.id]
        busy = [p for p in others if json.loads(storage.read_bytes(
            f"{p}/{runner.STATUS_JSON}") or b"{}").get("state") not in runner.TERMINAL_STATES]
        if not busy:
            _client("ec2", backend["region"]).terminate_instances(
                InstanceIds=[backend["instance_id"]])
        job.record_end("cancelled", "cancelled")

    def remote_log_dir(self, run: Run) -> str | None:
        return run.launch["backend"].get("s3_log_url")

    def log_file(self, job: Job, name: str) -> Path:
        """The run's log as last synced to S3 (copied into the local folder first)."""
        backend = job.launch_info.get("backend", {})
        if "instance_id" in backend:
            data = self._storage(backend).read_bytes(f"{backend['s3_log_prefix']}/{name}")
            if data is not None:
                runner.write_bytes_atomic(str(job.log_dir / name), data)
        return job.log_dir / name

    def fetch(self, job: Job) -> str:
        backend = self._backend(job)
        storage = self._storage(backend)
        prefix = backend["s3_log_prefix"]
        files = storage.download_prefix(prefix, job.log_dir, skip=(runner.STATUS_JSON,))
        self._mirror(job, storage, prefix)
        return (f"fetched {len(files)} file(s) from {backend['s3_log_url']} into {job.log_dir}"
                if files else f"nothing stored yet under {backend['s3_log_url']}")

    def wait_for_change(self, job: Job, timeout: float) -> None:
        time.sleep(max(timeout, 0.5))  # each look asks S3 (and maybe EC2): at most twice a second



def _instance_states(ec2: Any, ids: list[str]) -> dict[str, dict]:
    """Instance descriptions by id; an id EC2 does not know is left out."""
    from botocore.exceptions import ClientError

    try:
        reply = ec2.describe_instances(InstanceIds=ids)
    except ClientError as exc:
        if _error_code(exc) != "InvalidInstanceID.NotFound":
            raise
        if len(ids) == 1:
            return {}
        return {k: v for i in ids for k, v in _instance_states(ec2, [i]).items()}
    return {i["InstanceId"]: i for r in reply["Reservations"] for i in r["Instances"]}


def _start_instances(ec2: Any, args: dict) -> dict:
    """run_instances, with EC2's refusal as a LaunchError that names what was asked."""
    from botocore.exceptions import ClientError

    try:
        return ec2.run_instances(**args)
    except ClientError as exc:
        market = "spot" if "InstanceMarketOptions" in args else "on-demand"
        raise LaunchError(f"EC2 did not start {args['MaxCount']} {args['InstanceType']} "
                          f"{market} instance(s) of {args['ImageId']}: {exc}") from exc


def _withdraw(storage: S3Storage, ec2: Any, started: dict[str, list[Run]]) -> None:
    """After a failed launch, end the instances it started; their runs are marked cancelled
    for their agents too, in case an instance outlives the terminate call."""
    if not started:
        return
    for group in started.values():
        for run in group:
            try:
                storage.upload_bytes(run.launch["backend"]["cancel_key"], b"")
            except Exception as exc:  # noqa: BLE001 - the launch error matters more
                print(f"easylaunch ec2: could not mark run {run.run_id} cancelled: {exc!r}",
                      file=sys.stderr)
    try:
        ec2.terminate_instances(InstanceIds=list(started))
    except Exception as exc:  # noqa: BLE001
        print(f"easylaunch ec2: could not terminate {', '.join(started)} after the failed "
              f"launch ({exc!r}); terminate them in the EC2 console", file=sys.stderr)
