"""Warm pools: workers held on this machine, or in a Slurm or PBS allocation, that take
sweeps as they come.

```python
from easylaunch import run_sweep, start_pool

start_pool("quick", workers=4, preload=["torch"], idle="20m")
jobs = run_sweep(train, variants, mode="local", pool="quick")  # starts in milliseconds
```

A pool is a packer that stays (``easylaunch_job.pool``): its warm workers have imported the
``preload`` modules once, and fork a child per run, which loads the run's own code afresh. A
launch into the pool adds its runs to the pool's task file and wakes it: no process starts. The
pool ends after ``idle`` with no run, or at ``stop_pool``. Its runs are ``local`` runs with
``detach=True``: tracked, followed and cancelled as those are.

``start_pool(..., on="slurm", time_limit="8h")`` holds one Slurm allocation instead
(SLURM_CONFIGS' ``cpu`` entry, or with ``gpus`` its ``gpu`` one: partition, account, QOS), its
packer on the node; ``on="pbs"`` holds a PBS job (PBS_CONFIGS'; :mod:`.pool_jobs`). The
pool's folder is in LOCAL_LOG_DIR, which the nodes share (as for ``mode="slurm"`` on a login
node): a launch appends there, and the packer looks for new runs every 50 ms.
``on="allocation"`` starts the packer in the allocation this process runs in (inside
``salloc``: a job step; inside a PBS job: on this node), and no job is submitted.

``cluster="hpc"`` (a CLUSTERS name or an ssh destination) does all of it on that machine, from
this one: the pool's folder is in the cluster's log_dir, and each command is one round trip
over the SSH connection (``run_sweep(..., pool="nodes", cluster="hpc")``).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from easylaunch.errors import LaunchError, check_count, did_you_mean
from easylaunch.modes import hosts
from easylaunch.modes.hosts.transport import Transport, checked
from easylaunch.modes.local import pool_jobs
from easylaunch.modes.local.machine import local_gpu_ids
from easylaunch.modes.schedulers import Scheduler, pbs, slurm
from easylaunch.runs.jobpack import job_archive
from easylaunch.settings import ConfigArg, Settings, load_settings
from easylaunch_job import pool as layout
from easylaunch_job.records import JOB_PYZ, write_bytes_atomic

TYPE_CHECKING = False  # (as typing's, which type checkers read so)
if TYPE_CHECKING:
    from typing import Literal

    from easylaunch_job.host_ops import PoolOp

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class PoolState:
    """A pool as ``pool ls`` shows it."""

    name: str
    folder: str  # on the machine that holds it
    workers: int
    preload: list[str]
    idle_seconds: float
    started_at: float
    ended: str | None  # why it ended; None while it takes runs
    busy: int | None  # runs running now (None: not counted, as for a launch's check)
    queued: int | None  # runs added and not started yet
    done: int | None  # runs ended
    where: str  # the machine, or its allocation: its job, node and time left
    gpus: int = 0

    @property
    def free(self) -> int | None:
        """Workers with no run now (None: not counted)."""
        return None if self.busy is None else max(0, self.workers - self.busy)


def seconds(value: str | float, what: str) -> float:
    """A duration as ``20m``, ``8h``, ``90s`` or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    found = DURATION.fullmatch(str(value).strip())
    if not found or float(found[1]) <= 0:
        raise LaunchError(f"{what}={value!r}: give a duration such as '20m', '8h' or '90s'")
    return float(found[1]) * UNITS[found[2]]


def holder(settings: Settings, cluster: str | None) -> tuple[Transport, str]:
    """The machine that holds the pools (this one, or ``cluster`` over SSH), and the log root
    they are under there."""
    transport = hosts.transport_to(settings, cluster, settings.LOCAL_PYTHON or sys.executable)
    return transport, pools_root(settings, transport)


def pools_root(settings: Settings, transport: Transport) -> str:
    """The log root the pools are under on the machine ``transport`` reaches: a cluster's
    log_dir, else LOCAL_LOG_DIR."""
    if not transport.is_local and transport.log_dir:
        return transport.log_dir
    return os.path.expanduser(os.fspath(settings.LOCAL_LOG_DIR))


def _ask(transport: Transport, root: str, action: Literal["find", "list", "stop"],
         name: str | None = None) -> dict:
    """A pool command where the pools are (see easylaunch_job.pool.command)."""
    op: PoolOp = {"op": "pool", "action": action, "root": root}
    if name is not None:
        op["name"] = name
    (said,) = checked(transport.run_ops([op]), transport.where)
    return said


def _state(said: dict, transport: Transport) -> PoolState:
    meta = said["meta"]
    return PoolState(meta["name"], said["folder"], meta["workers"], meta["preload"],
                     meta["idle_seconds"], meta["started_at"], said["ended"], said["busy"],
                     said["queued"], said["done"], said["where"] or transport.where,
                     meta.get("gpus", 0))


def live_pool(transport: Transport, root: str, name: str) -> PoolState:
    """The running pool ``name``; refused, with what to do, where there is none."""
    said = _ask(transport, root, "find", name)
    start = f"easylaunch pool start {name}"
    if said.get("missing"):
        hint = did_you_mean(name, said["known"])  # (a typo: no advice to start it)
        raise LaunchError(f"no pool named {name!r} on {transport.where}"
                          + (hint or f"; start one: {start}"))
    pool = _state(said, transport)
    if pool.ended is not None:
        raise LaunchError(f"pool {name!r} has ended: {pool.ended}; start it again: {start}")
    return pool


def start_pool(name: str, *, workers: int | None = None, preload: list[str] | None = None,
               learn: bool = False, idle: str | float = "20m", on: str = "local",
               time_limit: str | float = "1h", gpus: int = 0, cluster: str | None = None,
               runs_left: str = "pool", config: ConfigArg = None) -> PoolState:
    """Start a warm pool that takes runs in milliseconds.

    ```python
    start_pool("quick", workers=4, preload=["torch"], idle="20m")
    run_sweep(train, variants, mode="local", pool="quick")
    ```

    Args:
        name: The pool's name; launches name it with ``pool=``.
        workers: How many runs run at once. Default: one per CPU here; 1 on a scheduler.
        preload: Modules each worker imports once, before it forks a run.
        learn: Each worker also imports the installed libraries (modules from
            site-packages) that earlier runs of the pool imported, before its next run.
            Your own code still loads in each run; a library you reinstall needs a new pool.
        idle: The pool ends after this long with no run ("20m", "1h", or seconds).
        on: Where the workers run. ``"local"``: this machine. ``"slurm"``: an allocation
            of its own, of ``workers`` CPUs and ``gpus`` GPUs, for ``time_limit``. At its
            time limit it goes on in a new allocation with the runs left. ``"pbs"``: a
            PBS job of its own, from PBS_CONFIGS; it goes on likewise at its walltime.
            ``"allocation"``: the allocation this process runs in (inside ``salloc``,
            ``qsub -I`` or a batch job): a job step of a Slurm one, the packer itself on
            this node of a PBS one; no job is submitted.
        time_limit: How long a Slurm or PBS allocation is held ("8h", or seconds).
        gpus: GPUs, one a worker: of the allocation on a scheduler; of this machine
            with ``on="local"`` (LOCAL_GPU_IDS, else those it shows). Default workers: one
            a GPU.
        cluster: A CLUSTERS name or ssh destination: the pool is started there, over SSH.
        runs_left: Where the runs left at the time limit's warning go on. ``"pool"``: a
            new allocation of the pool. ``"jobs"``: each in a Slurm or PBS job of its own
            (one CPU, one GPU with ``gpus``), as ``mode="slurm"`` or ``"pbs"`` submits
            runs; the pool then ends.
        config: A settings file or dict, as for ``run_experiment``.

    Returns:
        The pool as ``list_pools`` shows it.

    Raises:
        LaunchError: A bad option, a pool of that name already running, or an allocation
            its partition cannot give (with sinfo's numbers).
    """
    settings = load_settings(config)
    held = _check_pool(name, on, workers, preload or [], gpus, cluster, runs_left)
    here = on == "local" and cluster is None
    gpus_here = _gpus_here(settings, gpus) if here and gpus else []
    idle_seconds = seconds(idle, "idle")
    modules = list(preload or [])
    transport, root = holder(settings, cluster)
    said = _ask(transport, root, "find", name)
    if not said.get("missing") and said["ended"] is None:
        raise LaunchError(f"pool {name!r} is running already ({said['folder']}); stop it "
                          f"first: easylaunch pool stop {name}")
    count = workers or gpus or ((os.cpu_count() or 1) if here else 1)
    scheduler = pool_jobs.POOL_SCHEDULERS.get(on)  # (None: a packer here, or a job step)
    res = pool_jobs.asked(settings, transport, name, scheduler, count, gpus,
                          seconds(time_limit, "time_limit")) if scheduler else None
    stamp = datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f")
    info, made = checked(transport.run_ops([
        {"op": "info"}, {"op": "prepare_dir", "path": f"{root}/{layout.POOLS}/{name}/{stamp}"}]),
        transport.where)
    folder = made["path"]
    held = held if on == "allocation" else None
    python = _packer_python(settings, transport, held[0] if held else scheduler, info["home"])
    argv = _packer_argv(python, folder, count, idle_seconds, modules, learn, scheduler,
                        runs_left == "jobs")
    if held:
        argv = _inside(held, argv, count, gpus)
    elif gpus_here:
        argv += ["--gpus", ",".join(gpus_here)]
    files = {JOB_PYZ: job_archive(), layout.TASKS: b"", layout.RUNS: b""}
    if scheduler is not None:
        files[pool_jobs.script_name(scheduler)] = pool_jobs.job_script(
            scheduler, res, f"pool-{name}", folder, argv, settings).encode()
    if scheduler is not None and runs_left == "jobs":
        files[pool_jobs.script_name(scheduler, alone=True)] = pool_jobs.job_script(
            scheduler, pool_jobs.one_run(scheduler, res), f"pool-{name}-run", folder,
            _alone_argv(python, folder, scheduler), settings).encode()
    _send(transport, folder, files)
    meta: dict = {"name": name, "workers": count, "preload": modules, "learn": learn,
                  "gpus": gpus, "runs_left": runs_left,
                  "idle_seconds": idle_seconds, "started_at": time.time()}
    if scheduler is not None:
        try:
            meta.update(job_id=pool_jobs.submit(transport, folder, scheduler),
                        scheduler=scheduler.SIDE.name)
        except LaunchError:
            _send(transport, folder, {layout.ENDED: b"its allocation was refused\n"})
            raise
    else:
        (started,) = checked(transport.run_ops([
            {"op": "detach", "argv": argv, "log": f"{folder}/{layout.LOG}"}]), transport.where)
        meta.update(pid=started["pid"], started=started["started"],
                    **({"inside": f"{held[0].NAME} job {held[1]}"} if held else {}))
    _send(transport, folder, {layout.POOL_JSON: json.dumps(meta, indent=1).encode()})
    return _state(_ask(transport, root, "find", name), transport)  # (no run yet to count)


def _packer_python(settings: Settings, transport: Transport, runs_on: Scheduler | None,
                   home: str) -> str:
    """The Python that starts the pool's packer: a cluster's over SSH; else the setting of
    the scheduler it runs on (SLURM_PYTHON, PBS_PYTHON), LOCAL_PYTHON, or this one. A ``~/``
    is made ``home`` (the job script quotes it: no shell expands it there)."""
    python = transport.python if not transport.is_local else \
        (runs_on.python(settings) if runs_on else None) or settings.LOCAL_PYTHON \
        or sys.executable
    return home + python[1:] if python.startswith("~/") else python


def _gpus_here(settings: Settings, gpus: int) -> list[str]:
    """The first ``gpus`` GPUs of this machine, as ``mode="local"`` finds them (LOCAL_GPU_IDS,
    else CUDA_VISIBLE_DEVICES, else nvidia-smi); too few is refused, naming what was found."""
    found = local_gpu_ids(settings.LOCAL_GPU_IDS)
    if len(found) < gpus:
        seen = f"only {', '.join(found)}" if found else "none"
        raise LaunchError(f"gpus={gpus}, but this machine shows {seen} (LOCAL_GPU_IDS, else "
                          "CUDA_VISIBLE_DEVICES, else nvidia-smi): ask fewer, or list its "
                          "GPUs in LOCAL_GPU_IDS")
    return found[:gpus]


def _held() -> tuple[Scheduler, str] | None:
    """The allocation this process runs in: a Slurm job (SLURM_JOB_ID) or a PBS one
    (PBS_JOBID; Slurm's where both are set, as under Slurm's PBS front ends)."""
    for scheduler, variable in ((slurm.SCHEDULER, "SLURM_JOB_ID"), (pbs.SCHEDULER, "PBS_JOBID")):
        if os.environ.get(variable):
            return scheduler, os.environ[variable]
    return None


def _inside(held: tuple[Scheduler, str], argv: list[str], workers: int,
            gpus: int) -> list[str]:
    """The packer's argv in the allocation ``held``: a job step of a Slurm one (srun lives
    here, the packer there); in a PBS one, the packer itself, on this node of the job. With
    ``gpus``, its workers take those the scheduler granted."""
    scheduler, job = held
    granted = ["--gpus", "granted"] * bool(gpus)
    if scheduler is not slurm.SCHEDULER:
        return [*argv, *granted]
    return ["srun", f"--jobid={job}", "--overlap", "--nodes=1", "--ntasks=1",
            f"--cpus-per-task={workers}", *([f"--gres=gpu:{gpus}"] * bool(gpus)), *argv,
            *granted]


def _check_pool(name: str, on: str, workers: int | None, preload: list[str], gpus: int,
                cluster: str | None, runs_left: str) -> tuple[Scheduler, str] | None:
    """Refuse start_pool's options that cannot work, naming the fix; the allocation this
    process runs in, if any (:func:`_held`)."""
    if on not in ("local", "slurm", "pbs", "allocation"):
        raise LaunchError(f"on={on!r}: a pool runs on 'local' (the machine), 'slurm' or "
                          "'pbs' (an allocation of its own) or 'allocation' (the one you "
                          "hold)")
    held = _held()
    if on == "allocation" and (not held or cluster is not None):
        raise LaunchError("on='allocation' starts the pool in the allocation you hold, but "
                          "neither SLURM_JOB_ID nor PBS_JOBID is set: run this inside salloc, "
                          "qsub -I or a batch job" if not held else "on='allocation' is the "
                          "allocation this process runs in: leave cluster out")
    if gpus:
        check_count("gpus", gpus)
        if on == "local" and cluster is not None:
            raise LaunchError("gpus= on a machine reached over SSH without a scheduler: not "
                              "yet. Start the pool there with --on slurm or --on pbs, or "
                              "leave gpus out")
    if runs_left not in ("pool", "jobs"):
        raise LaunchError(f"runs_left={runs_left!r}: the runs left at the time limit go on in "
                          "a new allocation of the pool ('pool'), or each in a job of its own "
                          "('jobs')")
    if runs_left == "jobs" and on not in ("slurm", "pbs"):
        raise LaunchError(f"runs_left='jobs' (--runs-left jobs) sends runs left to Slurm or "
                          f"PBS, but this pool is on={on!r}: add on='slurm' or 'pbs' (--on "
                          "slurm, --on pbs)")
    if not NAME.fullmatch(name):
        raise LaunchError(f"pool name {name!r}: use letters, digits and _.- (64 at most)")
    if workers is not None:
        check_count("workers", workers)
    for module in preload:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
            raise LaunchError(f"preload={module!r} is no module name (as 'torch' or 'numpy')")
    return held


def _packer_argv(python: str, folder: str, workers: int, idle_seconds: float,
                 preload: list[str], learn: bool, going_on: Scheduler | None,
                 alone: bool) -> list[str]:
    """The pool's packer, as its machine starts it (the pool's folder there); ``going_on``:
    the scheduler whose allocation it submits again at its time limit's warning (``alone``:
    a job of its own for each run left, instead)."""
    return [*_packer(python, folder, workers), "--pool-idle", str(idle_seconds),
            *(["--preload", ",".join(preload)] * bool(preload)),
            *(["--learn-preloads"] * learn),
            # (at its time limit's warning, the runs left go on in a new allocation)
            *([] if going_on is None else _going_on(folder, going_on)),
            *(["--alone", f"{folder}/{pool_jobs.script_name(going_on, alone=True)}"]
              if going_on is not None and alone else [])]


def _alone_argv(python: str, folder: str, scheduler: Scheduler) -> list[str]:
    """The packer of a job of its own that a run left at the time limit goes on in
    (``runs_left="jobs"``): that run alone (EASYLAUNCH_CONTINUE names it), with the pool's
    task file, and again in a job of its own at its own time limit."""
    return [*_packer(python, folder, 1), "--shared",
            *_going_on(folder, scheduler, alone=True)]


def _packer(python: str, folder: str, workers: int) -> list[str]:
    """A packer of the pool's task file, with ``workers`` warm workers."""
    return [python, f"{folder}/{JOB_PYZ}", "pack", f"{folder}/{layout.TASKS}", "--state-dir",
            f"{folder}/{layout.TASK_STATE}", "--workers", str(workers), "--runs",
            f"{folder}/{layout.RUNS}", "--warm"]


def _going_on(folder: str, scheduler: Scheduler, alone: bool = False) -> list[str]:
    """The script a stopped allocation submits again for the runs it left, and with what."""
    return ["--resubmit", f"{folder}/{pool_jobs.script_name(scheduler, alone)}",
            "--scheduler", scheduler.SIDE.name]


def _send(transport: Transport, folder: str, files: dict[str, bytes]) -> None:
    """Write ``files`` into ``folder`` there (each whole: a reader never sees half of one)."""
    if transport.is_local:  # (written beside their place and renamed: /tmp may be another
        for rel, data in files.items():  # file system, where a rename cannot go)
            write_bytes_atomic(f"{folder}/{rel}", data)
        return
    with tempfile.TemporaryDirectory(prefix="easylaunch-pool-") as tmp:
        for rel, data in files.items():
            Path(tmp, rel).write_bytes(data)
        transport.push(Path(tmp), sorted(files), folder)


def list_pools(config: ConfigArg = None, everything: bool = False,
               cluster: str | None = None) -> list[PoolState]:
    """The pools started under the log folder.

    Args:
        config: A settings file or dict, as for ``run_experiment``.
        everything: Each name's last start, ended ones too (default: the running ones).
        cluster: A CLUSTERS name or ssh destination: its pools, asked over SSH.

    Returns:
        Each pool: its workers, runs busy, queued and done, where it runs, why it ended.
    """
    transport, root = holder(load_settings(config), cluster)
    found = [_state(said, transport) for said in _ask(transport, root, "list")["pools"]]
    return [p for p in found if everything or p.ended is None]


def stop_pool(name: str, config: ConfigArg = None, cluster: str | None = None) -> PoolState:
    """Stop pool ``name``: it takes no more runs, and its runs are cancelled.

    Args:
        name: The pool's name.
        config: A settings file or dict, as for ``run_experiment``.
        cluster: A CLUSTERS name or ssh destination where the pool runs.

    Returns:
        The pool as it ended. Its running runs got SIGTERM, a stop notice.

    Raises:
        LaunchError: No running pool has that name.
    """
    transport, root = holder(load_settings(config), cluster)
    live_pool(transport, root, name)
    return _state(_ask(transport, root, "stop", name), transport)
