"""``sss`` and ``htp``: a self-contained batch folder to copy to a cluster and submit there; how
the runs are packed into jobs is the mode's ``packing`` part (:mod:`.sss`: a job script per
run; :mod:`.htp`: a task file in one allocation).

The folder holds the run bundles and their code snapshots (so editing code locally after
launching cannot break queued jobs), the job files of the mode, and ``submit.sh``, which records
the Slurm job ids in ``job_ids.txt``. Runs write their logs to SSS_LOG_DIR on the cluster; where
that folder is visible from here (a shared file system), jobs are tracked from here too.

Consecutive launches of one process with the same mode, experiment, resources and settings
grow one batch, as doodad's did: a loop of ``run_experiment`` calls ends as one ``run_sweep``
would (one task file and one allocation for htp). Each launch rewrites the batch's files whole,
so the folder is complete after every call (:class:`OpenBatches` holds what a later launch
joins, for the life of the process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from easylaunch.bundle import BLOB_STORE, Run, blob_name
from easylaunch.containers import SSS_SINGULARITY, SingularityImage
from easylaunch.errors import LaunchError
from easylaunch.hosts import staging
from easylaunch.hosts.staging import Upload
from easylaunch.jobpack import job_archive
from easylaunch.jobs import Job
from easylaunch.modes.scheduled.tracking import ClusterFacts, ScheduledMode
from easylaunch.preview import Preview, resource_fields
from easylaunch.request import LaunchRequest
from easylaunch.settings import Mount
from easylaunch_job.records import BUNDLE_DIR, JOB_PYZ, SNAPSHOT_STORE, write_bytes_atomic

JOB_IDS = "job_ids.txt"
SUBMIT = "submit.sh"



@dataclass
class OpenBatches:
    """This process's batches copied by hand: what a later launch of the same kind joins
    (by :meth:`BatchMode.batch_key`: its name and runs), and the lines each batch wrote to each
    seed script (by script, then batch name). A new process starts afresh."""

    runs: dict[tuple, tuple[str, list[Run]]] = field(default_factory=dict)
    seed_lines: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def earlier(self, key: tuple) -> tuple[str | None, list[Run]]:
        """The open batch of this kind: its name and runs (None, []: none yet)."""
        return self.runs.get(key, (None, []))

    def seed_script(self, seed: str, batch: str, lines: list[str]) -> str:
        """The seed script's text with ``batch``'s lines (now ``lines``) among the others."""
        batches = self.seed_lines.setdefault(seed, {})
        batches[batch] = lines
        return "".join(line + "\n" for lines in batches.values() for line in lines)


OPEN_BATCHES = OpenBatches()  # this process's


class Packing(Protocol):
    """How a batch mode packs runs into jobs (a module: :mod:`.sss`, :mod:`.htp`)."""

    def check(self, mode: BatchMode, request: LaunchRequest) -> None:
        """Refuse what this packing cannot run."""

    def runs_outside(self, mode: BatchMode, request: LaunchRequest) -> bool:
        """Whether runs start on the cluster's own Python (not inside an image)."""

    def plan(self, mode: BatchMode, request: LaunchRequest, runs: list[Run],
             layout: Layout) -> BatchPlan:
        """The job files, seed lines and note for this batch."""

    def backend(self, mode: BatchMode, index: int) -> dict:
        """What launch.json records about run ``index``, besides the batch's folders."""

    def cancel(self, mode: BatchMode, job: Job) -> bool:
        """Stop the run as this packing must (True), or leave it to the scheduler (False)."""


@dataclass(frozen=True)
class Layout:
    """Where a batch lives here and on the cluster, and where each run's files go there."""

    name: str
    local_dir: Path
    cluster_dir: str
    bundles: list[str]  # cluster path of each run's bundle
    log_dirs: list[str]  # cluster path of each run's log folder


@dataclass(frozen=True)
class BatchPlan:
    """Everything a batch mode writes: files (relative path -> text), seed lines, the note;
    what the cluster said (None: the batch is copied by hand)."""

    layout: Layout
    files: dict[str, str]
    seed_lines: list[str]
    note: str
    facts: ClusterFacts | None = None


def submit_script(python: str, entries: list[tuple[list[str], str]], first: str = "") -> str:
    """``submit.sh``: each entry's submit command, through the job side's ``submit`` (in the
    batch's blob store), which reads the job id and records ``<run id> <job id>`` lines in
    job_ids.txt.

    ``entries`` are (run ids, submit command as shell text) pairs; ``python`` (a shell word)
    is the cluster's; ``first`` what to do before running it, if anything.
    """
    job_side = f"{BLOB_STORE}/{blob_name(JOB_PYZ, job_archive())}"
    lines = ["#!/bin/bash",
             "# Generated by easylaunch. Run on the cluster: bash submit.sh" + first,
             "set -euo pipefail",
             'cd "$(dirname "$0")"',
             f'submit() {{ {python} {job_side} submit {JOB_IDS} "$@"; }}']
    lines += [f"submit {shlex.quote(','.join(ids))} {command}" for ids, command in entries]
    return "\n".join(lines) + "\n"


class BatchMode(ScheduledMode):
    """Writes a batch folder, submitted over SSH when a cluster is set, else for the user to
    copy to a cluster and submit. Runs start in SSS_CPU_IMAGE / SSS_GPU_IMAGE where set."""

    runs_python = "python3"  # the cluster's, when the batch is copied by hand
    packing: Packing
    container = SSS_SINGULARITY
    batches = OPEN_BATCHES

    def check(self, request: LaunchRequest) -> ClusterFacts | None:
        self.scheduler.check(self.settings, self.resources(request))
        value = self.settings.SSS_LOG_DIR
        if not value or not os.path.isabs(value):
            raise LaunchError(f"mode {self.name!r} needs SSS_LOG_DIR: the absolute path on the "
                              f"cluster for logs (now {value!r}); set it in your settings")
        value = self.settings.SLURM_DIRECTORY_FOR_JOB_SCRIPT
        if value is not None and not os.path.isabs(value):
            raise LaunchError(f"SLURM_DIRECTORY_FOR_JOB_SCRIPT must be an absolute path on the "
                              f"cluster, got {value!r}; or None for SSS_LOG_DIR/.batches")
        self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        self.settings.data_mounts("SSS_NON_CODE_DIRS_TO_MOUNT")
        _check_writable_file("SSS_SCRIPT_PATH", self.settings.SSS_SCRIPT_PATH)
        self.packing.check(self, request)
        if self.grows_batches():  # copied by hand
            self.scheduler.check_folder(self.cluster_batches())
            return None
        # submitted over SSH: ask the cluster first (the folder checked there too)
        return self.preflight(self.cluster_batches(),
                              runs_there=self.packing.runs_outside(self, request))

    def cluster_batches(self) -> str:
        """The cluster folder batch folders go to: SLURM_DIRECTORY_FOR_JOB_SCRIPT, else a
        folder in SSS_LOG_DIR (doodad's configs have no such key)."""
        return (self.settings.SLURM_DIRECTORY_FOR_JOB_SCRIPT
                or f"{self.settings.SSS_LOG_DIR.rstrip('/')}/.batches").rstrip("/")

    def launch_info(self, request: LaunchRequest) -> dict[str, str]:
        return {self.container.launch_info_key: str(self.image(request))}

    def image(self, request: LaunchRequest) -> str | None:
        """The Singularity image for this request (None: run without a container)."""
        return self.container.image(self.settings, request.use_gpu)

    def batch_key(self, request: LaunchRequest, runs: list[Run]) -> tuple:
        """What launches must share to grow one batch."""
        return (self.name, str(request.log_root), request.exp_name, request.use_gpu,
                request.slurm_config_name, json.dumps(self.opts, sort_keys=True, default=repr),
                json.dumps(dict(self.settings), sort_keys=True, default=repr),
                tuple(s["digest"] for s in runs[0].launch["code_snapshots"]))

    def layout(self, request: LaunchRequest, runs: list[Run], name: str | None = None) -> Layout:
        """Batch and run paths here and on the cluster (``name``: the batch's, once made)."""
        name = name or f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{request.exp_name}_{runs[0].run_id}"
        cluster_dir = f"{self.cluster_batches()}/{name}"
        log_root = self.settings.SSS_LOG_DIR.rstrip("/")
        return Layout(
            name=name, local_dir=request.log_root / ".batches" / name, cluster_dir=cluster_dir,
            bundles=[f"{cluster_dir}/{r.exp_name}/{r.log_dir.name}/{BUNDLE_DIR}" for r in runs],
            log_dirs=[f"{log_root}/{r.exp_name}/{r.log_dir.name}" for r in runs])

    def in_image(self, request: LaunchRequest, layout: Layout, runs: list[Run]
                 ) -> SingularityImage:
        """The image and binds: batch and log folders, code snapshots, the SSS_ folders."""
        snapshots = [s["digest"] for s in runs[0].launch["code_snapshots"]]
        on_cluster = self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        taken = {m.mount_point for m in on_cluster}  # the cluster copy wins, as in doodad
        code = [Mount(f"{layout.cluster_dir}/{SNAPSHOT_STORE}/{digest}", m.mount_point)
                for digest, m in zip(snapshots, self.settings.code_mounts(), strict=True)
                if m.mount_point not in taken]
        mounts = [Mount(layout.cluster_dir, layout.cluster_dir),
                  Mount(self.settings.SSS_LOG_DIR, self.settings.SSS_LOG_DIR), *code,
                  *on_cluster, *self.settings.data_mounts("SSS_NON_CODE_DIRS_TO_MOUNT")]
        return self.container.in_job(self.settings, request.use_gpu,
                                     [(m.local_dir, m.mount_point) for m in mounts])

    def container_pythonpath(self) -> tuple[str, ...]:
        """Mount points of the code folders inside the container."""
        mounts = self.settings.code_mounts() + self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        return tuple(dict.fromkeys(shlex.quote(m.mount_point) for m in mounts))

    def note(self, layout: Layout, then: str) -> str:
        """The copy command and the command to run on the cluster."""
        host = self.settings.SSS_CLUSTER_HOST
        copy = shlex.join(["rsync", "-a", f"{layout.local_dir}/",
                           f"{host}:{layout.cluster_dir}/"])
        return (f"easylaunch {self.name}: batch written to {layout.local_dir}\n"
                f"  copy it:          {copy}\n"
                f"  then, on {host}: {then}\n")

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: ClusterFacts | None
                ) -> BatchPlan:
        """The plan of this process's open batch of this kind with ``runs`` added."""
        name, earlier = self.batches.earlier(self.batch_key(request, runs)) \
            if self.grows_batches() else (None, [])
        every = earlier + runs
        plan = self.packing.plan(self, request, every, self.layout(request, every, name))
        return dataclasses.replace(plan, facts=facts)

    def backend(self, layout: Layout, index: int) -> dict:
        """What launch.json records about run ``index`` of the batch."""
        return {"batch_dir": str(layout.local_dir), "cluster_batch_dir": layout.cluster_dir,
                "job_log_dir": layout.log_dirs[index], **self.packing.backend(self, index)}

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: BatchPlan) -> Preview:
        layout = prepared.layout
        by_hand = self.grows_batches()
        return Preview(
            self.name, len(runs), self.transport.where,
            {str(layout.local_dir / rel): text for rel, text in prepared.files.items()},
            [] if by_hand else [f"bash {shlex.quote(f'{layout.cluster_dir}/{SUBMIT}')}"],
            resource_fields(self.resources(request)),
            [prepared.note.rstrip("\n")] if by_hand else [])

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: BatchPlan) -> list[Job]:
        layout = prepared.layout
        key = self.batch_key(request, runs)
        earlier = self.batches.earlier(key)[1] if self.grows_batches() else []
        _stage(runs, request.log_root, layout.local_dir)
        for relpath, text in prepared.files.items():
            path = layout.local_dir / relpath
            write_bytes_atomic(str(path), text.encode())
            if path.suffix in (".sh", ".sbatch"):
                path.chmod(0o755)
        seed = self.settings.SSS_SCRIPT_PATH
        if seed:
            write_bytes_atomic(seed, self.batches.seed_script(
                seed, layout.name, prepared.seed_lines).encode())
        job_ids = {} if prepared.facts is None else self._submit_there(layout, prepared.facts)
        for index, run in enumerate(runs, start=len(earlier)):
            ids = {self.scheduler.JOB_ID_KEY: job_ids[run.run_id]} if job_ids else {}
            run.record_backend(**self.backend(layout, index), **ids)
        if job_ids:
            print(f"easylaunch {self.name}: {len(runs)} run(s) submitted on "
                  f"{self.transport.where} from {layout.cluster_dir}", file=sys.stderr)
        elif earlier:
            print(f"easylaunch {self.name}: {len(runs)} run(s) added to the batch in "
                  f"{layout.local_dir} ({len(earlier) + len(runs)} in all); copy it once the "
                  "script has launched them all", file=sys.stderr)
        else:
            print(prepared.note, file=sys.stderr, end="")
        if self.grows_batches():
            self.batches.runs[key] = (layout.name, earlier + runs)
        return [Job(run.run_id, run.exp_name, run.log_dir, self) for run in runs]

    def grows_batches(self) -> bool:
        """A batch copied by hand grows with this process's later launches; one submitted
        over SSH is complete (and submitted) at once."""
        return self.transport.is_local

    def _submit_there(self, layout: Layout, facts: ClusterFacts) -> dict[str, str]:
        """Copy the batch folder to the cluster (blobs and snapshots once per content), run
        its submit.sh there; return each run's Slurm job id. A submit.sh that fails part way
        has the jobs it did submit cancelled: all or nothing."""
        local = layout.local_dir
        shared = [f"{store}/{entry.name}" for store in (BLOB_STORE, SNAPSHOT_STORE)
                  if (local / store).is_dir() for entry in os.scandir(local / store)]
        plain = [entry.name for entry in os.scandir(local)
                 if entry.name not in (BLOB_STORE, SNAPSHOT_STORE)]
        ids_file = f"{layout.cluster_dir}/{JOB_IDS}"
        up = Upload(local, layout.cluster_dir, facts.root, shared, plain)
        out, ids = staging.upload(self.transport, up, then=[
            {"op": "run", "argv": ["bash", f"{layout.cluster_dir}/{SUBMIT}"]},
            {"op": "read", "paths": [ids_file]}]).answers
        record = ids["files"][ids_file]
        pairs = [line.split() for line in (record["text"] if record else "").splitlines()]
        job_ids = {pair[0]: pair[1] for pair in pairs if len(pair) == 2}
        if out["rc"] != 0:
            self.transport.probe([{"op": "run", "argv": self.scheduler.cancel_command(j)}
                                  for j in sorted(set(job_ids.values()))])
            raise LaunchError(f"submitting {layout.cluster_dir} on {self.transport.where} "
                              f"failed (sbatch refused a job?): {out['err'].strip()[-800:]}")
        return job_ids

    def fetch(self, job: Job) -> str:
        there = self._job_log_dir(job)
        if self.transport.is_local and not Path(there).is_dir():
            copy = shlex.join(["rsync", "-a", f"{self.settings.SSS_CLUSTER_HOST}:{there}/",
                               f"{job.log_dir}/"])
            return f"{there} is on the cluster; bring it here with:\n  {copy}"
        return super().fetch(job)

    def cancel(self, job: Job) -> None:
        if not self.packing.cancel(self, job):
            super().cancel(job)

    def submitted_job_id(self, job: Job) -> str | None:
        """The id recorded at submission, else the one the user's own run of submit.sh wrote
        (read where the batch folder is visible from here)."""
        recorded = super().submitted_job_id(job)
        if recorded:
            return recorded
        backend = job.launch_info["backend"]
        ids = Path(backend.get("cluster_batch_dir", "/nonexistent")) / JOB_IDS
        try:
            lines = ids.read_text().splitlines()
        except OSError:
            return None  # the batch folder is not visible from here
        found = [line.split()[1] for line in lines if line.split()[:1] == [job.id]]
        return found[-1] if found else None


def _check_writable_file(key: str, path: str | None) -> None:
    """Refuse a file setting this launch could not write (a folder, a missing or read-only
    folder, a read-only file)."""
    if not path:
        return
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        problem = "is a folder"
    elif not os.path.isdir(folder):
        problem = f"is in {folder}, which does not exist"
    elif not os.access(path if os.path.exists(path) else folder, os.W_OK):
        problem = "cannot be written by you"
    else:
        return
    raise LaunchError(f"{key}={path!r} {problem}; point it at a file you can write, or set it "
                      "to None to write only the batch folder's submit.sh")


def _stage(runs: list[Run], log_root: Path, batch_dir: Path) -> None:
    """Copy the run bundles, and once each the blobs and snapshots they link to, into the
    batch folder (laid out as the log root is, so the bundles' relative links resolve)."""
    for run in runs:
        dest = batch_dir / run.exp_name / run.log_dir.name / BUNDLE_DIR
        shutil.copytree(run.bundle_dir, dest, symlinks=True)
    blobs = {os.path.basename(os.readlink(link)) for run in runs
             for link in run.bundle_dir.iterdir() if link.is_symlink() and link.is_file()}
    for blob in blobs:
        dest = batch_dir / BLOB_STORE / blob
        if not dest.exists():
            dest.parent.mkdir(exist_ok=True)
            shutil.copy2(log_root / BLOB_STORE / blob, dest)
    for digest in {s["digest"] for run in runs for s in run.launch["code_snapshots"]}:
        dest = batch_dir / SNAPSHOT_STORE / digest
        if not dest.exists():
            shutil.copytree(log_root / SNAPSHOT_STORE / digest, dest)
