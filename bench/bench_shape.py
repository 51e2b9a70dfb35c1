"""The code's shape, as issues 26, 40 and 50 count it (no timing): the largest module, the
largest module of the job side, functions over 50 lines, how deep every mode's class sits below
Mode, the package root's entries, a scheduler's members, its small modules, and easylaunch's
imports of its own modules (late imports included, type-only imports not): their circles,
those inside functions, those of a higher layer.

Usage: python bench/bench_shape.py
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

from easylaunch.modes import MODES, get_mode
from easylaunch.modes.base import Mode

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import import_graph  # noqa: E402

TEMPLATE = "easylaunch.settings.template"  # (config_template.py: the settings users copy)
FACES = {"__init__", "__main__", "api", "checkpoint", "dist", "errors"}  # modules users import


def lines(package: str) -> list[tuple[int, str]]:
    return sorted(((len(p.read_text().splitlines()), import_graph.module_name(p))
                   for p in (REPO / package).rglob("*.py")), reverse=True)


def long_functions(limit: int = 50) -> list[tuple[int, str]]:
    """Functions (and methods) over ``limit`` lines of code, in both packages: from the
    signature to the end, less the docstring."""
    found = []
    for package in ("easylaunch", "easylaunch_job"):
        for path in (REPO / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    count = (node.end_lineno or node.lineno) - node.lineno + 1
                    if ast.get_docstring(node) is not None:
                        doc = node.body[0]
                        count -= (doc.end_lineno or doc.lineno) - doc.lineno + 1
                    if count > limit:
                        found.append((count, f"{import_graph.module_name(path)}.{node.name}"))
    return sorted(found, reverse=True)


def root_entries() -> list[str]:
    """What the package root holds (caches left out)."""
    return sorted(p.name for p in (REPO / "easylaunch").iterdir() if p.name != "__pycache__")


def small_modules(limit: int = 40) -> list[tuple[int, str]]:
    """Modules under ``limit`` lines that are not a package's face."""
    return [(count, name) for count, name in lines("easylaunch") if count < limit
            and name.rsplit(".", 1)[-1] not in FACES
            and not (REPO / name.replace(".", "/") / "__init__.py").is_file()]


def depth(cls: type) -> int:
    """How many classes below Mode ``cls`` is (along its longest line of bases)."""
    if cls is Mode:
        return 0
    return 1 + max(depth(base) for base in cls.__bases__ if issubclass(base, Mode))


def mode_depths() -> dict[str, int]:
    depths = {}
    for name in MODES:
        try:
            kind = get_mode(name)
        except ImportError:  # a cloud SDK not installed
            continue
        cls = kind if isinstance(kind, type) else getattr(kind, "cls", None)
        if cls is None:  # an entry that picks a class (local): its classes
            module = importlib.import_module(MODES[name].split(":")[0])
            cls = next(v for v in vars(module).values()
                       if isinstance(v, type) and issubclass(v, Mode) and v is not Mode)
        depths[name] = depth(cls)
    from easylaunch.modes.local.detached import DetachedLocalMode

    depths["local (detached)"] = depth(DetachedLocalMode)
    return depths


def main() -> None:
    host, job = lines("easylaunch"), lines("easylaunch_job")
    template = next(count for count, name in host if name == TEMPLATE)
    host = [(count, name) for count, name in host if name != TEMPLATE]
    print(f"largest module: {host[0][1]} {host[0][0]} lines (goal < 500); next: "
          + ", ".join(f"{n} {c}" for c, n in host[1:4])
          + f" (the settings template users copy, config_template.py: {template})")
    print(f"largest job-side module: {job[0][1]} {job[0][0]} lines (goal < 400)")
    long = long_functions()
    print(f"functions over 50 lines: {len(long)} (goal <= 3)"
          + "".join(f"\n  {name} {count}" for count, name in long))
    depths = mode_depths()
    print("mode classes below Mode: " + ", ".join(f"{n} {d}" for n, d in depths.items())
          + f" (deepest {max(depths.values())}; goal <= 3)")
    entries = root_entries()
    print(f"entries at the package root: {len(entries)} (goal <= 12): {', '.join(entries)}")
    from easylaunch.modes.schedulers import Broadcast, Packing, Scheduler, Shells

    core = sorted(Scheduler.__abstractmethods__) + ["NAME", "SIDE", "OPTIONS"]
    optional = [n for n in vars(Scheduler) if not n.startswith("_") and n not in core
                and n not in ("OTHER_WAYS", "SCRIPT_SUFFIX")] + ["OTHER_WAYS", "SCRIPT_SUFFIX"]
    capabilities = {c.__name__: len(c.__abstractmethods__) for c in (Shells, Packing, Broadcast)}
    print(f"members a scheduler must define: {len(core)} (goal <= 10); with defaults: "
          f"{len(optional)}; capabilities: {capabilities}")
    linked = (REPO / "easylaunch" / "settings" / "template.py").resolve()
    print(f"config_template.py at the top level: {(REPO / 'config_template.py').is_file()}; "
          f"settings/template.py is it: {linked == REPO / 'config_template.py'}")
    small = small_modules()
    print(f"modules under 40 lines that are not a face: {len(small)} (goal 0)"
          + "".join(f"\n  {name} {count}" for count, name in small))
    found = import_graph.all_imports()
    loops = import_graph.circles(found)
    print(f"import circles: {len(loops)}" + "".join(f"\n  {' -> '.join(c)}" for c in loops))
    late = [i for i in found if i.late]
    print(f"function-level imports of easylaunch's own modules: {len(late)} (goal <= 10)"
          + "".join(f"\n  {i}" for i in late))
    wrong = import_graph.layer_violations(found)
    print(f"imports of a higher layer: {len(wrong)} (goal 0)" + "".join(f"\n  {i}" for i in wrong))


if __name__ == "__main__":
    main()
