"""What ``easylaunch init`` writes: a short settings file of the keys most users change, made
from the template's own text, and where the settings lookup would find it."""

from __future__ import annotations

import ast
import os
import shlex
import textwrap
from pathlib import Path

from easylaunch.errors import SettingsError
from easylaunch.settings import (
    ENV_CONFIG,
    LOCAL_CONFIG_NAME,
    TEMPLATE_PATH,
    USER_CONFIG_PATH,
    find_config_path,
)

# What most users change: these are written (as the template has them).
STARTER_KEYS = ("CODE_DIRS_TO_MOUNT", "NON_CODE_DIRS_TO_MOUNT", "LOCAL_LOG_DIR", "MAX_RESTARTS",
                "CLUSTERS", "SLURM_CONFIGS")


def _template_blocks() -> dict[str, str]:
    """Each key's text in the template: its comment lines and its assignment."""
    lines = TEMPLATE_PATH.read_text().splitlines(keepends=True)
    blocks = {}
    for node in ast.parse("".join(lines)).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            start = node.lineno - 1
            while start > 0 and lines[start - 1].startswith("# ") and \
                    not lines[start - 1].startswith("# ---"):
                start -= 1
            blocks[node.target.id] = "".join(lines[start:node.end_lineno])
    return blocks


def starter_text() -> str:
    """A short settings file: the keys most users change, then where every other one is."""
    blocks = _template_blocks()
    others = textwrap.fill(", ".join(k for k in blocks if k not in STARTER_KEYS), width=96,
                           initial_indent="# ", subsequent_indent="# ")
    return (f'"""easylaunch settings, written by `easylaunch init`.\n\n'
            f"Only what most users change is here. Every other key, with its default and what "
            f"it does, is in\n{TEMPLATE_PATH}\n(copy a key from there to change it). "
            f'`easylaunch config` shows the settings in effect\nand marks the ones that differ '
            f'from the defaults.\n"""\n\n'
            + "\n".join(blocks[key] for key in STARTER_KEYS)
            + f"\n# Other keys (see the template):\n{others}\n")


def write_template(dest: str | os.PathLike) -> Path:
    """Write a short settings file (:func:`starter_text`); never overwrite an existing file."""
    dest = Path(dest).expanduser()
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with open(dest, "x") as f:
            f.write(starter_text())
    except FileExistsError:
        raise SettingsError(f"{dest} already exists; edit it, or move it away first") from None
    return dest


def where_found(path: Path) -> str:
    """Whether the settings lookup finds ``path`` from here, in words (for ``init``)."""
    try:
        found = find_config_path()
    except SettingsError as exc:
        return f"but easylaunch cannot read settings from here: {exc}"
    if found is not None and found.resolve() == path.resolve():
        return "easylaunch reads it from here"
    if found is not None:
        why = f"{ENV_CONFIG} names it" if os.environ.get(ENV_CONFIG) else "it comes first"
        return (f"but from here easylaunch reads {found} instead ({why}; see the lookup order "
                f"in {TEMPLATE_PATH})")
    return (f"but easylaunch does not look there: pass config={os.fspath(path)!r}, set "
            f"{ENV_CONFIG}={shlex.quote(os.fspath(path))}, or write it to "
            f"./{LOCAL_CONFIG_NAME} or {USER_CONFIG_PATH}")
