"""What a batch written to copy says: how it reaches the cluster and is submitted there (the
printed steps, the one line its runs record), and what such a run says until someone submits
it. :class:`~easylaunch.modes.scheduled.batch.BatchMode` takes these from :class:`ByHand`."""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from easylaunch.errors import LaunchError
from easylaunch.runs.record import RunRecord
from easylaunch_job.states import JobState

if TYPE_CHECKING:
    from easylaunch.modes.hosts.transport import Transport
    from easylaunch.modes.scheduled.batch import Layout
    from easylaunch.settings import Settings

TO_SUBMIT = "to_submit"  # launch.json's backend key: how to submit a batch copied by hand


class ByHand:
    """The steps of a batch copied by hand to its cluster (a part of BatchMode)."""

    if TYPE_CHECKING:  # what BatchMode, the mode this is a part of, gives (for the checker only)
        name: str
        settings: Settings

        @property
        def transport(self) -> Transport: ...

        def cluster_here(self) -> bool: ...

        def job_id(self, job: RunRecord) -> str | None: ...

        def read_record(self, job: RunRecord) -> dict: ...

    def copy_step(self, layout: Layout) -> str:
        """How the batch reaches the cluster: an rsync command where the cluster is known
        (over SSH, SSS_CLUSTER_HOST, or this machine), else in words; "" where the batch is
        written in place."""
        local, there, t = f"{layout.local_dir}/", f"{layout.cluster_dir}/", self.transport
        host = self.settings.SSS_CLUSTER_HOST
        if local == there and self.cluster_here():
            return ""
        if not t.is_local or self.cluster_here():
            return shlex.join([*t.rsync_argv(), "-a", local, t.remote(there)])
        if host:
            return shlex.join(["rsync", "-a", local, f"{host}:{there}"])
        return (f"copy {local} to {there} on the cluster (SSS_CLUSTER_HOST=user@login-node "
                "makes this an rsync command)")

    def cluster_named(self) -> str:
        """The cluster, as the printed steps name it."""
        if not self.transport.is_local or self.cluster_here():
            return self.transport.where
        return self.settings.SSS_CLUSTER_HOST or "the cluster"

    def note(self, layout: Layout, then: str) -> str:
        """The copy command and the command to run on the cluster, a line each."""
        copy = self.copy_step(layout)
        return (f"easylaunch {self.name}: batch written to {layout.local_dir}, not submitted\n"
                + (f"  copy it:  {copy}\n  then, on {self.cluster_named()}: {then}\n" if copy
                   else f"  submit it on {self.cluster_named()}: {then}\n"))

    def to_submit(self, layout: Layout, then: str) -> str:
        """The steps of :meth:`note` on one line."""
        copy = self.copy_step(layout)
        run = f"run on {self.cluster_named()}: {then}"
        return f"{copy}, then {run}" if copy else run

    def not_submitted(self, job: RunRecord) -> str | None:
        """What a run written to a batch nobody has submitted says (no job id of it is known
        here and its record shows no start), with how to submit it; None for any other."""
        backend = job.launch_info["backend"]
        how = backend.get(TO_SUBMIT)
        if how is None or self.read_record(job).get("state") != JobState.QUEUED.value \
                or self.job_id(job):
            return None
        return f"written to batch {backend['batch_dir']}, not submitted: {how}"


def check_writable_file(key: str, path: str | None) -> None:
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
