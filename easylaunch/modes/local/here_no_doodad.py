"""``here_no_doodad``: call the function in this process (for debugging); no subprocess."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from easylaunch.modes.base import Mode
from easylaunch.modes.display import own_traceback, shows_as
from easylaunch.modes.local import machine
from easylaunch.runs.bundle import Run
from easylaunch.runs.commands import check_here
from easylaunch.runs.preview import Preview
from easylaunch.runs.record import LaunchRequest, RunRecord
from easylaunch_job.config import make_doodad_config
from easylaunch_job.records import STDERR_LOG, STDOUT_LOG, update_status
from easylaunch_job.run import call_and_record


class _Tee:
    """Write to the terminal and to the run's log file (opened on the first write)."""

    def __init__(self, stream: IO[str], path: Path) -> None:
        self._stream, self._path = stream, path
        self._copy: IO[str] | None = None

    def write(self, text: str) -> int:
        if self._copy is None:
            self._copy = open(self._path, "a")  # noqa: SIM115 - closed by close()
        self._copy.write(text)
        return self._stream.write(text)

    def flush(self) -> None:
        if self._copy is not None:
            self._copy.flush()
        self._stream.flush()

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def _tee_output(stdout_path: Path, stderr_path: Path) -> Iterator[None]:
    saved = sys.stdout, sys.stderr
    tees = _Tee(sys.stdout, stdout_path), _Tee(sys.stderr, stderr_path)
    sys.stdout, sys.stderr = tees
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
        for tee in tees:
            tee.close()


class HereNoDoodadMode(Mode):
    """Runs each variant in turn, in this process; the Jobs are finished when returned."""

    name = "here_no_doodad"
    needs_bundle = False

    def check(self, request: LaunchRequest) -> None:
        check_here(request)
        machine.check_trackers(self.settings.TRACKERS)

    def prepare(self, request: LaunchRequest, runs: list[Run], facts: None) -> list[Any]:
        return [None for _ in runs]

    def submit(self, request: LaunchRequest, runs: list[Run], prepared: list[Any]
               ) -> list[RunRecord]:
        """Call the function once per run, in turn. An exception it raises is recorded, then
        raised here, in the caller, as doodad did (a debugger's post-mortem sees the
        function's own frames); the runs after it are recorded as not run."""
        jobs = []
        for index, run in enumerate(runs):
            job = RunRecord.of_run(run)
            log_dir = str(run.log_dir)
            config = make_doodad_config(run.meta, log_dir)
            try:
                with _tee_output(run.log_dir / STDOUT_LOG, run.log_dir / STDERR_LOG):
                    code, value = call_and_record(request.method_call, config, run.variant,
                                                  log_dir, reraise=True,
                                                  trackers=run.meta.get("trackers"))
            except BaseException as exc:
                # (the caller shows the error, Jupyter as the run's own frames; the log keeps it)
                shows_as(exc, own_traceback(exc))
                with open(run.log_dir / STDERR_LOG, "a") as log:
                    log.write(job.info().get("error") or "")
                for later in runs[index + 1:]:
                    update_status(str(later.log_dir), state="cancelled", ended_at=time.time(),
                                  error=f"not run: run {run.run_id} of this launch raised "
                                        "first (here_no_doodad runs them in turn)")
                raise
            if code == 0:
                job.returned = value
            else:  # (its value could not be recorded)
                print(f"easylaunch: run {run.run_id} ended {job.recorded_state()}; its "
                      f"record is in {run.log_dir}", file=sys.stderr)
            jobs.append(job)
        return jobs

    def launched(self, runs: list[Run]) -> str:
        return "ran in this process"

    def preview(self, request: LaunchRequest, runs: list[Run], prepared: list[Any]) -> Preview:
        return Preview(self.name, len(runs), "this process", notes=[
            "each run calls the function in this process, one after another"])

    def refresh(self, job: RunRecord) -> None:
        """A run left unfinished by a launching process that has since died failed."""
        if machine.launcher_gone(job.launch_info):
            job.record_end("failed", "the launching process ended during the run")

    def cancel(self, job: RunRecord) -> None:
        """A run in this process has always ended by the time anyone can cancel it."""

