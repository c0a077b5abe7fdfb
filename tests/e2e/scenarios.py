"""Demo scenarios under one real Prometheus: which alerts each run fires while it runs.

These tests show the wiring: the demo's series, scraped by a real Prometheus, reach the committed rules and
fire the alert of each cause. The rules' logic (each threshold, absent series, edges) is tested exactly and
instantly by ``promtool test rules`` (dashboards/prometheus/rules_test.yml, tests/e2e/test_rules_e2e.py).

Nothing here is left to chance or to the machine's speed:
- no rollout is lost but by the scenario's cause (``NO_LOSSES``), so an alert on losses (a contaminated
  baseline, say) can fire only in the scenarios whose cause loses rollouts;
- each cause is far past its alert's threshold (a share of 0.8 against 0.5, of 0.25 against 0.2 of the
  groups, 3 times the output length against 1.5), so a window of few rollouts on a busy machine still
  crosses it;
- an alert on the machine rather than the run (``MACHINE_ALERTS``: the event loop waking late) is collected
  only for the scenario that causes it: a healthy demo's loop on a shared machine at load 10 wakes 0.1 s late
  too (it fired so in the truncation and cleanup_leak scenarios of a CI run). ``promtool test rules`` tests
  its logic exactly, the ``loop_lag`` scenario its wiring;
- an alert needs, after its cause, at most the shortened window to fill (10 s), ``for:`` (2 s), a scrape
  and an evaluation interval (1 s each): 14 s; each test's ``WATCH`` keeps watching past that, and says
  how long the cause stays visible to its comparison (a drop against 12 s before, for instance);
- a demo keeps its scenario's time (``_cli/scenario_clock.py``), which a loaded machine puts behind the wall
  clock: its cause comes that much later. While an alert a run expects has not fired, the watch goes on, up
  to ``GRACE`` past its own length: a run that fires it late fires it all the same, and one that never
  fires it is found (an alert that should not fire has the whole watch to show).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

from tests.e2e.processes import Exporter
from tests.e2e.prometheus import RULES, Prometheus

NO_LOSSES = ("--masked", "0", "--failed", "0", "--omitted", "0")
"""The demo's arguments for a run that loses no rollout but by its scenario's cause."""
MACHINE_ALERTS = frozenset({"RolloutEventLoopLag"})
"""Alerts that the machine's load raises as well as a scenario's cause: collected only for ``machine_bound``
runs (``fired_alerts``)."""
GRACE = 120.0
"""Seconds the watch may go on past its length while an expected alert has not fired: wide, a machine so
loaded that a demo's scenario falls two minutes behind the wall clock."""
OUTLAST = 120.0 + GRACE
"""Seconds a demo runs past its watch: the test stops it, so it never ends (and its series never go stale)
while it is watched, however long the demos started after it took to start."""


def scenario_demos(
    scenarios: Sequence[str],
    *,
    rate: int,
    agents: str,
    drop_after: float,
    watch: float,
    extra: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[str]]:
    """The demo's arguments for each scenario (its run named after it, a seed of its own): its cause after
    ``drop_after`` seconds, no loss but the cause's (``NO_LOSSES``), running ``OUTLAST`` seconds past the
    watch; ``extra`` adds a scenario's own arguments."""
    common = ["--rate", str(rate), "--agents", agents, "--max-rollout-seconds", "0.2",
              "--drop-after", str(drop_after), "--duration", str(drop_after + watch + OUTLAST),
              "--summary-interval", "60", "--stalled", "0", *NO_LOSSES]  # fmt: skip
    own = extra or {}
    return {
        scenario: [
            "demo",
            "--scenario",
            scenario,
            "--run",
            scenario,
            "--seed",
            str(seed),
            *common,
            *own.get(scenario, ()),
        ]
        for seed, scenario in enumerate(scenarios)
    }


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
    *,
    expected: Mapping[str, set[str]] | None = None,
    check: Callable[[Prometheus], None] | None = None,
    machine_bound: Collection[str] = (),
) -> dict[str, set[str]]:
    """Run one demo per run name (its arguments), scraped by one Prometheus with ``rules``, for ``seconds``,
    and on while a run's ``expected`` alerts have not all fired (at most ``GRACE`` more); return the alerts
    that fired for each run. ``check`` is called with Prometheus before it stops. ``MACHINE_ALERTS`` are
    collected for the ``machine_bound`` runs only (the ones whose cause they are).

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
        awaited = expected or {}

        def watching() -> bool:
            elapsed = time.monotonic() - started
            waiting = any(not alerts <= fired.get(run, set()) for run, alerts in awaited.items())
            # bound: GRACE, a wide margin for a loaded machine past the watch's own length
            return elapsed < seconds or (waiting and elapsed < seconds + GRACE)

        while watching():
            for alert in prometheus.query('ALERTS{alertstate="firing"}'):
                run = alert["metric"].get("run")
                name = alert["metric"]["alertname"]
                if run in fired and (name not in MACHINE_ALERTS or run in machine_bound):
                    if name not in fired[run] and name not in awaited.get(run, {name}):
                        # Shown if the test fails: what the run's rollouts per second were as it fired.
                        rate = prometheus.query(f'sum(rate(rollout_completed_total{{run="{run}"}}[10s]))')
                        per_second = float(rate[0]["value"][1]) if rate else 0.0
                        at = time.monotonic() - started
                        print(f"{run}: {name} fired at {at:.0f} s, {per_second:.0f} rollouts/s")
                    fired[run].add(name)
            time.sleep(0.5)
        if check is not None:
            check(prometheus)
    return fired
