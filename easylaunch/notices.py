"""One-line notices to the user on stderr, each said once per process."""

from __future__ import annotations

import sys

_said: set[str] = set()


def notice(message: str) -> None:
    """Print ``easylaunch: <message>`` to stderr, unless this process said it already."""
    if message not in _said:
        _said.add(message)
        print(f"easylaunch: {message}", file=sys.stderr)
