"""The ``easylaunch`` command: list, inspect, follow, cancel, resubmit and fetch runs."""

from __future__ import annotations

import argparse
import collections
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from easylaunch import __version__, listing
from easylaunch.errors import EasyLaunchError
from easylaunch.refresh import (
    OPEN_STATES,
    STATES,
    cancel_entry,
    job_for,
    refresh_entries,
    short,
)
from easylaunch.settings import (
    DEFAULTS,
    ENV_CONFIG,
    USER_CONFIG_PATH,
    load_settings,
    where_found,
    write_template,
)

STATUS_LOG_LINES = 100
CANCEL_WAIT_SECONDS = 60  # how long `cancel` waits for a run to end
VALUE_CHARS = 2000  # longer values (a huge variant) are cut in `easylaunch status`


def _registry(args: argparse.Namespace):
    from easylaunch.registry import open_registry

    return open_registry(load_settings(args.config).REGISTRY_PATH)


def count(text: str) -> int:
    """A command-line count: a whole number, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count (0, 1, 2, ...)")
    return value


def parse_since(text: str) -> float:
    """The ``--since`` argument: :func:`easylaunch.listing.parse_since`, its error said as
    argparse says one."""
    try:
        return listing.parse_since(text)
    except EasyLaunchError as exc:
        raise argparse.ArgumentTypeError(f"--since {exc}") from None


def _tail(path: Path, lines: int | None) -> str:
    try:
        with open(path, errors="replace") as f:
            if lines is None:
                return f.read()
            return "".join(collections.deque(f, maxlen=lines))
    except FileNotFoundError:
        return ""


def _ls(args: argparse.Namespace) -> int:
    registry = _registry(args)
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
    if sys.stdout.isatty():
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


def _watch(args: argparse.Namespace) -> int:
    """Refresh the open runs every ``--interval`` seconds until none is left (or once): what
    keeps them moving without their launcher, e.g. relaunching interrupted cloud runs."""
    registry = _registry(args)
    said = ""
    while True:
        entries, _ = registry.list(exp=args.exp, mode=args.mode, states=OPEN_STATES)
        shown = refresh_entries(registry, entries)
        counts = collections.Counter(item.state.split(" ", 1)[0] for item in shown)
        still = sum(counts[state] for state in OPEN_STATES)
        line = f"{still} open run(s)" + (": " + ", ".join(
            f"{counts[state]} {state}" for state in OPEN_STATES if counts[state]) if still else "")
        if line != said:
            print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
            said = line
        if args.once or not still:
            return 0
        time.sleep(args.interval)


def _status(args: argparse.Namespace) -> int:
    registry = _registry(args)
    entry = registry.find(args.id)
    job = job_for(registry, entry)
    job.mode.sync_logs(job)
    info, launch = job.info(), job.launch_info
    rows = [
        ("id", job.id), ("experiment", job.exp_name), ("mode", job.mode.name),
        ("state", info.get("state")),
        ("waiting for", job.mode.waiting_reason(job) if info.get("state") == "queued" else None),
        ("launched", listing.when(launch.get("launched_at"))),
        ("started", listing.when(info.get("started_at"))),
        ("ended", listing.when(info.get("ended_at"))),
        ("exit code", info.get("exit_code")), ("signal", info.get("signal")),
        ("attempt", info.get("attempt") if info.get("restarts") else None),
        ("restarts", _restarts(info.get("restarts", []))),
        ("host", info.get("host") or launch.get("host")), ("backend", launch.get("backend")),
        ("resubmitted from", launch.get("resubmitted_from")),
        ("git commits", launch.get("git_commits")), ("variant", entry.variant),
        ("log dir", job.log_dir), ("stdout", job.stdout_path), ("stderr", job.stderr_path),
    ]
    for name, value in rows:
        if value not in (None, "", {}, "-"):
            print(f"{name + ':':18}{short(str(value), VALUE_CHARS)}")
    if info.get("error"):
        print(f"\nerror:\n{info['error'].rstrip()}")
    print(f"\n--- last {STATUS_LOG_LINES} lines of {job.stdout_path} ---")
    print(_tail(job.stdout_path, STATUS_LOG_LINES), end="")
    return 0


def _restarts(restarts: list[dict]) -> str | None:
    """``2 (time limit at 14:02, preempted at 15:30)``: how many, why and when."""
    if not restarts:
        return None
    return f"{len(restarts)} (" + ", ".join(
        f"{r.get('reason')} at {listing.when(r.get('ended_at'))}" for r in restarts) + ")"


def _logs(args: argparse.Namespace) -> int:
    registry = _registry(args)
    job = job_for(registry, registry.find(args.id))
    job.mode.sync_logs(job)
    path = job.stderr_path if args.stderr else job.stdout_path
    sys.stdout.write(_tail(path, args.lines))
    sys.stdout.flush()
    if not args.follow:
        return 0
    offset = path.stat().st_size if path.exists() else 0
    while True:
        finished = job.status().terminal
        job.mode.sync_logs(job)
        if path.exists():
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read()
            offset += len(data)
            sys.stdout.write(data.decode(errors="replace"))
            sys.stdout.flush()
        if finished:
            return 0
        job.mode.wait_for_change(job, 0.2)  # each mode's own pace of asking its backend


SHOWN_BEFORE_ASKING = 20  # runs listed before a bulk action asks


def _selected(registry, args: argparse.Namespace) -> tuple[list, int]:
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


def _for_each(entries: list, act) -> int:
    """``act(entry)`` for each run; a failure is said and the others go on. How many failed."""
    failures = 0
    for entry in entries:
        try:
            act(entry)
        except EasyLaunchError as exc:
            print(f"easylaunch: error: {entry.id}: {exc}", file=sys.stderr)
            failures += 1
    return failures


def _cancel(args: argparse.Namespace) -> int:
    registry = _registry(args)
    entries, failures = _selected(registry, args)

    def cancel(entry) -> None:
        state, was_open = cancel_entry(registry, entry, CANCEL_WAIT_SECONDS)
        print(f"{entry.id}: {state}" if was_open else f"{entry.id}: already {state}")

    if _go_ahead("cancel", entries, args):
        failures += _for_each(entries, cancel)
    return 1 if failures else 0


def _resubmit(args: argparse.Namespace) -> int:
    from easylaunch.api import resubmit

    registry = _registry(args)
    entries, failures = _selected(registry, args)

    def again(entry) -> None:
        job = resubmit(entry.id, config=args.config,
                       detach=True if args.detach and entry.mode == "local" else None)
        print(f"resubmitted {entry.id} as {job.id}: {job.log_dir}")

    if _go_ahead("resubmit", entries, args):
        failures += _for_each(entries, again)
    return 1 if failures else 0


def _forget(args: argparse.Namespace) -> int:
    """Drop runs from the registry (``--purge``: delete their run folders too); runs still
    open are refused (cancel them first)."""
    registry = _registry(args)
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


def _fetch(args: argparse.Namespace) -> int:
    registry = _registry(args)
    job = job_for(registry, registry.find(args.id))
    print(job.mode.fetch(job))
    return 0


def _dist_command(args: argparse.Namespace) -> list[str]:
    from easylaunch import dist

    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        raise dist.DistError("give the program to start after --, e.g. -- python train.py")
    return dist.launch_command(command, dist.topology(), args.procs_per_host, args.total,
                               args.cpu_bind, args.depth)


def _dist_info(args: argparse.Namespace) -> int:
    from easylaunch import dist

    topo = dist.topology()
    print(f"scheduler: {topo.scheduler}\nworkdir: {dist.workdir()}\nhosts: "
          f"{' '.join(topo.hosts)}\nnhosts: {topo.nhosts}\nngpu_per_host: "
          f"{topo.ngpu_per_host}\nngpus: {topo.ngpus}")
    return 0


def _dist_launch_cmd(args: argparse.Namespace) -> int:
    print(shlex.join(_dist_command(args)))
    return 0


def _dist_launch(args: argparse.Namespace) -> int:
    argv = _dist_command(args)
    try:
        os.execvp(argv[0], argv)
    except FileNotFoundError:
        raise EasyLaunchError(f"{argv[0]} is not on PATH") from None
    return 127


def _init(args: argparse.Namespace) -> int:
    dest = write_template(args.path)
    print(f"wrote {dest} (the keys most users change; the others are named at its end); "
          f"{where_found(dest)}")
    return 0


def _config(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    changed = {key for key in settings if settings[key] != DEFAULTS.get(key)}
    print(f"# settings file: {settings.path or 'none found (all defaults)'}; "
          f"* marks the {len(changed)} value(s) that differ from the defaults")
    for key in sorted(changed if args.changed else settings):
        print(f"{'*' if key in changed else ' '} {key} = {settings[key]!r}  "
              f"# from {settings.sources[key]}")
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from easylaunch.doctor import diagnose

    findings = diagnose(args.path or args.config)
    for finding in findings:
        print(f"{finding.level:5}  {finding.text}")
    return 1 if any(f.level == "error" for f in findings) else 0


def _plot(args: argparse.Namespace) -> int:
    from easylaunch.results.plot import plot_command

    return plot_command(args)


def _preview(args: argparse.Namespace) -> int:
    """Run a launch script with every launch a dry run (``easylaunch preview``)."""
    import runpy

    from easylaunch import preview

    if not os.path.isfile(args.script):
        raise EasyLaunchError(f"{args.script}: no such script")
    os.environ[preview.ENV_DRY_RUN] = "1"
    if args.config:
        os.environ[ENV_CONFIG] = args.config  # the script's launches read it too
    sys.argv = [args.script, *args.args]
    try:
        runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise
    except Exception as exc:  # noqa: BLE001 - e.g. job.wait() on what a dry run returned
        if not preview.shown():
            raise
        print(f"easylaunch preview: the script stopped after {preview.shown()} dry run(s) "
              f"({type(exc).__name__}: {exc}); a dry run returns a Preview, not Jobs",
              file=sys.stderr)
    if not preview.shown():
        print(f"easylaunch preview: {args.script} launched nothing", file=sys.stderr)
        return 1
    return 0


def _ui(args: argparse.Namespace) -> int:
    from easylaunch.dashboard.server import serve_command

    return serve_command(args)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``easylaunch`` command."""
    parser = argparse.ArgumentParser(
        prog="easylaunch", description="List, inspect, follow, cancel, resubmit and fetch the "
        "runs easylaunch launched.", epilog="Exit codes: 0 done, 1 an error (a run not found, "
        "a refused action), 2 a usage error, 130 interrupted, 141 the output's reader went "
        "away.")
    parser.add_argument("--version", action="version", version=f"easylaunch {__version__}")
    # --config goes before or after the command (its value, if given twice: the later one)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=argparse.SUPPRESS,
                        help="settings file to read instead of the usual lookup")
    parser.add_argument("--config", help="settings file to read instead of the usual lookup")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, parents: tuple = (), **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common, *parents], description=kwargs.get("help"),
                              **kwargs)

    ls = command("ls", help="list runs, newest first")
    ls.add_argument("--exp", help="only this experiment (or, when none has that name, the "
                    "experiments whose name holds it)")
    ls.add_argument("--sweep", help="only this sweep (its id, or the start of it)")
    ls.add_argument("--mode", help="only this mode")
    ls.add_argument("--state", action="append",
                    help="only these states (repeat, or separate with commas)")
    ls.add_argument("--since", type=parse_since, help="only runs launched since (2h, 3d, date)")
    ls.add_argument("-n", "--limit", type=count, default=50, help="how many (default 50)")
    ls.add_argument("--all", action="store_true", help="every matching run")
    ls.add_argument("--variant", metavar="KEYS", help="variant keys to show, comma-separated "
                    "(nested: a.b); default on a terminal: those that differ within each sweep")
    ls.set_defaults(func=_ls)

    status = command("status", aliases=["q"],
                     help="refresh and show one run, with the end of its log")
    status.add_argument("id", help="run id, or a unique start or end of one")
    status.set_defaults(func=_status)

    watch = command("watch", help="refresh open runs until all have ended: relaunches "
                    "interrupted cloud runs without their launcher, tells ended sweeps (run it "
                    "in tmux, nohup or cron)")
    watch.add_argument("--exp", help="only this experiment name")
    watch.add_argument("--mode", help="only this mode")
    watch.add_argument("--interval", type=float, default=30.0,
                       help="seconds between looks (default 30)")
    watch.add_argument("--once", action="store_true", help="look once and return (for cron)")
    watch.set_defaults(func=_watch)

    logs = command("logs", help="print (or follow) a run's log")
    logs.add_argument("id", help="run id, or a unique start or end of one")
    logs.add_argument("-f", "--follow", action="store_true", help="follow until the run ends")
    logs.add_argument("-n", "--lines", type=count, help="only the last N lines")
    logs.add_argument("--stderr", action="store_true", help="stderr.log instead of stdout.log")
    logs.set_defaults(func=_logs)

    # what cancel, resubmit and forget act on: ids, or the runs some filters select
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

    cancel = command("cancel", aliases=["abort"], parents=[selection],
                     help="cancel runs (a cancelled run is never restarted)")
    cancel.set_defaults(func=_cancel)

    again = command("resubmit", parents=[selection],
                    help="run runs again (same bundle and settings, new ids, same sweep)")
    again.add_argument("--detach", action="store_true", help="local runs go on after this "
                       "command returns (else it waits for them, as their launching script did)")
    again.set_defaults(func=_resubmit)

    forget = command("forget", aliases=["rm"], parents=[selection],
                     help="drop ended runs from the registry (their folders stay)")
    forget.add_argument("--purge", action="store_true",
                        help="delete their run folders too (asks first)")
    forget.set_defaults(func=_forget)

    fetch = command("fetch", help="bring a remote run's logs and results here")
    fetch.add_argument("id", help="run id, or a unique start or end of one")
    fetch.set_defaults(func=_fetch)

    init = command("init", help="write a short settings file (the keys most users change)")
    init.add_argument("path", nargs="?", default=str(USER_CONFIG_PATH),
                      help=f"where to write it (default: {USER_CONFIG_PATH})")
    init.set_defaults(func=_init)

    config = command("config", help="print the effective settings and their sources")
    config.add_argument("--changed", action="store_true",
                        help="only the values that differ from the defaults")
    config.set_defaults(func=_config)

    preview = command("preview", help="run a launch script with every launch a dry run: "
                      "print the scripts, commands and resources it would submit, and "
                      "submit, register and keep nothing")
    preview.add_argument("script", help="the launch script (python file)")
    preview.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    preview.set_defaults(func=_preview)

    plot = command("plot", help="learning curves of a sweep's runs as a PNG, grouped by a "
                   "variant key (mean and spread across the rest, e.g. seeds)")
    plot.add_argument("selection", nargs="+", metavar="EXP|SWEEP|ID",
                      help="an experiment name (or part of one), a sweep id, or run ids")
    plot.add_argument("--metric", required=True, help="the metric to plot (e.g. loss)")
    plot.add_argument("--by", metavar="KEY", help="the variant key that groups the curves "
                      "(nested: a.b)")
    plot.add_argument("--x", default="step", choices=["step", "time"],
                      help="the x axis: step (default) or time (seconds since each run's "
                      "first value)")
    plot.add_argument("-o", "--out", help="the PNG to write (default: <metric>-by-<key>.png "
                      "here)")
    plot.add_argument("--no-show", action="store_true",
                      help="only write the PNG (by default it is also shown where a display "
                      "exists)")
    plot.set_defaults(func=_plot)

    ui = command("ui", help="a web dashboard of the runs, on 127.0.0.1; prints its URL, "
                 "whose token opens it")
    ui.add_argument("--host", default="127.0.0.1",
                    help="the address to listen on (default 127.0.0.1)")
    ui.add_argument("--port", type=count, default=8765, help="the port (default 8765; 0: any "
                    "free one)")
    ui.add_argument("--allow-remote", action="store_true", help="allow a --host other than "
                    "loopback: whoever reaches it and has the URL (its token) can see and act "
                    "on your runs, unencrypted")
    ui.add_argument("--open", action="store_true", help="open it in a web browser")
    ui.set_defaults(func=_ui)

    doctor = command("doctor", help="check a settings file (doodad's or ours): what each key "
                     "means, what each mode lacks, which commands are here")
    doctor.add_argument("path", nargs="?", help="the settings file (default: the usual lookup)")
    doctor.set_defaults(func=_doctor)

    dist = command("dist", help="multi-GPU / multi-node helpers for inside a job")
    dist_sub = dist.add_subparsers(dest="dist_command", required=True, metavar="COMMAND")
    dist_sub.add_parser("info", help="scheduler, hosts and GPUs of this job").set_defaults(
        func=_dist_info)
    for name, func, text in (("launch-cmd", _dist_launch_cmd, "print the launch command"),
                             ("launch", _dist_launch, "run a program on every GPU of the job")):
        cmd = dist_sub.add_parser(name, help=text)
        cmd.add_argument("--procs-per-host", type=int, help="default: GPUs per host (or 1)")
        cmd.add_argument("--total", type=int, help="default: hosts x procs per host")
        cmd.add_argument("--cpu-bind", default="depth", help="CPU binding (default: depth)")
        cmd.add_argument("--depth", type=int, help="cores per process for --cpu-bind=depth")
        cmd.add_argument("cmd", nargs=argparse.REMAINDER, help="-- program and its arguments")
        cmd.set_defaults(func=func)
    return parser


EXIT_USAGE = 2  # (argparse's own)
EXIT_CLOSED_PIPE = 141  # the reader of the output went away (128 + SIGPIPE, as other tools)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``easylaunch`` command; returns the exit code: 0 done, 1 an error
    (a run not found, a refused action), 2 a usage error, 130 interrupted, 141 the output's
    reader went away (``easylaunch ls | head``)."""
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return EXIT_USAGE
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except EasyLaunchError as exc:
        print(f"easylaunch: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # what is still buffered for the closed pipe must not fail again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE


if __name__ == "__main__":
    sys.exit(main())
