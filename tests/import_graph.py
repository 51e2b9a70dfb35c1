"""easylaunch's imports of its own modules, read from the source (top-level and function-level
imports; those under ``if TYPE_CHECKING:`` left out): the layers they cross, their circles.
Used by test_shape and bench/bench_shape.py."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "easylaunch"

# Each part of the package and the layer it sits in: a module may import its own layer and
# those below. errors and checkpoint (a face on the job side's checkpoints) are usable by all;
# dist (a face users import, built on the modes' launchers) sits beside api; the package's
# __init__ (the public names) above everything.
LAYERS = {"errors": 0, "checkpoint": 0, "settings": 1, "runs": 2, "modes": 3, "tracking": 4,
          "api": 5, "results": 5, "dist": 5, "cli": 6, "dashboard": 6, "": 7}


@dataclass(frozen=True)
class Import:
    """One import of an easylaunch module by another."""

    importer: str
    imported: str
    line: int
    late: bool  # inside a function (run when it is called)

    def __str__(self) -> str:
        where = "a function-level import" if self.late else "an import"
        return f"{self.importer} (line {self.line}): {where} of {self.imported}"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    """Every module of easylaunch, by name."""
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _type_only(tree: ast.Module) -> set[int]:
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}


def _late(tree: ast.Module) -> set[int]:
    return {id(n) for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(node)}


def imports_of(name: str, path: Path, known: set[str]) -> list[Import]:
    """The easylaunch modules that module ``name`` imports at run time."""
    tree = ast.parse(path.read_text())
    type_only, late = _type_only(tree), _late(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            targets = {a.name for a in node.names} & known
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "easylaunch" and all(a.name == "__version__" for a in node.names):
                continue  # (the package's version: its root is imported before any module)
            targets = ({f"{node.module}.{a.name}" for a in node.names} & known
                       or {node.module} & known)
        else:
            continue
        found += [Import(name, t, node.lineno, id(node) in late) for t in sorted(targets)]
    return found


def all_imports() -> list[Import]:
    found = modules()
    return [i for name, path in found.items() for i in imports_of(name, path, set(found))]


def layer(module: str) -> int:
    """The layer of an easylaunch module (by its part: ``easylaunch.modes.ssh`` -> modes)."""
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def layer_violations(found: list[Import]) -> list[Import]:
    """The imports of a higher layer by a lower one."""
    return [i for i in found if layer(i.imported) > layer(i.importer)]


def circles(found: list[Import]) -> list[list[str]]:
    """Import circles among easylaunch's modules (each once, shortest path first)."""
    graph: dict[str, set[str]] = {name: set() for name in modules()}
    for i in found:
        if i.imported != i.importer:
            graph[i.importer].add(i.imported)
    loops, seen = [], set()
    for start in sorted(graph):
        frontier = [[start]]
        while frontier:
            path = frontier.pop(0)
            for nxt in sorted(graph[path[-1]]):
                if nxt == start and frozenset(path) not in seen:
                    seen.add(frozenset(path))
                    loops.append(path + [start])
                elif nxt not in path and len(path) < 8:
                    frontier.append(path + [nxt])
    return loops
