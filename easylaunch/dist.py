"""Use every accelerator a job was given, on whichever machine it lands (after ALCF's ezpz).

Usable inside any job, launched by easylaunch or not: which scheduler this is, the hosts and
GPUs of the job, the command that starts a program on all of them, and ``setup_torch`` for
torch.distributed. Everything reads an environment mapping, so it is testable anywhere.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from easylaunch.errors import EasyLaunchError, needed
from easylaunch.modes import launchers
from easylaunch.modes.local.machine import local_gpu_ids
from easylaunch.modes.schedulers.slurm_queue import run_command
from easylaunch_job.environment import (
    LOCAL_RANK_VARS,
    RANK_VARS,
    WORLD_SIZE_VARS,
    first_int,
    rank_info,
)

GPU_COUNT_VARS = ("NGPU_PER_HOST", "SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE")
DEFAULT_MASTER_PORT = 29500


class DistError(EasyLaunchError):
    """The job's layout cannot be worked out, or does not add up."""


def _env(env: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if env is None else env


def detect_scheduler(env: Mapping[str, str] | None = None,
                     which: Callable[[str], str | None] | None = None) -> str:
    """"pbs", "slurm" or "none": the job's variables first, then the commands on PATH.

    Args:
        env: The environment to read (None: ``os.environ``).
        which: What finds a command on PATH (None: ``shutil.which``).

    Returns:
        ``"pbs"``, ``"slurm"`` or ``"none"``.
    """
    env = _env(env)
    which = which or shutil.which
    if env.get("PBS_JOBID"):
        return "pbs"
    if env.get("SLURM_JOB_ID"):
        return "slurm"
    if which("qsub"):
        return "pbs"
    if which("sbatch"):
        return "slurm"
    return "none"


def workdir(env: Mapping[str, str] | None = None) -> str:
    """PBS_O_WORKDIR, then SLURM_SUBMIT_DIR, then the current directory."""
    env = _env(env)
    return env.get("PBS_O_WORKDIR") or env.get("SLURM_SUBMIT_DIR") or os.getcwd()


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"[": 1, "]": -1}.get(char, 0)
        if depth < 0:
            raise DistError(f"unbalanced ']' in node list {text!r}")
        current += char
    if depth:
        raise DistError(f"unbalanced '[' in node list {text!r}")
    return [p for p in [*parts, current] if p]


def _expand_range(spec: str, text: str) -> list[str]:
    names = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise DistError(f"cannot read range {part!r} in node list {text!r}")
        width = len(low)
        names += [str(i).zfill(width) for i in range(int(low), int(high or low) + 1)]
    return names


def expand_nodelist(text: str) -> list[str]:
    """Slurm's compressed host list as names: ``gpu-[01-03,07],cpu5`` -> 4 + 1 names.

    Args:
        text: ``"gpu-[01-03,07],cpu5"``: a host list as SLURM_JOB_NODELIST holds it.

    Returns:
        The host names, in order.

    Raises:
        DistError: A bracket is unbalanced, or a range cannot be read.
    """
    hosts = []
    for item in _split_top_level(text.strip()):
        pieces = re.split(r"(\[[^\]]*\])", item)
        choices = [_expand_range(p[1:-1], text) if p.startswith("[") else [p]
                   for p in pieces if p]
        hosts += ["".join(combo) for combo in product(*choices)]
    return hosts


def _read_hostfile(path: str, variable: str) -> list[str]:
    try:
        with open(path) as f:
            names = [line.split()[0] for line in f if line.strip()]
    except OSError as exc:
        raise DistError(f"{variable}={path!r} cannot be read ({exc.strerror}); the job's host "
                        "file is missing") from exc
    return list(dict.fromkeys(names))  # one entry per host, in order


def hosts(env: Mapping[str, str] | None = None, scheduler: str | None = None) -> list[str]:
    """The job's hosts: PBS_NODEFILE or HOSTFILE, or Slurm's node list, else this host.

    Args:
        env: The environment to read (None: ``os.environ``).
        scheduler: ``"pbs"``, ``"slurm"`` or ``"none"`` (None: :func:`detect_scheduler`'s).

    Returns:
        The host names, each once, in order.

    Raises:
        DistError: The host file cannot be read.
    """
    env = _env(env)
    scheduler = scheduler or detect_scheduler(env)
    for variable in ("PBS_NODEFILE", "HOSTFILE"):
        if env.get(variable):
            return _read_hostfile(env[variable], variable)
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if scheduler == "slurm" and nodelist:
        out = run_command(["scontrol", "show", "hostnames", nodelist])
        if out.returncode == 0 and out.stdout.split():
            return out.stdout.split()
        return expand_nodelist(nodelist)
    return [os.uname().nodename]


def gpus_per_host(env: Mapping[str, str] | None = None) -> int:
    """GPUs of each host: NGPU_PER_HOST or Slurm's count, else the visible devices.

    Args:
        env: The environment to read (None: ``os.environ``).

    Returns:
        The number of GPUs of each host (0 without any).
    """
    env = _env(env)
    count = first_int(env, GPU_COUNT_VARS)
    if count is not None:
        return count
    return len(local_gpu_ids(env=env))


@dataclass(frozen=True)
class Topology:
    """Where a job runs: its scheduler, hosts and GPUs per host.

    Attributes:
        scheduler: ``"pbs"``, ``"slurm"`` or ``"none"``.
        hosts: The job's host names, in order.
        ngpu_per_host: The GPUs of each host.
        hostfile: The job's host file, PBS_NODEFILE or HOSTFILE (None: neither is set).
    """

    scheduler: str
    hosts: tuple[str, ...]
    ngpu_per_host: int
    hostfile: str | None = None

    @property
    def nhosts(self) -> int:
        """The number of hosts."""
        return len(self.hosts)

    @property
    def ngpus(self) -> int:
        """The GPUs of all the hosts together."""
        return self.nhosts * self.ngpu_per_host


def topology(env: Mapping[str, str] | None = None) -> Topology:
    """The job's topology from its environment.

    Args:
        env: The environment to read (None: ``os.environ``).

    Returns:
        The job's scheduler, hosts, GPUs per host and host file.

    Raises:
        DistError: The job's host file cannot be read.
    """
    env = _env(env)
    scheduler = detect_scheduler(env)
    hostfile = env.get("PBS_NODEFILE") or env.get("HOSTFILE") or None
    return Topology(scheduler, tuple(hosts(env, scheduler)), gpus_per_host(env), hostfile)


def launch_command(argv: Sequence[str], topo: Topology, procs_per_host: int | None = None,
                   total: int | None = None, cpu_bind: str | None = "depth",
                   depth: int | None = None) -> list[str]:
    """The argv that starts ``argv`` once per GPU (or ``procs_per_host``) on every host.

    PBS: ``mpiexec --envall --np N --ppn P --hostfile F --cpu-bind=depth --depth=D``;
    Slurm: ``srun -u -N H -n N [--gpus-per-node=P] [--cpu-bind=B]``; no scheduler:
    ``torchrun --standalone --nproc-per-node=P``.

    Args:
        argv: ``["python", "train.py"]``: the program each process runs, with its arguments.
        topo: The job's topology, from :func:`topology`.
        procs_per_host: Processes on each host (None: one per GPU, else one).
        total: Processes in all (None: ``procs_per_host`` on every host).
        cpu_bind: mpiexec's ``--cpu-bind`` (PBS), or srun's where it is not ``"depth"``.
        depth: PBS: cores of each process (None: this host's cores over the processes).

    Returns:
        The command line: mpiexec's, srun's or torchrun's, then ``argv``.

    Raises:
        DistError: The processes do not fit the job (uneven, too many hosts), a PBS job
            has no host file, or several hosts have no scheduler to start them.
    """
    ppn = procs_per_host or topo.ngpu_per_host or 1
    total = total or topo.nhosts * ppn
    if total % ppn:
        raise DistError(f"{total} processes cannot be spread evenly at {ppn} per host; "
                        "make the total a multiple of the processes per host")
    nhosts = total // ppn
    if nhosts > topo.nhosts:
        raise DistError(f"{total} processes at {ppn} per host need {nhosts} hosts; the job "
                        f"has {topo.nhosts} ({', '.join(topo.hosts)})")
    if topo.scheduler == "pbs":
        if not topo.hostfile:
            raise DistError("a PBS launch needs the job's host file: PBS_NODEFILE (or HOSTFILE) "
                            "is not set")
        depth = depth or max(1, (os.cpu_count() or ppn) // ppn)
        return [*launchers.mpiexec(total, ppn, topo.hostfile, cpu_bind, depth), *argv]
    if topo.scheduler == "slurm":
        return [*launchers.srun(nhosts, total, ppn if topo.ngpu_per_host else 0,
                                None if cpu_bind == "depth" else cpu_bind), *argv]
    if nhosts > 1:
        raise DistError("several hosts without a scheduler: launch from a PBS or Slurm job")
    if argv and os.path.basename(argv[0]).startswith("python"):
        argv = argv[1:]  # torchrun starts the Python itself
    return [*launchers.torchrun(ppn), *argv]


@dataclass(frozen=True)
class DistInfo:
    """This process's place in the job, as set up by :func:`setup_torch`.

    Attributes:
        rank: This process's rank in the job.
        local_rank: This process's rank on its host.
        world_size: The job's processes in all.
        backend: The torch.distributed backend (None: a single process, not initialised).
        device: This process's device: ``"cuda:0"``, ``"xpu:0"`` or ``"cpu"``.
    """

    rank: int
    local_rank: int
    world_size: int
    backend: str | None
    device: str


# How many processes of the job run on this host, by launcher (torchrun, Open MPI, MPICH,
# PALS, Slurm).
LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                   "PALS_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE")


def _backend_and_device(torch: Any, local_rank: int, per_host: int,
                        share_gpus: bool = False) -> tuple[str, str]:
    """The default backend and this rank's device. More processes on a host than GPUs is
    refused (NCCL fails on two ranks sharing a GPU) unless ``share_gpus``, which uses gloo."""
    for kind, backend, accel in (("cuda", "nccl", torch.cuda),
                                 ("xpu", "xccl", getattr(torch, "xpu", None))):
        if accel is None or not accel.is_available():
            continue
        count = accel.device_count()
        if per_host > count and not share_gpus:
            raise DistError(
                f"{per_host} processes on this host but {count} {kind} device(s) visible: "
                f"{backend} cannot put two ranks on one device. Start {count} process(es) per "
                f"host (torchrun --nproc-per-node={count}, or tasks_per_node={count}), or call "
                "setup_torch(share_gpus=True) to share the devices over gloo (slower)")
        return ("gloo" if per_host > count else backend), f"{kind}:{local_rank % count}"
    return "gloo", "cpu"


def setup_torch(backend: str | None = None, env: Mapping[str, str] | None = None,
                share_gpus: bool = False) -> DistInfo:
    """Initialise torch.distributed from whatever launched this process; return its place.

    Rank, local rank and world size come from torchrun, Slurm, Open MPI, MPICH/PMI or PALS
    variables; MASTER_ADDR/MASTER_PORT from the environment or the job's first host. The local
    device is set before ``init_process_group``. A single process needs no init. More
    processes on a host than GPUs raise :class:`DistError` naming both counts, unless
    ``share_gpus`` (then the ranks share the GPUs over gloo).

    Args:
        backend: The torch.distributed backend (None: nccl on CUDA, xccl on XPU, gloo on
            CPU or shared GPUs).
        env: The environment to read (None: ``os.environ``).
        share_gpus: Let more processes than GPUs share them, over gloo.

    Returns:
        This process's rank, local rank, world size, backend and device.

    Raises:
        DistError: More processes than GPUs on a host, or a world size without a rank.
        MissingExtra: torch is not installed (``easylaunch[torch]``).
    """
    torch = needed("torch", "setup_torch", "torch")
    torch_dist = needed("torch.distributed", "setup_torch", "torch", "torch")
    env = dict(_env(env))
    rank, local_rank, world_size = rank_info(env)
    found_rank = first_int(env, RANK_VARS) is not None
    per_host = max(first_int(env, LOCAL_SIZE_VARS) or 1, local_rank + 1)
    default_backend, device = _backend_and_device(torch, local_rank, per_host, share_gpus)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
    elif device.startswith("xpu"):
        torch.xpu.set_device(device)
    if world_size == 1:
        return DistInfo(0, 0, 1, None, device)
    if not found_rank:
        raise DistError(f"world size {world_size} but no rank: looked for {', '.join(RANK_VARS)}"
                        f" (local rank: {', '.join(LOCAL_RANK_VARS)}; world size: "
                        f"{', '.join(WORLD_SIZE_VARS)})")
    os.environ.setdefault("MASTER_ADDR", env.get("MASTER_ADDR") or hosts(env)[0])
    job = first_int(env, ("SLURM_JOB_ID",)) or 0
    os.environ.setdefault("MASTER_PORT", env.get("MASTER_PORT")
                          or str(DEFAULT_MASTER_PORT + job % 1000))
    backend = backend or default_backend
    if not torch_dist.is_initialized():
        torch_dist.init_process_group(backend=backend, rank=rank, world_size=world_size)
    return DistInfo(rank, local_rank, world_size, backend, device)
