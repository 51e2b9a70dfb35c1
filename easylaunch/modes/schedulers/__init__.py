"""Batch schedulers, one module each (:mod:`.slurm`, :mod:`.pbs`): data and pure functions that
render a job's header lines, build the submit, status and cancel commands and read their
output, and describe a job's resources. The modes that hand runs to a scheduler (arrays, batch
folders, packed allocations) take one of these modules; :class:`Scheduler` is what they use."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from easylaunch.modes.schedulers.nodes import Nodes
    from easylaunch.runs.record import LaunchRequest
    from easylaunch.settings import Settings
    from easylaunch_job.schedulers import JobSide


class Scheduler(Protocol):
    """What a scheduler module provides (``Resources`` is its own resource request)."""

    NAME: str  # how messages name it: "Slurm", "PBS"
    SIDE: JobSide  # the job side's table of it: its submit command, job ids, resubmission
    JOB_ID_KEY: str  # launch.json's backend key for a run's job (or element) id
    OTHER_WAYS: str  # what else a user without the submit command can do
    OPTIONS: dict[str, Any]  # launch options that shape a job's resources
    SCRIPT_DIR: str  # the folder of a launch's job scripts, next to its runs
    SCRIPT_SUFFIX: str
    INDEX: str  # shell word: the entry of a job script this job (array element) runs
    PACKERS_PER_NODE: bool  # whether an allocation of several nodes starts a packer on each
    PYTHON_KEY: str  # the setting that names the runs' Python: "SLURM_PYTHON", "PBS_PYTHON"

    def resources(self, settings: Settings, opts: dict, request: LaunchRequest) -> Any:
        """The checked resource request of a launch with these options."""

    def check(self, settings: Settings, res: Any) -> None:
        """Refuse settings that cannot work with these resources."""

    def python(self, settings: Settings) -> str | None:
        """The Python that starts runs on the cluster, if the settings name one."""

    def pre_cmds(self, settings: Settings) -> tuple[str, ...]:
        """Shell commands run before the Python of each run."""

    def every_rank(self, line: str, res: Any) -> str:
        """``line`` as is for one process, or started on every rank of the job."""

    def check_folder(self, folder: str) -> None:
        """Refuse a folder the scheduler cannot keep job files in."""

    def preflight_ops(self) -> list[dict]:
        """Far-side ops asking the cluster what a launch needs to know (in the preflight's
        round trip)."""

    def cluster_facts(self, answers: list[dict], where: str) -> tuple[int, dict]:
        """From the answers to :meth:`preflight_ops`: how many runs one array may hold, and
        what launch.json records with each run (:meth:`element_fields`' ``details``)."""

    def read_nodes(self, answers: list[dict]) -> list[Nodes]:
        """The cluster's nodes, from the answers to :meth:`preflight_ops` (none: unknown)."""

    def check_room(self, res: Any, jobs: int, answers: list[dict]) -> None:
        """Refuse ``jobs`` more jobs of ``res`` that a limit on the user's jobs would refuse
        (the answers to :meth:`preflight_ops` say the limit and the jobs the user has)."""

    def fit(self, res: Any, nodes: Sequence[Nodes], packs: bool) -> Any:
        """``res``, refused (naming the numbers and the setting to change) where no node of
        ``nodes`` can give it; ``packs``: ``res`` sizes a packed allocation (htp), whose
        cores a node default to what a node has."""

    def array_header(self, res: Any, job_name: str, script: str, count: int,
                     parallelism: int | None, settings: Settings) -> list[str]:
        """The header lines of a job script (at ``script`` there) for ``count`` entries."""

    def node_workers(self, res: Any) -> int | None:
        """How many runs of ``res`` one node holds at once (None: the settings do not say)."""

    def packed(self, res: Any, nodes: int, workers: int) -> Any:
        """``res`` as an allocation of ``nodes`` nodes, each running a packer of ``workers``
        runs at once."""

    def packed_gpus(self, res: Any) -> int:
        """The GPUs a node of a packed allocation ``res`` has, one a worker (0: none)."""

    def packed_header(self, res: Any, job_name: str, folder: str, count: int,
                      settings: Settings) -> list[str]:
        """The header lines of a packers' script in ``folder``: one allocation, or an array of
        ``count``."""

    def job_exports(self, res: Any, resubmit: str | None) -> str:
        """A job's ``NAME=value`` words for the job side; ``resubmit``: the script an
        attempt that ends to restart submits again (None: no restarts)."""

    def submit_op(self, script: str) -> dict:
        """The far-side op that submits the script at ``script`` (a path there)."""

    def parse_submit(self, stdout: str) -> str:
        """The job id in the submit command's output; refused if none."""

    def element_fields(self, job_id: str, index: int, count: int, script: str,
                       details: dict) -> dict:
        """What launch.json records for entry ``index`` (0-based) of ``count`` submitted
        as ``job_id`` from ``script``."""

    def status_commands(self, job_ids: Sequence[str], backends: list[dict]) -> list[list[str]]:
        """Commands asking about these jobs (``backends``: what their runs recorded)."""

    def read_states(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                    backends: list[dict]) -> dict[str, str | None]:
        """Each job's state from the answers to :meth:`status_commands`: an easylaunch
        state, "unknown" (not known just now) or None (the scheduler has forgotten it)."""

    def read_waits(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                   backends: list[dict]) -> dict[str, str]:
        """Why each of these jobs that is queued waits, where the answers to
        :meth:`status_commands` say (``{job id: reason}``)."""

    def read_exits(self, job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                   backends: list[dict]) -> dict[str, str]:
        """How each of these jobs that ended badly ended, in words (``exit code 1``), where
        the answers to :meth:`status_commands` say."""

    def cancel_command(self, job_id: str) -> list[str]:
        """The command that stops one job or array element."""

    def reason_command(self, job_id: str) -> list[str] | None:
        """The command that says why a queued job waits (None: the scheduler cannot)."""

    def parse_reason(self, stdout: str) -> str | None:
        """The reason :meth:`reason_command` printed."""

    def output_place(self, backend: dict) -> tuple[str, str] | None:
        """Where the scheduler's own output of a run is (a path there) and how to name it
        (a format with one ``{}``)."""

    def stops_by_record(self, backend: dict) -> bool:
        """Whether a run is stopped through its record alone (its element cannot be named
        to the cancel command)."""

    def shell_lookup(self, job_id: str) -> list[str]:
        """What to ask the scheduler before opening a shell in a running job."""

    def shell_argv(self, lookup_out: str, job_id: str, inner: list[str]) -> list[str]:
        """The argv, run on the login node with a terminal, of ``inner`` inside the running
        job (refused, saying why, when it does not run)."""

    def interactive_argv(self, res: Any, inner: list[str]) -> list[str]:
        """The argv of an interactive allocation that runs ``inner`` with a terminal."""

    def broadcast(self, archive: str, target: str, unpack: str, fail: str) -> list[str]:
        """Shell lines that copy ``archive`` to ``target``.tar.gz on every node of the job
        and run ``unpack`` there once per node (``fail``: a format of the failure line)."""


if TYPE_CHECKING:
    # the checker holds each scheduler module to the protocol (a module stands for a Protocol;
    # one assignment each, so that an error names the module and its members that differ)
    from easylaunch.modes.schedulers import pbs, slurm

    _SLURM: Scheduler = slurm
    _PBS: Scheduler = pbs
