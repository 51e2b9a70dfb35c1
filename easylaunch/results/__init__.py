"""Seeing a sweep: its runs and metric histories as pandas tables, and learning curves.

pandas and matplotlib (``pip install 'easylaunch[results]'``) are imported by the functions
that need them, and this package's names by their first use (PEP 562), so that reading a run's
metrics (:mod:`.readers`, which ``easylaunch ls`` uses) imports neither the tables nor the plots.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False  # (as typing's, which type checkers read so; importing typing: 3 ms)
if TYPE_CHECKING:
    from easylaunch.results.errors import MissingExtra, NoSuchKey, NoSuchMetric
    from easylaunch.results.plot import plot_sweep
    from easylaunch.results.sweep import load_histories, load_sweep

__all__ = ["MissingExtra", "NoSuchKey", "NoSuchMetric", "load_histories", "load_sweep",
           "plot_sweep"]

_MODULE_OF = {"MissingExtra": "errors", "NoSuchKey": "errors", "NoSuchMetric": "errors",
              "plot_sweep": "plot", "load_histories": "sweep", "load_sweep": "sweep"}


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use."""
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
