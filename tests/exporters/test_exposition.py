"""The endpoint's own exposition writer: prometheus_client's bytes, without an object per series."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.openmetrics import exposition as openmetrics_exposition
from prometheus_client.openmetrics import parser as openmetrics_parser
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.outcome import classify
from rollout_telemetry._store.in_flight import InFlight
from rollout_telemetry.errors import ConfigError
from rollout_telemetry.exporters._exposition import encode
from rollout_telemetry.exporters._prometheus import AccountCollector
from tests.support import FakeClock, examples

OPENMETRICS = "application/openmetrics-text; version=1.0.0"
ENCODERS: dict[str, Callable[[CollectorRegistry], bytes]] = {
    "": generate_latest,
    "text/plain; version=1.0.0; escaping=allow-utf-8": generate_latest,
    OPENMETRICS: openmetrics_exposition.generate_latest,
}
"""Accept headers and the prometheus_client encoder the same request gets from ``choose_encoder``."""

AGENTS = ("math", "code", 'a"quoted', "back\\slash", "new\nline", "ünïcode", "x" * 80)
KINDS = (None, "judge_failed", "session_lost", "env:timeout", 'bad"kind', "UPPER", "k" * 70)
STAGES = ("agent", "judge", "env")
_text = st.text(alphabet=st.sampled_from('ab "\\\n\u00e9_'), max_size=6)
_reward = st.one_of(
    st.none(),
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False),
    st.sampled_from((0.0, 1.0, -0.5, 0.1, 0.2, 0.3, -0.1, -0.2, -0.3, 1e-300, 123456789.0)),
)
_usage = st.one_of(
    st.none(),
    st.builds(
        lambda tokens, reason: {
            "status": "incomplete" if reason else "completed",
            "incomplete_details": {"reason": reason} if reason else None,
            "usage": {"input_tokens": tokens, "output_tokens": tokens // 2, "total_tokens": tokens * 2},
        },
        st.integers(0, 10**7),
        st.sampled_from((None, "max_output_tokens", "content_filter")),
    ),
)
_agent = st.sampled_from(AGENTS)
_kind = st.sampled_from(KINDS)
_step = st.one_of(
    st.tuples(st.just("record"), _agent, _reward, st.booleans(), _kind, _usage),
    st.tuples(st.sampled_from(("fail", "omit")), _agent, _kind),
    st.tuples(st.just("reject"), _agent),
    st.tuples(st.just("begin"), _agent, st.sampled_from(STAGES)),
    st.tuples(st.just("end"), _reward, st.booleans(), _kind, st.booleans()),
    st.tuples(st.just("advance"), st.sampled_from((0.1, 3.0, 700.0))),
    st.tuples(st.just("scrape")),
    # declared reward ranges, below zero among them: such a histogram publishes no _sum (nor _count)
    st.tuples(
        st.just("declare"), _agent, st.sampled_from(((0.0, 1.0), (-1.0, 1.0), (-0.2, 1.0), (-3.0, -1.0)))
    ),
)


class _Run:
    """A telemetry driven by steps; every ``scrape`` step compares the two writers in every format."""

    def __init__(self, const: dict[str, str], max_agents: int) -> None:
        self.const = dict(const)
        self.clock = FakeClock()
        self.telemetry = RolloutTelemetry(
            run=const.pop("run", None),
            const_labels=const,
            clock=self.clock,
            max_agents=max_agents,
            runtime_metrics=False,  # the process's own figures move between the two writers' reads
        )
        self.in_flight: list[tuple[str, InFlight]] = []
        self.spans = 0

    def step(self, step: tuple[object, ...]) -> None:
        telemetry, account = self.telemetry, self.telemetry._account  # the internal part the steps drive
        match step:
            case ("record", str(agent), reward, bool(masked), kind, usage):
                row = {"reward": reward, "mask_sample": masked, "failure_kind": kind, "response": usage}
                telemetry.record(agent, {key: value for key, value in row.items() if value is not None})
            case ("fail", str(agent), kind):
                telemetry.record_failure(agent, kind)  # type: ignore[arg-type]
            case ("omit", str(agent), kind):
                telemetry.record_omission(agent, kind)  # type: ignore[arg-type]
            case ("reject", str(agent)):
                telemetry.record(agent, {"reward": "not a number"})
            case ("begin", str(agent), str(stage)):
                handle = account.begin(agent, self.clock())
                account.set_stage(handle, stage, self.clock())
                self.in_flight.append((agent, handle))
            case ("end", reward, bool(masked), kind, bool(traced)) if self.in_flight:
                agent, handle = self.in_flight.pop(0)
                self.spans += 1
                exemplar = (f"{self.spans:032x}", f"{self.spans:016x}") if traced else None
                row = {"reward": reward, "mask_sample": masked, "failure_kind": kind}
                outcome = classify({key: value for key, value in row.items() if value is not None})
                account.count(agent, outcome, handle, exemplar)
                account.release(handle)  # the block exits
            case ("advance", float(seconds)):
                self.clock.advance(seconds)
            case ("scrape",):
                self.compare()
            case ("declare", str(agent), (float(lowest), float(highest))):
                with suppress(ConfigError):  # refused once measured under another range
                    telemetry.expect(agent, reward_range=(lowest, highest))

    def compare(self) -> None:
        registry = self.telemetry.registry
        # A collector made now keeps nothing from earlier scrapes: what the telemetry's own collectors keep
        # between scrapes (each agent's lines, and samples) must write what it writes.
        fresh = CollectorRegistry()
        fresh.register(AccountCollector(self.telemetry.snapshot, self.const))
        for accept, encoder in ENCODERS.items():
            ours, _ = encode(registry, accept)
            assert ours == encoder(registry), accept
            account_part = encoder(fresh)
            if accept == OPENMETRICS:
                account_part = account_part.removesuffix(b"# EOF\n")
            assert account_part in ours, accept
        text = encode(registry, "")[0].decode()
        parsed = text_string_to_metric_families(text)
        assert sum(len(family.samples) for family in parsed) == _sample_lines(text)
        strict = encode(registry, OPENMETRICS)[0].decode()
        parsed = openmetrics_parser.text_string_to_metric_families(strict)  # type: ignore[no-untyped-call]
        assert sum(len(family.samples) for family in parsed) == _sample_lines(strict)


def _sample_lines(text: str) -> int:
    return sum(1 for line in text.splitlines() if not line.startswith("#"))


@settings(max_examples=examples(150), deadline=None)
@given(
    const=st.dictionaries(st.sampled_from(("run", "zone", "b", "zz")), _text, max_size=3),
    max_agents=st.sampled_from((3, 100)),
    steps=st.lists(_step, max_size=40),
)
def test_bytes_equal_prometheus_client_over_random_accounts(
    const: dict[str, str], max_agents: int, steps: list[tuple[object, ...]]
) -> None:
    """After every step of a random run, the endpoint's writer and prometheus_client write the same bytes in
    the text and OpenMetrics formats, and prometheus_client's parsers (OpenMetrics: strict) read them."""
    run = _Run(const, max_agents)
    for step in steps:
        run.step(step)
        run.compare()


def test_other_collectors_keep_their_place_in_the_registry() -> None:
    """Metrics a user registers before and after the telemetry's collectors come out where
    prometheus_client puts them, in both formats."""
    registry = CollectorRegistry()
    before = Counter("user_before", "Registered first.", ["shard"], registry=registry)
    telemetry = RolloutTelemetry(run="r", registry=registry, runtime_metrics=False)
    after = Gauge("user_after", "Registered last.", registry=registry)
    before.labels("0").inc()
    after.set(3)
    telemetry.record("math", {"reward": 1.0})
    telemetry.record_failure("math", "session_lost")
    for accept, encoder in ENCODERS.items():
        ours = encode(registry, accept)[0]
        assert ours == encoder(registry)
        text = ours.decode()
        assert text.index("user_before") < text.index("rollout_completed") < text.index("user_after")


def test_an_escaping_that_renames_series_is_prometheus_clients() -> None:
    """``escaping=dots`` rewrites names: the whole exposition is then prometheus_client's own."""
    telemetry = RolloutTelemetry(run="r")
    telemetry.record("math", {"reward": 1.0})
    body, content_type = encode(telemetry.registry, "text/plain; version=1.0.0; escaping=dots")
    assert "escaping=dots" in content_type
    assert b"rollout__completed__total" in body


def test_an_unchanged_agent_keeps_its_lines() -> None:
    """An agent with no new counts gets the same snapshot object, and its lines are not written again."""
    telemetry = RolloutTelemetry(run="r")
    telemetry.record("math", {"reward": 1.0})
    telemetry.record("code", {"reward": 1.0})
    first = telemetry.snapshot()
    telemetry.record("code", {"reward": 0.5})
    second = telemetry.snapshot()
    assert first.agents[0] is second.agents[0]  # math: unchanged
    assert first.agents[1] is not second.agents[1]
    assert second.agents[1].measured == 2


def test_collect_makes_samples_as_they_are_read_from_one_snapshot() -> None:
    """Through a registry (``collect()``), a family's samples are made as they are read and dropped: once a
    scrape is written no sample of it is alive. A family read twice gives equal samples, from the snapshot
    its scrape took, whatever was recorded since; they equal those of a collector made afresh."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)
    for agent in ("math", "code"):
        telemetry.record(agent, {"reward": 1.0})
        telemetry.record_failure(agent, "session_lost")
    gc.collect()
    alive = sum(isinstance(thing, Sample) for thing in gc.get_objects())
    generate_latest(telemetry.registry)
    gc.collect()
    assert sum(isinstance(thing, Sample) for thing in gc.get_objects()) == alive
    completed = next(f for f in telemetry.registry.collect() if f.name == "rollout_completed")
    first = list(completed.samples)
    telemetry.record("code", {"reward": 0.5})
    assert list(completed.samples) == first
    assert completed.samples == first
    assert len(completed.samples) == 2
    assert {sample.labels["agent"]: sample.value for sample in first} == {"math": 1.0, "code": 1.0}
    fresh = CollectorRegistry()
    fresh.register(AccountCollector(telemetry.snapshot, {"run": "r"}))
    assert generate_latest(fresh) in generate_latest(telemetry.registry)


def _large(agents: int, kinds: int) -> RolloutTelemetry:
    """A telemetry of ``agents`` x ``kinds`` x 3 dispositions series and more."""
    telemetry = RolloutTelemetry(run="r", max_kinds_per_agent=kinds, runtime_metrics=False)
    for agent in range(agents):
        for kind in range(kinds):
            for record in (telemetry.record_failure, telemetry.record_omission):
                record(f"agent_{agent}", f"bench:kind_{kind}")
            masked = {"reward": 0.0, "mask_sample": True, "failure_kind": f"bench:kind_{kind}"}
            telemetry.record(f"agent_{agent}", masked)
    return telemetry


@contextmanager
def _collections() -> Iterator[list[int]]:
    """The generations of the garbage collections that run inside the block, at the thresholds of 3.11."""
    seen: list[int] = []

    def note(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(700, 10, 10)  # 3.11's and 3.12's; 3.13 starts at 2,000
    gc.callbacks.append(note)
    try:
        yield seen
    finally:
        gc.callbacks.remove(note)
        gc.set_threshold(*thresholds)


def test_a_large_scrape_leaves_the_garbage_collector_alone() -> None:
    """Writing 15,000 series, by the endpoint's writer (lines are strings, which the garbage collector does
    not track) or through a registry (each sample dropped once written), the first time or with every agent
    changed, sets off a quarter or less of the collections prometheus_client's own metrics of as many series
    do (it makes all of a metric's samples before it writes them)."""
    telemetry = _large(agents=50, kinds=100)
    scrapes: list[list[int]] = []
    for _ in range(2):
        with _collections() as ours:
            body, _ = encode(telemetry.registry, "")
        with _collections() as registry:
            assert generate_latest(telemetry.registry) == body
        scrapes += [ours, registry]
        for agent in range(50):
            telemetry.record(f"agent_{agent}", {"reward": 1.0})
    theirs = CollectorRegistry()
    failed = Counter("failed", "failed", ["agent", "failure_kind"], registry=theirs)
    for agent in range(50):
        for kind in range(300):
            failed.labels(f"agent_{agent}", f"bench:kind_{kind}").inc()
    with _collections() as plain:
        generate_latest(theirs)
    assert body.count(b"\n") > 15_000
    assert len(plain) >= 20

    assert all(len(ours) * 4 <= len(plain) for ours in scrapes), (scrapes, plain)


def test_a_mean_that_rounds_to_zero_is_written_as_prometheus_client_writes_it() -> None:
    """A mean reward whose rounding error changes sign while it stays zero is written afresh each time."""
    telemetry = RolloutTelemetry(run="r", runtime_metrics=False)
    for steps in ([0.3, -0.1, -0.2], [0.1, 0.2, -0.3], [0.0]):
        for reward in steps:
            telemetry.record("math", {"reward": reward})
        assert encode(telemetry.registry, "")[0] == generate_latest(telemetry.registry)
