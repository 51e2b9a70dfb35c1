"""How easylaunch reaches the machine that holds runs: ask it things, copy files to and from it.

Modes speak to a :class:`Transport` only, so the same mode code runs whether that machine is
this one (:class:`LocalTransport`) or a cluster login node over SSH (``hosts.ssh``). Every
question goes through :meth:`Transport.run_ops` as a batch of far-side operations
(``easylaunch_job.host_ops``): one round trip however many runs a poll covers.
"""

from __future__ import annotations

import json
import re
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.errors import LaunchError
from easylaunch_job import host_ops

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Answer, Op

# (--recursive again: --files-from turns off the recursion --archive implies)
RSYNC_FLAGS = ("--archive", "--recursive", "--partial", "--protect-args", "--stats")


class HostError(LaunchError):
    """The machine that holds the runs cannot be reached or refused an operation."""


def checked(answers: list[dict], where: str) -> list[dict]:
    """``answers`` of :meth:`Transport.run_ops`, or a HostError naming the first op that
    failed there."""
    for reply in answers:
        if "error" in reply:
            raise HostError(f"on {where}: {reply['error']}")
    return answers


def wire_bytes(rsync_stdout: str) -> int:
    """Bytes rsync sent and received (``--stats``), protocol and file lists included."""
    return sum(int(m.replace(",", "")) for m in
               re.findall(r"Total bytes (?:sent|received): ([\d,]+)", rsync_stdout))


class Transport(ABC):
    """A machine that holds runs: this one, or one reached over SSH."""

    where: str  # for messages: "this machine", "cluster 'brc' (brc-login)"
    python: str  # the far side's Python, for the runs and the far-side operations
    log_dir: str | None = None  # where runs go there (None: where the launch says, here)

    @abstractmethod
    def run_ops(self, ops: Sequence[Op]) -> list[Answer]:
        """Run far-side operations in order, in one round trip; one answer each."""

    @abstractmethod
    def rsync_argv(self) -> list[str]:
        """``rsync`` and the options that reach the far side."""

    @abstractmethod
    def remote(self, path: str) -> str:
        """``path`` on the far side as rsync names it."""

    @property
    def is_local(self) -> bool:
        return False

    def terminal_argv(self, argv: list[str]) -> list[str]:
        """The argv, run here, that runs ``argv`` there with a terminal (an interactive
        shell)."""
        return argv

    def untar_argv(self, folder: str) -> list[str] | None:
        """The argv, run here, that unpacks a gzipped tar read from its stdin into ``folder``
        there (None: the far side is this machine)."""
        return None

    def push(self, local_root: Path, rels: Sequence[str], dest: str) -> int:
        """Copy ``rels`` (relative to ``local_root``) under ``dest`` there, as a resumable
        rsync (``--partial``: a copy cut off is continued by the next one); return the bytes
        that crossed the wire."""
        if not rels:
            return 0
        return self._rsync(["--relative", "--files-from=-", f"{local_root}/",
                            self.remote(dest.rstrip("/") + "/")], "\n".join(rels) + "\n",
                           f"copying to {self.where}")

    def pull(self, remote_root: str, rels: Sequence[str], local_root: Path,
             exclude: Sequence[str] = ()) -> int:
        """Copy ``rels`` (relative to ``remote_root`` there) into ``local_root``, changed
        files only; return the bytes that crossed the wire."""
        if not rels:
            return 0
        excludes = [f"--exclude={pattern}" for pattern in exclude]
        return self._rsync([*excludes, "--relative", "--files-from=-",
                            self.remote(remote_root.rstrip("/") + "/"), f"{local_root}/"],
                           "\n".join(rels) + "\n", f"copying from {self.where}")

    def _rsync(self, args: list[str], files: str, what: str) -> int:
        argv = [*self.rsync_argv(), *RSYNC_FLAGS, *args]
        try:
            out = subprocess.run(argv, input=files, capture_output=True, text=True)
        except FileNotFoundError:
            raise HostError("rsync is not installed on this machine; install it (apt-get "
                            "install rsync, brew install rsync)") from None
        if out.returncode != 0:
            raise self.copy_error(out, what)
        return wire_bytes(out.stdout)

    def copy_error(self, out: subprocess.CompletedProcess, what: str) -> HostError:
        """A clear error for a failed rsync."""
        return HostError(f"{what} failed (rsync exit {out.returncode}): "
                         f"{out.stderr.strip()[-800:]}")


class LocalTransport(Transport):
    """This machine: far-side operations run in this process."""

    where = "this machine"

    def __init__(self, python: str) -> None:
        self.python = python

    @property
    def is_local(self) -> bool:
        return True

    def run_ops(self, ops: Sequence[Op]) -> list[Answer]:
        return json.loads(json.dumps(host_ops.answer(json.loads(json.dumps(ops)))))

    def rsync_argv(self) -> list[str]:
        return ["rsync"]

    def remote(self, path: str) -> str:
        return path
