"""``dist``: multi-GPU / multi-node helpers for inside a job."""

from __future__ import annotations

import argparse
import os
import shlex

from easylaunch import dist
from easylaunch.cli import examples
from easylaunch.errors import EasyLaunchError

TYPE_CHECKING = False  # (as typing's: the one command every multi-GPU job runs starts lean)
if TYPE_CHECKING:
    from easylaunch.cli.shared import AddCommand


def _dist_command(args: argparse.Namespace) -> list[str]:
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise dist.DistError("give the program to start after --, e.g. -- python train.py")
    return dist.launch_command(command, dist.topology(), args.procs_per_host, args.total,
                               args.cpu_bind, args.depth)


def _dist_info(args: argparse.Namespace) -> int:
    topo = dist.topology()
    print(f"scheduler: {topo.scheduler}\nworkdir: {dist.workdir()}\nhosts: "
          f"{' '.join(topo.hosts)}\nnhosts: {topo.nhosts}\nngpu_per_host: "
          f"{topo.ngpu_per_host}\nngpus: {topo.ngpus}")
    return 0


def _dist_launch_cmd(args: argparse.Namespace) -> int:
    print(shlex.join(_dist_command(args)))
    return 0


def _dist_launch(args: argparse.Namespace) -> int:
    argv = _dist_command(args)
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        raise EasyLaunchError(f"{argv[0]} is not on PATH") from None
    return 127


def add_dist(command: AddCommand) -> None:
    """``dist info``, ``dist launch-cmd``, ``dist launch``."""
    parser = command("dist", help="multi-GPU / multi-node helpers for inside a job")
    commands = parser.add_subparsers(dest="dist_command", required=True, metavar="COMMAND")
    commands.add_parser("info", help="scheduler, hosts and GPUs of this job",
                        epilog=examples.epilog("dist info"),
                        formatter_class=examples.HelpFormatter).set_defaults(func=_dist_info)
    for name, func, text in (("launch-cmd", _dist_launch_cmd, "print the launch command"),
                             ("launch", _dist_launch, "run a program on every GPU of the job")):
        cmd = commands.add_parser(name, help=text, epilog=examples.epilog(f"dist {name}"),
                                  formatter_class=examples.HelpFormatter)
        cmd.add_argument("--procs-per-host", type=int, help="default: GPUs per host (or 1)")
        cmd.add_argument("--total", type=int, help="default: hosts x procs per host")
        cmd.add_argument("--cpu-bind", default="depth", help="CPU binding (default: depth)")
        cmd.add_argument("--depth", type=int, help="cores per process for --cpu-bind=depth")
        cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="-- program and its arguments")
        cmd.set_defaults(func=func)
