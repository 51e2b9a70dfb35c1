"""Shells where runs run: ``easylaunch shell ID`` (in a running run's folder, on its node, with
its environment) and ``easylaunch interactive`` (an allocation and a shell on a compute node).

Modes say how to reach a run's machine (:meth:`Mode.shell`); this module holds what they
share: the run's variables (the job side's :func:`run_variables`) and the shell line that
starts in its folder.
"""

from __future__ import annotations

from collections.abc import Mapping

from easylaunch.errors import LaunchError

# ``bash -c`` program of the shell: into the run's folder, then an interactive bash
_INTO_FOLDER = 'cd -- "$1" || exit 1; shift; exec bash -i'


def shell_in(folder: str, variables: Mapping[str, str]) -> list[str]:
    """The argv of an interactive bash in ``folder`` with ``variables`` set (no shell reads
    the values: they stay argv words until bash's own ``cd``)."""
    return ["env", *(f"{k}={v}" for k, v in variables.items()),
            "bash", "-c", _INTO_FOLDER, "easylaunch-shell", folder]


def process_environment(pid: int) -> dict[str, str]:
    """The environment a process on this machine started with (/proc), to give a shell the
    run's own (GPU pinning, PYTHONPATH, the scheduler's variables)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            data = f.read()
    except OSError as exc:
        raise LaunchError(f"cannot read the run's environment (process {pid}): {exc}") from None
    pairs = (item.decode(errors="replace").partition("=") for item in data.split(b"\0") if item)
    return {key: value for key, _, value in pairs if key}
