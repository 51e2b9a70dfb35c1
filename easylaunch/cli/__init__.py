"""The ``easylaunch`` command: list, inspect, follow, cancel, resubmit and fetch runs.

One module per group of commands (:mod:`.runs`, :mod:`.actions`, :mod:`.configure`,
:mod:`.views`, :mod:`.dist`), each command a handler and an ``add_<command>`` function that
adds its arguments. A command's start imports only its own module (and the layers it uses):
``easylaunch ls`` none of the launch path, ``easylaunch --version`` no command's module.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from easylaunch import __version__
from easylaunch.cli import examples
from easylaunch.errors import EasyLaunchError

TYPE_CHECKING = False  # (as typing's, which type checkers read so; importing typing: 3 ms)
if TYPE_CHECKING:
    from collections.abc import Iterable
    from typing import Any

# every command -> its module in easylaunch.cli, whose add_<command> adds it; in the order
# ``easylaunch --help`` lists them
COMMAND_MODULES = {
    "submit": "submit", "ls": "runs", "status": "runs", "search": "runs", "watch": "runs",
    "logs": "runs",
    "cancel": "actions", "resubmit": "actions", "resume": "actions", "forget": "actions",
    "fetch": "actions",
    "init": "configure", "config": "configure", "preview": "views", "plot": "views",
    "ui": "views", "shell": "shells", "interactive": "shells", "doctor": "configure",
    "pool": "pools", "dist": "dist"}
# (as their modules add them)
COMMAND_ALIASES = {"abort": "cancel", "q": "status", "rm": "forget"}


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``easylaunch`` command, with every command's (or only those
    of ``commands``, names of :data:`COMMAND_MODULES`)."""
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

    for name in COMMAND_MODULES if commands is None else commands:
        module = importlib.import_module(f"easylaunch.cli.{COMMAND_MODULES[name]}")
        getattr(module, f"add_{name}")(command)
    return parser


def _commands_needed(argv: list[str]) -> list[str] | None:
    """The commands whose parsers parsing ``argv`` needs: the one it names (its first word that
    is not ``--config``'s value), none if ``--version`` comes first; all (None) otherwise:
    for ``--help``, an unknown command, an abbreviated option."""
    words = iter(argv)
    for word in words:
        if word == "--config":
            next(words, None)
        elif word == "--version":
            return []
        elif not word.startswith("-"):
            name = COMMAND_ALIASES.get(word, word)
            return [name] if name in COMMAND_MODULES else None
        elif not word.startswith("--config="):
            return None
    return None


EXIT_USAGE = 2  # (argparse's own)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as other tools)
EXIT_CLOSED_PIPE = 141  # the reader of the output went away (128 + SIGPIPE, as other tools)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``easylaunch`` command; returns the exit code: 0 done, 1 an error
    (a run not found, a refused action), 2 a usage error, 130 interrupted, 141 the output's
    reader went away (``easylaunch ls | head``)."""
    words = sys.argv[1:] if argv is None else argv
    parser = build_parser(_commands_needed(words))
    if not words:
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
        from easylaunch.modes import console  # (here: only an interrupted command needs it)

        console.note_interrupt()  # (this process's local runs are cancelled at its exit)
        console.say(exc)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # what is still buffered for the closed pipe must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
