"""``cancel``, ``resubmit``, ``resume``, ``forget``, ``fetch``: acting on runs, named by id or
selected by filters (asking first on a terminal when filters select several)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from easylaunch.cli.shared import AddCommand, parse_since, registry_of
from easylaunch.errors import EasyLaunchError
from easylaunch.tracking.refresh import (
    OPEN_STATES,
    STATES,
    cancel_entries,
    job_for,
    refresh_entries,
)
from easylaunch.tracking.sweeps import launch_of

if TYPE_CHECKING:
    from types import ModuleType

    from easylaunch.tracking.registry import Entry, Registry

CANCEL_WAIT_SECONDS = 60  # how long `cancel` waits for a run to end
SHOWN_BEFORE_ASKING = 20  # runs listed before a bulk action asks


def _selected(registry: Registry, args: argparse.Namespace) -> tuple[list[Entry], int]:
    """The registry entries an action touches: the ids given, or the runs the filters select
    (``--state`` as the runs are now); also how many ids could not be found (each said)."""
    filters = {"exp": args.exp, "mode": args.mode, "since": args.since, "sweep": args.sweep}
    states = [s.strip() for group in args.state or [] for s in group.split(",") if s.strip()]
    if args.ids and (states or any(v is not None for v in filters.values())):
        raise EasyLaunchError("give run ids, or select runs with filters, not both")
    if args.ids:
        found, missing = [], 0
        for part in args.ids:
            try:
                found.append(registry.find(part))
            except EasyLaunchError as exc:
                print(f"easylaunch: error: {part}: {exc}", file=sys.stderr)
                missing += 1
        return list({e.id: e for e in found}.values()), missing
    if not states and all(v is None for v in filters.values()):
        raise EasyLaunchError("give run ids, or select runs with --exp, --sweep, --state, "
                              "--mode or --since")
    unknown = sorted(set(states) - set(STATES))
    if unknown:
        raise EasyLaunchError(f"--state {', '.join(unknown)}: not a state; states are "
                              f"{', '.join(STATES)}")
    if states:  # as the runs are now, not as the registry last saw them
        refresh_entries(registry, registry.list(**filters, states=OPEN_STATES)[0])
    return registry.list(**filters, states=states or None)[0], 0


def _go_ahead(action: str, entries: list, args: argparse.Namespace) -> bool:
    """Show the runs some filters selected for an action and, on a terminal, ask once
    (``--yes``: don't). Runs named by id are acted on as named."""
    if not entries:
        print(f"no runs to {action}")
        return False
    if args.ids:
        return True
    print(f"{action} {len(entries)} run(s):")
    for entry in entries[:SHOWN_BEFORE_ASKING]:
        print(f"  {entry.id}  {entry.exp_name}  {entry.mode}  {entry.state}")
    if len(entries) > SHOWN_BEFORE_ASKING:
        print(f"  and {len(entries) - SHOWN_BEFORE_ASKING} more")
    if args.yes or not sys.stdin.isatty():
        return True
    try:
        answer = input(f"{action} them? [y/N] ")
    except EOFError:
        answer = ""
    if answer.strip().lower() in ("y", "yes"):
        return True
    print("nothing done")
    return False


def cancel(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    entries, failures = _selected(registry, args)

    if _go_ahead("cancel", entries, args):  # (together: one step per backend, not per run)
        for entry, outcome, was_open in cancel_entries(registry, entries, CANCEL_WAIT_SECONDS):
            if isinstance(outcome, EasyLaunchError):
                print(f"easylaunch: error: {entry.id}: {outcome}", file=sys.stderr)
                failures += 1
            else:
                print(f"{entry.id}: {outcome}" if was_open else f"{entry.id}: already {outcome}")
    return 1 if failures else 0


def _resubmission_api() -> ModuleType:
    """The launch path's resubmissions (late: cancel, forget and fetch, in this module too, do
    without the launch path)."""
    from easylaunch.api import resubmission

    return resubmission


def resubmit_runs(args: argparse.Namespace) -> int:
    """Resubmit the selected runs, those of one launch together (a packed sweep's failed runs
    go again in one allocation, an array's in one array), saying what code and settings they
    run."""
    registry = registry_of(args)
    entries, failures = _selected(registry, args)
    if not _go_ahead("resubmit", entries, args):
        return 1 if failures else 0
    launches: dict[str, list] = {}
    for entry in entries:
        launches.setdefault(launch_of(entry), []).append(entry)
    for group in launches.values():
        try:
            jobs = _resubmission_api().resubmit_launch([e.id for e in group], config=args.config,
                                   detach=True if args.detach and group[0].mode == "local"
                                   else None, current_code=args.current_code,
                                   current_settings=args.current_settings)
        except EasyLaunchError as exc:
            print(f"easylaunch: error: {', '.join(e.id for e in group)}: {exc}",
                  file=sys.stderr)
            failures += len(group)
            continue
        print(what_runs(jobs[0].launch_info), file=sys.stderr)
        for entry, job in zip(group, jobs, strict=True):
            print(f"resubmitted {entry.id} as {job.id}: {job.log_dir}")
    return 1 if failures else 0


def resume(args: argparse.Namespace) -> int:
    """Launch again the runs of a sweep that did not succeed, once each (see resume_sweep)."""
    line, done = _resubmission_api().resume_sweep(
        args.sweep, args.config, True if args.detach else None, args.current_code,
        args.current_settings)
    print(line, file=sys.stderr)
    if done:
        print(what_runs(done[0][1].launch_info), file=sys.stderr)
    for entry, job in done:
        print(f"resubmitted {entry.id} ({entry.state}) as {job.id}: {job.log_dir}")
    return 0


def what_runs(launch: dict) -> str:
    """One line: the code (snapshot digests, git commits) and settings a resubmitted run
    runs, and how to take the ones kept as launched as they are now."""
    taken = launch.get("resubmitted_with") or {}
    code = "as it is now" if taken.get("code") == "current" else "as launched"
    ids = [s["digest"][:8] for s in launch.get("code_snapshots") or []] + [
        commit[:7] for commit in (launch.get("git_commits") or {}).values() if commit]
    settings = taken.get("settings", "as launched")
    line = (f"easylaunch resubmit: runs the code {code}"
            + (f" ({', '.join(ids)})" if ids else "")
            + (" and the settings as launched" if settings == "as launched"
               else f" and the settings of {settings} as it is now"))
    kept = [flag for flag, kind in (("--current-code", code), ("--current-settings", settings))
            if kind == "as launched"]
    return line + (f"; {' and '.join(kept)} take{'s' * (len(kept) == 1)} "
                   f"{'it as it is' if len(kept) == 1 else 'them as they are'} now"
                   if kept else "")


def forget(args: argparse.Namespace) -> int:
    """Drop runs from the registry (``--purge``: delete their run folders too); runs still
    open are refused (cancel them first)."""
    registry = registry_of(args)
    entries, failures = _selected(registry, args)
    still = [e for e in refresh_entries(registry, entries) if e.state in OPEN_STATES]
    if still:
        raise EasyLaunchError(f"{len(still)} of these runs are still {still[0].state} "
                              f"({', '.join(s.entry.id for s in still[:5])}): cancel them first")
    action = "forget and delete the folders of" if args.purge else "forget"
    if args.purge and not args.yes and not (sys.stdin.isatty() and not args.ids):
        raise EasyLaunchError("--purge deletes run folders: add --yes (or select the runs "
                              "with filters on a terminal, where it asks first)")
    if not _go_ahead(action, entries, args):
        return 1 if failures else 0
    for entry in entries:
        if args.purge and Path(entry.log_dir).is_dir():
            shutil.rmtree(entry.log_dir)
    gone = registry.forget(e.id for e in entries)
    print(f"forgot {gone} run(s)" + (" and deleted their folders" if args.purge else ""))
    return 1 if failures else 0


def fetch(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    job = job_for(registry, registry.find(args.id))
    print(job.mode.fetch(job.record))
    return 0


def _selection() -> argparse.ArgumentParser:
    """What cancel, resubmit and forget act on: ids, or the runs some filters select."""
    selection = argparse.ArgumentParser(add_help=False)
    selection.add_argument("ids", nargs="*", metavar="id",
                           help="run ids, or unique starts or ends of them")
    selection.add_argument("--exp", help="the runs of this experiment (or of those whose name "
                           "holds it)")
    selection.add_argument("--sweep", help="the runs of this sweep (its id or its start)")
    selection.add_argument("--state", action="append",
                           help=f"the runs in these states (comma-separated: {', '.join(STATES)})")
    selection.add_argument("--mode", help="the runs of this mode")
    selection.add_argument("--since", type=parse_since, help="the runs launched since (2h, 3d, "
                           "a date)")
    selection.add_argument("-y", "--yes", action="store_true",
                           help="do not ask on a terminal before acting on several runs")
    return selection


def add_cancel(command: AddCommand) -> None:
    """``cancel``: cancel runs."""
    parser = command("cancel", aliases=["abort"], parents=[_selection()],
                     help="cancel runs (a cancelled run is never restarted)")
    parser.set_defaults(func=cancel)


def add_resubmit(command: AddCommand) -> None:
    """``resubmit``: run runs parser."""
    parser = command("resubmit", parents=[_selection()],
                     help="run runs again: the code and settings as launched (new ids, same "
                     "sweep); --current-code / --current-settings take them as they are now")
    _code_and_settings(parser)
    parser.set_defaults(func=resubmit_runs)


def _code_and_settings(parser: argparse.ArgumentParser) -> None:
    """``--current-code``, ``--current-settings`` and ``--detach``: what runs run again."""
    parser.add_argument("--current-code", action="store_true",
                        help="rebuild the runs from their launching script and code folders as "
                        "they are now (the function found again by its name; code snapshots "
                        "made again; the same variants)")
    parser.add_argument("--current-settings", action="store_true",
                        help="read the settings file the runs were launched with again (e.g. "
                        "after setting SLURM_PYTHON)")
    parser.add_argument("--detach", action="store_true", help="local runs go on after this "
                       "command returns (else it waits for them, as their launching script did)")


def add_resume(command: AddCommand) -> None:
    """``resume``: run again what did not succeed in a sweep."""
    parser = command("resume", help="run again the runs of a sweep that did not succeed "
                     "(failed, cancelled, timed out, lost), once each, in the same sweep; "
                     "runs that succeeded or are under way are kept")
    parser.add_argument("sweep", help="the sweep's id, or a unique start of it")
    _code_and_settings(parser)
    parser.set_defaults(func=resume)


def add_forget(command: AddCommand) -> None:
    """``forget``: drop ended runs from the registry."""
    parser = command("forget", aliases=["rm"], parents=[_selection()],
                     help="drop ended runs from the registry (their folders stay)")
    parser.add_argument("--purge", action="store_true",
                        help="delete their run folders too (asks first)")
    parser.set_defaults(func=forget)


def add_fetch(command: AddCommand) -> None:
    """``fetch``: bring a remote run's logs and results here."""
    parser = command("fetch", help="bring a remote run's logs and results here")
    parser.add_argument("id", help="run id, or a unique start or end of one")
    parser.set_defaults(func=fetch)
