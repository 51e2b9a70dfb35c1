"""``python job.pyz COMMAND ...`` (or ``python -m easylaunch_job COMMAND ...``).

Commands: ``run`` (one run bundle, see :mod:`easylaunch_job.supervisor`), ``pack`` (a task
file with N workers, :mod:`easylaunch_job.packer`), ``serve`` (the packer's warm worker,
:mod:`easylaunch_job.warm`), ``forkserver`` (local runs' warm starts,
:mod:`easylaunch_job.forkserver`),
``agent`` (a cloud instance's share of a launch, :mod:`easylaunch_job.cloud.agent`) and
``submit`` (a batch folder's submit.sh submitting a job file, :mod:`easylaunch_job.submission`).

This file stays readable by old Pythons, so that one older than the floor hears why.
"""

import importlib
import sys

from easylaunch_job import PYTHON_FLOOR

# command -> (module, its entry point taking the remaining arguments)
COMMANDS = {"run": ("easylaunch_job.supervisor", "main"),
            "pack": ("easylaunch_job.packer", "main"),
            "serve": ("easylaunch_job.warm", "serve"),
            "forkserver": ("easylaunch_job.forkserver", "serve_forks"),
            "agent": ("easylaunch_job.cloud.agent", "main"),
            "submit": ("easylaunch_job.submission", "main")}


def main(argv=None):
    # type: (list[str] | None) -> int
    # (a type comment: an annotation would be evaluated; this file stays readable by old Pythons)
    """Check the Python, then hand the arguments to the command's own entry point."""
    args = list(sys.argv[1:] if argv is None else argv)
    if sys.version_info[:2] < PYTHON_FLOOR:
        sys.stderr.write("easylaunch's job side needs Python {}.{} or newer; {} is {}.{}\n".format(
            PYTHON_FLOOR[0], PYTHON_FLOOR[1], sys.executable, *sys.version_info[:2]))
        return 3
    if not args or args[0] not in COMMANDS:
        sys.stderr.write("usage: job.pyz {} ...\n".format("|".join(sorted(COMMANDS))))
        return 2
    module, entry = COMMANDS[args[0]]
    return getattr(importlib.import_module(module), entry)(args[1:])


if __name__ == "__main__":
    sys.exit(main())
