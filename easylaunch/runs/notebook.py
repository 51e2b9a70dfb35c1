"""A launch from a Jupyter notebook: the kernel, and the notebook the runs record as their
script (``research.ipynb``'s path where Jupyter says it, else :data:`NOTEBOOK`)."""

from __future__ import annotations

import os
import sys

NOTEBOOK = "a notebook"  # the script of runs launched from a notebook whose path is not known


def in_kernel() -> bool:
    """Whether this process is a Jupyter kernel (IPython's, with a kernel attached)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def notebook_path() -> str | None:
    """The notebook this kernel runs: its path where Jupyter tells it (ipykernel's
    ``__session__``, from JPY_SESSION_NAME), else :data:`NOTEBOOK`; None outside a kernel."""
    if not in_kernel():
        return None
    main = sys.modules.get("__main__")
    named = getattr(main, "__session__", None) or os.environ.get("JPY_SESSION_NAME")
    if isinstance(named, str) and named.endswith(".ipynb"):
        return os.path.abspath(named)
    return NOTEBOOK


def is_notebook(script: str) -> bool:
    """Whether a run's recorded script is a notebook."""
    return script == NOTEBOOK or script.endswith(".ipynb")
