"""Small helpers shared by the process tests."""

import subprocess
import time
from pathlib import Path

import jobfns


def alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(predicate, timeout: float = 30.0) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def run_pids(log_dir: Path) -> list[int]:
    """The pids a ``jobfns.sleep_with_child`` run wrote (the runner's and its child's)."""
    assert wait_for(lambda: (log_dir / "pids").exists()), "the run never started"
    return [int(p) for p in (log_dir / "pids").read_text().split()]


class PlayedInstance:
    """A cloud instance played on this machine: its boot script runs as ``proc`` with the
    work folder ``workdir`` (the cloud stand-ins subclass it)."""

    workdir: Path
    proc: subprocess.Popen

    def run_dir(self, job) -> Path:
        """The run's folder on this instance."""
        return self.workdir / job.exp_name / job.log_dir.name

    def release(self, job) -> None:
        """Let a ``jobfns.wait_for_release`` run finish."""
        (self.run_dir(job) / jobfns.RELEASE).write_text("go")

    def boot_log(self) -> str:
        path = self.workdir / "boot.log"
        return path.read_text() if path.exists() else "(no boot.log)"

    def wait(self, timeout: float = 60) -> int:
        """The boot script's exit code, once it ended."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the instance did not finish:\n{self.boot_log()}") from None
