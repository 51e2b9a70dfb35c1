"""The code's shape, as issue 26 counts it (no timing): the largest module, the largest module
of the job side, how deep every mode's class sits below Mode, and the import circles between
easylaunch's modules (late imports included, type-only imports not).

Usage: python bench/bench_shape.py
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from easylaunch.modes import MODES, get_mode
from easylaunch.modes.base import Mode

REPO = Path(__file__).resolve().parent.parent


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def lines(package: str) -> list[tuple[int, str]]:
    return sorted(((len(p.read_text().splitlines()), module_name(p))
                   for p in (REPO / package).rglob("*.py")), reverse=True)


def imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports at run time (late imports included)."""
    tree = ast.parse(path.read_text())
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names} & known
        elif isinstance(node, ast.ImportFrom) and node.module:
            subs = {f"{node.module}.{a.name}" for a in node.names} & known
            found |= subs or ({node.module} & known)
    return found


def circles() -> list[list[str]]:
    """Import circles among easylaunch's modules (each once, shortest path first)."""
    paths = {module_name(p): p for p in (REPO / "easylaunch").rglob("*.py")}
    graph = {name: imports(path, set(paths)) for name, path in paths.items()}
    found, seen = [], set()
    for start in sorted(graph):
        frontier = [[start]]
        while frontier:
            path = frontier.pop(0)
            for nxt in sorted(graph[path[-1]]):
                if nxt == start and frozenset(path) not in seen:
                    seen.add(frozenset(path))
                    found.append(path + [start])
                elif nxt not in path and len(path) < 8:
                    frontier.append(path + [nxt])
    return found


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
    print(f"largest module: {host[0][1]} {host[0][0]} lines (goal < 500); next: "
          + ", ".join(f"{n} {c}" for c, n in host[1:4]))
    print(f"largest job-side module: {job[0][1]} {job[0][0]} lines (goal < 400)")
    depths = mode_depths()
    print("mode classes below Mode: " + ", ".join(f"{n} {d}" for n, d in depths.items())
          + f" (deepest {max(depths.values())}; goal <= 3)")
    found = circles()
    print(f"import circles: {len(found)}" + "".join(f"\n  {' -> '.join(c)}" for c in found))


if __name__ == "__main__":
    main()
