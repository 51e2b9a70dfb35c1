"""What a cluster's nodes can give (CPUs, GPUs, memory, a partition's time limit), read from
``sinfo`` (Slurm) or ``pbsnodes -a`` (PBS), and the check that refuses, at launch, a request
no node can meet (it would wait in the queue forever). Pure functions: the preflight asks
the commands, in the round trip it makes anyway."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from easylaunch.errors import LaunchError
from easylaunch.settings.entries import slurm_seconds

# One line a partition and node configuration: name (* marks the default), CPUs, memory
# (MB), generic resources, time limit, node count. --exact: no "2+" minimums for mixed nodes.
SINFO_FORMAT = "%P|%c|%m|%G|%l|%D"
MEMORY_UNITS = {"B": 1 / 1024 ** 2, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 ** 2}  # -> MB
_MEMORY = re.compile(r"(\d+)\s*([KMGT]?)(i?B)?", re.IGNORECASE)


@dataclass(frozen=True)
class Nodes:
    """``count`` nodes of one partition (or queue) that have the same CPUs, memory, GPUs."""

    partition: str
    count: int
    cpus: int
    memory_mb: int | None  # None: not said
    gpus: dict[str, int] = field(default_factory=dict)  # GPU type ("": any) -> GPUs a node
    max_minutes: int | None = None  # the partition's time limit (None: none)
    default: bool = False  # the partition jobs go to when they name none


@dataclass(frozen=True)
class Ask:
    """What a job asks of one node, each with the setting that sets it (for messages)."""

    where: str  # "SLURM_CONFIGS['cpu']"
    cpus: tuple[int, str]
    gpus: tuple[int, str] = (0, "n_gpus")
    gpu_type: str = ""
    memory_mb: tuple[int | None, str] = (None, "mem")
    minutes: tuple[int, str] | None = None
    nodes: tuple[int, str] = (1, "n_nodes")


def sinfo_command() -> list[str]:
    """sinfo for every partition (hidden ones too), one line a kind of node."""
    return ["sinfo", "--noheader", "--exact", "--all", f"--format={SINFO_FORMAT}"]


def _digits(text: str) -> int | None:
    match = re.match(r"\d+", text.strip())
    return int(match.group()) if match else None


def parse_gres(text: str) -> dict[str, int]:
    """GPUs a node has by type (``""``: all of them) from sinfo's %G: ``gpu:a100:4(S:0-1)``,
    ``gpu:2,mps:100``, ``(null)``."""
    gpus: dict[str, int] = {}
    for item in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = item.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        count, kind = int(parts[-1]), parts[1] if len(parts) > 2 else ""
        gpus[""] = gpus.get("", 0) + count
        if kind:
            gpus[kind] = gpus.get(kind, 0) + count
    return gpus


def slurm_minutes(text: str) -> int | None:
    """A time limit as sinfo prints it (``infinite``, ``30:00``, ``1-00:00:00``) in minutes
    (None: no limit)."""
    seconds = slurm_seconds(text)
    return None if seconds is None else math.ceil(seconds / 60)


def parse_sinfo(stdout: str) -> list[Nodes]:
    """The kinds of node of each partition from :func:`sinfo_command` output."""
    found = []
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) != 6 or (cpus := _digits(parts[1])) is None:
            continue
        name, _, memory, gres, limit, count = parts
        found.append(Nodes(name.strip().rstrip("*"), _digits(count) or 1, cpus,
                           _digits(memory), parse_gres(gres), slurm_minutes(limit),
                           name.strip().endswith("*")))
    return found


def parse_pbsnodes(stdout: str) -> list[Nodes]:
    """Each node of ``pbsnodes -a`` (PBS Pro's ``resources_available.*``; Torque's and Slurm's
    front end's ``np``, ``gpus`` and ``status = ...ncpus=N,...availmem=Nmb``)."""
    found = []
    for block in re.split(r"\n\s*\n", stdout.strip()):
        attrs = dict(re.findall(r"^\s+([\w.]+) = (.*)$", block, re.MULTILINE))
        status = dict(re.findall(r"(\w+)=([^,]*)", attrs.get("status", "")))
        cpus = _digits(attrs.get("resources_available.ncpus") or attrs.get("np")
                       or status.get("ncpus") or "")
        if cpus is None:
            continue
        memory = attrs.get("resources_available.mem") or status.get("availmem") \
            or status.get("physmem") or ""
        gpus = _digits(attrs.get("resources_available.ngpus") or attrs.get("gpus") or "0")
        found.append(Nodes("", 1, cpus, memory_mb(memory), {"": gpus} if gpus else {}))
    return found


def memory_mb(text: str) -> int | None:
    """``8000mb``, ``196608000kb``, ``16G``, ``16000`` (Slurm's MB) in MB (None: not an
    amount)."""
    match = _MEMORY.fullmatch(str(text).strip())
    if not match:
        return None
    unit = match.group(2).upper() or ("B" if match.group(3) else "M")  # (bare: Slurm's MB)
    return int(int(match.group(1)) * MEMORY_UNITS[unit])


def partition(nodes: Sequence[Nodes], name: str | None, where: str) -> list[Nodes]:
    """The nodes of partition ``name`` (None: the default one; ``"a,b"``: those of each, as
    Slurm takes a list); refused when the cluster has no such partition."""
    if not name:
        return [n for n in nodes if n.default]
    names = [part.strip() for part in name.split(",")]
    chosen = [n for n in nodes if n.partition in names]
    missing = [part for part in names if not any(n.partition == part for n in nodes)]
    if not missing or not nodes:
        return chosen
    known = ", ".join(sorted({n.partition for n in nodes}))
    raise LaunchError(f"{where}: partition {missing[0]!r} does not exist on the cluster; its "
                      f"partitions: {known}")


def check_fits(ask: Ask, nodes: Sequence[Nodes], what: str = "partition") -> None:
    """Refuse ``ask`` where no node of ``nodes`` (one partition's or several's, or all a PBS
    server has) can give it, naming the numbers and the setting to change; of several
    partitions, one that can give it is enough (the first one's refusal is said). No nodes:
    nothing to check."""
    groups: dict[str, list[Nodes]] = {}
    for node in nodes:
        groups.setdefault(node.partition, []).append(node)
    refusals = []
    for group in groups.values():
        try:
            _check_fits(ask, group, what)
            return
        except LaunchError as exc:
            refusals.append(exc)
    if refusals:
        raise refusals[0]


def _check_fits(ask: Ask, nodes: Sequence[Nodes], what: str) -> None:
    part = nodes[0].partition
    place = f"the nodes of {what} {part!r}" if part else "the cluster's nodes"
    (cpus, cpus_key), (gpus, gpus_key), (memory, memory_key) = ask.cpus, ask.gpus, ask.memory_mb
    kind = f"{ask.gpu_type} GPUs" if ask.gpu_type else "GPUs"

    def refuse(asked: int, most: int, unit: str, key: str) -> LaunchError:
        return LaunchError(f"{ask.where} asks {asked} {unit}, but {place} have at most "
                           f"{most}: lower {key} to {most} or less (or pick a {what} with "
                           "bigger nodes); the job would wait forever")

    if cpus > max(n.cpus for n in nodes):
        raise refuse(cpus, max(n.cpus for n in nodes), "CPUs on a node", cpus_key)
    if gpus > max(n.gpus.get(ask.gpu_type, 0) for n in nodes):
        raise refuse(gpus, max(n.gpus.get(ask.gpu_type, 0) for n in nodes),
                     f"{kind} on a node", gpus_key)
    known = [n.memory_mb for n in nodes if n.memory_mb is not None]
    if memory is not None and known and memory > max(known):
        raise refuse(memory, max(known), "MB of memory on a node", memory_key)
    able = sum(n.count for n in nodes if n.cpus >= cpus and n.gpus.get(ask.gpu_type, 0) >= gpus
               and (memory is None or n.memory_mb is None or n.memory_mb >= memory))
    if ask.nodes[0] > able:
        raise refuse(ask.nodes[0], able, f"nodes of {cpus} CPUs, {gpus} {kind}"
                     + (f" and {memory} MB" if memory is not None else ""), ask.nodes[1])
    limit = nodes[0].max_minutes
    if ask.minutes is not None and limit is not None and ask.minutes[0] > limit:
        raise LaunchError(f"{ask.where} asks {ask.minutes[0]} minutes, but {what} {part!r} "
                          f"allows at most {limit}: lower {ask.minutes[1]} to {limit} or less; "
                          "the job would wait forever")
