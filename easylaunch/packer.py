"""Run the lines of a task file with N workers inside one allocation (htp mode's packer).

``python packer.py TASKFILE --state-dir DIR [--workers N]``

Standard library only: a copy travels in the htp batch folder. Each worker takes the next task,
runs its line with bash, and records ``task-<i>.json`` (state, exit code, times) plus
``task-<i>.out``/``.err`` in the state folder. A failing task does not stop the others. Running
the same task file again skips the tasks that already succeeded. ``task-<i>.cancel`` in the state
folder cancels task i (before it starts, or while it runs). SIGTERM and SIGUSR1 (the time-limit
warning) are passed on to the running tasks.
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


class Packer:
    """Runs tasks on a fixed number of workers and records each one's outcome."""

    def __init__(self, tasks: list[str], state_dir: str, workers: int) -> None:
        self.tasks = tasks
        self.state_dir = state_dir
        self.workers = workers
        self.next = 0
        self.lock = threading.Lock()
        self.running: dict[int, subprocess.Popen] = {}
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

    def _run(self, index: int) -> None:
        record = {"index": index, "line": self.tasks[index], "host": os.uname().nodename}
        if os.path.exists(self._path(index, "cancel")):
            _write_json(self._path(index, "json"), dict(record, state="cancelled"))
            return
        started = time.time()
        _write_json(self._path(index, "json"), dict(record, state="running", started=started))
        with open(self._path(index, "out"), "ab") as out, \
                open(self._path(index, "err"), "ab") as err:
            proc = subprocess.Popen(["bash", "-c", self.tasks[index]], stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
            with self.lock:
                self.running[index] = proc
            code = proc.wait()
            with self.lock:
                self.running.pop(index, None)
        cancelled = os.path.exists(self._path(index, "cancel"))
        state = "succeeded" if code == 0 else "cancelled" if cancelled else "failed"
        _write_json(self._path(index, "json"), dict(
            record, state=state, exit_code=code, started=started, ended=time.time()))

    def _worker(self) -> None:
        while (index := self._take()) is not None:
            self._run(index)

    def _watch_cancels(self, done: threading.Event) -> None:
        while not done.wait(POLL_SECONDS):
            with self.lock:
                running = dict(self.running)
            for index, proc in running.items():
                if os.path.exists(self._path(index, "cancel")):
                    _signal_group(proc, signal.SIGTERM)

    def forward(self, signum: int, _frame: object = None) -> None:
        """Pass a signal on to every running task; stop handing out new ones."""
        with self.lock:
            self.stopping = True
            running = list(self.running.values())
        for proc in running:
            _signal_group(proc, signum)

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


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signum)


def default_workers() -> int:
    """The CPUs of this allocation (SLURM_CPUS_PER_TASK or SLURM_CPUS_ON_NODE), else all."""
    for name in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point of the packer."""
    parser = argparse.ArgumentParser(description="Run a task file's lines with N workers.")
    parser.add_argument("taskfile")
    parser.add_argument("--state-dir", required=True)
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    packer = Packer(read_tasks(args.taskfile), args.state_dir, args.workers or default_workers())
    signal.signal(signal.SIGTERM, packer.forward)
    signal.signal(signal.SIGUSR1, packer.forward)
    return packer.run()


if __name__ == "__main__":
    sys.exit(main())
