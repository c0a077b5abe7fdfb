"""Demo scenarios under one real Prometheus: which alerts each run fires while it runs."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from tests.e2e.processes import Exporter
from tests.e2e.prometheus import RULES, Prometheus


def short_rules(trailing: str = "10s") -> str:
    """The committed rules with windows short enough for a test: 5 minutes (every rate window) to 10
    seconds, the trailing hour of output length to ``trailing``, the 10-minute comparison to 12 seconds and
    every ``for:`` to 2 seconds."""
    text = RULES.read_text().replace("[60m]", f"[{trailing}]")
    text = re.sub(r"\[\d+m\]", "[10s]", text)
    text = re.sub(r"offset \d+m", "offset 12s", text)
    return re.sub(r"for: \d+m", "for: 2s", text)


def fired_alerts(
    tmp_path: Path,
    demos: Mapping[str, Sequence[str]],
    rules: str,
    seconds: float,
    check: Callable[[Prometheus], None] | None = None,
) -> dict[str, set[str]]:
    """Run one demo per run name (its arguments), scraped by one Prometheus with ``rules``, for ``seconds``;
    return the alerts that fired for each run. ``check`` is called with Prometheus before it stops.

    Alerts without a run label (a target down while the demos start) are no run's and are not collected.
    """
    exporters = [Exporter([*args], tmp_path / f"{run}.log") for run, args in demos.items()]
    prometheus = Prometheus(tmp_path, [e.target for e in exporters], interval="1s", rules=rules)
    fired: dict[str, set[str]] = {run: set() for run in demos}
    with prometheus, ExitStack() as stack:
        prometheus.wait_for(lambda: bool(prometheus.query("up")), timeout=30, what="the first scrape")
        for exporter in exporters:
            stack.enter_context(exporter)
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for alert in prometheus.query('ALERTS{alertstate="firing"}'):
                run = alert["metric"].get("run")
                if run in fired:
                    fired[run].add(alert["metric"]["alertname"])
            time.sleep(0.5)
        if check is not None:
            check(prometheus)
    return fired
