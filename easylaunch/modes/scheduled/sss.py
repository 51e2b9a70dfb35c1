"""``sss`` (script, Slurm, Singularity): one sbatch script per run in a batch folder, each
running its run in a Singularity image.

With MAX_RESTARTS, a script submits itself again (outside the container) for a run whose
attempt ended to restart.
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING

from easylaunch.modes.base import Composed
from easylaunch.modes.jobscript import StartLine, job_script, settled_outside, start_line
from easylaunch.modes.scheduled.batch import (
    SUBMIT,
    BatchMode,
    BatchPlan,
    Layout,
    submit_script,
)
from easylaunch.modes.schedulers import slurm
from easylaunch.runs.bundle import Run
from easylaunch.runs.record import LaunchRequest
from easylaunch_job.schedulers import SLURM_SIDE

if TYPE_CHECKING:
    from easylaunch.errors import EasyLaunchError
    from easylaunch.runs.record import RunRecord


def check(mode: BatchMode, request: LaunchRequest) -> None:
    mode.container.check(mode.settings, request.use_gpu, mode.name, here=False)


def runs_outside(mode: BatchMode, request: LaunchRequest) -> bool:
    return False  # (always in the image)


def plan(mode: BatchMode, request: LaunchRequest, runs: list[Run], layout: Layout) -> BatchPlan:
    s = mode.settings
    res = mode.resources(request)
    line = slurm.every_rank(start_line(StartLine(
        python=shlex.quote(mode.container.python(s)), pre_cmds=mode.container.pre_cmds(s),
        pythonpath=mode.container_pythonpath(),
        container=mode.in_image(request, layout, runs))), res)
    python = shlex.quote(mode.batch_python(request))  # (outside the image)
    files, entries, seed, exports = {}, [], [], slurm.job_exports(res, None)
    for run, bundle, log_dir in zip(runs, layout.bundles, layout.log_dirs, strict=True):
        header = slurm.sbatch_header(res, job_name=f"{run.exp_name}-{run.run_id}",
                                     output=slurm.output_path(layout.cluster_dir,
                                                              f"slurm-{run.run_id}-%j.out"),
                                     signal_seconds=s.SLURM_SIGNAL_SECONDS)
        script = f"{run.run_id}.sbatch"
        files[script] = job_script(header, [(bundle, log_dir)], settled_outside(
            line, python, f"{layout.cluster_dir}/{script}")
            if s.MAX_RESTARTS else line, index=slurm.SIDE.index, exports=exports)
        entries.append(([run.run_id], shlex.join(SLURM_SIDE.command(script))))
        seed.append(shlex.join(["sbatch", f"{layout.cluster_dir}/{script}"]))
    files[SUBMIT] = submit_script(SLURM_SIDE, python, entries)
    return BatchPlan(layout, files, seed, shlex.join(["bash", f"{layout.cluster_dir}/{SUBMIT}"]))


def backend(mode: BatchMode, index: int) -> dict:
    return {}


def only_by_hand(mode: BatchMode) -> bool:
    return False


def cancel(mode: BatchMode, jobs: list[RunRecord]
           ) -> tuple[dict[str, EasyLaunchError], list[RunRecord]]:
    return {}, jobs  # (scancel: one job per run)


SSS = Composed("sss", BatchMode, {**slurm.OPTIONS, "cluster": None, "submit": None},
               restarts=True,
               parts={"scheduler": slurm.SCHEDULER, "packing": sys.modules[__name__]})
