"""``slurm_singularity`` (doodad's name): ``slurm``, with each run inside SINGULARITY_IMAGE.

The log root is bound at its own path (bundles, snapshots and run folders keep their paths),
data folders at their mount points; ``--nv`` for use_gpu runs.
"""

from __future__ import annotations

import shlex

from easylaunch import launchers
from easylaunch.bundle import Run
from easylaunch.errors import LaunchError
from easylaunch.modes.jobscript import (
    SLURM_EXPORTS,
    Container,
    StartLine,
    bundle_pythonpath,
    settled_outside,
)
from easylaunch.modes.slurm.base import SlurmBase
from easylaunch.modes.slurm.direct import SlurmMode
from easylaunch.request import LaunchRequest


class SlurmSingularityMode(SlurmMode):
    """Direct submission; runs start in a Singularity image."""

    name = "slurm_singularity"
    restarts = True  # (the job script submits the next attempt, outside the image)
    options = {**SlurmBase.options, "array_parallelism": None}  # the image is the environment

    def check(self, request: LaunchRequest) -> None:
        if not self.settings.SINGULARITY_IMAGE:
            raise LaunchError("mode 'slurm_singularity' runs in SINGULARITY_IMAGE, which is not "
                              "set; set it to the image's path on the cluster")
        super().check(request)

    def launch_info(self, request: LaunchRequest) -> dict[str, str]:
        return {"singularity_image": self.settings.SINGULARITY_IMAGE}

    def restartable(self, line: str, script: str) -> tuple[str, str]:
        """The image has no sbatch: the job's shell submits the next attempt, after the
        container ended."""
        if not self.settings.MAX_RESTARTS:
            return line, SLURM_EXPORTS
        return settled_outside(line, shlex.quote(self.cluster_python()), script), SLURM_EXPORTS

    def start(self, request: LaunchRequest, runs: list[Run], python: str, root: str
              ) -> StartLine:
        s = self.settings
        binds = launchers.run_binds(root, s.data_mounts())
        return StartLine(python=shlex.quote(s.SINGULARITY_PYTHON),
                         pre_cmds=tuple(s.SINGULARITY_PRE_CMDS),
                         pythonpath=bundle_pythonpath(runs[0].meta["code_dirs"]),
                         container=Container(s.SINGULARITY_IMAGE, binds, request.use_gpu,
                                             s.BRC_EXTRA_SINGULARITY_ARGS))
