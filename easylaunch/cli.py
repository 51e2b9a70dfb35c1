"""The ``easylaunch`` command."""

from __future__ import annotations

import argparse
import sys

from easylaunch import __version__
from easylaunch.errors import EasyLaunchError
from easylaunch.settings import USER_CONFIG_PATH, load_settings, write_template


def _init(args: argparse.Namespace) -> int:
    dest = write_template(args.path)
    print(f"wrote {dest}; edit it, then launch (easylaunch reads it from there)")
    return 0


def _config(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    print(f"# settings file: {settings.path or 'none found (all defaults)'}")
    for key in sorted(settings):
        print(f"{key} = {settings[key]!r}  # from {settings.sources[key]}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``easylaunch`` command."""
    parser = argparse.ArgumentParser(prog="easylaunch", description=__doc__)
    parser.add_argument("--version", action="version", version=f"easylaunch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    init = sub.add_parser("init", help="write a private copy of the settings template")
    init.add_argument("path", nargs="?", default=str(USER_CONFIG_PATH),
                      help=f"where to write it (default: {USER_CONFIG_PATH})")
    init.set_defaults(func=_init)
    config = sub.add_parser("config", help="print the effective settings and their sources")
    config.add_argument("--config", help="settings file to read instead of the usual lookup")
    config.set_defaults(func=_config)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``easylaunch`` command; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EasyLaunchError as exc:
        print(f"easylaunch: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
