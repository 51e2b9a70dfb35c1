"""What the commands say between a launch and its result: ``submit --wait`` streams the run's
output and ends with its state and the command's exit code; ``logs`` names the stream it shows
and, for a failed run with nothing on stdout, its error; ``preview`` imports a module beside
the script, as ``python script.py`` does (issue 39)."""

import os
import pty
import subprocess
import sys
import textwrap

import jobfns
from conftest import settings_file
from helpers import write_settings

from easylaunch import run_experiment

EASYLAUNCH = [sys.executable, "-m", "easylaunch.cli"]


def cli(config: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*EASYLAUNCH, "--config", config, *args], capture_output=True,
                          text=True, timeout=120, **kwargs)


def test_submit_wait_streams_the_output_and_exits_with_the_commands_code(tmp_path):
    config = settings_file(tmp_path)
    failed = cli(config, "submit", "--wait", "--", "bash", "-c",
                 "echo one; echo oops >&2; echo -n two; exit 3")
    run_id = failed.stdout.split()[0]
    assert failed.returncode == 3 and "Traceback" not in failed.stderr
    assert failed.stdout == f"{run_id}\none\ntwo\n"  # (its last line ended for it)
    assert "oops\n" in failed.stderr
    assert failed.stderr.splitlines()[-1] == (
        f"easylaunch: run {run_id} failed: the command exited with code 3: bash -c "
        "'echo one; echo oops >&2; echo -n two; exit 3'")
    done = cli(config, "submit", "--wait", "--", "echo", "fine")
    run_id = done.stdout.split()[0]
    assert done.returncode == 0 and done.stdout == f"{run_id}\nfine\n"
    assert done.stderr.splitlines()[-1] == f"easylaunch: run {run_id} succeeded"
    dry = cli(config, "submit", "--wait", "-o", "dry_run=true", "--", "echo", "fine")
    assert dry.returncode == 0 and "Traceback" not in dry.stderr, dry.stderr
    assert dry.stderr.splitlines()[-1] == ("easylaunch: a dry run starts nothing, so --wait "
                                           "has nothing to wait for")


def test_logs_names_its_stream_and_shows_a_silent_failed_runs_error(tmp_path):
    config = settings_file(tmp_path)
    job = run_experiment(jobfns.fail, exp_name="logs", config=config)
    job.wait(timeout=60)
    out = cli(config, "logs", job.id)
    assert out.returncode == 0
    assert out.stdout.startswith("Traceback") and "ValueError: bad learning rate" in out.stdout
    assert out.stderr == f"easylaunch: the stdout of run {job.id} is empty; it failed with:\n"
    on_terminal = _stderr_on_a_terminal([*EASYLAUNCH, "--config", config, "logs", job.id,
                                         "--stderr"])
    assert on_terminal == f"==> stderr.log of run {job.id} (stdout: without --stderr) <==\r\n"


def _stderr_on_a_terminal(argv: list[str]) -> str:
    """What ``argv`` writes to its stderr when that is a terminal (stdout: a pipe)."""
    reader, writer = pty.openpty()
    try:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=writer, timeout=120, check=True)
        os.close(writer)
        said = b""
        while True:
            try:
                chunk = os.read(reader, 4096)
            except OSError:  # (the terminal's other end closed: all was read)
                break
            if not chunk:
                break
            said += chunk
        return said.decode()
    finally:
        os.close(reader)


def test_preview_imports_a_module_beside_the_script(tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "model.py").write_text("def train(doodad_config, variant):\n    return 1\n")
    (project / "sweep.py").write_text(textwrap.dedent("""
        from easylaunch import run_sweep
        from model import train
        run_sweep(train, [{"lr": 0.1}, {"lr": 0.01}], exp_name="beside")
    """))
    config = write_settings(tmp_path / "settings.py", {
        "LOCAL_LOG_DIR": str(tmp_path / "logs"), "CODE_DIRS_TO_MOUNT": [str(project)],
        "REGISTRY_PATH": str(tmp_path / "registry.sqlite3")})
    out = cli(str(config), "preview", str(project / "sweep.py"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "dry run: 2 run(s) in mode 'local'" in out.stdout
