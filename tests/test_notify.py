"""Notifications when a sweep ends: a real HTTP server on loopback as the webhook, a real
command, sent once by whichever process sees the end."""

import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

import jobfns
import pytest
from conftest import settings_file
from helpers import wait_for

from easylaunch import run_sweep, wait_all

TESTS_DIR = Path(__file__).resolve().parent


@pytest.fixture
def hook():
    """A webhook on 127.0.0.1: the JSON bodies POSTed to it, in order."""
    received = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            length = int(self.headers["Content-Length"])
            received.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/hook/SECRET-TOKEN", received
    server.shutdown()


def _cli(config: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "easylaunch.cli", "--config", config, *args],
                          capture_output=True, text=True, timeout=120)


def _appending_to(told) -> list[str]:
    """A NOTIFY_COMMAND that appends each notice it reads on stdin to ``told``, a line each."""
    return [sys.executable, "-c", f"import sys; open({str(told)!r}, 'a').write("
            "sys.stdin.read() + '\\n')"]


def test_the_end_of_a_sweep_is_told_once_to_the_webhook_and_the_command(tmp_path, hook):
    url, received = hook
    told = tmp_path / "told.jsonl"
    command = _appending_to(told)
    config = settings_file(tmp_path, NOTIFY_WEBHOOK=url, NOTIFY_COMMAND=command,
                       NOTIFY_FAILED_RUNS=True)
    jobs = run_sweep(jobfns.fail_unless_exists, [{"path": "/"}, {"path": "/nonexistent"},
                                                 {"path": "/"}], exp_name="told", config=config)
    wait_all(jobs)
    events = sorted(received, key=lambda m: m["event"])
    assert [m["event"] for m in events] == ["run_failed", "sweep_ended"]
    failed, ended = events
    assert failed["id"] == jobs[1].id and "FileNotFoundError" in failed["error"]
    assert ended["experiment"] == "told" and ended["sweep"] == jobs[0].launch_info["sweep_id"]
    assert ended["runs"] == 3 and ended["states"] == {"succeeded": 2, "failed": 1}
    assert [r["id"] for r in ended["not_succeeded"]] == [jobs[1].id]
    assert "/nonexistent" in ended["not_succeeded"][0]["error"]
    lines = [json.loads(line) for line in told.read_text().splitlines()]
    assert sorted(m["event"] for m in lines) == ["run_failed", "sweep_ended"]
    assert _cli(config, "ls").returncode == 0 and _cli(config, "watch", "--once").returncode == 0
    assert len(received) == 2  # every later look finds the ends told already


def test_a_watcher_tells_the_end_when_no_script_waits(tmp_path, hook):
    url, received = hook
    config = settings_file(tmp_path, NOTIFY_WEBHOOK=url)
    jobs = run_sweep(jobfns.sleep_a_while, [{"seconds": 1}, {"seconds": 2}], exp_name="w",
                     config=config)
    watchers = [subprocess.Popen([sys.executable, "-m", "easylaunch.cli", "--config", config,
                                  "watch", "--interval", "0.2"], stdout=subprocess.DEVNULL)
                for _ in range(2)]
    assert [w.wait(timeout=60) for w in watchers] == [0, 0]
    assert wait_for(lambda: received, 10)
    (ended,) = received  # two watchers, one notice
    assert ended["states"] == {"succeeded": 2} and ended["not_succeeded"] == []
    assert ended["sweep"] == jobs[0].launch_info["sweep_id"]


def test_a_webhook_that_fails_is_said_without_its_url(tmp_path, capsys):
    config = settings_file(tmp_path, NOTIFY_WEBHOOK="http://127.0.0.1:9/hook/SECRET-TOKEN")
    (job,) = run_sweep(jobfns.train, [{}], exp_name="unheard", config=config)
    job.wait(timeout=60)  # (the wait that sees the end tells it; nothing listens on port 9)
    said = capsys.readouterr().err
    assert "notification webhook on 127.0.0.1 failed" in said and "SECRET-TOKEN" not in said
    listed = _cli(config, "ls")
    assert listed.returncode == 0 and job.id in listed.stdout
    assert "SECRET-TOKEN" not in listed.stderr + listed.stdout


def test_a_failed_run_that_submit_wait_or_logs_f_sees_end_is_told_once(tmp_path, hook):
    """``submit --wait`` and ``logs -f`` write the end after they saw it: the notice still
    goes out (once; a later ``ls`` finds it told)."""
    url, received = hook
    told = tmp_path / "told.jsonl"
    command = _appending_to(told)
    config = settings_file(tmp_path, NOTIFY_COMMAND=command, NOTIFY_WEBHOOK=url,
                           NOTIFY_FAILED_RUNS=True)
    waited = _cli(config, "submit", "--wait", "--", "bash", "-c", "exit 3")
    run_id = waited.stdout.split()[0]
    assert waited.returncode == 3
    assert _cli(config, "ls").returncode == 0
    lines = [json.loads(line) for line in told.read_text().splitlines()]
    failed = [m for m in lines if m["event"] == "run_failed"]
    assert [m["id"] for m in failed] == [run_id]
    assert "code 3" in failed[0]["error"]
    assert [m["id"] for m in received if m["event"] == "run_failed"] == [run_id]
    # logs -f of a run that ended while nobody looked
    (job,) = run_sweep(jobfns.fail_unless_exists, [{"path": "/nonexistent"}],
                       exp_name="followed", config=config)
    assert wait_for(lambda: job.recorded_state().terminal, 60)
    assert _cli(config, "logs", "-f", job.id).returncode == 0
    assert _cli(config, "ls").returncode == 0
    assert [m["id"] for m in received if m["event"] == "run_failed"] == [run_id, job.id]
    assert [m["sweep"] for m in received if m["event"] == "sweep_ended"
            ].count(job.launch_info["sweep_id"]) == 1
