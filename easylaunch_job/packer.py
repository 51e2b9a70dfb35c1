"""Run the lines of a task file with N workers (htp's packer in an allocation; ssh mode's on a
remote machine; detached local runs' supervisor).

``python job.pyz pack TASKFILE --state-dir DIR [--workers N] [--runs RUNS.tsv [--warm]
[--resubmit SCRIPT [--scheduler pbs]]] [--gpus 0,1] [--shared] [--warn-before SECONDS]``

Each worker takes the next task, runs its line with bash, and records ``task-<i>.json``
(state, exit code, times) plus ``task-<i>.out``/``.err`` in the state folder. A failing task
does not stop the others. Running the same task file again skips the tasks that already
succeeded and reruns the others. ``task-<i>.cancel`` in the state folder cancels task i (before
it starts, or while it runs: SIGTERM, then SIGKILL after a grace period). SIGTERM and SIGUSR1
(the time-limit warning) are passed on to the running tasks.

``--runs`` (one ``bundle<TAB>log dir`` line per task) names the easylaunch run each task
starts. The packer then records the end of a run whose process it could not record itself, and
runs a task again when its run ended queued for another attempt (easylaunch's restarts). With
``--warm`` (a task line does nothing but start the run), each worker is a warm Python that has
loaded the job side and cloudpickle once and forks a child per run (``job.pyz serve``), instead
of paying a new interpreter per task. With ``--resubmit SCRIPT``, an allocation stopped by a
signal (its time limit, a preemption) submits SCRIPT again (``--scheduler``: slurm, or pbs)
for the runs left, which go on in the new allocation (only those: ``EASYLAUNCH_CONTINUE`` is
set there).
``--warn-before SECONDS`` stops it as that warning would, SECONDS before the job's time limit
(``EASYLAUNCH_TIME_LIMIT_AT``), where the scheduler warns no one (PBS).

With ``--shared``, the packers of one job array (an allocation each) share the task file,
each task claimed once (:mod:`easylaunch_job.claims`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import cast

from easylaunch_job import pool as pools
from easylaunch_job.attempts import RestartPolicy
from easylaunch_job.claims import Claims, tasks_left
from easylaunch_job.environment import (
    ENV_CONTINUE,
    ENV_RERUN,
    ENV_TIME_LIMIT_AT,
    forget_rank,
    rank_info,
    signal_group,
)
from easylaunch_job.records import (
    BUNDLE_JSON,
    DamagedRecord,
    read_json,
    write_json_atomic,
)
from easylaunch_job.resubmit import resubmit_allocation
from easylaunch_job.run import EXIT_RESTART
from easylaunch_job.schedulers import SCHEDULERS, SLURM_SIDE, JobSide, scheduler_named
from easylaunch_job.supervisor import end_of_job
from easylaunch_job.warm import WarmWorker, WorkerDied

CANCEL_POLL_SECONDS = 0.5
KILL_AFTER_SECONDS = 10.0
LEFT = (None, "queued", "running")  # task states an allocation that goes on takes up
ENDED = ("succeeded", "failed", "cancelled")


def read_tasks(path: str) -> list[str]:
    """The task lines (blank lines and # comments left out)."""
    with open(path) as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


class Packer:
    """Runs tasks on a fixed number of workers and records each one's outcome."""

    def __init__(self, tasks: list[str], state_dir: str, workers: int,
                 runs: list[tuple[str, str]] | None = None, gpus: list[str] | None = None,
                 warm: bool = False, resubmit: str | None = None, scheduler: JobSide = SLURM_SIDE,
                 continuing: bool = False, claims: Claims | None = None,
                 only: frozenset[int] | None = None,
                 preload: list[str] | None = None, learn: str | None = None) -> None:
        self.tasks = tasks
        self.state_dir = state_dir
        self.workers = workers
        self.runs = runs
        self.gpus = gpus or []
        self.warm = warm and runs is not None
        self.resubmit = resubmit
        self.scheduler = scheduler  # (whose submit command --resubmit uses)
        self.continuing = continuing  # take up only the runs a stopped allocation left
        self.claims = claims  # (shared) where tasks are claimed for this submission
        self.only = only  # (continuing a shared allocation) the tasks it left
        self.own_failures = 0  # (shared) tasks this packer ran that did not succeed
        self.next = 0
        self.again: list[int] = []  # tasks whose run is queued for another attempt
        self.lock = threading.Lock()
        self.running: dict[int, tuple[int, float]] = {}  # task -> (pid, when SIGTERM was sent)
        self.stopping = False
        self.stopped_by: int | None = None  # the signal that stopped it
        self.preload = preload or []  # modules each warm worker imports before its first fork
        self.learn = learn  # (a pool's) where runs record the libraries workers preload next
        self.pool: pools.Watcher | None = None  # (a pool's packer: its task file grows)

    def _path(self, index: int, suffix: str) -> str:
        return os.path.join(self.state_dir, f"task-{index}.{suffix}")

    def cancelled(self, index: int) -> bool:
        """Whether task ``index`` is marked cancelled."""
        return os.path.exists(self._path(index, "cancel"))

    def _state(self, index: int) -> str | None:
        try:
            return read_json(self._path(index, "json")).get("state")
        except (OSError, DamagedRecord):
            return None

    def _take(self) -> int | None:
        """The next task to run; None when there is none (a pool's packer: once it ends)."""
        with self.lock:
            while True:
                index = self._next()
                if index is not None or self.pool is None or self.pool.closed or self.stopping:
                    return index
                self.pool.grown.wait()

    def _next(self) -> int | None:
        """(under self.lock) The next task this packer takes, if any is there now."""
        if self.again and not self.stopping:
            return self.again.pop(0)
        while self.next < len(self.tasks) and not self.stopping:
            index = self.next
            self.next += 1
            if self.only is not None and index not in self.only:
                continue
            state = self._state(index)
            if (state in LEFT if self.continuing else state != "succeeded") \
                    and (self.claims is None or self.claims.claim(index)):
                return index
        return None

    def _settle(self, index: int, code: int) -> bool:
        """Record an end its run could not record (killed, out of memory); True if the run is
        queued for another attempt."""
        if self.runs is None or code == 0:
            return False
        bundle, log_dir = self.runs[index]
        try:
            policy = RestartPolicy.of(read_json(os.path.join(bundle, BUNDLE_JSON)))
            return end_of_job(log_dir, code, policy) == EXIT_RESTART
        except (OSError, DamagedRecord):
            return False

    def _run(self, index: int, worker: WarmWorker | None, env: dict[str, str]) -> None:
        record = {"index": index, "line": self.tasks[index], "host": os.uname()[1]}
        if self.cancelled(index):
            write_json_atomic(self._path(index, "json"), dict(record, state="cancelled"))
            return
        rerun = self._state(index) is not None  # an earlier attempt did not succeed
        started = time.time()
        write_json_atomic(self._path(index, "json"), dict(record, state="running", started=started))
        with open(self._path(index, "out"), "ab") as out, \
                open(self._path(index, "err"), "ab") as err:
            try:
                if worker is not None:
                    assert self.runs is not None  # (warm workers come with runs)
                    pid = worker.start(self.runs[index][0], self.runs[index][1], rerun)
                    wait = worker.wait
                else:
                    proc = subprocess.Popen(["bash", "-c", self.tasks[index]], stdout=out,
                                            stderr=err, stdin=subprocess.DEVNULL,
                                            env=dict(env, **({ENV_RERUN: "1"} if rerun else {})),
                                            start_new_session=True)
                    pid, wait = proc.pid, proc.wait
                with self.lock:
                    self.running[index] = (pid, 0.0)
                code = wait()
            except WorkerDied as exc:
                err.write(f"packer: {exc}\n".encode())
                code = -1
            finally:
                with self.lock:
                    self.running.pop(index, None)
                    if self.pool is not None:
                        self.pool.busy_until = time.monotonic()
        cancelled = self.cancelled(index)
        restarting = not cancelled and self._settle(index, code)
        state = "succeeded" if code == 0 else "cancelled" if cancelled else \
            "queued" if restarting else "failed"
        write_json_atomic(self._path(index, "json"), dict(
            record, state=state, exit_code=code, started=started, ended=time.time()))
        self.own_failures += state in ("failed", "cancelled")
        if restarting:
            with self.lock:
                self.again.append(index)  # (an allocation that stops leaves it to the next)

    def _worker(self, slot: int) -> None:
        env = dict(os.environ)
        if self.gpus:  # worker i runs its tasks on GPU i (round robin past the last)
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        worker = WarmWorker(env, self.preload, self.learn) if self.warm else None
        try:
            while True:
                index = self._take()
                if index is None:
                    break
                self._run(index, worker, env)
                if worker is not None and worker.proc.poll() is not None:
                    worker = None  # it died: the remaining tasks run their own lines
        finally:
            if worker is not None:
                worker.close()

    def _watch_cancels(self, done: threading.Event) -> None:
        while not done.wait(CANCEL_POLL_SECONDS):
            with self.lock:
                running = dict(self.running)
            for index, (pid, asked) in running.items():
                if not self.cancelled(index):
                    continue
                late = asked and time.time() - asked > KILL_AFTER_SECONDS
                signal_group(pid, signal.SIGKILL if late else signal.SIGTERM)
                if not asked:
                    with self.lock:
                        if index in self.running:
                            self.running[index] = (pid, time.time())

    def forward(self, signum: int, _frame: object = None) -> None:
        """Pass a signal on to every running task; stop handing out new ones."""
        with self.lock:
            self.stopping = True
            self.stopped_by = self.stopped_by or signum
            running = [pid for pid, _ in self.running.values()]
        for pid in running:
            signal_group(pid, signum)

    def run(self) -> int:
        """Run every task not yet succeeded; 0 if all have succeeded now, else 1."""
        os.makedirs(self.claims.folder if self.claims else self.state_dir, exist_ok=True)
        lock = None if self.claims else self._lock()  # (held while it runs)
        if lock is False:
            return 2
        done = threading.Event()
        threading.Thread(target=self._watch_cancels, args=(done,), daemon=True).start()
        threads = [threading.Thread(target=self._worker, args=(slot,))
                   for slot in range(self.workers)]
        if self.pool is not None:
            threads.append(threading.Thread(target=self.pool.watch))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        if self.stopping and self.resubmit and self.claims and not self.claims.gathered():
            return 1 if self.own_failures else 0  # (packer 0 submits for the allocation)
        with self.pool.ending() if self.pool is not None else contextlib.nullcontext():
            states = [self._state(i) for i in range(len(self.tasks))]
            ok = states.count("succeeded")
            print(f"packer: {ok} of {len(states)} tasks succeeded", file=sys.stderr)
            left = [i for i, state in enumerate(states)  # (a cancelled one never goes on;
                    if state in LEFT and not self.cancelled(i)  # one not left to this
                    and (self.only is None or i in self.only)]  # allocation is another's)
            if self.claims is not None and self.stopping:  # (its allocation's, and those no
                left = [i for i in left if self.claims.ours(i) or self.claims.claim(i)]
            moved_to = None
            if self.stopping and self.resubmit and left and (
                    self.pool is None or self.pool.may_go_on(self.stopped_by)):
                moved_to = self._go_on_elsewhere(left)
            if self.pool is not None:
                self.pool.ended(moved_to)
        if self.claims is not None:  # (the others' tasks may still run)
            return 1 if self.own_failures else 0
        return 0 if ok == len(states) else 1

    def _lock(self) -> object:
        """The lock of the task file (False: another packer holds it)."""
        lock = open(os.path.join(self.state_dir, ".packer.lock"), "w")  # noqa: SIM115
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"packer: another packer is running this task file ({self.state_dir}); "
                  "not starting", file=sys.stderr)
            return False
        except OSError:
            pass  # a file system without locks: go on
        return lock

    def _go_on_elsewhere(self, left: list[int]) -> str | None:
        """Submit the allocation's script again for the runs left (see
        :func:`~easylaunch_job.resubmit.resubmit_allocation`); the new job's id, or None."""
        if self.runs is None:  # (--resubmit comes with --runs)
            return None
        if self.pool is not None and self.pool.alone:
            self.pool.each_alone(left)
            return None
        assert self.resubmit is not None  # (called with --resubmit alone)
        going_on = self.claims.leave(left) if self.claims is not None else "1"
        return resubmit_allocation(self.scheduler, self.resubmit, going_on,
                                   [self.runs[index][1] for index in left])


def open_tasks(taskfile: str, state_dir: str) -> list[int]:
    """The tasks that may still run: neither ended (succeeded, failed, cancelled) nor marked
    cancelled. None left: no allocation of the task file has anything to do."""
    packer = Packer(read_tasks(taskfile), state_dir, 1)
    return [i for i in range(len(packer.tasks))
            if packer._state(i) not in ENDED and not packer.cancelled(i)]


def default_workers() -> int:
    """The CPUs of this allocation (SLURM_CPUS_PER_TASK or SLURM_CPUS_ON_NODE), else all."""
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return os.cpu_count() or 1


def _parser() -> argparse.ArgumentParser:
    """The packer's command line (job.pyz pack)."""
    parser = argparse.ArgumentParser(description="Run a task file's lines with N workers.")
    parser.add_argument("taskfile")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--runs", help="bundle<TAB>log dir per task: the run each one starts")
    parser.add_argument("--warm", action="store_true",
                        help="fork the runs in warm workers instead of running the lines")
    parser.add_argument("--resubmit", help="the job script to submit again for the runs left "
                        "when a signal stops the allocation")
    parser.add_argument("--alone", help="(a pool) at the time limit's warning, submit this "
                        "script once for each run left, instead of --resubmit's for them all")
    parser.add_argument("--scheduler", choices=sorted(SCHEDULERS), default=SLURM_SIDE.name,
                        help="whose submit command --resubmit uses")
    parser.add_argument("--gpus", help="comma-separated GPU ids: worker i runs on GPU i "
                        "('granted': those the scheduler gave this job, CUDA_VISIBLE_DEVICES)")
    parser.add_argument("--shared", action="store_true", help="several packers (a job array) "
                        "take tasks from this task file, each task claimed once")
    parser.add_argument("--pool-idle", type=float, help="a pool's packer (the task file's "
                        "folder is the pool's): take runs as they are added; end after this "
                        "many seconds without one")
    parser.add_argument("--warn-before", type=float, help="stop as at the time-limit warning "
                        "(SIGUSR1) this many seconds before the job's time limit "
                        "(EASYLAUNCH_TIME_LIMIT_AT): for schedulers that warn no one (PBS)")
    parser.add_argument("--preload", help="comma-separated modules each warm worker imports "
                        "before it forks its first run")
    parser.add_argument("--learn-preloads", action="store_true", help="(a pool) each warm "
                        "worker also imports, before its next fork, the installed libraries "
                        "earlier runs imported (recorded in the pool's learned/ folder)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the packer."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.pool_idle is not None and not (args.runs and args.warm):
        parser.error("--pool-idle needs --runs and --warm")
    if args.learn_preloads and args.pool_idle is None:
        parser.error("--learn-preloads is for a pool's packer (--pool-idle)")
    rank, _, world = rank_info()  # (srun's, a packer on each node: the packer's place;
    forget_rank()                  # not the runs' rank)
    tasks = [] if args.pool_idle is not None else read_tasks(args.taskfile)
    runs: list[tuple[str, str]] | None = [] if args.pool_idle is not None else None
    if args.runs and runs is None:
        with open(args.runs) as f:
            # (two fields a line, as the launching side writes them)
            runs = [cast("tuple[str, str]", tuple(line.rstrip("\n").split("\t")))
                    for line in f if line.strip()]
        if len(runs) != len(tasks):
            parser.error("--runs needs one line per task")
    packer = Packer(tasks, args.state_dir, args.workers or default_workers(), runs,
                    _gpus(args.gpus), args.warm, args.resubmit,
                    scheduler_named(args.scheduler),
                    # (a pool never runs a task again that ended: a requeued job's packer
                    # takes up those its first allocation left)
                    continuing=bool(os.environ.get(ENV_CONTINUE)) or args.pool_idle is not None,
                    only=tasks_left(os.environ.get(ENV_CONTINUE)),
                    claims=Claims(args.state_dir, (rank, world)) if args.shared else None,
                    preload=args.preload.split(",") if args.preload else None,
                    learn=os.path.join(os.path.dirname(os.path.abspath(args.taskfile)),
                                       pools.LEARNED) if args.learn_preloads else None)
    if args.pool_idle is not None:  # (it reads the task file as it grows)
        packer.pool = pools.Watcher(os.path.dirname(os.path.abspath(args.taskfile)),
                                    args.pool_idle, packer, args.alone)
    signal.signal(signal.SIGTERM, packer.forward)
    signal.signal(signal.SIGUSR1, packer.forward)
    if args.warn_before is not None and os.environ.get(ENV_TIME_LIMIT_AT):
        warning = threading.Timer(float(os.environ[ENV_TIME_LIMIT_AT]) - args.warn_before -
                                  time.time(), packer.forward, (signal.SIGUSR1,))
        warning.daemon = True
        warning.start()
    return packer.run()


def _gpus(listed: str | None) -> list[str] | None:
    """The GPUs the workers take one each: those listed, or those the scheduler granted the
    job (``granted``: Slurm's CUDA_VISIBLE_DEVICES, as it set it)."""
    if listed == "granted":
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    return listed.split(",") if listed else None
