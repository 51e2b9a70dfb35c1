"""``preview``, ``plot``, ``ui``: a launch script's dry runs, learning curves, the dashboard."""

from __future__ import annotations

import argparse
import os
import sys

from easylaunch.cli.shared import AddCommand, count
from easylaunch.errors import EasyLaunchError
from easylaunch.runs import preview as dry_runs
from easylaunch.settings import ENV_CONFIG


def plot(args: argparse.Namespace) -> int:
    from easylaunch.results.plot import plot_command  # (late: the results extra's modules)

    return plot_command(args)


def preview(args: argparse.Namespace) -> int:
    """Run a launch script with every launch a dry run (``easylaunch preview``)."""
    import runpy

    if not os.path.isfile(args.script):
        raise EasyLaunchError(f"{args.script}: no such script")
    os.environ[dry_runs.ENV_DRY_RUN] = "1"
    if args.config:
        os.environ[ENV_CONFIG] = args.config  # the script's launches read it too
    sys.argv = [args.script, *args.args]
    # its own folder first, as `python script.py` has it: modules beside it import
    sys.path.insert(0, os.path.dirname(os.path.realpath(args.script)))
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    except dry_runs.DryRunStop as exc:  # job.wait(), job.result() on a dry run's runs
        print(f"easylaunch preview: the script stopped after {dry_runs.shown()} dry run(s), "
              f"where it asks its runs for their ends or results ({exc})", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - the script's own failure: said, not a success
        if not dry_runs.shown():
            raise
        print(f"easylaunch preview: the script failed after {dry_runs.shown()} dry run(s): "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if not dry_runs.shown():
        print(f"easylaunch preview: {args.script} launched nothing", file=sys.stderr)
        return 1
    return 0


def ui(args: argparse.Namespace) -> int:
    from easylaunch.dashboard.server import serve_command  # (late: the ui extra's modules)

    return serve_command(args)


def add_preview(command: AddCommand) -> None:
    """``preview``: run a launch script with every launch a dry run."""
    parser = command("preview", help="run a launch script with every launch a dry run: "
                      "print the scripts, commands and resources it would submit, and "
                      "submit, register and keep nothing")
    parser.add_argument("script", help="the launch script (python file)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    parser.set_defaults(func=preview)


def add_plot(command: AddCommand) -> None:
    """``plot``: learning curves of a sweep's runs as a PNG."""
    parser = command("plot", help="learning curves of a sweep's runs as a PNG, grouped by a "
                   "variant key (mean and spread across the rest, e.g. seeds); needs the "
                   "results extra")
    parser.add_argument("selection", nargs="+", metavar="EXP|SWEEP|ID",
                      help="an experiment name (or part of one), a sweep id, or run ids")
    parser.add_argument("--metric", required=True, help="the metric to plot (e.g. loss)")
    parser.add_argument("--by", metavar="KEY", help="the variant key that groups the curves "
                      "(nested: a.b)")
    parser.add_argument("--x", default="step", choices=["step", "time"],
                      help="the x axis: step (default) or time (seconds since each run's "
                      "first value)")
    parser.add_argument("-o", "--out", help="the PNG to write (default: <metric>-by-<key>.png "
                      "here)")
    parser.add_argument("--include-failed", action="store_true",
                      help="count runs that failed, timed out or were cancelled in the means "
                      "and bands (by default they are drawn apart, dashed)")
    parser.add_argument("--no-show", action="store_true",
                      help="only write the PNG (by default it is also shown where a display "
                      "exists)")
    parser.set_defaults(func=plot)


def add_ui(command: AddCommand) -> None:
    """``ui``: a web dashboard of the runs."""
    parser = command("ui", help="a web dashboard of the runs, on 127.0.0.1; prints its URL, "
                 "whose token opens it; needs the ui extra")
    parser.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=count, default=8765, help="the port (default 8765; 0: any "
                    "free one)")
    parser.add_argument("--allow-remote", action="store_true", help="allow a --host other than "
                    "loopback: whoever reaches it and has the URL (its token) can see and act "
                    "on your runs, unencrypted")
    parser.add_argument("--open", action="store_true", help="open it in a web browser")
    parser.add_argument("--new-token", action="store_true", help="replace the kept token (open "
                    "pages and printed URLs stop working); it is kept, private to you, beside "
                    "the registry, so a restart keeps open pages working")
    parser.set_defaults(func=ui)
