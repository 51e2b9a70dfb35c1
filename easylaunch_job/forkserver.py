"""``python job.pyz forkserver``: a warm Python that starts each local run as a fork of itself.

A new interpreter per run spends most of a short run's time starting up and importing the job
side and cloudpickle. This process does that once, then reads one request a line on stdin
(JSON: ``id``, ``argv``, ``env``, ``cwd``, ``stdout``, ``stderr``) and forks a child that
becomes what ``python job.pyz ARGV...`` would be: its own session, folder, environment and logs.
It answers ``pid ID PID`` at once and ``exit PID CODE`` when the child ends (``CODE`` as
:func:`~easylaunch_job.environment.exit_code` gives it). It ends when stdin closes; its
children go on.

Nothing of a user's code is loaded here, and no thread runs, so every fork starts clean.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys

from easylaunch_job.environment import exit_code

# What the children would import first: loaded here once, before any fork.
PRELOADED = ("cloudpickle", "easylaunch_job.supervisor")


def serve_forks(argv: list[str] | None = None) -> int:
    """Serve fork requests until stdin closes."""
    import importlib

    try:
        for module in PRELOADED:
            importlib.import_module(module)
    except ImportError as exc:
        sys.stderr.write(f"easylaunch forkserver: {exc}; runs start as new processes\n")
        return 1
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # (wakes the select)
    pending = b""
    while True:
        ready, _, _ = select.select([0, wake_read], [], [])
        if wake_read in ready:
            os.read(wake_read, 4096)
            _report_exits()
        if 0 in ready:
            data = os.read(0, 65536)
            if not data:
                return 0
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    _become(request, (wake_read, wake_write))  # (never returns)
                _say(f"pid {request['id']} {pid}")
            _report_exits()  # (a child that ended before its SIGCHLD was set to wake us)


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def _report_exits() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _say(f"exit {pid} {exit_code(status)}")


def _become(request: dict, fds: tuple[int, int]) -> None:
    """In the child: the process ``python job.pyz ARGV...`` would start, then its end."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in fds:
        os.close(fd)
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                            (1, request["stdout"], os.O_WRONLY | os.O_APPEND | os.O_CREAT),
                            (2, request["stderr"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = list(request["argv"])
    sys.path[0] = sys.argv[0]  # (the run's job.pyz, not the server's folder)
    from easylaunch_job.__main__ import main

    sys.exit(main(sys.argv[1:]))  # (an interpreter's end: atexit hooks, files flushed)
