"""Modes by name: a Mode class, a shared class composed with its parts (a scheduler, a
container, a way of packing runs), or a scheduler, which stands for its job arrays. A mode
module is imported only when a launch or a job asks for it.

The families: :mod:`.local` (this machine), :mod:`.scheduled` (Slurm and PBS, here or over SSH),
:mod:`.ssh` (workstations), :mod:`.cloud` (EC2, GCE, Azure VMs, Azure ML, Ray). From
``mode="slurm"`` to ``sbatch``: :data:`MODES` names ``schedulers.slurm:SCHEDULER``, which
``scheduled.job_arrays.array_mode`` makes a mode. Its ``ArrayMode.submit`` writes each array's
script and has :meth:`.hosted.HostedMode.stage` send the runs and the scheduler's submit op
(``schedulers/slurm.py``: ``submit_op``, the ``sbatch`` argv) through the transport
(``hosts/transport.py``: this machine; ``hosts/ssh.py``: a login node), where the job side's
``host_ops`` runs it."""

from __future__ import annotations

import importlib

from easylaunch.errors import LaunchError, did_you_mean

TYPE_CHECKING = False  # (as typing's; this package's modules import it, base.py the settings)
if TYPE_CHECKING:
    from easylaunch.modes.base import ModeKind

MODES: dict[str, str] = {
    "here_no_doodad": "easylaunch.modes.local.here_no_doodad:HereNoDoodadMode",
    "local": "easylaunch.modes.local.attached:LOCAL",
    "local_singularity": "easylaunch.modes.local.attached:LOCAL_SINGULARITY",
    "local_docker": "easylaunch.modes.local.attached:LOCAL_DOCKER",
    "slurm": "easylaunch.modes.schedulers.slurm:SCHEDULER",
    "slurm_singularity": "easylaunch.modes.scheduled.job_arrays:SLURM_SINGULARITY",
    "sss": "easylaunch.modes.scheduled.sss:SSS",
    "htp": "easylaunch.modes.scheduled.htp:HTP",
    "pbs": "easylaunch.modes.schedulers.pbs:SCHEDULER",
    "pbs_htp": "easylaunch.modes.scheduled.htp:PBS_HTP",
    "ssh": "easylaunch.modes.ssh:SshMode",
    "ec2": "easylaunch.modes.cloud.ec2:Ec2Mode",
    "gcp": "easylaunch.modes.cloud.gcp:GcpMode",
    "azure": "easylaunch.modes.cloud.azure:AzureMode",
    "aml": "easylaunch.modes.cloud.aml:AmlMode",
    "ray": "easylaunch.modes.cloud.ray:RayMode",
}


PLUGIN_GROUP = "easylaunch.modes"  # the entry point group where other packages add modes


def all_modes() -> dict[str, str]:
    """:data:`MODES` and the modes that installed packages add through the entry point group
    ``easylaunch.modes`` (``name = "module:attribute"``: a Mode class, a ``Composed`` entry or
    a scheduler); a built-in name wins."""
    from importlib.metadata import entry_points

    added = {e.name: e.value for e in entry_points(group=PLUGIN_GROUP) if e.name not in MODES}
    return {**MODES, **added}


def get_mode(name: str) -> ModeKind:
    """The Mode class (or entry) registered under ``name``; a scheduler there gives its job
    arrays' mode. An unknown name lists the known ones. (Installed packages' modes are looked
    for only when the name is no built-in one.)"""
    where = MODES.get(name)
    if where is None:
        known = all_modes()
        if name not in known:
            raise LaunchError(f"unknown mode {name!r}{did_you_mean(name, known)}; known modes: "
                              f"{', '.join(known)}")
        where = known[name]
    module, attribute = where.split(":")
    found = getattr(importlib.import_module(module), attribute)
    if callable(getattr(found, "create", None)):  # a Mode class or a Composed entry
        return found
    return importlib.import_module("easylaunch.modes.scheduled.job_arrays").array_mode(name, found)


def restarting_modes() -> list[str]:
    """The modes that start runs again (``Mode.restarts``), of those importable here."""
    names = []
    for name in all_modes():
        try:
            if get_mode(name).restarts:
                names.append(name)
        except ImportError:  # a cloud SDK not installed
            continue
    return names
