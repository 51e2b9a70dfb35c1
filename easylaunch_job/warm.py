"""The packer's warm workers: a Python with the job side and cloudpickle loaded once
(``python job.pyz serve``) that forks a child per run, instead of a new interpreter per task.

A pool's workers may also learn their preloads (``--learn DIR``): each run records in DIR the
installed libraries it imported (modules from site-packages), and each worker imports those
before its next fork. The runs' own code, and modules beside their script, load in each run.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import site
import subprocess
import sys
import sysconfig

from easylaunch_job import self_command
from easylaunch_job.environment import ENV_RERUN, ENV_TIMEOUT_SIGNAL, TIMEOUT_SIGNAL, exit_code
from easylaunch_job.records import (
    BUNDLE_JSON,
    STDERR_LOG,
    STDOUT_LOG,
    DamagedRecord,
    read_json,
    write_json_atomic,
)
from easylaunch_job.run import run_bundle


class WorkerDied(Exception):
    """The warm worker process ended; its stderr says why."""


class WarmWorker:
    """A Python with the job side loaded that forks one child per run (``serve``)."""

    def __init__(self, env: dict[str, str], preload: list[str] | None = None,
                 learn: str | None = None) -> None:
        self.proc = subprocess.Popen(
            [*self_command(), "serve", *(["--preload", ",".join(preload)] if preload else []),
             *(["--learn", learn] if learn else [])],
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
    libraries); ``--learn DIR``: also those earlier runs imported (see the module's doc). The
    runs' own code is loaded in each child."""
    try:
        import cloudpickle  # noqa: F401 - loaded once here, inherited by every child
    except ImportError:
        print(f"packer: cloudpickle is not installed for {sys.executable}; install it there "
              "(pip install cloudpickle)", file=sys.stderr)
        return 1
    args = argv or []
    tried: set[str] = set()
    _preload(args[args.index("--preload") + 1].split(",") if "--preload" in args else [], tried)
    learn = args[args.index("--learn") + 1] if "--learn" in args else None
    read: set[str] = set()  # (the records of runs read already)
    for line in sys.stdin:
        if learn is not None:
            _preload(_learned(learn, read), tried)
        bundle, log_dir, rerun = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            os._exit(_run_child(bundle, log_dir, rerun == "1", learn))
        print(f"pid {pid}", flush=True)
        print(f"exit {exit_code(os.waitpid(pid, 0)[1])}", flush=True)
    return 0


def _preload(names: list[str], tried: set[str]) -> None:
    """Import each module not tried yet (one that fails is said once: a run that needs it
    says so itself)."""
    for name in names:
        if name in tried or name in sys.modules:
            continue
        tried.add(name)
        try:
            importlib.import_module(name)
        except Exception as exc:
            print(f"packer: could not preload {name}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)


def _learned(folder: str, read: set[str]) -> list[str]:
    """The libraries the runs recorded in ``folder`` imported (records not in ``read``, which
    gets their names)."""
    names: set[str] = set()
    with contextlib.suppress(OSError):
        for entry in set(os.listdir(folder)) - read:
            read.add(entry)
            with contextlib.suppress(OSError, DamagedRecord):
                names.update(read_json(os.path.join(folder, entry)).get("imported", []))
    return sorted(names)


def installed_modules() -> list[str]:
    """The top-level modules this process imported from site-packages: installed libraries,
    not the run's own code (cloudpickle and private modules left out)."""
    paths = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    paths.update(getattr(site, "getsitepackages", list)())
    roots = tuple(os.path.realpath(p) + os.sep for p in paths)
    found = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if "." in name or name.startswith("_") or name == "cloudpickle" or not path:
            continue
        if os.path.realpath(path).startswith(roots):
            found.append(name)
    return sorted(found)


def _run_child(bundle: str, log_dir: str, rerun: bool, learn: str | None) -> int:
    """In the forked child: the environment and logs a task line sets up, then the run (with
    ``learn``, then the libraries it imported are recorded there)."""
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
        if learn is not None:
            with contextlib.suppress(OSError):
                os.makedirs(learn, exist_ok=True)
                write_json_atomic(os.path.join(learn, f"{os.getpid()}.json"),
                                  {"imported": installed_modules()})
