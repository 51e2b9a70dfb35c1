"""``here_no_doodad``: call the function in this process (for debugging); no subprocess."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from easylaunch import processes, runner
from easylaunch.bundle import Run
from easylaunch.jobs import Job
from easylaunch.modes.base import Mode
from easylaunch.request import LaunchRequest


class _Tee:
    """Write to the terminal and to the run's log file."""

    def __init__(self, stream: IO[str], copy: IO[str]) -> None:
        self._stream, self._copy = stream, copy

    def write(self, text: str) -> int:
        self._copy.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        self._copy.flush()
        self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _tee_output(stdout_path: Path, stderr_path: Path) -> Iterator[None]:
    with open(stdout_path, "a") as out, open(stderr_path, "a") as err:
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Tee(sys.stdout, out), _Tee(sys.stderr, err)
        try:
            yield
        finally:
            sys.stdout, sys.stderr = saved


class HereNoDoodadMode(Mode):
    """Runs each variant in turn, in this process; the Jobs are finished when returned."""

    name = "here_no_doodad"
    needs_bundle = False

    def prepare(self, request: LaunchRequest, runs: list[Run]) -> list[Any]:
        return [None for _ in runs]

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: list[Any]) -> list[Job]:
        jobs = []
        for run in runs:
            job = Job(run.run_id, run.exp_name, run.log_dir, self)
            log_dir = str(run.log_dir)
            runner.update_status(log_dir, state="running", started_at=time.time(),
                                 pid=os.getpid())
            config = runner.make_doodad_config(run.meta, log_dir)
            with _tee_output(job.stdout_path, job.stderr_path):
                code, value = runner.call_and_record(request.method_call, config, run.variant,
                                                     log_dir)
            if code == 0:
                job._value = value
            else:
                print(f"easylaunch: run {run.run_id} ended {job.recorded_state()}; its "
                      f"record is in {run.log_dir}", file=sys.stderr)
            jobs.append(job)
        return jobs

    def refresh(self, job: Job) -> None:
        """A run left unfinished by a launching process that has since died failed."""
        if processes.launcher_gone(job.launch_info):
            runner.update_status(str(job.log_dir), state="failed", ended_at=time.time(),
                                 error="the launching process ended during the run")

    def cancel(self, job: Job) -> None:
        """A run in this process has always ended by the time anyone can cancel it."""

