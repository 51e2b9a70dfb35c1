"""Seeing a sweep: its runs and metric histories as pandas tables, and learning curves.

pandas and matplotlib (``pip install 'easylaunch[results]'``) are imported by the functions
that need them, so importing this package stays light.
"""

from easylaunch.results.errors import MissingExtra, NoSuchKey, NoSuchMetric
from easylaunch.results.plot import plot_sweep
from easylaunch.results.sweep import load_histories, load_sweep

__all__ = ["MissingExtra", "NoSuchKey", "NoSuchMetric", "load_histories", "load_sweep",
           "plot_sweep"]
