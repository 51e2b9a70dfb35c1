"""Tasks shared by the packers of one job array (``pack --shared``). A task is claimed once per
submission by creating ``claims-<job>/task-<i>`` (atomic, on NFS too; it names the allocation
and the packer). So an allocation that starts first or runs faster takes more tasks.

In an allocation of several nodes (a packer per node, started by srun), a stop is gathered by
packer 0. The others mark when their tasks have ended, and packer 0 submits once for all the
allocation left. The next allocation takes up only those tasks (their file is
``EASYLAUNCH_CONTINUE``)."""

from __future__ import annotations

import os
import sys
import time

from easylaunch_job.environment import array_index, submission_id
from easylaunch_job.records import read_json, write_json_atomic

PEERS_WAIT_SECONDS = 60.0  # how long packer 0 of a stopped allocation waits for the others


class Claims:
    """One packer's share of a task file: its allocation (array element) and its place among
    the allocation's packers (``peer``: rank, count)."""

    def __init__(self, state_dir: str, peer: tuple[int, int]) -> None:
        self.state_dir = state_dir
        self.folder = os.path.join(state_dir, f"claims-{submission_id()}")
        self.allocation = array_index()
        self.peer, self.peers = peer

    def claim(self, index: int) -> bool:
        """Whether this packer claimed task ``index`` first."""
        try:
            fd = os.open(os.path.join(self.folder, f"task-{index}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(f"{self.allocation} {self.peer}")
        return True

    def ours(self, index: int) -> bool:
        """Whether a packer of this allocation claimed task ``index``."""
        try:
            with open(os.path.join(self.folder, f"task-{index}")) as f:
                return f.read().split(" ")[0] == self.allocation
        except OSError:
            return False

    def gathered(self) -> bool:
        """(a stopped allocation) Packer 0: True once every other packer of the allocation
        has marked its tasks ended (or PEERS_WAIT_SECONDS passed). The others mark theirs and
        return False."""
        def mark(peer: int) -> str:
            return os.path.join(self.folder, f"stopped-{self.allocation}-{peer}")
        if self.peer:
            write_json_atomic(mark(self.peer), {"host": os.uname()[1]})
            return False
        deadline = time.time() + PEERS_WAIT_SECONDS
        missing = list(range(1, self.peers))
        while missing and time.time() < deadline:
            missing = [p for p in missing if not os.path.exists(mark(p))]
            time.sleep(0.2 if missing else 0)
        if missing:
            print(f"packer: packer(s) {missing} of this allocation did not end in "
                  f"{PEERS_WAIT_SECONDS:.0f} s; their tasks go on with the others",
                  file=sys.stderr)
        return True

    def leave(self, left: list[int]) -> str:
        """Write down the tasks this allocation leaves, for the next to take; their file."""
        return write_tasks_left(os.path.join(
            self.state_dir, f"continue-{submission_id()}-{self.allocation}.txt"), left)


def write_tasks_left(path: str, left: list[int]) -> str:
    """Write the tasks an allocation leaves to ``path``, as :func:`tasks_left` reads them
    (the next allocation's EASYLAUNCH_CONTINUE); ``path``."""
    write_json_atomic(path, {"tasks": left})
    return path


def tasks_left(going_on: str | None) -> frozenset[int] | None:
    """The tasks a stopped shared allocation left (``going_on``: EASYLAUNCH_CONTINUE, their
    file); None: all."""
    if not going_on or going_on == "1":
        return None
    return frozenset(read_json(going_on).get("tasks", []))
