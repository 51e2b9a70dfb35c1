"""The source lines of code that travelled by value (a function defined in the launching
script): known to ``linecache`` as launched, so every traceback a run records shows the user's
file and lines, on any machine, even after the file changed or where it does not exist."""

from __future__ import annotations

import linecache
import sys
from typing import Any, Sequence


def with_sources(obj: Any, sources: dict, modules: Sequence[Any] = ()) -> Any:
    """``obj``, once ``sources`` (file name -> text, as launched) are in linecache and
    ``modules`` (sent by value: those the launching folder held that its code imports in a
    body) importable by name. The launching side pickles a payload as a call of this, so
    loading it registers them."""
    for module in modules:
        sys.modules.setdefault(module.__name__, module)
    for filename, text in sources.items():
        # (no modification time: linecache.checkcache keeps such entries as they are)
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    return obj
