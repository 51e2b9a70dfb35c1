"""``shell`` and ``interactive``: a terminal where a run runs, and an allocation with a shell
on a compute node (see :mod:`easylaunch.modes.base`). Both replace this process with the shell,
so its exit code is theirs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from easylaunch.cli.shared import AddCommand, count, registry_of
from easylaunch.errors import EasyLaunchError
from easylaunch.modes import get_mode
from easylaunch.modes.scheduled.tracking import ScheduledMode
from easylaunch.modes.schedulers import shells
from easylaunch.runs.record import LaunchRequest
from easylaunch.settings import load_settings
from easylaunch.tracking.refresh import job_for

INTERACTIVE_MODES = ("slurm", "pbs")


def _exec(argv: list[str], env: dict[str, str] | None) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(argv[0], argv, os.environ if env is None else env)
    except FileNotFoundError:
        raise EasyLaunchError(f"{argv[0]} is not on PATH here") from None


def shell(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    job = job_for(registry, registry.find(args.id))
    state = job.status()
    if state.value == "queued":
        raise EasyLaunchError(f"run {job.id} has not started yet (queued): there is no "
                              f"machine to open a shell on; try again once it runs "
                              f"(easylaunch watch {job.id})")
    if state.terminal:
        raise EasyLaunchError(f"run {job.id} has ended ({state.value}): nothing runs there "
                              f"any more; its folder is {job.log_dir}")
    argv, env = job.mode.shell(job.record)
    print(f"easylaunch: a shell where run {job.id} runs (exit or Ctrl-D to leave; the run "
          "goes on)", file=sys.stderr)
    return _exec(argv, env)


def add_shell(command: AddCommand) -> None:
    """``shell``: a terminal on a running run's machine."""
    parser = command("shell", help="open an interactive shell on the machine and in the "
                     "folder of a running run, with its environment")
    parser.add_argument("id", help="run id, or a unique start or end of one")
    parser.set_defaults(func=shell)


def interactive(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    given = {"cluster": args.cluster, "time_in_mins": args.time, "n_nodes": args.nodes,
             "n_gpus": args.gpus or None,
             ("queue" if args.mode == "pbs" else "partition"): args.partition,
             **({"pbs_config_name": args.config_name} if args.mode == "pbs" else {})}
    mode = get_mode(args.mode).create(settings, {k: v for k, v in given.items()
                                                 if v is not None})
    assert isinstance(mode, ScheduledMode)  # (slurm's and pbs's modes are)
    request = LaunchRequest(method_call=None, variants=[{}], exp_name="interactive",
                            use_gpu=bool(args.gpus), gpu_id=None,
                            log_root=Path(settings.LOCAL_LOG_DIR),
                            slurm_config_name=args.config_name, script_name="")
    res = mode.resources(request)
    inside = shells(mode.scheduler, "easylaunch interactive")
    argv = mode.transport.terminal_argv(inside.interactive_argv(res, ["bash", "-i"]))
    print(f"easylaunch: asking {mode.transport.where} for an allocation; exit or Ctrl-D ends "
          "it", file=sys.stderr)
    return _exec(argv, None)


def add_interactive(command: AddCommand) -> None:
    """``interactive``: an allocation and a shell on a compute node."""
    parser = command("interactive", help="get an allocation and a shell on a compute node "
                     "(Slurm srun --pty, PBS qsub -I); exit or Ctrl-D ends it")
    parser.add_argument("--mode", choices=INTERACTIVE_MODES, default="slurm")
    parser.add_argument("--cluster", help="a CLUSTERS name or user@host (default: "
                        "DEFAULT_CLUSTER, else this machine)")
    parser.add_argument("--partition", help="partition (PBS: queue)")
    parser.add_argument("--gpus", type=count, default=0, help="GPUs per node")
    parser.add_argument("--time", type=count, help="time limit in minutes")
    parser.add_argument("--nodes", type=count, help="nodes")
    parser.add_argument("--config-name", help="the SLURM_CONFIGS / PBS_CONFIGS entry to start "
                        "from (default: gpu with --gpus, else cpu)")
    parser.set_defaults(func=interactive)
