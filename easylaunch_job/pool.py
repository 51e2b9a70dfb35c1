"""A warm pool's folder, as the launching side and the pool's packer share it.

A pool is a packer that stays: its task file grows as launches add runs, and it ends after a
while with nothing to do. Each start of a pool has a folder of its own,
``<log root>/.pools/<name>/<when it started>/``, which holds:

- ``pool.json``: what the pool was started with, and its packer (pid, start time, log);
- ``tasks.txt`` and ``runs.tsv``: one line per run, appended by :func:`add_runs` (the names
  of any packer's task files, an ``htp`` batch's too);
- ``task-state/``: the packer's record of each task (as any packer's);
- ``ended``: written by the packer as it ends (why, in words); a pool with it takes no runs;
  a pool's packer stopped at its time limit's warning with runs left writes none: it
  submits the pool's job script again, and ``pool.json`` names the new job. (With
  ``runs_left="jobs"``, it submits ``run.sbatch`` or ``run.qsub`` once for each run left, and
  writes ``ended``, naming those jobs.) Nor does one stopped by SIGTERM: a preempted job,
  requeued, goes on; a cancelled one is gone;
- ``learned/``: with ``learn``, the installed libraries each run imported, which the workers
  import before their next fork (:mod:`easylaunch_job.warm`);
- ``time-limit-at``: when the allocation's time limit comes (epoch seconds), written by the
  packer where its job script said (PBS's: ``pool ls`` shows the time left, qstat does not);
- ``wake``: a FIFO the packer listens on, so that a run added on its machine starts at once
  (on another node, the packer finds new lines at its next look).

``pool.lock`` orders an addition against the packer's decision to end: a run is either added
before the pool ends (and runs), or refused.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

from easylaunch_job.claims import write_tasks_left
from easylaunch_job.environment import ENV_TIME_LIMIT_AT, is_alive
from easylaunch_job.records import (
    DamagedRecord,
    read_json,
    update_status,
    write_bytes_atomic,
    write_json_atomic,
)
from easylaunch_job.resubmit import resubmit_allocation
from easylaunch_job.schedulers import SLURM_SIDE, JobSide, scheduler_named

if TYPE_CHECKING:
    from easylaunch_job.packer import Packer

POOLS = ".pools"  # in a log root: one folder per pool
POOL_JSON = "pool.json"
TASKS = "tasks.txt"
RUNS = "runs.tsv"
TASK_STATE = "task-state"
ENDED = "ended"
WAKE = "wake"
LOCK = "pool.lock"
LOG = "packer.log"
LEARNED = "learned"  # where runs record the libraries they imported (start_pool(learn=True))
TIME_LIMIT_AT = "time-limit-at"  # when its allocation's time limit comes, where the job said
LOOK_SECONDS = 0.05  # how often the packer looks for runs added from another node


class PoolEnded(Exception):
    """The pool's packer has ended (or is ending): it takes no more runs."""


@contextlib.contextmanager
def pool_lock(folder: str) -> Iterator[None]:
    """The pool's lock, held while runs are added or the packer decides to end."""
    import fcntl

    fd = os.open(os.path.join(folder, LOCK), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def ended_why(folder: str) -> str | None:
    """Why the pool ended, or None while it takes runs."""
    try:
        with open(os.path.join(folder, ENDED)) as f:
            return f.read().strip() or "it ended"
    except FileNotFoundError:
        return None


def add_runs(folder: str, tasks: Sequence[str], runs: Sequence[str]) -> dict:
    """Append runs (a task line and a ``bundle<TAB>log dir`` line each) to the pool in
    ``folder``; the index of the first, and the pool's packer. PoolEnded where it has ended."""
    with pool_lock(folder):
        why = ended_why(folder)
        meta = read_json(os.path.join(folder, POOL_JSON))
        if why is None and "pid" in meta and not is_alive(meta["pid"], meta["started"]):
            why = f"its packer (pid {meta['pid']}) is gone; see {os.path.join(folder, LOG)}"
        if why is not None:
            raise PoolEnded(why)
        with open(os.path.join(folder, RUNS), "rb") as f:
            first = f.read().count(b"\n")
        # (runs first: the packer takes a task once both of its lines are whole)
        for name, lines in ((RUNS, runs), (TASKS, tasks)):
            with open(os.path.join(folder, name), "a") as f:
                f.write("".join(line + "\n" for line in lines))
    wake(folder)
    return {"first": first, "meta": meta}


def wake(folder: str) -> None:
    """Tell a packer on this machine that runs were added (nothing where none listens)."""
    try:
        fd = os.open(os.path.join(folder, WAKE), os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:  # (ENXIO: no packer listens here; ENOENT: none ever did)
        if exc.errno not in (errno.ENXIO, errno.ENOENT):
            raise
        return
    try:
        os.write(fd, b"\n")
    except BlockingIOError:  # (the FIFO is full of earlier wake-ups: it will look anyway)
        pass
    finally:
        os.close(fd)


class Lines:
    """A file read as it grows: the whole lines added since the last look."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[:data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return whole.decode().splitlines()


class Watcher:
    """The pool's side of its packer: takes in the runs launches append, and ends the packer
    once it has had no run for ``idle`` seconds."""

    def __init__(self, folder: str, idle: float, packer: Packer,
                 alone: str | None = None) -> None:
        self.folder = folder
        self.idle = idle
        self.packer = packer
        self.alone = alone  # (runs_left="jobs") the script of a job of its own for a run left
        self.grown = threading.Condition(packer.lock)  # (workers wait on it for new runs)
        self.closed = False
        self.busy_until = time.monotonic()
        self.files = (Lines(os.path.join(folder, TASKS)), Lines(os.path.join(folder, RUNS)))
        self.pending: tuple[list[str], list[str]] = ([], [])
        with contextlib.suppress(OSError):  # (a file system without FIFOs: it only looks)
            os.mkfifo(os.path.join(folder, WAKE), 0o600)
        if os.environ.get(ENV_TIME_LIMIT_AT):
            write_bytes_atomic(os.path.join(folder, TIME_LIMIT_AT),
                               os.environ[ENV_TIME_LIMIT_AT].encode())

    def _grow(self) -> None:
        """(under the packer's lock) The runs whose two lines are whole, handed to the
        workers."""
        for lines, file in zip(self.pending, self.files):
            lines += file.new()
        whole = min(len(self.pending[0]), len(self.pending[1]))
        if not whole:
            return
        packer = self.packer
        packer.tasks += self.pending[0][:whole]
        assert packer.runs is not None  # (a pool's packer has --runs)
        packer.runs += [cast("tuple[str, str]", tuple(line.split("\t")))
                        for line in self.pending[1][:whole]]
        del self.pending[0][:whole], self.pending[1][:whole]
        self.busy_until = time.monotonic()
        self.grown.notify_all()

    def _idle(self) -> bool:
        """(under the packer's lock) Whether nothing runs or waits, for ``idle`` seconds."""
        packer = self.packer
        return not (packer.running or packer.again or packer.next < len(packer.tasks)) \
            and time.monotonic() - self.busy_until >= self.idle

    def _close(self, why: str) -> None:
        """(under the packer's lock) End the pool: it takes no more runs. (A reason written
        before, as pool stop's, stays.)"""
        with contextlib.suppress(FileExistsError), \
                open(os.path.join(self.folder, ENDED), "x") as f:
            f.write(why + "\n")
        self.closed = True
        self.grown.notify_all()

    def watch(self) -> None:
        """Until the pool ends: wait for a wake-up (or look every LOOK_SECONDS, for runs
        added from another node), take the new runs in, end the pool when idle or stopped.
        Should it fail, the pool ends saying why: its workers never wait for ever."""
        fifo = os.path.join(self.folder, WAKE)
        fds: list[int] = []
        try:
            fds.append(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
            fds.append(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # (it never reads as ended)
        except OSError:  # (no FIFO here: it only looks)
            pass
        listen = fds[0] if len(fds) == 2 else None
        try:
            self._follow(listen)
        except BaseException as exc:
            with self.packer.lock:
                self._close(f"its packer failed ({type(exc).__name__}: {exc}); see "
                            f"{os.path.join(self.folder, LOG)}")
            raise
        finally:
            for fd in fds:
                os.close(fd)

    def _follow(self, listen: int | None) -> None:
        while True:
            if listen is None:
                time.sleep(LOOK_SECONDS)
            elif select.select([listen], [], [], LOOK_SECONDS)[0]:
                with contextlib.suppress(BlockingIOError):
                    os.read(listen, 4096)
            with self.packer.lock:
                if self.packer.stopping:  # (the packer decides, as it ends, whether the
                    self.closed = True    # pool goes on in a new allocation)
                    self.grown.notify_all()
                    return
                self._grow()
                if not self._idle():
                    continue
            with pool_lock(self.folder), self.packer.lock:  # (no run is added meanwhile)
                self._grow()
                if self._idle():
                    self._close(f"no run for {self.idle:.0f} s (its idle time)")
                    return

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Held while the packer ends: no run is added meanwhile, and the runs added until
        now are the packer's (a stopped one counts them among those left)."""
        with pool_lock(self.folder), self.packer.lock:
            self._grow()
            yield

    def may_go_on(self, signum: int | None) -> bool:
        """(a packer stopped by ``signum``) Whether the pool submits its job again: at its time
        limit's warning (SIGUSR1), not after ``pool stop``. A SIGTERM (a ``scancel``, a
        preemption) submits nothing: Slurm requeues a preempted job itself (see
        :meth:`ended`)."""
        return signum == signal.SIGUSR1 and ended_why(self.folder) is None

    def each_alone(self, left: list[int]) -> None:
        """(stopped at its time limit's warning, ``runs_left="jobs"``) Submit a job of its own
        for each run left (``alone``, which packs the one task EASYLAUNCH_CONTINUE names;
        each run's record names its job), and end the pool, naming them."""
        packer = self.packer
        assert packer.runs is not None and self.alone is not None
        jobs = []
        for index in left:  # (one refused ends failed, saying why and how to run it again)
            only = write_tasks_left(
                os.path.join(packer.state_dir, f"alone-{index}.json"), [index])
            jobs.append(resubmit_allocation(packer.scheduler, self.alone, only,
                                            [packer.runs[index][1]]))
        went = [job for job in jobs if job]
        refused = f"; {len(jobs) - len(went)} could not be submitted (see {LOG})" \
            if len(went) < len(jobs) else ""
        self._close(f"its time limit came; its {len(went)} run(s) left went on each in a "
                    f"{packer.scheduler.label} job of its own: {', '.join(went)}{refused}")

    def ended(self, moved_to: str | None) -> None:
        """As the packer ends: the pool's record names the job it goes on in (``moved_to``),
        or the pool is ended, saying why where the idle time or ``pool stop`` did not. A
        SIGTERM to a job its scheduler requeues at a preemption leaves the pool open: if the
        job waits again, its packer takes the runs left there; if it is gone (a cancel, a
        time limit), ``pool ls`` says the allocation is gone, and the runs left end saying
        so."""
        path = os.path.join(self.folder, POOL_JSON)
        meta = read_json(path)
        if moved_to is None and self.packer.stopped_by == signal.SIGTERM \
                and "job_id" in meta and allocation(meta).requeues:
            print("packer: stopped by SIGTERM; the pool goes on if its job is requeued "
                  "(a preemption)", file=sys.stderr)
            return
        if moved_to is None:
            self._close("its allocation's time limit came, with no run to go on with"
                        if self.packer.stopped_by == signal.SIGUSR1
                        else "stopped by a signal (its allocation ended?)")
            return
        write_json_atomic(path, dict(meta, job_id=moved_to,
                                     earlier_jobs=[*meta.get("earlier_jobs", []),
                                                   meta.get("job_id")]))


# -- a pool as its commands see it (pool ls, pool stop, a launch's check), here or far off ----

def latest(root: str, name: str) -> str | None:
    """The folder of pool ``name``'s last start under the log root ``root`` (each start has
    its own: a later pool never mistakes an earlier one's runs for its own)."""
    starts = sorted(glob.glob(os.path.join(root, POOLS, glob.escape(name), "*", POOL_JSON)))
    return os.path.dirname(starts[-1]) if starts else None


def names(root: str) -> list[str]:
    """The pools ever started under ``root``."""
    return sorted(n for n in os.listdir(os.path.join(root, POOLS))
                  if latest(root, n)) if os.path.isdir(os.path.join(root, POOLS)) else []


def allocation(meta: dict) -> JobSide:
    """The scheduler of a pool's allocation (pools started before PBS ones: Slurm)."""
    return scheduler_named(meta.get("scheduler") or SLURM_SIDE.name)


def _time_limit_at(folder: str) -> float | None:
    """When the pool's allocation reaches its time limit, where its packer recorded it."""
    try:
        with open(os.path.join(folder, TIME_LIMIT_AT)) as f:
            return float(f.read())
    except (OSError, ValueError):
        return None


def describe(folder: str, counted: bool = True) -> dict:
    """The pool in ``folder``: what it was started with, why it ended (None while it takes
    runs), its allocation's state (None: a packer on this machine), and (``counted``)
    its runs busy, queued and done (reading each run's task record: a launch skips that)."""
    meta = read_json(os.path.join(folder, POOL_JSON))
    ended = ended_why(folder)
    where = None
    if "job_id" in meta:
        side = allocation(meta)
        said = side.standing(meta["job_id"], _time_limit_at(folder)) if side.standing \
            else None
        where = said or f"{side.label} job {meta['job_id']}, ended"
        if ended is None and said is None:
            ended = "its allocation is gone"
    elif ended is None and not is_alive(meta["pid"], meta["started"]):
        ended = "its packer is gone (was the machine restarted, or its allocation ended?)"
    if "inside" in meta:  # (started in an allocation its user held)
        where = f"inside {meta['inside']}"
    found = {"folder": folder, "meta": meta, "ended": ended, "where": where, "busy": None,
             "queued": None, "done": None}
    if not counted:
        return found
    states = []
    for record in glob.glob(os.path.join(folder, TASK_STATE, "task-*.json")):
        try:
            states.append(read_json(record).get("state"))
        except (OSError, DamagedRecord):
            continue
    with open(os.path.join(folder, TASKS)) as f:
        added = sum(1 for _ in f)
    running, waiting = states.count("running"), states.count("queued")
    return dict(found, busy=running, queued=added - len(states) + waiting,
                done=len(states) - running - waiting)


def stop(folder: str) -> dict:
    """End the pool in ``folder``: it takes no more runs, its runs not ended are cancelled
    (the running ones get SIGTERM, a stop notice), and its packer (or allocation) ends."""
    meta = read_json(os.path.join(folder, POOL_JSON))
    with pool_lock(folder), open(os.path.join(folder, ENDED), "w") as f:  # (a launch
        f.write("stopped by easylaunch pool stop\n")                       # meanwhile: refused)
    with open(os.path.join(folder, RUNS)) as f:
        log_dirs = [line.rstrip("\n").split("\t")[1] for line in f if line.strip()]
    os.makedirs(os.path.join(folder, TASK_STATE), exist_ok=True)
    for index, log_dir in enumerate(log_dirs):
        try:
            done = read_json(os.path.join(folder, TASK_STATE, f"task-{index}.json")).get(
                "state") in ("succeeded", "failed", "cancelled")
        except (OSError, DamagedRecord):
            done = False
        if not done:
            update_status(log_dir, cancel_requested=True)
            with open(os.path.join(folder, TASK_STATE, f"task-{index}.cancel"), "a"):
                pass
    if "job_id" in meta:
        subprocess.run([allocation(meta).cancel, meta["job_id"]], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=60)
    elif is_alive(meta["pid"], meta["started"]):
        os.kill(meta["pid"], signal.SIGTERM)
    return describe(folder)


def command(root: str, action: str, name: str | None = None) -> dict:
    """A pool command on the machine that holds the pools: ``find`` (NAME's last start, its
    runs not counted), ``list`` (each name's last start) or ``stop`` (NAME's)."""
    if action == "list":
        return {"pools": [describe(f) for n in names(root) if (f := latest(root, n))]}
    assert name is not None  # (find and stop name a pool)
    folder = latest(root, name)
    if folder is None:
        return {"missing": True, "known": names(root)}
    return stop(folder) if action == "stop" else describe(folder, counted=False)
