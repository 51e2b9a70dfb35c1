"""Small helpers shared by the process tests."""

import importlib.util
import json
import os
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


def node_cpus() -> int:
    """The CPUs a node of the test cluster's default partition has (scripts/slurm-up.sh: debug,
    node1 and node2, each more than this machine has, so that the test workers' jobs run side by
    side)."""
    out = subprocess.run(["sinfo", "-h", "-p", "debug", "-o", "%c"], capture_output=True,
                         text=True, check=True)
    return int(out.stdout.split()[0])


def holding_the_default_partition(seconds: int) -> list[str]:
    """The sbatch argv of a job that holds every CPU of the default partition (both its nodes)
    for ``seconds``: what is submitted there next waits."""
    return ["sbatch", "--parsable", "--partition=debug", "--nodes=2", "--ntasks-per-node=1",
            f"--cpus-per-task={node_cpus()}", "--output=/dev/null", f"--wrap=sleep {seconds}"]


def run_pids(log_dir: Path) -> list[int]:
    """The pids a ``jobfns.sleep_with_child`` run wrote (the runner's and its child's)."""
    assert wait_for(lambda: (log_dir / "pids").exists()), "the run never started"
    return [int(p) for p in (log_dir / "pids").read_text().split()]


class PlayedInstance:
    """A cloud instance played on this machine: its boot script runs as ``proc`` in a sandbox
    folder (the cloud stand-ins subclass it)."""

    workdir: Path
    proc: subprocess.Popen

    def make_sandbox(self, root: Path, fake_shutdown: str) -> Path:
        """The instance's folders and a stand-in ``shutdown`` command; returns the folder to
        put first on PATH."""
        self.root = root
        self.workdir = root / "work"
        self.shutdown_log = root / "shutdown.log"
        bin_dir = root / "bin"
        bin_dir.mkdir(parents=True)
        (bin_dir / "shutdown").write_text(fake_shutdown)
        (bin_dir / "shutdown").chmod(0o755)
        return bin_dir

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


def check_a_synced_run(job, box: PlayedInstance, read, keys, root: str = "exps") -> dict:
    """The middle of the cloud end-to-end tests, on a ``jobfns.wait_for_release`` run with
    tag "a": its log and status reach the bucket (``read(key)``, ``keys(prefix)``; the launch's
    prefix ``root``) while it waits, then it succeeds with code from the snapshot the instance
    fetched. Its result."""
    prefix = job.launch_info["backend"]["log_prefix"]
    assert wait_for(lambda: "started a" in (read(f"{prefix}/stdout.log") or ""), 30), \
        box.boot_log()
    assert wait_for(lambda: read(f"{prefix}/progress.txt") == "halfway\n", 10)
    assert json.loads(read(f"{prefix}/status.json"))["state"] == "running"
    assert job.status().value == "running"
    box.release(job)
    assert job.wait(timeout=60).value == "succeeded", box.boot_log()
    result = job.result()
    # the function came from the code snapshot fetched from the bucket into the work folder
    assert os.path.realpath(result["module_file"]).startswith(str(box.workdir / ".snapshots"))
    digest = job.launch_info["code_snapshots"][0]["digest"]
    assert f"{root}/snapshots/{digest}.tar.gz" in keys(f"{root}/snapshots/")
    return result


class LoopbackServer:
    """A threading HTTP server on a free loopback port for the cloud stand-ins:
    ``handle(method, path, headers, body)`` returns (status, headers, body bytes)."""

    def __init__(self, handle, tls: tuple[Path, Path] | None = None) -> None:
        """``tls``: (certificate, key) files to serve HTTPS with."""

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                code, headers, data = handle(self.command, self.path, self.headers, body)
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        scheme = "http"
        if tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def fake_terminal(monkeypatch, answers: list[str]) -> list[str]:
    """Make this process look interactive and answer ``input()`` from ``answers``; returns
    the prompts asked, in order."""
    import sys

    asked = []
    monkeypatch.setattr(sys.stdin, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt="": (asked.append(prompt),
                                                             answers.pop(0))[1])
    return asked


def assert_no_secrets(texts: list[str], folders: list[Path], secrets: list[str]) -> None:
    """None of ``secrets`` appears in ``texts`` or in any file under ``folders``."""
    texts = texts + [p.read_bytes().decode("latin-1")
                     for folder in folders for p in folder.rglob("*") if p.is_file()]
    assert len(texts) > 10
    assert not [t for t in texts if any(s in t for s in secrets)]


def copy_to_cluster(job) -> str:
    """Play the user's rsync: copy a batch folder to its cluster path."""
    backend = job.launch_info["backend"]
    shutil.copytree(backend["batch_dir"], backend["cluster_batch_dir"], symlinks=True,
                    dirs_exist_ok=True)
    return backend["cluster_batch_dir"]


def batch_runs_under_way(jobs: list, count: int = 2, steps: int = 3) -> list[Path]:
    """The cluster folders of a batch's runs (jobfns.count_steps), once ``count`` of them have
    done ``steps`` steps there (asserted within two minutes)."""
    log_dirs = [Path(j.launch_info["backend"]["job_log_dir"]) for j in jobs]
    assert wait_for(lambda: sum(len(jobfns.steps_done(d)) >= steps for d in log_dirs) == count,
                    timeout=120)
    return log_dirs


# A launcher that exits once its run is launched: what happens next needs no launching process.
_LAUNCH_AND_EXIT = """
import json, sys
import jobfns
from easylaunch import run_experiment
config, mode, exp_name, variant = (json.loads(a) for a in sys.argv[1:5])
if mode == "gcp":
    import gce_stubs
    gce_stubs.no_access_boundary_lookup()
job = run_experiment(jobfns.count_steps, variant=variant, exp_name=exp_name, mode=mode,
                     config=config, max_restarts=2)
print(job.log_dir)
"""


def pool_record(pool) -> dict:
    """The pool's ``pool.json`` as it is now (its allocation's ``job_id``, its ``scheduler``)."""
    return json.loads(Path(pool.folder, "pool.json").read_text())


def launch_and_exit(cfg: dict, mode: str, exp_name: str, variant: dict):
    """Launch a ``jobfns.count_steps`` run with restarts from a process that then ends; the
    run's Job, reconnected here."""
    from easylaunch import Job

    args = (json.dumps(a) for a in (cfg, mode, exp_name, variant))
    out = subprocess.run(
        [sys.executable, "-c", _LAUNCH_AND_EXIT, *args],
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).parent)), capture_output=True,
        text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return Job.from_run_dir(out.stdout.split()[-1])


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=True).stdout


def shell_answers(argv: list[str], typed: str, expect: str, timeout: float = 30,
                  after=None) -> str:
    """Start ``argv`` in a tmux window, type ``typed`` once the shell is up, and return the
    window's text once ``expect`` shows in it (``after(session)`` first, if given). ``expect``
    must be what only the answer holds, not the typed line (``END$((40+2))`` -> ``END42``)."""
    session = f"el{os.getpid()}{time.monotonic_ns() % 10**6}"
    tmux("new-session", "-d", "-s", session, "-x", "200", "-y", "50",
         shlex.join(argv) + "; echo SHELL-ENDED; sleep 60")
    try:
        assert wait_for(lambda: "a shell where" in tmux("capture-pane", "-p", "-t", session)
                        or "allocation" in tmux("capture-pane", "-p", "-t", session), 30)
        time.sleep(1)
        tmux("send-keys", "-t", session, typed, "Enter")
        assert wait_for(lambda: expect in tmux("capture-pane", "-p", "-t", session),
                        timeout), tmux("capture-pane", "-p", "-t", session)
        shown = tmux("capture-pane", "-p", "-t", session)
        if after is not None:
            after(session)
        return shown
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_settings(path: Path, values: dict) -> Path:
    """``values`` as an easylaunch settings file (Python: ``KEY = value`` lines)."""
    path.write_text("".join(f"{key} = {value!r}\n" for key, value in values.items()))
    return path


def docs_reference():
    """The docs' reference hook (docs/hooks/reference.py) as a module: its pages' makers."""
    path = Path(__file__).resolve().parent.parent / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (its dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module
