"""``sss`` and ``htp``: a self-contained batch folder, submitted where the scheduler answers
(this machine, a login node; or a cluster over SSH), else written to copy to a cluster and
submit there; how the runs are packed into jobs is the mode's ``packing`` part (:mod:`.sss`: a
job script per run; :mod:`.htp`: a task file in one allocation).

The folder holds the run bundles and their code snapshots (so editing code locally after
launching cannot break queued jobs), the job files of the mode, and ``submit.sh``, which records
the job ids in ``job_ids.txt``. Runs write their logs to SSS_LOG_DIR on the cluster (default:
the launch's log folder on a login node, the cluster's log_dir over SSH); where that folder is
visible from here (a shared file system), jobs are tracked from here too. A run of a batch
nobody has submitted says so (``ls``, ``status``), and a wait for it raises at once.

Consecutive launches of one process with the same mode, experiment, resources and settings
grow one batch, as doodad's did: a loop of ``run_experiment`` calls ends as one ``run_sweep``
would (one task file and one allocation for htp), where the batch is copied by hand. Each
launch rewrites the batch's files whole, so the folder is complete after every call (the
process's :data:`~easylaunch.runs.process.SESSION` holds what a later launch joins).
"""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import shlex
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from easylaunch.errors import EasyLaunchError, LaunchError
from easylaunch.modes.containers import SSS_SINGULARITY, SingularityImage
from easylaunch.modes.hosts import staging
from easylaunch.modes.hosts.staging import Upload
from easylaunch.modes.hosts.transport import checked
from easylaunch.modes.scheduled.by_hand import TO_SUBMIT, ByHand, check_writable_file
from easylaunch.modes.scheduled.tracking import ClusterFacts, ScheduledMode
from easylaunch.runs.bundle import BLOB_STORE, Run, blob_name, store_blob
from easylaunch.runs.jobpack import job_archive
from easylaunch.runs.preview import Preview, resource_fields
from easylaunch.runs.process import SESSION
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch.settings import Mount
from easylaunch_job.records import BUNDLE_DIR, JOB_PYZ, SNAPSHOT_STORE, write_bytes_atomic
from easylaunch_job.schedulers import JobSide

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Op

JOB_IDS = "job_ids.txt"
SUBMIT = "submit.sh"


class Packing(Protocol):
    """How a batch mode packs runs into jobs (a module: :mod:`.sss`, :mod:`.htp`)."""

    def check(self, mode: BatchMode, request: LaunchRequest) -> None:
        """Refuse what this packing cannot run."""

    def runs_outside(self, mode: BatchMode, request: LaunchRequest) -> bool:
        """Whether runs start on the cluster's own Python (not inside an image)."""

    def plan(self, mode: BatchMode, request: LaunchRequest, runs: list[Run],
             layout: Layout) -> BatchPlan:
        """The job files, seed lines and what to run on the cluster for this batch."""

    def backend(self, mode: BatchMode, index: int) -> dict:
        """What launch.json records about run ``index``, besides the batch's folders."""

    def only_by_hand(self, mode: BatchMode) -> bool:
        """Whether this packing's batch is copied by hand unless ``submit=True`` says
        otherwise (BRC's ht_helper reads its task file where the user puts it)."""

    def cancel(self, mode: BatchMode, jobs: list[RunRecord]
               ) -> tuple[dict[str, EasyLaunchError], list[RunRecord]]:
        """Stop the runs as this packing must: what kept each one from being stopped, and the
        runs it leaves to the scheduler."""


@dataclass(frozen=True)
class Layout:
    """Where a batch lives here and on the cluster, and where each run's files go there."""

    name: str
    local_dir: Path
    cluster_dir: str
    bundles: list[str]  # cluster path of each run's bundle
    log_dirs: list[str]  # cluster path of each run's log folder
    log_root: str  # the cluster folder of the runs' log folders


@dataclass(frozen=True)
class BatchPlan:
    """Everything a batch mode writes: files (relative path -> text), seed lines, what to run
    on the cluster to submit it (shell text); what the cluster said (None: the batch is
    copied by hand)."""

    layout: Layout
    files: dict[str, str]
    seed_lines: list[str]
    then: str
    facts: ClusterFacts | None = None


def submit_script(side: JobSide, python: str, entries: list[tuple[list[str], str]],
                  first: str = "") -> str:
    """``submit.sh``: each entry's submit command, through the job side's ``submit`` (in the
    batch's blob store), which reads the job id and records ``<run id> <job id>`` lines in
    job_ids.txt (``side``: the scheduler whose job ids it reads).

    ``entries`` are (run ids, submit command as shell text) pairs; ``python`` (a shell word)
    is the cluster's; ``first`` what to do before running it, if anything.
    """
    job_side = f"{BLOB_STORE}/{blob_name(JOB_PYZ, job_archive())}"
    lines = ["#!/bin/bash",
             "# Generated by easylaunch. Run on the cluster: bash submit.sh" + first,
             "set -euo pipefail",
             'cd "$(dirname "$0")"',
             f'submit() {{ {python} {job_side} submit {side.name} {JOB_IDS} "$@"; }}']
    lines += [f"submit {shlex.quote(','.join(ids))} {command}" for ids, command in entries]
    return "\n".join(lines) + "\n"


class BatchMode(ByHand, ScheduledMode):
    """Writes a batch folder and submits it where it can: on this machine where the scheduler
    answers here (a login node), or over SSH when a cluster is set. Else (or with
    ``submit=False`` / SSS_SUBMIT=False) the batch is for the user to copy to a cluster and
    submit. Runs start in SSS_CPU_IMAGE / SSS_GPU_IMAGE where set."""

    packing: Packing
    container = SSS_SINGULARITY

    def check(self, request: LaunchRequest) -> ClusterFacts | None:
        self.scheduler.check(self.settings, self.resources(request))
        submits = self.submits()
        value = self.settings.SSS_LOG_DIR
        if value is not None and not os.path.isabs(value) or value is None and (
                not submits and self.transport.is_local and not self.cluster_here()
                or self.settings.SLURM_DIRECTORY_FOR_JOB_SCRIPT and not self.transport.is_local):
            raise LaunchError(
                f"mode {self.name!r} needs SSS_LOG_DIR: the absolute path on the cluster for "
                f"logs (now {value!r}); set it in your settings" + (
                    "" if value else ", or let the batch be submitted: on the cluster's login "
                    f"node (where {self.scheduler.SIDE.tool} answers), the launch's log "
                    "folder is the default; over SSH (cluster=, DEFAULT_CLUSTER), the "
                    "cluster's log_dir"))
        value = self.settings.SLURM_DIRECTORY_FOR_JOB_SCRIPT
        if value is not None and not os.path.isabs(value):
            raise LaunchError(f"SLURM_DIRECTORY_FOR_JOB_SCRIPT must be an absolute path on the "
                              f"cluster, got {value!r}; or None for SSS_LOG_DIR/.batches")
        self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        self.settings.data_mounts("SSS_NON_CODE_DIRS_TO_MOUNT")
        if not submits:
            check_writable_file("SSS_SCRIPT_PATH", self.settings.SSS_SCRIPT_PATH)
        self.packing.check(self, request)
        if not submits and self.transport.is_local:
            self.scheduler.check_folder(self.cluster_batches(request))
            return None
        # submitted here, or a cluster over SSH (submitted or not): ask it first (the folder
        # checked there too, its paths made absolute)
        outside = self.packing.runs_outside(self, request)
        return self.preflight(self.cluster_batches(request),
                              self.batch_python(request) if outside else None, request,
                              in_image=not outside)

    def submits(self) -> bool:
        """Whether this launch submits its batch: ``submit=`` (else SSS_SUBMIT) where given,
        else over SSH, or where the scheduler's submit command is on this machine's PATH
        (unless the packing's batch is only ever copied by hand)."""
        chosen = self.opts.get("submit")
        if chosen is None:
            chosen = self.settings.SSS_SUBMIT
        if chosen is not None and not isinstance(chosen, bool):
            raise LaunchError(f"submit must be True, False or None (submit where the scheduler "
                              f"answers), got {chosen!r}")
        if chosen is not None:
            return chosen
        if self.packing.only_by_hand(self):
            return False
        return not self.transport.is_local or self.scheduler_here()

    def scheduler_here(self) -> bool:
        """Whether this machine is a login node of a cluster (its submit command is here)."""
        return self.transport.is_local and shutil.which(self.scheduler.SIDE.tool) is not None

    def cluster_here(self) -> bool:
        """Whether the batch's cluster is this machine: a login node, unless SSS_CLUSTER_HOST
        names another one to copy a batch to by hand."""
        return self.scheduler_here() and (self.submits() or not self.settings.SSS_CLUSTER_HOST)

    def grows_batches(self) -> bool:
        """A batch copied by hand grows with this process's later launches; one submitted is
        complete (and submitted) at once."""
        return not self.submits()

    def cluster_logs(self, request: LaunchRequest) -> str:
        """The cluster folder of the runs' log folders: SSS_LOG_DIR, else the cluster's
        log_dir over SSH, else (submitted here) the launch's own log folder."""
        return (self.settings.SSS_LOG_DIR or self.transport.log_dir
                or str(request.log_root)).rstrip("/")

    def cluster_batches(self, request: LaunchRequest) -> str:
        """The cluster folder batch folders go to: SLURM_DIRECTORY_FOR_JOB_SCRIPT, else a
        folder in :meth:`cluster_logs` (doodad's configs have no such key)."""
        return (self.settings.SLURM_DIRECTORY_FOR_JOB_SCRIPT
                or f"{self.cluster_logs(request)}/.batches").rstrip("/")

    def cluster_python(self) -> str:
        """SLURM_PYTHON or PBS_PYTHON where set; else the cluster's ``python`` over SSH, the
        launching interpreter where submitted here, and ``python3`` in a batch copied by hand
        to a cluster this machine does not know."""
        if self.transport.is_local and not self.cluster_here():
            return self.scheduler.python(self.settings) or "python3"
        return super().cluster_python()

    def batch_python(self, request: LaunchRequest) -> str:
        """The Python that starts the batch's job side outside any image (submit.sh, the
        packer, runs outside an image): SSS_PYTHON where runs start outside an image (htp
        without SSS_CPU_IMAGE), else :meth:`cluster_python`."""
        if self.settings.SSS_PYTHON and self.packing.runs_outside(self, request):
            return self.far_path(self.settings.SSS_PYTHON)
        return self.cluster_python()

    def python_setting(self) -> str:
        return "SSS_PYTHON" if self.settings.SSS_PYTHON else super().python_setting()

    def runs_pre_cmds(self) -> tuple[str, ...]:
        """(The runs' Python is asked about only where they start outside an image, after
        the container's pre-commands, SSS_PRE_CMDS, as htp's start line runs them.)"""
        return self.container.pre_cmds(self.settings)

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
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

    def layout(self, request: LaunchRequest, runs: list[Run], facts: ClusterFacts | None,
               name: str | None = None) -> Layout:
        """Batch and run paths here and on the cluster (``name``: the batch's, once made;
        ``facts``: the cluster's answers, where it was asked: its folders as absolute paths)."""
        name = name or f"{time.strftime('%Y-%m-%d_%H-%M-%S')}_{request.exp_name}_{runs[0].run_id}"
        batches = facts.root if facts is not None else self.cluster_batches(request)
        cluster_dir = f"{batches}/{name}"
        # (over SSH, the cluster's log_dir as the preflight made it absolute there)
        log_root = (self.settings.SSS_LOG_DIR or posixpath.dirname(batches)
                    if self.transport.log_dir else self.cluster_logs(request)).rstrip("/")
        return Layout(
            name=name, local_dir=request.log_root / ".batches" / name, cluster_dir=cluster_dir,
            bundles=[f"{cluster_dir}/{r.exp_name}/{r.log_dir.name}/{BUNDLE_DIR}" for r in runs],
            log_dirs=[f"{log_root}/{r.exp_name}/{r.log_dir.name}" for r in runs],
            log_root=log_root)

    def snapshot_mounts(self) -> list[Mount]:
        """The code folders without a cluster copy: for those, runs import the copy (as in
        doodad), and no snapshot is made or sent."""
        copies = self.settings.cluster_copies()
        return [m for m in self.settings.code_mounts() if m.local_dir not in copies]

    def in_image(self, request: LaunchRequest, layout: Layout, runs: list[Run]
                 ) -> SingularityImage:
        """The image and binds: batch and log folders, code snapshots, the SSS_ folders."""
        snapshots = [s["digest"] for s in runs[0].launch["code_snapshots"]]
        on_cluster = self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        code = [Mount(f"{layout.cluster_dir}/{SNAPSHOT_STORE}/{digest}", m.mount_point)
                for digest, m in zip(snapshots, self.snapshot_mounts(), strict=True)]
        mounts = [Mount(layout.cluster_dir, layout.cluster_dir),
                  Mount(layout.log_root, layout.log_root), *code,
                  *on_cluster, *self.settings.data_mounts("SSS_NON_CODE_DIRS_TO_MOUNT")]
        return self.container.in_job(self.settings, request.use_gpu,
                                     [(m.local_dir, m.mount_point) for m in mounts])

    def container_pythonpath(self) -> tuple[str, ...]:
        """Mount points of the code folders inside the container."""
        mounts = self.snapshot_mounts() + self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT")
        return tuple(dict.fromkeys(shlex.quote(m.mount_point) for m in mounts))

    def cluster_code_pythonpath(self) -> tuple[str, ...]:
        """The cluster's own code folders (SSS_CODE_DIRS_TO_MOUNT), where runs start outside
        an image."""
        return tuple(shlex.quote(m.local_dir)
                     for m in self.settings.code_mounts("SSS_CODE_DIRS_TO_MOUNT"))

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: ClusterFacts | None
                ) -> BatchPlan:
        """The plan of this process's open batch of this kind with ``runs`` added."""
        name, earlier = SESSION.open_batch(self.batch_key(request, runs)) \
            if self.grows_batches() else (None, [])
        every = earlier + runs
        plan = self.packing.plan(self, request, every,
                                 self.layout(request, every, facts, name))
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
            [self.note(layout, prepared.then).rstrip("\n")] if by_hand else [])

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: BatchPlan
               ) -> list[RunRecord]:
        layout = prepared.layout
        key = self.batch_key(request, runs)
        earlier = SESSION.open_batch(key)[1] if self.grows_batches() else []
        _stage(runs, request.log_root, layout.local_dir)
        for relpath, text in prepared.files.items():
            path = layout.local_dir / relpath
            write_bytes_atomic(str(path), text.encode())
            if path.suffix in (".sh", self.scheduler.SCRIPT_SUFFIX):
                path.chmod(0o755)
        seed = self.settings.SSS_SCRIPT_PATH
        by_hand = not self.submits()
        if seed and by_hand:  # (doodad's list of what to submit by hand)
            write_bytes_atomic(seed, SESSION.seed_script(
                seed, layout.name, prepared.seed_lines).encode())
        if by_hand:  # what the runs say until it is submitted
            fields = {run.run_id: {TO_SUBMIT: self.to_submit(layout, prepared.then)}
                      for run in runs}
        else:
            assert prepared.facts is not None  # (a batch it submits: the check asked the cluster)
            job_ids = self._submit_there(layout, prepared.facts)
            fields = {run.run_id: {self.scheduler.job_id_key: job_ids[run.run_id],
                                   **prepared.facts.details} for run in runs}
        for index, run in enumerate(runs, start=len(earlier)):
            run.record_backend(**self.backend(layout, index), **fields[run.run_id])
        if by_hand:  # how to submit, once (submitted: the launch line says where)
            print(f"easylaunch {self.name}: {len(runs)} run(s) added to the batch in "
                  f"{layout.local_dir} ({len(earlier) + len(runs)} in all); copy it once the "
                  "script has launched them all" if earlier else
                  self.note(layout, prepared.then).rstrip("\n"), file=sys.stderr)
        if self.grows_batches():
            SESSION.grow_batch(key, layout.name, earlier + runs)
        return [RunRecord.of_run(run) for run in runs]

    def launched(self, runs: list[Run]) -> str:
        backend = runs[0].launch["backend"]
        if not backend.get(self.scheduler.job_id_key):
            return f"written to the batch {backend['batch_dir']}, not submitted"
        return (f"submitted as {self.scheduler.NAME} job {backend[self.scheduler.job_id_key]} "
                f"on {self.transport.where} from {backend['cluster_batch_dir']}")

    def waiting_reason(self, job: RunRecord) -> str | None:
        return self.not_submitted(job) or super().waiting_reason(job)

    def heard_wait(self, job: RunRecord) -> str | None:
        return self.not_submitted(job) or super().heard_wait(job)

    def wait_for_change(self, job: RunRecord, timeout: float) -> None:
        """Raise at once for a run nobody has submitted (a wait would never end)."""
        self.refuse_not_submitted(job)
        super().wait_for_change(job, timeout)

    def _submit_there(self, layout: Layout, facts: ClusterFacts) -> dict[str, str]:
        """Copy the batch folder to the cluster (blobs and snapshots once per content), run
        its submit.sh there; return each run's job id. A submit.sh that fails part way
        has the jobs it did submit cancelled: all or nothing."""
        local, t = layout.local_dir, self.transport
        ids_file = f"{layout.cluster_dir}/{JOB_IDS}"
        then: list[Op] = [{"op": "run", "argv": ["bash", f"{layout.cluster_dir}/{SUBMIT}"]},
                          {"op": "read", "paths": [ids_file]}]
        if t.is_local and str(local) == layout.cluster_dir:  # written in place
            out, ids = checked(t.run_ops(then), t.where)
        else:
            shared = [f"{store}/{entry.name}" for store in (BLOB_STORE, SNAPSHOT_STORE)
                      if (local / store).is_dir() for entry in os.scandir(local / store)]
            plain = [entry.name for entry in os.scandir(local)
                     if entry.name not in (BLOB_STORE, SNAPSHOT_STORE)]
            up = Upload(local, layout.cluster_dir, facts.root, shared, plain)
            out, ids = staging.upload(t, up, then=then).answers
        record = ids["files"][ids_file]
        pairs = [line.split() for line in (record["text"] if record else "").splitlines()]
        job_ids = {pair[0]: pair[1] for pair in pairs if len(pair) == 2}
        if out["rc"] != 0:
            self.transport.run_ops([{"op": "run", "argv": self.scheduler.cancel_command(j)}
                                  for j in sorted(set(job_ids.values()))])
            raise LaunchError(f"submitting {layout.cluster_dir} on {self.transport.where} "
                              f"failed ({self.scheduler.SIDE.tool} refused a job?): "
                              f"{out['err'].strip()[-800:]}")
        return job_ids

    def fetch(self, job: RunRecord) -> str:
        there = self._job_log_dir(job)
        if self.transport.is_local and not Path(there).is_dir():
            host = self.settings.SSS_CLUSTER_HOST
            if not host:
                return (f"{there} is on the cluster; copy it into {job.log_dir} (with "
                        "SSS_CLUSTER_HOST=user@login-node set, this is an rsync command)")
            copy = shlex.join(["rsync", "-a", f"{host}:{there}/", f"{job.log_dir}/"])
            return f"{there} is on the cluster; bring it here with:\n  {copy}"
        return super().fetch(job)

    def cancel(self, job: RunRecord) -> None:
        failure = self.cancel_many([job]).get(job.id)
        if failure is not None:
            raise failure

    def cancel_many(self, jobs: list[RunRecord]) -> dict[str, EasyLaunchError]:
        failures, left = self.packing.cancel(self, jobs)
        for job in left:
            try:
                super().cancel(job)
            except EasyLaunchError as exc:
                failures[job.id] = exc
        return failures

    def submitted_job_id(self, job: RunRecord) -> str | None:
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
    # the job side the batch's scripts start (submit.sh, the packer) is this release's, which
    # resubmitted runs launched by another need not link to
    store_blob(batch_dir, JOB_PYZ, job_archive())
    for digest in {s["digest"] for run in runs for s in run.launch["code_snapshots"]}:
        dest = batch_dir / SNAPSHOT_STORE / digest
        if not dest.exists():
            shutil.copytree(log_root / SNAPSHOT_STORE / digest, dest)
