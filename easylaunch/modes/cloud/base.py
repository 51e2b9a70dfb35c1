"""What the cloud modes (``ec2``, ``gcp``, ``azure``, ``aml``, ``ray``) share: one path from
launch to fetch.

A launch uploads what the bucket does not hold yet (code snapshots and bundles are named by
content, so a sweep uploads each snapshot once), one manifest per fleet of instances and the
instance agent; then the mode starts the fleet's instances with a short boot script that fetches
the agent, which runs the manifest and mirrors the runs' log folders to the bucket.
``launch.json`` records each run's instance and bucket prefix, so ``status``, ``wait``,
``fetch`` and ``cancel`` work from any later process: the run's ``status.json`` is read from the
bucket, and an instance that is gone while the run recorded no end gives the run a terminal state
with the reason. A mode adds only what its cloud differs in: settings, checks, starting,
describing and ending instances.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from abc import abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Generic

from easylaunch.errors import LaunchError, is_count
from easylaunch.modes.base import Mode
from easylaunch.modes.cloud import relaunch
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.fleet import CloudPlan, Fleet, InstanceState, Target, TargetT
from easylaunch.modes.hosts.transport import HostError
from easylaunch.runs.bundle import Run
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.cloud.agent import CANCEL_SUFFIX
from easylaunch_job.cloud.inputs import AGENT_JSON
from easylaunch_job.cloud.stores import Store
from easylaunch_job.outcome import INLINE_RESULT
from easylaunch_job.records import (
    METRICS_JSONL,
    RESULT_PKL,
    STATUS_JSON,
    STDERR_LOG,
    STDOUT_LOG,
    update_status,
    write_bytes_atomic,
)
from easylaunch_job.states import TERMINAL_STATES

AGENT_POLL_SECONDS = 5.0  # how often the agent looks at statuses, cancels and notices
CANCEL_WAIT_SECONDS = 30.0  # how long cancel waits for the agent's last sync


class CloudMode(Mode, Generic[TargetT]):
    """Runs on cloud instances, tracked through the bucket and the cloud's API."""

    cloud: ClassVar[str]  # the agent's --cloud
    store_scheme: ClassVar[str]  # the bucket's kind: "s3", "gs"
    own_machines: ClassVar[bool] = True  # each fleet starts machines of its own (paid for)
    per_rank: ClassVar[bool] = False  # an instance may be several processes (ranks)
    settings_prefix: ClassVar[str]  # "AWS": the mode reads AWS_PYTHON, AWS_SYNC_INTERVAL_SECONDS...
    max_instances_per_batch: ClassVar[int] = 100
    restarts = True  # (relaunch.py)
    backend_poll_seconds = 5.0  # (each look asks the bucket; the agents sync at their interval)
    options: dict[str, Any] = {"confirm": True, "num_exps_per_instance": None}

    machine_type_keys: ClassVar[tuple[str, str]]  # the settings of CPU and GPU machine types

    def sees_this_machine(self) -> bool:
        return False

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        return {"instance_type": self.settings[self.machine_type_keys[request.use_gpu]],
                "docker_image": str(self.docker_image())}

    def docker_image(self) -> str | None:
        """The image runs start in (None: the machine's own Python)."""
        return self.setting("DOCKER_IMAGE")

    def setting(self, name: str) -> Any:
        """The mode's own setting ``<PREFIX>_<name>``."""
        return self.settings[f"{self.settings_prefix}_{name}"]

    def per_instance(self) -> int:
        """Runs per instance: the mode option, else <PREFIX>_NUM_EXPS_PER_INSTANCE."""
        n = self.opts["num_exps_per_instance"]
        return self.setting("NUM_EXPS_PER_INSTANCE") if n is None else n

    # -- what a cloud provides ------------------------------------------------------------------

    @abstractmethod
    def import_sdk(self) -> None:
        """Import the cloud's library; where it is missing, MissingExtra names the extra."""

    @abstractmethod
    def target(self, request: LaunchRequest) -> TargetT:
        """The settings this request needs, checked without asking the cloud."""

    @abstractmethod
    def check_cloud(self, target: TargetT) -> None:
        """Credentials, bucket and resources, asked of the cloud; LaunchError names the fix."""

    def value_problems(self) -> list[str]:
        """Settings this cloud needs beyond the shared ones (each a sentence with the fix)."""
        return []

    @abstractmethod
    def store(self, bucket: str, location: str) -> Store:
        """The bucket, through this process's credentials."""

    @abstractmethod
    def start_fleet(self, request: LaunchRequest, target: TargetT, fleet: Fleet) -> list[dict]:
        """Start one instance per entry of ``fleet.instances``; what to record of each, in the
        same order (``instance_id`` at least). On failure, end what it started and raise."""

    @abstractmethod
    def end_instances(self, record: dict, instance_ids: list[str]) -> None:
        """Terminate or delete instances started like ``record`` (what start_fleet gave, or a
        run's backend record, which holds it)."""

    @abstractmethod
    def instance_states(self, backends: list[dict]) -> dict[str, InstanceState]:
        """The instances of these records by id; an instance the cloud no longer knows is
        left out."""

    # -- checks ---------------------------------------------------------------------------------

    def _check_values(self) -> None:
        problems = []
        if not isinstance(self.opts.get("confirm", False), bool):
            problems.append(f"confirm must be True or False, got {self.opts['confirm']!r}")
        n = self.per_instance()
        if not is_count(n):
            problems.append(f"num_exps_per_instance / {self.settings_prefix}_NUM_EXPS_PER_"
                            f"INSTANCE must be a positive integer, got {n!r}")
        problems += self.value_problems()
        if problems:
            raise LaunchError(f"mode {self.name!r}: " + "; ".join(problems))

    def check(self, request: LaunchRequest) -> None:
        self.import_sdk()  # (first: its extra is the first fix on a core install)
        self._check_values()
        target = self.target(request)
        self.check_cloud(target)
        self._confirm(request, target)

    def _confirm(self, request: LaunchRequest, target: TargetT) -> None:
        """Ask once before starting paid instances, on an interactive terminal only."""
        if not self.own_machines or self.opts["confirm"] is False or not (
                sys.stdin.isatty() and sys.stderr.isatty()):
            return
        count = -(-len(request.variants) // self.per_instance())
        print(f"easylaunch {self.name}: {count} {target.machine_type} {target.market} "
              f"instance(s) will start in {target.location} for {len(request.variants)} run(s) "
              f"of {request.exp_name!r}.", file=sys.stderr)
        answer = input("Start them? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            raise LaunchError(f"not launched: the start of {self.name} instances was declined "
                              "(pass confirm=False to skip the question)")

    # -- prepare and submit ---------------------------------------------------------------------

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: None) -> CloudPlan[TargetT]:
        target = self.target(request)
        agent = cloud.agent_archive(target.prefix)
        snapshots = cloud.pack_snapshots(runs, request.log_root, target.prefix)
        n = self.per_instance()
        instances = [runs[i:i + n] for i in range(0, len(runs), n)]
        step = self.max_instances_per_batch
        groups = [instances[i:i + step] for i in range(0, len(instances), step)]
        bundles = [cloud.pack_bundles([r for group in g for r in group], target.prefix)
                   for g in groups]
        blobs = cloud.pack_blobs(runs, request.log_root, target.prefix)
        blob_keys = {b.key.rsplit("/", 1)[-1]: b.key for b in blobs}
        fleets = [self._fleet(target, g, b.key, blob_keys, agent.key, request.use_gpu)
                   for g, b in zip(groups, bundles, strict=True)]
        return CloudPlan(target, [agent, *snapshots, *blobs], bundles, fleets)

    def _fleet(self, target: Target, instances: list[list[Run]], bundles_key: str,
               blobs: dict[str, str], agent_key: str, use_gpu: bool) -> Fleet:
        prefix = target.prefix
        interval = float(self.setting("SYNC_INTERVAL_SECONDS"))
        launch_id = instances[0][0].run_id
        snapshots = {snap["digest"]: cloud.snapshot_key(prefix, snap["digest"])
                     for snap in instances[0][0].launch["code_snapshots"]}
        return self.fleet_of(target, {
            "format": cloud.MANIFEST_FORMAT, "python": self.setting("PYTHON"),
            "docker_image": self.docker_image(), "use_gpu": use_gpu,
            "sync_interval": interval, "poll_seconds": min(AGENT_POLL_SECONDS, interval),
            "patterns": list(self.setting("FILE_PATTERNS_TO_SAVE")), "snapshots": snapshots,
            "blobs": blobs,
            "control_prefix": cloud.join_key(prefix, "control", launch_id),
            "instances": [[cloud.manifest_run(r, prefix, bundles_key) for r in group]
                          for group in instances]}, agent_key, launch_id)

    def fleet_of(self, target: Target, manifest: dict, agent_key: str, launch_id: str,
                 relaunch: int = 0) -> Fleet:
        """The fleet that starts ``manifest``'s instances with the agent ``agent_key``."""
        archive = cloud.manifest_archive(target.prefix, manifest)
        boot = cloud.boot_script(cloud.BootSpec(
            cloud=self.cloud, store=self.store_scheme, python=manifest["python"],
            shutdown_on_failure=self.own_machines, per_rank=self.per_rank,
            pip_requirements=tuple(self.setting("PIP_REQUIREMENTS")), bucket=target.bucket,
            region=self.agent_region(target), agent_key=agent_key, manifest_key=archive.key))
        ids = [[spec["run_id"] for spec in group] for group in manifest["instances"]]
        return Fleet(ids, archive, launch_id, manifest["control_prefix"], boot, relaunch)

    def agent_region(self, target: Target) -> str:
        """The region the agent's storage client uses (none by default)."""
        return ""

    def hourly_price(self, target: TargetT) -> float | None:
        """The most one instance of ``target`` costs an hour, where the settings say it (a spot
        maximum); None where only the cloud's price list knows."""
        return None

    def resources(self, target: TargetT, count: int) -> dict[str, Any]:
        """What a dry run says the launch's ``count`` instances are."""
        price = self.hourly_price(target)
        return {"instances": count, "runs per instance": self.per_instance(),
                "machine type": target.machine_type, "image": target.image,
                "market": target.market,
                "price": f"at most ${price * count:.2f}/hour ({count} x ${price})" if price
                else "not at hand here (see the cloud's price list for this machine type)"}

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: CloudPlan[TargetT]
                ) -> Preview:
        target = prepared.target
        count = sum(len(fleet.instances) for fleet in prepared.fleets)
        objects = [*prepared.shared, *prepared.bundles, *(b.manifest for b in prepared.fleets)]
        return Preview(
            self.name, len(runs), f"{self.name} {target.location}",
            {f"boot script of fleet {i}": fleet.boot_script
             for i, fleet in enumerate(prepared.fleets, start=1)},
            [], self.resources(target, count),
            [f"uploads up to {len(objects)} objects ({sum(len(o.data) for o in objects) / 1e6:.2f}"
             f" MB) to {target.bucket}/{target.prefix} (those stored already are skipped)"])

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: CloudPlan[TargetT]
               ) -> list[RunRecord]:
        target = prepared.target
        store = self.store(target.bucket, target.location)
        cloud.upload(store, prepared.shared,
                     [*prepared.bundles, *(b.manifest for b in prepared.fleets)])
        started: list[tuple[dict, list[Run]]] = []
        by_id = {run.run_id: run for run in runs}
        try:
            for fleet in prepared.fleets:
                instances = self.start_fleet(request, target, fleet)
                for instance, ids in zip(instances, fleet.instances, strict=True):
                    group = [by_id[i] for i in ids]
                    started.append((instance, group))
                    self._record(group, instance, fleet, store, target)
        except BaseException:
            self._withdraw(store, started)
            raise
        return [RunRecord.of_run(run) for run in runs]

    def _record(self, group: list[Run], instance: dict, fleet: Fleet, store: Store,
                target: Target) -> None:
        prefixes = {r.run_id: cloud.run_log_prefix(target.prefix, r) for r in group}
        for run in group:
            run.record_backend(
                **instance, location=target.location, bucket=target.bucket,
                log_prefix=prefixes[run.run_id], log_url=store.url(prefixes[run.run_id]) + "/",
                manifest_key=fleet.manifest.key,
                cancel_key=f"{fleet.control_prefix}/{run.run_id}{CANCEL_SUFFIX}",
                instance_runs=prefixes)

    def _withdraw(self, store: Store, started: list[tuple[dict, list[Run]]]) -> None:
        """After a failed launch, end the instances it started; their runs are marked cancelled
        for their agents too, in case an instance outlives the call that ends it."""
        if not started:
            return
        for _, group in started:
            for run in group:
                try:
                    store.put_bytes(run.launch["backend"]["cancel_key"], b"")
                except Exception as exc:  # noqa: BLE001 - the launch error matters more
                    print(f"easylaunch {self.name}: could not mark run {run.run_id} cancelled: "
                          f"{exc!r}", file=sys.stderr)
        ids = [instance["instance_id"] for instance, _ in started]
        try:
            self.end_instances(started[0][0], ids)
        except Exception as exc:  # noqa: BLE001
            print(f"easylaunch {self.name}: could not end {', '.join(ids)} after the failed "
                  f"launch ({exc!r}); end them in the cloud console", file=sys.stderr)

    # -- tracking -------------------------------------------------------------------------------

    @staticmethod
    def _backend(job: RunRecord) -> dict:
        backend = job.launch_info.get("backend", {})
        if "instance_id" not in backend:
            raise LaunchError(f"run {job.id} has no instance recorded (its launch failed "
                              "before the instance started)")
        return backend

    def store_of(self, backend: dict) -> Store:
        """The bucket a run's record (launch.json's backend) names."""
        return self.store(backend["bucket"], backend["location"])

    def _mirror(self, job: RunRecord, store: Store, prefix: str) -> dict:
        """Bring the run's status.json (and result.pkl once it ended, where its value is
        not in status.json) from the bucket."""
        data = store.get(f"{prefix}/{STATUS_JSON}")
        try:
            remote = json.loads(data) if data is not None else {}
        except ValueError:
            return {}  # cut short on its way: read again on the next poll
        if not remote:
            return {}
        if remote.get("state") in TERMINAL_STATES and not remote.get(INLINE_RESULT):
            result = store.get(f"{prefix}/{RESULT_PKL}")
            if result is not None:
                write_bytes_atomic(str(job.log_dir / RESULT_PKL), result)
            elif remote["state"] == "succeeded":
                return remote  # its result is on the way: take the end with the result
        update_status(str(job.log_dir), **remote)
        return remote

    def refresh(self, job: RunRecord) -> None:
        self.refresh_many([job])

    def refresh_many(self, jobs: list[RunRecord]) -> None:
        """Read each run's status from the bucket; ask the cloud once about those not ended."""
        open_jobs = []  # with the record each was looked at by (another process may move it)
        for job in jobs:
            backend = job.launch_info.get("backend", {})
            if "instance_id" not in backend:
                continue
            self._mirror(job, self.store_of(backend), backend["log_prefix"])
            if not job.recorded_state().terminal:
                open_jobs.append((job, backend))
        if not open_jobs:
            return
        try:
            states = self.instance_states([backend for _, backend in open_jobs])
        except HostError as exc:  # (a dropped connection, a head node restarting)
            warnings.warn(f"{exc}; its runs keep the states last heard until it answers",
                          stacklevel=2)
            return
        again = [job for job, backend in open_jobs
                 if self._settle(job, backend, states.get(backend["instance_id"]))]
        if again:
            relaunch.start(self, again)

    def _settle(self, job: RunRecord, backend: dict, instance: InstanceState | None) -> bool:
        """Give a run whose instance (named in ``backend``) is gone the terminal state it did
        not record; True when the run starts again instead (this process claimed its
        relaunch)."""
        if instance is not None and not instance.ended:
            return False
        store = self.store_of(backend)
        self._mirror(job, store, backend["log_prefix"])  # the final sync
        if job.recorded_state().terminal:
            return False
        iid = backend["instance_id"]
        notice = json.loads(store.get(f"{backend['log_prefix']}/{AGENT_JSON}") or b"{}").get(
            "spot_notice")
        if job.info().get("cancel_requested"):
            where = instance.name if instance else "gone"
            job.record_end("cancelled", f"cancelled (instance {iid} is {where})")
            return False
        again = relaunch.claim(job, backend, store, instance, notice)
        if again is not None:
            return again
        if notice or (instance is not None and instance.interrupted):
            job.record_end("failed", f"instance {iid} was taken back by the cloud "
                                   f"({notice or (instance and instance.reason)}) before the run "
                                   "ended; its last sync is in the bucket (job.fetch())")
        elif instance is None:
            job.record_end("failed", f"{self.name}: the cloud no longer knows instance {iid} "
                                   "and the run recorded no outcome")
        else:
            job.record_end("failed", f"instance {iid} is {instance.name} "
                                   f"({instance.reason or 'no reason given'}) and the run "
                                   "recorded no outcome; job.fetch() brings instance.log and "
                                   "the run's logs")
        return False

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        instance = job.launch_info.get("backend", {}).get("instance_id", "its instance")
        raise LaunchError(
            f"easylaunch does not open shells on {self.name} instances: the images it starts "
            f"need no ssh access. To get in, launch with an image and key that allow ssh and "
            f"ssh to {instance}'s public address; the run's logs sync to "
            f"{job.launch_info['backend'].get('log_url', 'its bucket')}")

    def cancel(self, job: RunRecord) -> None:
        """Ask the agent to stop the run and sync it, then end the instance if it is not
        running other runs; the run ends as cancelled."""
        backend = self._backend(job)
        store = self.store_of(backend)
        store.put_bytes(backend["cancel_key"], b"")
        update_status(str(job.log_dir), cancel_requested=True)
        instance = self.instance_states([backend]).get(backend["instance_id"])
        if self._mirror(job, store, backend["log_prefix"]) and instance and not instance.ended:
            # the agent is up: let it stop the run and sync
            deadline = time.monotonic() + CANCEL_WAIT_SECONDS
            while not job.recorded_state().terminal and time.monotonic() < deadline:
                time.sleep(0.5)
                self._mirror(job, store, backend["log_prefix"])
        others = [p for r, p in backend["instance_runs"].items() if r != job.id]
        busy = [p for p in others if json.loads(store.get(
            f"{p}/{STATUS_JSON}") or b"{}").get("state") not in TERMINAL_STATES]
        if not busy:
            self.end_instances(backend, [backend["instance_id"]])
        job.record_end("cancelled", "cancelled")

    def remote_log_dir(self, run: Run) -> str | None:
        return run.launch["backend"].get("log_url")

    def readable_log(self, job: RunRecord, name: str) -> Path:
        """The run's log as last synced to the bucket (copied into the local folder first)."""
        backend = job.launch_info.get("backend", {})
        if "instance_id" in backend:
            data = self.store_of(backend).get(f"{backend['log_prefix']}/{name}")
            if data is not None:
                write_bytes_atomic(str(job.log_dir / name), data)
        return job.log_dir / name

    def bring_logs(self, job: RunRecord) -> None:
        """The run's other logs (each rank's, the instance's) as last synced to the bucket
        (its stdout and stderr come as they are read: ``readable_log``)."""
        backend = job.launch_info.get("backend", {})
        if "instance_id" in backend:
            cloud.download_prefix(self.store_of(backend), backend["log_prefix"], job.log_dir,
                                  skip=(STDOUT_LOG, STDERR_LOG), suffix=".log")

    def bring_metrics(self, jobs: Sequence[RunRecord]) -> None:
        """The runs' metrics.jsonl as the agents last synced them to the bucket (each sync
        interval)."""
        for job in jobs:
            self.readable_log(job, METRICS_JSONL)

    def fetch(self, job: RunRecord) -> str:
        backend = self._backend(job)
        store = self.store_of(backend)
        prefix = backend["log_prefix"]
        # the record comes through _mirror, which takes result.pkl with the status announcing it
        files = cloud.download_prefix(store, prefix, job.log_dir,
                                      skip=(STATUS_JSON, RESULT_PKL))
        self._mirror(job, store, prefix)
        return (f"fetched {len(files)} file(s) from {backend['log_url']} into {job.log_dir}"
                if files else f"nothing stored yet under {backend['log_url']}")

    def wait_for_change(self, job: RunRecord, timeout: float) -> None:
        time.sleep(max(timeout, 0.5))  # each look asks the bucket (and maybe the cloud)
