"""The far side over SSH: the system's OpenSSH client, one multiplexed connection per host.

Logging in is left to OpenSSH and the user's own configuration (``~/.ssh/config`` names, keys,
agent, ProxyJump); easylaunch adds only ``BatchMode`` (never a password prompt) and a
ControlMaster, so a launch or a later command opens one connection however many operations
and copies it makes. Far-side operations are answered by one Python per host and process,
started over that connection from stdin: nothing is installed there.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import json
import os
import select
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.modes.hosts.transport import HostError, Transport
from easylaunch.runs.jobpack import job_archive

if TYPE_CHECKING:
    from easylaunch_job.host_ops import Answer, Op

CONTROL_PERSIST_SECONDS = 60  # a later command within a minute reuses the connection
CONNECT_TIMEOUT_SECONDS = 15
ANSWER_TIMEOUT_SECONDS = 300  # a far side that says nothing for this long is given up on
ANSWER_MARK = "--- easylaunch far-side answer ---"

# The far side's loop: its first stdin line is this program (JSON). It holds the job side's
# zipapp (base64), imports easylaunch_job from it in memory (nothing is written there), then
# answers one line of ops per line with easylaunch_job.host_ops.
_SERVE = """\
import base64, importlib.abc, importlib.util, io, json, sys, zipfile
with zipfile.ZipFile(io.BytesIO(base64.b64decode({archive!r}))) as _zip:
    _files = {{name: _zip.read(name) for name in _zip.namelist()}}
class _FromMemory(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        base = name.replace(".", "/")
        for key, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if key in _files:
                return importlib.util.spec_from_loader(name, self, origin=key,
                                                       is_package=package)
        return None
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        origin = module.__spec__.origin
        exec(compile(_files[origin], origin, "exec"), module.__dict__)
sys.meta_path.insert(0, _FromMemory())
from easylaunch_job.host_ops import answer
for _line in sys.stdin:
    sys.stdout.write({mark!r} + json.dumps(answer(json.loads(_line))) + "\\n")
    sys.stdout.flush()
"""
_START = "import json, sys; exec(json.loads(sys.stdin.readline()))"


class _FarSide:
    """One far-side Python per host and process, kept for the process's life: one batch of ops
    is one line each way over the multiplexed connection (no new login, no new
    interpreter)."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None

    def ask(self, ops: Sequence[Op]) -> tuple[str | None, int | None, str]:
        """(answer line or None, exit code, stderr) for one request."""
        with self.lock:
            if self.proc is not None and self.proc.poll() is not None:
                self._discard()  # ended since the last request (a dropped connection)
            if self.proc is None:
                self.errors = tempfile.TemporaryFile()  # noqa: SIM115 - lives with proc
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=self.errors,
                                             text=True)
                program = _SERVE.format(archive=base64.b64encode(job_archive()).decode(),
                                        mark=ANSWER_MARK)
                self._send(json.dumps(program))
            self._send(json.dumps(ops))
            answers = self.proc.stdout
            assert answers is not None  # (opened with PIPE)
            ready, _, _ = select.select([answers], [], [], ANSWER_TIMEOUT_SECONDS)
            line = answers.readline() if ready else ""
            if line.startswith(ANSWER_MARK):
                return line[len(ANSWER_MARK):], None, ""
            self.proc.kill()
            code = self.proc.wait()
            self.errors.seek(0)
            stderr = self.errors.read().decode(errors="replace")
            self._discard()
            return None, code, stderr

    def close(self) -> None:
        """End the far side: its stdin closes and it exits (killed if it does not)."""
        with self.lock:
            if self.proc is not None:
                assert self.proc.stdin is not None  # (opened with PIPE)
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                self._discard()

    def _discard(self) -> None:
        # (called with a far side started, its stdin and stdout pipes)
        assert self.proc is not None and self.proc.stdin is not None and \
            self.proc.stdout is not None
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.errors):
            with contextlib.suppress(OSError):
                stream.close()
        self.proc = None

    def _send(self, line: str) -> None:
        assert self.proc is not None and self.proc.stdin is not None  # (started, with pipes)
        with contextlib.suppress(BrokenPipeError):  # it died: its exit code says why
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()


_far_sides: dict[tuple, _FarSide] = {}


@atexit.register
def _close_far_sides() -> None:
    """Let each far side end with this process (its stdin closes; it exits)."""
    for far in _far_sides.values():
        far.close()


def control_dir() -> Path:
    """A folder only this user can use, for the ControlMaster sockets (short enough a path for
    a Unix socket)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    path = Path(base) / f"easylaunch-ssh-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    info = path.stat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise HostError(f"{path} (for ssh connection sockets) is not private to you; remove it "
                        "and launch again")
    return path


def remote_word(path: str) -> str:
    """``path`` as one word of a remote shell command, ``~/`` still expanded there."""
    if path.startswith("~/"):
        return "~/" + shlex.quote(path[2:])
    return shlex.quote(path)


class SshTransport(Transport):
    """A machine reached with ``ssh DESTINATION`` (an alias of ~/.ssh/config or user@host)."""

    def __init__(self, name: str, destination: str, port: int | None, python: str,
                 log_dir: str, ssh_config: str | None = None,
                 identity_file: str | None = None) -> None:
        self.name, self.destination, self.port, self.log_dir = name, destination, port, log_dir
        self.python, self.ssh_config, self.identity_file = python, ssh_config, identity_file
        self.where = f"cluster {name!r} ({destination}{f':{port}' if port else ''})"

    def ssh_options(self) -> list[str]:
        """The options of every ssh (and rsync's ssh) call to this host."""
        options = ["-F", self.ssh_config] if self.ssh_config else []
        if self.port:
            options += ["-p", str(self.port)]
        if self.identity_file:
            options += ["-i", os.path.expanduser(self.identity_file)]
        for option in ("BatchMode=yes", "ControlMaster=auto",
                       f"ControlPath={control_dir()}/%C",
                       f"ControlPersist={CONTROL_PERSIST_SECONDS}",
                       f"ConnectTimeout={CONNECT_TIMEOUT_SECONDS}",
                       "ServerAliveInterval=15", "ServerAliveCountMax=3"):
            options += ["-o", option]
        return options

    @functools.cached_property
    def far_side(self) -> _FarSide:
        """This process's far-side Python on this host (shared by every transport there)."""
        argv = ["ssh", *self.ssh_options(), "--", self.destination,
                f"{remote_word(self.python)} -c {shlex.quote(_START)}"]
        return _far_sides.setdefault(tuple(argv), _FarSide(argv))

    def run_ops(self, ops: Sequence[Op]) -> list[Answer]:
        answer, code, stderr = self.far_side.ask(ops)
        if answer is not None:
            return json.loads(answer)
        if code == 255:
            raise self.login_error(stderr)
        if code == 127 or "No such file" in stderr:
            raise HostError(f"there is no Python {self.python!r} on {self.where}: set "
                            f"'python' in its CLUSTERS entry to the cluster's python3")
        raise HostError(f"the far side on {self.where} ended with {self.python} (exit "
                        f"{code}): {stderr.strip()[-800:]}")

    def terminal_argv(self, argv: list[str]) -> list[str]:
        return ["ssh", "-t", *self.ssh_options(), "--", self.destination, shlex.join(argv)]

    def untar_argv(self, folder: str) -> list[str] | None:
        word = remote_word(folder)
        return ["ssh", *self.ssh_options(), "--", self.destination,
                f"mkdir -p {word} && tar -xzf - -C {word}"]

    def rsync_argv(self) -> list[str]:
        # --compress: code and pickles shrink well; rsync leaves compressed formats as they are
        return ["rsync", "--compress", "--rsh", shlex.join(["ssh", *self.ssh_options()])]

    def remote(self, path: str) -> str:
        return f"{self.destination}:{path}"

    def copy_error(self, out: subprocess.CompletedProcess, what: str) -> HostError:
        if out.returncode in (10, 12, 30, 35, 255) or "connection" in out.stderr.lower() \
                or "broken pipe" in out.stderr.lower():
            if "Permission denied" in out.stderr or "Could not resolve" in out.stderr:
                return self.login_error(out.stderr)
            return HostError(f"{what} was cut off (rsync exit {out.returncode}: "
                             f"{out.stderr.strip()[-300:]}); nothing was submitted. Launch "
                             "again: the copy resumes where it stopped")
        if "No space left" in out.stderr:
            return HostError(f"{what} failed: the disk there is full "
                             f"({out.stderr.strip()[-300:]}); free space or choose another "
                             "log_dir; nothing was submitted")
        return super().copy_error(out, what)

    def login_error(self, stderr: str) -> HostError:
        """What went wrong logging in (ssh's exit 255), and what to do about it."""
        text = stderr.strip()
        if "Could not resolve hostname" in text:
            fix = (f"the host name {self.destination!r} is unknown: check the spelling, or "
                   "add a Host entry for it to ~/.ssh/config")
        elif "Connection refused" in text:
            fix = ("nothing accepts ssh connections there (refused): check the port and that "
                   "sshd runs")
        elif "Host key verification failed" in text or "No ED25519 host key" in text:
            fix = (f"its host key is not known here: run `ssh {self.destination}` once to "
                   "check and accept it (easylaunch never accepts host keys by itself)")
        elif "Permission denied" in text:
            fix = (f"authentication failed; keys tried: {', '.join(self.identity_files())} "
                   "(plus those of your ssh agent, if one runs). easylaunch never asks for a "
                   "password: add your key to the cluster's ~/.ssh/authorized_keys, or set "
                   "IdentityFile for the host in ~/.ssh/config")
        elif "timed out" in text:
            fix = "the connection timed out: check the host name, VPN or network"
        else:
            fix = "the connection failed or was cut off"
        return HostError(f"cannot reach {self.where}: {fix}. ssh said: {text[-400:]}")

    def identity_files(self) -> list[str]:
        """The key files OpenSSH tries for this host, from ``ssh -G``."""
        out = subprocess.run(["ssh", "-G", *self.ssh_options(), self.destination],
                             capture_output=True, text=True)
        keys = [line.split(None, 1)[1] for line in out.stdout.splitlines()
                if line.startswith("identityfile ")]
        home = os.path.expanduser("~")
        return [k.replace(home, "~", 1) for k in keys if os.path.exists(os.path.expanduser(
            k))] or ["none of " + ", ".join(keys) + " exist"]
