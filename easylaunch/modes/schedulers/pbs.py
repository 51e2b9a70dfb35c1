"""PBS Pro (and OpenPBS) as data and pure functions: resources, #PBS lines, qsub/qstat/qdel
(the :class:`~easylaunch.modes.schedulers.Scheduler` the modes use, at the end; qstat's output is
read by :mod:`.pbs_queue`).

Written to PBS Pro's documented formats (Reference Guide: qsub options, ``qstat -f`` and
``-F json`` output, job states, exit status codes). Nothing here runs a command.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from easylaunch.errors import LaunchError
from easylaunch.modes import launchers
from easylaunch.modes.schedulers import (
    Broadcast,
    Packing,
    Scheduler,
    Shells,
    pbs_queue,
    time_limit_at,
)
from easylaunch.modes.schedulers import nodes as cluster_nodes
from easylaunch.settings.entries import LAUNCH_SOURCE, check_entry, walltime_seconds
from easylaunch_job.environment import (
    ENV_ENTRY,
    ENV_JOB_ID,
    ENV_RESUBMIT_SCRIPT,
    ENV_SCHEDULER,
    ENV_WATCH_CANCEL,
)
from easylaunch_job.schedulers import PBS_SIDE, qsub_job_id

if TYPE_CHECKING:
    from easylaunch.runs.record import LaunchRequest
    from easylaunch.settings import Settings
    from easylaunch_job.host_ops import Op

DEFAULT_MAX_ARRAY_SIZE = 10000  # PBS Pro's default max_array_size


@dataclass(frozen=True)
class Resources:
    """What one PBS job asks for: ``select`` chunks of ncpus/ngpus/mpiprocs, one per node."""

    config_name: str
    nodes: int
    ncpus: int
    ngpus: int
    mpiprocs: int
    depth: int
    cpu_bind: str | None
    mem: str | None
    walltime_seconds: int
    queue: str | None
    project: str | None
    filesystems: str | None
    place: str | None
    directives: tuple[str, ...]

    @property
    def tasks(self) -> int:
        return self.nodes * self.mpiprocs


def format_walltime(seconds: int) -> str:
    """``HH:MM:SS`` as #PBS -l walltime takes it."""
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def resolve_resources(configs: dict, name: str | None, use_gpu: bool) -> Resources:
    """Pick and check one of PBS_CONFIGS (``name``, else "gpu"/"cpu" by use_gpu)."""
    name = name or ("gpu" if use_gpu else "cpu")
    if name not in configs:
        raise LaunchError(f"pbs_config_name={name!r} is not in PBS_CONFIGS; known: "
                          f"{', '.join(sorted(configs)) or 'none'}")
    cfg, where = configs[name], f"PBS_CONFIGS[{name!r}]"
    check_entry("PBS_CONFIGS", name, cfg, LAUNCH_SOURCE, at_launch=True)
    nodes, ncpus, ngpus = cfg.get("select", 1), cfg.get("ncpus", 1), cfg.get("ngpus", 0)
    mpiprocs = cfg.get("mpiprocs", ngpus or 1)
    depth = cfg.get("depth", max(1, ncpus // mpiprocs))
    if use_gpu and not ngpus:
        raise LaunchError(f"use_gpu=True but {where} asks for ngpus=0; pick a GPU config with "
                          "pbs_config_name or set ngpus")
    return Resources(
        config_name=name, nodes=nodes, ncpus=ncpus, ngpus=ngpus, mpiprocs=mpiprocs,
        depth=depth, cpu_bind=cfg.get("cpu_bind", "depth"), mem=cfg.get("mem"),
        walltime_seconds=walltime_seconds(cfg.get("walltime", 60), f"{where}: walltime"),
        queue=cfg.get("queue"), project=cfg.get("project"), filesystems=cfg.get("filesystems"),
        place=cfg.get("place"), directives=tuple(d.strip() for d in cfg.get("directives") or ()))


def job_name(text: str) -> str:
    """A name qsub -N takes: letters, digits and ``_.+-``, starting with a letter."""
    name = re.sub(r"[^A-Za-z0-9_.+-]", "_", text)[:200]
    return name if name[:1].isalpha() else f"r{name}"


def array_spec(count: int, parallelism: int | None) -> str:
    """``1-<count>`` with an optional ``%parallelism`` cap (PBS Pro's max_run_subjobs)."""
    return f"1-{count}%{parallelism}" if parallelism else f"1-{count}"


def pbs_header(res: Resources, name: str, array: str | None = None) -> list[str]:
    """The #PBS lines of a job script (``array`` like ``1-100%10``; None: one job)."""
    chunk = f"select={res.nodes}:ncpus={res.ncpus}"
    if res.ngpus:
        chunk += f":ngpus={res.ngpus}"
    chunk += f":mpiprocs={res.mpiprocs}"
    if res.mem:
        chunk += f":mem={res.mem}"
    lines = [f"#PBS -N {job_name(name)}", f"#PBS -l {chunk}"]
    if res.place:
        lines.append(f"#PBS -l place={res.place}")
    lines.append(f"#PBS -l walltime={format_walltime(res.walltime_seconds)}")
    if res.filesystems:
        lines.append(f"#PBS -l filesystems={res.filesystems}")
    if res.queue:
        lines.append(f"#PBS -q {res.queue}")
    if res.project:
        lines.append(f"#PBS -A {res.project}")
    lines.append("#PBS -j oe")
    if array is not None:
        lines.append(f"#PBS -J {array}")
    return lines + [f"#PBS {d}" for d in res.directives]


def parse_submit(stdout: str) -> str:
    """The job id in qsub's output (``123.server``, ``123[].server``, ``123``); refused if
    none."""
    job_id = qsub_job_id(stdout)
    if not job_id:
        raise LaunchError(f"qsub did not print a job id: {stdout!r}")
    return job_id


def element_id(array_id: str, index: int) -> str:
    """The id of element ``index`` (1-based) of an array: ``123[4].server``."""
    seq, _, server = array_id.partition(".")
    seq = seq.removesuffix("[]")
    return f"{seq}[{index}]" + (f".{server}" if server else "")


def cancel_command(job_id: str) -> list[str]:
    """qdel one job or one array element (``123[4].server``)."""
    return ["qdel", job_id]


def server_has_json(version_output: str) -> bool:
    """Whether ``qstat --version`` output is PBS Pro's or OpenPBS's (``pbs_version = ...``),
    whose qstat has ``-x`` and ``-F json``."""
    return bool(re.search(r"pbs_version\s*=", version_output))


def max_array_size(server_json: str) -> int:
    """The server's max_array_size from ``qstat -B -f -F json`` (PBS Pro's default when the
    output is not JSON or lacks it)."""
    try:
        servers = json.loads(server_json).get("Server") or {}
        sizes = [pbs_queue.as_int(attrs.get("max_array_size")) for attrs in servers.values()]
    except (ValueError, AttributeError):
        return DEFAULT_MAX_ARRAY_SIZE
    return next((s for s in sizes if s), DEFAULT_MAX_ARRAY_SIZE)


def exec_host_command(job_id: str) -> list[str]:
    """qstat's full record of one job (its exec_host: the nodes it runs on)."""
    return ["qstat", "-f", job_id]


def node_shell(lookup_out: str, job_id: str, inner: list[str]) -> list[str]:
    """``ssh -t NODE INNER``: a terminal on the first node of the running job (PBS has no
    step into a job; sites let a job's user ssh to its nodes). ``lookup_out``: what qstat -f
    said of the job."""
    state = re.search(r"^\s*job_state = (\w)", lookup_out, re.MULTILINE)
    host = re.search(r"^\s*exec_host = ([^/+\s]+)", lookup_out, re.MULTILINE)
    if not state or state.group(1) != "R" or not host:
        raise LaunchError(f"PBS job {job_id} is not running (qstat says job_state "
                          f"{state.group(1) if state else 'nothing'}): there is no node to "
                          "open a shell on")
    return ["ssh", "-t", host.group(1), shlex.join(inner)]


def interactive_job(res: Resources, inner: list[str]) -> list[str]:
    """``qsub -I -l RESOURCES -- INNER``: an interactive job, ended with its shell."""
    argv = ["qsub", "-I", "-N", "interactive"]
    for line in pbs_header(res, "interactive")[1:]:
        words = shlex.split(line.removeprefix("#PBS "))
        if words[0] in ("-l", "-q", "-A"):
            argv += words
    return [*argv, "--", *inner]


# -- the Scheduler the modes use ----------------------------------------------------------------

SIDE = PBS_SIDE
# The job's id (Slurm's PBS front ends set SLURM_JOB_ID instead of PBS_JOBID).
JOB_ID = "${PBS_JOBID:-${SLURM_JOB_ID:-}}"
WATCH_CANCEL = 3  # seconds: how soon a run stops when its record asks (see stops_by_record)
# Options of one launch that replace a PBS_CONFIGS field (option -> field).
OVERRIDES = {"n_nodes": "select", "n_gpus": "ngpus", "tasks_per_node": "mpiprocs",
             "time_in_mins": "walltime", "queue": "queue", "project": "project"}
OPTIONS = {"pbs_config_name": None, **dict.fromkeys(OVERRIDES)}
# A run's rank under the launchers PBS sites use: Cray PALS, MPICH (hydra), Open MPI.
MPI_RANK = "${PALS_RANKID:-${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-0}}}"


def resources(settings: Settings, opts: dict, request: LaunchRequest) -> Resources:
    """The checked PBS_CONFIGS entry for this request, with this launch's overrides."""
    configs = settings.PBS_CONFIGS
    name = opts["pbs_config_name"] or ("gpu" if request.use_gpu else "cpu")
    overrides = {field: opts[option] for option, field in OVERRIDES.items()
                 if opts.get(option) is not None}
    if name in configs and overrides:
        configs = {**configs, name: {**configs[name], **overrides}}
    return resolve_resources(configs, name, request.use_gpu)


def every_rank(line: str, res: Resources) -> str:
    """``line`` as is for one process, or once per rank through mpiexec on the job's hosts
    (``$PBS_NODEFILE``), each rank logging to its own files."""
    if res.tasks == 1:
        return line
    mpiexec = launchers.mpiexec(res.tasks, res.mpiprocs, None, res.cpu_bind, res.depth)
    per_rank = (f'exec >>"$LOG_DIR"/stdout.rank{MPI_RANK}.log '
                f'2>>"$LOG_DIR"/stderr.rank{MPI_RANK}.log; {line}')
    return (f'exec {shlex.join(mpiexec)} --hostfile "$PBS_NODEFILE" '
            f"bash -c {shlex.quote(per_rank)}")


def preflight_ops() -> list[Op]:
    return [{"op": "which", "names": ["qstat", "qdel"]},
            {"op": "run", "argv": ["qstat", "--version"]},
            {"op": "run", "argv": ["qstat", "-B", "-f", "-F", "json"]},
            {"op": "run", "argv": ["pbsnodes", "-a"]}]


def cluster_facts(answers: list[dict], where: str) -> tuple[int, dict]:
    """The server's max_array_size, and whether its qstat has JSON output."""
    which, version, server, _ = answers
    missing = [name for name, path in which["found"].items() if path is None]
    if missing:
        raise LaunchError(f"mode 'pbs' tracks and cancels runs with qstat and qdel; "
                          f"{' and '.join(missing)} is not on PATH on {where}")
    return max_array_size(server["out"]), {
        "qstat_json": server_has_json(version["out"] + version["err"])}


def read_nodes(answers: list[dict]) -> list[cluster_nodes.Nodes]:
    """The server's nodes, from pbsnodes' answer to :func:`preflight_ops` (none where it
    failed: nothing is checked then)."""
    pbsnodes = answers[3]
    return cluster_nodes.parse_pbsnodes(pbsnodes["out"]) if pbsnodes.get("rc") == 0 else []


def fit(res: Resources, nodes: Sequence[cluster_nodes.Nodes], packs: bool) -> Resources:
    """``res`` refused where no node of the server can give a chunk of it (ncpus, ngpus,
    mem) or there are fewer such nodes than ``select`` (a queue's walltime limit is not
    checked: queues name no nodes in pbsnodes' output). Packed or not, ncpus is what an
    allocation asks of a node: nothing is left to default."""
    mem = None if res.mem is None else cluster_nodes.memory_mb(res.mem)
    cluster_nodes.check_fits(cluster_nodes.Ask(
        f"PBS_CONFIGS[{res.config_name!r}]", (res.ncpus, "ncpus"), (res.ngpus, "ngpus"),
        memory_mb=(mem, "mem"), nodes=(res.nodes, "select")), nodes)
    return res


def array_header(res: Resources, job_name: str, script: str, count: int,
                 parallelism: int | None, settings: Settings) -> list[str]:
    """#PBS lines; one entry is one job, more a job array."""
    return pbs_header(res, job_name, None if count == 1 else array_spec(count, parallelism))


def node_workers(res: Resources) -> int | None:
    return res.ncpus


def packed(res: Resources, nodes: int, workers: int) -> Resources:
    """One chunk a node, with a core for each of its ``workers`` runs and one process."""
    return dataclasses.replace(res, nodes=nodes, ncpus=workers, ngpus=0, mpiprocs=1)


def packed_gpus(res: Resources) -> int:
    """None: PBS allocations pack CPU runs."""
    return 0


def packed_header(res: Resources, job_name: str, folder: str, count: int,
                  settings: Settings) -> list[str]:
    """(PBS writes the job's output where it was submitted from: ``folder``.)"""
    return pbs_header(res, job_name, array_spec(count, None) if count > 1 else None)


def job_exports(res: Resources, resubmit: str | None) -> str:
    """When the walltime comes, the job's id and how soon a cancel is read; with
    ``resubmit``, the script an attempt that ends to restart submits again with qsub (a plain
    job told its entry)."""
    exports = (f"{time_limit_at(res.walltime_seconds)} "
               f'{ENV_JOB_ID}="{JOB_ID}" {ENV_WATCH_CANCEL}={WATCH_CANCEL}')
    if resubmit is not None:
        exports += (f" {ENV_RESUBMIT_SCRIPT}={shlex.quote(resubmit)} "
                    f'{ENV_SCHEDULER}={SIDE.name} {ENV_ENTRY}="$i"')
    return exports


def element_fields(job_id: str, index: int, count: int, script: str, details: dict) -> dict:
    element = job_id if count == 1 else element_id(job_id, index + 1)
    return {"pbs_job_id": element, "array_index": index + 1,
            "script": script, "qstat_json": details["qstat_json"]}


def status_commands(job_ids: Sequence[str], backends: list[dict]) -> list[list[str]]:
    return [pbs_queue.qstat_command(job_ids, pbs_queue.with_json(backends))]


def output_place(backend: dict) -> tuple[str, str] | None:
    folder = posixpath.dirname(backend.get("script", ""))
    return (folder, "PBS's output files (NAME.oID) in {}") if folder else None


def stops_by_record(backend: dict) -> bool:
    """Front ends without JSON output may not name array elements (Slurm's cannot: their qdel
    would end the whole array): there an element is stopped by its record alone."""
    return "[" in backend["pbs_job_id"] and not backend.get("qstat_json")


def broadcast(archive: str, target: str, unpack: str, fail: str) -> list[str]:
    """One mpiexec rank per node copies and unpacks."""
    copy = ("mpiexec --np \"$(sort -u \"$PBS_NODEFILE\" | wc -l)\" --ppn 1 bash -c "
            + shlex.quote(f"cp {shlex.quote(archive)} {shlex.quote(target + '.tar.gz')} "
                          f"&& {unpack}"))
    return [f"{copy} || {{ {fail.format(what='copying the environment')}; }}"]


class Pbs(Scheduler, Shells, Packing, Broadcast):
    """PBS as the modes use it: the functions above (PBS warns no one before the walltime: the
    job script tells the job side when it is, :func:`job_exports`)."""

    NAME = "PBS"
    SIDE = SIDE
    OPTIONS = OPTIONS
    SCRIPT_SUFFIX = ".pbs"
    PACKERS_PER_NODE = False  # (an allocation's packer runs on its first node)
    resources = staticmethod(resources)
    every_rank = staticmethod(every_rank)
    preflight_ops = staticmethod(preflight_ops)
    cluster_facts = staticmethod(cluster_facts)
    read_nodes = staticmethod(read_nodes)
    fit = staticmethod(fit)
    array_header = staticmethod(array_header)
    node_workers = staticmethod(node_workers)
    packed = staticmethod(packed)
    packed_gpus = staticmethod(packed_gpus)
    packed_header = staticmethod(packed_header)
    job_exports = staticmethod(job_exports)
    parse_submit = staticmethod(parse_submit)
    element_fields = staticmethod(element_fields)
    status_commands = staticmethod(status_commands)
    read_states = staticmethod(pbs_queue.read_states)
    read_waits = staticmethod(pbs_queue.read_waits)
    output_place = staticmethod(output_place)
    stops_by_record = staticmethod(stops_by_record)
    cancel_command = staticmethod(cancel_command)
    shell_lookup = staticmethod(exec_host_command)
    shell_argv = staticmethod(node_shell)
    interactive_argv = staticmethod(interactive_job)
    broadcast = staticmethod(broadcast)


SCHEDULER = Pbs()
