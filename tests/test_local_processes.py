"""The local mode's process handling: cancel, Ctrl-C, lost launchers, GPUs, data mounts."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jobfns
import pytest
from helpers import alive, run_pids, wait_for

from easylaunch import Job, JobCancelledError, JobState, run_experiment, run_sweep

TESTS_DIR = Path(__file__).resolve().parent


def test_cancel_ends_the_whole_process_group(cfg):
    job = run_experiment(jobfns.sleep_with_child, config=cfg)
    runner_pid, child_pid = run_pids(job.log_dir)
    job.cancel()
    assert job.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not alive(runner_pid) and not alive(child_pid))
    assert job.info()["signal"] == "SIGTERM"
    with pytest.raises(JobCancelledError):
        job.result()


def test_cancel_before_start_never_starts_the_run(cfg):
    first, second = run_sweep(jobfns.sleep_with_child, [{}, {}], config=cfg, max_parallel=1)
    second.cancel()
    assert second.status() is JobState.CANCELLED
    first.cancel()
    first.wait(timeout=30)
    time.sleep(0.5)
    assert not (second.log_dir / "pids").exists()
    assert "pid" not in second.launch_info["backend"]


def test_a_later_process_can_cancel_and_see_the_state(cfg):
    job = run_experiment(jobfns.sleep_with_child, config=cfg)
    runner_pid, child_pid = run_pids(job.log_dir)
    code = f"from easylaunch import Job; Job.from_run_dir({str(job.log_dir)!r}).cancel()"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    assert job.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not alive(runner_pid) and not alive(child_pid))
    later = subprocess.run(
        [sys.executable, "-c", f"from easylaunch import Job; "
                               f"print(Job.from_run_dir({str(job.log_dir)!r}).status())"],
        capture_output=True, text=True, check=True)
    assert later.stdout.strip() == "cancelled"


def test_run_killed_outside_easylaunch_ends_as_failed(cfg):
    job = run_experiment(jobfns.sleep_with_child, config=cfg)
    runner_pid, child_pid = run_pids(job.log_dir)
    os.kill(runner_pid, signal.SIGKILL)
    os.kill(child_pid, signal.SIGKILL)
    assert job.wait(timeout=30) is JobState.FAILED
    assert "killed by SIGKILL" in job.info()["error"]


LAUNCHER = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {tests!r})
    import jobfns
    from easylaunch import run_sweep
    jobs = run_sweep(jobfns.sleep_with_child, [{{}}, {{}}, {{}}], config={cfg!r}, max_parallel=2)
    print(" ".join(str(j.log_dir) for j in jobs), flush=True)
    {tail}
""")


def _start_launcher(cfg, tail):
    script = LAUNCHER.format(tests=str(TESTS_DIR), cfg=cfg, tail=tail)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    dirs = [Path(d) for d in proc.stdout.readline().split()]
    assert len(dirs) == 3, proc.stderr.read()
    pids = run_pids(dirs[0]) + run_pids(dirs[1])
    return proc, dirs, pids


def test_ctrl_c_in_the_launching_script_leaves_no_orphans(cfg):
    proc, dirs, pids = _start_launcher(cfg, "time.sleep(300)")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert wait_for(lambda: not any(alive(p) for p in pids))
    states = [Job.from_run_dir(d).status() for d in dirs]
    assert states == [JobState.CANCELLED] * 3


def test_ctrl_c_while_the_script_waits_at_exit_cancels_the_runs(cfg):
    proc, dirs, pids = _start_launcher(cfg, "")
    assert wait_for(lambda: "waiting for 3 local run(s)" in proc.stderr.readline(), 30)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert wait_for(lambda: not any(alive(p) for p in pids))
    assert [Job.from_run_dir(d).status() for d in dirs] == [JobState.CANCELLED] * 3


def test_a_killed_launcher_takes_its_runs_with_it(cfg):
    proc, dirs, pids = _start_launcher(cfg, "time.sleep(300)")
    proc.kill()
    proc.wait(timeout=60)
    assert wait_for(lambda: not any(alive(p) for p in pids))
    states = [Job.from_run_dir(d).wait(timeout=30) for d in dirs]
    assert states == [JobState.CANCELLED] * 3  # two were stopped, one never started


def test_launching_script_waits_for_its_runs_at_exit(cfg):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import jobfns
        from easylaunch import run_sweep
        jobs = run_sweep(jobfns.interval, [dict(seconds=0.3)] * 3, config={cfg!r},
                         max_parallel=1)
        print(" ".join(str(j.log_dir) for j in jobs))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    states = [Job.from_run_dir(d).status() for d in out.split()]
    assert states == [JobState.SUCCEEDED] * 3


def test_gpu_runs_are_pinned_round_robin(cfg):
    cfg["LOCAL_GPU_IDS"] = [0, 1]
    jobs = run_sweep(jobfns.echo, [{}] * 4, config=cfg, use_gpu=True, max_parallel=4)
    results = [j.result(timeout=60) for j in jobs]
    assert [r["cuda"] for r in results] == ["0", "1", "0", "1"]
    # each run sees its one GPU as device 0; which physical GPU it got is recorded
    assert [r["config"]["gpu_id"] for r in results] == [0, 0, 0, 0]
    assert [r["config"]["extra_launch_info"]["physical_gpu_id"] for r in results] == \
        ["0", "1", "0", "1"]
    assert [j.launch_info["backend"]["gpu_id"] for j in jobs] == ["0", "1", "0", "1"]


def test_default_cap_with_gpus_is_one_run_per_gpu(cfg):
    cfg["LOCAL_GPU_IDS"] = [0, 1]
    jobs = run_sweep(jobfns.interval, [dict(seconds=0.5)] * 4, config=cfg, use_gpu=True)
    spans = sorted(j.result(timeout=60) for j in jobs)
    assert max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans) == 2


def test_gpu_id_pins_every_run(cfg):
    cfg["LOCAL_GPU_IDS"] = [0, 1, 2]
    jobs = run_sweep(jobfns.echo, [{}] * 2, config=cfg, use_gpu=True, gpu_id=2)
    assert [j.result(timeout=60)["cuda"] for j in jobs] == ["2", "2"]


def test_cpu_runs_see_no_gpu_pinning(cfg, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert run_experiment(jobfns.echo, config=cfg).result(timeout=60)["cuda"] is None


def test_data_dir_is_reachable_at_its_mount_point(cfg, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("mounted")
    mount_point = tmp_path / "mnt/deep/data"
    cfg["NON_CODE_DIRS_TO_MOUNT"] = [dict(local_dir=str(data), mount_point=str(mount_point))]
    jobs = run_sweep(jobfns.read_mounted, [dict(mount_point=str(mount_point))] * 2, config=cfg)
    assert [j.result(timeout=60) for j in jobs] == ["mounted"] * 2
    assert os.path.islink(mount_point)


def test_data_mount_point_taken_by_something_else_is_left_as_doodad_did(cfg, tmp_path,
                                                                          capfd):
    data = tmp_path / "data"
    data.mkdir()
    taken = tmp_path / "taken"
    taken.mkdir()
    cfg["NON_CODE_DIRS_TO_MOUNT"] = [dict(local_dir=str(data), mount_point=str(taken))]
    job = run_experiment(jobfns.train, config=cfg)
    assert job.wait(timeout=60) is JobState.SUCCEEDED
    assert taken.is_dir() and not taken.is_symlink()  # untouched
    assert f"{taken} already exists and is not {data}" in capfd.readouterr().err


def test_status_json_is_always_complete(cfg):
    jobs = run_sweep(jobfns.train, [{}] * 8, config=cfg, max_parallel=4)
    for job in jobs:
        while not job.done():
            json.loads((job.log_dir / "status.json").read_text())  # never half-written
    assert all(j.status() is JobState.SUCCEEDED for j in jobs)


# -- warm starts: each run a fork of one warm Python, as a new process would start ----------------


def test_runs_start_as_forks_of_a_warm_python_each_as_a_new_process_would(cfg, tmp_path):
    jobs = run_sweep(jobfns.process_facts, [{"i": i} for i in range(3)], config=cfg,
                     use_gpu=False)
    facts = [job.result(timeout=60) for job in jobs]
    starters = {f["starter"] for f in facts}
    assert len(starters) == 1 and starters != {os.getpid()}  # one warm Python started them all
    with open(f"/proc/{starters.pop()}/cmdline", "rb") as f:
        assert b"forkserver" in f.read()
    assert len({f["pid"] for f in facts}) == 3
    for fact, job in zip(facts, jobs, strict=True):
        assert fact["pgid"] == fact["sid"] == fact["supervisor"]  # its own session and group
        assert fact["cwd"] == os.getcwd() and fact["stdin"] == ""
        assert fact["pythonpath"].split(os.pathsep)[0].startswith(str(job.log_dir / "bundle"))
        assert fact["argv"][0] == str(job.log_dir / "bundle" / "job.pyz")
        assert "facts printed" in (job.log_dir / "stdout.log").read_text()
    assert len({f["random"] for f in facts}) == 3  # (random reseeded in each fork)


def test_a_launch_with_other_interpreter_settings_gets_a_warm_python_of_its_own(
        cfg, monkeypatch):
    first = run_experiment(jobfns.process_facts, config=cfg).result(timeout=60)
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    seeded = run_experiment(jobfns.process_facts, config=cfg).result(timeout=60)
    assert seeded["starter"] != first["starter"]
    expected = subprocess.run([sys.executable, "-c", "print(hash('easylaunch'))"],
                              env=dict(os.environ, PYTHONHASHSEED="0"), capture_output=True,
                              text=True, check=True).stdout
    assert seeded["hash"] == int(expected)


def test_runs_start_again_when_the_warm_python_is_gone(cfg):
    before = run_experiment(jobfns.process_facts, config=cfg).result(timeout=60)
    os.kill(before["starter"], signal.SIGKILL)
    after = run_experiment(jobfns.process_facts, config=cfg).result(timeout=60)
    assert after["starter"] not in (before["starter"], os.getpid())
