"""``local`` with ``detach=True`` (or LOCAL_DETACH): runs that outlive the launching script.

One small supervisor process per launch (the packer the ``ssh`` mode starts on a remote
machine, here started on this one) runs the launch's runs, at most ``max_parallel`` at once
(default: one per GPU with use_gpu, else one per CPU), worker i pinned to GPU i, and starts a
run again under MAX_RESTARTS as ``local`` does. It runs in a session of its own: the launching
script returns at once, and its end, Ctrl-C or kill leave the runs going. The runs keep their
state files in their folders as every run does, so any later process tracks, follows and
cancels them (``easylaunch ls``, ``logs -f``, ``cancel``); a supervisor that dies (a reboot)
marks its unfinished runs failed at the next look.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from easylaunch.modes.local.machine import chosen_gpu_ids
from easylaunch.modes.ssh import HostFacts, SshMode
from easylaunch.runs.bundle import Run
from easylaunch.runs.record import LaunchRequest
from easylaunch.settings import Settings

if TYPE_CHECKING:
    from easylaunch.modes.local.attached import LocalMode


class DetachedLocalMode(SshMode):
    """``local`` runs under a detached supervisor on this machine."""

    name = "local"

    def __init__(self, settings: Settings, mode_options: dict[str, Any],
                 attached: LocalMode) -> None:
        self.options = attached.options  # (the mode is still ``local``: its options, its name)
        super().__init__(settings, mode_options)
        self.attached = attached  # its checks and its Python
        self.runs_python = self.attached.runs_python

    def host_name(self) -> str | None:
        return None  # this machine

    def check(self, request: LaunchRequest) -> HostFacts:
        self.attached.check(request)  # max_parallel, GPUs, LOCAL_PYTHON
        return self.check_packer(request)

    def host_gpus(self, nvidia_smi: dict) -> list[str]:
        """LOCAL_GPU_IDS or CUDA_VISIBLE_DEVICES where they choose, as for ``local``."""
        chosen = chosen_gpu_ids(self.settings.LOCAL_GPU_IDS)
        return super().host_gpus(nvidia_smi) if chosen is None else chosen

    def launched(self, runs: list[Run]) -> str:
        return "launched detached (they go on after this script ends)"

