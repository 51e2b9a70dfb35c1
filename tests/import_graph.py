"""easylaunch's imports of its own modules, read from the source (top-level and function-level
imports; those under ``if TYPE_CHECKING:`` left out): the layers they cross, their circles.
Used by test_shape and bench/bench_shape.py. And the core path (what a core install imports,
from its entry points): the optional libraries it must not import at module level
(test_core_install)."""

from __future__ import annotations

import ast
import re
import sys
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


# -- the core path: what a core install (no extras) imports ----------------------------------

JOB_SIDE = REPO / "easylaunch_job"
HOOK = REPO / "docs" / "hooks" / "reference.py"


@dataclass(frozen=True)
class OptionalImport:
    """A module-level import of an optional library by a module on the core path."""

    module: str
    line: int
    name: str  # the library's top-level name
    extra: str  # an extra of pyproject.toml that brings it

    def __str__(self) -> str:
        return (f"{self.module} (line {self.line}) imports {self.name} at its top; {self.name} "
                f"comes with the extra {self.extra!r}: import it where it is used, with "
                "easylaunch.errors.needed")


def _guarded(tree: ast.Module) -> set[int]:
    """The nodes inside a ``try`` that catches ImportError (an optional import, handled)."""
    return {id(n) for node in ast.walk(tree) if isinstance(node, ast.Try)
            and any("ImportError" in ast.unparse(h.type or ast.Name("BaseException"))
                    for h in node.handlers)
            for part in node.body for n in ast.walk(part)}


def top_imports(path: Path) -> list[tuple[str, int]]:
    """The modules ``path`` imports when it is imported: (name, line), leaving out imports in
    functions, under ``if TYPE_CHECKING:`` and in a ``try`` that catches ImportError."""
    tree = ast.parse(path.read_text())
    left_out = _type_only(tree) | _late(tree) | _guarded(tree)
    found = []
    for node in ast.walk(tree):
        if id(node) in left_out:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(f"{node.module}.{a.name}", node.lineno) for a in node.names]
    return found


def all_modules() -> dict[str, Path]:
    """Every module of easylaunch and of its job side (easylaunch_job), by name."""
    return {module_name(p): p for package in (PACKAGE, JOB_SIDE)
            for p in sorted(package.rglob("*.py"))}


def core_entry_points() -> set[str]:
    """What a core install imports first: the package, the CLI and each command's module,
    each public name's module (easylaunch's and easylaunch.results', imported on first use),
    each mode's module, the job side, and what the docs' hook imports (in its functions too:
    they run at every build)."""
    import easylaunch
    import easylaunch.results
    from easylaunch.cli import COMMAND_MODULES
    from easylaunch.modes import MODES

    hook = [name for name, _ in top_imports(HOOK)] + [
        node.module for node in ast.walk(ast.parse(HOOK.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module]
    return ({"easylaunch", "easylaunch.cli"}
            | {f"easylaunch.cli.{m}" for m in COMMAND_MODULES.values()}
            | set(easylaunch._MODULE_OF.values()) | {m.split(":")[0] for m in MODES.values()}
            | {f"easylaunch.results.{m}" for m in easylaunch.results._MODULE_OF.values()}
            | {name for name in all_modules() if name.startswith("easylaunch_job")}
            | {name for name in hook if name.split(".")[0] == "easylaunch"})


def _own(name: str, known: dict[str, Path]) -> list[str]:
    """The modules of ours that importing ``name`` runs: it (or, for ``from a import b`` with
    b a name, its package a) and the packages above it."""
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)
            if ".".join(parts[:i]) in known]


def core_path() -> dict[str, Path]:
    """Every module imported, at module level, from the core entry points."""
    known = all_modules()
    seen: dict[str, Path] = {}
    todo = sorted(core_entry_points())
    while todo:
        for name in _own(todo.pop(), known):
            if name not in seen:
                seen[name] = known[name]
                todo += [imported for imported, _ in top_imports(known[name])]
    return seen


def dist_name(requirement: str) -> str:
    """The distribution a requirement names, as pip compares names: ``mlflow-skinny``."""
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _extras_of(requirement: str) -> set[str]:
    """The extras a requirement asks for: ``{"python"}`` of ``mkdocstrings[python]>=0.26``."""
    named = re.search(r"\[([^\]]*)\]", requirement.split(";")[0])
    return {e.strip() for e in named.group(1).split(",")} if named else set()


def requirement_closure(requirements: list[str]) -> set[str]:
    """The distributions these requirements bring (with the extras they ask for), as installed
    here; one not installed here stands for itself."""
    from importlib import metadata

    seen: set[tuple[str, str]] = set()  # (distribution, extra; "": its plain requirements)
    found: set[str] = set()
    todo = list(requirements)
    while todo:
        requirement = todo.pop()
        dist = dist_name(requirement)
        new = {(dist, e) for e in {"", *_extras_of(requirement)}} - seen
        if dist == "easylaunch" or not new:
            continue
        seen |= new
        found.add(dist)
        try:
            requires = metadata.requires(dist) or []
        except metadata.PackageNotFoundError:
            continue
        asked = {e for _, e in new}
        todo += [r for r in requires
                 if set(re.findall(r"extra\s*==\s*[\"']([^\"']+)", r) or [""]) & asked]
    return found


def optional_libraries(pyproject: dict) -> dict[str, str]:
    """Each top-level name an extra of ``pyproject`` brings (with what its libraries need)
    and the core dependencies do not, and one extra that brings it."""
    from importlib import metadata

    modules_of: dict[str, set[str]] = {}
    for top, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(dist.lower().replace("_", "-"), set()).add(top)

    def names(dists: set[str]) -> set[str]:
        return {n for d in dists for n in modules_of.get(d, {d.replace("-", "_")})}

    core = names(requirement_closure(pyproject["project"]["dependencies"]))
    left_out = core | sys.stdlib_module_names
    optional: dict[str, str] = {}
    extras = pyproject["project"]["optional-dependencies"].items()
    # the extra that names a library itself, else the first in the file that brings it
    for dists in (lambda reqs: {dist_name(r) for r in reqs} - {"easylaunch"},
                  requirement_closure):
        for extra, requirements in extras:
            for name in sorted(names(dists(requirements)) - left_out):
                optional.setdefault(name, extra)
    return {name: extra for name, extra in optional.items() if not name.startswith("_")}


def optional_imports(path_of: dict[str, Path], optional: dict[str, str]) -> list[OptionalImport]:
    """The module-level imports of optional libraries by these modules."""
    return [OptionalImport(module, line, imported.split(".")[0], optional[imported.split(".")[0]])
            for module, path in sorted(path_of.items())
            for imported, line in top_imports(path) if imported.split(".")[0] in optional]
