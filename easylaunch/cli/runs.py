"""``ls``, ``status``, ``watch``, ``logs``: which runs there are, and how they go."""

from __future__ import annotations

import argparse
import collections
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from easylaunch.cli import as_json
from easylaunch.cli.shared import (
    AddCommand,
    add_json,
    count,
    parse_since,
    registry_of,
    tail,
)
from easylaunch.errors import EasyLaunchError
from easylaunch.modes.console import line
from easylaunch.results.readers import last_points, read_run
from easylaunch.settings import load_settings
from easylaunch.tracking import listing
from easylaunch.tracking.interrupts import config_flag, goes_on, interrupted
from easylaunch.tracking.listing import Shown
from easylaunch.tracking.refresh import OPEN_STATES, STATES, job_for, refresh_entries, short
from easylaunch.tracking.rows import reason_of
from easylaunch.tracking.searches import (
    latest_run,
    search_folder,
    search_line,
    searches_in,
    summary_of,
)

if TYPE_CHECKING:
    from easylaunch.tracking.jobs import Job
    from easylaunch.tracking.registry import Registry

STATUS_LOG_LINES = 100
VALUE_CHARS = 2000  # longer values (a huge variant) are cut in `easylaunch status`


def ls(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    states = [s.strip() for group in args.state or [] for s in group.split(",") if s.strip()]
    unknown = sorted(set(states) - set(STATES))
    if unknown:
        raise EasyLaunchError(f"--state {', '.join(unknown)}: not a state; states are "
                              f"{', '.join(STATES)}")
    filters = {"exp": args.exp, "mode": args.mode, "since": args.since, "sweep": args.sweep}
    if states:  # filter on states as they are now, not as the registry last saw them
        stale, _ = registry.list(**filters, states=OPEN_STATES)
        refresh_entries(registry, stale)
    entries, total = registry.list(**filters, states=states or None,
                                   limit=None if args.all else args.limit)
    shown = refresh_entries(registry, entries)
    keys = [k for k in args.variant.split(",") if k] if args.variant else None
    now = time.time()
    if args.json:
        lines = [as_json.document("runs", [as_json.run_object(s, now) for s in shown],
                                  total=total)]
    elif sys.stdout.isatty():
        lines = listing.grouped_lines(shown, keys, shutil.get_terminal_size().columns, now)
    else:
        lines = listing.tsv_lines(shown, keys or [], now)
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    if not entries and any(v is not None for v in filters.values()):
        names = registry.experiments()[:10]
        print("no runs match those filters" + (f"; experiments: {', '.join(names)}"
                                               if names else ""), file=sys.stderr)
    elif len(entries) < total:
        print(f"showing the newest {len(entries)} of {total} runs; --limit N or --all for more",
              file=sys.stderr)
    return 0


def watch(args: argparse.Namespace) -> int:
    """Refresh the open runs every ``--interval`` seconds until none is left (or once): what
    keeps them moving without their launcher, e.g. relaunching interrupted cloud runs."""
    registry = registry_of(args)
    said, still = "", 0
    try:
        while True:
            entries, _ = registry.list(exp=args.exp, mode=args.mode, states=OPEN_STATES)
            shown = refresh_entries(registry, entries)
            counts = collections.Counter(item.state.split(" ", 1)[0] for item in shown)
            still = sum(counts[state] for state in OPEN_STATES)
            line = f"{still} open run(s)" + (": " + ", ".join(
                f"{counts[state]} {state}" for state in OPEN_STATES if counts[state])
                if still else "")
            if line != said:
                print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
                said = line
            if args.once or not still:
                return 0
            time.sleep(args.interval)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(_watch_interrupted(args, still)) from None


def _watch_interrupted(args: argparse.Namespace, still: int) -> str:
    """The line of a Ctrl-C that stopped ``watch``: its open runs go on, and how to cancel
    them (the runs it watched, by their filters, with the --config it was given)."""
    cancel = shlex.join(["easylaunch", "cancel", "--state", ",".join(OPEN_STATES),
                         *(["--exp", args.exp] if args.exp else []),
                         *(["--mode", args.mode] if args.mode else [])])
    return line(goes_on(f"{still} open run{'s' * (still != 1)}", still,
                        [cancel + config_flag(args.config)]) if still else "")


RANK0_STDOUT = "stdout.rank0.log"  # (the scheduler modes' multi-process runs)


def _search(log_dir: str, search: dict | None) -> str | None:
    """``S, trial 7; 24/24 trials finished (...); best loss 0.0041 (trial 17, run ab12cd34)``
    for a search's run."""
    if not search:
        return None
    summary = summary_of(log_dir, search["id"])
    said = f"{search['id']}, trial {search['trial']}"
    return f"{said}; {search_line(summary, search_folder(log_dir, search['id']))}" \
        if summary else said


def status(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    entry = registry.find(args.id)
    job = job_for(registry, entry)
    job.mode.bring_logs(job.record)
    info, launch = job.info(), job.launch_info
    queued = info.get("state") == "queued"
    if args.json:
        print(_status_document(registry, job, info))
        return 0
    rows = [
        ("id", job.id), ("experiment", job.exp_name), ("mode", job.mode.name),
        ("state", info.get("state")),
        ("waiting for", job.mode.waiting_reason(job.record) if queued else None),
        ("launched", listing.when(launch.get("launched_at"))),
        ("started", listing.when(info.get("started_at"))),
        ("ended", listing.when(info.get("ended_at"))),
        ("exit code", info.get("exit_code")), ("signal", info.get("signal")),
        ("attempt", info.get("attempt") if info.get("restarts") else None),
        ("restarts", _restarts(info.get("restarts", []))),
        ("why", reason_of(info)),
        ("result", listing.result_text(str(job.log_dir), info)
         if info.get("state") == "succeeded" else None),
        ("last metrics", _last_metrics(job)),
        ("host", info.get("host") or launch.get("host")),
        ("backend", ", ".join(f"{k}={v}" for k, v in (launch.get("backend") or {}).items())),
        ("search", _search(str(job.log_dir), launch.get("search"))),
        ("resubmitted from", launch.get("resubmitted_from")),
        ("resubmitted with", ", ".join(
            f"{k} {v}" for k, v in (launch.get("resubmitted_with") or {}).items())),
        ("code snapshots", ", ".join(f"{s['digest'][:8]} ({s['source']})"
                                     for s in launch.get("code_snapshots") or [])),
        ("git commits", launch.get("git_commits")), ("variant", entry.variant),
        ("command", shlex.join(launch["command"]) if "command" in launch else None),
        ("log dir", job.log_dir), ("stdout", job.stdout_path), ("stderr", job.stderr_path),
        ("rank logs", _rank_logs(job.log_dir)),
    ]
    for name, value in rows:
        if value not in (None, "", {}, "-"):
            print(f"{name + ':':18}{short(str(value), VALUE_CHARS)}")
    if info.get("error"):
        print(f"\nerror:\n{info['error'].rstrip()}")
    shown = _shown_log(job)
    print(f"\n--- last {STATUS_LOG_LINES} lines of {shown} ---")
    print(tail(shown, STATUS_LOG_LINES), end="")
    return 0


def _status_document(registry: Registry, job: Job, info: dict) -> str:
    """``status --json``: the run object of ``ls --json``, with what only status shows."""
    launch, state = job.launch_info, info.get("state") or "unknown"
    restarts = info.get("restarts") or []
    shown = Shown(registry.find(job.id), state, len(restarts),
                  job.mode.waiting_reason(job.record) if state == "queued" else None)
    metrics = {name: value for name, (_, value) in last_points(
        read_run(job.mode.readable_folder(job.record))).items()}
    run = as_json.run_object(shown, time.time(), metrics)
    run.update({
        "exit_code": info.get("exit_code"), "signal": info.get("signal"),
        "attempt": info.get("attempt"),
        "restart_history": [{"reason": r.get("reason"), "ended_at": r.get("ended_at")}
                            for r in restarts],
        "error": info.get("error"),
        "result": listing.result_text(str(job.log_dir), info) if state == "succeeded" else None,
        "backend": launch.get("backend") or {}, "search": launch.get("search"),
        "resubmitted_with": launch.get("resubmitted_with"),
        "code_snapshots": launch.get("code_snapshots") or [],
        "git_commits": launch.get("git_commits") or {}, "argv": launch.get("command"),
        "stdout": str(job.stdout_path), "stderr": str(job.stderr_path),
        "rank_logs": [str(p) for p in _rank_paths(job.log_dir)],
        "log_tail": tail(_shown_log(job), STATUS_LOG_LINES)})
    return as_json.document("runs", [run])


def _shown_log(job: Job) -> Path:
    """The log whose end ``status`` shows: stdout, or rank 0's where each rank logs its own."""
    rank0 = job.log_dir / RANK0_STDOUT
    if rank0.exists() and not tail(job.stdout_path, 1).strip():
        return rank0
    return job.stdout_path


def _rank_paths(log_dir: Path) -> list[Path]:
    """Each rank's stdout log, rank 0 first (none where the run had one process)."""
    return sorted(log_dir.glob("stdout.rank*.log"), key=lambda p: (len(p.name), p.name))


def _rank_logs(log_dir: Path) -> str | None:
    """``stdout.rank0.log ... stdout.rank3.log (4 ranks)``, where each rank logs its own."""
    ranks = _rank_paths(log_dir)
    if not ranks:
        return None
    return f"{ranks[0].name} ... {ranks[-1].name} ({len(ranks)} ranks; stderr.rank*.log too)" \
        if len(ranks) > 1 else ranks[0].name


def _last_metrics(job: Job) -> str | None:
    """``loss=0.12 (step 49), acc=0.9 (step 49)``: each metric's last value the run logged."""
    last = last_points(read_run(job.mode.readable_folder(job.record)))
    return ", ".join(f"{name}={value:.6g} (step {step:g})"
                     for name, (step, value) in last.items()) or None


def _restarts(restarts: list[dict]) -> str | None:
    """``2 (time limit at 14:02, preempted at 15:30)``: how many, why and when."""
    if not restarts:
        return None
    return f"{len(restarts)} (" + ", ".join(
        f"{r.get('reason')} at {listing.when(r.get('ended_at'))}" for r in restarts) + ")"


def logs(args: argparse.Namespace) -> int:
    registry = registry_of(args)
    job = job_for(registry, registry.find(args.id))
    job.mode.bring_logs(job.record)
    path, other = (job.stderr_path, "stdout: without --stderr") if args.stderr else \
        (job.stdout_path, "stderr: --stderr")
    if sys.stderr.isatty():  # (a pipe gets the log alone)
        print(f"==> {path.name} of run {job.id} ({other}) <==", file=sys.stderr)
    text = tail(path, args.lines)
    sys.stdout.write(text)
    sys.stdout.flush()
    shown = bool(text.strip())
    if args.follow:
        start = path.stat().st_size if path.exists() else 0
        shown = follow_logs(job, [(path, sys.stdout)], [start])[0] > start or shown
    if not args.stderr and not shown:
        _say_error(job)
    return 0


def _say_error(job: Job) -> None:
    """Print the error of a failed run whose stdout is empty (a function's traceback is in
    its record and stderr, not its stdout)."""
    info = job.info()
    if info.get("state") == "failed" and info.get("error"):
        print(f"easylaunch: the stdout of run {job.id} is empty; it failed with:",
              file=sys.stderr)
        print(info["error"].rstrip())


def follow_logs(job: Job, logs: list[tuple[Path, TextIO]], offsets: list[int] | None = None
           ) -> list[int]:
    """Copy what the run adds to its logs (each path to its stream) until it ends, from
    ``offsets`` (default: the start); where each log then ends. Ctrl-C raises the
    ``KeyboardInterrupt`` that says the run goes on and how to cancel it."""
    offsets = list(offsets or [0] * len(logs))
    try:
        while True:
            finished = job.status().terminal
            job.mode.bring_logs(job.record)
            for i, (path, out) in enumerate(logs):
                offsets[i] += _copy_new(path, offsets[i], out)
            if finished:
                job.wait()  # (writes its end to the registry)
                return offsets
            job.mode.wait_for_change(job.record, 0.2)  # each mode's own pace of asking its backend
    except KeyboardInterrupt:
        raise interrupted([job]) from None


def _copy_new(path: Path, offset: int, out: TextIO) -> int:
    """Write what ``path`` holds past ``offset`` to ``out``; how many bytes that was."""
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    out.write(data.decode(errors="replace"))
    out.flush()
    return len(data)


def add_ls(command: AddCommand) -> None:
    """``ls``: list runs, newest first."""
    parser = command("ls", help="list runs, newest first")
    parser.add_argument("--exp", help="only this experiment (or, when none has that name, the "
                    "experiments whose name holds it)")
    parser.add_argument("--sweep", help="only this sweep (its id, or the start of it)")
    parser.add_argument("--mode", help="only this mode")
    parser.add_argument("--state", action="append",
                    help="only these states (repeat, or separate with commas)")
    parser.add_argument("--since", type=parse_since, help="only runs launched since (2h, 3d, date)")
    parser.add_argument("-n", "--limit", type=count, default=50, help="how many (default 50)")
    parser.add_argument("--all", action="store_true", help="every matching run")
    parser.add_argument("--variant", metavar="KEYS", help="variant keys to show, comma-separated "
                    "(nested: a.b); default on a terminal: those that differ within each sweep")
    add_json(parser)
    parser.set_defaults(func=ls)


def search(args: argparse.Namespace) -> int:
    """The searches under the log root, one line each; with an id, that search's trials; with
    ``resume ID``, the search carried on."""
    words = list(args.words)
    if words[:1] == ["resume"]:
        if len(words) != 2:
            raise EasyLaunchError("easylaunch search resume needs one search id: easylaunch "
                                  "search resume ID")
        # (late: only a resume imports the launch path, and Optuna)
        from easylaunch.api.search import resume_search

        carried = resume_search(words[1], args.config)
        print(f"search {carried.id} carried on by a detached driver; follow: easylaunch search "
              f"{carried.id}", file=sys.stderr)
        return 0
    if len(words) > 1:
        raise EasyLaunchError(f"easylaunch search takes one search id, or resume and one: got "
                              f"{' '.join(words)}")
    args.id = words[0] if words else None
    found = searches_in(load_settings(args.config).LOCAL_LOG_DIR)
    if args.json:
        chosen = found if args.id is None else [_one_search(found, args.id)]
        print(as_json.document("searches", [as_json.search_object(f, s) for f, s in chosen]))
        return 0
    if args.id is None:
        for folder, summary in found:
            print(f"{summary['id']}  {search_line(summary, folder)}")
        return 0
    folder, summary = _one_search(found, args.id)
    print(f"search {summary['id']}: {search_line(summary, folder)}")
    rows = [("TRIAL", "STATE", summary.get("objective", "VALUE").upper(), "STEP", "RUN",
             "REASON")]
    rows += [(str(t["number"]), t["state"], "-" if t["value"] is None else f"{t['value']:.4g}",
              "-" if t["last_step"] is None else str(t["last_step"]),
              latest_run(t),
              t["reason"] or "") for t in summary["trials"]]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print(("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=False)) + "  "
               + row[-1]).rstrip())
    return 0


def _one_search(found: list[tuple[Path, dict]], search_id: str) -> tuple[Path, dict]:
    """The search ``search_id`` names (whole, or a unique start of it)."""
    chosen = [(f, s) for f, s in found if s["id"] == search_id] or \
        [(f, s) for f, s in found if s["id"].startswith(search_id)]
    if len(chosen) != 1:
        raise EasyLaunchError(f"{len(chosen) or 'no'} searches match {search_id!r}"
                              + (f": {', '.join(s['id'] for _, s in chosen)}" if chosen else ""))
    return chosen[0]


def add_search(command: AddCommand) -> None:
    """``search``: the searches (run_search), or one search's trials."""
    parser = command("search", help="list the searches (easylaunch.run_search), or show one "
                     "search's trials: state, objective, last step reported, run and reason")
    parser.add_argument("words", nargs="*", metavar="[resume] ID",
                        help="a search's id, or a unique start of one; `resume ID` carries the "
                        "search on as its last run_search call was made, with a detached driver "
                        "(finished trials are kept)")
    add_json(parser)
    parser.set_defaults(func=search)


def add_status(command: AddCommand) -> None:
    """``status``: one run, refreshed, with the end of its log."""
    parser = command("status", aliases=["q"],
                     help="refresh and show one run, with the end of its log")
    parser.add_argument("id", help="run id, or a unique start or end of one")
    add_json(parser)
    parser.set_defaults(func=status)


def add_watch(command: AddCommand) -> None:
    """``watch``: refresh open runs until all have ended."""
    parser = command("watch", help="refresh open runs until all have ended: relaunches "
                    "interrupted cloud runs without their launcher, tells ended sweeps (run it "
                    "in tmux, nohup or cron)")
    parser.add_argument("--exp", help="only this experiment name")
    parser.add_argument("--mode", help="only this mode")
    parser.add_argument("--interval", type=float, default=30.0,
                       help="seconds between looks (default 30)")
    parser.add_argument("--once", action="store_true", help="look once and return (for cron)")
    parser.set_defaults(func=watch)


def add_logs(command: AddCommand) -> None:
    """``logs``: a run's log, printed or followed."""
    parser = command("logs", help="print (or follow) a run's log")
    parser.add_argument("id", help="run id, or a unique start or end of one")
    parser.add_argument("-f", "--follow", action="store_true", help="follow until the run ends")
    parser.add_argument("-n", "--lines", type=count, help="only the last N lines")
    parser.add_argument("--stderr", action="store_true", help="stderr.log instead of stdout.log")
    parser.set_defaults(func=logs)
