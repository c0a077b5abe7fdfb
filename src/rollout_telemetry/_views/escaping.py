"""Values from a run (agent names, failure kinds, stages, paths) written as inert text: one function a format.

A run's files, and the hooks that record into an account, say what an agent is called; whoever pastes an
output into a spreadsheet, a pull request or a terminal must get that name back as text, never as a formula,
a link, an image, HTML or a terminal escape. The HTML page escapes with :func:`html.escape`; the other formats
go through here:

- :func:`csv_text`: every text cell quoted, its control characters made visible (a CR or LF cannot end a row,
  nor an escape sequence reach a terminal showing the file) and, when it starts as a formula would (``= + -
  @``), prefixed with ``'`` as OWASP advises; numbers stay numbers;
- :func:`markdown_text`: control characters made visible, Markdown's punctuation backslash-escaped and
  ``< > &`` (with ``~ $``) written as character references, so no emphasis, link, image, heading, table cell
  or HTML forms, in CommonMark and Python-Markdown alike (GitHub still links a bare ``https://`` or ``www.``
  address, to the address it shows);
- :func:`terminal_text`: a rich ``Text`` (never markup) of the value with its control characters made
  visible, so no escape sequence reaches the terminal.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.text import Text

__all__ = ["csv_text", "markdown_text", "terminal_text", "visible"]

_INVISIBLE: dict[int, str] = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0))},  # C0, DEL, C1
    # Line and paragraph separators, and the bidirectional controls that reorder what a terminal shows.
    **{code: f"\\u{code:04x}" for code in (0x061C, 0x200E, 0x200F, 0x2028, 0x2029)},
    **{code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},
    **{code: f"\\u{code:04x}" for code in range(0xD800, 0xE000)},  # lone surrogates: no encoding writes them
    0x09: "\\t",
    0x0A: "\\n",
    0x0D: "\\r",
}


def visible(value: str) -> str:
    """``value`` with each control character (C0, DEL, C1, line separators, bidirectional controls, lone
    surrogates) written as its escape, as ``ascii()`` writes it: ``\\n``, ``\\x1b``, ``\\u202e``; other
    characters as they are. Applying it twice changes nothing more."""
    return value.translate(_INVISIBLE)


_FORMULA_STARTS = ("=", "+", "-", "@")
"""OWASP's list but the tab and CR, which ``visible`` has written as ``\\t`` and ``\\r`` already."""


def _csv_cell(value: object) -> object:
    """A number as it is; ``None`` as an empty cell; anything else as text a spreadsheet will not run."""
    if value is None:
        return ""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    text = visible(str(value))
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def csv_text(rows: Iterable[Sequence[object]]) -> str:
    """``rows`` as CSV: text cells quoted and neutralised (``'=HYPERLINK(...)``), number cells bare."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_NONNUMERIC)
    writer.writerows([_csv_cell(cell) for cell in row] for row in rows)
    return out.getvalue()


# Backslash escapes for what CommonMark and Python-Markdown both unescape (``|`` too: in a table, or with the
# tables extension); character references for the rest, which Python-Markdown would show with its backslash.
_MARKDOWN: dict[int, str] = {
    **{ord(char): "\\" + char for char in "\\`*{}[]()#!|"},
    **{ord("<"): "&lt;", ord(">"): "&gt;", ord("&"): "&amp;", ord("~"): "&#126;", ord("$"): "&#36;"},
}
_UNDERSCORES = re.compile("_+")


def _underscores(run: re.Match[str]) -> str:
    """A run of underscores escaped unless it is between two letters or digits: there it can neither open nor
    close emphasis, so ``snake_case`` stays as it is."""
    text, start, end = run.string, run.start(), run.end()
    if start > 0 and end < len(text) and text[start - 1].isalnum() and text[end].isalnum():
        return run.group()
    return "\\_" * (end - start)


def markdown_text(value: str) -> str:
    """``value`` as Markdown that renders as its own text (its control characters made visible): no table
    cell ends, no line breaks, nothing becomes emphasis, code, a link, an image, a heading or HTML."""
    escaped = visible(value).translate(_MARKDOWN)
    return _UNDERSCORES.sub(_underscores, escaped)


def terminal_text(value: str, style: str = "") -> Text:
    """``value`` as rich ``Text`` in ``style``: shown as it is, never read as markup, its control characters
    visible."""
    from rich.text import Text

    return Text(visible(value), style=style)
