"""A command as a run's payload: ``Command(argv)`` is called like a launched function,
``fn(doodad_config, variant)``, and runs the command to its end.

The command runs in the snapshot of the first code folder (``EASYLAUNCH_CODE_DIR``); where the
run has no snapshot, in the folder it was launched from where that folder is there, else in the
runner's own working directory; with the run's environment and
these added: ``EASYLAUNCH_RUN_ID``, ``EASYLAUNCH_RUN_DIR`` (its run folder),
``EASYLAUNCH_ATTEMPT`` (1, then 2... after a restart), ``EASYLAUNCH_VARIANT`` (the variant as
JSON), ``EASYLAUNCH_CHECKPOINT_DIR`` and ``EASYLAUNCH_STOP_SIGNAL``. When the run is stopped
(its time limit near or reached, a preemption, a cancel) the command receives that signal
(SIGUSR1) and may save a checkpoint before it exits (with any code); a run with restarts
left is then requeued. In a run of several processes, each runs the command with ``RANK``,
``LOCAL_RANK`` and ``WORLD_SIZE`` set. Its exit code decides the run: 0 succeeded, anything
else failed, with the code and the last lines of its stderr in the run's record.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
from typing import Any, Mapping, Sequence

from easylaunch_job.environment import ENV_CHECKPOINT_DIR, shell_exit_code
from easylaunch_job.records import CHECKPOINT_DIR

ENV_CODE_DIR = "EASYLAUNCH_CODE_DIR"  # set by the runner: the folder the command runs in
ENV_STOP_SIGNAL = "EASYLAUNCH_STOP_SIGNAL"
STOP_SIGNAL = "USR1"
STDERR_TAIL_LINES = 20


class CommandFailed(Exception):
    """The command exited with a code other than 0 (or was not found)."""

    def __init__(self, argv: Sequence[str], exit_code: int, stderr_tail: str) -> None:
        super().__init__(argv, exit_code, stderr_tail)
        self.argv = list(argv)
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail

    def __str__(self) -> str:
        head = f"the command exited with code {self.exit_code}: {shlex.join(self.argv)}"
        return f"{head}\n--- last lines of its stderr ---\n{self.stderr_tail}" \
            if self.stderr_tail else head


def run_variables(run_id: str, run_dir: str) -> dict[str, str]:
    """The variables that tell a command (or a shell opened where it runs) about its run."""
    return {"EASYLAUNCH_RUN_ID": run_id, "EASYLAUNCH_RUN_DIR": run_dir,
            ENV_CHECKPOINT_DIR: os.path.join(run_dir, CHECKPOINT_DIR),
            ENV_STOP_SIGNAL: STOP_SIGNAL}


def argv_for(template: Sequence[str], variant: Mapping | None, fill: bool) -> list[str]:
    """The command of one run: ``template`` with each ``{name}`` replaced by the variant's
    value when ``fill`` (``{{`` and ``}}`` are literal braces), else as it is. Raises KeyError
    for a name the variant lacks and ValueError for a malformed field."""
    if not fill:
        return list(template)
    values = variant or {}
    return [part.format_map(values) for part in template]


def _tee_stderr(stream: Any, tail: collections.deque) -> None:
    """Copy the command's stderr to this process's, keeping its last lines."""
    out = sys.stderr.buffer if hasattr(sys.stderr, "buffer") else None
    for line in iter(stream.readline, b""):
        tail.append(line)
        if out is not None:
            out.write(line)
            out.flush()
        else:
            sys.stderr.write(line.decode(errors="replace"))
    stream.close()


class Command:
    """A command line that a run runs (picklable: it travels as the run's function): the
    ``template`` (filled from the variant when ``fill``), or with ``from_variant``, the
    variant's value of that key split into shell words (a sweep of different commands)."""

    def __init__(self, template: Sequence[str], fill: bool = False,
                 from_variant: str | None = None) -> None:
        self.template = list(template)
        self.fill = fill
        self.from_variant = from_variant

    def __repr__(self) -> str:
        return f"Command({shlex.join(self.template)})"

    def argv(self, variant: Any) -> list[str]:
        """This run's command."""
        if self.from_variant is not None:
            return shlex.split(variant[self.from_variant])
        return argv_for(self.template, variant, self.fill)

    def environment(self, config: Any, variant: Any) -> dict[str, str]:
        """What the command learns about its run, added to the runner's environment."""
        extra = config.extra_launch_info
        ranks = {"RANK": extra.get("rank", 0), "LOCAL_RANK": extra.get("local_rank", 0),
                 "WORLD_SIZE": extra.get("world_size", 1)}
        return {**{k: str(v) for k, v in ranks.items() if k not in os.environ},
                **run_variables(str(extra.get("run_id", "")), config.base_log_dir),
                "EASYLAUNCH_ATTEMPT": str(extra.get("attempt", 1)),
                "EASYLAUNCH_VARIANT": json.dumps(variant, default=str)}

    def __call__(self, config: Any, variant: Any) -> int:
        argv = self.argv(variant)
        cwd = os.environ.get(ENV_CODE_DIR) or os.getcwd()
        env = dict(os.environ, **self.environment(config, variant))
        tail: collections.deque = collections.deque(maxlen=STDERR_TAIL_LINES)
        try:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE)
        except OSError as exc:
            raise CommandFailed(argv, 127, f"cannot start {argv[0]!r} in {cwd}: "
                                           f"{exc.strerror or exc}") from None
        reader = threading.Thread(target=_tee_stderr, args=(proc.stderr, tail), daemon=True)
        reader.start()
        try:
            code = proc.wait()
        except BaseException:  # a stop (or Ctrl-C): the command hears of it and ends first,
            _pass_on_stop(proc)  # then the stop is recorded (and the run requeued) as for a
            reader.join()  # function, whatever the command's exit code
            raise
        reader.join()
        if code != 0:
            text = b"".join(tail).decode(errors="replace").rstrip("\n")
            raise CommandFailed(argv, shell_exit_code(code), text)
        return 0


def _pass_on_stop(proc: subprocess.Popen) -> None:
    """Send the stop signal to the command and wait for it to end (the scheduler's kill,
    should it not)."""
    if proc.poll() is None:
        with contextlib.suppress(OSError):
            proc.send_signal(signal.Signals["SIG" + STOP_SIGNAL])
    try:
        proc.wait()
    except BaseException:  # noqa: BLE001 - a second stop while it saves: end it now
        proc.kill()
        proc.wait()
