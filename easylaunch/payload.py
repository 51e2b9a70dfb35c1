"""What travels to a run, pickled: a clear error when something cannot be pickled, and a
warning naming the largest parts when the payload is large (a captured dataset or model is
pickled into the bundle and loaded by every run)."""

from __future__ import annotations

import functools
import types
import warnings
from collections.abc import Mapping
from typing import Any

import cloudpickle

from easylaunch.errors import LaunchError

MB = 2**20
PARTS_NAMED = 3


def pickle_payload(obj: Any, what: str) -> bytes:
    """``obj`` pickled with cloudpickle, or a LaunchError saying why it cannot travel."""
    try:
        return cloudpickle.dumps(obj)
    except Exception as exc:  # noqa: BLE001 - every pickling failure gets the same advice
        raise LaunchError(
            f"{what} cannot be pickled, so it cannot travel to the run: {exc!r}. Objects such "
            "as open files, locks, sockets, generators and database connections must be "
            "created inside the function instead.") from exc


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
