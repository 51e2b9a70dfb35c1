"""``pool start``, ``pool ls``, ``pool stop``: warm pools (:mod:`easylaunch.modes.local.pools`)."""

from __future__ import annotations

import argparse
import sys
import time

from easylaunch.cli import as_json, examples
from easylaunch.cli.shared import AddCommand, add_json
from easylaunch.modes.local import pools


def _pool_start(args: argparse.Namespace) -> int:
    pool = pools.start_pool(args.name, workers=args.workers, idle=args.idle, config=args.config,
                            preload=[m for m in (args.preload or "").split(",") if m],
                            learn=args.learn, on=args.on, time_limit=args.time,
                            gpus=args.gpus, cluster=args.cluster, runs_left=args.runs_left)
    print(f"pool {pool.name}: {pool.workers} worker{'s' * (pool.workers != 1)}"
          + (f", {', '.join(pool.preload)} preloaded" if pool.preload else "")
          + (", preloading what its runs import" if args.learn else "")
          + f"; it ends after {args.idle} with no run. Launch into it: "
          f"run_sweep(..., pool={pool.name!r}"
          + (f", cluster={args.cluster!r})" if args.cluster else ")"))
    return 0


def _pool_ls(args: argparse.Namespace) -> int:
    found = pools.list_pools(args.config, everything=args.all, cluster=args.cluster)
    if not found:
        print("no pool is running" + ("" if args.all else " (--all: those that ended too)"),
              file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(as_json.document("pools", [as_json.pool_object(p) for p in found]))
        return 0
    if found:
        print("NAME\tWORKERS\tBUSY\tFREE\tQUEUED\tDONE\tUP\tSTATE\tWHERE")
    for p in found:
        up = time.time() - p.started_at
        print(f"{p.name}\t{p.workers}\t{p.busy}\t{p.free}\t{p.queued}\t{p.done}\t"
              f"{up / 60:.0f} min\t"
              + ("running" if p.ended is None else f"ended: {p.ended}") + f"\t{p.where}")
    return 0


def _pool_stop(args: argparse.Namespace) -> int:
    pool = pools.stop_pool(args.name, args.config, cluster=args.cluster)
    print(f"pool {pool.name} stopped; {pool.done} runs had ended")
    return 0


def add_pool(command: AddCommand) -> None:
    parser = command("pool", help="warm pools: workers held here or in a Slurm or PBS "
                     "allocation that take sweeps in milliseconds")
    commands = parser.add_subparsers(dest="pool_command", required=True, metavar="COMMAND")

    def sub(name: str, text: str) -> argparse.ArgumentParser:
        parser = commands.add_parser(name, help=text, epilog=examples.epilog(f"pool {name}"),
                                     formatter_class=examples.HelpFormatter)
        parser.add_argument("--config", default=argparse.SUPPRESS,
                            help="settings file to read instead of the usual lookup")
        parser.add_argument("--cluster", help="the pools on this cluster (a CLUSTERS name or "
                            "an ssh destination), over SSH")
        return parser

    start = sub("start", "start a pool")
    start.add_argument("name", help="the name launches give it: pool=NAME")
    start.add_argument("--workers", type=int, help="runs at once (default: one per CPU of "
                       "this machine; 1 on a scheduler)")
    start.add_argument("--preload", help="comma-separated modules each worker imports once "
                       "(e.g. torch,numpy)")
    start.add_argument("--learn", action="store_true", help="each worker also imports the "
                       "installed libraries earlier runs imported, before its next run")
    start.add_argument("--idle", default="20m", help="end after this long with no run: "
                       "20m, 8h, 90s (default: 20m)")
    start.add_argument("--on", choices=("local", "slurm", "pbs", "allocation"),
                       default="local", help="where its workers run: this machine, a Slurm "
                       "or PBS allocation of its own, or the Slurm allocation you hold "
                       "(inside salloc)")
    start.add_argument("--time", default="1h", help="(slurm, pbs) the allocation's time "
                       "limit, as --idle (default: 1h)")
    start.add_argument("--gpus", type=int, default=0, help="GPUs, one a worker: the "
                       "allocation's, or this machine's (LOCAL_GPU_IDS)")
    start.add_argument("--runs-left", choices=("pool", "jobs"), default="pool",
                       help="(slurm, pbs) where runs left at the time limit go on: a new "
                       "allocation of the pool, or each in a job of its own (default: pool)")
    start.set_defaults(func=_pool_start)
    listing = sub("ls", "the pools that run: workers busy and free, runs queued, "
                  "where and for how long")
    listing.add_argument("--all", action="store_true", help="those that ended too")
    add_json(listing)
    listing.set_defaults(func=_pool_ls)
    stop = sub("stop", "stop a pool; its runs are cancelled")
    stop.add_argument("name", help="the running pool to stop")
    stop.set_defaults(func=_pool_stop)
