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
import sys
from typing import Any

from easylaunch.cli.shared import AddCommand, count
from easylaunch.errors import EasyLaunchError

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
    from easylaunch import run_command, run_commands, wait_all

    if not args.command:
        raise EasyLaunchError("no command: give it after --, e.g. easylaunch submit -- python "
                              "train.py --lr 3e-4")
    if args.command[0] != "--":
        raise EasyLaunchError(f"put -- before the command (easylaunch submit [options] -- "
                              f"{' '.join(args.command)}), so its own options stay its own")
    argv = args.command[1:]
    if not argv:
        raise EasyLaunchError("no command after --: give the program to run and its arguments")
    keywords = launch_keywords(args)
    variants = grid_variants(args.grid)
    if variants is None:
        jobs = [run_command(argv, args.exp, args.mode, **keywords)]
    else:
        jobs = run_commands(argv, variants, args.exp, args.mode, **keywords)
    for job in jobs:
        print(job.id)
    if not args.wait:
        return 0
    sys.stdout.flush()
    wait_all(jobs)
    return 0 if all(job.status().value == "succeeded" for job in jobs) else 1


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
                        help="wait for the runs to end; exit 0 only if all succeeded")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-- then the command and its arguments")
    parser.set_defaults(func=_submit)
