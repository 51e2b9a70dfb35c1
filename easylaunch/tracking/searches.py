"""Where a search keeps its records, and the line ``easylaunch ls`` shows for it.

A search (``easylaunch.run_search``) keeps them in ``<log root>/.searches/<search id>/``; its
runs make the sweep of the same id, under ``<log root>/<experiment>/``. ``summary.json`` is
what listing reads (trials by state, the best), so listing never needs Optuna.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

SEARCHES = ".searches"  # under the log root
SUMMARY = "summary.json"
DRIVER_LOCK = "driver.lock"  # flocked by the search's live driver


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


def searches_in(log_root: str | Path) -> list[tuple[Path, dict]]:
    """The folders and summaries of the searches under ``log_root``, the latest updated
    first."""
    found = []
    for path in Path(log_root).expanduser().glob(f"{SEARCHES}/*/{SUMMARY}"):
        try:
            found.append((path.parent, json.loads(path.read_text())))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda s: s[1].get("updated", 0), reverse=True)


def driver_alive(folder: Path) -> bool:
    """Whether a live driver holds the search in ``folder``."""
    try:
        fd = os.open(folder / DRIVER_LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def latest_run(trial: dict) -> str:
    """The id of a summary's trial's latest run, from its folder's name ("-": none yet)."""
    return Path(trial["runs"][-1]).name.rsplit("_", 1)[-1] if trial.get("runs") else "-"


def search_line(summary: dict, folder: Path) -> str:
    """``24/24 trials finished (8 complete, 16 pruned); best loss 0.0041 (trial 17, run
    ab12cd34)``; where trials are left with no live driver, how to carry it on."""
    counts = ", ".join(f"{n} {state}" for state, n in sorted(summary.get("counts", {}).items()))
    line = (f"{summary.get('finished', 0)}/{summary.get('n_trials')} trials finished "
            f"({counts})")
    best = summary.get("best")
    if best:
        line += (f"; best {summary.get('objective', 'value')} {best['value']:.4g} (trial "
                 f"{best['number']}, run {latest_run(best)})")
    if summary.get("finished", 0) < (summary.get("n_trials") or 0) and \
            not driver_alive(folder):
        line += (f"; no driver: carry it on with `easylaunch search resume "
                 f"{summary.get('id', folder.name)}`")
    return line
