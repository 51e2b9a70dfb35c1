"""Where a search keeps its records, and the line ``easylaunch ls`` shows for it.

A search (``easylaunch.run_search``) keeps them in ``<log root>/.searches/<search id>/``; its
runs make the sweep of the same id, under ``<log root>/<experiment>/``. ``summary.json`` is
what listing reads (trials by state, the best), so listing never needs Optuna.
"""

from __future__ import annotations

import json
from pathlib import Path

SEARCHES = ".searches"  # under the log root
SUMMARY = "summary.json"


def search_folder(run_dir: str, sweep: str) -> Path:
    """The folder of the search whose sweep ``sweep`` is, from one of its runs' folders
    (``<log root>/<experiment>/<run>``); absent where the sweep is no search."""
    return Path(run_dir).parent.parent / SEARCHES / sweep


def summary_of(run_dir: str, sweep: str) -> dict | None:
    """The summary of the search whose sweep ``sweep`` is, found from one of its runs'
    folders; None where the sweep is no search (or its summary cannot be read)."""
    path = search_folder(run_dir, sweep) / SUMMARY
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def searches_in(log_root: str | Path) -> list[dict]:
    """The summaries of the searches under ``log_root``, the latest updated first."""
    found = []
    for path in Path(log_root).expanduser().glob(f"{SEARCHES}/*/{SUMMARY}"):
        try:
            found.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda s: s.get("updated", 0), reverse=True)


def search_line(summary: dict) -> str:
    """``24/24 trials finished (8 complete, 16 pruned); best loss 0.0041 (trial 17, run
    ab12cd34)``."""
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary.get("counts", {}).items()))
    line = (f"{summary.get('finished', 0)}/{summary.get('n_trials')} trials finished "
            f"({counts})")
    best = summary.get("best")
    if best:
        run = Path(best["runs"][-1]).name.rsplit("_", 1)[-1] if best.get("runs") else "-"
        line += (f"; best {summary.get('objective', 'value')} {best['value']:.4g} (trial "
                 f"{best['number']}, run {run})")
    return line
