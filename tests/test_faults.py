"""Faults an adversarial pass found: each case loses nothing, hangs nowhere, says what to fix."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import jobfns
import pytest
from helpers import wait_for

from easylaunch import (
    JobState,
    LaunchError,
    SettingsError,
    dist,
    run_experiment,
    run_sweep,
)
from easylaunch.modes import get_mode
from easylaunch.settings import load_settings
from easylaunch.tracking.jobs import DamagedRecordError
from easylaunch.tracking.registry import open_registry
from easylaunch_job import records
from easylaunch_job.outcome import save_result
from easylaunch_job.records import update_status

TESTS_DIR = Path(__file__).resolve().parent


def settings_file(tmp_path, logs, **extra) -> str:
    """A settings file (the CLI reads one) with its own log folder and registry."""
    path = tmp_path / "settings.py"
    lines = [f"LOCAL_LOG_DIR = {str(logs)!r}", f"CODE_DIRS_TO_MOUNT = [{str(TESTS_DIR)!r}]",
             f"REGISTRY_PATH = {str(tmp_path / 'registry.sqlite3')!r}"]
    lines += [f"{k} = {v!r}" for k, v in extra.items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def cli(config, *args):
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config, *args],
                          capture_output=True, text=True, timeout=120)


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*.tmp-*")]


# -- 1. a full disk -------------------------------------------------------------------------------


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs (needs root, as in CI) for the run folders."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    disk = tmp_path / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], check=True)
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_result_too_large_for_the_disk_fails_the_run_with_the_reason(tmp_path, small_disk):
    config = settings_file(tmp_path, small_disk / "logs")
    job = run_experiment(jobfns.big_result, variant={"bytes": 8 * 2**20}, config=config)
    assert job.wait(timeout=60) is JobState.FAILED
    error = job.info()["error"]
    assert "could not be written to result.pkl" in error and "No space left" in error
    assert leftovers(small_disk) == []  # the half-written result was removed: space is back
    assert cli(config, "ls").returncode == 0


def test_a_full_disk_still_ends_the_run_and_the_cli_keeps_working(tmp_path, small_disk):
    config = settings_file(tmp_path, small_disk / "logs")
    job = run_experiment(jobfns.fill_disk, config=config)
    assert job.wait(timeout=60) is JobState.FAILED  # a wait that used to raise OSError
    assert "not saved in status.json" in job.info()["error"]
    assert leftovers(small_disk) == []
    listing = cli(config, "ls")
    assert listing.returncode == 0 and "failed" in listing.stdout, listing.stderr
    shown = cli(config, "status", job.id)
    assert shown.returncode == 0 and "No space left" in shown.stdout, shown.stderr


# -- 2. ls --state filters on refreshed states ----------------------------------------------------


def test_ls_state_filter_sees_runs_that_ended_since_the_registry_looked(tmp_path):
    config = settings_file(tmp_path, tmp_path / "logs")
    jobs = run_sweep(jobfns.train, [{"x": 1}, {"x": 2}], exp_name="ended", config=config)
    assert all(j.wait(timeout=60) is JobState.SUCCEEDED for j in jobs)
    succeeded = cli(config, "ls", "--state", "succeeded").stdout
    assert all(j.id in succeeded for j in jobs)
    queued = cli(config, "ls", "--state", "queued,running").stdout
    assert not any(j.id in queued for j in jobs)
    bad = cli(config, "ls", "--state", "done")
    assert bad.returncode == 1 and "states are queued, running" in bad.stderr


# -- 3. a launcher killed at any point of a launch -------------------------------------------

# The launching script, SIGKILLed by its own audit hook at the Nth event of a kind: a file
# opened for writing, a folder made or a rename (the write of a record and a run folder moved
# into place both are one), or a command started (sbatch).
_KILLED_AT = """
import os, signal, sys, jobfns
from easylaunch import run_sweep

config, mode, event, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
seen = [0]
WRITES = os.O_WRONLY | os.O_RDWR


def kill_at_nth(name, args):
    if name == event and (name != "open" or args[2] & WRITES):
        seen[0] += 1
        if seen[0] == n:
            os.kill(os.getpid(), signal.SIGKILL)


variants = [{"i": i, "pad": "x" * 200_000} for i in range(300)]
sys.addaudithook(kill_at_nth)
options = {"max_parallel": 1} if mode == "local" else {"slurm_config_name": "cpu"}
run_sweep(jobfns.train, variants, exp_name="killed", mode=mode, config=config, **options)
"""

# Each run made is ~6 renames (its records, the folder, its status): renames 1-14 are every step
# of the first two runs, the rest points further in; then the other kinds of event.
KILL_POINTS = [("os.rename", n) for n in (*range(1, 15), 40, 97, 150)] + [
    ("os.mkdir", 3), ("os.mkdir", 12), ("open", 5), ("open", 33), ("os.symlink", 4)]


def folders_and_rows(config, root: Path) -> tuple[set[str], dict[str, dict]]:
    """``ls --all``'s rows of the experiment by folder, and the run folders on disk after it
    (a folder its launch left in ``.partial`` is put in place by the look)."""
    listing = cli(config, "ls", "--all", "--json", "--exp", "killed")
    assert listing.returncode == 0, listing.stderr
    exp_dir = root / "killed"
    folders = {str(p) for p in exp_dir.iterdir()} if exp_dir.is_dir() else set()
    return folders, {r["log_dir"]: r for r in json.loads(listing.stdout)["runs"]}


def kill_launches_at(config, root: Path, mode: str, points) -> list[tuple[int, int]]:
    """Launch and kill at each point in turn; check that every run folder on disk is a row
    of ``ls --all`` and no row lacks its folder, and that no temporary folder ever holds a
    status.json. Returns (folders, rows) after each kill."""
    counts = []
    for event, n in points:
        launcher = subprocess.run(
            [sys.executable, "-c", _KILLED_AT, config, mode, event, str(n)],
            env=dict(os.environ, PYTHONPATH=str(TESTS_DIR)), capture_output=True, timeout=120)
        assert launcher.returncode == -signal.SIGKILL, (event, n, launcher.stderr)
        assert not list((root / ".partial").glob("*/status.json")), (event, n)
        folders, rows = folders_and_rows(config, root)
        assert folders == set(rows), (event, n, folders ^ set(rows))
        counts.append((len(folders), len(rows)))
    return counts


def test_a_launch_killed_at_any_point_leaves_only_folders_ls_shows(tmp_path):
    root = tmp_path / "logs"
    config = settings_file(tmp_path, root, LAUNCH_LINE=False)
    counts = kill_launches_at(config, root, "local", KILL_POINTS)
    assert counts[-1][0] > 30  # (the kills left runs behind, each shown)
    _, rows = folders_and_rows(config, root)
    reasons = {r["state"] + ": " + (r["reason"] or "").split(";")[0] for r in rows.values()}
    assert reasons == {
        "failed: never started: the launch was killed while making its runs",
        "failed: never started: the launching process ended before this run was submitted"}
    run_id = next(iter(rows.values()))["id"]
    shown = cli(config, "status", run_id).stdout
    assert "never started" in shown and f"easylaunch resubmit {run_id}" in shown
    # the next launch removes the half-made folders no launch registered
    run_experiment(jobfns.train, exp_name="after", mode="here_no_doodad", config=config)
    assert not list((root / ".partial").iterdir())


def test_a_slurm_launch_killed_at_any_point_leaves_only_folders_ls_shows(tmp_path, slurm_cfg):
    root = tmp_path / "logs"
    config = settings_file(tmp_path, root, LAUNCH_LINE=False, **{
        k: v for k, v in slurm_cfg.items() if k.startswith("SLURM_")})
    points = [("os.rename", n) for n in (5, 6, 7, 40)] + [("subprocess.Popen", 1)]
    kill_launches_at(config, root, "slurm", points)


def test_a_half_made_folder_of_a_dead_launcher_is_removed_or_placed_by_the_next_launch(
        tmp_path, cfg):
    dead = subprocess.Popen(["true"])
    dead.wait()
    partials = tmp_path / "logs" / ".partial"
    host = "".join(c if c.isalnum() or c in "._-" else "_" for c in socket.gethostname())
    abandoned = partials / f"{host}-{dead.pid}-0123abcd"
    alive = partials / f"{host}-{os.getpid()}-4567abcd"
    for folder in (abandoned, alive):
        folder.mkdir(parents=True)
    run_experiment(jobfns.train, exp_name="partial", mode="here_no_doodad", config=cfg)
    assert not abandoned.exists() and alive.exists()


# -- 4. a damaged status.json ---------------------------------------------------------------------


def test_a_damaged_status_is_reported_for_that_run_alone(tmp_path):
    config = settings_file(tmp_path, tmp_path / "logs")
    good, damaged = run_sweep(jobfns.sleep_a_while, [{"seconds": 0}, {"seconds": 30}],
                              exp_name="damaged", config=config)
    assert good.wait(timeout=60) is JobState.SUCCEEDED
    assert wait_for(lambda: damaged.info().get("state") == "running", 30)
    (damaged.log_dir / "status.json").write_text("")
    assert damaged.status() is JobState.UNKNOWN
    with pytest.raises(DamagedRecordError, match="status.json is damaged"):
        damaged.info()
    listing = cli(config, "ls")
    assert listing.returncode == 0, listing.stderr
    assert "succeeded" in listing.stdout and "status.json is damaged" in listing.stdout
    shown = cli(config, "status", damaged.id)
    assert shown.returncode == 1 and "damaged" in shown.stderr and "Traceback" not in shown.stderr
    damaged.cancel()  # the next write repairs the record
    assert damaged.wait(timeout=60) is JobState.CANCELLED


def test_a_damaged_launch_record_or_bad_times_spoil_no_listing(tmp_path):
    config = settings_file(tmp_path, tmp_path / "logs")
    good, damaged, odd = run_sweep(jobfns.sleep_a_while, [{"seconds": 0}, {"seconds": 30},
                                                         {"seconds": 30}],
                                   exp_name="damaged", config=config)
    assert good.wait(timeout=60) is JobState.SUCCEEDED
    assert wait_for(lambda: odd.info().get("state") == "running", 30)
    (damaged.log_dir / "launch.json").write_text("{")  # an open run: ls asks its backend
    record = json.loads((odd.log_dir / "status.json").read_text())
    (odd.log_dir / "status.json").write_text(json.dumps(dict(record, started_at="today")))
    for _ in range(2):  # (the second reads what the first wrote back to the registry)
        listing = cli(config, "ls")
        assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr
        rows = {line.split("\t")[0]: line.split("\t") for line in listing.stdout.splitlines()}
        assert "launch.json is damaged" in rows[damaged.id][3]
        assert rows[good.id][3] == "succeeded" and rows[odd.id][3] == "running"
    shown = cli(config, "status", damaged.id)
    assert shown.returncode == 1 and "launch.json is damaged" in shown.stderr
    assert "Traceback" not in shown.stderr
    for job in (odd, damaged):  # (this process still holds them, launch.json or not)
        job.cancel()
    assert odd.wait(timeout=60) is JobState.CANCELLED


def test_status_and_result_are_flushed_to_disk(tmp_path, monkeypatch):
    synced = []
    real = records._sync
    monkeypatch.setattr(records, "_sync", lambda fd: (synced.append(os.readlink(
        f"/proc/self/fd/{fd}")), real(fd))[1])
    update_status(str(tmp_path), state="running")
    assert not synced  # a state on the way is not worth a flush
    update_status(str(tmp_path), state="succeeded")
    assert any(".tmp-" in p and "status.json" in p for p in synced)
    assert save_result(str(tmp_path), 42) == (None, {"result_pickle": mock.ANY})
    assert not any("result.pkl" in p for p in synced)  # (it rides in the status write)
    assert save_result(str(tmp_path), "x" * 10_000) == (None, {"result_pickle": None})
    assert any(".tmp-" in p and "result.pkl" in p for p in synced)


# -- 5. a run folder that vanishes ----------------------------------------------------------------


def test_wait_returns_when_the_run_folder_vanishes(cfg):
    import shutil

    job = run_experiment(jobfns.sleep_a_while, variant={"seconds": 3}, config=cfg)
    assert wait_for(lambda: job.info().get("state") == "running", 30)
    while job.log_dir.exists():  # (files the launcher or runner write meanwhile: delete again)
        shutil.rmtree(job.log_dir, ignore_errors=True)
    assert job.wait(timeout=30) is JobState.FAILED
    assert "no longer exists" in job.info()["error"]


# -- 6, 7. Slurm: log folders with %, exit codes and signals --------------------------------------


def test_slurm_runs_in_a_log_folder_with_a_percent_sign(slurm_cfg, tmp_path):
    slurm_cfg["LOCAL_LOG_DIR"] = str(tmp_path / "50%_%j_done")
    job = run_experiment(jobfns.train, variant={"x": 3}, mode="slurm", config=slurm_cfg)
    assert job.wait(timeout=120) is JobState.SUCCEEDED, job.info()
    assert "%" in str(job.log_dir) and (job.log_dir / "stdout.log").exists()


def test_a_backslash_in_the_log_folder_is_refused_before_anything_is_made(slurm_cfg, tmp_path):
    slurm_cfg["LOCAL_LOG_DIR"] = str(tmp_path / "back\\slash")
    with pytest.raises(LaunchError, match="backslash"):
        run_experiment(jobfns.train, mode="slurm", config=slurm_cfg)
    assert not (tmp_path / "back\\slash" / "default").exists()


def test_slurm_runs_killed_by_a_signal_or_os_exit_record_how(slurm_cfg):
    killed, exited = run_sweep(jobfns.kill_self, [{"signal": signal.SIGKILL}], mode="slurm",
                               config=slurm_cfg) + run_sweep(
        jobfns.exit_now, [{"code": 7}], mode="slurm", config=slurm_cfg)
    assert killed.wait(timeout=120) is JobState.FAILED
    assert killed.info()["signal"] == "SIGKILL" and killed.info()["exit_code"] == -9
    assert exited.wait(timeout=120) is JobState.FAILED
    assert exited.info()["exit_code"] == 7 and "exited with code 7" in exited.info()["error"]


def test_a_job_that_wrote_no_log_is_not_pointed_at_one(cfg, tmp_path):
    job = run_experiment(jobfns.train, mode="here_no_doodad", config=cfg)
    mode = get_mode("slurm").create(load_settings(cfg), {})
    (job.log_dir / "stderr.log").unlink(missing_ok=True)
    assert "wrote no log" in mode._where_to_look(job)
    (job.log_dir / "stderr.log").write_text("boom\n")
    assert str(job.log_dir / "stderr.log") in mode._where_to_look(job)


# -- 8, 9, 10, 11. bad input refused before anything is made --------------------------------------


def test_two_data_folders_at_one_mount_point_are_refused_first(cfg, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    target = tmp_path / "mnt" / "data"
    cfg["NON_CODE_DIRS_TO_MOUNT"] = [dict(local_dir=str(a), mount_point=str(target)),
                                     dict(local_dir=str(b), mount_point=str(target))]
    with pytest.raises(SettingsError, match="both have mount_point"):
        run_sweep(jobfns.train, [{}, {}], config=cfg)
    assert not (tmp_path / "logs").exists() and not os.path.lexists(target)


def test_an_unwritable_sss_script_path_is_refused_before_the_batch_is_made(cfg, tmp_path):
    cfg.update(SSS_SUBMIT=False, SLURM_DIRECTORY_FOR_JOB_SCRIPT="/cluster/batches",
               SSS_LOG_DIR="/cluster/logs",
               SSS_CPU_IMAGE="/cluster/image.sif", SSS_SCRIPT_PATH=str(tmp_path))
    with pytest.raises(LaunchError, match="SSS_SCRIPT_PATH=.* is a folder"):
        run_experiment(jobfns.train, mode="sss", config=cfg)
    assert not (tmp_path / "logs").exists()


def test_settings_that_exit_are_empty_or_misshapen_are_refused(tmp_path):
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nLOCAL_LOG_DIR = '/tmp/x'\nsys.exit(0)\n")
    with pytest.raises(SettingsError, match=r"called sys.exit\(0\)"):
        load_settings(str(exits))
    with pytest.raises(SettingsError, match="LOCAL_LOG_DIR must be a folder path"):
        load_settings({"LOCAL_LOG_DIR": ""})
    with pytest.raises(SettingsError, match=r"SLURM_CONFIGS\['cpu'\] must be a dict"):
        load_settings({"SLURM_CONFIGS": {"cpu": None}})
    with pytest.raises(SettingsError, match="RUN_FOLDER_MODE"):
        load_settings({"RUN_FOLDER_MODE": 0o077})


def test_variant_keys_that_json_would_merge_are_refused(cfg):
    with pytest.raises(LaunchError, match="both become '1' in variant.json"):
        run_experiment(jobfns.train, variant={1: "a", "1": "b"}, config=cfg)
    with pytest.raises(LaunchError, match="both become 'true'"):
        run_experiment(jobfns.train, variant={"opt": {True: 1, "true": 2}}, config=cfg)



def test_a_variant_of_number_and_text_keys_launches_and_resumes(cfg):
    variant = {"lr": 0.1, 2: "two", "opt": {1: "a", "b": 2}}
    job = run_experiment(jobfns.train, variant=variant, config=cfg, sweep="mixed")
    assert job.wait(timeout=60).value == "succeeded"
    again = run_experiment(jobfns.train, variant=variant, config=cfg, sweep="mixed",
                           resume=True)
    assert again.id == job.id  # (matched by content: kept, not launched again)


# -- 12. CLI numbers ------------------------------------------------------------------------------


def test_negative_counts_are_refused_with_a_message(tmp_path):
    config = settings_file(tmp_path, tmp_path / "logs")
    for args in (("logs", "abc", "-n", "-5"), ("ls", "-n", "-1")):
        out = cli(config, *args)
        assert out.returncode == 2 and "is not a count" in out.stderr
        assert "Traceback" not in out.stderr


# -- 13. sizes ------------------------------------------------------------------------------------


def test_a_large_captured_object_is_stored_once_and_named_in_a_warning(cfg, tmp_path):
    blob = os.urandom(3 * 2**20)

    def uses_blob(doodad_config, variant):
        return len(blob) + variant["i"]

    cfg["LARGE_PAYLOAD_WARN_MB"] = 2.0
    with pytest.warns(UserWarning, match=r"the function pickles to 3\.0 MB.*captured variable "
                                         r"'blob' \(3\.0 MB\)"):
        jobs = run_sweep(uses_blob, [{"i": i} for i in range(4)], mode="local", config=cfg)
    assert [j.result(timeout=60) for j in jobs] == [len(blob) + i for i in range(4)]
    stored = [p for p in (tmp_path / "logs").rglob("*") if p.is_file() and not p.is_symlink()
              and ".snapshots" not in p.parts]  # (the code folder's snapshot aside: tests/)
    assert sum(p.stat().st_size for p in stored) < 4 * 2**20  # one copy, not four
    assert len(list((tmp_path / "logs" / ".blobs").glob("*.function.pkl"))) == 1


def test_a_large_variant_stays_out_of_the_registry_and_the_status_output(tmp_path):
    config = settings_file(tmp_path, tmp_path / "logs")
    variant = {"table": "v" * 400_000, "lr": 0.1}
    job = run_experiment(jobfns.train, variant=variant, config=config)
    job.wait(timeout=60)
    entry = open_registry(tmp_path / "registry.sqlite3").find(job.id)
    assert entry.variant["_large_variant"]["bytes"] > 400_000
    assert json.loads((job.log_dir / "variant.json").read_text()) == variant
    registry_bytes = sum(p.stat().st_size for p in tmp_path.glob("registry.sqlite3*"))
    assert registry_bytes < 200_000
    shown = cli(config, "status", job.id).stdout
    assert len(shown) < 20_000 and "_large_variant" in shown


# -- 14. permissions ------------------------------------------------------------------------------


def test_run_folders_registry_and_settings_are_private_by_default(tmp_path):
    old = os.umask(0o022)
    try:
        config = settings_file(tmp_path, tmp_path / "logs")
        job = run_experiment(jobfns.train, config=config)
        job.wait(timeout=60)
        mode = lambda p: os.stat(p).st_mode & 0o777  # noqa: E731
        assert mode(job.log_dir) == 0o700
        assert mode(tmp_path / "logs" / ".blobs") == 0o700
        assert mode(tmp_path / "registry.sqlite3") == 0o600
        saved = job.launch_info["request"]["settings_file"]
        assert mode(saved) == 0o600 and mode(Path(saved).parent) == 0o700
        shared = settings_file(tmp_path, tmp_path / "lab", RUN_FOLDER_MODE=0o750)
        job = run_experiment(jobfns.train, config=shared)
        assert mode(job.log_dir) == 0o750
    finally:
        os.umask(old)


# -- 15. more ranks than GPUs ---------------------------------------------------------------------


def _torch_with_gpus(count: int) -> SimpleNamespace:
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True,
                                                device_count=lambda: count))


def test_more_processes_per_host_than_gpus_is_refused_with_the_counts():
    with pytest.raises(dist.DistError, match=r"2 processes on this host but 1 cuda device.*"
                                             r"--nproc-per-node=1.*share_gpus=True"):
        dist._backend_and_device(_torch_with_gpus(1), 0, per_host=2)
    assert dist._backend_and_device(_torch_with_gpus(1), 1, 2, share_gpus=True) == \
        ("gloo", "cuda:0")
    assert dist._backend_and_device(_torch_with_gpus(2), 1, 2) == ("nccl", "cuda:1")


def test_setup_torch_reads_the_processes_per_host_from_the_launcher(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # one GPU, as on the H100
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    env = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    with pytest.raises(dist.DistError, match="2 processes on this host but 1 cuda device"):
        dist.setup_torch(env=env)  # before any device is set or group made
