"""``local`` with ``pool="NAME"``: runs added to a warm pool (:mod:`.pools`).

No process starts at launch: the runs' lines are appended to the pool's task file and the
pool's packer is woken. Its warm workers fork a child per run. Tracking, logs and cancel are
those of detached local runs (the pool's packer is their packer). A run of a pool on Slurm
follows the pool into the allocation it went on in (at its time limit). Where a pool's
allocation (Slurm's or PBS's) ended and the pool did not go on, the run fails, saying so."""

from __future__ import annotations

import functools
from typing import Any

from easylaunch.errors import LaunchError
from easylaunch.modes.hosted import BackendQuery, completed
from easylaunch.modes.hosts.transport import checked
from easylaunch.modes.local import pool_jobs
from easylaunch.modes.local.detached import DetachedLocalMode
from easylaunch.modes.local.pools import PoolState, live_pool, pools_root
from easylaunch.modes.ssh import HostFacts, Pack
from easylaunch.runs.bundle import Run
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job import pool as layout

TYPE_CHECKING = False  # (as typing's)
if TYPE_CHECKING:
    from easylaunch_job.host_ops import Op

LIVE = ("queued", "running", "unknown")  # an allocation's states in which its runs go on


class PooledMode(DetachedLocalMode):
    """``local`` runs that a running pool takes (with ``cluster``: a pool on that machine,
    reached over SSH; the runs are copied there)."""

    pool: PoolState  # (the pool, once :meth:`check` found it running)

    def host_name(self) -> str | None:
        return self.opts.get("cluster")

    def check(self, request: LaunchRequest) -> HostFacts:
        """The pool runs, and the launch asks nothing it cannot give (before any run is
        made): one round trip."""
        name = self.opts["pool"]
        if self.opts.get("max_parallel") is not None:
            raise LaunchError(f"pool {name!r} runs as many runs at once as it has workers "
                              "(pool start --workers); leave max_parallel out")
        transport = self.transport  # (one transport: the runs' and the pool's)
        self.pool = live_pool(transport, pools_root(self.settings, transport), name)
        if request.use_gpu and not self.pool.gpus:
            raise LaunchError(f"use_gpu=True, but pool {name!r} holds no GPUs: start it with "
                              "--gpus N")
        there = str(request.log_root)
        if not transport.is_local:  # (the runs go to the cluster's log_dir)
            (made,) = checked(transport.run_ops([
                {"op": "prepare_dir", "path": transport.log_dir or there}]), transport.where)
            there = made["path"]
        return HostFacts(there, [], 1)

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> Preview:
        return Preview(self.name, len(runs), self.transport.where,
                       {f"{self.pool.folder}/{layout.RUNS}": prepared.files["runs.tsv"]},
                       [f"(these lines appended to pool {self.opts['pool']!r}'s runs.tsv, and "
                        "its workers woken: no process starts)"],
                       {"pool": self.opts["pool"]})

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> list[RunRecord]:
        folder = self.pool.folder
        (added,) = self.stage(request, runs, prepared.facts.root, [{
            "op": "pool_add", "folder": folder,
            "tasks": prepared.files["tasks.txt"].splitlines(),
            "runs": prepared.files["runs.tsv"].splitlines()}], [], [])
        meta: dict[str, Any] = added["meta"]
        packer = {"pool_job": meta["job_id"], "pool_scheduler": layout.allocation(meta).name} \
            if "job_id" in meta else {
            "packer_pid": meta["pid"], "packer_started": meta["started"]}
        for index, run in enumerate(runs, start=added["first"]):
            run.record_backend(
                job_log_dir=f"{prepared.facts.root}/{run.log_dir.relative_to(request.log_root)}",
                packer_log=f"{folder}/{layout.LOG}", state_dir=f"{folder}/{layout.TASK_STATE}",
                task_index=index, gpus=[], pool=folder, **packer)
        return [RunRecord.of_run(run) for run in runs]

    def backend_query(self, jobs: list[RunRecord]) -> BackendQuery:
        """That of detached runs; for runs of a pool on a scheduler, its status commands for
        their allocations, in the same round trip."""
        local = super().backend_query(jobs)
        held: dict[str, set[str]] = {}  # scheduler -> the allocations asked about
        for job in jobs:
            if (allocation := _allocation(job)) is not None:
                held.setdefault(_scheduler_of(job), set()).add(allocation)
        if not held:
            return local
        asks = {name: (sorted(ids), pool_jobs.POOL_SCHEDULERS[name].status_commands(
            sorted(ids), [])) for name, ids in held.items()}
        ops: list[Op] = [{"op": "run", "argv": list(argv)} for _, ask in asks.values()
                         for argv in ask]
        return BackendQuery([*local.ops, *ops],
                            functools.partial(self._settle_pools, jobs, asks, local))

    def _settle_pools(self, jobs: list[RunRecord],
                      asks: dict[str, tuple[list[str], list[list[str]]]], local: BackendQuery,
                      answers: list[dict], ended_there: set[str]) -> None:
        local.settle(answers[:len(local.ops)], ended_there)
        said, at = {}, len(local.ops)
        for name, (ids, ask) in asks.items():  # (each scheduler's answers, in order asked)
            at += len(ask)
            said[name] = pool_jobs.POOL_SCHEDULERS[name].read_states(
                ids, [completed(a) for a in answers[at - len(ask):at]], [])
        for job in jobs:
            name, allocation = _scheduler_of(job), _allocation(job)  # (read again: the
            state = said.get(name, {}).get(allocation or "", "unknown")  # records were
            if allocation is None or job.id in ended_there or state in LIVE:  # just brought)
                continue  # (not in a scheduler's pool, alive, gone on since, or not known)
            pool, scheduler = self.opts["pool"], pool_jobs.POOL_SCHEDULERS[name]
            self.end_orphan(job, f"pool {pool!r}'s {scheduler.NAME} allocation {allocation} "
                                 "ended before this run recorded an outcome (its time limit?); "
                                 f"start the pool again (easylaunch pool start {pool} --on "
                                 f"{name}), then run it again: easylaunch resubmit {job.id}")

    def launched(self, runs: list[Run]) -> str:
        return f"added to pool {self.opts['pool']!r}"


def _allocation(job: RunRecord) -> str | None:
    """The allocation of the pool a run is in: the one its pool went on in (at a Slurm time
    limit), else the one it was added to."""
    added_to = job.launch_info["backend"].get("pool_job")  # (a pool on this machine: None,
    return added_to and (job.info().get("next_job_id") or added_to)  # its record unread)


def _scheduler_of(job: RunRecord) -> str:
    """The scheduler of the pool a run was added to (runs added before PBS pools: Slurm)."""
    return job.launch_info["backend"].get("pool_scheduler") or "slurm"
