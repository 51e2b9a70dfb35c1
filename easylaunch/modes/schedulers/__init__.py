"""Batch schedulers, one module each (:mod:`.slurm`, :mod:`.pbs`): data and pure functions that
render a job's header lines, build the submit, status and cancel commands and read their
output, and describe a job's resources, gathered at each module's end in a :class:`Scheduler`
(``SCHEDULER``) that the modes take as their part. A scheduler defines the core that submits a
sweep as a job array, follows it and cancels it; the rest has defaults, and what a mode needs
beyond that is a capability (:class:`Shells`, :class:`Packing`, :class:`Broadcast`) it asks for,
refused as "not on LSF" where the scheduler has none. Its job side is one table in
:mod:`easylaunch_job.schedulers` (``SIDE``)."""

from __future__ import annotations

import posixpath
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from easylaunch.errors import LaunchError
from easylaunch_job.environment import ENV_TIME_LIMIT_AT

if TYPE_CHECKING:
    from easylaunch.modes.schedulers.nodes import Nodes
    from easylaunch.runs.record import LaunchRequest
    from easylaunch.settings import Settings
    from easylaunch_job.host_ops import Op, RunOp
    from easylaunch_job.schedulers import JobSide

UNLIMITED = 2**31 - 1  # array entries where a scheduler says no limit


def time_limit_at(seconds: int) -> str:
    """A job script's ``EASYLAUNCH_TIME_LIMIT_AT=...`` word: when its time limit comes,
    ``seconds`` after the script starts (its runs read a SIGTERM from then on as a timeout)."""
    return f"{ENV_TIME_LIMIT_AT}=$(( $(date +%s) + {seconds} ))"


class Scheduler(ABC):
    """A scheduler as the modes use it (``Resources`` is its own resource request). The ten
    members without a body are what every scheduler defines; the others say what they do when
    a scheduler leaves them out."""

    NAME: ClassVar[str]  # how messages name it: "Slurm", "PBS"
    SIDE: ClassVar[JobSide]  # its job side: submit command, job ids, array index, resubmission
    OPTIONS: ClassVar[dict[str, Any]]  # launch options that shape a job's resources
    OTHER_WAYS: ClassVar[str] = ""  # what else a user without the submit command can do
    SCRIPT_SUFFIX: ClassVar[str] = ".sh"

    @abstractmethod
    def resources(self, settings: Settings, opts: dict, request: LaunchRequest) -> Any:
        """The checked resource request of a launch with these options."""

    @abstractmethod
    def array_header(self, res: Any, job_name: str, script: str, count: int,
                     parallelism: int | None, settings: Settings) -> list[str]:
        """The header lines of a job script (at ``script`` there) for ``count`` entries."""

    @abstractmethod
    def job_exports(self, res: Any, resubmit: str | None) -> str:
        """A job's ``NAME=value`` words for the job side; ``resubmit``: the script an
        attempt that ends to restart submits again (None: no restarts)."""

    @abstractmethod
    def element_fields(self, job_id: str, index: int, count: int, script: str,
                       details: dict) -> dict:
        """What launch.json records for entry ``index`` (0-based) of ``count`` submitted
        as ``job_id`` from ``script`` (the mode records ``array_job_id`` itself)."""

    @abstractmethod
    def status_commands(self, job_ids: Sequence[str], backends: list[dict]) -> list[list[str]]:
        """Commands asking about these jobs (``backends``: what their runs recorded)."""

    @abstractmethod
    def read_states(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                    backends: list[dict]) -> dict[str, str | None]:
        """Each job's state from the answers to :meth:`status_commands`: an easylaunch
        state, "unknown" (not known just now) or None (the scheduler has forgotten it)."""

    @abstractmethod
    def cancel_command(self, job_id: str) -> list[str]:
        """The command that stops one job or array element."""

    # -- with defaults -----------------------------------------------------------------------

    @property
    def job_id_key(self) -> str:
        """launch.json's backend key for a run's job (or element) id."""
        return f"{self.SIDE.name}_job_id"

    @property
    def script_dir(self) -> str:
        """The folder of a launch's job scripts, next to its runs."""
        return f".{self.SIDE.name}"

    @property
    def python_key(self) -> str:
        """The setting that names the runs' Python ("SLURM_PYTHON")."""
        return f"{self.SIDE.name.upper()}_PYTHON"

    def python(self, settings: Settings) -> str | None:
        """The Python that starts runs on the cluster, if the settings name one."""
        return settings.get(self.python_key)

    def pre_cmds(self, settings: Settings) -> tuple[str, ...]:
        """Shell commands run before the Python of each run (``<NAME>_PRE_CMDS``)."""
        return tuple(settings.get(f"{self.SIDE.name.upper()}_PRE_CMDS") or ())

    def commands(self) -> tuple[str, ...]:
        """The commands its job arrays run where they are submitted (``easylaunch doctor``
        looks for them): submit, status, cancel."""
        asked = [self.SIDE.tool, *(argv[0] for argv in self.status_commands(["1"], [{}])),
                 self.cancel_command("1")[0]]
        return tuple(dict.fromkeys(asked))

    def check(self, settings: Settings, res: Any) -> None:
        """Refuse settings that cannot work with these resources (default: none)."""

    def check_folder(self, folder: str) -> None:
        """Refuse a folder the scheduler cannot keep job files in (default: any will do)."""

    def every_rank(self, line: str, res: Any) -> str:
        """``line`` as is for one process, or started on every rank of the job."""
        return line

    def submit_op(self, script: str) -> RunOp:
        """The far-side op that submits the script at ``script`` (a path there), from its
        folder."""
        return {"op": "run", "argv": self.SIDE.command(script), "cwd": posixpath.dirname(script)}

    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's output; refused if none."""
        job_id = self.SIDE.job_id(stdout)
        if not job_id:
            raise LaunchError(f"{self.SIDE.tool} printed no job id: {stdout.strip()!r}")
        return job_id

    def preflight_ops(self) -> list[Op]:
        """Far-side ops asking the cluster what a launch needs to know (in the preflight's
        round trip; default: none)."""
        return []

    def cluster_facts(self, answers: list[dict], where: str) -> tuple[int, dict]:
        """From the answers to :meth:`preflight_ops`: how many runs one array may hold, and
        what launch.json records with each run (:meth:`element_fields`' ``details``)."""
        return UNLIMITED, {}

    def read_nodes(self, answers: list[dict]) -> list[Nodes]:
        """The cluster's nodes, from the answers to :meth:`preflight_ops` (none: unknown)."""
        return []

    def check_room(self, res: Any, jobs: int, answers: list[dict]) -> None:
        """Refuse ``jobs`` more jobs of ``res`` that a limit on the user's jobs would refuse
        (the answers to :meth:`preflight_ops` say the limit and the jobs the user has)."""

    def fit(self, res: Any, nodes: Sequence[Nodes], packs: bool) -> Any:
        """``res``, refused (naming the numbers and the setting to change) where no node of
        ``nodes`` can give it; ``packs``: ``res`` sizes a packed allocation (htp), whose
        cores a node default to what a node has."""
        return res

    def read_waits(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                   backends: list[dict]) -> dict[str, str]:
        """Why each of these jobs that is queued waits, where the answers to
        :meth:`status_commands` say (``{job id: reason}``)."""
        return {}

    def read_exits(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                   backends: list[dict]) -> dict[str, str]:
        """How each of these jobs that ended badly ended, in words (``exit code 1``), where
        the answers to :meth:`status_commands` say."""
        return {}

    def reason_command(self, job_id: str) -> list[str] | None:
        """The command that says why a queued job waits (None: the scheduler cannot)."""
        return None

    def parse_reason(self, stdout: str) -> str | None:
        """The reason :meth:`reason_command` printed."""
        return None

    def output_place(self, backend: dict) -> tuple[str, str] | None:
        """Where the scheduler's own output of a run is (a path there) and how to name it
        (a format with one ``{}``)."""
        return None

    def stops_by_record(self, backend: dict) -> bool:
        """Whether a run is stopped through its record alone (its element cannot be named
        to the cancel command)."""
        return False


# -- capabilities: what a mode asks a scheduler for, beyond the core ----------------------------

class Shells(ABC):
    """Shells in a running job (``easylaunch shell``) and interactive allocations."""

    @abstractmethod
    def shell_lookup(self, job_id: str) -> list[str]:
        """What to ask the scheduler before opening a shell in a running job."""

    @abstractmethod
    def shell_argv(self, lookup_out: str, job_id: str, inner: list[str]) -> list[str]:
        """The argv, run on the login node with a terminal, of ``inner`` inside the running
        job (refused, saying why, when it does not run)."""

    @abstractmethod
    def interactive_argv(self, res: Any, inner: list[str]) -> list[str]:
        """The argv of an interactive allocation that runs ``inner`` with a terminal."""


class Packing(ABC):
    """Packed allocations (``htp``): many runs share one allocation, a packer a node."""

    PACKERS_PER_NODE: ClassVar[bool]  # whether a packer starts on each node of an allocation

    @abstractmethod
    def node_workers(self, res: Any) -> int | None:
        """How many runs of ``res`` one node holds at once (None: the settings do not say)."""

    @abstractmethod
    def packed(self, res: Any, nodes: int, workers: int) -> Any:
        """``res`` as an allocation of ``nodes`` nodes, each running a packer of ``workers``
        runs at once."""

    @abstractmethod
    def packed_gpus(self, res: Any) -> int:
        """The GPUs a node of a packed allocation ``res`` has, one a worker (0: none)."""

    @abstractmethod
    def packed_header(self, res: Any, job_name: str, folder: str, count: int,
                      settings: Settings) -> list[str]:
        """The header lines of a packers' script in ``folder``: one allocation, or an array of
        ``count``."""


class Broadcast(ABC):
    """Copying a packed environment (``env_pack``) to every node of a job."""

    @abstractmethod
    def broadcast(self, archive: str, target: str, unpack: str, fail: str) -> list[str]:
        """Shell lines that copy ``archive`` to ``target``.tar.gz on every node of the job
        and run ``unpack`` there once per node (``fail``: a format of the failure line)."""


def _not_on(sched: Scheduler, what: str, capability: type) -> LaunchError:
    members = ", ".join(sorted(getattr(capability, "__abstractmethods__", ())))
    return LaunchError(f"{what} is not on {sched.NAME}: its scheduler module has no "
                       f"{capability.__name__} ({members})")


def shells(sched: Scheduler, what: str) -> Shells:
    """``sched``'s shells; refused, saying ``what`` is not on it, where it has none."""
    if not isinstance(sched, Shells):
        raise _not_on(sched, what, Shells)
    return sched


def packing(sched: Scheduler, what: str) -> Packing:
    """``sched``'s packed allocations; refused where it has none."""
    if not isinstance(sched, Packing):
        raise _not_on(sched, what, Packing)
    return sched


def broadcasting(sched: Scheduler, what: str) -> Broadcast:
    """``sched``'s environment broadcast; refused where it has none."""
    if not isinstance(sched, Broadcast):
        raise _not_on(sched, what, Broadcast)
    return sched
