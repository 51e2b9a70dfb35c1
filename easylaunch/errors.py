"""Errors easylaunch raises (every message names the problem and the fix), the one-line notices it
prints, and the error for an extra that is not installed, saying how to install it the way that
works where easylaunch is installed from: a source checkout or a package index."""

from __future__ import annotations

import importlib
import importlib.util
import shlex
import sys
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType


def did_you_mean(name: object, names: Iterable[str], cutoff: float = 0.6) -> str:
    """``; did you mean 'x'?`` for the one of ``names`` closest to ``name`` (difflib), or "".

    Args:
        name: The name given (its text is compared).
        names: The names known.
        cutoff: How close a name must be, from 0 to 1 (difflib's ratio).

    Returns:
        The hint, to end a message with, or "" when no name is close enough.
    """
    import difflib  # (only when a name is wrong: the command's start stays light)

    found = difflib.get_close_matches(str(name), list(names), n=1, cutoff=cutoff)
    return f"; did you mean {found[0]!r}?" if found else ""


def is_count(value: object) -> bool:
    """True for a whole number of at least 1 (True and False are not counts).

    Args:
        value: The value to check.

    Returns:
        Whether ``value`` is a count.
    """
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def check_count(name: str, value: object) -> None:
    """Refuse a ``value`` of option ``name`` that is not a whole number of at least 1.

    Args:
        name: The option's name, as the message shows it.
        value: The option's value.

    Raises:
        LaunchError: ``value`` is not a whole number of at least 1.
    """
    if not is_count(value):
        raise LaunchError(f"{name} must be a positive integer, got {value!r}")


class EasyLaunchError(Exception):
    """Base class of easylaunch's own errors."""


class SettingsError(EasyLaunchError, ValueError):
    """A settings file or value is missing, unreadable or of the wrong type."""


class LaunchError(EasyLaunchError, ValueError):
    """A launch request is invalid; nothing was started."""


class JobFailedError(EasyLaunchError):
    """The function of a run failed; the message holds the run's traceback."""


class JobCancelledError(EasyLaunchError):
    """The run was cancelled before it produced a result."""


class NotSubmittedError(EasyLaunchError):
    """The run was written to a batch nobody has submitted: waiting for it would never end."""


_said: set[str] = set()


def notice(message: str) -> None:
    """Print ``easylaunch: <message>`` to stderr, unless this process said it already.

    Args:
        message: The notice, in one line.
    """
    if message not in _said:
        _said.add(message)
        print(f"easylaunch: {message}", file=sys.stderr)


CHECKOUT = Path(__file__).resolve().parent.parent  # (a source checkout holds pyproject.toml)


def install_hint(extra: str) -> str:
    """The command that installs ``extra`` into this Python.

    Args:
        extra: The extra's name: ``"results"``, ``"search"``...

    Returns:
        ``pip install`` of the extra, run by this Python: from the checkout where there is one.
    """
    python = shlex.quote(sys.executable)
    if (CHECKOUT / "pyproject.toml").is_file():
        return f"{python} -m pip install -e {shlex.quote(f'{CHECKOUT}[{extra}]')}"
    return f"{python} -m pip install 'easylaunch[{extra}]'"


class MissingExtra(LaunchError, ImportError):
    """An optional package is not installed: the message says what needs it and the install.

    Example: ``plot needs pandas and matplotlib: pip install 'easylaunch[results]'``.
    """


def needed(module: str, what: str, extra: str, named: str | None = None) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra` saying that ``what`` needs it (``named``:
    as people know it) and how to install ``extra``. The one way easylaunch imports an
    optional package where it is used, so a core install names the extra, never a traceback.

    Args:
        module: The module to import: ``"pandas"``.
        what: What needs it, as the message says: ``"load_sweep"``.
        extra: The extra that installs it: ``"results"``.
        named: The package as people know it (None: ``module``).

    Returns:
        The module, imported.

    Raises:
        MissingExtra: The module cannot be imported.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise _missing(module, what, extra, named) from None


def installed(module: str, what: str, extra: str, named: str | None = None) -> None:
    """As :func:`needed`, without importing ``module``: for what another process imports (a
    local run's tracker), checked before it starts.

    Args:
        module: The module that must be importable: ``"wandb"``.
        what: What needs it, as the message says.
        extra: The extra that installs it.
        named: The package as people know it (None: ``module``).

    Raises:
        MissingExtra: The module is not installed.
    """
    if importlib.util.find_spec(module) is None:
        raise _missing(module, what, extra, named)


def _missing(module: str, what: str, extra: str, named: str | None) -> MissingExtra:
    return MissingExtra(f"{what} needs {named or module}: {install_hint(extra)}")
