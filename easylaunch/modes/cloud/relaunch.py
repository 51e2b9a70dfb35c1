"""Relaunching a cloud run whose instance ended before the run did.

A run launched with restarts left (``max_restarts``) whose instance went away (a spot
interruption, a GCE preemption, a lost machine) starts again on a new instance, whose agent takes
up the run's status, logs and ``checkpoint/`` from the bucket. No process has to stay alive for
that: whichever process looks at the run next (``job.wait()``, ``job.status()``, ``easylaunch
ls``/``status``, or ``easylaunch watch`` left running) relaunches it. Exactly one does for each
ended attempt: it first creates the claim ``<control>/<run id>.attempt-<n>.relaunch``, which the
bucket creates only where it does not exist yet; the claim then names the new instance, and every
other process adopts that instance into its copy of the run's record.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from typing import TYPE_CHECKING

from easylaunch import runner
from easylaunch.bundle import BUNDLE_DIR, LAUNCH_JSON
from easylaunch.jobs import Job
from easylaunch.modes.cloud import transfer as cloud
from easylaunch.modes.cloud.instance_agent import CANCEL_SUFFIX, Store
from easylaunch.request import LaunchRequest

if TYPE_CHECKING:
    from easylaunch.modes.cloud.base import CloudMode, InstanceState

CLAIM_SUFFIX = ".relaunch"


def _claim_prefix(backend: dict) -> str:
    return backend["cancel_key"].removesuffix(CANCEL_SUFFIX) + ".attempt-"


def _claim_key(backend: dict, attempt: int) -> str:
    return f"{_claim_prefix(backend)}{attempt}{CLAIM_SUFFIX}"


def latest_claim(store: Store, backend: dict) -> tuple[int, dict] | None:
    """The run's claim of the highest attempt: (attempt, its content), or None."""
    prefix = _claim_prefix(backend)
    found = [(int(n), key) for key in store.list(prefix)
             if (n := key[len(prefix):].removesuffix(CLAIM_SUFFIX)).isdigit()]
    if not found:
        return None
    attempt, key = max(found)
    return attempt, json.loads(store.get(key) or b"{}")


def claim(mode: CloudMode, job: Job, store: Store, instance: InstanceState | None,
          notice: str | None) -> bool | None:
    """Decide what becomes of a run whose instance ended before it recorded an end (and that
    nobody cancelled). None: restarts do not apply, the caller records the end. True: this
    process claimed the relaunch and queued the run's next attempt. False: another process
    relaunches it (or did: its new instance is adopted), or no restart is left (the run ended)."""
    policy = runner.RestartPolicy.of(
        runner.read_json(str(job.log_dir / BUNDLE_DIR / runner.BUNDLE_JSON)))
    status = job.info()
    attempt = status.get("attempt", 0)
    if not policy.max_restarts or not attempt:  # (no attempt: it never started; no restart)
        return None
    backend = job.launch_info["backend"]
    latest = latest_claim(store, backend)
    if latest is not None:
        claimed, content = latest
        started = content.get("backend")
        if started is None:
            return False  # another process is starting the new instance
        if started["instance_id"] != backend["instance_id"]:
            _record(job, started)
            return False
        if claimed == attempt:
            runner.give_up_restart(str(job.log_dir), f"its new instance {backend['instance_id']} "
                                                     "ended before the run started again")
            _publish(store, job)
            return False
    here = {"claimed_by": f"{socket.gethostname()}:{os.getpid()}", "claimed_at": time.time()}
    if not store.create(_claim_key(backend, attempt), json.dumps(here).encode()):
        return False
    again = True
    if status.get("state") != "queued":  # the instance went before the runner recorded a stop
        interrupted = bool(notice) or (instance is not None and instance.interrupted)
        why = notice or (instance.reason if instance else "") or "no reason given"
        again = runner.finish_attempt(
            str(job.log_dir), policy, "preempted" if interrupted else "lost", state="failed",
            error=f"instance {backend['instance_id']} ended ({why}) before the run recorded an "
                  "outcome")
    _publish(store, job)
    return again


def start(mode: CloudMode, jobs: list[Job]) -> None:
    """Start the next attempt of claimed runs: one new instance per ended instance. A start
    that fails ends the runs, saying why."""
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        groups.setdefault(job.launch_info["backend"]["instance_id"], []).append(job)
    for old_instance, group in groups.items():
        try:
            _start_group(mode, group)
        except Exception as exc:  # noqa: BLE001 - recorded in each run
            print(f"easylaunch {mode.name}: could not relaunch {', '.join(j.id for j in group)} "
                  f"of instance {old_instance}: {exc}", file=sys.stderr)
            for job in group:
                runner.give_up_restart(str(job.log_dir), f"no new instance started: {exc}")
                _publish(mode.store_of(job.launch_info["backend"]), job)


def _start_group(mode: CloudMode, group: list[Job]) -> None:
    launch = group[0].launch_info
    old = launch["backend"]
    store = mode.store_of(old)
    manifest = json.loads(store.get(old["manifest_key"]) or b"{}")
    ids = {job.id for job in group}
    specs = [dict(spec, resume=True) for specs in manifest["instances"] for spec in specs
             if spec["run_id"] in ids]
    request = LaunchRequest.of_launch(launch, [{}] * len(specs))
    target = mode.target(request)
    agent = cloud.agent_archive(target.prefix)
    attempt = max(job.info().get("attempt", 1) for job in group) + 1
    batch = mode.batch_of(target, dict(manifest, instances=[specs]), agent.key,
                          manifest["control_prefix"].rsplit("/", 1)[-1], attempt)
    cloud.upload(store, [agent], [batch.manifest])
    [instance] = mode.start_batch(request, target, batch)
    backend = dict(instance, manifest_key=batch.manifest.key,
                   instance_runs={s["run_id"]: s["log_prefix"] for s in specs},
                   earlier_instances=[*old.get("earlier_instances", []), old["instance_id"]])
    for job in group:
        _record(job, backend)
        content = {"claimed_by": f"{socket.gethostname()}:{os.getpid()}", "backend": backend}
        store.put_bytes(_claim_key(old, job.info().get("attempt", 1)),
                        json.dumps(content).encode())
        print(f"easylaunch {mode.name}: run {job.id} starts again on instance "
              f"{instance['instance_id']} (attempt {job.info().get('attempt', 1) + 1})",
              file=sys.stderr)
    try:  # (a stopped preemptible GCE instance keeps its disk until deleted)
        mode.end_instances(old, [old["instance_id"]])
    except Exception as exc:  # noqa: BLE001 - it ended already; this only tidies up
        print(f"easylaunch {mode.name}: could not delete the ended instance "
              f"{old['instance_id']}: {exc}", file=sys.stderr)


def _record(job: Job, backend: dict) -> None:
    """Make the run's launch.json name the instance it runs on now."""
    launch = job.launch_info
    launch["backend"].update(backend)
    runner.write_json_atomic(str(job.log_dir / LAUNCH_JSON), launch)


def _publish(store: Store, job: Job) -> None:
    """Put the run's status.json, as settled here, in the bucket (where the instances and
    every other process read it)."""
    backend = job.launch_info["backend"]
    store.put_bytes(f"{backend['log_prefix']}/{runner.STATUS_JSON}",
                    (job.log_dir / runner.STATUS_JSON).read_bytes())
