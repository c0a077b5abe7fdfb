"""Cost of record() against a bare locked dict update, prometheus_client and the OpenTelemetry SDK.

For each outcome (measured, masked, failed) it times ``record()`` and, in the same interleaved rounds:

- a bare locked-dict call: a plain function doing one locked dict update of a count and a reward sum;
- prometheus_client ``.labels(...).inc()`` on the *equivalent counters*: the ones the outcome moves in the
  exposition (measured: completed, rewarded, reward sum; masked: completed, rewarded, masked by kind,
  masked rewarded; failed: failed by kind), and a single ``.labels().inc()`` for reference;
- the OpenTelemetry SDK ``counter.add`` on the same equivalent counters, and a single ``add`` for reference.

Beside them, the least a recorder can do with a measured row: read a verify response's five fields from a
dict, check them and count it under a lock, in one function, and the same work in three (an entry, a rule and
a store, as ``record()`` is layered: the facade, ``check_outcome`` and ``Account.count``): how far
``.labels().inc()`` is above any recorder that keeps its rules in functions of their own.

It also times ``record()`` of a measured row whose model response carries ``usage`` (and of one truncated),
against the same row without: the cost of reading and counting tokens and truncation.

Ratios are medians of per-round ratios (each pair timed moments apart, so drift cancels); absolute times
drift between runs and machines. Goals: record() <= 2.5x the bare locked-dict call, >= 2x faster than
prometheus_client and >= 10x faster than the OpenTelemetry SDK on equivalent counters.

    .venv/bin/python benchmarks/record.py [--calls 200000] [--rounds 11]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import timeit
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from prometheus_client import CollectorRegistry, Counter

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._cli.args import at_least_one  # the CLI's check, and its message

OUTCOMES = ("measured", "masked", "failed")

ROWS: dict[str, object] = {
    "measured": {"reward": 0.5},
    "with_usage": {
        "reward": 0.5,
        "response": {
            "status": "completed",
            "incomplete_details": None,
            "usage": {
                "input_tokens": 120,
                "output_tokens": 40,
                "total_tokens": 160,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 12},
            },
        },
    },
    "truncated": {
        "reward": 0.0,
        "response": {
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "usage": {"input_tokens": 120, "output_tokens": 4096, "total_tokens": 4216},
        },
    },
    "masked": {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"},
}
"""The verify responses timed: without usage, with usage, truncated, masked."""


_READ_AND_CHECK = """
    reward, mask_sample = response.get("reward"), response.get("mask_sample")
    failure_kind, failure_reason = response.get("failure_kind"), response.get("failure_reason")
    model_response = response.get("response")
    if type(reward) is not float or not -1e30 <= reward <= 1e30:
        raise ValueError(reward)
    if mask_sample is not None and type(mask_sample) is not bool:
        raise ValueError(mask_sample)
    if failure_kind is not None and type(failure_kind) is not str:
        raise ValueError(failure_kind)
    if failure_reason is not None and type(failure_reason) is not str:
        raise ValueError(failure_reason)
    if model_response is not None:
        raise ValueError(model_response)
"""
_COUNT = """
    lock.acquire()
    try:
        cell = counts.get(agent)
        if cell is None:
            cell = counts[agent] = [0, 0.0]
        cell[0] += 1
        cell[1] += reward
    finally:
        lock.release()
"""
LEAST_WORK = f"""
def fused(agent, response):
{_READ_AND_CHECK}{_COUNT}

def rule(response):
{_READ_AND_CHECK}
    return mask_sample, reward, failure_kind, failure_reason, model_response

def store(agent, outcome):
    _, reward, _, _, _ = outcome
{_COUNT}

def layered(agent, response):
    store(agent, rule(response))
"""
"""The least a recorder does with a verify response (read its five fields from a dict, check them, count it
under a lock), in one function (``fused``) and in three (``layered``: an entry, a rule and a store), made of
the same lines."""


def least_work() -> tuple[Callable[[str, object], None], Callable[[str, object], None]]:
    """``fused`` and ``layered`` of ``LEAST_WORK``, with a lock and counts of their own."""
    names: dict[str, Any] = {"lock": threading.Lock(), "counts": {}}
    exec(LEAST_WORK, names)  # the benchmark's own source: one text for both shapes
    return names["fused"], names["layered"]


def candidates() -> tuple[dict[str, str], dict[str, object]]:
    """The statements timed and the names they use."""
    lock = threading.Lock()
    counts: dict[str, list[float]] = {}

    def bare_dict(agent: str, reward: float) -> None:
        # One locked dict update of a count and a reward sum: the least a counting call can do.
        with lock:
            cell = counts.get(agent)
            if cell is None:
                cell = counts[agent] = [0, 0.0]
            cell[0] += 1
            cell[1] += reward

    registry = CollectorRegistry()
    agent_counter = {
        name: Counter(name, name, ["agent"], registry=registry)
        for name in ("completed", "rewarded", "reward_positive", "masked_rewarded")
    }
    kind_counter = {
        name: Counter(name, name, ["agent", "failure_kind"], registry=registry)
        for name in ("masked", "failed")
    }
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()]).get_meter("bench")
    otel = {name: meter.create_counter(name) for name in (*agent_counter, *kind_counter)}
    telemetry = RolloutTelemetry(run="bench")
    fused, layered = least_work()
    names: dict[str, object] = {
        "bare_dict": bare_dict,
        "p": agent_counter,
        "k": kind_counter,
        "o": otel,
        "a": {"agent": "math_agent"},
        "ak": {"agent": "math_agent", "failure_kind": "judge_failed"},
        "af": {"agent": "math_agent", "failure_kind": "session_lost"},
        "record": telemetry.record,
        "fused": fused,
        "layered": layered,
        "record_failure": telemetry.record_failure,
        **ROWS,
    }
    statements = {
        "bare dict under a lock": "bare_dict('math_agent', 0.5)",
        "prometheus_client single inc": "k['masked'].labels('math_agent', 'judge_failed').inc()",
        "OpenTelemetry SDK single add": "o['masked'].add(1, ak)",
        "prometheus_client measured": (
            "p['completed'].labels('math_agent').inc(); p['rewarded'].labels('math_agent').inc(); "
            "p['reward_positive'].labels('math_agent').inc(0.5)"
        ),
        "prometheus_client masked": (
            "p['completed'].labels('math_agent').inc(); p['rewarded'].labels('math_agent').inc(); "
            "k['masked'].labels('math_agent', 'judge_failed').inc(); "
            "p['masked_rewarded'].labels('math_agent').inc()"
        ),
        "prometheus_client failed": "k['failed'].labels('math_agent', 'session_lost').inc()",
        "OpenTelemetry SDK measured": (
            "o['completed'].add(1, a); o['rewarded'].add(1, a); o['reward_positive'].add(0.5, a)"
        ),
        "OpenTelemetry SDK masked": (
            "o['completed'].add(1, a); o['rewarded'].add(1, a); o['masked'].add(1, ak); "
            "o['masked_rewarded'].add(1, a)"
        ),
        "OpenTelemetry SDK failed": "o['failed'].add(1, af)",
        "least work, one function": "fused('math_agent', measured)",
        "least work, three functions": "layered('math_agent', measured)",
        "record() measured": "record('math_agent', measured)",
        "record() masked": "record('math_agent', masked)",
        "record() failed": "record_failure('math_agent', 'session_lost')",
        "record() measured with usage": "record('math_agent', with_usage)",
        "record() truncated with usage": "record('math_agent', truncated)",
    }
    return statements, names


def measure(calls: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per call of each candidate in every round; rounds interleave the candidates."""
    statements, names = candidates()
    for statement in statements.values():  # warm up: the interpreter specialises hot code after a while
        timeit.timeit(statement, globals=names, number=calls)
    times: dict[str, list[float]] = {name: [] for name in statements}
    for _ in range(rounds):
        for name, statement in statements.items():
            times[name].append(timeit.timeit(statement, globals=names, number=calls) / calls)
    return times


def ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of the per-round ratio."""
    return statistics.median(n / d for n, d in zip(numerator, denominator, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=at_least_one, default=200_000, help="calls per timing")
    parser.add_argument("--rounds", type=at_least_one, default=11, help="interleaved rounds")
    args = parser.parse_args()
    times = measure(args.calls, args.rounds)
    for name, seconds in times.items():
        print(f"{name:<32} {statistics.median(seconds) * 1e6:8.3f} us (median)")
    bare = times["bare dict under a lock"]
    print()
    for outcome in OUTCOMES:
        own = times[f"record() {outcome}"]
        print(
            f"record() {outcome:<9} {ratio(own, bare):5.2f}x the bare dict (goal <= 2.5); "
            f"prometheus_client {ratio(times[f'prometheus_client {outcome}'], own):5.2f}x slower (goal >= 2; "
            f"one inc: {ratio(times['prometheus_client single inc'], own):4.2f}x); "
            f"OTel SDK {ratio(times[f'OpenTelemetry SDK {outcome}'], own):5.2f}x slower (goal >= 10; "
            f"one add: {ratio(times['OpenTelemetry SDK single add'], own):5.2f}x)"
        )
    one_inc = times["prometheus_client single inc"]
    print(
        "the least a recorder does with a measured row (read and check five fields, count under a lock): "
        f"{ratio(one_inc, times['least work, one function']):4.2f}x faster than one inc in one function, "
        f"{ratio(one_inc, times['least work, three functions']):4.2f}x in three (entry, rule, store, as "
        "record() is layered)"
    )
    plain = times["record() measured"]
    for name in ("record() measured with usage", "record() truncated with usage"):
        print(f"{name:<32} {ratio(times[name], plain):5.2f}x record() of the same row without usage")


if __name__ == "__main__":
    main()
