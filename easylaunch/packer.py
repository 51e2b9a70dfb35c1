"""Run the lines of a task file with N workers inside one allocation (htp mode's packer).

``python packer.py TASKFILE --state-dir DIR [--workers N] [--runs RUNS.tsv --runner RUNNER.py]``

Standard library only: a copy travels in the htp batch folder. Each worker takes the next task,
runs its line with bash, and records ``task-<i>.json`` (state, exit code, times) plus
``task-<i>.out``/``.err`` in the state folder. A failing task does not stop the others. Running
the same task file again skips the tasks that already succeeded. ``task-<i>.cancel`` in the state
folder cancels task i (before it starts, or while it runs). SIGTERM and SIGUSR1 (the time-limit
warning) are passed on to the running tasks.

With ``--runs`` (one ``bundle<TAB>log dir`` line per task, written by htp when a task line does
nothing but start easylaunch's runner), each worker is a warm Python that has loaded the runner
and cloudpickle once and forks a child per run, instead of paying a new interpreter per task.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

POLL_SECONDS = 0.5


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def read_tasks(path: str) -> list[str]:
    """The task lines (blank lines and # comments left out)."""
    with open(path) as f:
        return [ln.rstrip("\n") for ln in f if ln.strip() and not ln.lstrip().startswith("#")]


class WarmWorker:
    """A Python with the runner loaded that forks one child per run (``--serve``)."""

    def __init__(self, runner_path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--serve", runner_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)

    def start(self, bundle: str, log_dir: str) -> int:
        """Start a run; return the pid of its process (a process group leader)."""
        self.proc.stdin.write(f"{bundle}\t{log_dir}\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline().split()[1])

    def wait(self) -> int:
        """The exit code of the run started last."""
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def serve(runner_path: str) -> int:
    """Worker loop: for each ``bundle<TAB>log dir`` on stdin, fork a child that runs it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("easylaunch_runner", runner_path)
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    import cloudpickle  # noqa: F401 - loaded once here, inherited by every child

    for line in sys.stdin:
        bundle, log_dir = line.rstrip("\n").split("\t")
        pid = os.fork()
        if pid == 0:
            os._exit(_run_child(runner, bundle, log_dir))
        print(f"pid {pid}", flush=True)
        print(f"exit {os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}", flush=True)
    return 0


def _run_child(runner, bundle: str, log_dir: str) -> int:
    """In the forked child: the same environment and logs as a task line, then the runner."""
    os.setsid()
    os.makedirs(log_dir, exist_ok=True)
    with open(os.path.join(bundle, runner.BUNDLE_JSON)) as f:
        code_dirs = [os.path.join(bundle, d) for d in json.load(f).get("code_dirs", [])]
    os.environ.update(BUNDLE=bundle, LOG_DIR=log_dir, PYTHONUNBUFFERED="1",
                      **{runner.ENV_TIMEOUT_SIGNAL: "USR1"})
    if code_dirs:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            code_dirs + [p for p in [os.environ.get("PYTHONPATH")] if p])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        out = os.open(os.path.join(log_dir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.dup2(out, fd)
    try:
        code = runner.run_bundle(bundle, log_dir)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


class Packer:
    """Runs tasks on a fixed number of workers and records each one's outcome."""

    def __init__(self, tasks: list[str], state_dir: str, workers: int,
                 runs: list[tuple[str, str]] | None = None, runner_path: str | None = None,
                 ) -> None:
        self.tasks = tasks
        self.state_dir = state_dir
        self.workers = workers
        self.runs = runs
        self.runner_path = runner_path
        self.next = 0
        self.lock = threading.Lock()
        self.running: dict[int, int] = {}  # task index -> pid of its process group
        self.stopping = False

    def _path(self, index: int, suffix: str) -> str:
        return os.path.join(self.state_dir, f"task-{index}.{suffix}")

    def _state(self, index: int) -> str | None:
        try:
            with open(self._path(index, "json")) as f:
                return json.load(f).get("state")
        except (FileNotFoundError, ValueError):
            return None

    def _take(self) -> int | None:
        with self.lock:
            while self.next < len(self.tasks) and not self.stopping:
                index = self.next
                self.next += 1
                if self._state(index) != "succeeded":
                    return index
            return None

    def _run(self, index: int, worker: WarmWorker | None) -> None:
        record = {"index": index, "line": self.tasks[index], "host": os.uname().nodename}
        if os.path.exists(self._path(index, "cancel")):
            _write_json(self._path(index, "json"), dict(record, state="cancelled"))
            return
        started = time.time()
        _write_json(self._path(index, "json"), dict(record, state="running", started=started))
        with open(self._path(index, "out"), "ab") as out, \
                open(self._path(index, "err"), "ab") as err:
            if worker is not None:
                pid = worker.start(*self.runs[index])
                wait = worker.wait
            else:
                proc = subprocess.Popen(["bash", "-c", self.tasks[index]], stdout=out,
                                        stderr=err, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
                pid, wait = proc.pid, proc.wait
            with self.lock:
                self.running[index] = pid
            code = wait()
            with self.lock:
                self.running.pop(index, None)
        cancelled = os.path.exists(self._path(index, "cancel"))
        state = "succeeded" if code == 0 else "cancelled" if cancelled else "failed"
        _write_json(self._path(index, "json"), dict(
            record, state=state, exit_code=code, started=started, ended=time.time()))

    def _worker(self) -> None:
        worker = WarmWorker(self.runner_path) if self.runs is not None else None
        try:
            while (index := self._take()) is not None:
                self._run(index, worker)
        finally:
            if worker is not None:
                worker.close()

    def _watch_cancels(self, done: threading.Event) -> None:
        while not done.wait(POLL_SECONDS):
            with self.lock:
                running = dict(self.running)
            for index, pid in running.items():
                if os.path.exists(self._path(index, "cancel")):
                    _signal_group(pid, signal.SIGTERM)

    def forward(self, signum: int, _frame: object = None) -> None:
        """Pass a signal on to every running task; stop handing out new ones."""
        with self.lock:
            self.stopping = True
            running = list(self.running.values())
        for pid in running:
            _signal_group(pid, signum)

    def run(self) -> int:
        """Run every task not yet succeeded; 0 if all have succeeded now, else 1."""
        os.makedirs(self.state_dir, exist_ok=True)
        done = threading.Event()
        threading.Thread(target=self._watch_cancels, args=(done,), daemon=True).start()
        threads = [threading.Thread(target=self._worker) for _ in range(self.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        done.set()
        states = [self._state(i) for i in range(len(self.tasks))]
        ok = states.count("succeeded")
        print(f"packer: {ok} of {len(states)} tasks succeeded", file=sys.stderr)
        return 0 if ok == len(states) else 1


def _signal_group(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def default_workers() -> int:
    """The CPUs of this allocation (SLURM_CPUS_PER_TASK or SLURM_CPUS_ON_NODE), else all."""
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the packer."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve"]:
        return serve(argv[1])
    parser = argparse.ArgumentParser(description="Run a task file's lines with N workers.")
    parser.add_argument("taskfile")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--runs", help="bundle<TAB>log dir per task: run them in warm workers")
    parser.add_argument("--runner", help="the runner.py the warm workers load")
    args = parser.parse_args(argv)
    tasks = read_tasks(args.taskfile)
    runs = None
    if args.runs:
        with open(args.runs) as f:
            runs = [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]
        if len(runs) != len(tasks) or not args.runner:
            parser.error("--runs needs one line per task, and --runner")
    packer = Packer(tasks, args.state_dir, args.workers or default_workers(), runs, args.runner)
    signal.signal(signal.SIGTERM, packer.forward)
    signal.signal(signal.SIGUSR1, packer.forward)
    return packer.run()


if __name__ == "__main__":
    sys.exit(main())
