"""``local`` with ``pool="NAME"``: runs added to a warm pool (:mod:`easylaunch.pools`).

No process starts at launch: the runs' lines are appended to the pool's task file and the
pool's packer is woken. Its warm workers fork a child per run. Tracking, logs and cancel are
those of detached local runs (the pool's packer is their packer)."""

from __future__ import annotations

from typing import Any

from easylaunch.errors import LaunchError
from easylaunch.modes.local.detached import DetachedLocalMode
from easylaunch.modes.local.pools import live_pool
from easylaunch.modes.ssh import HostFacts, Pack
from easylaunch.runs.bundle import Run
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job import pool as layout


class PooledMode(DetachedLocalMode):
    """``local`` runs that a running pool takes."""

    def check(self, request: LaunchRequest) -> HostFacts:
        """The pool runs, and the launch asks nothing it cannot give (before any run is
        made)."""
        name = self.opts["pool"]
        if request.use_gpu:
            raise LaunchError(f"pool {name!r}: pools give their runs no GPUs yet; launch GPU "
                              "runs without pool=")
        if self.opts.get("max_parallel") is not None:
            raise LaunchError(f"pool {name!r} runs as many runs at once as it has workers "
                              "(pool start --workers); leave max_parallel out")
        self.folder = live_pool(self.settings, name)
        return HostFacts(str(request.log_root), [], 1)

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> Preview:
        return Preview(self.name, len(runs), self.transport.where,
                       {str(self.folder / layout.RUNS): prepared.files["runs.tsv"]},
                       [f"(added to pool {self.opts['pool']!r}: {self.folder})"],
                       {"pool": self.opts["pool"]})

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> list[RunRecord]:
        (added,) = self.stage(request, runs, prepared.facts.root, [{
            "op": "pool_add", "folder": str(self.folder),
            "tasks": prepared.files["tasks.txt"].splitlines(),
            "runs": prepared.files["runs.tsv"].splitlines()}], [], [])
        meta: dict[str, Any] = added["meta"]
        for index, run in enumerate(runs, start=added["first"]):
            run.record_backend(
                job_log_dir=str(run.log_dir), packer_pid=meta["pid"],
                packer_started=meta["started"], packer_log=str(self.folder / layout.LOG),
                state_dir=str(self.folder / layout.TASK_STATE), task_index=index, gpus=[],
                pool=str(self.folder))
        return [RunRecord.of_run(run) for run in runs]

    def launched(self, runs: list[Run]) -> str:
        return f"added to pool {self.opts['pool']!r}"

