"""``local``: one subprocess per run on this machine.

Runs start in the background, at most ``max_parallel`` at once (default: the number of GPUs with
use_gpu, else the CPU cores), each in its own process group so a cancel ends everything it
started. With use_gpu, each run gets the least-used GPU in round-robin order through
CUDA_VISIBLE_DEVICES (or the ``gpu_id`` given). When the launching script ends, it waits for its
runs; Ctrl-C cancels them, and a launcher killed outright takes its runs with it (the runner
watches its parent). A launch from a ``multiprocessing`` worker, which ends without the exit
hook that waits, blocks until its runs end, as doodad's local mode did; ``skip_wait=False``
(doodad's keyword) asks for that anywhere.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import math
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from easylaunch.errors import LaunchError, check_count, notice
from easylaunch.modes import console, launchers
from easylaunch.modes.base import Composed, Mode, process_environment, shell_in
from easylaunch.modes.containers import DOCKER, SINGULARITY, Container
from easylaunch.modes.local import machine
from easylaunch.modes.local.machine import local_gpu_ids
from easylaunch.modes.local.warm_starts import Started, start_run
from easylaunch.runs.bundle import Run
from easylaunch.runs.commands import check_here
from easylaunch.runs.preview import Preview
from easylaunch.runs.process import in_kernel
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch.settings import Mount, Settings
from easylaunch_job.attempts import RestartPolicy, record_lost_end
from easylaunch_job.command import run_variables
from easylaunch_job.environment import ENV_GPU_ID, ENV_PARENT_PID, process_start_time
from easylaunch_job.records import STDERR_LOG, STDOUT_LOG, recorded_state, update_status
from easylaunch_job.states import TERMINAL_STATES


@dataclass(frozen=True)
class LocalCommand:
    """How to start one run: argv, added environment, working directory; ``warm``: as a fork
    of a warm Python (:mod:`~easylaunch.modes.local.warm_starts`), not in a container."""

    argv: list[str]
    env: dict[str, str]
    cwd: str
    warm: bool = False

    def start(self, added: dict[str, str], stdout: str, stderr: str) -> Started:
        """Start the run with this process's environment, the command's own variables and
        ``added`` (the run's GPU), its output appended to ``stdout`` and ``stderr``."""
        return start_run(self.argv, {**self.env, **added}, self.cwd, stdout, stderr, self.warm)


class _Slots:
    """At most ``cap`` runs at once; hands out the least-used GPU, round-robin on ties."""

    def __init__(self, cap: int, gpus: list[str]) -> None:
        self.cap = cap
        self.gpus = gpus
        self.running = 0
        self.use = {g: 0 for g in gpus}
        self.next = 0
        self.cond = threading.Condition()

    def acquire(self, pinned: str | None) -> str | None:
        with self.cond:
            while self.running >= self.cap:
                self.cond.wait()
            self.running += 1
            gpu = pinned if pinned is not None else self._pick()
            if gpu is not None:
                self.use[gpu] = self.use.get(gpu, 0) + 1
            return gpu

    def _pick(self) -> str | None:
        if not self.gpus:
            return None
        order = self.gpus[self.next:] + self.gpus[:self.next]
        gpu = min(order, key=lambda g: self.use[g])
        self.next = (self.gpus.index(gpu) + 1) % len(self.gpus)
        return gpu

    def release(self, gpu: str | None) -> None:
        with self.cond:
            self.running -= 1
            if gpu is not None:
                self.use[gpu] -= 1
            self.cond.notify()


_slots: dict[tuple, _Slots] = {}
_live: dict[str, _LocalRun] = {}
_runs_lock = threading.Lock()


class _LocalRun:
    """One run's subprocess, supervised by a thread of the launching process."""

    def __init__(self, run: Run, command: LocalCommand, slots: _Slots, pinned: str | None,
                 grace: float) -> None:
        self.run = run
        self.command = command
        self.slots = slots
        self.pinned = pinned
        self.grace = grace
        self.proc: Started | None = None
        self.started: str | None = None
        self.cancelled = False
        self.lock = threading.Lock()
        self.done = threading.Event()

    @property
    def log_dir(self) -> str:
        return str(self.run.log_dir)

    def supervise(self) -> None:
        gpu = self.slots.acquire(self.pinned)
        try:
            while self._start(gpu):  # again while the run is queued for another attempt
                assert self.proc is not None  # (_start started it)
                self._finish(self.proc, self.proc.wait())
        except Exception as exc:  # noqa: BLE001 - the run must end with a status, not a hang
            with contextlib.suppress(OSError):  # else Job.status() records the end it can
                update_status(self.log_dir, state="failed", ended_at=time.time(),
                                     error=f"could not start the run: {exc!r}")
        finally:
            self.slots.release(gpu)
            with _runs_lock:
                _live.pop(self.run.run_id, None)
            self.done.set()

    def _start(self, gpu: str | None) -> bool:
        with self.lock:
            state = recorded_state(self.log_dir)
            if self.cancelled or state != "queued":  # cancelled, maybe from another process
                return False
            gpus = {} if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu, ENV_GPU_ID: gpu}
            self.proc = self.command.start(gpus, str(self.run.log_dir / STDOUT_LOG),
                                           str(self.run.log_dir / STDERR_LOG))
            self.started = process_start_time(self.proc.pid)
            self.run.record_backend(pid=self.proc.pid, pgid=self.proc.pid, gpu_id=gpu,
                                    started=self.started)
            return True

    def _finish(self, proc: Started, returncode: int) -> None:
        machine.signal_group(proc.pid, signal.SIGKILL)  # what the run left behind
        with contextlib.suppress(OSError):  # a full disk: Job.status() keeps the end instead
            record_lost_end(self.log_dir, returncode, self.cancelled,
                                   RestartPolicy.of(self.run.meta))

    def cancel(self) -> None:
        with self.lock:
            self.cancelled = True
            update_status(self.log_dir, cancel_requested=True)  # (never restarted)
            if self.proc is None:
                update_status(self.log_dir, state="cancelled", ended_at=time.time(),
                                     error="cancelled before it started")
                return
        threading.Thread(target=machine.terminate_group,
                         args=(self.proc.pid, self.started, self.grace), daemon=True).start()


def _until_done(run: _LocalRun, timeout: float) -> bool:
    """Whether ``run`` ended within ``timeout`` seconds. Polled, not ``Event.wait``: a Ctrl-C
    may raise KeyboardInterrupt in the main thread just after it took the event's lock (CPython
    does not guard a ``with`` block's entry), and the supervisor's ``set()`` then waits for
    ever; seen as a Ctrl-C that hung after "cancelling 2 local runs"."""
    deadline, pause = time.monotonic() + timeout, 0.001  # (short first: a run's end is
    while not run.done.is_set():                          # awaited on job.result()'s path)
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True


def _recorded_end(log_dir: str) -> bool:
    return recorded_state(log_dir) in TERMINAL_STATES


def _interrupt_note() -> str:
    """What a Ctrl-C does to this process's local runs, in the line that says it."""
    with _runs_lock:
        live = len(_live)
    return f"cancelling {live} local run{'s' * (live != 1)}" if live else ""


def _wait_at_exit() -> None:
    """Let the launching script's runs finish; on Ctrl-C (now or before), cancel them (a
    Ctrl-C here also ends the process as interrupted: 130 in a shell)."""
    with _runs_lock:  # (supervisor threads remove runs as they end)
        live = list(_live.values())
    pending = [lr for lr in live if not lr.done.is_set() and not _recorded_end(lr.log_dir)]
    if not pending:
        return
    try:
        if console.happened() or in_kernel():  # (said already; a kernel's runs end with it)
            _cancel_all(pending)
            return
        print(f"easylaunch: waiting for {len(pending)} local run(s) to finish "
              "(Ctrl-C cancels them)", file=sys.stderr)
        with console.bar(len(pending), "waiting for local runs") as advance:
            for lr in pending:
                _until_done(lr, math.inf)
                advance(1)
    except KeyboardInterrupt:
        console.say()
        _cancel_all(pending)
        console.exit_interrupted()


def _cancel_all(pending: list[_LocalRun]) -> None:
    """Cancel every live local run; wait for those in ``pending`` to end."""
    with _runs_lock:
        live = list(_live.values())
    for lr in live:
        lr.cancel()
    for lr in pending:
        _until_done(lr, lr.grace + 5)


_exit_hooks_installed = False


def _install_exit_hooks() -> None:
    global _exit_hooks_installed
    if not _exit_hooks_installed:
        _exit_hooks_installed = True
        console.on_interrupt(_interrupt_note)
        atexit.register(_wait_at_exit)


def _link_data_mount(mount: Mount) -> None:
    """Make ``mount.local_dir`` reachable at its mount point through a symbolic link; a mount
    point that holds something else is left as it is (doodad's local mode ignored these)."""
    if os.path.realpath(mount.mount_point) == os.path.realpath(mount.local_dir):
        return
    if not os.path.lexists(mount.mount_point):
        os.makedirs(os.path.dirname(mount.mount_point), exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another launcher made it meanwhile
            os.symlink(mount.local_dir, mount.mount_point)
            return
    if os.path.realpath(mount.mount_point) != os.path.realpath(mount.local_dir):
        notice(f"NON_CODE_DIRS_TO_MOUNT: {mount.mount_point} already exists and is not "
               f"{mount.local_dir}; local runs see what is there (container modes bind "
               f"{mount.local_dir} over it)")


def _in_multiprocessing_worker() -> bool:
    """True in a process ``multiprocessing`` started (its exit skips the hooks that wait)."""
    mp = sys.modules.get("multiprocessing")
    return mp is not None and mp.parent_process() is not None


class LocalMode(Mode):
    """Background subprocesses on this machine; with a ``container`` part (local_singularity,
    local_docker), each inside an image, everything else the same. The log root is bound at
    its own path there, so bundles, code snapshots and run folders keep their paths inside;
    data folders are bound at their mount points (linked into place without a container)."""

    name = "local"
    restarts = True  # the supervising thread starts the run's next attempt
    # skip_wait=False: doodad's blocking; detach=True: runs outlive the launcher (LOCAL_DETACH);
    # pool="NAME": runs a warm pool takes (pools.py), on cluster="NAME" if it is there
    options = {"max_parallel": None, "skip_wait": None, "detach": None, "pool": None,
               "cluster": None}
    container: Container | None = None

    @classmethod
    def create(cls, settings: Settings, mode_options: dict[str, Any],
               kind: Composed | None = None) -> LocalMode:
        """Runs in this process's care (``local`` itself is :data:`LOCAL`, which picks between
        these and detached runs)."""
        detach = mode_options.get("detach")
        if detach not in (None, True, False):
            raise LaunchError(f"detach must be True or False, got {detach!r}")
        if detach and kind is not None:
            raise LaunchError(f"mode {kind.name!r} cannot detach its runs; detach=True works "
                              "in mode 'local'")
        if mode_options.get("pool") is not None and kind is not None:
            raise LaunchError(f"mode {kind.name!r} cannot run in a pool; pool= works in mode "
                              "'local'")
        if mode_options.get("cluster") is not None and mode_options.get("pool") is None:
            raise LaunchError("mode 'local' takes cluster= only with pool= (a pool on that "
                              "machine); for runs on a cluster, use mode 'slurm' or 'ssh'")
        return cls(settings, mode_options, kind)

    @functools.cached_property
    def _gpus(self) -> list[str]:
        """This machine's GPUs, asked once per launch (nvidia-smi can take seconds)."""
        return local_gpu_ids(self.settings.LOCAL_GPU_IDS)

    @property
    def runs_python(self) -> str:
        """LOCAL_PYTHON, or the Python of the launching script."""
        python = self.settings.LOCAL_PYTHON or sys.executable
        return shutil.which(python) or python

    def check(self, request: LaunchRequest) -> None:
        cap = self.opts["max_parallel"]
        if cap is not None:
            check_count("max_parallel", cap)
        if request.use_gpu:
            gpus = self._gpus
            if not gpus:
                raise LaunchError(
                    "use_gpu=True but no GPU was found (CUDA_VISIBLE_DEVICES is unset and "
                    "nvidia-smi lists none); pass use_gpu=False or set LOCAL_GPU_IDS")
            if request.gpu_id is not None and str(request.gpu_id) not in gpus:
                raise LaunchError(f"gpu_id={request.gpu_id!r} is not one of this machine's "
                                  f"GPUs ({', '.join(gpus)})")
        python = self.runs_python
        if shutil.which(python) is None:
            raise LaunchError(f"LOCAL_PYTHON={python!r} is not an executable "
                              "(a path, or a name on PATH)")
        if self.container is not None:
            self.container.check(self.settings, request.use_gpu, self.name, here=True)
        else:
            check_here(request)
            if not self.settings.LOCAL_PYTHON:  # (the runs' Python is this one)
                machine.check_trackers(self.settings.TRACKERS)

    def extra_launch_info(self, request: LaunchRequest) -> dict[str, str]:
        if self.container is None:
            return {}
        return {self.container.launch_info_key:
                str(self.container.image(self.settings, request.use_gpu))}

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: None = None
                ) -> list[LocalCommand]:
        commands = []
        launcher = f"{os.getpid()}:{process_start_time(os.getpid())}"
        python = self.runs_python
        inherited = [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else []
        for run in runs:
            pythonpath = [str(d) for d in run.code_dirs] + inherited
            argv = launchers.python_runner(python, run.bundle_dir)
            if self.container is not None:
                argv = self.container.wrap(
                    self.settings, request.use_gpu,
                    launchers.run_binds(request.log_root, self.settings.data_mounts()),
                    argv[1:], str(request.log_root))
            commands.append(LocalCommand(
                argv=argv,
                env={"PYTHONPATH": os.pathsep.join(pythonpath), "PYTHONUNBUFFERED": "1",
                     ENV_PARENT_PID: launcher},
                cwd=os.getcwd(), warm=self.container is None))
        return commands

    def _cap(self, gpus: list[str]) -> int:
        """Runs at once: max_parallel, else one per GPU used, else one per CPU."""
        return self.opts["max_parallel"] or len(gpus) or os.cpu_count() or 1

    def preview(self, request: LaunchRequest, runs: list[Run],
                prepared: list[LocalCommand]) -> Preview:
        gpus = self._gpus if request.use_gpu else []
        return Preview(self.name, len(runs), "this machine", commands=[
            f"cd {shlex.quote(c.cwd)} && env {shlex.join(f'{k}={v}' for k, v in c.env.items())}"
            f" {shlex.join(c.argv)}" for c in prepared],
            resources={"runs at once": self._cap(gpus), "GPUs": ", ".join(gpus) or "none"})

    def submit(self, request: LaunchRequest, runs: list[Run],
               prepared: list[LocalCommand]) -> list[RunRecord]:
        for mount in self.settings.data_mounts() if self.container is None else []:
            _link_data_mount(mount)
        gpus = self._gpus if request.use_gpu else []
        cap = self._cap(gpus)
        with _runs_lock:
            slots = _slots.setdefault((cap, tuple(gpus)), _Slots(cap, gpus))
        pinned = str(request.gpu_id) if request.use_gpu and request.gpu_id is not None else None
        _install_exit_hooks()
        jobs, started = [], []
        for run, command in zip(runs, prepared, strict=True):
            local_run = _LocalRun(run, command, slots, pinned,
                                  float(self.settings.LOCAL_CANCEL_GRACE_SECONDS))
            with _runs_lock:
                _live[run.run_id] = local_run
            started.append(local_run)
            threading.Thread(target=local_run.supervise, daemon=True,
                             name=f"easylaunch-{run.run_id}").start()
            jobs.append(RunRecord.of_run(run))
        blocking = self.opts["skip_wait"] is False
        if not blocking and _in_multiprocessing_worker():
            notice("launched from a multiprocessing worker, which ends without waiting for its "
                   "runs: each launch waits here until its local runs end")
            blocking = True
        if blocking:
            for local_run in started:
                _until_done(local_run, math.inf)
        return jobs

    def refresh(self, job: RunRecord) -> None:
        launch = job.launch_info
        if job.id in _live or not machine.same_host(launch):
            return  # its supervising thread records the outcome / pids mean nothing here
        if job.info().get("restarts") and not machine.launcher_gone(launch):
            return  # between two attempts, which its launcher's thread supervises
        backend = launch.get("backend", {})
        if backend.get("pid"):
            if not machine.is_alive(backend["pid"], backend.get("started")):
                job.record_end("failed", "the run's process ended without recording an "
                                       "outcome (killed, or out of memory?); see stderr.log")
        elif machine.launcher_gone(launch):
            job.record_end("cancelled", "the launching process ended before this run started")

    def cancel(self, job: RunRecord) -> None:
        local_run = _live.get(job.id)
        if local_run is not None:
            local_run.cancel()
            return
        update_status(str(job.log_dir), cancel_requested=True)
        backend = job.launch_info.get("backend", {})
        if machine.is_alive(backend.get("pid"), backend.get("started")):
            machine.terminate_group(backend["pgid"], backend.get("started"),
                                      float(self.settings.LOCAL_CANCEL_GRACE_SECONDS))
        job.record_end("cancelled", "cancelled")

    def shell(self, job: RunRecord) -> tuple[list[str], dict[str, str] | None]:
        """bash in the run's folder, with the environment its process started with."""
        backend = job.launch_info.get("backend", {})
        if not machine.same_host(job.launch_info) or not machine.is_alive(
                backend.get("pid"), backend.get("started")):
            raise LaunchError(f"run {job.id}'s process is not running on this machine")
        if self.container is not None:
            raise LaunchError(f"run {job.id} runs inside an image ({self.name}); open a shell "
                              "there with the container tool's own exec")
        folder = str(job.log_dir)
        env = {**process_environment(backend["pid"]),
               **run_variables(job.id, folder)}
        return shell_in(folder, {}), env

    def goes_on_without(self, job: RunRecord) -> bool:
        """A run this process supervises stops with it (its exit cancels it); in a Jupyter
        kernel, which an interrupt does not end, it goes on."""
        return job.id not in _live or in_kernel()

    def wait_for_change(self, job: RunRecord, timeout: float) -> None:
        local_run = _live.get(job.id)
        if local_run is not None:
            _until_done(local_run, timeout)
        else:
            time.sleep(timeout)


LOCAL_SINGULARITY = Composed("local_singularity", LocalMode, LocalMode.options, restarts=True,
                             parts={"container": SINGULARITY})  # (SINGULARITY_IMAGE)
LOCAL_DOCKER = Composed("local_docker", LocalMode, LocalMode.options, restarts=True,
                        parts={"container": DOCKER})  # (DOCKER_IMAGE, GPU_DOCKER_IMAGE)


class LocalOrDetached:
    """``local``'s table entry: a run in this process's care (:class:`LocalMode`), or with
    ``detach`` (LOCAL_DETACH by default) under a supervisor of its own (imported only then: it
    brings the transport's machinery). Used as a Mode class is (``name``, ``options``,
    ``restarts``, ``create``)."""

    name = LocalMode.name
    options = LocalMode.options
    restarts = LocalMode.restarts
    needs_bundle = True

    @staticmethod
    def create(settings: Settings, mode_options: dict[str, Any]) -> Mode:
        attached = LocalMode.create(settings, mode_options)  # (detach checked there)
        detach = mode_options.get("detach")
        if mode_options.get("pool") is not None:
            if detach is False:
                raise LaunchError("a pool's runs outlive the launching script: leave "
                                  "detach=False out with pool=")
            from easylaunch.modes.local.pooled import PooledMode

            return PooledMode(settings, mode_options, attached)
        if not (settings.LOCAL_DETACH if detach is None else detach):
            return attached
        # (late: detached runs bring the SSH mode's modules, which attached runs do without)
        from easylaunch.modes.local.detached import DetachedLocalMode

        return DetachedLocalMode(settings, mode_options, attached)


LOCAL = LocalOrDetached()
