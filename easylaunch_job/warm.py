"""The packer's warm workers: a Python with the job side and cloudpickle loaded once
(``python job.pyz serve``) that forks a child per run, instead of a new interpreter per task.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import sys

from easylaunch_job import self_command
from easylaunch_job.environment import ENV_RERUN, ENV_TIMEOUT_SIGNAL, TIMEOUT_SIGNAL, exit_code
from easylaunch_job.records import BUNDLE_JSON, STDERR_LOG, STDOUT_LOG, read_json
from easylaunch_job.run import run_bundle


class WorkerDied(Exception):
    """The warm worker process ended; its stderr says why."""


class WarmWorker:
    """A Python with the job side loaded that forks one child per run (``serve``)."""

    def __init__(self, env: dict[str, str], preload: list[str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*self_command(), "serve", *(["--preload", ",".join(preload)] if preload else [])],
            env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)

    def _answer(self) -> int:
        assert self.proc.stdout is not None  # (opened with PIPE)
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerDied(f"the warm worker ended (exit code {self.proc.wait()}); see the "
                             "packer's own log")
        return int(line.split()[1])

    def start(self, bundle: str, log_dir: str, rerun: bool) -> int:
        """Start a run; return the pid of its process (a process group leader)."""
        assert self.proc.stdin is not None  # (opened with PIPE)
        self.proc.stdin.write(f"{bundle}\t{log_dir}\t{int(rerun)}\n")
        self.proc.stdin.flush()
        return self._answer()

    def wait(self) -> int:
        """The exit code of the run started last."""
        return self._answer()

    def close(self) -> None:
        assert self.proc.stdin is not None  # (opened with PIPE)
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait()


def serve(argv: list[str] | None = None) -> int:
    """Worker loop: for each ``bundle<TAB>log dir<TAB>rerun`` on stdin, fork a child to run it.
    ``--preload a,b``: modules imported once here, before the first fork (a pool's heavy
    libraries); the runs' own code is loaded in each child."""
    try:
        import cloudpickle  # noqa: F401 - loaded once here, inherited by every child
    except ImportError:
        print(f"packer: cloudpickle is not installed for {sys.executable}; install it there "
              "(pip install cloudpickle)", file=sys.stderr)
        return 1
    args = argv or []
    for name in args[args.index("--preload") + 1].split(",") if "--preload" in args else []:
        try:
            importlib.import_module(name)
        except Exception as exc:  # (a run that needs it says so itself)
            print(f"packer: could not preload {name}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
    for line in sys.stdin:
        bundle, log_dir, rerun = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            os._exit(_run_child(bundle, log_dir, rerun == "1"))
        print(f"pid {pid}", flush=True)
        print(f"exit {exit_code(os.waitpid(pid, 0)[1])}", flush=True)
    return 0


def _run_child(bundle: str, log_dir: str, rerun: bool) -> int:
    """In the forked child: the environment and logs a task line sets up, then the run."""
    os.setsid()
    os.makedirs(log_dir, exist_ok=True)
    code_dirs = [os.path.join(bundle, d)
                 for d in read_json(os.path.join(bundle, BUNDLE_JSON)).get("code_dirs", [])]
    os.environ.update(BUNDLE=bundle, LOG_DIR=log_dir, PYTHONUNBUFFERED="1")
    os.environ[ENV_TIMEOUT_SIGNAL] = TIMEOUT_SIGNAL
    if rerun:
        os.environ[ENV_RERUN] = "1"
    if code_dirs:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            code_dirs + [p for p in [os.environ.get("PYTHONPATH")] if p])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, STDOUT_LOG), (2, STDERR_LOG)):
        os.dup2(os.open(os.path.join(log_dir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                        0o644), fd)
    try:
        return run_bundle(bundle, log_dir)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
