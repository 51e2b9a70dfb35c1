"""``sss`` (script, Slurm, Singularity): one sbatch script per run in a batch folder to copy."""

from __future__ import annotations

import shlex

from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.modes.jobscript import StartLine, job_script, settled_outside, start_line
from easylaunch.modes.slurm.batch import SUBMIT, BatchMode, BatchPlan, Layout, submit_script
from easylaunch.request import LaunchRequest
from easylaunch.schedulers import slurm


class SssMode(BatchMode):
    """Each run gets its own sbatch script that runs it in a Singularity container.

    With MAX_RESTARTS, the script submits itself again (outside the container) for a run
    whose attempt ended to restart.
    """

    name = "sss"
    restarts = True  # (each job script submits the next attempt, outside the image)

    def check(self, request: LaunchRequest) -> None:
        super().check(request)
        if not self.image(request):
            key = "SSS_GPU_IMAGE" if request.use_gpu else "SSS_CPU_IMAGE"
            raise LaunchError(f"mode 'sss' runs in a Singularity image, but {key} is not set; "
                              "set it to the image's path on the cluster")

    def plan(self, request: LaunchRequest, runs: list[Run], layout: Layout) -> BatchPlan:
        res = self.resources(request)
        line = self.every_rank(start_line(StartLine(
            python=shlex.quote(self.settings.SSS_PYTHON),
            pre_cmds=tuple(self.settings.SSS_PRE_CMDS),
            pythonpath=self.container_pythonpath(),
            container=self.container(request, layout, runs))), res)
        files, entries, seed = {}, [], []
        for run, bundle, log_dir in zip(runs, layout.bundles, layout.log_dirs, strict=True):
            header = slurm.sbatch_header(res, job_name=f"{run.exp_name}-{run.run_id}",
                                         output=slurm.output_path(layout.cluster_dir,
                                                                 f"slurm-{run.run_id}-%j.out"),
                                         signal_seconds=self.settings.SLURM_SIGNAL_SECONDS)
            script = f"{run.run_id}.sbatch"
            files[script] = job_script(header, [(bundle, log_dir)], settled_outside(
                line, shlex.quote(self.cluster_python()), f"{layout.cluster_dir}/{script}")
                if self.settings.MAX_RESTARTS else line)
            entries.append(([run.run_id], script))
            seed.append(shlex.join(["sbatch", f"{layout.cluster_dir}/{script}"]))
        files[SUBMIT] = submit_script(entries)
        then = shlex.join(["bash", f"{layout.cluster_dir}/{SUBMIT}"])
        return BatchPlan(layout, files, seed, self.note(layout, then))
