"""``ssh``: runs on a remote machine without a scheduler (a GPU workstation), as ``local`` here.

The runs, code snapshots and the pickled function are copied to the host's log_dir (each
snapshot and function once per content), then one packer starts there, detached from the
connection: ``max_parallel`` workers (default: one per GPU with ``use_gpu``, else one per CPU
there), worker i pinned to GPU i. The runs go on when this machine sleeps or goes offline;
tracking catches up when it is back. With MAX_RESTARTS, the packer starts a run whose process
died (or raised, with RESTART_ON_ERROR) again, as ``local`` does.
"""

from __future__ import annotations

import functools
import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from easylaunch.errors import EasyLaunchError, LaunchError, check_count
from easylaunch.modes.base import shell_in
from easylaunch.modes.hosted import NO_QUERY, BackendQuery, HostedMode, completed
from easylaunch.modes.jobscript import StartLine, bundle_pythonpath, start_line, task_line
from easylaunch.runs.bundle import Run
from easylaunch.runs.commands import programs_to_find
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.command import run_variables
from easylaunch_job.records import JOB_PYZ, write_bytes_atomic

PACKS = ".packs"  # <exp>/.packs/<first run id>/: one launch's task files and packer state
GPU_QUERY = ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"]


@dataclass(frozen=True)
class HostFacts:
    """What a launch learned from the host before making anything."""

    root: str  # the launch's folder there, as an absolute path
    gpus: list[str]  # the GPUs runs use there (none without use_gpu)
    cpus: int


@dataclass(frozen=True)
class Pack:
    """One launch on the host: its files here and there, and the packer's command line."""

    facts: HostFacts
    local_dir: Path
    files: dict[str, str]  # name -> text, written into local_dir
    argv: list[str]  # the packer, with paths on the host
    log: str  # the packer's own log there


class SshMode(HostedMode):
    """One packer per launch on a remote machine, reached over SSH."""

    name = "ssh"
    streams_runs = True
    restarts = True  # (the packer starts a run queued again: a crash, a kill, an error)
    options = {"cluster": None, "max_parallel": None}

    def host_name(self) -> str | None:
        return self.opts.get("cluster") or self.settings.SSH_DEFAULT_HOST

    def check(self, request: LaunchRequest) -> HostFacts:
        if not self.host_name():
            raise LaunchError("mode 'ssh' needs a machine: pass cluster='NAME' (a CLUSTERS name "
                              "or user@host) or ssh_host=, or set SSH_DEFAULT_HOST")
        return self.check_packer(request)

    def host_gpus(self, nvidia_smi: dict) -> list[str]:
        """The GPUs of the host, from the answer to :data:`GPU_QUERY` there."""
        return completed(nvidia_smi).stdout.split() if nvidia_smi["rc"] == 0 else []

    def check_packer(self, request: LaunchRequest) -> HostFacts:
        """Whether the host can take the launch: its folder, Python and GPUs."""
        cap = self.opts["max_parallel"]
        if cap is not None:
            check_count("max_parallel", cap)
        root, info, (gpus,) = self.check_host(
            self.transport.log_dir or str(request.log_root), self.transport.python,
            {"op": "run", "argv": GPU_QUERY}, programs=programs_to_find(request))
        found = self.host_gpus(gpus)
        if request.use_gpu and not found:
            raise LaunchError(f"use_gpu=True but nvidia-smi lists no GPU on "
                              f"{self.transport.where}; pass use_gpu=False")
        if request.use_gpu and request.gpu_id is not None and str(request.gpu_id) not in found:
            raise LaunchError(f"gpu_id={request.gpu_id!r} is not one of the GPUs on "
                              f"{self.transport.where} ({', '.join(found)})")
        used = ([str(request.gpu_id)] if request.gpu_id is not None else found) \
            if request.use_gpu else []
        return HostFacts(root, used, info.get("cpus") or 1)

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: HostFacts) -> Pack:
        root = facts.root

        def there(path: Path) -> str:
            return f"{root}/{path.relative_to(request.log_root)}"

        local_dir = runs[0].log_dir.parent / PACKS / runs[0].run_id
        pack = there(local_dir)
        line = start_line(StartLine(python=shlex.quote(self.transport.python), pre_cmds=(),
                                    pythonpath=bundle_pythonpath(runs[0].meta["code_dirs"])))
        pairs = [(there(r.bundle_dir), there(r.log_dir)) for r in runs]
        job_side = runs[0].bundle_dir / JOB_PYZ  # (a link into the blob store, staged with it)
        job_there = there(Path(os.path.normpath(job_side.parent / os.readlink(job_side))))
        workers = self.opts["max_parallel"] or len(facts.gpus) or facts.cpus
        argv = [self.transport.python, job_there, "pack",
                f"{pack}/tasks.txt", "--state-dir", f"{pack}/task-state", "--workers",
                str(min(workers, len(runs))), "--runs", f"{pack}/runs.tsv", "--warm"]
        if facts.gpus:
            argv += ["--gpus", ",".join(facts.gpus)]
        return Pack(facts, local_dir, {
            "tasks.txt": "".join(task_line(b, lg, line) + "\n" for b, lg in pairs),
            "runs.tsv": "".join(f"{b}\t{lg}\n" for b, lg in pairs)}, argv,
            f"{pack}/packer.log")

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> Preview:
        pack = os.path.dirname(prepared.log)
        return Preview(self.name, len(runs), self.transport.where,
                       {f"{pack}/{name}": text for name, text in prepared.files.items()},
                       [f"{shlex.join(prepared.argv)} >> {shlex.quote(prepared.log)} 2>&1 "
                        "(detached)"],
                       {"runs at once": prepared.argv[prepared.argv.index("--workers") + 1],
                        "GPUs": ", ".join(prepared.facts.gpus) or "none"})

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: Pack) -> list[RunRecord]:
        prepared.local_dir.mkdir(parents=True)
        for name, text in prepared.files.items():
            write_bytes_atomic(str(prepared.local_dir / name), text.encode())
        (started,) = self.stage(
            request, runs, prepared.facts.root, [{"op": "detach", "argv": prepared.argv,
                                        "log": prepared.log}],
            [], [str(prepared.local_dir.relative_to(request.log_root))])
        state_dir = str(Path(prepared.log).parent / "task-state")
        for index, run in enumerate(runs):
            run.record_backend(
                job_log_dir=f"{prepared.facts.root}/{run.log_dir.relative_to(request.log_root)}",
                packer_pid=started["pid"], packer_started=started["started"],
                packer_log=prepared.log, state_dir=state_dir, task_index=index,
                gpus=prepared.facts.gpus)
        return [RunRecord.of_run(run) for run in runs]

    # -- tracking -------------------------------------------------------------------------------

    def _packers(self, jobs: list[RunRecord]) -> list[tuple]:
        backends = [job.launch_info["backend"] for job in jobs]
        return sorted({(b["packer_pid"], b["packer_started"]) for b in backends
                       if "packer_pid" in b})

    def backend_query(self, jobs: list[RunRecord]) -> BackendQuery:
        packers = self._packers(jobs)
        if not packers:
            return NO_QUERY
        return BackendQuery([{"op": "alive", "pids": [list(p) for p in packers]}],
                            functools.partial(self._settle, jobs, packers))

    def _settle(self, jobs: list[RunRecord], packers: list[tuple], answers: list[dict],
                ended_there: set[str]) -> None:
        """A run whose packer is gone without the run recording an outcome failed (the host
        rebooted, or the packer was killed)."""
        alive = dict(zip(packers, answers[0]["alive"], strict=True))
        for job in jobs:
            backend = job.launch_info["backend"]
            if job.id in ended_there or alive.get(
                    (backend.get("packer_pid"), backend.get("packer_started")), True):
                continue
            self.end_orphan(job, f"the packer on {self.transport.where} ended before this run "
                                 "recorded an outcome (was the machine restarted?); see "
                                 f"{backend['packer_log']} there")

    def end_orphan(self, job: RunRecord, why: str) -> None:
        """A run still open whose packer (or its allocation) is gone: cancelled where a
        cancel was asked, else failed saying ``why``."""
        if self.read_record(job).get("state") not in ("queued", "running"):
            return
        if job.info().get("cancel_requested"):
            job.record_end("cancelled", "cancelled")
        else:
            job.record_end("failed", why)

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        """bash in the run's folder on the host."""
        folder = self._job_log_dir(job)
        return self.transport.terminal_argv(
            shell_in(folder, run_variables(job.id, folder))), None

    def cancel(self, job: RunRecord) -> None:
        failure = self.cancel_many([job]).get(job.id)
        if failure is not None:
            raise failure

    def cancel_many(self, jobs: list[RunRecord]) -> dict[str, EasyLaunchError]:
        """The packer's tasks, in one round trip."""
        return self.cancel_packed([(job, job.launch_info["backend"]["state_dir"],
                                    job.launch_info["backend"]["task_index"]) for job in jobs])
