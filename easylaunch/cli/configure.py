"""``init``, ``config``, ``doctor``: writing, showing and checking settings."""

from __future__ import annotations

import argparse

from easylaunch.cli.doctor import diagnose
from easylaunch.cli.shared import AddCommand
from easylaunch.settings import DEFAULTS, USER_CONFIG_PATH, load_settings
from easylaunch.settings.starter import where_found, write_template


def init(args: argparse.Namespace) -> int:
    dest = write_template(args.path)
    print(f"wrote {dest} (the keys most users change; the others are named at its end); "
          f"{where_found(dest)}")
    return 0


def config(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    changed = {key for key in settings if settings[key] != DEFAULTS.get(key)}
    print(f"# settings file: {settings.path or 'none found (all defaults)'}; "
          f"* marks the {len(changed)} value(s) that differ from the defaults")
    for key in sorted(changed if args.changed else settings):
        print(f"{'*' if key in changed else ' '} {key} = {settings[key]!r}  "
              f"# from {settings.sources[key]}")
    return 0


def doctor(args: argparse.Namespace) -> int:
    findings = diagnose(args.path or args.config)
    for finding in findings:
        print(f"{finding.level:5}  {finding.text}")
    return 1 if any(f.level == "error" for f in findings) else 0


def add_init(command: AddCommand) -> None:
    """``init``: write a short settings file."""
    parser = command("init", help="write a short settings file (the keys most users change)")
    parser.add_argument("path", nargs="?", default=str(USER_CONFIG_PATH),
                      help=f"where to write it (default: {USER_CONFIG_PATH})")
    parser.set_defaults(func=init)


def add_config(command: AddCommand) -> None:
    """``config``: the effective settings and their sources."""
    parser = command("config", help="print the effective settings and their sources")
    parser.add_argument("--changed", action="store_true",
                        help="only the values that differ from the defaults")
    parser.set_defaults(func=config)


def add_doctor(command: AddCommand) -> None:
    """``doctor``: check a settings file."""
    parser = command("doctor", help="check a settings file (doodad's or ours): what each key "
                     "means, what each mode lacks, which commands are here")
    parser.add_argument("path", nargs="?", help="the settings file (default: the usual lookup)")
    parser.set_defaults(func=doctor)
