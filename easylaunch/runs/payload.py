"""What travels to a run, pickled: a clear error when something cannot be pickled, and a
warning naming the largest parts when the payload is large (a captured dataset or model is
pickled into the bundle and loaded by every run)."""

from __future__ import annotations

import contextlib
import dis
import functools
import importlib
import io
import json
import linecache
import os
import pickle
import sys
import types
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import cloudpickle

from easylaunch.errors import LaunchError
from easylaunch.runs.importable import refuse, sorted_out
from easylaunch_job.sources import with_sources

MB = 2**20
PARTS_NAMED = 3


SOURCE_LIMIT = 2**20  # a source file larger than this travels without its lines
DYNAMIC_CODE = "<dynamic-code>"  # the file name cloudpickle gives code it pickles by value
# cloudpickle's own code reducer and by-reference rule (not public; None in a cloudpickle
# without them: code then keeps cloudpickle's file name, and the public rule decides)
_REDUCE_CODE = getattr(cloudpickle.cloudpickle, "_code_reduce", None)
_BY_REFERENCE = getattr(cloudpickle.cloudpickle, "_should_pickle_by_reference", None)


class _SourcedPickler(cloudpickle.Pickler):
    """cloudpickle, keeping the file name of code pickled by value (cloudpickle replaces it
    with "<dynamic-code>") and noting those files, whose text then travels with the payload."""

    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.DEFAULT_PROTOCOL)
        self.files: set[str] = set()
        self.modules: set[str] = set()  # of what is pickled by reference (runs import them)
        self.imports: set[str] = set()  # what by-value code imports in its body

    def reducer_override(self, obj: Any) -> Any:
        if _is_open_file(obj):
            raise _ArrivesChanged(obj)
        if isinstance(obj, types.CodeType) and _REDUCE_CODE is not None:
            self.files.add(obj.co_filename)
            self.imports.update(_imported(obj))
            constructor, args = _REDUCE_CODE(obj)
            return constructor, tuple(obj.co_filename if a == DYNAMIC_CODE else a for a in args)
        if isinstance(obj, (types.ModuleType, types.FunctionType, type)) and _by_reference(obj):
            self.modules.add(obj.__name__ if isinstance(obj, types.ModuleType)
                             else obj.__module__)
        return super().reducer_override(obj)


def _imported(code: types.CodeType) -> set[str]:
    """The modules ``code`` imports by absolute name (``import helpers`` in a function's
    body: level 0, the constant loaded two instructions before), for those in the launching
    folder to travel with it."""
    ops = list(dis.get_instructions(code))
    return {str(ins.argval) for i, ins in enumerate(ops)
            if ins.opname == "IMPORT_NAME" and i >= 2 and ops[i - 2].argval == 0}


class _ArrivesChanged(Exception):
    """Something that would not arrive as given (cloudpickle sends an open file's text)."""

    def __init__(self, obj: Any) -> None:
        super().__init__(obj)
        self.obj = obj


FILE_TYPES = (io.TextIOWrapper, io.BufferedReader, io.BufferedWriter, io.BufferedRandom,
              io.FileIO)  # what open() returns


def _is_open_file(obj: Any) -> bool:
    """A file open() returned, other than this process's stdin, stdout and stderr (which a
    run gets as its own)."""
    return isinstance(obj, FILE_TYPES) and not any(
        obj is s for s in (sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__,
                           sys.__stderr__))


def _by_reference(obj: Any) -> bool:
    """Whether cloudpickle pickles ``obj`` by reference (the run imports its module again);
    a function defined inside another, or in ``__main__``, travels by value."""
    if _BY_REFERENCE is None:
        return getattr(obj, "__module__", "__main__") != "__main__"
    try:
        return bool(_BY_REFERENCE(obj))
    except Exception:  # noqa: BLE001 - an object cloudpickle cannot place: it says so itself
        return False


class _Sources:
    """Pickled after the payload: the text of the files its by-value code came from."""

    def __init__(self, pickler: _SourcedPickler) -> None:
        self.pickler = pickler

    def __reduce__(self) -> tuple:
        sources = {}
        for name in sorted(self.pickler.files):
            text = _source(name)
            if text is not None:
                sources[name] = text
        return dict, (sources,)


def _source(name: str) -> str | None:
    """The text of a source file, or of code only ``linecache`` holds (a notebook's cell,
    which IPython registers there); None if neither has it, or it is too large."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if os.path.isfile(name):
            if os.path.getsize(name) <= SOURCE_LIMIT:
                with open(name, encoding="utf-8") as f:
                    return f.read()
            return None
    entry = linecache.cache.get(name)
    if entry is None or len(entry) < 3:
        return None
    text = "".join(entry[2])
    return text if len(text) <= SOURCE_LIMIT else None


def _dumps(obj: Any, modules: Sequence[types.ModuleType] = ()) -> tuple[bytes, _SourcedPickler]:
    """``obj`` as a call of the job side's ``with_sources`` (loading it gives ``obj`` back with
    the source lines of its by-value code known to tracebacks, and ``modules``, sent by value,
    importable by name), and the pickler (what it saw)."""
    buffer = io.BytesIO()
    pickler = _SourcedPickler(buffer)
    pickler.dump(_Call(with_sources, obj, _Sources(pickler), list(modules)))
    return buffer.getvalue(), pickler


class _Call:
    """Pickles as ``function(*args)``: what loading it returns."""

    def __init__(self, function: Any, *args: Any) -> None:
        self.function, self.args = function, args

    def __reduce__(self) -> tuple:
        return self.function, self.args


def pickle_payload(obj: Any, what: str, code_dirs: Sequence[str] = (),
                   script_dir: str | None = None) -> bytes:
    """``obj`` pickled with cloudpickle (with the source lines of code it carries by value),
    or a LaunchError saying why it cannot travel. Modules it names that the runs could not
    import (see :mod:`easylaunch.runs.importable`) are refused, or, found in the launching script's
    folder, sent by value; so are the modules there that its by-value code imports in a body
    (where one cannot be pickled, the run imports it by name, as before)."""
    try:
        data, pickler = _dumps(obj)
        by_value, missing = sorted_out(pickler.modules, code_dirs, script_dir)
        if missing:
            raise refuse(what, missing)
        imported = _local_imports(pickler.imports, code_dirs, script_dir)
        if imported:  # (a module that cannot travel: the run imports it as before, if it can)
            with contextlib.suppress(Exception):
                return _by_value(obj, by_value, imported)
        if by_value:
            data = _by_value(obj, by_value, [])
        return data
    except LaunchError:
        raise
    except _ArrivesChanged as exc:
        file_name, where = getattr(exc.obj, "name", None), _locate(obj, what)
        raise LaunchError(
            f"{where} is an open file: it cannot reach a run as the file (at most a copy of "
            "its text would, as a StringIO). Pass its path instead"
            + (f" ({file_name!r})" if isinstance(file_name, str) else "")
            + " and open it inside the function.") from None
    except Exception as exc:  # noqa: BLE001 - every pickling failure gets the same advice
        raise LaunchError(
            f"{_locate(obj, what)} cannot be pickled, so it cannot travel to the run: "
            f"{exc!r}. Objects such as open files, locks, sockets, generators and database "
            "connections must be created inside the function instead (pass what makes them: "
            "a path, an address).") from exc


def _by_value(obj: Any, by_value: list[str], imported: list[str]) -> bytes:
    """``obj`` pickled with the modules ``by_value`` names (and the packages of those
    ``imported``) sent by value, ``imported`` registered by name in the run."""
    names = sorted({*by_value, *(name.split(".")[0] for name in imported)})
    for name in names:
        cloudpickle.register_pickle_by_value(sys.modules[name])
    try:
        return _dumps(obj, [sys.modules[name] for name in imported])[0]
    finally:
        for name in names:
            cloudpickle.unregister_pickle_by_value(sys.modules[name])


def _local_imports(names: set[str], code_dirs: Sequence[str],
                   script_dir: str | None) -> list[str]:
    """Of the modules by-value code imports in its body, those beside the launching script (or
    in the working folder), imported here, each with its parent packages: they travel by
    value, as the modules its globals name do, so the run imports them wherever it runs."""
    wanted = []
    for name in sorted(names):
        by_value, _ = sorted_out([name], code_dirs, script_dir)
        if not by_value:
            continue
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the run raises the same when it imports it
            continue
        parts = name.split(".")
        wanted += [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
    return list(dict.fromkeys(wanted))


def _fails(obj: Any) -> bool:
    """Whether ``obj`` alone cannot travel."""
    try:
        _SourcedPickler(io.BytesIO()).dump(obj)
    except Exception:  # noqa: BLE001 - whatever stops it
        return True
    return False


def _children(obj: Any, where: str) -> dict[str, Any]:
    """What ``obj`` holds, each by its path from ``where``: ``variants[0]["data"]["fh"]``,
    ``the function's captured variable 'fh'``."""
    if isinstance(obj, Mapping):
        return {f"{where}[{json.dumps(k) if isinstance(k, str) else repr(k)}]": v
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return {f"{where}[{i}]": v for i, v in enumerate(obj)}
    try:
        return {f"{where}'s {name}": part for name, part in _parts(obj).items()}
    except Exception:  # noqa: BLE001 - an object that will not show its parts: not searched
        return {}


def _locate(obj: Any, where: str, depth: int = 8) -> str:
    """The path (from ``where``) of the innermost part of ``obj`` that cannot travel;
    ``where`` when no part alone fails."""
    for path, part in _children(obj, where).items() if depth else ():
        if part is not obj and _fails(part):
            return _locate(part, path, depth - 1)
    return where


def _parts(obj: Any) -> dict[str, Any]:
    """The named objects ``obj`` carries when pickled: a function's captured variables,
    referenced globals and defaults; a partial's arguments; a mapping's items; an object's
    attributes."""
    if isinstance(obj, functools.partial):
        return {"partial's function": obj.func,
                **{f"partial's argument {i}": a for i, a in enumerate(obj.args)},
                **{f"partial's argument {k}=": v for k, v in obj.keywords.items()}}
    if isinstance(obj, types.MethodType):
        return {"the bound object": obj.__self__, **_parts(obj.__func__)}
    if isinstance(obj, types.FunctionType):
        code = obj.__code__
        parts = {f"captured variable {name!r}": cell.cell_contents
                 for name, cell in zip(code.co_freevars, obj.__closure__ or (), strict=True)
                 if _filled(cell)}
        parts.update({f"global {name!r}": obj.__globals__[name] for name in code.co_names
                      if name in obj.__globals__
                      and not isinstance(obj.__globals__[name], types.ModuleType)})
        parts.update({f"default of {name!r}": value for name, value in zip(
            code.co_varnames[code.co_argcount - len(obj.__defaults__ or ()):],
            obj.__defaults__ or (), strict=True)})
        parts.update({f"default of {k!r}": v for k, v in (obj.__kwdefaults__ or {}).items()})
        return parts
    if isinstance(obj, Mapping):
        return {f"key {k!r}": v for k, v in obj.items()}
    return {f"attribute {k!r}": v for k, v in getattr(obj, "__dict__", {}).items()}


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def largest_parts(obj: Any, count: int = PARTS_NAMED) -> list[tuple[str, int]]:
    """The ``count`` largest parts of ``obj`` by pickled size, as (name, bytes)."""
    sizes = []
    for name, part in _parts(obj).items():
        try:
            sizes.append((name, len(cloudpickle.dumps(part))))
        except Exception:  # noqa: BLE001 - a part that cannot be pickled alone is skipped
            continue
    return sorted(sizes, key=lambda s: -s[1])[:count]


def warn_if_large(obj: Any, size: int, what: str, limit_mb: float) -> None:
    """Warn when ``obj`` pickled to more than ``limit_mb`` MB, naming its largest parts."""
    if size <= limit_mb * MB:
        return
    parts = ", ".join(f"{name} ({n / MB:.1f} MB)" for name, n in largest_parts(obj))
    warnings.warn(
        f"{what} pickles to {size / MB:.1f} MB (LARGE_PAYLOAD_WARN_MB is {limit_mb:g})"
        f"{'; largest parts: ' + parts if parts else ''}. Every run stores and loads it: "
        "pass a file path instead and load the data inside the function.",
        UserWarning, stacklevel=4)
