"""Docs that cannot rot: the getting-started and guide pages run as a reader runs them, and the
reference pages have an entry for every setting and every command.

How a page's fenced code blocks are read (the convention the pages keep):

- A ```` ```python title="NAME" ```` (or bash) block is a file the reader saves: it is written to
  NAME in the page's working folder (``~`` is the test's home), not run.
- Any other ```` ```python ```` block is a complete script, run with the venv's Python; a
  ```` ```bash ```` block is shell commands, run with ``bash -euo pipefail``. Each must exit 0.
  The blocks of a page run in order, in one folder, as a reader following it would; the
  ``.venv/bin`` of this Python comes first on PATH (the reader activated the venv).
- A block right after ``<!-- fragment: WHY -->`` is a fragment (part of a script, a settings
  excerpt, something that needs a GPU or a cloud account): not run. WHY says why, and which
  test covers it where one does.
- ``<!-- installs: WHY -->``: an install step; the suite runs in the .venv scripts/setup.sh
  made, so it is not run here (a reader's run of the page on a fresh clone runs it).
- ``<!-- runs until: TEXT -->``: a command that serves until stopped (``easylaunch ui``): it
  runs until its output shows TEXT, then gets Ctrl-C.
- ```` ```text ```` and other languages are output or formats, never run.

Where a page names the reader's own machines (a cluster's host, a Python there), SUBSTITUTE
replaces them with the services the suite starts, and fails if the page no longer holds them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO_DIR, SSH_DIR
from helpers import docs_reference

DOCS = REPO_DIR / "docs"
RUN_PAGES = ["getting-started.md", "modes/slurm.md",
             *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "guides").glob("*.md"))]

# The services a page's blocks need (conftest's fixtures; missing ones skip, and fail in CI).
NEEDS = {
    "getting-started.md": ("slurm_cluster", "ssh_cluster"),
    "guides/commands.md": ("slurm_cluster",),
    "guides/dry-runs.md": ("slurm_cluster",),
    "guides/environments.md": ("slurm_cluster",),
    "guides/multi-gpu.md": ("slurm_cluster",),
    "guides/pools.md": ("slurm_cluster",),
    "modes/slurm.md": ("slurm_cluster", "ssh_cluster"),
}

# The reader's machines, as the pages name them -> the test's.
SUBSTITUTE = {
    "getting-started.md": {
        'host="login.mycluster.edu"':
            f'host="easylaunch-test-cluster", ssh_config="{SSH_DIR / "config"}"',
        '"~/venvs/exp/bin/python"': '"~/venv/bin/python"',
    },
    "modes/slurm.md": {
        'host="login.mycluster.edu"':
            f'host="easylaunch-test-cluster", ssh_config="{SSH_DIR / "config"}"',
        'python="~/venvs/exp/bin/python"': 'python="~/venv/bin/python"',
        # (the suite runs as root: root's account on the test cluster)
        'account_name="mylab"': 'account_name="root"',
    },
}

BLOCK_TIMEOUT = 180


@dataclass
class Block:
    lang: str
    body: str
    line: int  # where it starts in its page
    title: str | None = None  # the file it is, for a block that is a file
    marker: str | None = None  # fragment, installs or runs until
    marker_text: str = ""


_FENCE = re.compile(r"^```(\w*)(.*)$")
_MARKER = re.compile(r"^<!-- (fragment|installs|runs until): (.+) -->$")
_TITLE = re.compile(r'title="([^"]+)"')


def blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown page, with what precedes each."""
    found, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start, body = i, []
        i += 1
        while not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        before = next((line for line in reversed(lines[:start]) if line.strip()), "")
        marker = _MARKER.match(before)
        title = _TITLE.search(fence.group(2))
        found.append(Block(fence.group(1), "\n".join(body) + "\n", start + 1,
                           title.group(1) if title else None,
                           marker.group(1) if marker else None,
                           marker.group(2) if marker else ""))
        i += 1
    return found


def page_text(page: str) -> str:
    text = (DOCS / page).read_text()
    for doc, test in SUBSTITUTE.get(page, {}).items():
        assert doc in text, f"{page} no longer holds {doc!r}: update SUBSTITUTE"
        text = text.replace(doc, test)
    return text


def run_block(block: Block, page: str, cwd: Path, env: dict[str, str]) -> None:
    """Write or run one block, as its kind says; fail with its output if it fails."""
    where = f"{page}:{block.line}"
    if block.title:
        path = Path(os.path.expanduser(block.title))
        (cwd / path).write_text(block.body)
        return
    if block.lang == "python":
        script = cwd / f"block_{block.line}.py"
        script.write_text(block.body)
        argv = [sys.executable, script.name]
    else:
        argv = ["bash", "-euo", "pipefail", "-c", block.body]
    if block.marker == "runs until":
        served_until(argv, block.marker_text, cwd, env, where)
        return
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=BLOCK_TIMEOUT)
    assert out.returncode == 0, (f"{where} exited {out.returncode}:\n{block.body}\n"
                                 f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}")


def served_until(argv: list[str], text: str, cwd: Path, env: dict[str, str], where: str
                 ) -> None:
    """Run a serving command until its output shows ``text``, then Ctrl-C it."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    assert proc.stdout is not None
    seen, deadline = [], time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if text in line:
                break
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(30)
    assert any(text in line for line in seen), f"{where} never printed {text!r}:\n" + \
        "".join(seen)


def reader_env(home: Path) -> dict[str, str]:
    """The environment of a reader who activated the venv, with the test's home."""
    venv_bin = str(Path(sys.executable).parent)
    return dict(os.environ, HOME=str(home), PATH=f"{venv_bin}:{os.environ['PATH']}")


# Stops the pools a page left running, naming them (a page that starts one stops it).
STOP_POOLS_LEFT = """
from easylaunch import list_pools, stop_pool
for pool in list_pools():
    print(pool.name)
    stop_pool(pool.name)
"""


@pytest.mark.parametrize("page", RUN_PAGES)
def test_page_runs_as_written(page, request, tmp_path):
    """Every complete script and command of the page runs, in order, and exits 0."""
    for fixture in NEEDS.get(page, ()):
        request.getfixturevalue(fixture)
    found = blocks(page_text(page))
    env = reader_env(Path(os.environ["HOME"]))
    project = tmp_path / "project"  # the reader's folder (their home is conftest's)
    project.mkdir()
    try:
        for block in found:
            if block.lang in ("python", "bash") and block.marker not in ("fragment", "installs"):
                run_block(block, page, project, env)
    finally:  # (a pool a page leaves would hold the test cluster's CPUs for its idle time)
        left = subprocess.run([sys.executable, "-c", STOP_POOLS_LEFT], cwd=project, env=env,
                              capture_output=True, text=True, timeout=120)
    assert left.stdout.split() == [], f"{page} leaves pools running: {left.stdout.split()}"


def test_markers_say_why():
    """Every fragment and install marker gives its reason, and marks a block of code."""
    for page in RUN_PAGES:
        for block in blocks((DOCS / page).read_text()):
            if block.marker:
                assert block.lang in ("python", "bash"), f"{page}:{block.line}"
                assert len(block.marker_text) > 10, f"{page}:{block.line}: say why"


def test_every_setting_has_a_reference_entry():
    """Each setting the loader knows has an entry (anchor, type and default, a meaning)."""
    from easylaunch.settings import DEFAULTS

    reference = docs_reference()
    sections = reference.setting_sections()
    page = reference.settings_markdown(sections)
    groups = [g for s in sections for g in s.groups]
    documented = {key for g in groups for key in g.keys}
    assert sorted(set(DEFAULTS) - documented) == []
    assert [g.keys for g in groups if len(g.meaning) < 20] == []
    for key in DEFAULTS:
        assert f"#{key} }}" in page or f'<a id="{key}"></a>' in page, key
        assert re.search(rf"^{key}\b.*=", page, re.M), f"{key}: no default shown"


def test_every_command_has_a_reference_entry_and_its_example():
    """Each command of the parser has an entry with its options and the example its
    ``--help`` ends with; no example is left for a command that is gone."""
    from easylaunch.cli.examples import EXAMPLES

    reference = docs_reference()
    found = reference.commands()
    page = reference.cli_markdown(found)
    names = [name for name, *_ in found]
    assert sorted(names) == sorted(EXAMPLES)
    for name, _aliases, _help, parser in found:
        assert f"## easylaunch {name} " in page
        assert EXAMPLES[name] in page
        assert parser.format_help().rstrip().endswith(
            "\n".join("  " + line for line in EXAMPLES[name].splitlines())), name
        for action in parser._actions:
            for option in action.option_strings:
                assert f"`{option}" in page or option in ("-h", "--help"), (name, option)


def test_the_architecture_page_names_every_module_and_no_other():
    """The Architecture page's file list follows the code: every module of both packages is
    named there, and every module named there exists (the top level's config_template.py too)."""
    page = (DOCS / "development" / "architecture.md").read_text()
    files = page.split("## The files", 1)[1].split("```")[1]  # the page's file list
    top = {p.name for p in REPO_DIR.glob("*.py")}
    modules = top | {p.name for package in ("easylaunch", "easylaunch_job")
                     for p in (REPO_DIR / package).rglob("*.py")}
    named = set(re.findall(r"\b(\w+\.py)\b", files))
    where = "docs/development/architecture.md's file list"
    assert sorted(modules - named - {"__init__.py", "__main__.py"}) == [], f"{where}: add these"
    assert sorted(named - modules) == [], f"{where} names modules that are gone"


def test_help_on_the_command_line_ends_with_the_example():
    """``easylaunch COMMAND --help`` as a user types it."""
    from easylaunch.cli.examples import EXAMPLES

    out = subprocess.run([sys.executable, "-m", "easylaunch.cli", "resubmit", "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert out.rstrip().endswith("  " + EXAMPLES["resubmit"])
    assert "example:" in out


def test_every_example_is_a_command_line_the_parser_takes():
    """A user copying an example gets no usage error (what follows ``--`` is the run's)."""
    import shlex

    from easylaunch.cli import build_parser
    from easylaunch.cli.examples import EXAMPLES

    parser = build_parser()
    for example in EXAMPLES.values():
        for line in example.splitlines():
            words = shlex.split(line.split(" > ")[0].removeprefix("nohup "))[1:]
            assert words and parser.parse_args(words).command, line
