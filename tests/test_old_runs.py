"""Runs made before easylaunch_job (a one-file runner.py in the bundle) are still tracked,
resumed and resubmitted (the fixture: tests/fixtures/old_run, made by commit 62b896a)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import TESTS_DIR, settings_file

from easylaunch import Job, JobState, resubmit
from easylaunch.runs.bundle import Run
from easylaunch.tracking.registry import open_registry
from easylaunch.tracking.rows import registry_row
from easylaunch_job.attempts import RestartPolicy, finish_attempt
from easylaunch_job.records import update_status

FIXTURE = TESTS_DIR / "fixtures" / "old_run"
MADE_IN = "/tmp/oldfix"  # where the fixture was made (its JSON records name it)
RUN = "old/old_9ec2e02b"


def _old_log_root(tmp_path: Path) -> Path:
    """A copy of the fixture's log root, its recorded paths pointing at the copy."""
    root = tmp_path / "oldfix"
    shutil.copytree(FIXTURE, root, symlinks=True)
    for record in (root / "logs").rglob("*.json"):
        record.write_text(record.read_text().replace(MADE_IN, str(root)))
    return root / "logs"


def _register(log_dir: Path, registry_path: str) -> None:
    """What the old launcher wrote to the user's registry when it launched the run."""
    launch = json.loads((log_dir / "launch.json").read_text())
    variant = json.loads((log_dir / "variant.json").read_text())
    row = registry_row(Run(launch["run_id"], launch["exp_name"], launch["mode"], log_dir,
                            variant, launch))
    open_registry(registry_path).add([dict(row, state="succeeded")])


def test_an_old_run_is_tracked_with_its_result(tmp_path):
    job = Job.from_run_dir(_old_log_root(tmp_path) / RUN)
    assert (job.log_dir / "bundle" / "runner.py").is_file()
    assert job.status() is JobState.SUCCEEDED and job.status().terminal
    assert job.result() == {"twice": 42, "attempt": 1}


def test_an_old_run_queued_again_resumes_with_its_own_runner(tmp_path):
    """Its job script starts bundle/runner.py again (a requeue): the old job side takes the
    run's next attempt from a record this release wrote, and this release reads the end."""
    log_dir = _old_log_root(tmp_path) / RUN
    (log_dir / "result.pkl").unlink()
    (log_dir / "status.json").write_text(json.dumps({"state": "queued", "run_id": "9ec2e02b"}))
    update_status(str(log_dir), state="running", attempt=1, host="elsewhere")
    assert finish_attempt(str(log_dir), RestartPolicy(max_restarts=1), "lost", state="failed",
                          error="the node went away")
    bundle = log_dir / "bundle"
    proc = subprocess.run([sys.executable, str(bundle / "runner.py"), str(bundle),
                           "--log-dir", str(log_dir)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    job = Job.from_run_dir(log_dir)
    assert job.status() is JobState.SUCCEEDED
    assert job.result() == {"twice": 42, "attempt": 2}
    assert [r["reason"] for r in job.info()["restarts"]] == ["lost"]


def test_an_old_run_is_resubmitted_with_this_job_side(tmp_path):
    log_dir = _old_log_root(tmp_path) / RUN
    config = settings_file(tmp_path)
    registry_path = str(tmp_path / "registry.sqlite3")
    _register(log_dir, registry_path)
    new = resubmit("9ec2e02b", config=config)
    new.wait(timeout=120)
    assert new.status() is JobState.SUCCEEDED, (new.log_dir / "stderr.log").read_text()
    assert new.result() == {"twice": 42, "attempt": 1}
    bundle = new.log_dir / "bundle"
    assert (bundle / "job.pyz").is_file() and not (bundle / "runner.py").exists()
    assert (log_dir / "bundle" / "runner.py").is_file()  # the old run is left as it was
    assert open_registry(registry_path).find(new.id).resubmitted_from == "9ec2e02b"
