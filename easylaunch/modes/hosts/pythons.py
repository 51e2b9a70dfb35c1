"""Whether the Python that starts runs on the far side can load what this machine pickles: the
same Python minor version and the same cloudpickle major version (cloudpickle 2 cannot load
what cloudpickle 3 pickles: ``Can't get attribute '_function_setstate'``).

The far side's own Python answers its ``info`` op; a runs' Python other than that one (e.g.
SLURM_PYTHON) is asked with :func:`probe_op`, in the preflight's same round trip.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

import cloudpickle

from easylaunch.errors import LaunchError
from easylaunch_job.run import python_versions, wanted_python

if TYPE_CHECKING:
    from easylaunch_job.host_ops import RunOp

# What a Python says of itself: the shape of the ``info`` op's answer (easylaunch_job.host_ops).
_PROBE = ("import json, sys\n"
          "try:\n    import cloudpickle\n    pickler = cloudpickle.__version__\n"
          "except ImportError:\n    pickler = None\n"
          "print(json.dumps({'python': list(sys.version_info[:3]), 'cloudpickle': pickler}))\n")


def probe_op(python: str, pre_cmds: Sequence[str]) -> RunOp:
    """The far-side op that asks ``python`` (started after ``pre_cmds``, as runs start) for
    its Python and cloudpickle versions."""
    argv = [python, "-c", _PROBE]
    if pre_cmds:  # (a ~/ left for bash to expand, as the far side's op does without them)
        named = "~/" + shlex.quote(python[2:]) if python.startswith("~/") else shlex.quote(python)
        argv = ["bash", "-c", " && ".join([*pre_cmds, f"exec {named} "
                                           + shlex.join(argv[1:])])]
    return {"op": "run", "argv": argv}


def probed(answer: dict) -> dict | None:
    """A probe's answer as the versions it printed (None: the Python did not answer)."""
    if answer.get("rc") != 0:
        return None
    try:
        said = json.loads(answer["out"].strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    return said if isinstance(said, dict) and "python" in said else None


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def check_loads(there: dict, python: str, where: str, fix: str) -> None:
    """Refuse a runs' Python (``there``: what it said of itself) that cannot load what this
    machine pickles, naming both sides' versions and ``fix``, the setting that picks it."""
    here_minor, here_pickler = list(sys.version_info[:2]), cloudpickle.__version__
    minor, pickler = list(there["python"][:2]), there.get("cloudpickle")
    wanted = wanted_python(f"{here_minor[0]}.{here_minor[1]}", here_pickler)
    if minor != here_minor:
        why = "a pickled function loads only on the Python minor version that pickled it"
    elif pickler is None:
        why = "runs load their function with cloudpickle"
    elif _major(pickler) != _major(here_pickler):
        why = (f"cloudpickle {_major(pickler)}.x cannot load what cloudpickle "
               f"{_major(here_pickler)}.x pickles")
    else:
        return
    major = int(_major(here_pickler))
    raise LaunchError(
        f"{python} on {where} has {python_versions(there['python'], pickler)}, but runs are "
        f"pickled here ({sys.executable}) with "
        f"{python_versions(sys.version_info[:3], here_pickler)}: {why}. "
        f"Set {fix} to {wanted} there" + (
            f", or install it for {python} (pip install 'cloudpickle>={major},<{major + 1}')"
            if minor == here_minor else ""))
