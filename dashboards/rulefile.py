"""Rules as frozen values, and how they become Prometheus' rules file (and the docs' alert table).

Only what a rule says is written: its name, expression, ``for``, labels and annotations. The file's layout
(long expressions broken over lines, descriptions folded) is written once here, and the text is parsed back
before it is returned, so a quoting slip fails the generator rather than Prometheus.
"""

from __future__ import annotations

import inspect
import json
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import yaml

from dashboards.promql import Scope

__all__ = [
    "Alert",
    "Group",
    "Record",
    "comment",
    "promql_lines",
    "recorded",
    "render",
    "threshold_table",
]

Severity = Literal["warning", "critical"]

WIDTH = 110
"""Columns of a line of the file (the project's line length); a longer expression is broken over lines."""

RECORDED_NAME = re.compile(r"\b[a-z_]+:[a-z0-9_:]+\b")
"""A recorded series' name (``level:metric:operations``): only recording rules make names with colons."""


@dataclass(frozen=True, slots=True)
class Record:
    """A recording rule: the series ``name`` holds what ``expr`` computes."""

    name: str
    expr: str
    why: str = ""
    """A comment above the rule: what the number means, where its name does not say."""


def recorded(name: str, formula: Callable[[Scope], str], scope: Scope) -> Record:
    """A recording rule of ``formula`` in ``scope``, commented with the formula's docstring."""
    return Record(name, formula(scope), why=inspect.getdoc(formula) or "")


@dataclass(frozen=True, slots=True)
class Alert:
    """An alerting rule, with the sentence that says when it fires."""

    name: str
    expr: str
    minutes: int
    """How long ``expr`` must hold before the alert fires (its ``for``)."""
    severity: Severity
    summary: str
    description: str
    when: str
    """When it fires, thresholds included, in one sentence: the file's header and the docs' alert table."""
    cause: str | None = None
    """The ``cause`` label of the reward-drop alerts: what the drop is put down to."""


@dataclass(frozen=True, slots=True)
class Group:
    """A rule group: Prometheus evaluates its rules in order, at the same time."""

    name: str
    rules: tuple[Record | Alert, ...]


_OPERATORS = tuple(
    re.compile(
        rf" (?:{'|'.join(re.escape(op) for op in level)})(?: bool)?"
        r"(?: (?:on|ignoring) ?\(_*\))?(?: group_(?:left|right) ?\(_*\))? "
    )
    for level in (("or",), ("and", "unless"), ("==", "!=", ">=", "<=", ">", "<"), ("+", "-"), ("*", "/"))
)
"""Binary operators with their modifiers, by precedence from the loosest (the formulas space each one)."""


def _top_level(expr: str) -> str:
    """``expr`` with what is inside brackets or quotes replaced by ``_``: only its top level is left."""
    chars: list[str] = []
    depth, quoted, escaped = 0, False, False
    for char in expr:
        hidden = depth > 0 or quoted
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted, hidden = True, True
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
            hidden = depth > 0
        chars.append("_" if hidden else char)
    return "".join(chars)


def _lines(expr: str, indent: int) -> list[str]:
    pad = " " * indent
    if indent + len(expr) <= WIDTH:
        return [pad + expr]
    top = _top_level(expr)
    for operator in _OPERATORS:
        spans = [match.span() for match in operator.finditer(top)]
        if spans:  # the loosest operator: its operands and it, one under the other
            lines, start = [], 0
            for begin, end in spans:
                lines += [*_lines(expr[start:begin], indent), pad + expr[begin:end].strip()]
                start = end
            return lines + _lines(expr[start:], indent)
    opening = top.rfind("(")
    if top.endswith(")") and top[opening:].strip("()_") == "":  # (...), sum by (...) (...), f(...)
        return [pad + expr[: opening + 1], *_lines(expr[opening + 1 : -1], indent + 2), pad + ")"]
    return [pad + expr]


def promql_lines(expr: str, indent: int = 0) -> list[str]:
    """``expr`` over lines of at most ``WIDTH`` columns where it can be broken, indented by ``indent``.

    Only whitespace changes, and PromQL ignores whitespace between tokens.
    """
    lines = _lines(expr, indent)
    if "".join(expr.split()) != "".join("".join(lines).split()):
        msg = f"breaking the expression over lines changed it: {expr}"
        raise AssertionError(msg)
    return lines


def _plain(value: str) -> bool:
    """Whether ``value`` reads back as itself as a plain YAML scalar."""
    try:
        return bool(yaml.safe_load(f"key: {value}") == {"key": value})
    except yaml.YAMLError:
        return False


def _scalar(key: str, value: str, indent: int) -> tuple[list[str], str]:
    """The lines of ``key: value`` and the value they read back as: plain, a literal block, or quoted."""
    pad = " " * indent
    if _plain(value) and indent + len(key) + 2 + len(value) <= WIDTH:
        return [f"{pad}{key}: {value}"], value
    if key == "expr":  # a literal block: no quoting, and the expression over as many lines as it needs
        block = promql_lines(value, indent + 2)
        return [f"{pad}{key}: |", *block], "\n".join(line[indent + 2 :] for line in block) + "\n"
    return [f"{pad}{key}: {json.dumps(value, ensure_ascii=False)}"], value


def _folded(key: str, text: str, indent: int) -> list[str]:
    """``key: >-`` and ``text`` folded at the line width: YAML joins the lines back with single spaces."""
    pad = " " * (indent + 2)
    wrapped = textwrap.wrap(text, WIDTH - indent - 2, break_long_words=False, break_on_hyphens=False)
    return [f"{' ' * indent}{key}: >-", *(pad + line for line in wrapped)]


def _record(record: Record) -> tuple[list[str], dict[str, Any]]:
    why = [f"      # {line}".rstrip() for line in _wrap(record.why, WIDTH - 8)]
    expr, value = _scalar("expr", record.expr, 8)
    return [*why, f"      - record: {record.name}", *expr], {"record": record.name, "expr": value}


def _alert(alert: Alert) -> tuple[list[str], dict[str, Any]]:
    expr, value = _scalar("expr", alert.expr, 8)
    labels = {"severity": alert.severity, **({} if alert.cause is None else {"cause": alert.cause})}
    summary, _ = _scalar("summary", alert.summary, 10)
    lines = [
        f"      - alert: {alert.name}",
        *expr,
        f"        for: {alert.minutes}m",
        "        labels:",
        *(f"          {name}: {label}" for name, label in labels.items()),
        "        annotations:",
        *summary,
        *_folded("description", alert.description, 10),
    ]
    annotations = {"summary": alert.summary, "description": alert.description}
    data = {
        "alert": alert.name,
        "expr": value,
        "for": f"{alert.minutes}m",
        "labels": labels,
        "annotations": annotations,
    }
    return lines, data


def _wrap(text: str, width: int) -> list[str]:
    """Each paragraph of ``text`` wrapped at ``width``, a blank line between paragraphs."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        lines += [*([""] if lines else []), *textwrap.wrap(paragraph, width)]
    return lines


def comment(text: str) -> list[str]:
    """``text`` as the lines of a comment at the top of the file (paragraphs wrapped, without ``# ``)."""
    return _wrap(text, WIDTH - 2)


def threshold_table(alerts: Sequence[Alert]) -> list[str]:
    """The alerts as comment lines: name and severity, then when each fires (its thresholds), wrapped."""
    longest = max(len(alert.name) for alert in alerts)
    lines: list[str] = []
    for alert in alerts:
        first = f"  {alert.name.ljust(longest)}  {alert.severity.ljust(len('critical'))}  "
        lines += textwrap.wrap(
            alert.when.replace("`", ""),
            WIDTH - 2,
            initial_indent=first,
            subsequent_indent=" " * len(first),
            break_on_hyphens=False,
        )
    return lines


def _check_order(groups: Sequence[Group]) -> None:
    """Every recorded series a rule reads is recorded before it, so it is read at the same evaluation.

    Raises:
        ValueError: a rule reads a series no earlier rule records.
    """
    known: set[str] = set()
    for group in groups:
        for rule in group.rules:
            unknown = set(RECORDED_NAME.findall(rule.expr)) - known
            if unknown:
                msg = f"{rule.name} reads {', '.join(sorted(unknown))}, which no rule before it records"
                raise ValueError(msg)
            if isinstance(rule, Record):
                known.add(rule.name)


def render(header: Sequence[str], groups: Sequence[Group]) -> str:
    """The rules file: the lines of ``header`` as a comment, then the groups.

    Raises:
        ValueError: a rule reads a recorded series no rule before it records.
        AssertionError: the text does not read back as the rules (a bug of this module).
    """
    _check_order(groups)
    lines = [f"# {line}".rstrip() for line in header]
    data: list[dict[str, Any]] = []
    lines.append("groups:")
    for group in groups:
        lines += [f"  - name: {group.name}", "    rules:"]
        data.append({"name": group.name, "rules": []})
        for index, rule in enumerate(group.rules):
            rule_lines, value = _record(rule) if isinstance(rule, Record) else _alert(rule)
            lines += [*([""] if index else []), *rule_lines]
            data[-1]["rules"].append(value)
        if group is not groups[-1]:
            lines.append("")
    text = "\n".join(lines) + "\n"
    if yaml.safe_load(text) != {"groups": data}:
        msg = "the rules file does not read back as the rules"
        raise AssertionError(msg)
    return text
