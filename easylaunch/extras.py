"""How to install one of easylaunch's extras, said the way that works where it is installed
from: a source checkout (``pip install -e '<checkout>[ui]'``) or a package index."""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path
from types import ModuleType

from easylaunch.errors import LaunchError

CHECKOUT = Path(__file__).resolve().parent.parent  # (a source checkout holds pyproject.toml)


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` into this Python."""
    python = shlex.quote(sys.executable)
    if (CHECKOUT / "pyproject.toml").is_file():
        return f"{python} -m pip install -e {shlex.quote(f'{CHECKOUT}[{extra}]')}"
    return f"{python} -m pip install 'easylaunch[{extra}]'"


def needed(module: str, what: str, extra: str, named: str | None = None) -> ModuleType:
    """``module`` imported; where it is not installed, a LaunchError that says ``what`` needs
    it (``named``: as people know it) and how to install ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LaunchError(f"{what} needs {named or module}: {install_hint(extra)}") from None
