"""The ``easylaunch`` command: list, inspect, follow, cancel, resubmit and fetch runs.

One module per group of commands (:mod:`.runs`, :mod:`.actions`, :mod:`.configure`,
:mod:`.views`, :mod:`.dist`), each command a handler and an ``add_<command>`` function that
adds its arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from easylaunch import __version__
from easylaunch.cli import actions, configure, dist, examples, runs, shells, submit, views
from easylaunch.errors import EasyLaunchError
from easylaunch.tracking import interrupts

COMMAND_ADDERS = (submit.add_submit, runs.add_ls, runs.add_status, runs.add_watch, runs.add_logs,
                  actions.add_cancel, actions.add_resubmit, actions.add_forget, actions.add_fetch,
                  configure.add_init, configure.add_config, views.add_preview, views.add_plot,
                  views.add_ui, shells.add_shell, shells.add_interactive, configure.add_doctor,
                  dist.add_dist)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``easylaunch`` command."""
    parser = argparse.ArgumentParser(
        prog="easylaunch", description="Submit commands as runs; list, inspect, follow, "
        "cancel, resubmit and fetch the runs easylaunch launched.",
        epilog="Exit codes: 0 done, 1 an error (a run not found, a refused action), 2 a usage "
        "error, 130 interrupted, 141 the output's reader went away.")
    parser.add_argument("--version", action="version", version=f"easylaunch {__version__}")
    # --config goes before or after the command (its value, if given twice: the later one)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="settings file to read instead of the usual lookup")
    parser.add_argument("--config", help="settings file to read instead of the usual lookup")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, parents: tuple[argparse.ArgumentParser, ...] = (), **kwargs: Any
                ) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common, *parents], description=kwargs.get("help"),
                              epilog=examples.epilog(name),
                              formatter_class=examples.HelpFormatter, **kwargs)

    for add in COMMAND_ADDERS:
        add(command)
    return parser


EXIT_USAGE = 2  # (argparse's own)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as other tools)
EXIT_CLOSED_PIPE = 141  # the reader of the output went away (128 + SIGPIPE, as other tools)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``easylaunch`` command; returns the exit code: 0 done, 1 an error
    (a run not found, a refused action), 2 a usage error, 130 interrupted, 141 the output's
    reader went away (``easylaunch ls | head``)."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if args.config:  # (also for what runs reconnect with: the credentials they left out)
        os.environ["EASYLAUNCH_CONFIG"] = os.path.abspath(args.config)
    try:
        return args.func(args)
    except EasyLaunchError as exc:
        print(f"easylaunch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as exc:  # (a wait's says what goes on and how to cancel it)
        interrupts.note_interrupt()  # (this process's local runs are cancelled at its exit)
        interrupts.say(exc)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # what is still buffered for the closed pipe must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
