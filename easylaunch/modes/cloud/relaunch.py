"""Relaunching a cloud run whose instance ended before the run did.

A run launched with restarts left (``max_restarts``) whose instance went away (a spot
interruption, a GCE preemption, a lost machine) starts again on a new instance, whose agent takes
up the run's status, logs and ``checkpoint/`` from the bucket. No process has to stay alive for
that: whichever process looks at the run next (``job.wait()``, ``job.status()``, ``easylaunch
ls``/``status``, or ``easylaunch watch`` left running) relaunches it. Exactly one does for each
ended instance: it first creates the claim ``<control>/<run id>.after-<instance id>.relaunch``,
which the bucket creates only where it does not exist yet; the claim then names the new
instance, and every other process follows the run there in its copy of the run's record. Each
relaunch counts as a restart (an instance that ended before the run started again too), so
``max_restarts`` bounds them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import Any, Protocol

from easylaunch.modes.cloud import transfer as cloud
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.attempts import RestartPolicy, finish_attempt, give_up_restart
from easylaunch_job.cloud.agent import CANCEL_SUFFIX
from easylaunch_job.cloud.inputs import parse_manifest
from easylaunch_job.cloud.stores import Store
from easylaunch_job.records import BUNDLE_DIR, BUNDLE_JSON, STATUS_JSON, read_json

CLAIM_SUFFIX = ".relaunch"


class Instance(Protocol):
    """What relaunching reads of an instance as its cloud describes it (``base.InstanceState``)."""

    @property
    def reason(self) -> str:
        """Why it ended, when the cloud says."""

    @property
    def interrupted(self) -> bool:
        """Whether the cloud took it back (spot, preemption)."""


class Relaunching(Protocol):
    """What relaunching needs of a cloud mode (``base.CloudMode`` is one)."""

    name: str

    def store_of(self, backend: dict) -> Store: ...

    def target(self, request: LaunchRequest) -> Any: ...

    def fleet_of(self, target: Any, manifest: dict, agent_key: str, launch_id: str,
                 relaunch: int = 0) -> Any: ...

    def start_fleet(self, request: LaunchRequest, target: Any, fleet: Any) -> list[dict]: ...

    def end_instances(self, record: dict, instance_ids: list[str]) -> None: ...


def _claim_key(backend: dict) -> str:
    """``<control>/<run id>.after-<instance id>.relaunch``: one relaunch per ended instance."""
    return (f"{backend['cancel_key'].removesuffix(CANCEL_SUFFIX)}.after-"
            f"{backend['instance_id']}{CLAIM_SUFFIX}")


def claim(job: RunRecord, backend: dict, store: Store, instance: Instance | None,
          notice: str | None) -> bool | None:
    """Decide what becomes of a run whose instance (``backend``: the record that named it, as
    read before the instance was seen ended) ended before the run recorded an end, and that
    nobody cancelled. None: it may not restart, the caller records the end. True: this
    process claimed the relaunch and queued the run's next attempt. False: another process
    relaunches it (or did: the run's record follows it to the new instance), or no restart is
    left (the run ended)."""
    policy = RestartPolicy.of(
        read_json(str(job.log_dir / BUNDLE_DIR / BUNDLE_JSON)))
    if not policy.max_restarts:
        return None
    followed = False
    while (claimed := store.get(_claim_key(backend))) is not None:
        successor = json.loads(claimed).get("backend")
        if successor is None:
            return False  # another process is starting the new instance
        job.record_backend(**successor)
        backend, followed = successor, True
    if followed or not store.create(_claim_key(backend), json.dumps(_claimant()).encode()):
        return False  # (a run followed to its new instance: looked at on the next refresh)
    again = _count_restart(job, policy, backend, instance, notice)
    _publish(store, job)
    return again


def _count_restart(job: RunRecord, policy: RestartPolicy, backend: dict,
                   instance: Instance | None, notice: str | None) -> bool:
    """End the run's attempt on the ended instance, unless its runner recorded the stop itself;
    True if the run is queued for another attempt."""
    status = job.info()
    if status.get("state") == "queued" and \
            len(status.get("restarts", [])) > backend.get("restarts_at_start", 0):
        return True  # its runner recorded the stop, and queued the run
    interrupted = bool(notice) or (instance is not None and instance.interrupted)
    why = notice or (instance.reason if instance else "the cloud no longer knows it")
    what = "recorded an outcome" if status.get("state") == "running" else "started"
    return finish_attempt(
        str(job.log_dir), policy, "preempted" if interrupted else "lost", state="failed",
        error=f"instance {backend['instance_id']} ended ({why or 'no reason given'}) before "
              f"the run {what}")


def _claimant() -> dict:
    return {"claimed_by": f"{socket.gethostname()}:{os.getpid()}", "claimed_at": time.time()}


def start(mode: Relaunching, jobs: list[RunRecord]) -> None:
    """Start the next attempt of claimed runs: one new instance per ended instance. A start
    that fails ends the runs, saying why."""
    groups: dict[str, list[RunRecord]] = {}
    for job in jobs:
        groups.setdefault(job.launch_info["backend"]["instance_id"], []).append(job)
    for old_instance, group in groups.items():
        try:
            _start_group(mode, group)
        except Exception as exc:  # noqa: BLE001 - recorded in each run
            print(f"easylaunch {mode.name}: could not relaunch {', '.join(j.id for j in group)} "
                  f"of instance {old_instance}: {exc}", file=sys.stderr)
            for job in group:
                give_up_restart(str(job.log_dir), f"no new instance started: {exc}")
                _publish(mode.store_of(job.launch_info["backend"]), job)


def _start_group(mode: Relaunching, group: list[RunRecord]) -> None:
    launch = group[0].launch_info
    old = launch["backend"]
    store = mode.store_of(old)
    manifest = parse_manifest(store.get(old["manifest_key"]))
    ids = {job.id for job in group}
    specs = [dict(spec, resume=True) for specs in manifest["instances"] for spec in specs
             if spec["run_id"] in ids]
    request = LaunchRequest.of_launch(launch, [{}] * len(specs))
    target = mode.target(request)
    agent = cloud.agent_archive(target.prefix)
    fleet = mode.fleet_of(target, dict(manifest, instances=[specs]), agent.key,
                          manifest["control_prefix"].rsplit("/", 1)[-1],
                          relaunch=len(old.get("earlier_instances", [])) + 1)
    cloud.upload(store, [agent], [fleet.manifest])
    [instance] = mode.start_fleet(request, target, fleet)
    shared = dict(instance, manifest_key=fleet.manifest.key,
                  instance_runs={s["run_id"]: s["log_prefix"] for s in specs},
                  earlier_instances=[*old.get("earlier_instances", []), old["instance_id"]])
    for job in group:
        before, info = job.launch_info["backend"], job.info()
        backend = dict(before, **shared, restarts_at_start=len(info.get("restarts", [])))
        job.record_backend(**backend)
        store.put_bytes(_claim_key(before),
                        json.dumps(dict(_claimant(), backend=backend)).encode())
        print(f"easylaunch {mode.name}: run {job.id} starts again on instance "
              f"{instance['instance_id']} (attempt {info.get('attempt', 0) + 1})",
              file=sys.stderr)
    try:  # (a stopped preemptible GCE instance keeps its disk until deleted)
        mode.end_instances(old, [old["instance_id"]])
    except Exception as exc:  # noqa: BLE001 - it ended already; this only tidies up
        print(f"easylaunch {mode.name}: could not delete the ended instance "
              f"{old['instance_id']}: {exc}", file=sys.stderr)


def _publish(store: Store, job: RunRecord) -> None:
    """Put the run's status.json, as settled here, in the bucket (where the instances and
    every other process read it)."""
    backend = job.launch_info["backend"]
    store.put_bytes(f"{backend['log_prefix']}/{STATUS_JSON}",
                    (job.log_dir / STATUS_JSON).read_bytes())
