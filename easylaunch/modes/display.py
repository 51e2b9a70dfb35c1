"""How runs, searches and their errors show in Jupyter: short text, a small HTML table where
Jupyter asks for ``_repr_html_``, and a run's error as the run's own traceback.

IPython shows an exception through its ``_render_traceback_()`` where it has one (as
ipyparallel's remote errors do); a plain Python traceback is unchanged.
"""

from __future__ import annotations

import contextlib
import html
import os
import traceback
from collections.abc import Sequence
from typing import Any, TypeVar

import easylaunch_job

E = TypeVar("E", bound=BaseException)


def shows_as(exc: E, text: str) -> E:
    """``exc``, shown by IPython as ``text`` alone (not the frames of easylaunch that raise it);
    elsewhere it is unchanged. Returns ``exc``."""
    with contextlib.suppress(AttributeError, TypeError):  # (a type without a __dict__)
        exc._render_traceback_ = _Lines(text)  # type: ignore[attr-defined]
    return exc


class _Lines:
    """``_render_traceback_``: the lines IPython shows (picklable, as the exception stays)."""

    def __init__(self, text: str) -> None:
        self.lines = text.rstrip("\n").splitlines()

    def __call__(self) -> list[str]:
        return self.lines


def own_traceback(exc: BaseException) -> str:
    """``exc``'s traceback without easylaunch's frames (a function run in this process: its
    own lines, as a run's traceback shows them)."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # (easylaunch/)
    ours = tuple(os.path.join(p, "") for p in (
        package, os.path.dirname(os.path.abspath(easylaunch_job.__file__))))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(ours)]
    return "".join(["Traceback (most recent call last):\n",
                    *traceback.format_list(frames),
                    *traceback.format_exception_only(type(exc), exc)])


def html_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A small HTML table, each cell escaped."""
    def row(cells: Sequence[Any], tag: str) -> str:
        return "<tr>" + "".join(f"<{tag}>{html.escape(str(c))}</{tag}>" for c in cells) + "</tr>"

    return "<table>" + row(header, "th") + "".join(row(r, "td") for r in rows) + "</table>"
