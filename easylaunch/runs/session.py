"""What one launching process remembers between its launches, so that a script's loop of
``run_experiment`` calls ends as one ``run_sweep`` call would: one sweep, and for the batch
modes (sss, htp) one batch folder. It lives as long as the process (:data:`SESSION`); a new
process starts afresh."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from easylaunch.runs.bundle import Run


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
