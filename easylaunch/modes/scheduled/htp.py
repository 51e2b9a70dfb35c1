"""``htp`` (high throughput): many small CPU runs share one allocation; ``pbs_htp`` the same on
PBS (the scheduler is the mode's part: headers, submit command and sizes come from it).

The batch folder holds a task file (one line per run) and either easylaunch's own packer (N
workers pull tasks inside one allocation, on any Slurm or PBS) or BRC's ``ht_helper.sh``
command (Slurm).

With MAX_RESTARTS (packer only), a run queued again starts again in the same allocation, and an
allocation stopped at its time limit (or preempted) submits itself again for the runs left.
``allocations=K`` spreads the sweep over K allocations (a job array of packers sharing the task
file, each task taken once: an allocation that starts first or runs faster takes more); one
stopped goes on in a new array with the runs it held and those no allocation had taken.
``n_nodes=N`` makes each allocation N nodes (Slurm): ``srun`` starts a packer on each node, and
the packers share the task file as allocations do (a stopped one goes on as one new allocation).
"""

from __future__ import annotations

import shlex
import sys
import warnings
from typing import TYPE_CHECKING

from easylaunch.errors import EasyLaunchError, LaunchError, check_count
from easylaunch.modes import launchers
from easylaunch.modes.base import Composed
from easylaunch.modes.hosted import completed
from easylaunch.modes.hosts.transport import HostError
from easylaunch.modes.jobscript import StartLine, bundle_pythonpath, start_line, task_line
from easylaunch.modes.scheduled.batch import SUBMIT, BatchMode, BatchPlan, Layout, submit_script
from easylaunch.modes.schedulers import packing, pbs, slurm
from easylaunch.runs.bundle import BLOB_STORE, Run, blob_name
from easylaunch.runs.jobpack import job_archive
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch.settings import Settings
from easylaunch_job.pool import RUNS, TASK_STATE, TASKS  # (the packer's files)
from easylaunch_job.records import JOB_PYZ

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Op

PACKER_SCRIPT = "htp"  # (and the scheduler's suffix)


def ansi_c_quote(text: str) -> str:
    """Bash's ``$'...'`` quoting, as in doodad's htp command."""
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"$'{escaped}'"


def check(mode: BatchMode, request: LaunchRequest) -> None:
    s, sched = mode.settings, mode.scheduler
    packs = packing(sched, f"mode {mode.name!r}")
    on_pbs = sched is pbs.SCHEDULER
    if request.use_gpu and (on_pbs or s.HTP_RUNNER == "ht_helper"):
        raise LaunchError(f"mode {mode.name!r} packs GPU runs on Slurm with easylaunch's "
                          f"packer; use mode {'pbs' if on_pbs else 'sss'!r} for GPUs")
    if s.HTP_RUNNER == "ht_helper" and sched is not slurm.SCHEDULER:
        raise LaunchError(f"HTP_RUNNER='ht_helper' is BRC's Slurm tool; mode {mode.name!r} "
                          "runs easylaunch's packer: set HTP_RUNNER='packer'")
    if s.HTP_RUNNER == "ht_helper" and not mode.grows_batches():
        raise LaunchError("HTP_RUNNER='ht_helper' needs its task file copied by hand "
                          "(submit=False); to have the batch submitted, use "
                          "HTP_RUNNER='packer' (runs on any Slurm)")
    if s.HTP_RUNNER == "ht_helper" and s.MAX_RESTARTS:
        raise LaunchError("runs packed by BRC's ht_helper.sh cannot restart; use "
                          "HTP_RUNNER='packer' with max_restarts, or max_restarts=0")
    if s.HTP_RUNNER == "ht_helper" and not s.TASKFILE_PATH_ON_BRC:
        raise LaunchError("HTP_RUNNER='ht_helper' reads the task file from "
                          "TASKFILE_PATH_ON_BRC; set it to where you will copy tasks.txt")
    res = mode.resources(request)
    if request.use_gpu and res.n_gpus != 1:
        raise LaunchError(f"mode 'htp' gives each packed run one GPU of the allocation; "
                          f"SLURM_CONFIGS[{res.config_name!r}] asks n_gpus={res.n_gpus} a run: "
                          "set n_gpus=1, or use mode 'slurm' for runs of several GPUs")
    if not packs.node_workers(res) and mode.grows_batches():  # (else the cluster is asked)
        raise LaunchError(f"mode 'htp' sizes its allocation from max_num_cores_per_node, and "
                          "a batch copied by hand cannot ask the cluster what a node has; "
                          f"set it in SLURM_CONFIGS[{res.config_name!r}]")
    if res.nodes > 1 and s.HTP_RUNNER == "ht_helper":
        raise LaunchError("BRC's ht_helper.sh packs one node: use HTP_RUNNER='packer' for "
                          f"n_nodes={res.nodes}, or one node")
    if res.nodes > 1 and not packs.PACKERS_PER_NODE:
        raise LaunchError(f"mode {mode.name!r} packs one node per allocation; for more than "
                          f"one node, spread the sweep with allocations=K (now {res.nodes} "
                          "nodes in the PBS config or n_nodes)")
    allocations = mode.opts["allocations"]
    if allocations is None:
        return
    check_count("allocations", allocations)
    if allocations > 1 and s.HTP_RUNNER == "ht_helper":
        raise LaunchError("allocations > 1 spreads runs over easylaunch's packers: use "
                          "HTP_RUNNER='packer', or one allocation")


def runs_outside(mode: BatchMode, request: LaunchRequest) -> bool:
    return not mode.image(request)


def plan(mode: BatchMode, request: LaunchRequest, runs: list[Run], layout: Layout) -> BatchPlan:
    c, s, sched = mode.container, mode.settings, mode.scheduler
    packs = packing(sched, f"mode {mode.name!r}")
    res = mode.resources(request)
    image = mode.image(request)
    python = mode.batch_python(request)  # (outside any image: the packer, submit.sh)
    line = start_line(StartLine(
        python=shlex.quote(c.python(s) if image else python),
        pre_cmds=c.pre_cmds(s),
        pythonpath=mode.container_pythonpath() if image
        else bundle_pythonpath(runs[0].meta["code_dirs"]) + mode.cluster_code_pythonpath(),
        container=mode.in_image(request, layout, runs) if image else None))
    tasks = "".join(task_line(b, lg, line) + "\n"
                    for b, lg in zip(layout.bundles, layout.log_dirs, strict=True))
    allocations = min(mode.opts["allocations"] or 1, len(runs))
    nodes = min(res.nodes, -(-len(runs) // allocations))  # (a packer per node)
    most = packs.node_workers(res)
    if most is None:
        raise LaunchError(f"{sched.NAME} did not say what a node of the cluster has; set "
                          f"max_num_cores_per_node in SLURM_CONFIGS[{res.config_name!r}]")
    workers = max(1, min(-(-len(runs) // (allocations * nodes)), most))
    files = {TASKS: tasks}
    if s.HTP_RUNNER == "ht_helper":
        command = ht_helper_command(s, res, workers)
        files[SUBMIT] = submit_script(
            sched.SIDE, shlex.quote(python), [([r.run_id for r in runs], command)],
            first=" (copy tasks.txt to TASKFILE_PATH_ON_BRC first)")
        then = (f"copy {layout.cluster_dir}/{TASKS} to {s.TASKFILE_PATH_ON_BRC}"
                f", then: bash {shlex.quote(layout.cluster_dir + '/' + SUBMIT)}")
        return BatchPlan(layout, files, [command], then)
    packed = packs.packed(res, nodes, workers)
    header = packs.packed_header(packed, f"{request.exp_name}-htp", layout.cluster_dir,
                                 allocations, s)
    script = PACKER_SCRIPT + sched.SCRIPT_SUFFIX
    # the packer is the job side the bundles link to, in the batch's blob store
    job_side = f"{layout.cluster_dir}/{BLOB_STORE}/{blob_name(JOB_PYZ, job_archive())}"
    argv = [python, job_side, "pack",
            f"{layout.cluster_dir}/{TASKS}", "--state-dir",
            f"{layout.cluster_dir}/{TASK_STATE}", "--workers", str(workers)]
    pairs = list(zip(layout.bundles, layout.log_dirs, strict=True))
    plain_paths = "\t" not in "".join(sum(pairs, ()))
    warm = not image and not s.SSS_PRE_CMDS and plain_paths
    restarts = bool(s.MAX_RESTARTS)
    if restarts and not plain_paths:
        raise LaunchError("mode 'htp' with max_restarts lists each run's folders in a "
                          "tab-separated file: keep tabs out of SSS_LOG_DIR and the paths")
    if warm or restarts:  # the packer knows each task's run (warm: forks it itself)
        files[RUNS] = "".join(f"{b}\t{lg}\n" for b, lg in pairs)
        argv += ["--runs", f"{layout.cluster_dir}/{RUNS}", *(["--warm"] * warm)]
    if restarts:
        argv += ["--resubmit", f"{layout.cluster_dir}/{script}",
                 "--scheduler", sched.SIDE.name]
    if allocations > 1 or nodes > 1:  # (each element an allocation, each node a packer;
        argv.append("--shared")       # they share the task file)
    gpus = packs.packed_gpus(packed)  # (a GPU a worker, of those the allocation was given)
    if gpus:
        argv += ["--gpus", "granted"]
    if nodes > 1:
        argv = [*launchers.srun(nodes, nodes, extra=[
            "--ntasks-per-node=1", f"--cpus-per-task={packed.cpus_per_task}",
            *([f"--gres=gpu:{gpus}"] if gpus else [])]), *argv]
    files[script] = ("#!/bin/bash\n" + "\n".join(header) + "\n"
                     "# Generated by easylaunch: runs tasks.txt with the packer"
                     + (f", one on each of the {nodes} nodes" if nodes > 1 else "") + ".\n"
                     f"export {sched.job_exports(packed, None)}\n"
                     f"exec {shlex.join(argv)}\n")
    files[SUBMIT] = submit_script(sched.SIDE, shlex.quote(python), [
        ([r.run_id for r in runs], shlex.join(sched.SIDE.command(script)))])
    seed = [f"cd {shlex.quote(layout.cluster_dir)} && {shlex.join(sched.SIDE.command(script))}"]
    return BatchPlan(layout, files, seed, shlex.join(["bash", f"{layout.cluster_dir}/{SUBMIT}"]))


def ht_helper_command(s: Settings, res: slurm.Resources, tasks: int) -> str:
    """The seed's BRC form: one sbatch --wrap running ht_helper.sh on the task file."""
    parts = ["sbatch"]
    if res.account:
        parts += ["-A", shlex.quote(res.account)]
    if res.partition:
        parts += ["-p", shlex.quote(res.partition)]
    parts += ["-t", str(res.time_minutes), "-N", "1", "-n", str(tasks), "--cpus-per-task=1"]
    if res.mem:
        parts.append(f"--mem={res.mem}")
    if res.extra_flags.strip():
        parts.append(res.extra_flags.strip())
    wrap = (f'{s.HT_HELPER_PREAMBLE};ht_helper.sh -m "{s.HT_HELPER_PYTHON_MODULE}" '
            f"-t {shlex.quote(s.TASKFILE_PATH_ON_BRC)}")
    return " ".join(parts) + " --wrap=" + ansi_c_quote(wrap)


def backend(mode: BatchMode, index: int) -> dict:
    return {"task_index": index, "htp_runner": mode.settings.HTP_RUNNER}


def only_by_hand(mode: BatchMode) -> bool:
    return mode.settings.HTP_RUNNER == "ht_helper"


def cancel(mode: BatchMode, jobs: list[RunRecord]
           ) -> tuple[dict[str, EasyLaunchError], list[RunRecord]]:
    """Cancel tasks of the shared allocations (never a whole allocation), all in one round
    trip. The batch folder on the cluster is reached over SSH, or visible here (a shared file
    system)."""
    helper = LaunchError("runs packed by BRC's ht_helper.sh cannot be cancelled one by one; "
                         "cancel the whole allocation with scancel")
    failures: dict[str, EasyLaunchError] = {}
    tasks = []
    for job in jobs:
        backend = job.launch_info["backend"]
        if backend.get("htp_runner") == "ht_helper":
            failures[job.id] = helper
        else:
            tasks.append((job, f"{backend['cluster_batch_dir']}/{TASK_STATE}",
                          backend["task_index"]))
    failures.update(mode.cancel_packed(tasks))
    cancelled = [job for job, _, _ in tasks if job.id not in failures]
    try:
        end_idle_allocations(mode, cancelled)
    except HostError as exc:  # (the runs are cancelled: their allocations are a best effort)
        held = sorted({job_id for job in cancelled if (job_id := mode.job_id(job))})
        warnings.warn(f"the runs are cancelled, but whether their allocation(s) "
                      f"{', '.join(held)} still wait could not be asked ({exc}); where one "
                      "waits with nothing left to run, remove it by hand: "
                      + "; ".join(shlex.join(mode.scheduler.cancel_command(job_id))
                                  for job_id in held), UserWarning, stacklevel=2)
    return failures, []


def end_idle_allocations(mode: BatchMode, jobs: list[RunRecord]) -> None:
    """The allocations of these runs whose task file has no task left to run (every run
    ended or cancelled), removed from the queue where they still wait. A
    running one is left: its packer ends once its tasks are cancelled, and the allocation
    with it. An allocation whose other runs may still run is never touched."""
    batches: dict[str, set[str]] = {}  # cluster batch folder -> allocation ids
    for job in jobs:
        job_id = mode.job_id(job)
        if job_id is not None:
            batches.setdefault(job.launch_info["backend"]["cluster_batch_dir"], set()).add(job_id)
    if not batches:
        return
    sched, ids = mode.scheduler, sorted(set().union(*batches.values()))
    backends = [job.launch_info["backend"] for job in jobs]
    asks: list[Op] = [{"op": "run", "argv": argv}
                      for argv in sched.status_commands(ids, backends)]
    opens: list[Op] = [{"op": "open_tasks", "taskfile": f"{folder}/{TASKS}",
                        "state_dir": f"{folder}/{TASK_STATE}"} for folder in batches]
    answers = mode.transport.run_ops([*opens, *asks])
    opened, asked = answers[:len(batches)], answers[len(batches):]
    said = [completed(a) for a in mode.retried(asks, asked)]
    states = sched.read_states(ids, said, backends)
    idle = sorted({job_id for answer, held in zip(opened, batches.values(), strict=True)
                   if answer.get("open") == [] for job_id in held
                   if states.get(job_id) == "queued"})
    mode.transport.run_ops([{"op": "run", "argv": sched.cancel_command(job_id)}
                            for job_id in idle])


HTP = Composed("htp", BatchMode, {**dict.fromkeys(slurm.RESOURCE_OPTIONS), "cluster": None,
                                  "allocations": None, "n_nodes": None, "submit": None},
               restarts=True, parts={"scheduler": slurm.SCHEDULER, "packing": sys.modules[__name__],
                                     "packs_runs": True})
# (one process a run: no n_gpus, tasks_per_node; n_nodes: nodes per allocation)
PBS_HTP = Composed("pbs_htp", BatchMode, {"pbs_config_name": None, "time_in_mins": None,
                                          "queue": None, "project": None, "cluster": None,
                                          "allocations": None, "submit": None},
                   restarts=True, parts={"scheduler": pbs.SCHEDULER,
                                         "packing": sys.modules[__name__], "packs_runs": True})
