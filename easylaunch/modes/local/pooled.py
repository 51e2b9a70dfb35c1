"""``local`` with ``pool="NAME"``: runs added to a warm pool (:mod:`.pools`).

No process starts at launch: the runs' lines are appended to the pool's task file and the
pool's packer is woken. Its warm workers fork a child per run. Tracking, logs and cancel are
those of detached local runs (the pool's packer is their packer). A run of a pool on Slurm
follows the pool into the allocation it went on in (at its time limit); where the allocation
ended and the pool did not go on, the run fails, saying so."""

from __future__ import annotations

import functools
from typing import Any

from easylaunch.errors import LaunchError
from easylaunch.modes.hosted import BackendQuery, completed
from easylaunch.modes.hosts.transport import checked
from easylaunch.modes.local.detached import DetachedLocalMode
from easylaunch.modes.local.pools import PoolState, live_pool, pools_root
from easylaunch.modes.ssh import HostFacts, Pack
from easylaunch.runs.bundle import Run
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job import pool as layout


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
                              "--gpus N (on Slurm, or in an allocation you hold)")
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
        packer = {"pool_job": meta["job_id"]} if "job_id" in meta else {
            "packer_pid": meta["pid"], "packer_started": meta["started"]}
        for index, run in enumerate(runs, start=added["first"]):
            run.record_backend(
                job_log_dir=f"{prepared.facts.root}/{run.log_dir.relative_to(request.log_root)}",
                packer_log=f"{folder}/{layout.LOG}", state_dir=f"{folder}/{layout.TASK_STATE}",
                task_index=index, gpus=[], pool=folder, **packer)
        return [RunRecord.of_run(run) for run in runs]

    def backend_query(self, jobs: list[RunRecord]) -> BackendQuery:
        """That of detached runs; for runs of a pool on Slurm, one squeue call for their
        allocations."""
        local = super().backend_query(jobs)
        held = sorted({a for j in jobs if (a := _allocation(j))})
        if not held:
            return local
        return BackendQuery([*local.ops, {"op": "run", "argv": [
            "squeue", "-h", "-o", "%A", "-j", ",".join(held)]}],
            functools.partial(self._settle_pools, jobs, held, local))

    def _settle_pools(self, jobs: list[RunRecord], held: list[str], local: BackendQuery,
                      answers: list[dict], ended_there: set[str]) -> None:
        local.settle(answers[:-1], ended_there)
        said = answers[-1]
        if said.get("rc") != 0 and "Invalid job id" not in said.get("err", ""):
            return  # (squeue did not answer: the next look asks again)
        alive = set(completed(said).stdout.split()) if said.get("rc") == 0 else set()
        for job in jobs:
            allocation = _allocation(job)  # (read again: the records were just brought)
            if allocation not in held or allocation in alive or job.id in ended_there:
                continue  # (not in a Slurm pool, alive, or gone on since asked)
            name = self.opts["pool"]
            self.end_orphan(job, f"pool {name!r}'s Slurm allocation {allocation} ended before "
                                 "this run recorded an outcome (its time limit?); start the "
                                 f"pool again (easylaunch pool start {name} --on slurm), then "
                                 f"run it again: easylaunch resubmit {job.id}")

    def launched(self, runs: list[Run]) -> str:
        return f"added to pool {self.opts['pool']!r}"


def _allocation(job: RunRecord) -> str | None:
    """The Slurm allocation of the pool a run is in: the one its pool went on in (at its time
    limit), else the one it was added to."""
    added_to = job.launch_info["backend"].get("pool_job")  # (a pool on this machine: None,
    return added_to and (job.info().get("next_job_id") or added_to)  # its record unread)
