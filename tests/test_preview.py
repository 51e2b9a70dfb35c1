"""Dry runs (``dry_run=True``, ``easylaunch preview``): what a launch would write and run, with
nothing submitted, registered or kept."""

import subprocess
import sys
import textwrap
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file

from easylaunch import run_experiment, run_sweep
from easylaunch.runs.preview import DryRunStop, Preview


def _nothing_kept(root: Path, registry: Path) -> None:
    assert not registry.exists()
    assert not list(root.rglob("status.json")) and not list(root.rglob("*.sbatch"))


def test_a_local_dry_run_shows_the_commands_and_keeps_nothing(cfg, tmp_path, capsys):
    registry = tmp_path / "registry.sqlite3"
    shown = run_sweep(jobfns.train, [dict(learning_rate=lr) for lr in (0.1, 0.01)],
                      exp_name="lr", config=dict(cfg, REGISTRY_PATH=str(registry)),
                      max_parallel=1, dry_run=True)
    assert isinstance(shown, Preview) and shown.runs == 2
    assert str(shown) == capsys.readouterr().out  # printed as it is returned
    root = tmp_path / "logs"
    assert len(shown.commands) == 2 and shown.resources["runs at once"] == 1
    for command in shown.commands:  # paths of the log root itself, not the temporary folder
        assert f"{root}/lr/" in command and "easylaunch-dry-run" not in command
        assert command.endswith("/bundle")
    _nothing_kept(root, registry)


def test_a_slurm_dry_run_shows_the_script_with_per_call_resources(slurm_cluster, slurm_cfg,
                                                                  tmp_path):
    registry = tmp_path / "preview-registry.sqlite3"
    shown = run_sweep(jobfns.train, [{}, {}, {}], exp_name="dry", mode="slurm",
                      config=dict(slurm_cfg, REGISTRY_PATH=str(registry)), partition="debug",
                      time_in_mins=7, mem="300M", dry_run=True)
    ((path, script),) = shown.files.items()
    root = Path(slurm_cfg["LOCAL_LOG_DIR"])
    assert path.startswith(f"{root}/dry/") and path.endswith(".sbatch")
    for line in ('#SBATCH --partition="debug"', "#SBATCH --time=7", "#SBATCH --mem=300M",
                 "#SBATCH --array=0-2"):
        assert line in script
    assert shown.commands == [f"sbatch --parsable {path}"]
    assert shown.resources["partition"] == "debug" and shown.resources["time_minutes"] == 7
    queued = subprocess.run(["squeue", "-h", "-n", "dry", "-o", "%i"], capture_output=True,
                            text=True, check=True).stdout
    assert not queued.strip()
    _nothing_kept(root, registry)


def test_easylaunch_preview_runs_a_script_with_every_launch_a_dry_run(tmp_path):
    config = settings_file(tmp_path)
    script = tmp_path / "sweep.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(jobfns.__file__).parent)!r})
        import jobfns
        from easylaunch import run_experiment, wait_all
        jobs = [run_experiment(jobfns.train, exp_name="cli", variant=dict(seed=s),
                               max_parallel=int(sys.argv[1])) for s in range(2)]
        wait_all(jobs)  # what a real launch script does next
    """))
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "preview", "--config", config,
                          str(script), "3"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("dry run: 1 run(s) in mode 'local'") == 2
    assert "runs at once: 3" in out.stdout  # the script's own argument reached it
    assert "stopped after 2 dry run(s)" in out.stderr and "Traceback" not in out.stderr
    _nothing_kept(tmp_path / "logs", tmp_path / "registry.sqlite3")
    empty = tmp_path / "empty.py"
    empty.write_text("print('no launch here')\n")
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "preview", "--config", config,
                          str(empty)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "launched nothing" in out.stderr


def test_a_dry_run_is_checked_like_a_launch(cfg, tmp_path):
    import pytest

    from easylaunch import LaunchError

    with pytest.raises(LaunchError, match="max_parallel must be a positive integer"):
        run_experiment(jobfns.train, config=cfg, max_parallel=0, dry_run=True)
    assert not (tmp_path / "logs").exists()


def test_a_detached_dry_run_shows_the_supervisor_and_its_task_file(cfg, tmp_path):
    shown = run_sweep(jobfns.train, [{}, {}], exp_name="det", config=cfg, detach=True,
                      max_parallel=1, dry_run=True)
    root = tmp_path / "logs"
    tasks = next(text for path, text in shown.files.items() if path.endswith("/tasks.txt"))
    assert len(tasks.splitlines()) == 2 and f"{root}/det/" in tasks
    (command,) = shown.commands
    assert ".job.pyz pack " in command and command.endswith("(detached)")
    assert shown.resources["runs at once"] == "1"
    assert not list(root.rglob("status.json"))


def test_an_sss_dry_run_shows_the_batch_and_how_to_copy_it(batch_cfg, tmp_path):
    shown = run_sweep(jobfns.train, [{}, {}], exp_name="batch", mode="sss", config=batch_cfg,
                      dry_run=True)
    assert any(path.endswith("submit.sh") for path in shown.files)
    assert not shown.commands and "copy it:" in shown.notes[0]
    assert not Path(batch_cfg["SLURM_DIRECTORY_FOR_JOB_SCRIPT"]).exists()


def test_a_dry_run_stands_for_its_runs_and_a_preview_ends_where_the_script_waits(tmp_path):
    config = settings_file(tmp_path)
    shown = run_sweep(jobfns.train, [{"seed": 0}, {"seed": 1}], exp_name="planned",
                      config=config, dry_run=True)
    planned = list(shown)
    assert [p.variant for p in planned] == [{"seed": 0}, {"seed": 1}]
    assert all(p.log_dir.parent == tmp_path / "logs" / "planned" and
               p.log_dir.name.endswith(p.id) for p in planned)
    with pytest.raises(DryRunStop, match="belongs to a dry run: it was not launched"):
        planned[0].result()
    example = Path(__file__).resolve().parent.parent / "examples" / "sweep_local.py"
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "preview", "--config", config,
                          str(example)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "dry run: 6 run(s) in mode 'local'" in out.stdout
    assert "stopped after 1 dry run(s), where it asks its runs" in out.stderr
    broken = tmp_path / "broken.py"
    broken.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(Path(jobfns.__file__).parent)!r})
        import jobfns
        from easylaunch import run_sweep
        jobs = run_sweep(jobfns.train, [{{}}])
        print(jobs[0].id, undefined_name)
    """))
    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "preview", "--config", config,
                          str(broken)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert "failed after 1 dry run(s): NameError: name 'undefined_name'" in out.stderr
    _nothing_kept(tmp_path / "logs", tmp_path / "registry.sqlite3")
