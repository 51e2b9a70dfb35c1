"""``ec2``: each run on an AWS instance that syncs its log folder to S3 and terminates when done.

The shared cloud path (modes/cloud/base.py) uploads, writes the manifest and tracks runs; this
module adds what is AWS's own: one ``run_instances`` call per fleet (spot when AWS_SPOT_PRICE is
set) with the boot script as user-data, ``InstanceInitiatedShutdownBehavior="terminate"`` and the
IAM instance profile the instances use for S3; ``describe_instances`` to see instances end; and
``terminate_instances`` for cancel.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, needed
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.base import CloudMode
from easylaunch.modes.cloud.fleet import Fleet, InstanceState, Target
from easylaunch.runs.record import LaunchRequest
from easylaunch_job.cloud.stores import S3Store, aws_error_code

ENDED_INSTANCE_STATES = frozenset({"shutting-down", "terminated", "stopping", "stopped"})
_SESSION_ENV = ("AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_DEFAULT_REGION",
                "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


def _boto3() -> Any:
    return needed("boto3", "mode 'ec2'", "aws")


@functools.lru_cache(maxsize=8)
def _session(_environment: tuple) -> Any:
    return _boto3().session.Session()


def _environment() -> tuple:
    return tuple(os.environ.get(k) for k in _SESSION_ENV)


def session() -> Any:
    """A boto3 session, one per process while the AWS environment variables stay the same
    (a session loads the service models once, which takes longer than most calls)."""
    return _session(_environment())


@functools.lru_cache(maxsize=32)
def _cached_client(service: str, region: str, _environment: tuple) -> Any:
    from botocore.config import Config

    config = Config(retries={"max_attempts": 3, "mode": "standard"}, connect_timeout=5,
                    read_timeout=60)
    return session().client(service, region_name=region, config=config)


def client(service: str, region: str) -> Any:
    """A client (and its connection pool), kept while the AWS environment stays the same."""
    return _cached_client(service, region, _environment())


@dataclass(frozen=True)
class Ec2Target(Target):
    """A target with the spot price run_instances needs."""

    spot_price: float | None


def _instance_profile(value: str) -> dict:
    return {"Arn": value} if value.startswith("arn:") else {"Name": value}


class Ec2Mode(CloudMode[Ec2Target]):
    """Runs on EC2 instances, tracked through S3 and the EC2 API."""

    name = "ec2"
    cloud = "aws"
    store_scheme = "s3"
    settings_prefix = "AWS"
    machine_type_keys = ("AWS_INSTANCE_TYPE", "AWS_GPU_INSTANCE_TYPE")

    def import_sdk(self) -> None:
        _boto3()

    def target(self, request: LaunchRequest) -> Ec2Target:
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
        price = s.AWS_SPOT_PRICE
        if request.use_gpu and s.AWS_GPU_SPOT_PRICE is not None:
            price = s.AWS_GPU_SPOT_PRICE
        market = f"spot (max ${price}/hour each)" if price else "on-demand"
        return Ec2Target(region, bucket, prefix, image_id, instance_type, market, price)

    def value_problems(self) -> list[str]:
        if self.settings.AWS_IAM_INSTANCE_PROFILE:
            return []
        return ["AWS_IAM_INSTANCE_PROFILE is not set: instances reach S3 through their own "
                "role (no credentials are sent to them); set it to an instance profile allowed "
                "to read and write AWS_S3_PATH"]

    def agent_region(self, target: Target) -> str:
        return target.location

    def store(self, bucket: str, location: str) -> S3Store:
        return S3Store(bucket, client("s3", location))

    def check_cloud(self, target: Target) -> None:
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
            raise LaunchError(f"cannot reach AWS in {target.location}: {exc}; check the network "
                              "and AWS_ENDPOINT_URL if set") from exc
        except ClientError as exc:
            raise LaunchError(f"AWS refused a check before launching: {exc}") from exc

    def _check_bucket(self, target: Target) -> None:
        from botocore.exceptions import ClientError

        try:
            why = None if self.store(target.bucket, target.location).bucket_exists() \
                else "does not exist"
        except ClientError as exc:
            why = ("is not accessible with these credentials"
                   if aws_error_code(exc) in ("403", "AccessDenied") else f"cannot be used ({exc})")
        if why:
            raise LaunchError(f"the S3 bucket {target.bucket!r} of AWS_S3_PATH {why}; create "
                              "it, or set AWS_S3_PATH to a bucket you can write")

    def _check_ec2(self, target: Target) -> None:
        from botocore.exceptions import ClientError

        s = self.settings
        ec2 = client("ec2", target.location)
        checks = [
            ("AWS_GPU_IMAGE_IDS / AWS_IMAGE_IDS", target.image, ec2.describe_images,
             {"ImageIds": [target.image]}, "Images"),
            ("AWS_INSTANCE_TYPE / AWS_GPU_INSTANCE_TYPE", target.machine_type,
             ec2.describe_instance_types, {"InstanceTypes": [target.machine_type]},
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
                if not aws_error_code(exc).startswith(("Invalid", "MissingParameter")):
                    raise
                found = []
            if not found:
                raise LaunchError(f"{setting}: {value!r} is not known in region {target.location}; "
                                  "fix the setting (each region has its own ids)")

    def hourly_price(self, target: Ec2Target) -> float | None:
        return target.spot_price

    def run_instances_args(self, request: LaunchRequest, target: Ec2Target,
                           fleet: Fleet) -> dict:
        """The run_instances arguments of one fleet."""
        s = self.settings
        count = len(fleet.instances)
        tags = [{"Key": "Name", "Value": f"easylaunch-{request.exp_name}"},
                {"Key": "easylaunch:exp", "Value": request.exp_name},
                {"Key": "easylaunch:launch", "Value": fleet.launch_id}]
        args: dict[str, Any] = dict(
            ImageId=target.image, InstanceType=target.machine_type, MinCount=count,
            MaxCount=count, UserData=fleet.boot_script,
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

    def start_fleet(self, request: LaunchRequest, target: Ec2Target, fleet: Fleet) -> list[dict]:
        """One run_instances call; EC2's refusal as a LaunchError that names what was asked."""
        from botocore.exceptions import ClientError

        args = self.run_instances_args(request, target, fleet)
        try:
            reply = client("ec2", target.location).run_instances(**args)
        except ClientError as exc:
            raise LaunchError(f"EC2 did not start {args['MaxCount']} {args['InstanceType']} "
                              f"{target.market} instance(s) of {args['ImageId']}: {exc}") from exc
        instances = sorted(reply["Instances"], key=lambda i: i.get("AmiLaunchIndex", 0))
        return [{"instance_id": i["InstanceId"], "region": target.location,
                 "spot_request_id": i.get("SpotInstanceRequestId"),
                 "launch_index": i.get("AmiLaunchIndex", 0), "instance_type": target.machine_type,
                 "spot_price": target.spot_price} for i in instances]

    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        client("ec2", record["region"]).terminate_instances(InstanceIds=instance_ids)

    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """One describe_instances call per region."""
        by_region: dict[str, set[str]] = {}
        for backend in backends:
            by_region.setdefault(backend["region"], set()).add(backend["instance_id"])
        states = {}
        for region, ids in by_region.items():
            for iid, desc in _describe(client("ec2", region), sorted(ids)).items():
                name = desc["State"]["Name"]
                reason = desc.get("StateReason", {}).get("Message", "")
                states[iid] = InstanceState(name, name in ENDED_INSTANCE_STATES, reason,
                                            "Spot" in reason)
        return states


def _describe(ec2: Any, ids: list[str]) -> dict[str, dict]:
    """Instance descriptions by id; an id EC2 does not know is left out."""
    from botocore.exceptions import ClientError

    try:
        reply = ec2.describe_instances(InstanceIds=ids)
    except ClientError as exc:
        if aws_error_code(exc) != "InvalidInstanceID.NotFound":
            raise
        if len(ids) == 1:
            return {}
        return {k: v for i in ids for k, v in _describe(ec2, [i]).items()}
    return {i["InstanceId"]: i for r in reply["Reservations"] for i in r["Instances"]}
