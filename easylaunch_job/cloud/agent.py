"""The instance side of the cloud modes: ``python job.pyz agent BUCKET MANIFEST_KEY --cloud C``.

The boot script fetches the job side's zipapp from the bucket and runs this. It needs only
the standard library and the cloud's storage library (boto3 on AWS, google-cloud-storage on
Google Cloud; easylaunch is not installed on the instance), and no credentials: the storage
library uses the instance's own identity. It reads the launch manifest, picks its share of runs
by its index, unpacks their code snapshots and bundles, starts each run's own job side, and

* mirrors each run's ``status.json`` to the bucket as soon as it changes, and the whole log
  folder (files matching the manifest's patterns) every sync interval;
* stops a run whose cancel marker appears in the bucket;
* watches the interruption notice (an EC2 spot notice, a GCE preemption) and syncs everything
  when it comes; SIGTERM (the machine shutting down, a GCE shutdown-script) does a last sync;
* with restarts (the bundle's ``restart``): starts a run's next attempt here after a crash or an
  exception; on an interruption tells the run (SIGTERM: it checkpoints) and leaves it queued,
  synced with its ``checkpoint/``, for the new instance the launching side starts, whose agent
  first takes up what the earlier attempts synced (the manifest's ``resume``);
* waits for all its runs, syncs everything a last time and ends the instance: EC2 instances
  shut down (they were started with shutdown behaviour "terminate"), GCE instances delete
  themselves through the Compute API with the metadata server's token.

Environment overrides (tests point them at stand-ins): those of :mod:`.platforms`,
``EASYLAUNCH_WORKDIR`` (the folder runs live in), and the storage libraries' own
``AWS_ENDPOINT_URL`` and ``STORAGE_EMULATOR_HOST``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from easylaunch_job.cloud import inputs
from easylaunch_job.cloud.inputs import AGENT_JSON, INSTANCE_LOG
from easylaunch_job.cloud.platforms import ENV_SNAPSHOTS, ENV_WORKDIR, PLATFORMS, Platform, log
from easylaunch_job.cloud.runs import RunSlot, files_to_sync
from easylaunch_job.cloud.stores import STORES, Store
from easylaunch_job.environment import rank_info, signal_group
from easylaunch_job.records import (
    BUNDLE_DIR,
    JOB_PYZ,
    STDERR_LOG,
    STDOUT_LOG,
)
from easylaunch_job.states import TERMINAL_STATES

DEFAULT_WORKDIR = "/var/lib/easylaunch"
AGENT_PID = "agent.pid"
BOOT_LOG = "boot.log"
CANCEL_SUFFIX = ".cancel"
TAG_KEY = "easylaunch:agent"
KILL_GRACE_SECONDS = 10.0
EXIT_CHECK_SECONDS = 0.05  # how often the agent looks whether a run's process exited
LAST_SYNC_TRIES = 3  # the last sync before the machine goes: a storage hiccup must not lose it
LAST_SYNC_PAUSE_SECONDS = 0.5
# How long runs that may restart get, when the machine goes down, to checkpoint and record their
# stop (GCE gives the shutdown script about 30 s, of which the last sync needs a few).
STOP_GRACE_SECONDS = 15.0


class Agent:
    """Runs this instance's share of a launch manifest and keeps the bucket up to date."""

    def __init__(self, store: Store, manifest: dict, workdir: Path, platform: Platform,
                 instance: dict) -> None:
        self.store = store
        self.manifest = manifest
        self.workdir = workdir
        self.platform = platform
        self.instance = instance
        index = int(instance.get("index") or 0)
        self.slots = [RunSlot(spec, workdir) for spec in manifest["instances"][index]]
        self.spot_notice: str | None = None
        self.final = False

    def tags(self, state: str) -> dict:
        """The instance's own tags: its runs, their experiment and the agent's state."""
        runs = " ".join(slot.run_id for slot in self.slots)
        exps = " ".join(sorted({slot.spec["exp_name"] for slot in self.slots}))
        return {TAG_KEY: state, "easylaunch:runs": runs[:255], "easylaunch:exp": exps[:255]}

    def stop_all(self) -> None:
        """The agent is going away: runs that may restart are told (SIGTERM) and get
        STOP_GRACE_SECONDS to checkpoint, and are left for a relaunch on a new instance; every
        other run that has not ended gets a terminal state."""
        told = self.tell_restartable()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while any(s.proc is not None and s.proc.poll() is None for s in told) and \
                time.monotonic() < deadline:  # (told: runs with a process)
            time.sleep(0.1)
        why = (f"the cloud took the instance back ({self.spot_notice}) before the run ended; "
               "its last sync is in the bucket" if self.spot_notice else
               "the instance agent stopped before the run ended; see instance.log")
        for slot in self.slots:
            if slot.ended:
                continue
            if slot.proc is not None and slot.proc.poll() is None:
                signal_group(slot.proc.pid, signal.SIGKILL)
            if slot.may_restart():
                log(f"run {slot.run_id}: stopped here; it goes on on a new instance")
                slot.ended = True
            else:
                slot.record_end("failed", why)

    def tell_restartable(self) -> list[RunSlot]:
        """Send SIGTERM to the running runs that may restart: each checkpoints and records its
        stop (a preemption, to its runner). Returns them."""
        told = [s for s in self.slots if s.restartable and not s.ended and s.proc is not None
                and s.proc.poll() is None and s.cancelled_at is None]
        for slot in told:
            assert slot.proc is not None  # (told: runs with a process)
            log(f"run {slot.run_id}: telling it the instance goes away (SIGTERM)")
            signal_group(slot.proc.pid, signal.SIGTERM)
        return told

    # -- setup ----------------------------------------------------------------------------------

    def prepare(self, slot: RunSlot) -> None:
        """Bring what the run needs into its folder (see :func:`.inputs.prepare`)."""
        inputs.prepare(self.store, self.manifest, self.workdir, slot, self.slots)

    def command(self, slot: RunSlot) -> list[str]:
        """The run's argv (its bundle's job side), inside the Docker image when the manifest
        names one."""
        bundle = str(slot.log_dir / BUNDLE_DIR)
        runner = [f"{bundle}/{JOB_PYZ}", "run", bundle, "--log-dir", str(slot.log_dir)]
        image = self.manifest.get("docker_image")
        if not image:
            return [self.manifest["python"], *runner]
        gpu = ["--gpus", "all"] if self.manifest.get("use_gpu") else []
        mount = f"{self.workdir}:{self.workdir}"
        return ["docker", "run", "--rm", "--net=host", *gpu, "-v", mount, "-w", str(slot.log_dir),
                "-e", "PYTHONUNBUFFERED=1", image, "python3", *runner]

    def start(self, slot: RunSlot) -> None:
        try:
            self.prepare(slot)
        except Exception as exc:  # noqa: BLE001 - reported in the run's own record
            slot.log_dir.mkdir(parents=True, exist_ok=True)
            slot.record_end("failed", f"the instance could not prepare the run: {exc!r}")
            log(f"run {slot.run_id}: preparing failed: {exc!r}")
            return
        slot.attempts_before = slot.status().get("attempt", 0)
        with open(slot.log_dir / STDOUT_LOG, "ab") as out, \
                open(slot.log_dir / STDERR_LOG, "ab") as err:
            slot.proc = subprocess.Popen(
                self.command(slot), cwd=str(slot.log_dir), stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, start_new_session=True,
                env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log(f"run {slot.run_id}: started (pid {slot.proc.pid})")

    # -- supervision ----------------------------------------------------------------------------

    def cancel_requests(self) -> set[str]:
        prefix = self.manifest["control_prefix"] + "/"
        return {k[len(prefix):-len(CANCEL_SUFFIX)] for k in self.store.list(prefix)
                if k.endswith(CANCEL_SUFFIX)}

    def handle_cancels(self) -> None:
        wanted = self.cancel_requests()
        for slot in self.slots:
            if slot.ended or slot.run_id not in wanted:
                continue
            if slot.proc is None:
                slot.record_end("cancelled", "cancelled before it started")
            elif slot.cancelled_at is None:
                log(f"run {slot.run_id}: cancel requested, stopping it")
                slot.cancelled_at = time.time()
                slot.update(cancel_requested=True)  # (the runner's SIGTERM: a cancel, no restart)
                signal_group(slot.proc.pid, signal.SIGTERM)
            elif time.time() - slot.cancelled_at > KILL_GRACE_SECONDS:
                signal_group(slot.proc.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Record the end of runs whose process exited; sync them in full."""
        for slot in self.slots:
            if slot.ended or slot.proc is None or slot.proc.poll() is None:
                continue
            code = slot.proc.returncode
            signal_group(slot.proc.pid, signal.SIGKILL)  # what the run left behind
            if slot.may_restart():
                self.go_on(slot)
                continue
            state = "cancelled" if slot.cancelled_at is not None else "failed"
            slot.record_end(state, f"the run's process exited with code {code} before "
                                   "recording an outcome; see stderr.log", exit_code=code)
            log(f"run {slot.run_id}: ended as {slot.status().get('state')}")
            self.sync(slot, everything=True)

    def go_on(self, slot: RunSlot) -> None:
        """Start the run's next attempt here; after an interruption notice, leave it (synced)
        for a new instance instead, which the launching side starts."""
        status = slot.status()
        if self.spot_notice:
            log(f"run {slot.run_id}: stopped for the interruption ({status.get('state')}); it "
                "goes on on a new instance")
            slot.ended = True
            self.sync(slot, everything=True)
            return
        log(f"run {slot.run_id}: attempt {status.get('attempt')} ended "
            f"({status.get('state')}); starting it again")
        self.start(slot)

    def check_interruption(self) -> None:
        if self.spot_notice is not None:
            return
        notice = self.platform.interruption_notice()
        if notice:
            self.spot_notice = notice
            log(f"interruption notice: {notice}; syncing everything now")
            self.tell_restartable()
            self.sync_all(everything=True)

    def supervise(self, interval: float, poll: float) -> None:
        """Run until every run has ended: reap a run as soon as its process exits; look at the
        bucket (cancels) and sync statuses each poll, and everything each interval."""
        next_sync = time.monotonic() + interval
        while True:
            check_stop()
            try:
                self.handle_cancels()
            except Exception as exc:  # noqa: BLE001 - the bucket is asked again next time
                log(f"could not read cancel requests: {exc!r}")
            self.reap()
            if all(slot.ended for slot in self.slots):
                return
            self.check_interruption()
            everything = time.monotonic() >= next_sync
            if everything:
                next_sync = time.monotonic() + interval
            self.sync_all(everything)
            self.wait_for_exit(time.monotonic() + poll)

    def wait_for_exit(self, deadline: float) -> None:
        """Until ``deadline``, or sooner when a running run's process exits or SIGTERM came."""
        while time.monotonic() < deadline and not _stop_asked:
            if any(not s.ended and s.proc is not None and s.proc.poll() is not None
                   for s in self.slots):
                return
            time.sleep(EXIT_CHECK_SECONDS)

    # -- syncing --------------------------------------------------------------------------------

    def sync(self, slot: RunSlot, everything: bool) -> None:
        """Upload the run's files that changed since they were last uploaded (all of them once
        the run has ended: its final status reaches the bucket after the logs it ends)."""
        everything = everything or slot.status().get("state") in TERMINAL_STATES
        for rel in files_to_sync(slot.log_dir, self.manifest["patterns"], everything):
            slot.put_if_changed(self.store, rel, slot.log_dir / rel)
        if everything:
            self._put_instance_files(slot)

    def _put_instance_files(self, slot: RunSlot) -> None:
        info = dict(self.instance, spot_notice=self.spot_notice, synced_at=time.time(),
                    final=self.final, runs=[s.run_id for s in self.slots])
        prefix = slot.spec["log_prefix"]
        self.store.put_bytes(f"{prefix}/{AGENT_JSON}", json.dumps(info, indent=2).encode())
        slot.put_if_changed(self.store, INSTANCE_LOG, self.workdir / BOOT_LOG)

    def sync_all(self, everything: bool, tries: int = 1) -> None:
        """Sync each run; one that fails is tried again next time, or (the last sync, which
        has no next time) up to ``tries`` times now."""
        for slot in self.slots:
            for attempt in range(1, tries + 1):
                try:
                    self.sync(slot, everything)
                    break
                except Exception as exc:  # noqa: BLE001 - logged; tried again
                    log(f"run {slot.run_id}: sync failed (try {attempt} of {tries}): {exc!r}")
                    if attempt < tries:
                        time.sleep(LAST_SYNC_PAUSE_SECONDS)


class Stop(BaseException):
    """SIGTERM reached the agent: the machine is going down (not caught by the agent's
    ``except Exception`` handlers, which retry what failed)."""


_stop_asked = False  # SIGTERM came: the supervision raises Stop at its next step


def _stop(signum: int, frame: Any) -> None:
    """Note the SIGTERM. (Raising here could land in any code, a garbage-collected connection
    pool's finalizer too, which swallows the exception: the agent then missed its last sync.)"""
    global _stop_asked
    _stop_asked = True


def check_stop() -> None:
    """Raise Stop where the agent may stop, once SIGTERM came."""
    if _stop_asked:
        raise Stop


def follow(agent: Agent, rank: int) -> None:
    """Rank ``rank`` (not 0) of a job of several processes (Azure ML's distribution): start
    this rank's process of each run (the job side runs the function as that rank; rank 0's
    agent keeps the runs' records and syncs them), wait for them, and put each one's output
    (stdout and stderr) beside its run's as ``stdout.rank<k>.log``. SIGTERM (a cancel) stops
    them first."""
    name = f"stdout.rank{rank}.log"
    started: list[tuple[RunSlot, subprocess.Popen[bytes]]] = []  # (the slot, its process)
    try:
        for slot in agent.slots:
            agent.prepare(slot)
            with open(slot.log_dir / name, "ab") as out:
                slot.proc = proc = subprocess.Popen(
                    agent.command(slot), cwd=str(slot.log_dir), stdin=subprocess.DEVNULL,
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                    env=dict(os.environ, PYTHONUNBUFFERED="1"))
            started.append((slot, proc))
            log(f"run {slot.run_id}: rank {rank} started (pid {proc.pid})")
        for _slot, proc in started:
            while proc.poll() is None:
                check_stop()
                time.sleep(EXIT_CHECK_SECONDS)
    except Stop:
        log(f"SIGTERM: stopping rank {rank}'s processes")
        for _slot, proc in started:
            if proc.poll() is None:
                signal_group(proc.pid, signal.SIGTERM)
    finally:
        for slot, proc in started:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(KILL_GRACE_SECONDS)
            agent.store.put_file(f"{slot.spec['log_prefix']}/{name}", slot.log_dir / name)


def run(cloud: str, bucket: str, manifest_key: str, region: str, store_scheme: str = "") -> None:
    """Run this instance's share of the manifest, then end the instance; the bucket is of the
    cloud's own kind unless ``store_scheme`` ("s3", "gs") names another."""
    workdir = Path(os.environ.get(ENV_WORKDIR) or DEFAULT_WORKDIR).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    inputs.share_snapshots(workdir, os.environ.get(ENV_SNAPSHOTS))
    platform = PLATFORMS[cloud](region)
    instance = dict(platform.describe(), started_at=time.time())
    rank = rank_info()[0]
    log(f"instance {instance['instance_id']} in "
        f"{instance.get('region') or instance.get('zone') or 'its cluster'}, "
        f"index {instance['index']}" + (f", rank {rank}" if rank else ""))
    signal.signal(signal.SIGTERM, _stop)
    store_class = STORES[store_scheme] if store_scheme else platform.store_class
    if rank:
        store = store_class.default(bucket, region)
        launch = inputs.manifest(store, manifest_key)
        follow(Agent(store, launch, workdir, platform, instance), rank)
        return
    (workdir / AGENT_PID).write_text(str(os.getpid()))
    agent = None
    try:
        store = store_class.default(bucket, region)
        agent = Agent(store, inputs.manifest(store, manifest_key), workdir, platform, instance)
        platform.tag(instance, agent.tags("running"))
        agent.handle_cancels()
        for slot in agent.slots:
            check_stop()
            if not slot.ended:
                agent.start(slot)
        agent.sync_all(everything=False)
        agent.supervise(float(agent.manifest["sync_interval"]),
                        float(agent.manifest["poll_seconds"]))
    except Stop:
        log("SIGTERM: the machine is going down; syncing a last time")
        if agent is not None and agent.spot_notice is None:
            agent.spot_notice = platform.interruption_notice()
    except Exception as exc:  # noqa: BLE001 - logged; the instance must still go away
        log(f"agent failed: {exc!r}")
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the last sync is not cut short
        if agent is not None:
            agent.stop_all()
            agent.final = True
            agent.sync_all(everything=True, tries=LAST_SYNC_TRIES)
        platform.tag(instance, {TAG_KEY: "done"})
        with contextlib.suppress(OSError):
            (workdir / AGENT_PID).unlink()
        platform.end(instance)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="job.pyz agent", description=__doc__.splitlines()[0])
    parser.add_argument("bucket")
    parser.add_argument("manifest_key")
    parser.add_argument("--cloud", choices=sorted(PLATFORMS), default="aws")
    parser.add_argument("--region", default="")
    parser.add_argument("--store", choices=sorted(STORES), default="",
                        help="the bucket's kind (default: the cloud's own)")
    args = parser.parse_args(argv)
    run(args.cloud, args.bucket, args.manifest_key, args.region, args.store)
    return 0
