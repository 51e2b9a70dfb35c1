"""Whether the runs will be able to import the modules a pickled function names (cloudpickle
pickles a function or class of an importable module by reference: the run imports that module
again). Runs import from the code snapshots (CODE_DIRS_TO_MOUNT), the installed packages and
PYTHONPATH of where they run; a module the launching script imports from its own folder (or
the working folder) is sent by value instead, as the script's own functions are. The
interpreter's own standard library is always importable, wherever the build keeps it
(pyenv, conda, uv and python.org builds keep its C extensions in ``lib-dynload``)."""

from __future__ import annotations

import functools
import importlib.machinery
import os
import site
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path

from easylaunch.errors import LaunchError

# What every run has: the job side (job.pyz) and easylaunch's names a function may use
# (easylaunch.checkpoint, easylaunch.log_metrics: the job side provides them where easylaunch
# is not installed).
PROVIDED = frozenset({"easylaunch", "easylaunch_job"})


# The standard library by name: built in, frozen, or a file of the interpreter's own.
STANDARD = frozenset(sys.stdlib_module_names) | frozenset(sys.builtin_module_names)


def _folders(paths: Iterable[str]) -> set[Path]:
    return {Path(p).resolve() for p in paths if p}


def _dynload_folders(paths: dict[str, str]) -> list[str]:
    """The folders of the standard library's C extensions (``lib-dynload``), which sysconfig's
    ``paths`` do not name."""
    return [sysconfig.get_config_var("DESTSHARED") or "",
            *(os.path.join(paths[key], "lib-dynload") for key in ("stdlib", "platstdlib"))]


@functools.cache
def _installed() -> frozenset[Path]:
    """Where installed packages and the standard library live, with the folders .pth files
    there add (older editable installs); looked up once a process."""
    sites = [*site.getsitepackages(), *([site.getusersitepackages()]
                                        if site.ENABLE_USER_SITE else [])]
    interpreter = sysconfig.get_paths()
    paths = [*interpreter.values(), *_dynload_folders(interpreter), *sites, sys.prefix,
             sys.base_prefix]
    for folder in sites:
        for pth in Path(folder).glob("*.pth"):
            try:
                lines = pth.read_text().splitlines()
            except (OSError, UnicodeDecodeError):
                continue
            paths += [os.path.join(folder, line.strip()) for line in lines
                      if line.strip() and not line.startswith(("#", "import"))]
    return frozenset(_folders(paths))


def module_root(top: str) -> Path | None:
    """The sys.path folder the path finder finds a top-level module in (None: another finder
    finds it, as an editable install's or a zip's does, or it is built in)."""
    for entry in sys.path:
        folder = entry or os.getcwd()
        spec = importlib.machinery.PathFinder.find_spec(top, [folder])
        if spec is not None:
            return Path(folder).resolve() if spec.origin not in (None, "built-in") else None
    return None


def sorted_out(modules: Iterable[str], code_dirs: Iterable[str],
               script_dir: str | None) -> tuple[list[str], dict[str, Path]]:
    """Of the top-level modules named by reference: those to send by value (found in the
    launching script's folder or the working folder, outside the code snapshots), and those
    the runs could not import (name -> the folder they are found in here)."""
    tops = sorted({m.split(".")[0] for m in modules} - PROVIDED - STANDARD)
    if not tops:  # (a variant of plain data names none)
        return [], {}
    code = [Path(d) for d in code_dirs]
    fine = _installed() | _folders(map(str, code)) | _folders(
        os.environ.get("PYTHONPATH", "").split(os.pathsep))
    local = _folders([script_dir or "", os.getcwd()])
    by_value, missing = [], {}
    for top in tops:
        root = module_root(top)
        if root is None or root in fine or any(
                (d / f"{top}.py").is_file() or (d / top).is_dir() for d in code):
            continue  # (a code folder holding it by name: the snapshot is on the runs' path)
        if root in local:
            by_value.append(top)
        else:
            missing[top] = root
    return by_value, missing


def refuse(what: str, missing: dict[str, Path]) -> LaunchError:
    """The error for modules the runs could not import, naming each and its folder."""
    named = "; ".join(f"module {name!r} is in {root}" for name, root in missing.items())
    folders = ", ".join(sorted({str(root) for root in missing.values()}))
    return LaunchError(f"{what} uses code the runs could not import ({named}), which is neither "
                       f"in CODE_DIRS_TO_MOUNT nor installed: add {folders} to "
                       "CODE_DIRS_TO_MOUNT (or install the module where runs run)")
