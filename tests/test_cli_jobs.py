"""The registry and the `easylaunch` job commands, driven as a user would: via subprocess."""

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from helpers import alive, run_pids, wait_for

from easylaunch import JobState, RegistryError, get_job, run_experiment, run_sweep
from easylaunch.tracking import listing
from easylaunch.tracking.registry import Registry

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture
def config_file(tmp_path):
    return settings_file(tmp_path)


def cli(config_file, *args, check=True):
    proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                           *args], capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def _row(output: str, run_id: str) -> str:
    (line,) = [ln for ln in output.splitlines() if ln.strip().startswith(run_id)]
    return line


def test_ls_shows_runs_newest_first_with_their_states(config_file):
    ok = run_experiment(jobfns.train, exp_name="good", config=config_file)
    bad = run_experiment(jobfns.fail, exp_name="bad", config=config_file)
    ok.wait(timeout=60), bad.wait(timeout=60)
    out = cli(config_file, "ls").stdout
    assert "succeeded" in _row(out, ok.id) and "good" in _row(out, ok.id)
    assert "failed" in _row(out, bad.id) and str(bad.log_dir) in _row(out, bad.id)
    assert out.index(bad.id) < out.index(ok.id)
    only_failed = cli(config_file, "ls", "--state", "failed").stdout
    assert bad.id in only_failed and ok.id not in only_failed
    only_good = cli(config_file, "ls", "--exp", "good", "--mode", "local", "--since", "1h").stdout
    assert ok.id in only_good and bad.id not in only_good
    limited = cli(config_file, "ls", "-n", "1")
    assert bad.id in limited.stdout and ok.id not in limited.stdout
    assert "showing the newest 1 of 2 runs" in limited.stderr  # (not in the lines for scripts)


def _on_terminal(config_file, *args: str, columns: int = 80) -> str:
    """What ``easylaunch ARGS`` shows on a pseudo-terminal ``columns`` wide, as a user's
    shell has."""
    out, terminal = os.openpty()
    proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                           *args], stdout=terminal, stderr=subprocess.PIPE, timeout=60,
                          env=dict(os.environ, COLUMNS=str(columns)))
    os.close(terminal)
    assert proc.returncode == 0, proc.stderr
    return _read_all(out).replace("\r\n", "\n")


def _read_all(fd: int) -> str:
    """Everything a pseudo-terminal's other end wrote (its writer has ended); closes it."""
    shown = b""
    with contextlib.suppress(OSError):  # (EIO once the writer's end is closed)
        while chunk := os.read(fd, 65536):
            shown += chunk
    os.close(fd)
    return shown.decode()


def test_ls_groups_sweeps_with_counts_and_the_keys_that_tell_runs_apart(config_file):
    variants = [{"learning_rate": lr, "seed": 7, "net": {"depth": d}}
                for lr, d in ((0.1, 2), (0.01, 2), (0.001, 3))]
    sweep = run_sweep(jobfns.train, variants, exp_name="lr-sweep", config=config_file)
    bad = run_sweep(jobfns.fail, [{"learning_rate": 9}], exp_name="lr-sweep",
                    config=config_file)[0]
    loop = [run_experiment(jobfns.train, variant={"learning_rate": i, "note": "x" * 200},
                           exp_name="loop", config=config_file) for i in range(2)]
    for job in [*sweep, bad, *loop]:
        job.wait(timeout=60)
    shown = _on_terminal(config_file, "ls").splitlines()
    assert all(len(line) <= 80 for line in shown), shown
    headings = [line for line in shown if " · sweep " in line]
    assert len(headings) == 3  # the two run_experiment calls of one script make one sweep
    assert any(h.startswith("lr-sweep") and h.endswith("3 runs: 3 succeeded") for h in headings)
    assert any(h.startswith("lr-sweep") and h.endswith("1 run: 1 failed") for h in headings)
    assert any(h.startswith("loop") and "2 runs: 2 succeeded" in h for h in headings)
    columns = shown[shown.index(next(h for h in headings if "3 runs" in h)) + 1].split()
    assert columns == ["ID", "STATE", "TIME", "learning_rate", "net.depth"]  # not seed
    row = next(line for line in shown if line.strip().startswith(sweep[2].id)).split()
    assert row[1:2] + row[3:] == ["succeeded", "0.001", "3"]
    lines = cli(config_file, "ls", "--variant", "learning_rate,net.depth").stdout.splitlines()
    assert lines[0].split("\t")[-4:] == ["JOB", "REASON", "learning_rate", "net.depth"]
    by_id = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert {by_id[j.id][6] for j in sweep} == {sweep[0].launch_info["sweep_id"]}
    assert by_id[loop[0].id][6] == by_id[loop[1].id][6] != by_id[bad.id][6]
    assert by_id[sweep[2].id][-2:] == ["0.001", "3"] and by_id[loop[0].id][-1] == ""
    assert by_id[bad.id][9] == "ValueError: bad learning rate 9" and by_id[loop[0].id][9] == ""
    assert "    ↳ ValueError: bad learning rate 9" in shown  # under the failed run's row
    only = cli(config_file, "ls", "--sweep", by_id[bad.id][6][:6]).stdout.splitlines()
    assert [line.split("\t")[0] for line in only[1:]] == [bad.id]


def test_ls_matches_part_of_an_experiment_name_and_says_when_nothing_matches(config_file):
    job = run_experiment(jobfns.train, exp_name="lr-sweep", config=config_file)
    job.wait(timeout=60)
    assert job.id in cli(config_file, "ls", "--exp", "sweep").stdout
    nothing = cli(config_file, "ls", "--exp", "zzz")
    assert nothing.stdout.splitlines()[1:] == []
    assert "no runs match those filters; experiments: lr-sweep" in nothing.stderr


def test_ls_prints_tab_separated_lines_to_a_pipe_and_columns_to_a_terminal(config_file):
    job = run_experiment(jobfns.train, exp_name="tsv", config=config_file)
    job.wait(timeout=60)
    header, row = cli(config_file, "ls").stdout.splitlines()
    assert header.split("\t") == ["ID", "EXPERIMENT", "MODE", "STATE", "LAUNCHED", "LOG DIR",
                                  "SWEEP", "SECONDS", "JOB", "REASON"]
    fields = row.split("\t")
    assert fields[:4] == [job.id, "tsv", "local", "succeeded"] and fields[5] == str(job.log_dir)
    assert float(fields[7]) >= 0 and fields[8] == ""  # a local run has no scheduler job
    shown = _on_terminal(config_file, "ls")
    assert "\t" not in shown and job.id in shown and "tsv · sweep " in shown


def _answering(config_file, answer: str, *args: str) -> subprocess.CompletedProcess:
    """``easylaunch ARGS`` with a terminal on stdin that types ``answer``."""
    typist, terminal = os.openpty()
    os.write(typist, answer.encode())
    proc = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                           *args], stdin=terminal, capture_output=True, text=True, timeout=120)
    os.close(terminal), os.close(typist)
    return proc


def test_bulk_cancel_shows_the_selection_and_asks_once_on_a_terminal(config_file):
    slow = [run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, exp_name="slow",
                           config=config_file) for _ in range(2)]
    other = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, exp_name="other",
                           config=config_file)
    try:
        refused = _answering(config_file, "n\n", "cancel", "--exp", "slow")
        assert "cancel 2 run(s):" in refused.stdout and "nothing done" in refused.stdout
        assert all(j.status() is not JobState.CANCELLED for j in slow)
        done = _answering(config_file, "y\n", "cancel", "--exp", "slow", "--state", "running")
        assert done.returncode == 0 and done.stdout.count(": cancelled") == 2, done.stdout
        assert [j.status() for j in slow] == [JobState.CANCELLED] * 2
        assert other.status() is not JobState.CANCELLED
        usage = cli(config_file, "cancel", check=False)
        assert usage.returncode == 1 and "give run ids, or select runs with" in usage.stderr
    finally:
        other.cancel()


def test_failed_runs_of_a_sweep_are_resubmitted_together_into_the_same_sweep(config_file):
    jobs = run_sweep(jobfns.fail_unless_exists, [{"path": "/"}, {"path": "/nonexistent-1"},
                                                 {"path": "/nonexistent-2"}],
                     exp_name="flaky", config=config_file)
    for job in jobs:
        job.wait(timeout=60)
    sweep = jobs[0].launch_info["sweep_id"]
    out = cli(config_file, "resubmit", "--sweep", sweep, "--state", "failed")  # (a pipe: no ask)
    assert "resubmit 2 run(s):" in out.stdout and out.stdout.count("resubmitted ") == 2
    again = [get_job(line.split()[3].rstrip(":"), config=config_file)
             for line in out.stdout.splitlines() if line.startswith("resubmitted ")]
    assert {j.launch_info["resubmitted_from"] for j in again} == {jobs[1].id, jobs[2].id}
    assert {j.launch_info["sweep_id"] for j in again} == {sweep}
    for job in again:
        job.wait(timeout=60)
    listed = cli(config_file, "ls", "--sweep", sweep).stdout.splitlines()
    assert len(listed) == 1 + 5


def test_forget_drops_ended_runs_and_purge_deletes_their_folders(config_file):
    done = [run_experiment(jobfns.train, exp_name="old", config=config_file) for _ in range(2)]
    for job in done:
        job.wait(timeout=60)
    running = run_experiment(jobfns.sleep_a_while, variant={"seconds": 300}, exp_name="old",
                             config=config_file)
    try:
        busy = cli(config_file, "forget", "--exp", "old", check=False)
        assert busy.returncode == 1 and "still running" in busy.stderr and "cancel them first" \
            in busy.stderr
        kept = cli(config_file, "rm", done[0].id)
        assert "forgot 1 run(s)" in kept.stdout and done[0].log_dir.is_dir()
        assert done[0].id not in cli(config_file, "ls").stdout
        unasked = cli(config_file, "forget", "--purge", done[1].id, check=False)
        assert unasked.returncode == 1 and "--yes" in unasked.stderr and done[1].log_dir.is_dir()
        purged = cli(config_file, "forget", "--purge", "--yes", done[1].id)
        assert "deleted their folders" in purged.stdout and not done[1].log_dir.exists()
    finally:
        running.cancel()


def test_waiting_for_a_sweep_shows_counts_by_state_and_leaves_a_summary(config_file):
    script = textwrap.dedent(f"""
        import jobfns
        from easylaunch import run_sweep, wait_all
        jobs = run_sweep(jobfns.fail_unless_exists, [{{"path": "/"}}, {{"path": "/"}},
                         {{"path": "/nonexistent"}}], config={config_file!r})
        wait_all(jobs)
    """)
    out, terminal = os.openpty()
    proc = subprocess.run([sys.executable, "-c", script], stderr=terminal, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(Path(jobfns.__file__).parent),
                                   COLUMNS="100"))
    os.close(terminal)
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", _read_all(out))
    assert proc.returncode == 0
    assert re.search(r"runs .*3/3 2 succeeded, 1 failed", text), text  # the bar's last frame
    assert re.search(r"[\r\n]3 runs: 2 succeeded, 1 failed \(waited \d+ s\)", text), text


def test_watch_follows_open_runs_until_all_have_ended(config_file):
    jobs = [run_experiment(jobfns.sleep_a_while, variant={"seconds": s}, exp_name="w",
                           config=config_file) for s in (1, 3)]
    out = cli(config_file, "watch", "--interval", "0.2").stdout.splitlines()
    assert all(job.status() is JobState.SUCCEEDED for job in jobs)
    counts = [line.split(" ", 1)[1] for line in out]  # (after the time of day)
    assert counts[0].startswith("2 open run(s): ") and counts[-1] == "0 open run(s)"
    assert "1 open run(s): 1 running" in counts
    assert cli(config_file, "watch", "--once").stdout.split(" ", 1)[1] == "0 open run(s)\n"


def test_status_and_logs_by_suffix(config_file):
    job = run_experiment(jobfns.print_slowly, variant={"lines": 3}, config=config_file)
    job.wait(timeout=60)
    out = cli(config_file, "status", job.id[-5:]).stdout
    assert f"id:               {job.id}" in out
    assert "state:            succeeded" in out
    assert f"stdout:           {job.stdout_path}" in out
    assert out.rstrip().endswith("line 0\nline 1\nline 2")
    assert cli(config_file, "q", job.id).stdout == out
    assert cli(config_file, "logs", job.id, "-n", "1").stdout == "line 2\n"
    failed = run_experiment(jobfns.fail, config=config_file)
    failed.wait(timeout=60)
    status = cli(config_file, "status", failed.id).stdout
    assert "state:            failed" in status and "ValueError: bad learning rate" in status
    assert "why:              ValueError: bad learning rate None" in status
    stderr_log = cli(config_file, "logs", failed.id, "--stderr").stdout
    assert stderr_log.startswith("Traceback") and "ValueError: bad learning rate" in stderr_log


def test_a_closed_pipe_and_a_bare_command_end_without_a_traceback(config_file):
    job = run_experiment(jobfns.print_slowly, variant={"lines": 3}, config=config_file)
    job.wait(timeout=60)
    reader, writer = os.pipe()
    os.close(reader)  # as `| head -1` does once it has its line
    piped = subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config_file,
                            "logs", job.id], stdout=writer, stderr=subprocess.PIPE, text=True,
                           timeout=60)
    os.close(writer)
    assert piped.returncode == 141 and piped.stderr == ""
    bare = subprocess.run([sys.executable, "-m", "easylaunch.cli"], capture_output=True,
                          text=True, timeout=60)
    assert bare.returncode == 2 and bare.stdout.startswith("usage: easylaunch")
    assert "watch" in bare.stdout and "Traceback" not in bare.stderr


def test_logs_follow_until_the_run_ends(config_file):
    job = run_experiment(jobfns.print_slowly, variant={"lines": 8}, config=config_file)
    out = cli(config_file, "logs", "-f", job.id).stdout
    assert out == "".join(f"line {i}\n" for i in range(8))
    assert job.status() is JobState.SUCCEEDED


def test_cancel_ends_a_running_job_and_ls_shows_it(config_file):
    job = run_experiment(jobfns.sleep_with_child, config=config_file)
    pids = run_pids(job.log_dir)
    out = cli(config_file, "abort", job.id[-6:]).stdout
    assert out.strip() == f"{job.id}: cancelled"
    assert job.wait(timeout=30) is JobState.CANCELLED
    assert wait_for(lambda: not any(alive(p) for p in pids))
    assert "cancelled" in _row(cli(config_file, "ls").stdout, job.id)
    again = cli(config_file, "cancel", job.id).stdout
    assert again.strip() == f"{job.id}: already cancelled"


def test_resubmit_reruns_a_failed_job_after_a_fix(config_file, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.txt").write_text("broken")
    mount_point = tmp_path / "mnt/data"
    with open(config_file, "a") as f:
        f.write(f"NON_CODE_DIRS_TO_MOUNT = [dict(local_dir={str(data)!r}, "
                f"mount_point={str(mount_point)!r})]\n")
    first = run_experiment(jobfns.check_data, variant={"mount_point": str(mount_point)},
                           config=config_file)
    assert first.wait(timeout=60) is JobState.FAILED
    (data / "data.txt").write_text("good")
    out = cli(config_file, "resubmit", first.id).stdout
    new_id = out.split(" as ")[1].split(":")[0]
    new = get_job(new_id, config=config_file)
    assert new.id != first.id
    assert new.result(timeout=60) == "good"
    assert new.launch_info["resubmitted_from"] == first.id
    # the new run names its own launcher (the resubmitting process), not the first one's
    assert new.launch_info["launcher_pid"] != first.launch_info["launcher_pid"]
    assert new.launch_info["launcher_started"] != first.launch_info["launcher_started"]
    assert new.launch_info["code_snapshots"] == first.launch_info["code_snapshots"]
    assert os.path.realpath(new.log_dir / "bundle/code/0-tests") == \
        os.path.realpath(first.log_dir / "bundle/code/0-tests")
    assert (new.log_dir / "bundle/function.pkl").read_bytes() == \
        (first.log_dir / "bundle/function.pkl").read_bytes()
    assert first.status() is JobState.FAILED  # the old run keeps its record
    assert f"resubmitted from: {first.id}" in cli(config_file, "status", new.id).stdout


def test_get_job_from_another_process(config_file):
    job = run_experiment(jobfns.train, variant={"learning_rate": 7}, config=config_file)
    job.wait(timeout=60)
    code = (f"from easylaunch import get_job; "
            f"print(get_job({job.id[-4:]!r}, config={config_file!r}).result())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "{'loss': 0.1, 'lr': 7}"


def test_two_processes_launching_at_once_both_land(config_file):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS_DIR)!r})
        import jobfns
        from easylaunch import run_sweep
        run_sweep(jobfns.train, [{{"i": i}} for i in range(25)], exp_name=sys.argv[1],
                  mode="here_no_doodad", config={config_file!r})
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script, name]) for name in ("one", "two")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    out = cli(config_file, "ls", "--all").stdout
    assert sum(line.split("\t")[1] == "one" for line in out.splitlines()) == 25
    assert sum(line.split("\t")[1] == "two" for line in out.splitlines()) == 25


def test_ambiguous_and_unknown_ids(config_file, tmp_path):
    registry = Registry(tmp_path / "registry.sqlite3")
    registry.add([dict(id=i, exp_name="e", mode="local", state="succeeded",
                       log_dir=str(tmp_path / i)) for i in ("aaaa11", "bbbb11", "11cc22")])
    ambiguous = cli(config_file, "status", "11", check=False)
    assert ambiguous.returncode == 1
    assert "'11' matches several runs: " in ambiguous.stderr
    assert all(i in ambiguous.stderr for i in ("aaaa11", "bbbb11", "11cc22"))
    assert registry.find("aaa").id == "aaaa11" and registry.find("cc22").id == "11cc22"
    unknown = cli(config_file, "logs", "zz", check=False)
    assert unknown.returncode == 1
    assert "no run id starts or ends with 'zz'" in unknown.stderr
    assert cli(config_file, "cancel", "zz", check=False).returncode == 1


@pytest.mark.parametrize("make, problem", [
    (lambda p: p.write_bytes(b"this is not sqlite" * 100), "cannot be read"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE runs (x)"), "older easylaunch"),
    (lambda p: sqlite3.connect(p).execute("PRAGMA user_version = 99"), "newer easylaunch"),
])
def test_broken_registry_gives_a_clear_message(config_file, tmp_path, make, problem):
    make(tmp_path / "registry.sqlite3")
    proc = cli(config_file, "ls", check=False)
    assert proc.returncode == 1
    assert problem in proc.stderr and "Move the file away" in proc.stderr
    with pytest.raises(RegistryError, match=problem):
        run_sweep(jobfns.train, [{}], config=config_file)
    assert not (tmp_path / "logs").exists()


def test_fetch_of_a_local_run_says_it_is_here(config_file):
    job = run_experiment(jobfns.train, config=config_file)
    job.wait(timeout=60)
    assert str(job.log_dir) in cli(config_file, "fetch", job.id).stdout


def test_ls_and_status_show_restarts(config_file):
    job = run_experiment(jobfns.kill_self, variant={"signal": signal.SIGKILL},
                         max_restarts=1, config=config_file)
    assert job.wait(timeout=60) is JobState.FAILED
    assert "failed (1 restart)" in _row(cli(config_file, "ls").stdout, job.id)
    out = cli(config_file, "status", job.id).stdout
    assert re.search(r"restarts:\s+1 \(lost at \d{4}-", out), out
    assert re.search(r"attempt:\s+2", out) and "max_restarts=1 used up" in out


def test_a_registry_of_the_previous_schema_is_upgraded(config_file, tmp_path):
    from easylaunch.tracking.registry import open_registry

    path = tmp_path / "registry.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("""CREATE TABLE runs (
        id TEXT PRIMARY KEY, exp_name TEXT NOT NULL, mode TEXT NOT NULL, state TEXT NOT NULL,
        log_dir TEXT NOT NULL, remote_log_dir TEXT, backend TEXT NOT NULL DEFAULT '{}',
        variant TEXT NOT NULL DEFAULT '{}', git_commit TEXT, created REAL NOT NULL,
        updated REAL NOT NULL, resubmitted_from TEXT, host TEXT);
        INSERT INTO runs VALUES ('abcd1234', 'old', 'local', 'succeeded', '/x', NULL, '{}',
                                 '{}', NULL, 1, 1, NULL, NULL);
        PRAGMA user_version = 1;""")
    old.close()
    (entry,) = open_registry(str(path)).list()[0]
    assert entry.id == "abcd1234" and entry.restarts == 0
    assert "abcd1234" in cli(config_file, "ls").stdout


def test_a_registry_used_from_several_threads_stays_shared_with_other_processes(tmp_path):
    """A long-running process (the dashboard) opens a connection per thread; that must not
    drop its locks, or another process folds away the write-ahead log it still writes to."""
    import threading

    path = tmp_path / "registry.sqlite3"
    registry = Registry(path)

    def add(run_id: str) -> None:
        registry.add([dict(id=run_id, exp_name="e", mode="local", state="succeeded",
                           log_dir="/x")])

    def elsewhere(code: str) -> str:
        return subprocess.run([sys.executable, "-c", "import sys; from easylaunch.tracking."
                               "registry import Registry; r = Registry(sys.argv[1]); " + code,
                               str(path)], capture_output=True, text=True, check=True).stdout
    add("00000001")
    thread = threading.Thread(target=registry.list)  # a second thread's own connection
    thread.start()
    thread.join()
    elsewhere("r.forget(['00000001'])")
    add("00000003")
    assert [e.id for e in registry.list()[0]] == ["00000003"]
    assert elsewhere("print(*[e.id for e in r.list()[0]])").split() == ["00000003"]


def test_status_of_an_experiment_name_points_to_ls(config_file):
    run_experiment(jobfns.train, exp_name="named-exp", config=config_file).wait(timeout=60)
    out = cli(config_file, "status", "named-exp", check=False)
    assert out.returncode == 1
    assert "'named-exp' is an experiment, not a run id" in out.stderr
    assert "easylaunch ls --exp named-exp" in out.stderr
    assert listing.duration(0.42) == "0.4s" and listing.duration(42) == "42s"


def test_status_shows_the_result_and_the_last_metrics(config_file):
    job = run_experiment(jobfns.log_curve, variant={"lr": 0.5, "steps": 4}, config=config_file)
    job.wait(timeout=60)
    out = cli(config_file, "status", job.id).stdout
    assert "result:           {'on_disk_before_end': False, 'steps': 4, 'lr': 0.5}" in out
    assert "last metrics:     loss=0.5 (step 3), acc=0.75 (step 3)" in out
    assert "backend:          pid=" in out  # key=value, not a dict's repr
