import os
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_DIR = TESTS_DIR.parent


@pytest.fixture
def cfg(tmp_path):
    """Settings for a test: its own log folder, and this folder as the code directory."""
    return {"LOCAL_LOG_DIR": str(tmp_path / "logs"), "CODE_DIRS_TO_MOUNT": [str(TESTS_DIR)]}


@pytest.fixture(autouse=True)
def _isolated_settings(tmp_path, monkeypatch):
    """No test reads the developer's own settings files."""
    monkeypatch.delenv("EASYLAUNCH_CONFIG", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def pytest_sessionfinish(session, exitstatus):
    """In CI (CI=true) a skipped test is a failure: every backend must have really run."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) were skipped; in CI every test must "
                            "run (install what they need in scripts/setup.sh)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
