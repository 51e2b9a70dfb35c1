"""``submit``: launch a command (or a grid of commands) as runs, from a shell.

``easylaunch submit [--mode M] [--exp NAME] [resources] -- python train.py --lr 3e-4``. The
command after ``--`` reaches the run word for word (no shell reads it here or there); with
``--grid lr=1e-3,3e-4`` each ``{lr}`` in it is filled, one run per combination. The run ids
are printed one per line (``id=$(easylaunch submit ...)``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from easylaunch.api.commands import run_command, run_commands
from easylaunch.cli.runs import follow_logs
from easylaunch.cli.shared import AddCommand, count
from easylaunch.errors import EasyLaunchError
from easylaunch.tracking.progress import wait_all
from easylaunch.tracking.rows import reason_of
from easylaunch_job.environment import shell_exit_code

if TYPE_CHECKING:
    from easylaunch.runs.preview import Preview
    from easylaunch.tracking.jobs import Job

# CLI flag -> launch keyword, for the resources most launches name
RESOURCE_FLAGS = {"time": "time_in_mins", "partition": "partition", "nodes": "n_nodes",
                  "cluster": "cluster", "max_parallel": "max_parallel"}


def _value(text: str) -> Any:
    """A value given on the command line: a number, true/false, null or JSON, else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise EasyLaunchError(f"{flag} {item!r}: write KEY=VALUE")
        pairs.append((key, value))
    return pairs


def grid_variants(items: list[str]) -> list[dict] | None:
    """The variants of ``--grid KEY=V1,V2 ...``: every combination (None without --grid)."""
    if not items:
        return None
    axes = [(key, [_value(v) for v in values.split(",")])
            for key, values in _pairs(items, "--grid")]
    return [dict(zip([k for k, _ in axes], combo, strict=True))
            for combo in itertools.product(*(values for _, values in axes))]


def launch_keywords(args: argparse.Namespace) -> dict[str, Any]:
    """The launch keywords the flags name (only those given)."""
    keywords: dict[str, Any] = {key: _value(value) for key, value in _pairs(args.option, "-o")}
    keywords.update({keyword: getattr(args, flag) for flag, keyword in RESOURCE_FLAGS.items()
                     if getattr(args, flag) is not None})
    if args.gpu:
        keywords["use_gpu"] = True
    if args.n is not None or args.multi_process:
        keywords.update(n_gpus=args.n, multi_process=args.multi_process)
    if args.max_restarts is not None:
        keywords["max_restarts"] = args.max_restarts
    if args.mode == "local" and not args.wait:
        keywords["detach"] = True  # (this command ends at once; its runs go on)
    if args.config:
        keywords["config"] = args.config
    return keywords


def _submit(args: argparse.Namespace) -> int:
    if not args.command:
        args.usage_error("no command: give it after --, e.g. easylaunch submit -- python "
                         "train.py --lr 3e-4")
    if args.command[0] != "--":
        args.usage_error(f"put -- before the command (easylaunch submit [options] -- "
                         f"{shlex.join(args.command)}), so its own options stay its own")
    argv = args.command[1:]
    if not argv:
        args.usage_error("no command after --: give the program to run and its arguments")
    keywords = launch_keywords(args)
    variants = grid_variants(args.grid)
    jobs: Sequence[Job | Preview] | Preview  # (a Preview: a dry run, -o dry_run=true)
    if variants is None:
        jobs = [run_command(argv, args.exp, args.mode, **keywords)]
    else:
        jobs = run_commands(argv, variants, args.exp, args.mode, **keywords)
    for job in jobs:
        print(job.id)
    sys.stdout.flush()
    if not args.wait:
        return 0
    runs = [job for job in jobs if hasattr(job, "stdout_path")]  # (a dry run's are previews)
    if len(runs) < len(jobs):
        print("easylaunch: a dry run starts nothing, so --wait has nothing to wait for",
              file=sys.stderr)
        return 0
    return _wait(cast("list[Job]", runs))


def _wait(jobs: list[Job]) -> int:
    """Wait for the runs, one run's output streamed as ``logs -f`` streams it (stdout here,
    stderr to stderr); then each run's state line. The exit code: the command's (several
    runs: the first that did not succeed's)."""
    if len(jobs) == 1:
        logs = [(jobs[0].stdout_path, sys.stdout), (jobs[0].stderr_path, sys.stderr)]
        for (path, out), end in zip(logs, follow_logs(jobs[0], logs), strict=True):
            if end and _last_byte(path, end) != b"\n":  # (the state line goes on a line of its own)
                print(file=out)
    else:
        wait_all(jobs)
    codes = []
    for job in jobs:
        info = job.info()
        print(f"easylaunch: {end_line(job.id, info)}", file=sys.stderr)
        codes.append(shell_code(info))
    return next((code for code in codes if code), 0)


def _last_byte(path: Path, size: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(size - 1)
        return f.read(1)


def end_line(run_id: str, info: dict) -> str:
    """``run abc succeeded``, ``run abc failed (1 restart): exited with code 3``."""
    restarts = len(info.get("restarts") or [])
    return (f"run {run_id} {info.get('state')}"
            + (f" ({restarts} restart{'s' * (restarts > 1)})" if restarts else "")
            + (f": {reason}" if (reason := reason_of(info)) else ""))


def shell_code(info: dict) -> int:
    """A command run's exit code as a shell's (killed by a signal: 128 + its number); 0 only
    for a run that succeeded, 1 for a run that ended otherwise without one."""
    code = info.get("exit_code")
    if info.get("state") == "succeeded":
        return 0
    if isinstance(code, int) and not isinstance(code, bool) and code:
        return shell_exit_code(code)
    return 1


def add_submit(command: AddCommand) -> None:
    """``submit``: a command as a run."""
    parser = command("submit", help="launch a command as a run (a grid of commands with "
                     "--grid): easylaunch submit [options] -- CMD ARGS...")
    parser.add_argument("--mode", default="local", help="where it runs (default: local)")
    parser.add_argument("--exp", default="default", help="the experiment name")
    parser.add_argument("--cluster", help="a CLUSTERS name or user@host (slurm, pbs, ssh...)")
    parser.add_argument("--gpu", action="store_true", help="the run uses GPUs")
    parser.add_argument("-n", type=count, help="GPUs per node with --gpu; with "
                        "--multi-process, that many processes per node")
    parser.add_argument("--multi-process", action="store_true",
                        help="one process per GPU (per -n) instead of one per node")
    parser.add_argument("--nodes", type=count, help="nodes per run")
    parser.add_argument("--time", type=count, help="time limit in minutes")
    parser.add_argument("--partition", help="Slurm partition")
    parser.add_argument("--max-parallel", type=count, help="runs at once (local, ssh)")
    parser.add_argument("--max-restarts", type=count,
                        help="restarts after a time limit or preemption")
    parser.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                        help="one run per combination; {KEY} in the command is filled")
    parser.add_argument("-o", "--option", action="append", default=[], metavar="KEY=VALUE",
                        help="another launch keyword (a mode option or setting)")
    parser.add_argument("--wait", action="store_true",
                        help="wait for the runs to end (one run: its output streamed), say "
                        "how each ended, and exit with the command's exit code (several "
                        "runs: 0 if all succeeded, else the first failed run's)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the command and its arguments")
    parser.set_defaults(func=_submit, usage_error=parser.error)
