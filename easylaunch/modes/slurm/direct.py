"""``slurm``: submit right away with sbatch; a sweep becomes one job array (``modes.scheduled``'s
ArrayMode: split below MaxArraySize, all or nothing, ``cluster=``, ``env_pack=``).

``array_parallelism=N`` caps how many tasks of an array run at once (``%N``). A packed
environment is broadcast with sbcast.
"""

from __future__ import annotations

import posixpath
import shlex

from easylaunch.modes.jobscript import SLURM_EXPORTS, job_script
from easylaunch.modes.scheduled import ArrayMode, ClusterFacts
from easylaunch.modes.slurm.base import SlurmBase
from easylaunch.request import LaunchRequest
from easylaunch.schedulers import slurm
from easylaunch.schedulers.slurm import Resources
from easylaunch_job.environment import ENV_RESUBMIT_SCRIPT


class SlurmMode(SlurmBase, ArrayMode):
    """Direct submission to the Slurm cluster this machine is a login node of (or reaches).

    With MAX_RESTARTS, an attempt that ends to restart (time-limit warning, SIGTERM, a lost
    process) submits its own array element again: same run id and folder, a new job id.
    """

    name = "slurm"
    restarts = True
    options = {**SlurmBase.options, "array_parallelism": None, "env_pack": None}
    script_dir = ".slurm"
    script_suffix = ".sbatch"
    broadcast_with = "slurm"

    def cluster_facts(self, folder: str) -> ClusterFacts:
        return self.slurm_facts(folder, runs_there=True)

    def pre_cmds(self) -> tuple[str, ...]:
        return tuple(self.settings.SLURM_PRE_CMDS)

    def array_script(self, res: Resources, request: LaunchRequest,
                     entries: list[tuple[str, str]], script: str, line: str) -> str:
        header = slurm.sbatch_header(
            res, job_name=request.exp_name,
            output=slurm.output_path(posixpath.dirname(script), "slurm-%A_%a.out"),
            signal_seconds=self.settings.SLURM_SIGNAL_SECONDS,
            array=slurm.array_spec(len(entries), self.opts["array_parallelism"]))
        line, exports = self.restartable(line, script)
        return job_script(header, entries, line, exports=exports)

    def restartable(self, line: str, script: str) -> tuple[str, str]:
        """The start line and the job's exports, such that with MAX_RESTARTS an attempt that
        ends to restart submits ``script`` again for its element (the runner does)."""
        if not self.settings.MAX_RESTARTS:
            return line, SLURM_EXPORTS
        return line, f"{SLURM_EXPORTS} {ENV_RESUBMIT_SCRIPT}={shlex.quote(script)}"

    def submit_op(self, script: str) -> dict:
        return {"op": "run", "argv": slurm.sbatch_command(script)}

    def parse_submit(self, stdout: str) -> str:
        return slurm.parse_sbatch(stdout)

    def element_fields(self, job_id: str, index: int, count: int, script: str) -> dict:
        folder = script.rsplit("/", 1)[0]
        return {"slurm_job_id": f"{job_id}_{index}", "array_job_id": job_id,
                "array_index": index, "script": script,
                "slurm_output": f"{folder}/slurm-{job_id}_{index}.out"}
