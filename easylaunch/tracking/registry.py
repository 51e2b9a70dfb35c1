"""The registry of every launched run: SQLite in WAL mode, shared by all launching processes.

It outlives the launching process, so ``easylaunch ls`` and ``get_job`` work from anywhere.
A run's own status.json stays the record of how it ended; the registry keeps the last state seen,
refreshed whenever a command looks at the run.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import shlex
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from easylaunch.errors import EasyLaunchError
from easylaunch.runs.record import VARIANT_JSON
from easylaunch.runs.variants import variant_key
from easylaunch_job.records import DamagedRecord, read_json, read_status
from easylaunch_job.states import TERMINAL_STATES

SCHEMA_VERSION = 7
OPEN_WAIT_SECONDS = 30
NO_TIME = -1.0  # a time a run's record was read for and did not have
DEFAULT_PATH = "easylaunch/registry.sqlite3"
LARGE_VARIANT_KEY = "_large_variant"  # a variant kept as its size and digest (rows.py)
COLUMNS = ("id", "exp_name", "mode", "state", "log_dir", "remote_log_dir", "backend", "variant",
           "git_commit", "created", "updated", "resubmitted_from", "host", "restarts", "sweep",
           "started", "ended", "job_id", "reason", "command", "variant_key")
# What a refresh may change (the rest is written once, at launch).
UPDATABLE = frozenset({"state", "backend", "remote_log_dir", "restarts", "started", "ended",
                       "job_id", "reason"})
_SCHEMA = f"""
CREATE TABLE runs (
    id TEXT PRIMARY KEY, exp_name TEXT NOT NULL, mode TEXT NOT NULL, state TEXT NOT NULL,
    log_dir TEXT NOT NULL, remote_log_dir TEXT, backend TEXT NOT NULL DEFAULT '{{}}',
    variant TEXT NOT NULL DEFAULT '{{}}', git_commit TEXT, created REAL NOT NULL,
    updated REAL NOT NULL, resubmitted_from TEXT, host TEXT,
    restarts INTEGER NOT NULL DEFAULT 0, sweep TEXT, started REAL, ended REAL, job_id TEXT,
    reason TEXT, command TEXT, variant_key TEXT);
CREATE INDEX runs_by_created ON runs (created DESC);
CREATE INDEX runs_by_exp ON runs (exp_name, created DESC);
CREATE INDEX runs_by_sweep ON runs (sweep, created DESC);
CREATE INDEX runs_by_sweep_key ON runs (sweep, variant_key);
CREATE TABLE notices (key TEXT PRIMARY KEY, at REAL NOT NULL);
PRAGMA user_version = {SCHEMA_VERSION};
"""


class RegistryError(EasyLaunchError):
    """The registry cannot be opened or read; the message says what to do."""


class NoSuchRun(EasyLaunchError, LookupError):
    """No run (or more than one) matches the id or suffix given."""


NoSuchJob = NoSuchRun  # its name before 0.2, kept for scripts that catch it


@dataclass(frozen=True)
class Entry:
    """One registry row."""

    id: str
    exp_name: str
    mode: str
    state: str
    log_dir: str
    remote_log_dir: str | None
    backend: dict
    variant: dict
    git_commit: str | None
    created: float
    updated: float
    resubmitted_from: str | None
    host: str | None
    restarts: int  # attempts that ended in a restart
    sweep: str | None  # the run_sweep (or a script's run_experiment calls) it belongs to
    started: float | None  # its last attempt's start and end, as last seen
    ended: float | None  # (NO_TIME: its record, read, had none)
    job_id: str | None  # the scheduler's id (or instance) that runs it, as last seen
    reason: str | None = None  # why it ended as it did, in one line ("": it says nothing)
    command: str | None = None  # a command run's command line (shell words)
    variant_key: str | None = None  # its variant's canonical content (variants.variant_key)

    @classmethod
    def from_row(cls, row: tuple) -> Entry:
        values = dict(zip(COLUMNS, row, strict=True))
        values["backend"] = json.loads(values["backend"])
        values["variant"] = json.loads(values["variant"])
        return cls(**values)


def default_path() -> Path:
    """``$XDG_DATA_HOME/easylaunch/registry.sqlite3`` (``~/.local/share`` by default)."""
    data_home = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(data_home) / DEFAULT_PATH


class Registry:
    """Read and write the runs table; one connection per thread."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path).expanduser()
        self._local = threading.local()

    def _fail(self, problem: str) -> RegistryError:
        return RegistryError(
            f"the run registry {self.path} {problem}. Move the file away (a new registry is "
            "started in its place; the run folders themselves are untouched) or point "
            "REGISTRY_PATH in your settings at another file.")

    @property
    def db(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._open()
        return conn

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:  # private to its user, whatever the umask (SQLite's -wal and -shm files follow)
            if not self.path.exists():  # (no connection of this process can hold it open)
                with contextlib.suppress(FileExistsError):  # another process made it meanwhile
                    os.close(os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
            # Never open and close the file itself once it exists: closing any descriptor of
            # it drops the locks of every connection this process holds on it (POSIX), and
            # the next process to close the registry would then fold away and delete the
            # write-ahead log this process still uses.
            if self.path.stat().st_mode & 0o077:
                os.chmod(self.path, 0o600)
        except OSError as exc:
            raise self._fail(f"cannot be opened ({exc})") from exc
        deadline = time.monotonic() + OPEN_WAIT_SECONDS
        while True:
            try:
                return self._connect()
            except sqlite3.OperationalError as exc:
                # switching a new file to WAL can meet another process doing the same, and
                # SQLite answers "locked" without waiting: try again for a while
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise self._fail(f"cannot be read ({exc})") from exc
                time.sleep(0.05)
            except sqlite3.DatabaseError as exc:
                raise self._fail(f"cannot be read ({exc})") from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version < SCHEMA_VERSION:
                self._create_or_upgrade(conn)
            elif version > SCHEMA_VERSION:
                raise self._fail(f"was written by a newer easylaunch (schema {version}; this "
                                 f"one reads schema {SCHEMA_VERSION}); upgrade easylaunch")
            conn.execute(f"SELECT {', '.join(COLUMNS)} FROM runs LIMIT 1").fetchall()
        except BaseException:
            conn.close()
            raise
        return conn

    def _create_or_upgrade(self, conn: sqlite3.Connection) -> None:
        """Make the schema in a new file, or bring an older one up to this version."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
            # (read again under the lock: another process may have made or upgraded it while
            # this one waited, and then nothing is left to do)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version == 0 and tables:
                raise self._fail("holds tables but no schema version: it was written by an "
                                 "older easylaunch or another program")
            if version == 0:
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        conn.execute(statement)
            elif version < SCHEMA_VERSION:  # an older schema: add what it lacks
                added = [*(["restarts INTEGER NOT NULL DEFAULT 0"] if version < 2 else []),
                         *(["sweep TEXT", "started REAL", "ended REAL", "job_id TEXT"]
                           if version < 3 else []),
                         *(["reason TEXT"] if version < 4 else []),
                         *(["command TEXT"] if version < 5 else []),
                         *(["variant_key TEXT"] if version < 7 else [])]
                have = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
                for column in added:  # (a file marked older than its columns: kept as is)
                    if column.split()[0] not in have:
                        conn.execute(f"ALTER TABLE runs ADD COLUMN {column}")
                if version < 3:
                    conn.execute("CREATE INDEX runs_by_sweep ON runs (sweep, created DESC)")
                    conn.execute("CREATE TABLE notices (key TEXT PRIMARY KEY, "
                                 "at REAL NOT NULL)")
                if version < 6:
                    _restarts_again(conn)
                if version < 7:
                    _variant_keys(conn)
                    conn.execute("CREATE INDEX IF NOT EXISTS runs_by_sweep_key ON runs "
                                 "(sweep, variant_key)")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def add(self, entries: Iterable[dict[str, Any]]) -> None:
        """Insert runs (dicts with the registry's columns) in one transaction."""
        now = time.time()
        rows = []
        for e in entries:
            e = {"remote_log_dir": None, "backend": {}, "variant": {}, "git_commit": None,
                 "created": now, "resubmitted_from": None, "host": None, "restarts": 0,
                 "sweep": None, "started": None, "ended": None, "job_id": None, "reason": None,
                 "command": None, "variant_key": None, **e,
                 "updated": now}
            e["backend"] = json.dumps(e["backend"], default=repr)
            e["variant"] = json.dumps(e["variant"], default=repr)
            rows.append(tuple(e[c] for c in COLUMNS))
        with self.db:
            self.db.executemany(
                f"INSERT INTO runs ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
                rows)

    def update(self, run_id: str, **fields: Any) -> None:
        """Record what was last seen of a run (the fields of UPDATABLE)."""
        self.update_many([(run_id, fields)])

    def update_many(self, changes: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Apply ``(run id, fields)`` changes in one transaction."""
        now = time.time()
        with self.db:
            for run_id, fields in changes:
                unknown = set(fields) - UPDATABLE
                if unknown:
                    raise ValueError(f"cannot update registry column(s) {sorted(unknown)}")
                values = {k: json.dumps(v, default=repr) if k == "backend" else v
                          for k, v in fields.items()}
                sets = ", ".join(["updated = ?", *(f"{k} = ?" for k in values)])
                self.db.execute(f"UPDATE runs SET {sets} WHERE id = ?",
                                (now, *values.values(), run_id))

    def find(self, part: str) -> Entry:
        """The one run whose id is, starts with or ends with ``part``."""
        if not part:
            raise NoSuchRun("give a run id, or the start or end of one")
        rows = self.db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM runs WHERE id = ? OR id LIKE ? ESCAPE '\\' "
            "OR id LIKE ? ESCAPE '\\' ORDER BY created DESC LIMIT 11",
            (part, _escape_like(part) + "%", "%" + _escape_like(part))).fetchall()
        exact = [r for r in rows if r[0] == part]
        if exact:
            return Entry.from_row(exact[0])
        if not rows:
            if part in self.experiments():
                raise NoSuchRun(f"{part!r} is an experiment, not a run id: its runs are listed "
                                f"by `easylaunch ls --exp {shlex.quote(part)}`")
            raise NoSuchRun(f"no run id starts or ends with {part!r} (see `easylaunch ls`)")
        if len(rows) > 1:
            listed = ", ".join(f"{r[0]} ({r[1]})" for r in rows[:10])
            more = " and more" if len(rows) > 10 else ""
            raise NoSuchRun(f"{part!r} matches several runs: {listed}{more}; "
                            "give more characters")
        return Entry.from_row(rows[0])

    def find_sweep(self, part: str) -> str:
        """The one sweep id that is or starts with ``part``."""
        found = list(dict.fromkeys(e.sweep for e in self.list(sweep=part)[0]
                                   if e.sweep is not None))  # (always: the filter is a sweep)
        if part in found:
            return part
        if not found:
            raise NoSuchRun(f"no sweep id is or starts with {part!r}")
        if len(found) > 1:
            more = " and more" if len(found) > 10 else ""
            raise NoSuchRun(f"{part!r} matches several sweeps: {', '.join(found[:10])}{more}; "
                            "give more characters")
        return found[0]

    def of_sweep(self, sweep_id: str) -> builtins.list[Entry]:
        """The runs of the sweep ``sweep_id`` (the whole id)."""
        return [Entry.from_row(r) for r in self.db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM runs WHERE sweep = ?", (sweep_id,))]

    def recent_sweeps(self, exp_name: str, mode: str, limit: int
                      ) -> builtins.list[tuple[str, str]]:
        """The experiment's sweeps in this mode, most recently launched first: each sweep's id
        and the folder of its newest run."""
        return [(r[0], r[1]) for r in self.db.execute(
            "SELECT sweep, log_dir, MAX(created) FROM runs WHERE exp_name = ? AND mode = ? "
            "AND sweep IS NOT NULL GROUP BY sweep ORDER BY MAX(created) DESC LIMIT ?",
            (exp_name, mode, limit))]

    def _where(self, exp: str | None = None, mode: str | None = None,
               states: list[str] | None = None, since: float | None = None,
               sweep: str | None = None, reason: str | None = None) -> tuple[str, list]:
        """The WHERE clause (with its arguments) selecting the runs :meth:`list` lists."""
        where: list[str] = []
        args: list[Any] = []
        if exp is not None:
            known = self.db.execute("SELECT 1 FROM runs WHERE exp_name = ? LIMIT 1",
                                    (exp,)).fetchone()
            where.append("exp_name = ?" if known else "exp_name LIKE ? ESCAPE '\\'")
            args.append(exp if known else f"%{_escape_like(exp)}%")
        if sweep is not None:
            where.append("(sweep = ? OR sweep LIKE ? ESCAPE '\\')")
            args.extend([sweep, _escape_like(sweep) + "%"])
        if mode is not None:
            where.append("mode = ?")
            args.append(mode)
        if states:
            where.append(f"state IN ({', '.join('?' * len(states))})")
            args.extend(states)
        if since is not None:
            where.append("created >= ?")
            args.append(since)
        if reason is not None:
            where.append("reason = ?")
            args.append(reason)
        return (f" WHERE {' AND '.join(where)}" if where else ""), args

    def list(self, exp: str | None = None, mode: str | None = None,
             states: list[str] | None = None, since: float | None = None,
             limit: int | None = None, sweep: str | None = None,
             offset: int = 0, reason: str | None = None) -> tuple[list[Entry], int]:
        """Runs newest first, filtered, from the ``offset``-th on; also the number that matched
        before ``limit`` and ``offset``.

        ``exp`` is an experiment name, or (when no experiment has that name) a part of one;
        ``sweep`` a sweep id or a unique start of one; ``reason`` why runs ended, whole."""
        clause, args = self._where(exp, mode, states, since, sweep, reason)
        total = self.db.execute(f"SELECT COUNT(*) FROM runs{clause}", args).fetchone()[0]
        query = f"SELECT {', '.join(COLUMNS)} FROM runs{clause} ORDER BY created DESC"
        if limit is not None or offset:
            query += f" LIMIT {-1 if limit is None else int(limit)} OFFSET {int(offset)}"
        return [Entry.from_row(r) for r in self.db.execute(query, args)], total

    # (in the class body below, ``list`` is the method above: the type is ``builtins.list``)
    def reasons(self, limit: int = 8, **filters: Any) -> builtins.list[tuple[str, int]]:
        """The commonest reasons runs ended (as :meth:`list`'s filters select them), with how
        many runs each, most first."""
        clause, args = self._where(**filters)
        clause += " AND " if clause else " WHERE "
        return [tuple(r) for r in self.db.execute(
            f"SELECT reason, COUNT(*) AS n FROM runs{clause}reason IS NOT NULL AND reason != '' "
            f"GROUP BY reason ORDER BY n DESC, reason LIMIT {int(limit)}", args)]

    def sweep_states(self, sweeps: Iterable[str]) -> dict[str, builtins.list[str]]:
        """Each of these sweeps' runs' recorded states."""
        sweeps = list(dict.fromkeys(sweeps))
        found: dict[str, builtins.list[str]] = {s: [] for s in sweeps}
        for start in range(0, len(sweeps), 500):
            part = sweeps[start:start + 500]
            for sweep, state in self.db.execute(
                    f"SELECT sweep, state FROM runs WHERE sweep IN "
                    f"({', '.join('?' * len(part))})", part):
                found[sweep].append(state)
        return found

    def states(self, run_ids: Iterable[str]) -> dict[str, str]:
        """These runs' registry states (runs it has no row for left out)."""
        run_ids = list(dict.fromkeys(run_ids))
        found: dict[str, str] = {}
        for start in range(0, len(run_ids), 500):
            part = run_ids[start:start + 500]
            found.update(self.db.execute(
                f"SELECT id, state FROM runs WHERE id IN ({', '.join('?' * len(part))})", part))
        return found

    def forget(self, run_ids: Iterable[str]) -> int:
        """Delete these runs' rows (their folders are left alone); how many were deleted."""
        with self.db:
            return sum(self.db.execute("DELETE FROM runs WHERE id = ?", (run_id,)).rowcount
                       for run_id in run_ids)

    def claim(self, key: str) -> bool:
        """Take ``key`` (a notice to send) for this process: True for the first caller only,
        of every process sharing the registry."""
        with self.db:
            return self.db.execute("INSERT OR IGNORE INTO notices (key, at) VALUES (?, ?)",
                                   (key, time.time())).rowcount == 1

    def experiments(self) -> builtins.list[str]:
        """The experiment names of the registered runs, most recently launched first."""
        return [r[0] for r in self.db.execute(
            "SELECT exp_name FROM runs GROUP BY exp_name ORDER BY MAX(created) DESC")]


def _restarts_again(conn: sqlite3.Connection) -> None:
    """Runs that ended before schema 6 may show 0 restarts where their record has some
    (wait_all wrote the state alone): their restarts read again from their records, once,
    the rest of the row (end time, reason) left as it was; a run whose record is gone keeps
    its row as it is."""
    rows = conn.execute(f"SELECT id, log_dir FROM runs WHERE restarts = 0 AND state IN "
                        f"({', '.join('?' * len(TERMINAL_STATES))})",
                        sorted(TERMINAL_STATES)).fetchall()
    for run_id, log_dir in rows:
        restarts = read_status(log_dir).get("restarts")
        if isinstance(restarts, list) and restarts:
            conn.execute("UPDATE runs SET restarts = ? WHERE id = ?", (len(restarts), run_id))


def _variant_keys(conn: sqlite3.Connection) -> None:
    """Rows written before schema 7 get their variant's key: from the row's variant, or for a
    large one (kept as its digest) from its run folder's variant.json; a run whose folder is
    gone keeps none (a resume then launches its variant again)."""
    rows = conn.execute("SELECT id, log_dir, variant FROM runs").fetchall()
    for run_id, log_dir, text in rows:
        variant = json.loads(text)
        if isinstance(variant, dict) and LARGE_VARIANT_KEY in variant:
            try:
                variant = read_json(str(Path(log_dir) / VARIANT_JSON))
            except (OSError, DamagedRecord):
                continue
        if isinstance(variant, dict):
            conn.execute("UPDATE runs SET variant_key = ? WHERE id = ?",
                         (variant_key(variant), run_id))


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


_registries: dict[str, Registry] = {}


def open_registry(path: str | os.PathLike | None = None) -> Registry:
    """The registry at ``path`` (default: :func:`default_path`), opened and checked."""
    path = Path(path).expanduser() if path else default_path()
    key = str(path)
    if key not in _registries:
        registry = Registry(path)
        registry.db  # noqa: B018 - open now, so a broken file fails before anything launches
        _registries[key] = registry
    return _registries[key]
