"""Many processes, one view: four real exporters scraped by a real Prometheus; a restart; a Pushgateway."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

from rollout_telemetry import Disposition, RolloutTelemetry
from rollout_telemetry._views.series import FAMILIES
from tests.e2e import fleet_member
from tests.e2e.prometheus import Prometheus
from tests.support import free_port, free_port_range, require_tool, samples, stop_process, wait_until

MEMBER = Path(fleet_member.__file__)


class Member:
    """One fleet member process."""

    def __init__(self, seed: int, port: int, port_range: int) -> None:
        self.seed = seed
        self.process = subprocess.Popen(
            [sys.executable, str(MEMBER), str(seed), str(port), str(port_range)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("ready "), line
        self.port = int(line.split()[1])

    def go(self) -> None:
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write("go\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "done"

    def stop(self) -> None:
        with suppress(BrokenPipeError):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        assert self.process.stdout is not None
        self.process.stdout.close()


@contextmanager
def members(seeds: list[int], port: int, port_range: int) -> Iterator[list[Member]]:
    started: list[Member] = []
    try:
        for seed in seeds:
            started.append(Member(seed, port, port_range))
        yield started
    finally:
        for member in started:
            member.stop()


def expected(seeds: list[int]) -> RolloutTelemetry:
    """One account holding every member's outcomes: the exact fleet totals."""
    telemetry = RolloutTelemetry(run="fleet")
    for seed in seeds:
        fleet_member.record_all(telemetry, seed)
    return telemetry


def tally(seeds: list[int]) -> tuple[Counter[tuple[str, str]], dict[str, list[float]]]:
    """Counted from the members' own outcome lists, without the library: (agent, disposition) counts, and
    the rewards each agent's completed rollouts carried."""
    counts: Counter[tuple[str, str]] = Counter()
    rewards: dict[str, list[float]] = {agent: [] for agent in fleet_member.AGENTS}
    for seed in seeds:
        for agent, disposition, reward, _ in fleet_member.outcomes(seed):
            counts[(agent, disposition)] += 1
            if reward is not None:
                rewards[agent].append(reward)
    return counts, rewards


def test_four_exporters_sum_exactly_in_prometheus(tmp_path: Path) -> None:
    """Four processes share a port range; Prometheus's sums equal the exact totals of all outcomes."""
    seeds = [11, 12, 13, 14]
    base = free_port_range(4)
    with members(seeds, base, 4) as fleet:
        assert sorted(m.port for m in fleet) == list(range(base, base + 4))
        targets = [f"127.0.0.1:{port}" for port in range(base, base + 4)]
        with Prometheus(tmp_path, targets, interval="500ms") as prometheus:
            prometheus.wait_for(lambda: prometheus.targets_up() == 4, timeout=30, what="four targets up")
            for member in fleet:
                member.go()
            truth = expected(seeds)
            counts, rewards = tally(seeds)
            total = sum(n for (_, disposition), n in counts.items() if disposition in ("measured", "masked"))

            def all_scraped() -> bool:
                got = prometheus.query('sum(rollout_completed_total{run="fleet"})')
                return bool(got) and float(got[0]["value"][1]) == total

            prometheus.wait_for(all_scraped, timeout=30, what="every member's final counts")
            for name, dispositions in (
                ("rollout_completed_total", ("measured", "masked")),
                ("rollout_masked_total", ("masked",)),
                ("rollout_failed_total", ("failed",)),
                ("rollout_omitted_total", ("omitted",)),
            ):
                assert prometheus.values(f"sum by (agent) ({name})") == {
                    (("agent", agent),): sum(counts[(agent, d)] for d in dispositions)
                    for agent in fleet_member.AGENTS
                }, name
            snap = truth.snapshot()
            for family in FAMILIES:
                if family.type != "counter" or "agent" not in family.labels:
                    continue
                by = ", ".join(family.labels)
                got = prometheus.values(f"sum by ({by}) ({family.name})")
                want = {
                    tuple(sorted(zip(family.labels, labels, strict=True))): value
                    for labels, value in family.sample(snap)
                }
                assert got.keys() == want.keys(), family.name
                for key, value in want.items():
                    assert got[key] == pytest.approx(value, rel=1e-12, abs=1e-9), (family.name, key)
            mean = prometheus.values(
                "(sum by (agent) (rollout_reward_positive_total)"
                " - sum by (agent) (rollout_reward_negative_total))"
                " / sum by (agent) (rollout_rewarded_total)"
            )
            ratio = prometheus.values(
                "sum by (agent) (rollout_masked_total) / sum by (agent) (rollout_completed_total)"
            )
            for agent in snap.agents:
                key = (("agent", agent.agent),)
                assert agent.mean_reward is not None
                assert mean[key] == pytest.approx(agent.mean_reward, rel=1e-9)
                mine = rewards[agent.agent]
                assert mean[key] == pytest.approx(sum(mine) / len(mine), rel=1e-9)
                assert ratio[key] == pytest.approx(agent.masked / agent.completed, rel=1e-12)
                masked, measured = counts[(agent.agent, "masked")], counts[(agent.agent, "measured")]
                assert ratio[key] == pytest.approx(masked / (masked + measured), rel=1e-12)
                assert agent.count(Disposition.FAILED) > 0
                assert agent._reward_negative > 0


def test_windowed_mean_reward_survives_an_exporter_restart(tmp_path: Path) -> None:
    """increase() of the split reward counters gives the exact mean over a window spanning a restart."""
    port = free_port()
    with Prometheus(tmp_path, [f"127.0.0.1:{port}"], interval="200ms") as prometheus:
        for seed in (21, 22):
            with members([seed], port, 1) as (member,):
                prometheus.wait_for(lambda: prometheus.targets_up() == 1, timeout=30, what="the target up")
                prometheus.wait_for(
                    lambda: bool(prometheus.query('rollout_completed_total{run="fleet"} == 0')),
                    timeout=30,
                    what="the zeros to be scraped",
                )
                member.go()
                truth = expected([seed])
                total = sum(a.completed for a in truth.snapshot().agents)
                prometheus.wait_for(
                    lambda total=total: (  # type: ignore[misc]
                        prometheus.values('sum(rollout_completed_total{run="fleet"})').get((), -1) == total
                    ),
                    timeout=30,
                    what="the final counts",
                )
                stamp = max(
                    float(r["value"][1]) for r in prometheus.query("timestamp(rollout_completed_total)")
                )
        both = expected([21, 22]).snapshot()
        result = prometheus.query(
            "(sum by (agent) (increase(rollout_reward_positive_total[1h]))"
            " - sum by (agent) (increase(rollout_reward_negative_total[1h])))"
            " / sum by (agent) (increase(rollout_rewarded_total[1h]))",
            at=stamp,
        )
        windowed = {r["metric"]["agent"]: float(r["value"][1]) for r in result}
        resets = prometheus.values("resets(rollout_completed_total[1h])")
        assert all(value >= 1 for value in resets.values()), resets
        for agent in both.agents:
            assert agent.mean_reward is not None
            assert windowed[agent.agent] == pytest.approx(agent.mean_reward, rel=1e-9)


def test_push_to_a_real_pushgateway(tmp_path: Path) -> None:
    """push() replaces a group, pushadd keeps groups apart; the gateway serves our series with the key."""
    port = free_port()
    gateway = subprocess.Popen(
        [
            require_tool("prometheus-pushgateway"),
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        address = f"127.0.0.1:{port}"
        wait_until(lambda: _reachable(address), timeout=30, what="the pushgateway")
        first = RolloutTelemetry(run="batch")
        first.record("math", {"reward": 1.0})
        first.record_failure("math", "session_lost")
        first.push(address, job="rollout-batch", grouping_key={"instance": "worker-1"})
        second = RolloutTelemetry(run="batch")
        second.record("math", {"reward": -0.5, "mask_sample": True, "failure_kind": "judge_failed"})
        second.push(address, job="rollout-batch", grouping_key={"instance": "worker-2"}, replace=False)
        first.record("math", {"reward": 0.0})
        first.push(address, job="rollout-batch", grouping_key={"instance": "worker-1"})
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
            text = response.read().decode()
        parsed = samples(text)

        def value(name: str, **labels: str) -> float:
            wanted = {"job": "rollout-batch", "run": "batch", "agent": "math", **labels}
            (match,) = [v for (n, ls), v in parsed.items() if n == name and set(wanted.items()) <= ls]
            return match

        assert value("rollout_completed_total", instance="worker-1") == 2
        assert value("rollout_failed_total", instance="worker-1", failure_kind="session_lost") == 1
        assert value("rollout_completed_total", instance="worker-2") == 1
        assert value("rollout_masked_total", instance="worker-2", failure_kind="judge_failed") == 1
        assert value("rollout_reward_negative_total", instance="worker-2") == 0.5
    finally:
        stop_process(gateway, timeout=10)


def _reachable(address: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False
