"""What a resubmit with ``current_code`` / ``current_settings`` runs: a run's function found
again by its name in its launching script (imported as a module, so the script's
``if __name__ == "__main__":`` launches do not run again), or in its module; and the settings
file its launch read, read again.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import cloudpickle

from easylaunch.errors import LaunchError
from easylaunch.runs.importable import PROVIDED, _installed
from easylaunch.runs.payload import pickle_payload
from easylaunch.runs.process import is_notebook
from easylaunch.settings import ConfigArg, Settings, load_settings, override
from easylaunch_job.command import Command
from easylaunch_job.records import BUNDLE_DIR, FUNCTION_PKL

KEYWORDS_SOURCE = "run_experiment keywords"  # (how api names the settings a launch's keywords set)
SCRIPT_MODULE = "easylaunch_script_"  # (the launching script's name, imported as a module)
MAIN_MODULES = ("__main__", "__mp_main__")
_importing: list[str] = []  # the script being imported to find a function in, if any


def refuse_launches_while_importing() -> None:
    """Refuse a launch made by a script while it is imported to find its function again."""
    if _importing:
        raise LaunchError(
            f"{_importing[-1]} launches runs when it is imported, so its functions cannot be "
            "found again without launching them: put its launches under "
            "`if __name__ == \"__main__\":` (nothing was launched or resubmitted)")


def function_name(function: Any) -> dict | None:
    """What a launch records to find its function again: its module and qualified name."""
    if isinstance(function, Command):
        return None
    return {"module": getattr(function, "__module__", None),
            "qualname": getattr(function, "__qualname__", None)}


@contextlib.contextmanager
def in_folder(folder: str | None) -> Iterator[None]:
    """Work in ``folder`` (where the launch ran: its relative paths and modules beside it mean
    what they meant then), where it still exists."""
    here = os.getcwd()
    if folder and os.path.isdir(folder):
        os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(here)


def current_payload(launch: dict, code_dirs: list[str]) -> tuple[Any, bytes]:
    """A run's function as its launching script (or module) has it now, and it pickled as a
    launch pickles it; a command run's command (read again from its bundle: its code is its
    working folder's, snapshotted again)."""
    bundle = Path(launch["log_dir"]) / BUNDLE_DIR
    name = launch["request"].get("function") or _pickled_name(bundle, launch["run_id"])
    if name is None:
        command = cloudpickle.loads((bundle / FUNCTION_PKL).read_bytes())
        return command, pickle_payload(command, "the command", code_dirs)
    script = launch.get("script_name") or ""
    script_dir = os.path.dirname(script) or None
    with _fresh_modules([script_dir or "", *code_dirs, os.getcwd()]):
        with _argv(script_argv(launch)):
            module = _module_now(name, script, launch["run_id"], code_dirs)
        function = _named(module, name, script)
        registered = name["module"] == "__main__"
        if registered:  # (the script's own functions travel by value, as __main__'s do)
            cloudpickle.register_pickle_by_value(module)
        try:
            return function, pickle_payload(function, "the function", code_dirs, script_dir)
        finally:
            if registered:
                cloudpickle.unregister_pickle_by_value(module)


@contextlib.contextmanager
def _fresh_modules(folders: list[str]) -> Iterator[None]:
    """Inside, the Python modules this process imported from ``folders`` (the launching
    script's, the code folders, the launch's working folder) are imported again from their
    files as they are now: a process that imported them before (a notebook, a script that
    launched and now resubmits) finds and pickles the code as it is now, not as it imported
    it. Afterwards the process has its own modules back (what it holds keeps its identity:
    its later launches pickle them as before), and none of theirs imported inside."""
    roots = tuple(os.path.join(os.path.realpath(f), "") for f in folders if f)
    # (installed packages stay: all but a folder that holds one of ``folders``, such as a
    # project an old editable install put on the path)
    installed = tuple(os.path.join(str(f), "") for f in _installed())
    installed = tuple(f for f in installed if not any(r.startswith(f) for r in roots))

    def from_folders(name: str, module: Any) -> bool:
        return _reimportable(name, module, roots, installed)

    kept = {name: sys.modules.pop(name) for name, module in list(sys.modules.items())
            if from_folders(name, module)}
    importlib.invalidate_caches()  # (files added since the process last looked)
    try:
        yield
    finally:
        for name, module in list(sys.modules.items()):
            if from_folders(name, module) or name.startswith(SCRIPT_MODULE):
                del sys.modules[name]
        sys.modules.update(kept)
        for name, module in kept.items():  # (a package's attribute names its module again)
            parent, _, child = name.rpartition(".")
            if parent in sys.modules:
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(sys.modules[parent], child, module)


def _reimportable(name: str, module: Any, roots: tuple[str, ...],
                  installed: tuple[str, ...]) -> bool:
    """Whether ``module`` is Python source under one of ``roots`` that can be imported again:
    not ``__main__``, easylaunch's own, an ``installed`` package's, or a C extension (which
    cannot be imported twice)."""
    path = getattr(module, "__file__", None)
    if (not isinstance(path, str) or not path.endswith(".py") or name in MAIN_MODULES
            or name.split(".")[0] in PROVIDED):
        return False
    path = os.path.realpath(path)
    return path.startswith(roots) and not path.startswith(installed)


def _pickled_name(bundle: Path, run_id: str) -> dict | None:
    """The name of the function a run launched before launches recorded it, from its pickle
    (None: a command)."""
    try:
        function = cloudpickle.loads((bundle / FUNCTION_PKL).read_bytes())
    except Exception as exc:  # noqa: BLE001 - any failure to load means the same here
        raise LaunchError(f"run {run_id} does not say which function it ran, and its pickled "
                          f"function does not load here ({exc!r}): launch its script again"
                          ) from exc
    return function_name(function)


def script_argv(launch: dict) -> list[str]:
    """The launching script's ``sys.argv`` (a run resubmitted as launched before launches
    recorded it: the script's name alone)."""
    saved = launch["request"].get("script_argv")
    if saved:
        return saved
    if launch.get("resubmitted_from"):  # (its command_line is the resubmitting process's)
        return [launch.get("script_name") or ""]
    return launch.get("command_line") or []


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """``sys.argv`` as the launch had it (a script may read it at import)."""
    kept, sys.argv = sys.argv, list(argv)
    try:
        yield
    finally:
        sys.argv = kept


def _module_now(name: dict, script: str, run_id: str, code_dirs: list[str]) -> Any:
    """The module the function is in, imported now: the launching script (as a module, not
    ``__main__``), or the module it came from, with the script's folder first on sys.path as
    ``python script.py`` has it, then the code folders (whose snapshots the runs import
    from)."""
    what = f"{name['qualname']} (run {run_id}'s function)"
    if name["module"] == "__main__" and is_notebook(script):
        raise LaunchError(
            f"cannot find {what} again: it was defined in {script}, and a notebook's cells "
            "cannot be run from here. To run the current code, run the notebook's cell again "
            "(resume=True launches only what did not succeed); to run it as launched, "
            f"resubmit without --current-code")
    if name["module"] == "__main__" and not os.path.isfile(script):
        raise LaunchError(f"cannot find {what} again: its launching script {script} is gone; "
                          "restore it, or launch again")
    folders = [os.path.dirname(script), *code_dirs]
    sys.path[:0] = folders
    _importing.append(script)
    try:
        if name["module"] != "__main__":
            return importlib.import_module(name["module"])
        module_name = f"{SCRIPT_MODULE}{uuid.uuid4().hex[:8]}"
        spec = importlib.util.spec_from_file_location(module_name, script)
        if spec is None or spec.loader is None:  # (a script whose name does not end in .py)
            raise ImportError(f"{os.path.basename(script)} does not end in .py, so it cannot "
                              "be imported as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return module
    except LaunchError:
        raise
    except BaseException as exc:  # (SystemExit too: the script's own exit)
        where = script if name["module"] == "__main__" else f"module {name['module']}"
        raise LaunchError(f"cannot find {what} again: importing {where} failed: {exc!r}"
                          ) from exc
    finally:
        _importing.pop()
        for folder in folders:
            with contextlib.suppress(ValueError):
                sys.path.remove(folder)


def _named(module: Any, name: dict, script: str) -> Callable[..., Any]:
    """The function of qualified name ``name`` in ``module``, or an error naming both."""
    where = script if name["module"] == "__main__" else f"module {name['module']}"
    qualname = name["qualname"] or ""
    if "<locals>" in qualname or "<lambda>" in qualname:
        raise LaunchError(f"{qualname} was made inside another function, so it cannot be "
                          f"found again by its name in {where}: launch its script again")
    found: Any = module
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            raise LaunchError(f"{where} no longer defines {qualname}, the function the run "
                              "ran: restore it under that name, or launch the script again")
    if not callable(found):
        raise LaunchError(f"{qualname} in {where} is no longer a function")
    return found


def settings_now(saved: dict, config: ConfigArg) -> Settings:
    """The settings file a launch read, read again, with the settings its keywords set
    (``max_restarts=``, doodad's keywords) applied again. Where the launch read no file, the
    settings in effect now (``config``, or the lookup); where its file is gone, ``config``
    if given (another file, or a dict), else an error naming the file and the fix: the
    lookup's file could be another project's."""
    path = saved.get("settings_path")
    if path is not None and not os.path.isfile(path):
        if config is None or (not isinstance(config, Mapping) and os.path.realpath(
                os.path.expanduser(config)) == os.path.realpath(path)):
            raise LaunchError(f"the settings file {path} the runs were launched with is gone: "
                              "give the file to read instead (--config FILE; Python: config=)")
        path = None
    settings = load_settings(path or config)
    keywords = saved.get("keywords") or {}
    return override(settings, keywords, KEYWORDS_SOURCE) if keywords else settings
