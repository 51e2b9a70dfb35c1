"""Ctrl-C during a wait: one line saying what goes on and how to cancel it, no traceback.

A wait (``Job.wait``, ``wait_all``, ``submit --wait``, ``logs -f``, ``watch``) that Ctrl-C
stops raises ``KeyboardInterrupt`` whose message is that line; uncaught in a script, the
excepthook installed here prints it alone, and Python ends as on any Ctrl-C (by SIGINT: exit
status 130 in a shell). Runs that go on without the launcher (schedulers, SSH, clouds, Ray,
detached local runs) are named with the command that cancels them; what stops with this
process (attached local runs) says so through :func:`on_interrupt`.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job

INTERRUPTED = "interrupted (Ctrl-C)"
_notes: list[Callable[[], str]] = []  # what stops with this process, said on Ctrl-C
_happened = False
_hook_installed = False


def on_interrupt(note: Callable[[], str]) -> None:
    """Say ``note()`` (e.g. "cancelling 2 local runs"; "" for nothing) in the line of every
    later Ctrl-C, and say a Ctrl-C in easylaunch in one line from now on."""
    if note not in _notes:
        _notes.append(note)
    install_hook()


def happened() -> bool:
    """Whether a Ctrl-C ended this process's script or command (its exit then cancels what
    stops with it, without waiting)."""
    return _happened


def note_interrupt() -> None:
    """Record that a Ctrl-C ends this process (the CLI's handler; the excepthook's own)."""
    global _happened
    _happened = True


def line(going: str = "") -> str:
    """``interrupted (Ctrl-C); cancelling 2 local runs; 3 slurm runs go on without this
    process: cancel them with `easylaunch cancel --sweep S``` (``going``: :func:`goes_on`)."""
    return "; ".join(filter(None, [INTERRUPTED, *(note() for note in _notes), going]))


def say(exc: BaseException | None = None) -> None:
    """Print the one line of a Ctrl-C on stderr: ``exc``'s message (a wait's, saying what
    goes on), else :func:`line`."""
    print(f"easylaunch: {(str(exc) if exc is not None else '') or line()}", file=sys.stderr)


def goes_on(what: str, count: int, cancel: Sequence[str]) -> str:
    """``3 slurm runs go on without this process: cancel them with `CANCEL```."""
    one = count == 1
    return (f"{what} {'goes' if one else 'go'} on without this process: cancel "
            f"{'it' if one else 'them'} with " + " and ".join(f"`{c}`" for c in cancel))


def interrupted(jobs: Sequence[Job]) -> KeyboardInterrupt:
    """The exception a wait for ``jobs`` (those still open) raises when Ctrl-C stops it, its
    message the one line (a plain ``KeyboardInterrupt``, so ``except KeyboardInterrupt``
    and Python's own exit on it hold)."""
    install_hook()
    going = [job for job in jobs if job.mode.goes_on_without(job)]
    return KeyboardInterrupt(line(
        goes_on(_runs(going), len(going), cancel_commands(going)) if going else ""))


def _runs(jobs: Sequence[Job]) -> str:
    """``run abc (slurm)``, ``3 slurm runs``, ``5 runs (3 slurm, 2 ssh)``."""
    if len(jobs) == 1:
        return f"run {jobs[0].id} ({jobs[0].mode.name})"
    modes = collections.Counter(job.mode.name for job in jobs)
    if len(modes) == 1:
        return f"{len(jobs)} {jobs[0].mode.name} runs"
    return f"{len(jobs)} runs ({', '.join(f'{n} {mode}' for mode, n in modes.items())})"


def cancel_commands(jobs: Sequence[Job]) -> list[str]:
    """The commands that cancel these runs: by id for one, else by their sweeps."""
    from easylaunch.runs.bundle import sweep_of

    start = "easylaunch cancel" + config_flag(jobs[0].mode.settings.path)
    if len(jobs) == 1:
        return [f"{start} {jobs[0].id}"]
    sweeps: dict[str | None, None] = {}
    for job in jobs:
        try:
            sweeps[sweep_of(job.launch_info)] = None
        except (OSError, ValueError):  # a record not readable now: name the runs instead
            sweeps[None] = None
    if None in sweeps:
        return [f"{start} {' '.join(job.id for job in jobs)}"]
    return [f"{start} --sweep {sweep}" for sweep in sweeps]


def config_flag(path: str | None) -> str:
    """`` --config PATH`` where a bare ``easylaunch`` would not read the settings file
    ``path`` (the one runs were launched with, or a command's --config), else "". Without
    ``path``: EASYLAUNCH_CONFIG's file, if set (a script's, or the ``easylaunch`` command's
    --config, which it exports)."""
    from easylaunch.settings import ENV_CONFIG, LOCAL_CONFIG_NAME, USER_CONFIG_PATH

    path = path or os.environ.get(ENV_CONFIG)
    if not path:
        return ""
    found = [p for p in (Path(LOCAL_CONFIG_NAME), USER_CONFIG_PATH.expanduser()) if p.is_file()]
    if found and found[0].resolve() == Path(path).resolve():
        return ""
    return f" --config {shlex.quote(os.path.abspath(path))}"


def install_hook() -> None:
    """Print a Ctrl-C that stopped easylaunch (its wait, or a launch) as one line, not a
    traceback; other exceptions go to the hook there was."""
    global _hook_installed
    if _hook_installed:
        return
    _hook_installed = True
    previous = sys.excepthook

    def excepthook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            note_interrupt()
            if _in_easylaunch(tb):
                say(exc)
                return
        previous(exc_type, exc, tb)

    sys.excepthook = excepthook


def _in_easylaunch(tb: Any) -> bool:
    """Whether a traceback passes through easylaunch (it was waiting when interrupted)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # easylaunch/
    while tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(package):
            return True
        tb = tb.tb_next
    return False


def exit_interrupted() -> None:
    """End this process as Python ends on an uncaught Ctrl-C: by SIGINT (130 in a shell)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # closed, or its reader went away
            stream.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
