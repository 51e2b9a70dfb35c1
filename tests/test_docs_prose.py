"""Docs a reader can skim: short sentences and bullets, and code lines that fit the column.

The measure reads each page's Markdown as prose: fenced code, tables, headings, HTML and
snippet lines are left out; a link counts as its text and inline code as one word. A sentence
ends at ``.``, ``!`` or ``?`` before a capital (or a quote, a bracket, inline code), and at the
end of a paragraph, a list item or a definition. The reference pages made from the code (settings,
commands) are measured as the site shows them.

Run it alone to see each page's figures: ``python tests/test_docs_prose.py [PAGE ...]``,
PAGE as ``modes/slurm.md``.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
SITE_AVERAGE = 20  # words a sentence over the whole site
PAGE_AVERAGE = 22  # words a sentence on any one page
BULLET_WORDS = 50  # words in one list item
CODE_COLUMNS = 88  # characters in a line of code: Material's content column shows this many

_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+\.)\s+")
_NOT_PROSE = ("|", "#", "<", "---", "--8<--", "!!!", "???", "===")  # tables, headings, markup
_LINK_TARGET = re.compile(r"^\[[^\]]+\]:")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')]*\s+(?=[A-Z\"'(`\[])")


@dataclass
class Prose:
    """A page's text as a reader reads it: its paragraphs and list items, each one string."""

    blocks: list[str]
    bullets: list[str]

    def sentences(self) -> list[str]:
        return [s for block in self.blocks for s in _SENTENCE_END.split(block) if s.split()]


def _plain(text: str) -> str:
    text = re.sub(r"``?[^`]+``?", "CODE", text)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    return " ".join(re.sub(r"\*\*|__|(?<!\w)[*_]|[*_](?!\w)", "", text).split())


def prose(markdown: str) -> Prose:
    """Split a page into paragraphs and list items, leaving code, tables and markup out."""
    blocks: list[str] = []
    bullets: list[str] = []
    current: list[str] = []
    in_bullet, in_fence, in_comment = False, False, False

    def end_block() -> None:
        nonlocal current, in_bullet
        text = _plain(" ".join(current))
        if text:
            blocks.append(text)
            if in_bullet:
                bullets.append(text)
        current, in_bullet = [], False

    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
            end_block()
            continue
        if in_comment or stripped.startswith("<!--"):
            in_comment = "-->" not in stripped
            continue
        if in_fence:
            continue
        if not stripped or stripped.startswith(_NOT_PROSE) or _LINK_TARGET.match(stripped):
            end_block()
            continue
        if _LIST_ITEM.match(line) or stripped.startswith(": "):
            end_block()
            in_bullet = bool(_LIST_ITEM.match(line))
            stripped = _LIST_ITEM.sub("", stripped).removeprefix(": ")
        current.append(stripped)
    end_block()
    return Prose(blocks, bullets)


def code_lines(markdown: str) -> list[tuple[int, str]]:
    """The lines inside fenced code blocks, with their line numbers."""
    found: list[tuple[int, str]] = []
    indent: str | None = None  # the open fence's indent; None outside a fence
    for number, line in enumerate(markdown.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            indent = line[: len(line) - len(stripped)] if indent is None else None
        elif indent is not None:
            found.append((number, line.removeprefix(indent)))
    return found


def pages() -> dict[str, str]:
    """Every page of the site as Markdown, the made ones as the docs' hook makes them."""
    found = {str(path.relative_to(DOCS)): path.read_text() for path in sorted(DOCS.rglob("*.md"))}
    sys.path.insert(0, str(Path(__file__).parent))
    from helpers import docs_reference

    reference = docs_reference()
    found["reference/settings.md"] = reference.settings_markdown(reference.setting_sections())
    found["reference/cli.md"] = reference.cli_markdown(reference.commands())
    return found


def words_a_sentence(markdown: str) -> tuple[float, int]:
    """The page's average words a sentence, and its number of sentences."""
    sentences = prose(markdown).sentences()
    words = sum(len(s.split()) for s in sentences)
    return (words / len(sentences) if sentences else 0.0), len(sentences)


@pytest.fixture(scope="module")
def site() -> dict[str, str]:
    return pages()


def test_sentences_are_short_on_every_page_and_across_the_site(site):
    """Sentences average <= 20 words over the site and <= 22 on each page."""
    figures = {page: words_a_sentence(text) for page, text in site.items()}
    long = {page: round(avg, 1) for page, (avg, _) in figures.items() if avg > PAGE_AVERAGE}
    assert not long, f"pages whose sentences average over {PAGE_AVERAGE} words: {long}"
    words = sum(avg * count for avg, count in figures.values())
    average = words / sum(count for _, count in figures.values())
    assert average <= SITE_AVERAGE, f"the site's sentences average {average:.1f} words"


def test_no_bullet_runs_over_fifty_words(site):
    """A list item says one thing: none runs past 50 words."""
    long = [f"{page}: {bullet[:80]}... ({len(bullet.split())} words)"
            for page, text in site.items() for bullet in prose(text).bullets
            if len(bullet.split()) > BULLET_WORDS]
    assert not long, "list items over 50 words:\n" + "\n".join(long)


def test_code_lines_fit_the_content_column(site):
    """No line of code in the docs is hidden behind a scrollbar: <= 88 characters."""
    wide = [f"{page}:{number} ({len(line)}) {line}" for page, text in site.items()
            for number, line in code_lines(text) if len(line) > CODE_COLUMNS]
    assert not wide, f"{len(wide)} code lines over {CODE_COLUMNS} characters:\n" + \
        "\n".join(wide)


def test_the_measure_reads_prose_not_code():
    """The measure splits sentences and bullets, and skips code, tables and comments."""
    page = ("Run it. Then look at `ls -l`. It shows e.g. three runs.\n\n"
            "- one item that ends here\n- [a link](x.md) is its text\n\n"
            "```bash\nthis is not. Prose at all.\n```\n| a | table. Row |\n"
            "<!-- fragment: a comment. Not prose -->\n")
    found = prose(page)
    assert found.sentences() == ["Run it.", "Then look at CODE.", "It shows e.g. three runs.",
                                 "one item that ends here", "a link is its text"]
    assert found.bullets == ["one item that ends here", "a link is its text"]
    assert code_lines(page) == [(7, "this is not. Prose at all.")]


def report(chosen: list[str]) -> None:
    """Print each page's words a sentence, its long bullets and its wide code lines."""
    site = pages()
    figures = {page: words_a_sentence(text) for page, text in site.items()}
    for page, (avg, count) in sorted(figures.items(), key=lambda kv: -kv[1][0]):
        if chosen and page not in chosen:
            continue
        print(f"{avg:5.1f} {count:4d}  {page}")
        for bullet in prose(site[page]).bullets:
            if len(bullet.split()) > BULLET_WORDS:
                print(f"      bullet of {len(bullet.split())} words: {bullet[:70]}...")
        for number, line in code_lines(site[page]):
            if len(line) > CODE_COLUMNS:
                print(f"      line {number} has {len(line)} characters")
    total = sum(count for _, count in figures.values())
    print(f"site: {sum(a * c for a, c in figures.values()) / total:.1f} words a sentence, "
          f"{total} sentences")


if __name__ == "__main__":
    report(sys.argv[1:])
