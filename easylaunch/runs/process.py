"""The launching process: whether it is a Jupyter kernel, the notebook the runs record as
their script (``research.ipynb``'s path where Jupyter says it, else :data:`NOTEBOOK`), and
what it remembers between its launches (:data:`SESSION`). A script's loop of
``run_experiment`` calls so ends as one ``run_sweep`` call would: one sweep, and for the batch
modes (sss, htp) one batch folder. A new process starts afresh."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from easylaunch.runs.bundle import Run

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


@dataclass
class Session:
    """This process's sweeps of single launches and its open batch folders."""

    # (exp_name, mode, log root) -> the sweep id of the first single launch
    sweeps: dict[tuple[str, str, str], str] = field(default_factory=dict)
    # sweep id -> the runs of it this process's resumed single launches returned
    claimed: dict[str, set[str]] = field(default_factory=dict)
    # a batch's kind (BatchMode.batch_key) -> its name and the runs it holds so far
    batches: dict[tuple, tuple[str, list[Run]]] = field(default_factory=dict)
    # seed script -> batch name -> the lines that batch wrote to it
    seed_lines: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    def sweep_of(self, exp_name: str, mode: str, log_root: str, launch_id: str) -> str:
        """The sweep a single launch joins: the first such launch's (``launch_id``, if this
        is the first)."""
        return self.sweeps.setdefault((exp_name, mode, log_root), launch_id)

    def open_batch(self, kind: tuple) -> tuple[str | None, list[Run]]:
        """The open batch of this kind: its name and runs ((None, []): none yet)."""
        return self.batches.get(kind, (None, []))

    def grow_batch(self, kind: tuple, name: str, runs: list[Run]) -> None:
        """Remember the batch of this kind as ``name``, now holding ``runs``."""
        self.batches[kind] = (name, runs)

    def seed_script(self, seed: str, batch: str, lines: list[str]) -> str:
        """The seed script's text, with ``batch``'s lines (now ``lines``) among the others."""
        batches = self.seed_lines.setdefault(seed, {})
        batches[batch] = lines
        return "".join(line + "\n" for lines in batches.values() for line in lines)


SESSION = Session()  # this process's
