"""Local runs started as forks of a warm Python (``python job.pyz forkserver``).

A no-op run spent most of its time starting an interpreter and importing the job side and
cloudpickle. The fork server pays that once per launching process; each run after it starts as
a fork, in its own session, with its own environment, folder and logs, as a new process would
(:mod:`easylaunch_job.forkserver`). Only runs started with the launching Python and its
interpreter settings (``PYTHON*``, locale) use it; the others, and every run when the server
cannot start, start as new processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from typing import Protocol

from easylaunch_job import self_command
from easylaunch_job.environment import process_start_time

# What a Python reads from its environment as it starts: a run started with other values
# cannot be a fork of a server started with these.
_STARTUP_PREFIXES = ("PYTHON", "LC_", "LANG")
_WAIT_POLL = 0.05  # seconds between looks at a run whose server is gone


class Started(Protocol):
    """A run's process, however it was started (``subprocess.Popen`` is one)."""

    pid: int

    def wait(self) -> int: ...


class ServerGone(Exception):
    """The fork server ended; runs start as new processes."""


class ForkServer:
    """One warm Python for runs of one interpreter, job side and startup environment."""

    def __init__(self, argv: list[str], env: Mapping[str, str]) -> None:
        self.owner = os.getpid()
        self.proc = subprocess.Popen([*argv, "forkserver"], env=dict(env), start_new_session=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self.send_lock = threading.Lock()
        self.heard = threading.Condition()
        self.pids: dict[int, int] = {}  # request id -> pid
        self.exits: dict[int, int] = {}  # pid -> exit code
        self.gone = False
        self.requests = 0
        self.forked = 0
        threading.Thread(target=self._listen, daemon=True, name="easylaunch-forkserver").start()

    def _listen(self) -> None:
        assert self.proc.stdout is not None  # (opened with PIPE)
        for line in self.proc.stdout:
            kind, key, value = line.split()
            with self.heard:
                (self.pids if kind == b"pid" else self.exits)[int(key)] = int(value)
                self.heard.notify_all()
        with self.heard:
            self.gone = True
            self.heard.notify_all()

    def start(self, argv: list[str], env: Mapping[str, str], cwd: str, stdout: str,
              stderr: str) -> Forked:
        """Start ``argv`` (``[python, job.pyz, ...]``) as a fork; raises ServerGone."""
        with self.send_lock:
            self.requests += 1
            request = self.requests
            line = json.dumps({"id": request, "argv": argv[1:], "env": dict(env), "cwd": cwd,
                               "stdout": stdout, "stderr": stderr}) + "\n"
            try:
                assert self.proc.stdin is not None  # (opened with PIPE)
                self.proc.stdin.write(line.encode())
                self.proc.stdin.flush()
            except OSError as exc:
                self.gone = True
                raise ServerGone(str(exc)) from None
        with self.heard:
            while request not in self.pids and not self.gone:
                self.heard.wait()
            if request not in self.pids:
                raise ServerGone(f"the fork server ended (exit code {self.proc.poll()})")
            self.forked += 1
            return Forked(self, self.pids.pop(request))

    def wait(self, pid: int) -> int:
        """The exit code of ``pid`` once it ended. Where the server ended first, the
        process is watched until it is gone, and its end is 1 (its record says more)."""
        with self.heard:
            while pid not in self.exits and not self.gone:
                self.heard.wait()
            if pid in self.exits:
                return self.exits.pop(pid)
        started = process_start_time(pid)
        while started is not None and process_start_time(pid) == started:
            time.sleep(_WAIT_POLL)
        return 1


class Forked:
    """A run's process forked by a :class:`ForkServer`."""

    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server = server
        self.pid = pid

    def wait(self) -> int:
        return self.server.wait(self.pid)


_servers: dict[tuple, ForkServer] = {}
_refused: set[tuple] = set()  # startups whose server ended before it forked a run
_servers_lock = threading.Lock()


def _server_for(argv: list[str], added: Mapping[str, str]) -> ForkServer | None:
    """The fork server for runs of ``argv`` (``[python, job.pyz, ...]``) with this process's
    startup environment, started if there is none; None where none can serve: another Python
    than this one (the server runs the job side installed with easylaunch, which the run's
    job.pyz was made from), or one that ended before it forked a run."""
    if os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
        return None
    startup = tuple(sorted((k, v) for k, v in os.environ.items()
                           if k.startswith(_STARTUP_PREFIXES) and k != "PYTHONPATH"))
    key = (startup, os.environ.get("PYTHONPATH"), added.get("PYTHONUNBUFFERED"))
    with _servers_lock:
        server = _servers.get(key)
        if server is not None and server.gone and not server.forked:
            _refused.add(key)
        if key in _refused:
            return None
        if server is None or server.gone or server.owner != os.getpid():
            server = _servers[key] = ForkServer(self_command(), dict(os.environ, **{
                k: v for k, v in added.items() if k == "PYTHONUNBUFFERED"}))
        return server


def start_run(argv: list[str], added: Mapping[str, str], cwd: str, stdout: str, stderr: str,
              warm: bool) -> Started:
    """Start a run's ``argv`` in ``cwd`` with this process's environment and ``added``, its
    output appended to ``stdout`` and ``stderr``: with ``warm``, as a fork of the warm server
    for its Python where it can; else as a new process."""
    env = dict(os.environ, **added)
    for _ in range(2 if warm else 0):  # (a server that ended since its last run starts again)
        server = _server_for(argv, added)
        if server is None:
            break
        try:
            return server.start(argv, env, cwd, stdout, stderr)
        except ServerGone:
            continue
    with open(stdout, "ab") as out, open(stderr, "ab") as err:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, start_new_session=True)
