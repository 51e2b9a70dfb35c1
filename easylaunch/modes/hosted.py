"""What modes whose runs live on a machine reached through a transport share (Slurm, ssh).

That machine is this one or a remote one (``modes.hosts``); nothing here depends on which.
A run's ``status.json`` is the first source of truth. Only while the local copy is not final is
the far side asked, once for all the runs of a poll: the backend's view (squeue, the packer's
process), then the runs' records there. A run that ended is brought back into its local folder
(logs and result) in the same poll; a far side out of reach leaves the states as they are, and
they catch up on a later poll.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from easylaunch.errors import EasyLaunchError, LaunchError
from easylaunch.modes import hosts
from easylaunch.modes.base import NO_SINK, Mode, RunSink
from easylaunch.modes.hosts import pythons, staging
from easylaunch.modes.hosts.staging import Upload, bundle_items
from easylaunch.modes.hosts.transport import HostError, Transport, checked
from easylaunch.runs.bundle import Run
from easylaunch.runs.commands import check_found
from easylaunch.runs.record import LAUNCH_JSON, RunRecord, until_changed
from easylaunch_job.records import (
    BUNDLE_DIR,
    METRICS_JSONL,
    RESULT_PKL,
    STATUS_JSON,
    STDERR_LOG,
    STDOUT_LOG,
    read_json,
    update_status,
    write_json_atomic,
)
from easylaunch_job.states import TERMINAL_STATES

if TYPE_CHECKING:
    from easylaunch.runs.record import LaunchRequest
    from easylaunch_job.host_ops import Answer, Op

MIRRORED = (STATUS_JSON, RESULT_PKL)
KEPT_HERE = (BUNDLE_DIR, LAUNCH_JSON)  # sent there, never brought back (launch.json grows here)


def _copy_newer(source: Path, dest: Path) -> None:
    """Copy the run's record from where the job writes it into the local run folder, when
    that copy is newer than the local one (or as old but different: two writes within one
    tick of the file system's clock get the same time)."""
    for name in MIRRORED:
        try:  # (stat before reading: a record rewritten while it is copied is newer next time)
            there = (source / name).stat()
        except FileNotFoundError:
            continue
        try:
            here = (dest / name).stat().st_mtime_ns
            if there.st_mtime_ns < here or (there.st_mtime_ns == here and (
                    source / name).read_bytes() == (dest / name).read_bytes()):
                continue
        except FileNotFoundError:
            pass
        shutil.copyfile(source / name, dest / f".{name}.tmp")
        os.utime(dest / f".{name}.tmp", ns=(there.st_atime_ns, there.st_mtime_ns))
        os.replace(dest / f".{name}.tmp", dest / name)


def completed(answer: dict) -> subprocess.CompletedProcess:
    """A far-side ``run`` answer as a CompletedProcess."""
    return subprocess.CompletedProcess([], answer["rc"], answer["out"], answer["err"])


class BackendQuery(NamedTuple):
    """Far-side ops asking the backend about open jobs, and what to do with their answers
    (it reads them as the jobs stood when the ops were made, whatever their records say by
    then). ``settle`` also gets the ids of the runs whose record there said they ended: they
    are left alone, even where bringing them back failed this time."""

    ops: Sequence[Op]
    settle: Callable[[list[Answer], set[str]], None]


NO_QUERY = BackendQuery([], lambda answers, ended_there: None)


class HostedMode(Mode):
    """Runs kept in folders on the machine a transport reaches; subclasses say how they are
    started there (:meth:`backend_query` for the backend's side of tracking)."""

    runs_python = sys.executable  # the Python of runs on this machine, when no host is set
    backend_poll_seconds = 1.0  # (a scheduler's queue, or a round trip to the far side)
    streams_runs = False  # whether :meth:`stage` sends the runs (they may stream as made)
    far_home: str | None = None  # the far side's home, once check_host has asked
    _stream: staging.RunStream | None = None

    def host_name(self) -> str | None:
        """The CLUSTERS name or ssh destination of the far side (None: this machine)."""
        return self.opts.get("cluster")

    @functools.cached_property
    def transport(self) -> Transport:
        """This machine, or the far side over SSH."""
        return hosts.transport_to(self.settings, self.host_name(), self.runs_python)

    def sees_this_machine(self) -> bool:
        return self.host_name() is None  # (as the transport is: this machine, not SSH)

    def checks_while_runs_are_made(self) -> bool:
        return not self.transport.is_local  # (the transport is made here, not in the check)

    def check_host(self, folder: str, runs_python: str | None, *ops: Op,
                   programs: Sequence[str] = ()) -> tuple[str, Answer, list[Answer]]:
        """Ask the far side, in one round trip, whether it can take this launch: ``folder``
        writable there (made if missing); ``runs_python`` (the Python runs start with there;
        None: they start in an image) one that can load what this machine pickles; ``programs``
        (a command launch's) on its PATH. Returns ``folder`` as an absolute path there, what
        the far side said of itself (its Python, home, CPUs) and the answers to ``ops``."""
        t = self.transport
        # (the runs' Python where it is not the far side's own: probed too)
        other = runs_python if runs_python is not None and runs_python != t.python else None
        probe = [pythons.probe_op(other, self.runs_pre_cmds())] if other is not None else []
        info, folder_there, found, *answers = checked(t.run_ops([
            {"op": "info"}, {"op": "prepare_dir", "path": folder},
            {"op": "which", "names": list(programs)}, *probe, *ops]), t.where)
        check_found(found["found"], t.where)
        self.far_home = info["home"]
        t.python = self.far_path(t.python)
        if other is not None:
            self._check_probed(other, answers.pop(0))
        elif runs_python is not None:
            pythons.check_loads(info, t.python, t.where, self.python_setting())
        return folder_there["path"], info, answers

    def far_path(self, path: str) -> str:
        """``path`` with a leading ``~/`` made the far side's home, once :meth:`check_host`
        has asked it (job scripts name paths in quotes: no shell expands ``~`` there)."""
        if path.startswith("~/") and self.far_home is not None:
            return self.far_home + path[1:]
        return path

    def _check_probed(self, python: str, answer: dict) -> None:
        """Refuse a runs' Python that cannot load the runs, or (where no commands set it up
        first) that does not start; one that PRE_CMDS set up is checked where it answers (a
        login node's shell may not run them as a job's does)."""
        said = pythons.probed(answer)
        if said is not None:
            pythons.check_loads(said, python, self.transport.where, self.python_setting())
        elif not self.runs_pre_cmds():
            raise LaunchError(
                f"the runs' Python {python} does not start on {self.transport.where} "
                f"({(answer.get('err') or answer.get('out') or '').strip()[-300:]}); set "
                f"{self.python_setting()} to a Python there")

    def python_setting(self) -> str:
        """The setting that picks the runs' Python there, as messages name it."""
        name = self.host_name()
        return (f"'python' in CLUSTERS[{name!r}]" if name in (self.settings.CLUSTERS or {})
                else f"'python' in a CLUSTERS entry for {name}")

    def runs_pre_cmds(self) -> tuple[str, ...]:
        """Shell commands run before the runs' Python there (none by default)."""
        return ()

    def stream_runs(self, request: LaunchRequest, ready: Callable[[], bool]) -> RunSink:
        """A stream that copies each run's files to the far side as the launch makes it (see
        :class:`~easylaunch.modes.hosts.staging.RunStream`; ``ready``: whether the far side has
        been reached), for :meth:`stage`; none where the runs stay on this machine or the
        mode copies them otherwise."""
        if not self.streams_runs or self.transport.is_local or not self.transport.log_dir:
            return NO_SINK
        self._stream = staging.RunStream(self.transport, request.log_root,
                                         self.transport.log_dir, ready)
        return self._stream

    def stage(self, request: LaunchRequest, runs: list[Run], root: str, then: Sequence[Op],
              shared: list[str], plain: list[str]) -> list[Answer]:
        """Make the runs' bundles and this launch's files (``shared``: stored once per content,
        ``plain``: this launch's own; paths relative to the log root) present in ``root``
        there, then run the far-side ops ``then`` in the same round trip; their answers.
        On this machine with ``root`` the log root itself, everything is in place already."""
        if self.transport.is_local and root == str(request.log_root):
            return checked(self.transport.run_ops(then), self.transport.where)
        bundles, own = bundle_items(request.log_root, runs)
        stream, self._stream = self._stream, None
        streamed = stream.finish() if stream is not None else frozenset()
        return staging.upload(self.transport, Upload(
            request.log_root, root, root, bundles + shared, own + plain, streamed,
            stream.bytes if streamed and stream is not None else 0), then=then).answers

    # -- where the run's files are ------------------------------------------------------------

    def _job_log_dir(self, job: RunRecord) -> str:
        """Where the job writes the run's record, on the far side."""
        return job.launch_info["backend"].get("job_log_dir", str(job.log_dir))

    def remote_log_dir(self, run: Run) -> str | None:
        there = run.launch["backend"].get("job_log_dir")
        if there is None or (self.transport.is_local and there == str(run.log_dir)):
            return None
        return self.transport.remote(there)

    def readable_log(self, job: RunRecord, name: str) -> Path:
        """The log where the job writes it when that is readable here, else the local copy."""
        there = self.readable_folder(job) / name
        return there if there.exists() else job.log_dir / name

    def readable_folder(self, job: RunRecord) -> Path:
        """The folder the job writes, where it is readable here (a shared file system), else
        the local copy."""
        there = Path(self._job_log_dir(job))
        return there if self.transport.is_local and there.is_dir() else job.log_dir

    def _mirrored(self, job: RunRecord) -> bool:
        """Whether the job keeps its record somewhere other than its local folder."""
        return not self.transport.is_local or self._job_log_dir(job) != str(job.log_dir)

    def sync_record(self, job: RunRecord) -> None:
        """Where the job's folder is visible here (a shared file system), its record is
        copied whenever it is newer: a run the user reran on the cluster shows it too."""
        there = Path(self._job_log_dir(job))
        if self.transport.is_local and there != job.log_dir and there.is_dir():
            _copy_newer(there, job.log_dir)

    # -- tracking -----------------------------------------------------------------------------

    def backend_query(self, jobs: list[RunRecord]) -> BackendQuery:
        """Ask the backend about these open jobs (asked before their records are read, so a
        backend that says a job ended is never ahead of its record); its ``settle`` gives runs
        the backend has finished with the terminal state they lack."""
        return NO_QUERY

    def refresh(self, job: RunRecord) -> None:
        self.refresh_many([job])

    def refresh_many(self, jobs: list[RunRecord]) -> None:
        """One round trip for all the runs: the backend's view, then their records there;
        runs that ended are brought back here. (On this machine the records are read in
        place: ``sync_record`` copies them each time a job's state is read.)"""
        for job in jobs:
            self.sync_record(job)
        open_jobs = [job for job in jobs if not job.recorded_state().terminal]
        mirrored = [] if self.transport.is_local else open_jobs
        query = self.backend_query(open_jobs)
        asked = query.ops
        if not asked and not mirrored:
            return
        records = [f"{self._job_log_dir(j)}/{STATUS_JSON}" for j in mirrored]
        try:
            answers = self.transport.run_ops([*asked, {"op": "read", "paths": records}])
        except HostError:
            return  # out of reach: the records there keep, and are read on a later poll
        found = answers[-1]["files"]
        ended = [job for job, path in zip(mirrored, records, strict=True)
                 if self._mirror(job, found[path])]
        self._bring_back(ended)
        if asked:
            query.settle(answers[:-1], {job.id for job in ended})

    def _mirror(self, job: RunRecord, record: dict | None) -> bool:
        """Copy the record read there into the local folder; True if it is terminal (its
        folder is then brought back before the record is written here)."""
        if record is None:
            return False
        try:
            status = json.loads(record["text"])
        except ValueError:
            return False  # being written, or damaged there: read again on the next poll
        if status.get("state") in TERMINAL_STATES:
            return True
        with contextlib.suppress(OSError):
            if read_json(str(job.log_dir / STATUS_JSON)) != status:
                write_json_atomic(str(job.log_dir / STATUS_JSON), status)
        return False

    def _bring_back(self, jobs: list[RunRecord]) -> None:
        """Copy the folders of runs that ended there into their local folders (results and
        logs; one rsync per folder of runs), then their final records."""
        for (root_there, root_here), group in self._by_root(jobs).items():
            rels = [os.path.relpath(self._job_log_dir(j), root_there) for j in group]
            try:
                self.transport.pull(root_there, rels, root_here,
                                    exclude=(*KEPT_HERE, STATUS_JSON))
                self.transport.pull(root_there, [f"{r}/{STATUS_JSON}" for r in rels],
                                    root_here)
            except HostError:
                continue  # brought back on a later poll

    def _by_root(self, jobs: Sequence[RunRecord]) -> dict[tuple[str, Path], list[RunRecord]]:
        """The runs by their log roots there and here (one copy for each)."""
        groups: dict[tuple[str, Path], list[RunRecord]] = {}
        for job in jobs:
            there = Path(self._job_log_dir(job))
            groups.setdefault((str(there.parent.parent), job.log_dir.parent.parent),
                              []).append(job)
        return groups

    def request_cancel(self, jobs: list[RunRecord], *then: Op) -> list[Answer]:
        """Note the cancel in the runs' records, here and where the jobs write them, then run
        the far-side ops ``then`` in the same round trip; their answers."""
        for job in jobs:
            update_status(str(job.log_dir), cancel_requested=True)
        answers = checked(self.transport.run_ops([
            {"op": "update_status", "folders": [self._job_log_dir(job) for job in jobs],
             "fields": {"cancel_requested": True}}, *then]), self.transport.where)
        return answers[1:]

    def cancel_packed(self, tasks: list[tuple[RunRecord, str, int]]) -> dict[str, EasyLaunchError]:
        """Cancel tasks of packers, each a (run, the packer's state folder there, task index):
        the packer skips the task, or stops it if it runs; one not started yet ends at once.
        One round trip for them all; what kept each run from being cancelled (all of them,
        where the far side could not be reached)."""
        if not tasks:
            return {}
        markers = [f"{folder}/task-{index}.cancel" for _, folder, index in tasks]
        try:
            _, started = self.request_cancel(
                [job for job, _, _ in tasks], {"op": "touch", "paths": markers},
                {"op": "exists", "paths": [f"{folder}/task-{index}.json"
                                           for _, folder, index in tasks]})
        except HostError as exc:
            return {job.id: LaunchError(f"cannot mark the task cancelled ({exc}); where it "
                                        f"runs, run: touch {shlex.quote(marker)}")
                    for (job, _, _), marker in zip(tasks, markers, strict=True)}
        for (job, _, _), there in zip(tasks, started["exists"], strict=True):
            if not there:
                job.record_end("cancelled", "cancelled before it started")
        return {}

    def fetch(self, job: RunRecord) -> str:
        if not self._mirrored(job):
            return super().fetch(job)
        there = Path(self._job_log_dir(job))
        sent = self.transport.pull(str(there.parent.parent),
                                   [os.path.relpath(there, there.parent.parent)],
                                   job.log_dir.parent.parent, exclude=KEPT_HERE)
        return (f"brought {self.transport.remote(str(there))} into {job.log_dir} "
                f"({sent} bytes over the wire)")

    def bring_logs(self, job: RunRecord) -> None:
        if not self.transport.is_local:
            there = self._job_log_dir(job)
            with contextlib.suppress(HostError):
                self.transport.pull(there, [STDOUT_LOG, STDERR_LOG], job.log_dir)

    def bring_metrics(self, jobs: Sequence[RunRecord]) -> None:
        """The runs' metrics.jsonl from the far side, one copy for all of a folder of runs
        (a far side out of reach: brought on a later call)."""
        if self.transport.is_local:
            return  # (read where the jobs write them: readable_folder)
        for (root_there, root_here), group in self._by_root(jobs).items():
            rels = [f"{os.path.relpath(self._job_log_dir(j), root_there)}/{METRICS_JSONL}"
                    for j in group]
            with contextlib.suppress(HostError):
                self.transport.pull(root_there, rels, root_here)

    def wait_for_change(self, job: RunRecord, timeout: float) -> None:
        if self.transport.is_local:  # (the record where the job writes it: a look is a stat)
            until_changed(Path(self._job_log_dir(job)) / STATUS_JSON, timeout)
        else:  # (each look asks the far side: at most 4 times a second)
            time.sleep(max(timeout, 0.25))
