"""Shell text shared by the modes that start runs from shell: the line that starts a run, job
scripts (what differs between schedulers comes from their modules: header lines, exports, the
index) and the packer's task lines.

A run is started by one line of shell that reads ``$BUNDLE`` and ``$LOG_DIR`` from the
environment; paths only ever enter the shell through ``shlex.quote``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from easylaunch.errors import LaunchError
from easylaunch.modes import launchers
from easylaunch.modes.containers import SingularityImage
from easylaunch_job.environment import ENV_RESUBMIT_SCRIPT, ENV_TIMEOUT_SIGNAL, TIMEOUT_SIGNAL
from easylaunch_job.records import JOB_PYZ, STDERR_LOG, STDOUT_LOG


@dataclass(frozen=True)
class StartLine:
    """How runs start: the Python, commands before it, PYTHONPATH entries, a container."""

    python: str  # a shell word: a quoted path, or e.g. "$EASYLAUNCH_ENV"/bin/python
    pre_cmds: tuple[str, ...]
    pythonpath: tuple[str, ...]  # shell words, e.g. '"$BUNDLE"/code/0-src' or a quoted path
    container: SingularityImage | None = None


def bundle_pythonpath(code_dirs: Sequence[str]) -> tuple[str, ...]:
    """PYTHONPATH words for a bundle's code snapshots (``code_dirs`` of bundle.json)."""
    return tuple(f'"$BUNDLE"/{shlex.quote(d)}' for d in code_dirs)


def start_line(start: StartLine) -> str:
    """One line of shell that runs the job side on ``$BUNDLE``, logging to ``$LOG_DIR``."""
    runner = (f'exec {start.python} "$BUNDLE"/{JOB_PYZ} run "$BUNDLE" '
              '--log-dir "$LOG_DIR"')
    steps = [*start.pre_cmds]
    if start.pythonpath:
        steps.append(f"export PYTHONPATH={':'.join(start.pythonpath)}"
                     "${PYTHONPATH:+:$PYTHONPATH}")
    line = " && ".join([*steps, runner])
    if start.container is None:
        return line
    c = start.container
    argv = launchers.singularity_exec(c.image, c.binds, ["/bin/bash", "-c", line], c.gpu,
                                      c.extra_args)
    return "exec " + shlex.join(argv)


# What a job's shell passes on to a run it waits for: stops and time-limit warnings.
PASSED_SIGNALS = ("TERM", "INT", "HUP", "USR1", "USR2")


def settled_outside(line: str, python: str, script: str) -> str:
    """Shell that starts a run in a container with ``line`` as a child of the job's shell,
    passing the scheduler's signals on, then lets the runner settle the run outside the
    container (``python``, the cluster's), where the scheduler's commands are: an end the run
    could not record is recorded, and a run queued again is submitted again (``script``: the
    job script's path on the cluster)."""
    traps = "".join(f"trap 'kill -s {name} \"$child\" 2>/dev/null' {name}\n"
                    for name in PASSED_SIGNALS)
    return (f"{traps}{line.removeprefix('exec ')} &\n"
            "child=$!\n"
            'while wait "$child"; code=$?; kill -0 "$child" 2>/dev/null; do :; done\n'
            f"{ENV_RESUBMIT_SCRIPT}={shlex.quote(script)} exec {python} "
            f'"$BUNDLE"/{JOB_PYZ} run "$BUNDLE" --log-dir "$LOG_DIR" --after-exit "$code"')


def broadcast_env(archive: str, dest: str,
                  copy: Callable[[str, str, str, str], list[str]]) -> str:
    """Shell lines that copy a packed environment to every node and unpack it once per node
    (``copy``: the scheduler's ``broadcast``), to node-local ``dest``. A failure stops the job
    with a message, so a run never starts on a half-copied environment. Sets
    ``EASYLAUNCH_ENV`` to the unpacked folder.
    """
    name = os.path.basename(archive).removesuffix(".tar.gz")
    target = f"{dest.rstrip('/')}/easylaunch-{name}"
    unpack = (f"rm -rf {shlex.quote(target)} && mkdir -p {shlex.quote(target)} && "
              f"tar -xzf {shlex.quote(target + '.tar.gz')} -C {shlex.quote(target)}")
    fail = "echo \"easylaunch: {what} failed on $(hostname); the run did not start\" >&2; exit 1"
    # (no path ever goes inside those double quotes)
    lines = copy(archive, target, unpack, fail)
    return "\n".join([*lines, f"export EASYLAUNCH_ENV={shlex.quote(target)}"])


def _prologue(exports: str) -> str:
    return (f"export PYTHONUNBUFFERED=1 {exports}\n"
            '[ -d "$LOG_DIR" ] || mkdir -p "$LOG_DIR"\n'
            f'exec >>"$LOG_DIR"/{STDOUT_LOG} 2>>"$LOG_DIR"/{STDERR_LOG}\n')


def job_script(header: Sequence[str], entries: Sequence[tuple[str, str]], line: str,
               index: str, exports: str) -> str:
    """A batch script running entry ``index`` (a shell word: the scheduler's array index,
    0 without an array).

    ``entries`` are (bundle folder, log folder) pairs as the job will see them; ``exports``
    are the job's ``NAME=value`` words for the runner.
    """
    bundles = "".join(f"    {shlex.quote(b)}\n" for b, _ in entries)
    logs = "".join(f"    {shlex.quote(lg)}\n" for _, lg in entries)
    return ("#!/bin/bash\n" + "\n".join(header) + "\n"
            f"# Generated by easylaunch: {len(entries)} run(s); the array index picks the "
            "entry.\n"
            "set -o pipefail\n"
            f"BUNDLES=(\n{bundles})\n"
            f"LOG_DIRS=(\n{logs})\n"
            f"i={index}\n"
            'export BUNDLE="${BUNDLES[$i]}" LOG_DIR="${LOG_DIRS[$i]}"\n'
            + _prologue(exports) + line + "\n")


def task_line(bundle: str, log_dir: str, line: str) -> str:
    """One task-file line for the packer: the same start as a job script, for one run, on one
    line (the packer passes a time-limit warning on as TIMEOUT_SIGNAL)."""
    prologue = _prologue(f"{ENV_TIMEOUT_SIGNAL}={TIMEOUT_SIGNAL}").strip().replace("\n", "; ")
    text = (f"export BUNDLE={shlex.quote(bundle)} LOG_DIR={shlex.quote(log_dir)}; "
            f"{prologue}; {line}")
    if "\n" in text:
        raise LaunchError("a task-file line cannot hold a newline: keep each of SSS_PRE_CMDS "
                          "on one line, and paths without newlines")
    return text
