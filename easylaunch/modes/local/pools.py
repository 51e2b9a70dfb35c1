"""Warm pools: workers held on this machine, or in a Slurm allocation, that take sweeps as
they come.

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
packer on the node. The pool's folder is in LOCAL_LOG_DIR, which the nodes share (as for
``mode="slurm"`` on a login node): a launch appends there, and the packer looks for new runs
every 50 ms. ``on="allocation"`` starts the packer as a job step of the allocation this
process runs in (inside ``salloc``): no job is submitted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from easylaunch.errors import LaunchError, check_count, did_you_mean
from easylaunch.settings import ConfigArg, Settings, load_settings
from easylaunch_job import pool as layout
from easylaunch_job.environment import is_alive
from easylaunch_job.host_ops import answer
from easylaunch_job.records import DamagedRecord, read_json, write_bytes_atomic

TYPE_CHECKING = False  # (as typing's, which type checkers read so)
if TYPE_CHECKING:
    from easylaunch.modes.schedulers.slurm import Resources

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class PoolState:
    """A pool as ``pool ls`` shows it."""

    name: str
    folder: Path
    workers: int
    preload: list[str]
    idle_seconds: float
    started_at: float
    ended: str | None  # why it ended; None while it takes runs
    busy: int  # runs running now
    queued: int  # runs added and not started yet
    done: int  # runs ended
    where: str = "this machine"  # or its Slurm allocation: its job, node and time left


def seconds(value: str | float, what: str) -> float:
    """A duration as ``20m``, ``8h``, ``90s`` or a number of seconds."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    found = DURATION.fullmatch(str(value).strip())
    if not found or float(found[1]) <= 0:
        raise LaunchError(f"{what}={value!r}: give a duration such as '20m', '8h' or '90s'")
    return float(found[1]) * UNITS[found[2]]


def pools_root(settings: Settings) -> Path:
    return Path(os.path.expanduser(os.fspath(settings.LOCAL_LOG_DIR))) / layout.POOLS


def _latest(settings: Settings, name: str) -> Path | None:
    """The folder of the pool's last start (each start has its own: a later pool never
    mistakes an earlier one's runs for its own)."""
    starts = sorted((pools_root(settings) / name).glob("*/" + layout.POOL_JSON))
    return starts[-1].parent if starts else None


def allocations_alive(job_ids: list[str]) -> set[str]:
    """Those of the Slurm jobs ``job_ids`` that are queued or running."""
    out = subprocess.run(["squeue", "-h", "-o", "%A", "-j", ",".join(job_ids)],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 and "Invalid job id" not in out.stderr:
        raise LaunchError(f"squeue could not say whether the pools' allocations run: "
                          f"{out.stderr.strip()}")
    return set(out.stdout.split()) & set(job_ids)


def _packer_alive(meta: dict) -> bool:
    if "job_id" in meta:
        return bool(allocations_alive([meta["job_id"]]))
    return is_alive(meta["pid"], meta["started"])


def _takes_runs(folder: Path) -> bool:
    """Whether the pool in ``folder`` runs and has not ended."""
    try:
        meta = read_json(str(folder / layout.POOL_JSON))
    except (OSError, DamagedRecord):
        return False
    return layout.ended_why(str(folder)) is None and _packer_alive(meta)


def live_pool(settings: Settings, name: str) -> Path:
    """The folder of the running pool ``name``; refused, with what to do, where there is
    none."""
    folder = _latest(settings, name)
    if folder is None:
        known = sorted(p.name for p in pools_root(settings).glob("*") if p.is_dir())
        raise LaunchError(f"no pool named {name!r}{did_you_mean(name, known)}; start one: "
                          f"easylaunch pool start {name}")
    why = layout.ended_why(str(folder))
    if why is None and not _takes_runs(folder):
        why = "its packer is gone (its allocation ended, or the machine restarted)"
    if why is not None:
        raise LaunchError(f"pool {name!r} has ended: {why}; start it again: easylaunch pool "
                          f"start {name}")
    return folder


def start_pool(name: str, *, workers: int | None = None, preload: list[str] | None = None,
               idle: str | float = "20m", on: str = "local", time_limit: str | float = "1h",
               gpus: int = 0, config: ConfigArg = None) -> PoolState:
    """Start pool ``name``: ``workers`` runs at once (default: one per CPU here; on Slurm, 1),
    each worker with the ``preload`` modules imported; it ends after ``idle`` with no run.
    ``on="slurm"``: in an allocation of ``workers`` CPUs and ``gpus`` GPUs (a GPU a worker)
    for ``time_limit``. ``on="allocation"``: in the Slurm allocation this process runs in
    (inside ``salloc`` or a batch job), as a job step of ``workers`` CPUs and ``gpus`` GPUs;
    no job is submitted."""
    settings = load_settings(config)
    if on not in ("local", "slurm", "allocation"):
        raise LaunchError(f"on={on!r}: a pool runs on 'local' (this machine), 'slurm' (an "
                          "allocation of its own) or 'allocation' (the one you hold)")
    held = os.environ.get("SLURM_JOB_ID")
    if on == "allocation" and not held:
        raise LaunchError("on='allocation' starts the pool in the Slurm allocation you hold, "
                          "but SLURM_JOB_ID is not set: run this inside salloc or a batch job")
    if gpus:
        check_count("gpus", gpus)
        if on == "local":
            raise LaunchError("gpus= is for pools on Slurm (on='slurm' or 'allocation'); a "
                              "pool on this machine gives its runs no GPUs yet")
    if not NAME.fullmatch(name):
        raise LaunchError(f"pool name {name!r}: use letters, digits and _.- (64 at most)")
    if workers is not None:
        check_count("workers", workers)
    idle_seconds = seconds(idle, "idle")
    modules = list(preload or [])
    for module in modules:
        if not re.fullmatch(r"[A-Za-z_][\w.]*", module):
            raise LaunchError(f"preload={module!r} is no module name (as 'torch' or 'numpy')")
    running = _latest(settings, name)
    if running is not None and _takes_runs(running):
        raise LaunchError(f"pool {name!r} is running already ({running}); stop it first: "
                          f"easylaunch pool stop {name}")
    count = workers or ((os.cpu_count() or 1) if on == "local" else 1)
    res = _allocation(settings, name, count, gpus, seconds(time_limit, "time_limit")) \
        if on == "slurm" else None
    from easylaunch.runs.jobpack import job_archive  # (late: the CLI's other commands skip it)

    folder = pools_root(settings) / name / datetime.now().strftime("%Y-%m-%d_%H-%M-%S_%f")
    folder.mkdir(parents=True)
    for empty in (layout.TASKS, layout.RUNS):
        (folder / empty).touch()
    write_bytes_atomic(str(folder / "job.pyz"), job_archive())
    python = (settings.SLURM_PYTHON if on != "local" else None) or settings.LOCAL_PYTHON \
        or sys.executable
    argv = [python, str(folder / "job.pyz"), "pack",
            str(folder / layout.TASKS), "--state-dir", str(folder / layout.TASK_STATE),
            "--workers", str(count), "--runs", str(folder / layout.RUNS), "--warm",
            "--pool-idle", str(idle_seconds), *(["--preload", ",".join(modules)] * bool(modules))]
    if on == "allocation":  # (a job step of the allocation: srun lives here, the packer there)
        argv = ["srun", f"--jobid={held}", "--overlap", "--nodes=1", "--ntasks=1",
                f"--cpus-per-task={count}", *([f"--gres=gpu:{gpus}"] * bool(gpus)), *argv,
                *(["--gpus", "granted"] * bool(gpus))]
    meta: dict = {"name": name, "workers": count, "preload": modules, "gpus": gpus,
                  "idle_seconds": idle_seconds, "started_at": time.time()}
    if res is not None:
        meta["job_id"] = _submit(res, name, folder, argv)
    else:
        (started,) = answer([{"op": "detach", "argv": argv, "log": str(folder / layout.LOG)}])
        meta.update(pid=started["pid"], started=started["started"])
    write_bytes_atomic(str(folder / layout.POOL_JSON), json.dumps(meta, indent=1).encode())
    return _state(folder)


def _allocation(settings: Settings, name: str, workers: int, gpus: int,
                limit: float) -> Resources:
    """What the pool's allocation asks (SLURM_CONFIGS' cpu or gpu entry, with the pool's CPUs,
    GPUs and time); refused where no node of its partition can give it, as for
    ``mode="slurm"``."""
    from easylaunch.modes.schedulers import nodes, slurm  # (late: a local pool does without)

    res = dataclasses.replace(
        slurm.resolve_resources(settings.SLURM_CONFIGS, None, gpus > 0), nodes=1, tasks=1,
        cpus_per_task=workers, n_gpus=gpus, time_minutes=max(1, round(limit / 60)))
    sinfo = subprocess.run(nodes.sinfo_command(), capture_output=True, text=True, timeout=60)
    if sinfo.returncode == 0:
        try:
            slurm.fit(res, nodes.parse_sinfo(sinfo.stdout), packs=False)
        except LaunchError as exc:
            raise LaunchError(f"pool {name!r} cannot have its allocation of {workers} CPUs, "
                              f"{gpus} GPUs and {res.time_minutes} minutes ({exc}); ask less "
                              "with workers=, gpus= or time_limit=") from None
    return res


def _submit(res: Resources, name: str, folder: Path, argv: list[str]) -> str:
    """The pool's allocation, submitted: its Slurm job id."""
    from easylaunch.modes.schedulers import slurm

    script = folder / "pool.sbatch"
    script.write_text("#!/bin/bash\n" + "\n".join(slurm.sbatch_header(
        res, f"pool-{name}", str(folder / layout.LOG), signal_seconds=0)) +
        "\n# Generated by easylaunch: the packer of a warm pool.\n"
        f"exec {shlex.join([*argv, *(['--gpus', 'granted'] if res.n_gpus else [])])}\n")
    out = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        (folder / layout.ENDED).write_text("its allocation was refused\n")
        raise LaunchError(f"sbatch refused the pool's allocation: {out.stderr.strip()}")
    return out.stdout.strip().split(";")[0]


def _allocation_said(job_id: str) -> str | None:
    """Where a pool's Slurm allocation stands, in words (None: it is gone)."""
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T|%L|%N|%r"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0 or not out.stdout.strip():
        return None
    state, left, node, reason = out.stdout.strip().split("|")
    if state == "PENDING":
        return f"Slurm job {job_id}, waiting for its allocation ({reason})"
    return f"Slurm job {job_id} on {node}, {left} left"


def _state(folder: Path) -> PoolState:
    meta = read_json(str(folder / layout.POOL_JSON))
    ended = layout.ended_why(str(folder))
    where = "this machine"
    if "job_id" in meta:
        said = _allocation_said(meta["job_id"])
        where = said or f"Slurm job {meta['job_id']}, ended"
        if ended is None and said is None:
            ended = "its allocation is gone"
    elif ended is None and not _packer_alive(meta):
        ended = "its packer is gone"
    states = []
    for record in (folder / layout.TASK_STATE).glob("task-*.json"):
        try:
            states.append(read_json(str(record)).get("state"))
        except (OSError, DamagedRecord):
            continue
    with open(folder / layout.TASKS) as f:
        added = sum(1 for _ in f)
    running = states.count("running")
    return PoolState(meta["name"], folder, meta["workers"], meta["preload"],
                     meta["idle_seconds"], meta["started_at"], ended, running,
                     added - len(states) + states.count("queued"),
                     len(states) - running - states.count("queued"), where)


def list_pools(config: ConfigArg = None, everything: bool = False) -> list[PoolState]:
    """The pools started from this machine's log folder: the running ones (``everything``:
    each name's last start, ended too)."""
    settings = load_settings(config)
    found = [_state(folder) for name in sorted(p.name for p in pools_root(settings).glob("*"))
             if (folder := _latest(settings, name)) is not None]
    return [p for p in found if everything or p.ended is None]


def stop_pool(name: str, config: ConfigArg = None) -> PoolState:
    """Stop pool ``name``: its runs are cancelled (the running ones get SIGTERM, a stop
    notice), and it takes no more."""
    settings = load_settings(config)
    folder = live_pool(settings, name)
    meta = read_json(str(folder / layout.POOL_JSON))
    with layout.pool_lock(str(folder)):  # (a launch meanwhile is refused, never lost)
        (folder / layout.ENDED).write_text("stopped by easylaunch pool stop\n")
    with open(folder / layout.RUNS) as f:
        log_dirs = [line.rstrip("\n").split("\t")[1] for line in f if line.strip()]
    from easylaunch_job.records import update_status

    for index, log_dir in enumerate(log_dirs):
        record = folder / layout.TASK_STATE / f"task-{index}.json"
        try:
            ended = read_json(str(record)).get("state") in ("succeeded", "failed", "cancelled")
        except (OSError, DamagedRecord):
            ended = False
        if not ended:
            update_status(log_dir, cancel_requested=True)
            (folder / layout.TASK_STATE).mkdir(exist_ok=True)
            (folder / layout.TASK_STATE / f"task-{index}.cancel").touch()
    if "job_id" in meta:
        subprocess.run(["scancel", meta["job_id"]], capture_output=True, timeout=60)
    elif is_alive(meta["pid"], meta["started"]):
        os.kill(meta["pid"], signal.SIGTERM)
    return _state(folder)

