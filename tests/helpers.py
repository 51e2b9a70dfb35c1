"""Small helpers shared by the process tests."""

import time
from pathlib import Path


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
