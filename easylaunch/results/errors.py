"""What reading and plotting results can refuse, and the optional packages they need."""

from __future__ import annotations

from collections.abc import Sequence

from easylaunch.errors import EasyLaunchError, MissingExtra

__all__ = ["MissingExtra", "NoSuchKey", "NoSuchMetric", "choices", "named"]


class NoSuchMetric(EasyLaunchError, LookupError):
    """The selected runs hold no values of that metric; the message lists those they hold."""


class NoSuchKey(EasyLaunchError, LookupError):
    """No selected run's variant has that key; the message lists the keys there are."""


def choices(names: list[str], limit: int = 30) -> str:
    """``a, b, c`` (the first ``limit``, saying how many more), or "none"."""
    shown = ", ".join(names[:limit]) or "none"
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def named(selection: str | Sequence[str]) -> str:
    """A selection as the user wrote it: ``lr-sweep``, or ``a, b`` for several."""
    return selection if isinstance(selection, str) else ", ".join(selection)
