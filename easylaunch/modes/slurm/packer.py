"""Run the lines of a task file with N workers (htp's packer in an allocation; ssh mode's on a
remote machine).

``python packer.py TASKFILE --state-dir DIR [--workers N] [--runs RUNS.tsv --runner RUNNER.py
[--warm] [--resubmit SCRIPT]] [--gpus 0,1]``

Standard library only, and Python 3.6 or newer: a copy travels in the htp batch folder and
runs on the cluster's own python3. Each worker takes the next task, runs its line with bash,
and records ``task-<i>.json`` (state, exit code, times) plus ``task-<i>.out``/``.err`` in the
state folder. A failing task does not stop the others. Running the same task file again skips
the tasks that already succeeded and reruns the others. ``task-<i>.cancel`` in the state folder
cancels task i (before it starts, or while it runs: SIGTERM, then SIGKILL after a grace
period). SIGTERM and SIGUSR1 (the time-limit warning) are passed on to the running tasks.

``--runs`` (one ``bundle<TAB>log dir`` line per task) and ``--runner`` name the easylaunch run
each task starts. The packer then records the end of a run whose process it could not record
itself, and runs a task again when its run ended queued for another attempt (easylaunch's
restarts). With ``--warm`` (a task line does nothing but start the runner), each worker is a
warm Python that has loaded the runner and cloudpickle once and forks a child per run, instead
of paying a new interpreter per task. With ``--resubmit SCRIPT``, an allocation stopped by a
signal (its time limit, a preemption) submits SCRIPT again with sbatch for the runs left, which
go on in the new allocation (only those: ``EASYLAUNCH_CONTINUE`` is set there).
"""

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Tuple

POLL_SECONDS = 0.5
KILL_AFTER_SECONDS = 10.0
ENV_RERUN = "EASYLAUNCH_RERUN"  # tells the runner that a failed earlier attempt may be redone
ENV_CONTINUE = "EASYLAUNCH_CONTINUE"  # set in an allocation that goes on with a stopped one's runs
LEFT = (None, "queued", "running")  # task states an allocation that goes on takes up


def _write_json(path: str, obj: dict) -> None:
    tmp = "{}.tmp-{}-{}".format(path, os.getpid(), threading.get_ident())
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def read_tasks(path: str) -> List[str]:
    """The task lines (blank lines and # comments left out)."""
    with open(path) as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def load_runner(path: str):
    """easylaunch's runner module, from its copy at ``path``."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("easylaunch_runner", path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    return runner


class WorkerDied(Exception):
    """The warm worker process ended; its stderr says why."""


class WarmWorker:
    """A Python with the runner loaded that forks one child per run (``--serve``)."""

    def __init__(self, runner_path: str, env: Dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", runner_path], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, universal_newlines=True, bufsize=1)

    def _answer(self) -> int:
        line = self.proc.stdout.readline()
        if not line:
            raise WorkerDied("the warm worker ended (exit code {}); see the packer's own log"
                             .format(self.proc.wait()))
        return int(line.split()[1])

    def start(self, bundle: str, log_dir: str, rerun: bool) -> int:
        """Start a run; return the pid of its process (a process group leader)."""
        self.proc.stdin.write("{}\t{}\t{}\n".format(bundle, log_dir, int(rerun)))
        self.proc.stdin.flush()
        return self._answer()

    def wait(self) -> int:
        """The exit code of the run started last."""
        return self._answer()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        self.proc.wait()


def serve(runner_path: str) -> int:
    """Worker loop: for each ``bundle<TAB>log dir<TAB>rerun`` on stdin, fork a child to run it."""
    runner = load_runner(runner_path)
    try:
        import cloudpickle  # noqa: F401 - loaded once here, inherited by every child
    except ImportError:
        print("packer: cloudpickle is not installed for {}; install it there (pip install "
              "cloudpickle)".format(sys.executable), file=sys.stderr)
        return 1
    for line in sys.stdin:
        bundle, log_dir, rerun = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            os._exit(_run_child(runner, bundle, log_dir, rerun == "1"))
        print("pid {}".format(pid), flush=True)
        print("exit {}".format(_exit_code(os.waitpid(pid, 0)[1])), flush=True)
    return 0


def _run_child(runner, bundle: str, log_dir: str, rerun: bool) -> int:
    """In the forked child: the environment and logs a task line sets up, then the runner."""
    os.setsid()
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(bundle, runner.BUNDLE_JSON)) as f:
        code_dirs = [os.path.join(bundle, d) for d in json.load(f).get("code_dirs", [])]
    os.environ.update(BUNDLE=bundle, LOG_DIR=log_dir, PYTHONUNBUFFERED="1")
    os.environ[runner.ENV_TIMEOUT_SIGNAL] = "USR1"
    if rerun:
        os.environ[ENV_RERUN] = "1"
    if code_dirs:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            code_dirs + [p for p in [os.environ.get("PYTHONPATH")] if p])
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        os.dup2(os.open(os.path.join(log_dir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT,
                        0o644), fd)
    try:
        return runner.run_bundle(bundle, log_dir)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


class Packer:
    """Runs tasks on a fixed number of workers and records each one's outcome."""

    def __init__(self, tasks: List[str], state_dir: str, workers: int,
                 runs: Optional[List[Tuple[str, str]]] = None,
                 runner_path: Optional[str] = None, gpus: Optional[List[str]] = None,
                 warm: bool = False, resubmit: Optional[str] = None,
                 continuing: bool = False) -> None:
        self.tasks = tasks
        self.state_dir = state_dir
        self.workers = workers
        self.runs = runs
        self.runner_path = runner_path
        self.runner = load_runner(runner_path) if runs is not None and runner_path else None
        self.gpus = gpus or []
        self.warm = warm and self.runner is not None
        self.resubmit = resubmit
        self.continuing = continuing  # take up only the runs a stopped allocation left
        self.next = 0
        self.again: List[int] = []  # tasks whose run is queued for another attempt
        self.lock = threading.Lock()
        self.running: Dict[int, Tuple[int, float]] = {}  # task -> (pid, when SIGTERM was sent)
        self.stopping = False

    def _path(self, index: int, suffix: str) -> str:
        return os.path.join(self.state_dir, "task-{}.{}".format(index, suffix))

    def _state(self, index: int) -> Optional[str]:
        try:
            with open(self._path(index, "json")) as f:
                return json.load(f).get("state")
        except (OSError, ValueError):
            return None

    def _take(self) -> Optional[int]:
        with self.lock:
            if self.again and not self.stopping:
                return self.again.pop(0)
            while self.next < len(self.tasks) and not self.stopping:
                index = self.next
                self.next += 1
                state = self._state(index)
                if state in LEFT if self.continuing else state != "succeeded":
                    return index
            return None

    def _settle(self, index: int, code: int) -> bool:
        """Let the runner record an end its run could not record (killed, out of memory);
        True if the run is queued for another attempt."""
        if self.runner is None or code == 0:
            return False
        bundle, log_dir = self.runs[index]
        try:
            meta = self.runner.read_json(os.path.join(bundle, self.runner.BUNDLE_JSON))
            policy = self.runner.RestartPolicy.of(meta)
            return self.runner.end_of_job(log_dir, code, policy) == self.runner.EXIT_RESTART
        except (OSError, self.runner.DamagedRecord):
            return False

    def _run(self, index: int, worker: Optional[WarmWorker], env: Dict[str, str]) -> None:
        record = {"index": index, "line": self.tasks[index], "host": os.uname()[1]}
        if os.path.exists(self._path(index, "cancel")):
            _write_json(self._path(index, "json"), dict(record, state="cancelled"))
            return
        rerun = self._state(index) is not None  # an earlier attempt did not succeed
        started = time.time()
        _write_json(self._path(index, "json"), dict(record, state="running", started=started))
        with open(self._path(index, "out"), "ab") as out, \
                open(self._path(index, "err"), "ab") as err:
            try:
                if worker is not None:
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
                err.write("packer: {}\n".format(exc).encode())
                code = -1
            finally:
                with self.lock:
                    self.running.pop(index, None)
        cancelled = os.path.exists(self._path(index, "cancel"))
        restarting = not cancelled and self._settle(index, code)
        state = "succeeded" if code == 0 else "cancelled" if cancelled else \
            "queued" if restarting else "failed"
        _write_json(self._path(index, "json"), dict(
            record, state=state, exit_code=code, started=started, ended=time.time()))
        if restarting:
            with self.lock:
                self.again.append(index)  # (an allocation that stops leaves it to the next)

    def _worker(self, slot: int) -> None:
        env = dict(os.environ)
        if self.gpus:  # worker i runs its tasks on GPU i (round robin past the last)
            env["CUDA_VISIBLE_DEVICES"] = self.gpus[slot % len(self.gpus)]
        worker = WarmWorker(self.runner_path, env) if self.warm else None
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
        while not done.wait(POLL_SECONDS):
            with self.lock:
                running = dict(self.running)
            for index, (pid, asked) in running.items():
                if not os.path.exists(self._path(index, "cancel")):
                    continue
                late = asked and time.time() - asked > KILL_AFTER_SECONDS
                _signal_group(pid, signal.SIGKILL if late else signal.SIGTERM)
                if not asked:
                    with self.lock:
                        if index in self.running:
                            self.running[index] = (pid, time.time())

    def forward(self, signum: int, _frame: object = None) -> None:
        """Pass a signal on to every running task; stop handing out new ones."""
        with self.lock:
            self.stopping = True
            running = [pid for pid, _ in self.running.values()]
        for pid in running:
            _signal_group(pid, signum)

    def run(self) -> int:
        """Run every task not yet succeeded; 0 if all have succeeded now, else 1."""
        os.makedirs(self.state_dir, exist_ok=True)
        lock = open(os.path.join(self.state_dir, ".packer.lock"), "w")  # noqa: SIM115
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print("packer: another packer is running this task file ({}); not starting"
                  .format(self.state_dir), file=sys.stderr)
            return 2
        except OSError:
            pass  # a file system without locks: go on
        done = threading.Event()
        threading.Thread(target=self._watch_cancels, args=(done,), daemon=True).start()
        threads = [threading.Thread(target=self._worker, args=(slot,))
                   for slot in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        states = [self._state(i) for i in range(len(self.tasks))]
        ok = states.count("succeeded")
        print("packer: {} of {} tasks succeeded".format(ok, len(states)), file=sys.stderr)
        left = [i for i, state in enumerate(states) if state in LEFT]
        if self.stopping and self.resubmit and left:
            self._go_on_elsewhere(left)
        return 0 if ok == len(states) else 1

    def _go_on_elsewhere(self, left: List[int]) -> None:
        """Submit the allocation's script again for the runs left (stopped by a signal, never
        started), and point their records at the new job; a run that cannot go on ends as
        its last attempt would have without a restart."""
        if self.runner is None:  # (--resubmit comes with --runs and --runner)
            return
        argv = ["sbatch", "--parsable", self.resubmit]
        out, problem = self.runner.submit_from_job(argv, **{ENV_CONTINUE: "1"})
        job = out.strip().split(";")[0]
        if problem is None and not job.isdigit():
            problem = "sbatch printed no job id: {!r}".format(out.strip())
        for index in left:
            log_dir = self.runs[index][1]
            if not os.path.isdir(log_dir):
                continue
            if problem is None:
                self.runner.update_status(log_dir, next_job_id=job)
            else:
                self.runner.give_up_restart(log_dir, "{}: {}".format(" ".join(argv), problem))
        print("packer: {} run(s) go on as job {}".format(len(left), job) if problem is None
              else "packer: could not submit the runs left: {}".format(problem), file=sys.stderr)


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def default_workers() -> int:
    """The CPUs of this allocation (SLURM_CPUS_PER_TASK or SLURM_CPUS_ON_NODE), else all."""
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return os.cpu_count() or 1


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point of the packer."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return serve(argv[1])
    parser = argparse.ArgumentParser(description="Run a task file's lines with N workers.")
    parser.add_argument("taskfile")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--runs", help="bundle<TAB>log dir per task: the run each one starts")
    parser.add_argument("--runner", help="easylaunch's runner.py, for those runs")
    parser.add_argument("--warm", action="store_true",
                        help="fork the runs in warm workers instead of running the lines")
    parser.add_argument("--resubmit", help="the job script to submit again for the runs left "
                        "when a signal stops the allocation")
    parser.add_argument("--gpus", help="comma-separated GPU ids: worker i runs on GPU i")
    args = parser.parse_args(argv)
    tasks = read_tasks(args.taskfile)
    runs = None
    if args.runs:
        with open(args.runs) as f:
            runs = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
        if len(runs) != len(tasks) or not args.runner:
            parser.error("--runs needs one line per task, and --runner")
    packer = Packer(tasks, args.state_dir, args.workers or default_workers(), runs, args.runner,
                    args.gpus.split(",") if args.gpus else None, args.warm, args.resubmit,
                    continuing=os.environ.get(ENV_CONTINUE) == "1")
    signal.signal(signal.SIGTERM, packer.forward)
    signal.signal(signal.SIGUSR1, packer.forward)
    return packer.run()


if __name__ == "__main__":
    sys.exit(main())
