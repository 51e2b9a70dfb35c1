"""Slurm as data and pure functions: resources, batch scripts, commands and their parsing (the
:class:`~easylaunch.modes.schedulers.Scheduler` the modes use, at the end).

What Slurm says about jobs (squeue, sacct, why a job waits) is :mod:`.slurm_queue`'s. Nothing
here runs a command, so everything is testable without a cluster.
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
import re
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from easylaunch.errors import LaunchError, check_count
from easylaunch.modes import launchers
from easylaunch.modes.schedulers import (
    Broadcast,
    Packing,
    Scheduler,
    Shells,
    slurm_queue,
    time_limit_at,
)
from easylaunch.modes.schedulers import nodes as cluster_nodes
from easylaunch.settings.entries import LAUNCH_SOURCE, MEM_PATTERN, check_entry, time_minutes
from easylaunch_job.environment import (
    ENV_RESUBMIT_SCRIPT,
    ENV_SCHEDULER,
    ENV_TIMEOUT_SIGNAL,
    TIMEOUT_SIGNAL,
)
from easylaunch_job.schedulers import SLURM_SIDE, sbatch_job_id

if TYPE_CHECKING:
    from easylaunch.runs.record import LaunchRequest
    from easylaunch.settings import Settings
    from easylaunch_job.host_ops import Op, RunOp

DEFAULT_MAX_ARRAY_SIZE = 1001


@dataclass(frozen=True)
class Resources:
    """What one Slurm job asks for."""

    config_name: str
    account: str | None
    partition: str | None
    n_gpus: int
    cpus_per_task: int
    time_minutes: int
    nodes: int
    tasks: int
    extra_flags: str
    max_cores_per_node: int | None = None
    gpu_type: str = ""  # gres type, as in --gres=gpu:TITAN:1
    mem: str | None = None  # --mem, e.g. "16G"
    qos: str | None = None
    constraint: str | None = None  # node features, e.g. "a100|h100"
    # n_nodes and max_num_cores_per_node both unset: the tasks go on one node until
    # :func:`fit` sizes the nodes from what sinfo says a node has.
    nodes_open: bool = False


def resolve_resources(configs: dict, name: str | None, use_gpu: bool,
                      n_tasks: int = 1) -> Resources:
    """Pick and check one of SLURM_CONFIGS (``name``, else "gpu"/"cpu" by use_gpu)."""
    name = name or ("gpu" if use_gpu else "cpu")
    if name not in configs:
        raise LaunchError(f"slurm_config_name={name!r} is not in SLURM_CONFIGS; known: "
                          f"{', '.join(sorted(configs)) or 'none'}")
    cfg = configs[name]
    where = f"SLURM_CONFIGS[{name!r}]"
    check_entry("SLURM_CONFIGS", name, cfg, LAUNCH_SOURCE, at_launch=True)
    ints: dict[str, Any] = {
        "time_in_mins": time_minutes(cfg.get("time_in_mins"), f"{where}: time_in_mins")}
    for key, default in (("n_gpus", 0), ("n_cpus_per_task", 1),
                         ("max_num_cores_per_node", None), ("n_nodes", None)):
        ints[key] = cfg.get(key, default)
    if ints["n_gpus"] > 0 and not cfg.get("partition"):
        raise LaunchError(f"{where} asks for n_gpus={ints['n_gpus']} but names no partition; "
                          "GPU jobs need a GPU partition: set it in your settings file, "
                          "as SLURM_CONFIGS = {'gpu': {'partition': 'gpu', ...}}")
    if use_gpu and ints["n_gpus"] < 1:
        raise LaunchError(f"use_gpu=True but {where} asks for n_gpus=0; pick a GPU config with "
                          "slurm_config_name or set n_gpus")
    if ints["n_gpus"] > 0 and ints["n_cpus_per_task"] < 2:
        raise LaunchError(f"{where}: a GPU job with n_cpus_per_task={ints['n_cpus_per_task']} "
                          "is refused (as doodad does: the GPU would starve for data loading); "
                          "set n_cpus_per_task to 2 or more")
    nodes = ints["n_nodes"]
    nodes_open = nodes is None and ints["max_num_cores_per_node"] is None
    if nodes_open:
        nodes = 1  # (nothing known of the nodes yet: one node; see fit)
    elif nodes is None:
        nodes = max(1, math.ceil(n_tasks * ints["n_cpus_per_task"]
                                 / ints["max_num_cores_per_node"]))
    extra, gpu_string = cfg.get("extra_flags") or "", cfg.get("gpu_string") or ""
    mem = cfg.get("mem")
    amount = None if mem is None else re.fullmatch(MEM_PATTERN, str(mem))
    # ('' as doodad's configs write it: not set)
    words = {key: cfg.get(key) or None for key in ("account_name", "partition", "qos",
                                                    "constraint")}
    return Resources(name, words["account_name"], words["partition"], ints["n_gpus"],
                     ints["n_cpus_per_task"], ints["time_in_mins"], nodes, n_tasks, extra,
                     ints["max_num_cores_per_node"], gpu_string.lstrip(":"),
                     None if amount is None else amount[1] + amount[2].upper(),
                     words["qos"], words["constraint"], nodes_open)


def check_log_folder(folder: str) -> None:
    """Refuse a folder Slurm cannot name log files in (a backslash turns its patterns off)."""
    if "\\" in folder:
        raise LaunchError(f"{folder!r} holds a backslash, which makes Slurm ignore every "
                          "pattern in a log file name; use log folders without one "
                          "(LOCAL_LOG_DIR, base_log_dir, SLURM_DIRECTORY_FOR_JOB_SCRIPT)")


def output_path(folder: str, pattern: str) -> str:
    """A Slurm ``--output`` path: ``pattern`` (``slurm-%A_%a.out``) in ``folder``, whose own
    ``%`` are escaped so Slurm does not read them as patterns."""
    check_log_folder(folder)
    return f"{folder.rstrip('/').replace('%', '%%')}/{pattern}"


def _directive(*parts: str) -> str:
    return "#SBATCH " + " ".join(parts)


def _quoted(value: str) -> str:
    """Double-quote a #SBATCH value for sbatch's own parser (which reads quotes, backslash
    escapes and # comments); a newline can never be inside."""
    if "\n" in value:
        raise LaunchError(f"{value!r} cannot go into a #SBATCH line (it holds a newline); "
                          "choose a path or name without one")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def sbatch_header(res: Resources, job_name: str, output: str, signal_seconds: int,
                  array: str | None = None) -> list[str]:
    """The #SBATCH lines of a job script (``array`` like ``0-99%10``)."""
    lines = [
        _directive(f"--job-name={_quoted(job_name)}"),
        _directive(f"--output={_quoted(output)}"),
        _directive(f"--time={res.time_minutes}"),
        _directive(f"--nodes={res.nodes}"),
        _directive(f"--ntasks={res.tasks}"),
        _directive(f"--cpus-per-task={res.cpus_per_task}"),
    ]
    if signal_seconds:
        lines.append(_directive(f"--signal=B:{TIMEOUT_SIGNAL}@{signal_seconds}"))
    if res.account:
        lines.append(_directive(f"--account={_quoted(res.account)}"))
    if res.partition:
        lines.append(_directive(f"--partition={_quoted(res.partition)}"))
    if res.n_gpus:
        gres = f"gpu:{res.gpu_type}:{res.n_gpus}" if res.gpu_type else f"gpu:{res.n_gpus}"
        lines.append(_directive(f"--gres={gres}"))
    if res.mem:
        lines.append(_directive(f"--mem={res.mem}"))
    if res.qos:
        lines.append(_directive(f"--qos={_quoted(res.qos)}"))
    if res.constraint:
        lines.append(_directive(f"--constraint={_quoted(res.constraint)}"))
    if array is not None:
        lines.append(_directive(f"--array={array}"))
    if res.extra_flags.strip():
        if "\n" in res.extra_flags:
            raise LaunchError(f"SLURM_CONFIGS[{res.config_name!r}] extra_flags holds a newline")
        lines.append(_directive(res.extra_flags.strip()))
    return lines


def array_spec(count: int, parallelism: int | None) -> str:
    """``0-<count-1>`` with an optional ``%parallelism`` cap."""
    spec = f"0-{count - 1}"
    return f"{spec}%{parallelism}" if parallelism else spec


def parse_submit(stdout: str) -> str:
    """The job id in sbatch's output (``123`` or ``123;cluster``); refused if none."""
    job_id = sbatch_job_id(stdout)
    if not job_id:
        raise LaunchError(f"sbatch did not print a job id: {stdout!r}")
    return job_id


def max_array_size(scontrol_config: str) -> int:
    """MaxArraySize from ``scontrol show config`` output (Slurm's default when it is not
    there)."""
    match = re.search(r"^MaxArraySize\s*=\s*(\d+)", scontrol_config, re.MULTILINE)
    return int(match.group(1)) if match else DEFAULT_MAX_ARRAY_SIZE


def job_command(job_id: str) -> list[str]:
    """scontrol's one-line record of a job or array task (its own job id, state, nodes)."""
    return ["scontrol", "show", "job", "--oneliner", job_id]


def step_into(lookup_out: str, job_id: str, inner: list[str]) -> list[str]:
    """``srun --jobid=J --overlap --pty INNER``: one task on the first node of the running
    job ``job_id`` (an array task by the job id of its own, which srun needs). ``lookup_out``:
    what scontrol said of the job."""
    fields = dict(re.findall(r"(\w+)=(\S*)", lookup_out))
    state = fields.get("JobState") or "unknown to scontrol"
    if state != "RUNNING":
        raise LaunchError(f"Slurm job {job_id} is {state}, not running: there is no node to "
                          "open a shell on")
    return ["srun", f"--jobid={fields['JobId']}", "--overlap", "-N1", "-n1", "--pty", *inner]


def allocation_argv(res: Resources, inner: list[str]) -> list[str]:
    """``salloc RESOURCES srun --pty INNER``: an allocation, a shell on its first node, and
    the allocation's end when the shell ends."""
    argv = ["salloc", "--job-name=interactive", f"--time={res.time_minutes}",
            f"--nodes={res.nodes}", f"--cpus-per-task={res.cpus_per_task}"]
    for flag, value in (("--account", res.account), ("--partition", res.partition),
                        ("--mem", res.mem), ("--qos", res.qos),
                        ("--constraint", res.constraint)):
        if value:
            argv.append(f"{flag}={value}")
    if res.n_gpus:
        argv.append(f"--gres=gpu:{res.gpu_type}:{res.n_gpus}" if res.gpu_type
                    else f"--gres=gpu:{res.n_gpus}")
    return [*argv, *shlex.split(res.extra_flags), "srun", "--overlap", "-N1", "-n1", "--pty",
            *inner]


# -- the Scheduler the modes use ----------------------------------------------------------------

SIDE = SLURM_SIDE
EXPORTS = f"{ENV_TIMEOUT_SIGNAL}={TIMEOUT_SIGNAL}"  # Slurm warns with --signal
# Options of one launch that replace a SLURM_CONFIGS field (option -> field).
RESOURCE_OPTIONS = {"time_in_mins": "time_in_mins", "partition": "partition", "mem": "mem",
                    "account": "account_name", "qos": "qos", "constraint": "constraint",
                    "n_cpus_per_task": "n_cpus_per_task"}
OPTIONS = {"n_nodes": None, "n_gpus": None, "tasks_per_node": None,
           **dict.fromkeys(RESOURCE_OPTIONS)}


def resources(settings: Settings, opts: dict, request: LaunchRequest) -> Resources:
    """The checked SLURM_CONFIGS entry for this request, with this launch's options applied
    (``n_nodes``, ``n_gpus`` per node and ``tasks_per_node``, default the GPUs per node, else
    1, make a run multi-process; the RESOURCE_OPTIONS replace the config's values)."""
    configs = settings.SLURM_CONFIGS
    name = request.slurm_config_name or ("gpu" if request.use_gpu else "cpu")
    given = {option: (field, opts[option])
             for option, field in {"n_nodes": "n_nodes", "n_gpus": "n_gpus",
                                   **RESOURCE_OPTIONS}.items()
             if opts.get(option) is not None}
    overrides = dict(given.values())
    if name in configs and overrides:
        configs = {**configs, name: {**configs[name], **overrides}}
    try:
        res = resolve_resources(configs, name, request.use_gpu)
    except LaunchError as exc:
        if not given:
            raise
        raise LaunchError(f"{exc} (with this launch's " + ", ".join(
            f"{option}={value!r}" for option, (_, value) in given.items()) + ")") from None
    per_node = opts.get("tasks_per_node") or res.n_gpus or 1
    check_count("tasks_per_node", per_node)
    if overrides.get("n_nodes") or per_node > 1:
        res = resolve_resources(configs, name, request.use_gpu, n_tasks=res.nodes * per_node)
    return res


def check(settings: Settings, res: Resources) -> None:
    """The time-limit warning must come before the time limit."""
    if settings.SLURM_SIGNAL_SECONDS >= res.time_minutes * 60:
        raise LaunchError(
            f"SLURM_SIGNAL_SECONDS={settings.SLURM_SIGNAL_SECONDS} is not shorter than the "
            f"time limit ({res.time_minutes} min): the time-limit warning would come at once; "
            "lower it (0 turns the warning off) or raise time_in_mins")


def every_rank(line: str, res: Resources) -> str:
    """``line`` as is for one process, or once per rank through srun, each rank logging to its
    own files."""
    if res.tasks == 1:
        return line
    srun = launchers.srun(res.nodes, res.tasks, res.n_gpus)
    return (f"exec {shlex.join(srun)} --kill-on-bad-exit=1 "
            '--output="${LOG_DIR//%/%%}"/stdout.rank%t.log '
            '--error="${LOG_DIR//%/%%}"/stderr.rank%t.log '
            f"bash -c {shlex.quote(line)}")


def preflight_ops() -> list[Op]:
    return [{"op": "run", "argv": ["scontrol", "show", "config"]},
            {"op": "run", "argv": cluster_nodes.sinfo_command()},
            *slurm_queue.ROOM_OPS]


def cluster_facts(answers: list[dict], where: str) -> tuple[int, dict]:
    """MaxArraySize (array indices stay below it)."""
    return max(1, max_array_size(answers[0]["out"]) - 1), {}


def check_room(res: Resources, jobs: int, answers: list[dict]) -> None:
    """Refuse ``jobs`` more jobs that their QOS would refuse (:func:`.slurm_queue.check_room`
    reads the answers after sinfo's)."""
    slurm_queue.check_room(res.config_name, res.qos, jobs, answers[2:])


def read_nodes(answers: list[dict]) -> list[cluster_nodes.Nodes]:
    """The partitions' nodes, from sinfo's answer to :func:`preflight_ops` (none where sinfo
    failed: nothing is checked then)."""
    sinfo = answers[1]
    return cluster_nodes.parse_sinfo(sinfo["out"]) if sinfo.get("rc") == 0 else []


def fit(res: Resources, nodes: Sequence[cluster_nodes.Nodes], packs: bool) -> Resources:
    """``res`` refused where no node of its partition can give it (CPUs, GPUs and memory a
    node, nodes, the partition's time limit); a run of several tasks that set neither
    n_nodes nor max_num_cores_per_node gets as many nodes as its tasks' CPUs need of the
    partition's smallest node; ``packs`` (htp): max_num_cores_per_node is
    what one allocation asks of a node, and defaults to what the partition's smallest node
    has."""
    where = f"SLURM_CONFIGS[{res.config_name!r}]"
    chosen = cluster_nodes.partition(nodes, res.partition, where)
    if not chosen:
        return res
    if res.nodes_open and res.tasks > 1:  # as many nodes as the tasks' CPUs need
        fits = max(1, min(n.cpus for n in chosen) // res.cpus_per_task)
        res = dataclasses.replace(res, nodes=-(-res.tasks // fits))
    per_node = -(-res.tasks // res.nodes)
    ask = cluster_nodes.Ask(
        where, (per_node * res.cpus_per_task,
                "n_cpus_per_task" if per_node == 1 else "n_cpus_per_task or tasks_per_node"),
        (res.n_gpus, "n_gpus"), res.gpu_type,
        (None if res.mem is None else cluster_nodes.memory_mb(res.mem), "mem"),
        (res.time_minutes, "time_in_mins"), (res.nodes, "n_nodes"))
    cluster_nodes.check_fits(ask, chosen)
    if not packs:
        return res
    if res.max_cores_per_node is None:
        return dataclasses.replace(res, max_cores_per_node=min(n.cpus for n in chosen))
    cluster_nodes.check_fits(dataclasses.replace(
        ask, cpus=(res.max_cores_per_node, "max_num_cores_per_node (or leave it out: htp "
                   "then uses what a node has)")), chosen)
    return res


def array_header(res: Resources, job_name: str, script: str, count: int,
                 parallelism: int | None, settings: Settings) -> list[str]:
    return sbatch_header(res, job_name=job_name,
                         output=output_path(posixpath.dirname(script), "slurm-%A_%a.out"),
                         signal_seconds=settings.SLURM_SIGNAL_SECONDS,
                         array=array_spec(count, parallelism))


def node_workers(res: Resources) -> int | None:
    return res.max_cores_per_node // res.cpus_per_task if res.max_cores_per_node else None


def packed(res: Resources, nodes: int, workers: int) -> Resources:
    """One task (a packer) a node, with the cores (and GPUs) of its ``workers`` runs."""
    return dataclasses.replace(res, nodes=nodes, tasks=nodes, n_gpus=workers * res.n_gpus,
                               cpus_per_task=workers * res.cpus_per_task)


def packed_gpus(res: Resources) -> int:
    """The GPUs a node of a packed allocation has for its runs."""
    return res.n_gpus


def packed_header(res: Resources, job_name: str, folder: str, count: int,
                  settings: Settings) -> list[str]:
    return sbatch_header(res, job_name=job_name,
                         output=output_path(folder, "htp-%A_%a.out" if count > 1
                                            else "htp-%j.out"),
                         signal_seconds=settings.SLURM_SIGNAL_SECONDS,
                         array=array_spec(count, None) if count > 1 else None)


def job_exports(res: Resources, resubmit: str | None) -> str:
    """The time-limit signal's name, and when the time limit comes: Slurm ends a job at its
    limit with SIGTERM, as scancel does, so a SIGTERM from then on is a timeout (without a
    warning signal, SLURM_SIGNAL_SECONDS=0, nothing else tells them apart). With ``resubmit``,
    the script an attempt that ends to restart submits again for its element."""
    exports = f"{EXPORTS} {time_limit_at(res.time_minutes * 60)}"
    if resubmit is None:
        return exports
    return f"{exports} {ENV_RESUBMIT_SCRIPT}={shlex.quote(resubmit)} {ENV_SCHEDULER}={SIDE.name}"


def submit_op(script: str) -> RunOp:
    return {"op": "run", "argv": SIDE.command(script)}


def element_fields(job_id: str, index: int, count: int, script: str, details: dict) -> dict:
    folder = script.rsplit("/", 1)[0]
    return {"slurm_job_id": f"{job_id}_{index}", "array_index": index, "script": script,
            "slurm_output": f"{folder}/slurm-{job_id}_{index}.out"}


def status_commands(job_ids: Sequence[str], backends: list[dict]) -> list[list[str]]:
    """squeue and sacct, asked together (one round trip to a remote cluster)."""
    return [slurm_queue.squeue_command(job_ids), slurm_queue.sacct_command(job_ids)]


def read_states(job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
                backends: list[dict]) -> dict[str, str | None]:
    return slurm_queue.states_from(job_ids, *answers)


def read_waits(job_ids: Sequence[str], answers: list[subprocess.CompletedProcess],
               backends: list[dict]) -> dict[str, str]:
    """Why each of ``job_ids`` that is queued waits (squeue's answer has the same form
    whatever the jobs' records say)."""
    waits = slurm_queue.parse_waits(answers[0].stdout)
    return {job_id: waits[job_id] for job_id in job_ids if job_id in waits}


read_exits = slurm_queue.read_exits


def output_place(backend: dict) -> tuple[str, str] | None:
    output = backend.get("slurm_output")
    return (output, "Slurm's output {}") if output else None




def broadcast(archive: str, target: str, unpack: str, fail: str) -> list[str]:
    """sbcast to node-local ``target``, then one srun task per node unpacks it."""
    sbcast = shlex.join(["sbcast", "--force", archive, f"{target}.tar.gz"])
    per_node = ('srun --ntasks-per-node=1 -N "$SLURM_JOB_NUM_NODES" '
                f'-n "$SLURM_JOB_NUM_NODES" bash -c {shlex.quote(unpack)}')
    return [f"{sbcast} || {{ {fail.format(what='sbcast of the packed environment')}; }}",
            f"{per_node} || {{ {fail.format(what='unpacking the environment')}; }}"]


class Slurm(Scheduler, Shells, Packing, Broadcast):
    """Slurm as the modes use it: the functions above."""

    NAME = "Slurm"
    SIDE = SIDE
    OPTIONS = OPTIONS
    OTHER_WAYS = ", or use mode='sss' to write job scripts to copy"
    SCRIPT_SUFFIX = ".sbatch"
    PACKERS_PER_NODE = True  # (srun starts one on each node)
    resources = staticmethod(resources)
    check = staticmethod(check)
    check_folder = staticmethod(check_log_folder)
    every_rank = staticmethod(every_rank)
    preflight_ops = staticmethod(preflight_ops)
    cluster_facts = staticmethod(cluster_facts)
    check_room = staticmethod(check_room)
    read_nodes = staticmethod(read_nodes)
    fit = staticmethod(fit)
    array_header = staticmethod(array_header)
    node_workers = staticmethod(node_workers)
    packed = staticmethod(packed)
    packed_gpus = staticmethod(packed_gpus)
    packed_header = staticmethod(packed_header)
    job_exports = staticmethod(job_exports)
    submit_op = staticmethod(submit_op)
    parse_submit = staticmethod(parse_submit)
    element_fields = staticmethod(element_fields)
    status_commands = staticmethod(status_commands)
    read_states = staticmethod(read_states)
    read_waits = staticmethod(read_waits)
    read_exits = staticmethod(read_exits)
    output_place = staticmethod(output_place)
    reason_command = staticmethod(slurm_queue.reason_command)
    parse_reason = staticmethod(slurm_queue.parse_reason)
    cancel_command = staticmethod(slurm_queue.cancel_command)
    shell_lookup = staticmethod(job_command)
    shell_argv = staticmethod(step_into)
    interactive_argv = staticmethod(allocation_argv)
    broadcast = staticmethod(broadcast)


SCHEDULER = Slurm()
