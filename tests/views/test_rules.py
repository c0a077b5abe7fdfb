"""The Prometheus config and rules pass promtool's checks and unit tests, and are generated from the
dashboard's formulas: each recording rule a panel shows too is computed by the panel's formula."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dashboards import generate, promql, rulefile, rules
from dashboards.rulefile import Group, Record
from rollout_telemetry._views import series as catalogue

ROOT = Path(__file__).parents[2]
PROM = ROOT / "dashboards" / "prometheus"
RULES_FILE = generate.RULES_PATH
"""The rules, as the package ships them (``rollout-telemetry monitoring`` writes them out)."""


def test_every_alert_has_a_unit_test() -> None:
    """Each alert of rules.yml is evaluated by name in rules_test.yml."""
    groups = yaml.safe_load(RULES_FILE.read_text())["groups"]
    alerts = {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}
    tests = yaml.safe_load((PROM / "rules_test.yml").read_text())["tests"]
    tested = {case["alertname"] for test in tests for case in test.get("alert_rule_test", [])}
    assert alerts <= tested, alerts - tested


def test_every_rule_is_unit_tested() -> None:
    """Each recording rule and alert is exercised by rules_test.yml."""
    rules = yaml.safe_load(RULES_FILE.read_text())
    tests = (PROM / "rules_test.yml").read_text()
    for group in rules["groups"]:
        for rule in group["rules"]:
            name = rule.get("record") or rule["alert"]
            assert name in tests, f"{name} has no promtool unit test"
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                assert rule["labels"]["severity"] in {"warning", "critical"}
                assert rule["annotations"]["summary"]
                assert rule["annotations"]["description"]


# ---- Generated from dashboards/rules.py, with the dashboard's formulas ----------------------------------

DASHBOARD = json.loads(generate.PATH.read_text(encoding="utf-8"))
RULES: list[dict[str, Any]] = [
    rule for group in yaml.safe_load(RULES_FILE.read_text())["groups"] for rule in group["rules"]
]
RECORDS = {rule["record"]: rule["expr"] for rule in RULES if "record" in rule}
ALERTS = {rule["alert"]: rule for rule in RULES if "alert" in rule}


def test_committed_rules_are_what_the_generator_builds() -> None:
    """Regenerating gives rules.yml byte for byte; ``generate --check`` finds every generated file current."""
    rebuild = "run: .venv/bin/python -m dashboards.generate"
    assert rules.text() == RULES_FILE.read_text(encoding="utf-8"), rebuild
    assert generate.main(["--check"]) == 0


def test_check_names_each_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check`` exits 1 naming each generated file that differs, and only those."""
    copies = {}
    for name in ("PATH", "RULES_PATH"):
        original: Path = getattr(generate, name)
        copies[name] = tmp_path / original.name
        copies[name].write_text(original.read_text(encoding="utf-8"), encoding="utf-8")
        monkeypatch.setattr(generate, name, copies[name])
    for name in ("PATH", "RULES_PATH"):
        copies[name].write_text(copies[name].read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert generate.main(["--check"]) == 1
    stale = capsys.readouterr().err.splitlines()
    assert stale == [
        f"{copies[name]} is out of date: run python -m dashboards.generate" for name in ("PATH", "RULES_PATH")
    ]
    assert generate.main([]) == 0
    assert generate.main(["--check"]) == 0


@pytest.mark.parametrize(
    "family", ["rollout_truncated_total", "rollout_groups_total", "rollout_retried_total", "rollout_stalled"]
)
def test_a_rule_on_a_family_the_catalogue_lacks_fails_generation(
    family: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family renamed in the catalogue fails the rules' generation, in a recording rule or an alert."""
    monkeypatch.setattr(catalogue, "PUBLISHED", catalogue.PUBLISHED - {family})
    with pytest.raises(ValueError, match=f"{family} is not in the catalogue"):
        rules.text()
    with pytest.raises(ValueError, match="rollout_renamed_total is not in the catalogue"):
        promql.rate("rollout_renamed_total", rules.RULES)


def test_a_rule_reads_only_series_recorded_before_it() -> None:
    """A rule that reads a recorded series no earlier rule records fails the generation."""
    late = (Record("agent:b:rate5m", "agent:a:rate5m * 2"), Record("agent:a:rate5m", "vector(1)"))
    with pytest.raises(ValueError, match="agent:b:rate5m reads agent:a:rate5m"):
        rulefile.render([], [Group("g", late)])


# A small PromQL parser for the expressions the generator writes, so that a rule and a panel are compared by
# structure: parentheses that only group, spaces, and the scope (the run and agent labels, Grafana's
# variables, the rate window) are left out, and recorded series are replaced by what they record.
_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<range>\[[^\]]*\])|(?P<duration>\d+[smhdwy]\b)'
    r"|(?P<number>\d+(?:\.\d+)?)|(?P<op>==|!=|>=|<=|=~|!~|[-+*/<>=(),{}])|(?P<name>[A-Za-z_:][A-Za-z0-9_:]*))"
)
_BINARY = {"or": 1, "and": 2, "unless": 2, "==": 3, "!=": 3, ">": 3, "<": 3, ">=": 3, "<=": 3}
_BINARY |= {"+": 4, "-": 4, "*": 5, "/": 5}
_AGGREGATIONS = {"sum", "max", "min", "group", "topk"}
SCOPE_LABELS = {"run", "agent"}


class _Parser:
    def __init__(self, expr: str) -> None:
        self.tokens: list[tuple[str, str]] = []
        at = 0
        while expr[at:].strip():
            match = _TOKEN.match(expr, at)
            assert match, f"cannot read {expr[at:]!r}"
            assert match.lastgroup
            self.tokens.append((match.lastgroup, match.group(match.lastgroup)))
            at = match.end()
        self.at = 0

    def peek(self) -> str:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else ""

    def take(self, expected: str | None = None) -> str:
        text = self.tokens[self.at][1]
        assert expected in (None, text), f"expected {expected}, found {text}"
        self.at += 1
        return text

    def labels(self) -> tuple[str, ...]:
        self.take("(")
        names = set()
        while self.peek() != ")":
            names.add(self.take())
            if self.peek() == ",":
                self.take()
        self.take(")")
        return tuple(sorted(names - SCOPE_LABELS))

    def grouping(self) -> tuple[str, ...]:
        if self.peek() != "by":
            return ()
        self.take()
        return self.labels()

    def expr(self, weakest: int = 1) -> Any:
        left = self.unary()
        while self.peek() in _BINARY and _BINARY[self.peek()] >= weakest:
            operator = self.take()
            modifiers = []
            while self.peek() in ("bool", "on", "ignoring", "group_left", "group_right"):
                word = self.take()
                modifiers.append((word, self.labels() if self.peek() == "(" else ()))
            left = ("binary", operator, tuple(modifiers), left, self.expr(_BINARY[operator] + 1))
        return left

    def unary(self) -> Any:
        node = self.primary()
        while True:
            if self.at < len(self.tokens) and self.tokens[self.at][0] == "range":
                self.take()
                node = ("range", node)  # the window is the scope's
            elif self.peek() == "offset":
                self.take()
                node = ("offset", node, self.take())
            else:
                return node

    def arguments(self) -> tuple[Any, ...]:
        self.take("(")
        arguments = [self.expr()]
        while self.peek() == ",":
            self.take()
            arguments.append(self.expr())
        self.take(")")
        return tuple(arguments)

    def primary(self) -> Any:
        kind, text = self.tokens[self.at]
        self.at += 1
        if text == "(":
            inner = self.expr()
            self.take(")")
            return inner
        if kind in ("number", "string"):
            return (kind, text)
        if text in _AGGREGATIONS:  # by (...) before or after the arguments
            grouping = self.grouping()
            arguments = self.arguments()
            return ("aggregate", text, grouping or self.grouping(), arguments)
        if self.peek() == "(":
            return ("call", text, self.arguments())
        matchers: list[tuple[str, str, str]] = []
        if self.peek() == "{":
            self.take()
            while self.peek() != "}":
                matcher = (self.take(), self.take(), self.take())
                if "$" not in matcher[2]:  # a Grafana variable: the dashboard's scope
                    matchers.append(matcher)
                if self.peek() == ",":
                    self.take()
            self.take("}")
        return ("selector", text, tuple(matchers))


def _tree(expr: str) -> Any:
    """``expr`` as a tree without its scope, recorded series replaced by the tree of what they record."""
    parser = _Parser(expr)
    tree = parser.expr()
    assert parser.at == len(parser.tokens), f"{expr!r} has more after {parser.tokens[parser.at]}"

    def expand(node: Any) -> Any:
        if isinstance(node, tuple) and node[:1] == ("selector",) and node[1] in RECORDS:
            return _tree(RECORDS[node[1]])
        return tuple(expand(part) for part in node) if isinstance(node, tuple) else node

    return expand(tree)


def _subtrees(node: Any) -> Iterator[Any]:
    if isinstance(node, tuple):
        if node and isinstance(node[0], str):
            yield node
        for part in node:
            yield from _subtrees(part)


PANELS = {
    panel["title"]: {tree for target in panel["targets"] for tree in _subtrees(_tree(target["expr"]))}
    for panel in DASHBOARD["panels"]
    if panel["type"] != "row"
}
ON_THE_DASHBOARD = {
    "agent:rollout_completed:rate5m": "Rollouts finished per minute",
    "agent:rollout_omitted:rate5m": "Rollouts finished per minute",
    "agent:rollout_masked:rate5m": "Masked + failed share",
    "agent:rollout_failed:rate5m": "Masked + failed share",
    "agent:rollout_masked:ratio_rate5m": "Masked share per agent",
    "agent:rollout_reward:mean_rate5m": "Mean reward vs unmasked reward",
    "agent:rollout_reward_unmasked:mean_rate5m": "Mean reward vs unmasked reward",
    "agent_failure_kind:rollout_failed:rate5m": "Failed per minute by failure kind",
    "agent:rollout_lost:ratio_rate5m": "Masked + failed share",
    "agent:rollout_truncated:rate5m": "Truncated share",
    "agent:rollout_truncated:ratio_rate5m": "Truncated share",
    "agent:rollout_output_tokens:per_rollout_rate5m": "Output tokens per rollout",
    "agent:rollout_groups_contaminated:ratio_rate5m": "Contaminated baselines",
    "agent:rollout_groups_uniform_lowest:ratio_rate5m": "Uniform groups: too hard, too easy",
    "agent:rollout_groups_uniform_highest:ratio_rate5m": "Uniform groups: too hard, too easy",
    "agent:rollout_hollow:ratio_rate5m": "Hollow rollouts share",
    "agent:rollout_in_flight_slow:ratio_5m": "Slow share",
    "instance:rollout_telemetry_event_loop_lag_seconds:p99_rate5m": "Event-loop lag p99 per process",
}
"""The recording rules a panel shows too, and the panel: each must be computed by the panel's formula."""


@pytest.mark.parametrize(("record", "title"), ON_THE_DASHBOARD.items())
def test_a_recorded_formula_is_the_panels(record: str, title: str) -> None:
    """The rule's expression, recorded series expanded, is a term of the panel's query, the scope left out."""
    assert _tree(RECORDS[record]) in PANELS[title], f"{record} is not computed as {title!r} computes it"


def test_the_recorded_formulas_on_the_dashboard_are_those_listed() -> None:
    """Exactly the listed recording rules are among the panels' terms (not: groups, 10-minute changes)."""
    terms = set().union(*PANELS.values())
    assert {name for name, expr in RECORDS.items() if _tree(expr) in terms} == set(ON_THE_DASHBOARD)


@pytest.mark.parametrize(
    ("alert", "title"),
    [("RolloutRetryStorm", "Retries per minute"), ("RolloutStalled", "Stalled rollouts by stage")],
)
def test_an_alert_compares_the_panels_formula(alert: str, title: str) -> None:
    """The left side of the alert's comparison is what the panel plots."""
    tree = _tree(ALERTS[alert]["expr"])
    assert tree[0] == "binary"
    assert tree[3] in PANELS[title]


def test_the_comparison_tells_formulas_apart() -> None:
    """A masked share over every completed rollout (not Gym's denominator) is not the dashboard's."""
    share = "agent:rollout_masked:rate5m / agent:rollout_completed:rate5m"
    assert _tree(share) not in PANELS["Masked share per agent"]
    assert _tree(RECORDS["agent:rollout_masked:ratio_rate5m"]) in PANELS["Masked share per agent"]
    no_fallback = "sum by (run, agent) (rate(rollout_masked_total[5m]))"
    assert _tree(no_fallback) != _tree(RECORDS["agent:rollout_masked:rate5m"])


def test_every_recorded_sum_keeps_run_and_agent() -> None:
    """The rules' scope: each sum of a recording rule keeps run and agent (the parser leaves them out), or run
    and instance for a family of the collecting process (its name says ``instance:``)."""
    for name, expr in RECORDS.items():
        kept = {"run", "instance" if name.startswith("instance:") else "agent"}
        for labels in re.findall(r"\bsum\b(?: by \(([^)]*)\))?", expr):
            assert kept <= set(labels.split(", ")), f"{name}: sum by ({labels})"


def _header_entries() -> dict[str, tuple[str, str]]:
    """The thresholds table of the header: each alert's severity and when it fires."""
    header = RULES_FILE.read_text(encoding="utf-8").split("\ngroups:", 1)[0]
    entries: dict[str, tuple[str, str]] = {}
    name = ""
    for line in header.splitlines():
        if match := re.fullmatch(r"#   (Rollout\w+) +(warning|critical) +(.*)", line):
            name = match.group(1)
            entries[name] = (match.group(2), match.group(3))
        elif name and (match := re.fullmatch(r"# {10,}(.*)", line)):
            entries[name] = (entries[name][0], f"{entries[name][1]} {match.group(1)}")
    return entries


def test_the_thresholds_table_is_the_alerts() -> None:
    """The header lists each alert once with its severity, its ``for`` and each number it compares against."""
    entries = _header_entries()
    assert set(entries) == set(ALERTS)
    for name, alert in ALERTS.items():
        severity, when = entries[name]
        assert severity == alert["labels"]["severity"], name
        minutes = int(alert["for"].removesuffix("m"))
        assert f"for {minutes} minute" in when, (name, when)
        numbers = {float(n) for n in re.findall(r"\d+(?:\.\d+)?", when)}
        for threshold in re.findall(r"> (\d+(?:\.\d+)?)\b", alert["expr"]):
            assert float(threshold) in numbers, (name, threshold, when)


def test_the_docs_alert_table_is_the_header() -> None:
    """The docs' alert reference lists each alert with its severity and the rules file header's sentence."""
    readme = (ROOT / "docs" / "reference" / "alerts.md").read_text(encoding="utf-8")
    for name, (severity, when) in _header_entries().items():
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{name}` |"))
        _, readme_when, readme_severity = row.removesuffix(" |").split(" | ")
        assert (readme_when.replace("`", ""), readme_severity) == (when, severity), name


def test_the_alerts_watch_the_scrape_job() -> None:
    """The alerts on scrape targets name the job the scrape config defines."""
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    assert [job["job_name"] for job in config["scrape_configs"]] == [rules.JOB]
    assert f'up{{job="{rules.JOB}"}}' in ALERTS["RolloutExporterDown"]["expr"]


def test_the_package_does_not_import_the_generator() -> None:
    """``dashboards/`` is a development tool: no module of the package imports it."""
    for module in (ROOT / "src" / "rollout_telemetry").rglob("*.py"):
        text = module.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) dashboards\b", text, re.M), module
