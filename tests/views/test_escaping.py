"""Any text, written by the one escaping function of its format, reads back as that text: a spreadsheet's
cell, a Markdown renderer's table cell or heading, a terminal's characters."""

from __future__ import annotations

import csv
import io
import unicodedata
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry._views.escaping import csv_text, markdown_text, terminal_text, visible
from tests.support import RenderedMarkdown, examples, markdown_renderers

_BIDI_CLASSES = {"LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI"}
_ATTACKS = [
    *"\\`*_{}[]()#!|<>&~$:=+-@ \t\n\r\x00\x02\x1b\x7f\x85\u2028\u202e\ud800a1é",
    *(
        "__",
        "  ",
        "**",
        "~~",
        "$$",
        "{#id}",
        "&amp;",
        "&#60;",
        "&nbsp;",
        "<img src=x>",
        "<script>",
        "![i](u)",
    ),
    *("[a](b)", "<https://e.x>", "https://evil.example", "www.evil.example", "\x1b]8;;"),
]
TEXT = st.lists(st.one_of(st.sampled_from(_ATTACKS), st.characters()), max_size=16).map("".join)


def _shown(text: str) -> str:
    """What ``text`` must read as: each control character (C0, DEL, C1, line and paragraph separators,
    bidirectional controls, lone surrogates) as Python's ``ascii`` writes it, anything else as it is."""

    def one(char: str) -> str:
        hidden = unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs") or (
            unicodedata.category(char) == "Cf"
            and (unicodedata.bidirectional(char) in _BIDI_CLASSES or char in "\u200e\u200f\u061c")
        )
        return ascii(char)[1:-1] if hidden else char

    return "".join(one(char) for char in text)


@settings(max_examples=examples(500), deadline=None)
@given(TEXT)
def test_visible_leaves_no_control_character(text: str) -> None:
    """Control characters become their escapes, nothing else changes, and a second pass changes nothing."""
    assert visible(text) == _shown(text)
    assert visible(visible(text)) == visible(text)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.one_of(TEXT, st.integers(-(10**6), 10**6), st.floats(-1e6, 1e6), st.none()), min_size=1))
def test_csv_cells_read_back_as_their_text_and_numbers(cells: list[object]) -> None:
    """A row of any text and numbers is one CSV record as wide as the row; read back, every text cell is its
    text (controls as escapes), after a ``'`` where it would start a formula, and every number is the same
    number."""
    out = csv_text([cells])
    (row,) = csv.reader(io.StringIO(out, newline=""), quoting=csv.QUOTE_NONNUMERIC)
    assert len(row) == len(cells)
    read_back: list[object] = list(row)  # floats where unquoted, whatever typeshed says
    for written, read in zip(cells, read_back, strict=True):
        if written is None:
            assert read == ""
        elif isinstance(written, int | float):
            assert read == float(written)
        else:
            assert isinstance(written, str)
            shown = _shown(written)
            assert read == ("'" + shown if shown.startswith(("=", "+", "-", "@")) else shown)


@pytest.mark.parametrize(("name", "render"), markdown_renderers())
@settings(max_examples=examples(500), deadline=None)
@given(text=TEXT)
def test_markdown_text_renders_as_its_text(name: str, render: Callable[[str], str], text: str) -> None:
    """Any text, as a table cell and as a heading, renders as that one cell and that one heading holding the
    text (controls as escapes, the ends' spaces trimmed as Markdown trims them): no other tag."""
    shown = _shown(text).strip()
    table = RenderedMarkdown(render(f"| agent | n |\n|---|---:|\n| {markdown_text(text)} | 1 |\n"))
    assert table.tags == ["table", "thead", "tr", "th", "th", "tbody", "tr", "td", "td"], name
    assert [[cell.strip() for cell in row] for row in table.rows] == [[shown, "1"]]
    heading = RenderedMarkdown(render(f"### {markdown_text(text)}\n"))
    assert heading.tags == ["h3"], name
    assert [found.strip() for found in heading.headings] == [shown]


def test_terminal_text_is_never_markup() -> None:
    """rich prints the value's characters, its markup as written and its escape sequences visible."""
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    for value in ("[/x]", "[link=https://evil.example]click[/link]", "[bold red]x", "x\x1b]8;;h\x1b\\y"):
        console.print(terminal_text(value))
    printed = out.getvalue()
    assert "[/x]\n[link=https://evil.example]click[/link]\n[bold red]x\nx\\x1b]8;;h\\x1b\\y\n" in printed
    assert "\x1b]" not in printed
