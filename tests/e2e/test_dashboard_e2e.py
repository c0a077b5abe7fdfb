"""End to end: the demo exporter, a real Prometheus with our config and rules, every dashboard query."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.dashboard import FAILURE_PANELS, dashboard_queries, followed_run_panels
from tests.e2e.processes import Exporter
from tests.e2e.prometheus import RULES, Prometheus
from tests.support import samples, wait_until

WARMUP, DURATION, RATE = 3.0, 8.0, 30
PLANNED = int(DURATION * RATE)
"""The rollouts the demo declares and starts: 30 a second for 8 s, in groups of 4, agent by agent."""
DEMO_AGENTS = ("math_agent", "code_agent", "browser_agent")


def _account(text: str) -> dict[str, dict[str, float]]:
    """Per agent: completed, masked, failed, omitted, rewarded and the reward sums, from one scrape."""
    account: dict[str, dict[str, float]] = {}
    for (name, labels), value in samples(text).items():
        agent = dict(labels).get("agent")
        if agent is None:
            continue
        key = name.removeprefix("rollout_").removesuffix("_total")
        bucket = account.setdefault(agent, {})
        bucket[key] = bucket.get(key, 0.0) + value
    return account


def _total(text: str, name: str, **labels: str) -> float:
    """The sum of a family's samples in one scrape, of those with ``labels``."""
    return sum(
        count
        for (sample, sample_labels), count in samples(text).items()
        if sample == name and labels.items() <= dict(sample_labels).items()
    )


def _run(tmp_path: Path, shares: list[str]) -> None:
    """Run the demo under a real Prometheus until the run is over and scraped, then check everything."""
    args = ["demo", "--seed", "7", "--rate", str(RATE), "--duration", str(DURATION), "--warmup", str(WARMUP),
            "--linger", "120", "--run", "e2e", "--max-rollout-seconds", "0.3", "--summary-interval", "60",
            *shares]  # fmt: skip
    exporter = Exporter(args, tmp_path / "exporter.log")
    # A short scrape interval keeps small what increase() cannot see: the first sample of a series that
    # appears mid-run (a failure kind's first occurrence) is its baseline, not an increase. Prometheus
    # scrapes before the exporter starts, so the warm-up's zeros are scraped however slowly it starts.
    prometheus = Prometheus(tmp_path, [exporter.target], interval="200ms")
    with prometheus:
        # Prometheus applies new targets after a while: wait until it scrapes (and fails) the target.
        prometheus.wait_for(lambda: bool(prometheus.query("up")), timeout=30, what="the first scrape")
        with exporter:

            def run_over() -> bool:
                # Exactly over: every declared rollout decided, none waiting for a retry, none in flight (a
                # stalled one ends after stall_after). Nothing the exporter counts changes after that.
                text = exporter.scrape()
                return (
                    _total(text, "rollout_run_expected") == PLANNED
                    and _total(text, "rollout_run_rollouts", disposition="unknown") == 0
                    and _total(text, "rollout_run_retryable") == 0
                    and _total(text, "rollout_in_flight") == 0
                )

            wait_until(run_over, timeout=WARMUP + DURATION + 60, what="the demo run to be over")
            over_at = time.time()
            final = exporter.scrape()
            completed = _total(final, "rollout_completed_total")
            assert completed > 0

            def scraped_after(moment: float) -> float | None:
                stamps = prometheus.query('timestamp(rollout_completed_total{run="e2e"})')
                newest = max((float(r["value"][1]) for r in stamps), default=0.0)
                return newest if newest > moment else None

            # A scrape that began once the run was over holds every final count (waiting for the completed
            # count alone could stop at a scrape taken before the run's last failures).
            prometheus.wait_for(
                lambda: scraped_after(over_at) is not None, timeout=30, what="a scrape of the final counts"
            )
            got = prometheus.query('sum(rollout_completed_total{run="e2e"})')
            assert float(got[0]["value"][1]) == completed
            first = prometheus.query('min_over_time(rollout_completed_total{run="e2e"}[1h])')
            assert [float(r["value"][1]) for r in first] == [0.0, 0.0, 0.0], "the warm-up was not scraped"
            # The timestamp of the newest scrape: evaluating there leaves nothing to extrapolate.
            stamp = scraped_after(over_at)
            assert stamp is not None
            prometheus.wait_for(
                lambda: bool(prometheus.query("agent:rollout_masked:ratio_rate5m")),
                timeout=30,
                what="the recording rules to be evaluated",
            )
            _check(prometheus, _account(final), stamp, healthy=shares == HEALTHY)
            _check_coverage(prometheus, final, stamp, healthy=shares == HEALTHY)


HEALTHY = ["--masked", "0", "--failed", "0", "--omitted", "0", "--stalled", "0"]
TROUBLED = ["--masked", "0.25", "--failed", "0.15", "--omitted", "0.05"]


def _check(
    prometheus: Prometheus, account: dict[str, dict[str, float]], stamp: float, *, healthy: bool
) -> None:
    # Every dashboard query returns at least one series, the coverage row's and the trajectory health ones
    # too (the demo declares its expected work, and its rollouts carry a trajectory); in a healthy run the
    # failure panels read 0.
    for title, expr, _ in dashboard_queries():
        result = prometheus.query(expr, at=stamp)
        assert result, f"panel {title!r} returned nothing for {expr}"
        if healthy and title in FAILURE_PANELS:
            assert all(float(r["value"][1]) == 0 for r in result), (title, result)

    # The recording rules agree with the exporter's account.
    rules = {
        r["record"]: r["expr"]
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    for name in rules:
        if healthy and name.startswith("agent_failure_kind:"):
            continue  # one series per failure kind: none exist in a healthy run
        # Compared with 10 minutes ago: tests/slow/test_drop_scenarios.py runs those on shorter windows.
        if name.endswith("_10m"):
            continue
        assert prometheus.query(name), f"recording rule {name} produced nothing"

    def rule(name: str) -> dict[str, float]:
        return {dict(k)["agent"]: v for k, v in _by_agent(prometheus.query(rules[name], at=stamp)).items()}

    masked_ratio = rule("agent:rollout_masked:ratio_rate5m")
    mean = rule("agent:rollout_reward:mean_rate5m")
    unmasked = rule("agent:rollout_reward_unmasked:mean_rate5m")
    failed = rule("agent:rollout_failed:rate5m")
    completed = rule("agent:rollout_completed:rate5m")
    assert set(masked_ratio) == set(account) == {"math_agent", "code_agent", "browser_agent"}

    def first_samples(metric: str, agent: str) -> float:
        # A series that appears mid-run (a kind's first occurrence) starts at a value increase() treats as
        # its baseline: the rules can miss at most these first samples, and never count more.
        found = prometheus.query(f'{metric}{{agent="{agent}"}}[1h]', at=stamp)
        return sum(float(series["values"][0][1]) for series in found)

    tiny = 1e-9
    for agent, counts in account.items():
        total = counts["completed"]
        reward_sum = counts["reward_positive"] - counts["reward_negative"]
        # Always-present counters start at 0 (warm-up) and the evaluation is at the last scrape: exact.
        assert mean[agent] == pytest.approx(reward_sum / counts["rewarded"], rel=1e-9, abs=1e-12)
        assert completed[agent] > 0
        masked = counts.get("masked", 0.0)
        lost = first_samples("rollout_masked_total", agent)
        scored = total - counts.get("unscored", 0.0)  # NeMo Gym's denominator
        assert (masked - lost) / scored - tiny <= masked_ratio[agent] <= masked / scored + tiny
        failures = counts.get("failed", 0.0)
        lost = first_samples("rollout_failed_total", agent)
        ratio = failed[agent] / completed[agent]
        assert (failures - lost) / total - tiny <= ratio <= failures / total + tiny
        # The demo's masked rollouts carry reward 0, so only the unmasked denominator can miss samples.
        assert counts.get("masked_reward_positive", 0.0) == counts.get("masked_reward_negative", 0.0) == 0.0
        masked_rewarded = counts.get("masked_rewarded", 0.0)
        lost = first_samples("rollout_masked_rewarded_total", agent)
        bounds = sorted(
            [
                reward_sum / (counts["rewarded"] - masked_rewarded),
                reward_sum / (counts["rewarded"] - masked_rewarded + lost),
            ]
        )
        assert bounds[0] - tiny <= unmasked[agent] <= bounds[1] + tiny
        if healthy:
            assert masked_ratio[agent] == 0
            assert failed[agent] == 0
            assert unmasked[agent] == mean[agent]
        else:
            assert masked_ratio[agent] > 0
            assert failed[agent] > 0
            assert unmasked[agent] != mean[agent]


def _check_coverage(prometheus: Prometheus, final: str, stamp: float, *, healthy: bool) -> None:
    """The coverage row on the demo: every rollout it declared, decided; its retries counted."""
    panels = followed_run_panels(prometheus, "e2e", stamp, lifecycle=True, declared=True, trajectories=True)
    (bars,) = panels["Run progress by disposition"]
    for agent in DEMO_AGENTS:
        shares = {
            r["metric"]["disposition"]: float(r["value"][1]) for r in bars if r["metric"]["agent"] == agent
        }
        counts = {d: _total(final, "rollout_run_rollouts", agent=agent, disposition=d) for d in shares}
        expected = _total(final, "rollout_run_expected", agent=agent)
        assert shares == pytest.approx({d: n / expected for d, n in counts.items()}, abs=1e-12)
        assert shares["unknown"] == 0
    expected_stat, done_stat = panels["Rollouts done of expected"]
    # Groups of 4 dealt to the 3 agents in turn: 60 groups, 20 each.
    assert sorted(float(r["value"][1]) for r in expected_stat) == [PLANNED / 3] * 3
    assert sorted(float(r["value"][1]) for r in done_stat) == [PLANNED / 3] * 3
    (retries,) = panels["Retries per minute"]
    assert {r["metric"]["agent"] for r in retries} == set(DEMO_AGENTS)
    retried = _total(final, "rollout_retried_total")
    assert (retried == 0) == healthy
    (retryable,) = panels["Retryable failures"]
    assert all(float(r["value"][1]) == 0 for r in retryable)  # over: every failure retried or final


def _by_agent(result: list[dict[str, Any]]) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in result}


def test_healthy_run_every_panel_has_data_and_failures_read_zero(tmp_path: Path) -> None:
    """A healthy demo: every dashboard query has a series, failure panels are 0, rules match the account."""
    _run(tmp_path, HEALTHY)


def test_troubled_run_every_panel_has_data_and_rules_match(tmp_path: Path) -> None:
    """A demo with masked, failed and omitted rollouts: every query has data and the rules match."""
    _run(tmp_path, TROUBLED)


def test_dashboard_query_substitution_leaves_no_macro() -> None:
    """The substitution used above covers every variable and macro the dashboard uses."""
    queries = list(dashboard_queries())
    assert len(queries) >= 24
    assert all(not re.search(r"\$\w", expr) for _, expr, _ in queries)


AGENTS = ("math_agent", "code_agent")
TASKS, ROLLOUTS, UNSEEN = 10, 2, 3
"""Each agent is asked for TASKS x ROLLOUTS rollouts; the last UNSEEN of them never arrive (unknown)."""


def _plan(i: int) -> str:
    """The disposition of an agent's i-th rollout; ``retried`` fails once, then is measured."""
    return {3: "masked", 5: "unscored", 7: "retried", 8: "omitted", 9: "failed"}.get(i % 10, "measured")


def _write_followed_run(main: Path, failures: Path) -> None:
    """Append each agent's rollouts as Gym writes them, a line at a time, while Prometheus scrapes."""
    with main.open("a", buffering=1) as out, failures.open("a", buffering=1) as side:
        for i in range(TASKS * ROLLOUTS - UNSEEN):
            for agent in AGENTS:
                identity = {"_ng_task_index": i // ROLLOUTS, "_ng_rollout_index": i % ROLLOUTS}
                row: dict[str, Any] = {**identity, "agent_ref": {"name": agent}, "_ng_attempt_index": 0}
                plan = _plan(i)
                if plan in ("failed", "omitted", "retried"):
                    kind = {"failed": "session_lost", "omitted": "cancelled", "retried": "transport_timeout"}
                    record = {"failure": {"failure_kind": kind[plan]}}
                    side.write(
                        json.dumps({**row, "_ng_omitted": plan == "omitted", "_ng_failure_record": record})
                    )
                    side.write("\n")
                    if plan != "retried":
                        continue
                    row["_ng_attempt_index"] = 1
                if plan == "masked":
                    row |= {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}
                elif plan != "unscored":
                    row |= {"reward": (i % 4) / 4, "mask_sample": False}
                row["response"] = {
                    "status": "completed",
                    "usage": {"input_tokens": 100, "output_tokens": 10 + i},
                }
                answer = "" if i % 5 == 0 else "the answer"  # one in five hollow
                row["ng_trajectory"] = {"turns": [{"turn_no": 1, "answer": answer}], "model_calls": []}
                out.write(json.dumps(row) + "\n")
            time.sleep(0.1)


def test_followed_run_fills_the_coverage_row(tmp_path: Path) -> None:
    """serve PATH under a real Prometheus: every panel has data but the lifecycle ones, and the coverage
    row's progress bar and counts are exactly the rollouts written."""
    main = tmp_path / "run.jsonl"
    failures = tmp_path / "run_failures.jsonl"
    inputs = tmp_path / "run_materialized_inputs.jsonl"
    inputs.write_text(
        "".join(
            json.dumps({"_ng_task_index": t, "_ng_rollout_index": r, "agent_ref": {"name": agent}}) + "\n"
            for agent in AGENTS
            for t in range(TASKS)
            for r in range(ROLLOUTS)
        )
    )
    main.write_text("")
    failures.write_text("")
    expected = TASKS * ROLLOUTS
    counts = {"unknown": UNSEEN} | dict.fromkeys(("measured", "masked", "unscored", "failed", "omitted"), 0)
    for i in range(expected - UNSEEN):
        plan = _plan(i)
        counts["measured" if plan == "retried" else plan] += 1

    args = ["serve", str(main), "--poll-interval", "0.2", "--run", "e2e-follow"]
    exporter = Exporter(args, tmp_path / "serve.log")
    prometheus = Prometheus(tmp_path, [exporter.target], interval="200ms")
    with prometheus, exporter:
        prometheus.wait_for(
            lambda: bool(prometheus.query("rollout_run_expected")), timeout=30, what="a scrape"
        )
        _write_followed_run(main, failures)

        def scraped_all() -> bool:
            got = prometheus.values('sum by (agent) (rollout_run_rollouts{disposition!="unknown"})')
            return sorted(got.values()) == [expected - UNSEEN] * len(AGENTS)

        prometheus.wait_for(scraped_all, timeout=30, what="every written rollout to be scraped")
        stamp = max(float(r["value"][1]) for r in prometheus.query("timestamp(rollout_run_expected)"))
        followed = prometheus.query('group by (agent) (rollout_run_rollouts{run=~"e2e-follow"})')
        assert {r["metric"]["agent"] for r in followed} == set(AGENTS)

        panels = followed_run_panels(prometheus, "e2e-follow", stamp, trajectories=True)

    # The progress bar: the share of the expected rollouts in each disposition, exactly as written.
    (bars,) = panels["Run progress by disposition"]
    for agent in AGENTS:
        shares = {
            r["metric"]["disposition"]: float(r["value"][1]) for r in bars if r["metric"]["agent"] == agent
        }
        assert shares == pytest.approx({d: n / expected for d, n in counts.items()}, abs=1e-12)
    expected_stat, done_stat = panels["Rollouts done of expected"]
    assert {float(r["value"][1]) for r in expected_stat} == {expected}
    assert {float(r["value"][1]) for r in done_stat} == {expected - UNSEEN}
    (retries,) = panels["Retries per minute"]
    assert {r["metric"]["agent"] for r in retries} == set(AGENTS)
    assert all(float(r["value"][1]) > 0 for r in retries)
    (masked,) = panels["Masked share"]
    assert 0 < float(masked[0]["value"][1]) <= 1
