"""What the command's modules share: the registry a command reads, argument types, and how a
command is added to the parser."""

from __future__ import annotations

import argparse
import collections
from collections.abc import Callable
from pathlib import Path

from easylaunch.errors import EasyLaunchError
from easylaunch.settings import load_settings
from easylaunch.tracking import listing
from easylaunch.tracking.registry import Registry, open_registry

# Adds one subcommand: ``command(name, parents=(), help=..., aliases=...)``.
AddCommand = Callable[..., argparse.ArgumentParser]


def registry_of(args: argparse.Namespace) -> Registry:
    """The registry of the settings ``--config`` (or the usual lookup) names."""
    return open_registry(load_settings(args.config).REGISTRY_PATH)


def count(text: str) -> int:
    """A command-line count: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return value


def parse_since(text: str) -> float:
    """The ``--since`` argument: :func:`easylaunch.tracking.listing.parse_since`, its error said as
    argparse says one."""
    try:
        return listing.parse_since(text)
    except EasyLaunchError as exc:
        raise argparse.ArgumentTypeError(f"--since {exc}") from None


def tail(path: Path, lines: int | None) -> str:
    """The last ``lines`` lines of a file (all: None; none if it is missing)."""
    try:
        with open(path, errors="replace") as f:
            if lines is None:
                return f.read()
            return "".join(collections.deque(f, maxlen=lines))
    except FileNotFoundError:
        return ""


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json``: one JSON document on stdout instead of the table."""
    parser.add_argument("--json", action="store_true", help="print one JSON document instead "
                        "(schema: the JSON output reference page); notes still go to stderr")
