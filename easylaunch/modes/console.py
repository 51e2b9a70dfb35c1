"""This process on its terminal: progress bars (rich, on a terminal only) and a Ctrl-C said in
one line, no traceback.

A wait (``Job.wait``, ``wait_all``, ``submit --wait``, ``logs -f``, ``watch``) that Ctrl-C
stops raises ``KeyboardInterrupt`` whose message is that line (:mod:`easylaunch.tracking.
interrupts` names the runs that go on and how to cancel them); uncaught in a script, the
excepthook installed here prints it alone, and Python ends as on any Ctrl-C (by SIGINT: exit
status 130 in a shell). What stops with this process (attached local runs) says so through
:func:`on_interrupt`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from easylaunch.runs.process import in_kernel

T = TypeVar("T")
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
    # (a kernel's Ctrl-C, Jupyter's stop button, does not end it: nothing stops with it)
    notes = () if in_kernel() else _notes
    return "; ".join(filter(None, [INTERRUPTED, *(note() for note in notes), going]))


def say(exc: BaseException | None = None) -> None:
    """Print the one line of a Ctrl-C on stderr: ``exc``'s message (a wait's, saying what
    goes on), else :func:`line`."""
    print(f"easylaunch: {(str(exc) if exc is not None else '') or line()}", file=sys.stderr)


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


@contextlib.contextmanager
def bar(total: int, description: str) -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``: a rich progress bar on a terminal for 2+ items, else a no-op."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total)
        yield lambda n: progress.advance(task, n)


def track(items: Sequence[T], description: str) -> Iterator[T]:
    """Iterate over ``items`` with a progress bar (on a terminal)."""
    with bar(len(items), description) as advance:
        for item in items:
            yield item
            advance(1)


@contextlib.contextmanager
def state_bar(total: int, description: str) -> Iterator[Callable[[int, str], None]]:
    """Yield ``show(done, counts)``: a bar of ``total`` runs with counts by state on a
    terminal for 2+ runs (elapsed time, no jumpy estimate), else a no-op."""
    if total < 2 or not sys.stderr.isatty():
        yield lambda done, counts: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[counts]}"), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=total, counts="")
        yield lambda done, counts: progress.update(task, completed=done, counts=counts)
