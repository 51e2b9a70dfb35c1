"""The reference pages made from the code at build time, so that they cannot fall behind it.

A mkdocs hook (``hooks:`` in mkdocs.yml) rather than the mkdocs-gen-files plugin: mkdocs adds
generated pages by itself (``File.generated``), so this needs no plugin, and the same functions
are what tests/test_docs.py checks (every setting and every command has an entry).

- ``reference/settings.md``: every setting of the settings template, grouped as the template
  groups them, with its type and default as written there and its comment as its meaning.
- ``reference/cli.md``: every command of ``easylaunch`` from its argparse parser (usage, options,
  defaults) with the example its ``--help`` ends with (``easylaunch/cli/examples.py``).

It also shows the docstrings' Sphinx roles (``:func:`x```), which the Python API page renders
as Markdown, as plain code.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The settings template: every key, its type, its default and its comment.
TEMPLATE_MODULE = "easylaunch.settings.template"


@dataclass
class SettingGroup:
    """Keys the template documents with one comment (e.g. an image and its Python)."""

    keys: list[str]
    source: str  # the assignments as written: names, types, defaults
    meaning: str  # the comment above them, without its '#'


@dataclass
class SettingSection:
    """A part of the template between its ``# ----`` rules."""

    title: str
    intro: str
    groups: list[SettingGroup] = field(default_factory=list)


def template_path() -> Path:
    spec = importlib.util.find_spec(TEMPLATE_MODULE)
    assert spec is not None and spec.origin, f"{TEMPLATE_MODULE} not found"
    return Path(spec.origin)


def _markdown(text: str) -> str:
    """The template's reStructuredText literals (``x``) as Markdown's (`x`)."""
    return text.replace("``", "`")


def _is_rule(line: str) -> bool:
    return line.startswith("# ---")


def _comment_above(lines: list[str], lineno: int) -> list[str]:
    """The comment lines right above line ``lineno`` (1-based), rules excluded."""
    start = lineno - 1
    while start > 0 and lines[start - 1].startswith("#") and not _is_rule(lines[start - 1]):
        start -= 1
    return [line.lstrip("#").strip() for line in lines[start:lineno - 1]]


def setting_sections(path: Path | None = None) -> list[SettingSection]:
    """The template's settings, section by section, each group with its meaning."""
    text = (path or template_path()).read_text()
    lines = text.splitlines()
    titles = {}  # line number of a section's closing rule -> (title, intro)
    rules = [i for i, line in enumerate(lines, 1) if _is_rule(line)]
    for opening, closing in zip(rules[::2], rules[1::2], strict=True):
        body = _markdown(" ".join(line.lstrip("#").strip()
                                  for line in lines[opening:closing - 1]))
        title = body.split(": ")[0].split("; ")[0].rstrip(".")
        titles[closing] = (title, body if len(body) > len(title) + 1 else "")
    sections: list[SettingSection] = []
    previous_end = 0
    for node in ast.parse(text).body:
        if not isinstance(node, ast.AnnAssign | ast.Assign):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if not isinstance(target, ast.Name) or not target.id.isupper():
            continue
        opened = [n for n in titles if previous_end < n < node.lineno]
        if opened or not sections:
            title, intro = titles[max(opened)] if opened else ("Settings", "")
            sections.append(SettingSection(title, intro))
        section = sections[-1]
        comment = _comment_above(lines, node.lineno)
        source = "\n".join(lines[node.lineno - 1:node.end_lineno])
        adjacent = section.groups and previous_end == node.lineno - 1
        if comment or not adjacent:
            meaning = _markdown(" ".join(comment))
            if not meaning and not section.groups:  # keys the section's opening describes
                meaning, section.intro = section.intro, ""
            section.groups.append(SettingGroup([target.id], source, meaning))
        else:
            group = section.groups[-1]
            group.keys.append(target.id)
            group.source += "\n" + source
        previous_end = node.end_lineno or node.lineno
    return sections


def settings_markdown(sections: list[SettingSection], path: Path | None = None) -> str:
    """The settings reference page."""
    text = (path or template_path()).read_text()
    lookup = _markdown(ast.get_docstring(ast.parse(text)) or "").split("\n\n", 1)[-1]
    out = ["# Settings reference", "",
           f"Every setting, as the settings template (`{TEMPLATE_MODULE.replace('.', '/')}.py`) "
           "defines it: its type and default as written there, then what it means. How to "
           "write a settings file and how values are checked: [Settings files]"
           "(../guides/settings.md). `easylaunch init` writes a short file of the keys most "
           "users change; `easylaunch config` prints the values in effect.", "", lookup, ""]
    for section in sections:
        out += [f"## {section.title}", ""]
        if section.intro:
            out += [section.intro, ""]
        for group in section.groups:
            heading = ", ".join(f"`{key}`" for key in group.keys)
            out += [f"### {heading} {{ #{group.keys[0]} }}", ""]
            out += [f'<a id="{key}"></a>' for key in group.keys[1:]]
            out += ["```python", group.source, "```", "", group.meaning, ""]
    return "\n".join(out)


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, list[str], str,
                                                                  argparse.ArgumentParser]]:
    """(name, aliases, help, parser) of each subcommand of ``parser``, in the order added."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen: dict[int, int] = {}
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias
                    found[seen[id(sub)]][1].append(name)
                    continue
                seen[id(sub)] = len(found)
                found.append((name, [], helps.get(name, ""), sub))
    return found


def commands(parser: argparse.ArgumentParser | None = None, prefix: str = ""
             ) -> list[tuple[str, list[str], str, argparse.ArgumentParser]]:
    """Every command of ``easylaunch`` (``dist info`` etc. as commands of their own)."""
    if parser is None:
        from easylaunch.cli import build_parser

        parser = build_parser()
    found = []
    for name, aliases, text, sub in _subcommands(parser):
        found.append((prefix + name, aliases, text, sub))
        found += commands(sub, f"{prefix}{name} ")
    return found


def _option_row(action: argparse.Action) -> str:
    if action.option_strings:
        metavar = "" if action.nargs == 0 else " " + (action.metavar or action.dest.upper())
        name = ", ".join(f"`{o}{metavar}`" for o in action.option_strings)
    else:
        name = f"`{action.metavar or action.dest}`"
    text = (action.help or "").replace("|", "\\|")
    if action.choices and not isinstance(action, argparse._SubParsersAction):
        text += f" (one of {', '.join(f'`{c}`' for c in action.choices)})"
    default: Any = action.default
    shown = "" if default in (None, False, argparse.SUPPRESS) or action.nargs == 0 \
        else f"`{default}`"
    return f"| {name} | {text} | {shown} |"


def cli_markdown(found: list[tuple[str, list[str], str, argparse.ArgumentParser]]) -> str:
    """The command-line reference page."""
    from easylaunch.cli.examples import EXAMPLES

    out = ["# Command-line reference", "",
           "Every command of `easylaunch`, made from its parser: what it does, its options "
           "and an example (the one its `--help` ends with). `--config FILE` (a settings file "
           "to read instead of the usual lookup) goes before or after any command. Exit "
           "codes: [Exit codes](exit-codes.md).", ""]
    for name, aliases, text, parser in found:
        out += [f"## easylaunch {name} {{ #{name.replace(' ', '-')} }}", ""]
        if aliases:
            out += ["Alias: " + ", ".join(f"`easylaunch {a}`" for a in aliases) + ".", ""]
        out += [text[:1].upper() + text[1:] + ("" if text.endswith(".") else "."), ""]
        out += ["```text", parser.format_usage().strip(), "```", ""]
        rows = [_option_row(a) for a in parser._actions
                if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
                and a.help != argparse.SUPPRESS]
        if rows:
            out += ["| argument | meaning | default |", "|---|---|---|", *rows, ""]
        out += ["Example:", "", "```bash", EXAMPLES[name], "```", ""]
    return "\n".join(out)


# A docstring's reStructuredText role, as Markdown leaves it: ":func:<code>~a.b</code>".
_ROLE = re.compile(r":(?:func|class|meth|mod|attr|data|exc|obj):(<code>)~?")


def on_page_content(html: str, **_: Any) -> str:
    """mkdocs hook: the docstrings' Sphinx roles (``:func:`x```) shown as plain code."""
    return _ROLE.sub(r"\1", html)


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated reference pages."""
    from mkdocs.structure.files import File

    for path, text in (("reference/settings.md", settings_markdown(setting_sections())),
                       ("reference/cli.md", cli_markdown(commands()))):
        files.append(File.generated(config, path, content=text))
    return files
