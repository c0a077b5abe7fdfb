"""Does a scrape stall the recorder? One thread recording, another scraping /metrics without pause.

The account holds its lock during a scrape only to copy what the snapshot needs; labels, totals and the
exposition are derived after the lock is released. This script measures what the recording thread sees
while another thread renders ``/metrics`` back to back, as the endpoint does (``_exposition.encode``): the
latency of every ``record()`` call, its p99 and its worst, against a run with nobody scraping. The
interpreter lock still hands the CPU back and forth every ``sys.getswitchinterval()`` (5 ms by default),
so a call may wait that long for it whatever the telemetry does; that is printed beside the figures.

What remains above the lock's copy is the interpreter's own garbage collector: objects a scrape keeps alive
while it runs are promoted, and once enough were, a full collection walks every object of the process while
every thread waits. The endpoint writes text, which the collector does not track, so it promotes a few
objects per agent rather than two per series. Two cases:

- a small heap, 50,000 series, with and without ``gc.freeze()`` (which ``serve`` and ``demo`` call);
- the trainer's heap: 3 million objects alive (a training process), no ``gc.freeze()`` (a library user
  embedding the hook does not call it), 4,200 and 50,000 series; prometheus_client's own metrics with the
  same series, recorded with ``.labels().inc()`` and scraped with ``generate_latest``, in the same run.
  First, on one thread alone (free of the other thread and of most of the machine's noise), a scrape's CPU
  time, ours with every agent changed before each scrape (no line reused), and the full collections the
  scrapes set off; then the two threads, as above, and a control: a scraper that only spins as long as
  ours takes (no allocation, no lock), which shows what the interpreter lock and the machine cost alone.

Then the endpoint as Prometheus scrapes it (``--case endpoint``): the telemetry served (``serve()``), a
scraper in a process of its own asking back to back over one kept-open connection with Prometheus's
``Accept`` and gzip, on the small heap and the trainer's, at 4,200 and 52,500 series, each case ``--runs``
times. Beside ours, in the same run: the control, the same endpoint serving a collector that only spins as
long as our rendering holds the interpreter (what the interpreter lock, the endpoint's threads and the machine
cost alone); our
collectors through prometheus_client's registry and its own server (``generate_latest``: what a user gets
who serves our collectors beside others); and prometheus_client's own metrics and server.

Goals: no call over 15 ms, p99 under 1 ms; scrape CPU at most 0.5x prometheus_client's; through the
endpoint, the worst call within 1.5x of the control's; through the registry, no full collection.

    .venv/bin/python benchmarks/scrape_stall.py [--case small|trainer|endpoint|all] [--seconds 10]
        [--heap 3000000] [--runs 3] [--agents 20 250]
"""

from __future__ import annotations

import argparse
import functools
import gc
import gzip
import statistics
import subprocess
import sys
import threading
import time
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from rollout_telemetry import MetricsServer, RolloutTelemetry
from rollout_telemetry._serve.rendering import GZIP_LEVEL
from rollout_telemetry.exporters._exposition import encode

KINDS = 50
DISPOSITIONS = ("masked", "unscored", "failed", "omitted")
MEASURED: dict[str, object] = {"reward": 0.5}
MASKED: dict[str, object] = {"reward": 0.0, "mask_sample": True, "failure_kind": "bench:kind_7"}


def populated(agents: int) -> RolloutTelemetry:
    """A telemetry with ``agents`` x 50 kinds x 4 dispositions kind series (plus 10 per-agent ones)."""
    # The account's series only: prometheus_client's process collectors are the same on both sides.
    telemetry = RolloutTelemetry(
        run="stall", max_agents=max(agents, 100), max_kinds_per_agent=KINDS, runtime_metrics=False
    )
    for a in range(agents):
        agent = f"agent_{a}"
        telemetry.record(agent, MEASURED)
        for k in range(KINDS):
            kind = f"bench:kind_{k}"
            telemetry.record(agent, {"reward": 0.0, "mask_sample": True, "failure_kind": kind})
            telemetry.record(agent, {"reward": None, "failure_kind": kind})
            telemetry.record_failure(agent, kind)
            telemetry.record_omission(agent, kind)
    return telemetry


class Plain:
    """prometheus_client's own counters and gauges holding the same series as ``telemetry``'s exposition; a
    record is the ``.labels().inc()`` calls of the counters that outcome moves."""

    def __init__(self, telemetry: RolloutTelemetry) -> None:
        self.registry = CollectorRegistry()
        self.metrics: dict[str, Counter | Gauge] = {}
        for family in text_string_to_metric_families(generate_latest(telemetry.registry).decode()):
            kind = Counter if family.type == "counter" else Gauge
            names = sorted({name for sample in family.samples for name in sample.labels})
            metric = self.metrics[family.name] = kind(
                family.name, family.documentation, names, registry=self.registry
            )
            for sample in family.samples:
                child = metric.labels(**sample.labels)
                child.inc(sample.value) if isinstance(child, Counter) else child.set(sample.value)
        m = self.metrics
        self._completed, self._rewarded = m["rollout_completed"], m["rollout_rewarded"]
        self._positive, self._masked = m["rollout_reward_positive"], m["rollout_masked"]
        self._masked_rewarded = m["rollout_masked_rewarded"]

    def record(self, agent: str, row: dict[str, object]) -> None:
        """The counters a measured or masked row moves, as prometheus_client users write them."""
        self._completed.labels(agent=agent, run="stall").inc()
        self._rewarded.labels(agent=agent, run="stall").inc()
        if row.get("mask_sample"):
            self._masked.labels(agent=agent, failure_kind=str(row["failure_kind"]), run="stall").inc()
            self._masked_rewarded.labels(agent=agent, run="stall").inc()
        else:
            self._positive.labels(agent=agent, run="stall").inc(float(row["reward"]))  # type: ignore[arg-type]


Record = Callable[[str, dict[str, object]], None]


def record_for(record: Record, agents: int, seconds: float) -> array[float]:
    """Record rollouts for ``seconds``; return each call's latency in seconds.

    The latencies go to an ``array``, not a list: the garbage collector would walk a list of millions of
    floats on every full collection and charge its own pauses to the calls being measured.
    """
    latencies: array[float] = array("d")
    clock = time.perf_counter
    end = clock() + seconds
    i = 0
    with full_collections():
        while True:
            start = clock()
            if start > end:
                return latencies
            record(f"agent_{i % agents}", MASKED if i % 4 == 0 else MEASURED)
            latencies.append(clock() - start)
            i += 1


def scraped(
    record: Record, agents: int, scrape: Callable[[], object], seconds: float
) -> tuple[array[float], array[float]]:
    """Record for ``seconds`` while another thread scrapes back to back; the calls' latencies and each
    scrape's CPU seconds (the scraping thread's own)."""
    stop = threading.Event()
    cpu: array[float] = array("d")

    def scraper() -> None:
        while not stop.is_set():
            started = time.thread_time()
            scrape()
            cpu.append(time.thread_time() - started)

    thread = threading.Thread(target=scraper)
    thread.start()
    try:
        busy = record_for(record, agents, seconds)
    finally:
        stop.set()
        thread.join()
    return busy, cpu


FULL: list[float] = []
"""The start, then the duration, of each full collection during the latest ``full_collections`` block."""


def _note_full(phase: str, info: dict[str, int]) -> None:
    if info["generation"] == 2:
        if phase == "start":
            FULL.append(time.perf_counter())
        elif FULL:
            FULL[-1] = time.perf_counter() - FULL[-1]


@contextmanager
def full_collections() -> Iterator[list[float]]:
    """Note the full collections that run inside the block in ``FULL`` (their durations)."""
    FULL.clear()
    gc.callbacks.append(_note_full)
    try:
        yield FULL
    finally:
        gc.callbacks.remove(_note_full)


def alone(
    scrape: Callable[[], object], scrapes: int, change: Callable[[], object] = lambda: None
) -> tuple[int, float]:
    """``scrapes`` scrapes back to back on this thread alone, each after ``change()``: the full collections
    they set off (free of the machine's noise: the same figure on every run, at the interpreter's
    thresholds) and the median CPU seconds of a scrape (``change()`` not counted)."""
    gc.collect()
    cpu: list[float] = []
    with full_collections() as full:
        for _ in range(scrapes):
            change()
            started = time.thread_time()
            scrape()
            cpu.append(time.thread_time() - started)
    return len(full), statistics.median(cpu)


def summary(latencies: array[float]) -> tuple[float, float, float, int]:
    """p50, p99 and worst, in milliseconds, and the calls over 5 ms."""
    ordered = sorted(latencies)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    over = len(ordered) - next((i for i, x in enumerate(ordered) if x > 0.005), len(ordered))
    return statistics.median(ordered) * 1e3, p99 * 1e3, ordered[-1] * 1e3, over


def report(name: str, latencies: array[float], full: list[float]) -> bool:
    """Print one run's figures (``full``: its full collections' durations); whether it met the goal."""
    p50, p99, worst, over = summary(latencies)
    print(
        f"  {name:<44} {len(latencies):>9,} calls: p50 {p50:.4f} ms, p99 {p99:.4f} ms, "
        f"worst {worst:6.2f} ms, {over:>4} over 5 ms; {len(full)} full collections "
        f"({max(full, default=0.0) * 1e3:.0f} ms longest)"
    )
    return worst <= 15.0 and p99 < 1.0


def spinning(seconds: float) -> Callable[[], None]:
    """A scrape that only holds the interpreter for ``seconds`` of CPU, allocating nothing and taking no
    lock: what the recorder sees of the interpreter lock and the machine alone."""

    def spin() -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass

    return spin


def small_heap(seconds: float) -> None:
    """50,000 series on this script's own heap, with and without gc.freeze()."""
    telemetry = populated(250)
    series = generate_latest(telemetry.registry).count(b"\n") - 2 * 24
    print(
        f"small heap: ~{series:,} series; interpreter switch interval {sys.getswitchinterval() * 1e3:.0f} ms"
    )
    for frozen in (False, True):
        if frozen:
            gc.collect()
            gc.freeze()  # what serve and demo do once they are set up
        quiet = record_for(telemetry.record, 250, seconds / 2)
        quiet_full = FULL.copy()
        busy, cpu = scraped(telemetry.record, 250, lambda: encode(telemetry.registry, ""), seconds)
        print("after gc.freeze() (serve, demo)" if frozen else "without gc.freeze() (a library)")
        report("record(), no scrapes", quiet, quiet_full)
        met = report(f"record(), {len(cpu)} scrapes meanwhile", busy, FULL)
        print(f"  goal (worst <= 15 ms, p99 < 1 ms while scraped): {'met' if met else 'NOT met'}")
    gc.unfreeze()


class Parameter:
    """One object of the trainer's heap (a tensor's Python wrapper, say): tracked by the collector."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def trainer_heap(seconds: float, heap: int) -> None:
    """``heap`` objects alive, no gc.freeze(): ours against prometheus_client, 4,200 and 50,000 series."""
    cases = []
    for agents in (20, 250):
        telemetry = populated(agents)
        cases.append((agents, telemetry, Plain(telemetry)))
    trainer = [Parameter(i) for i in range(heap)]
    started = time.perf_counter()
    gc.collect()
    full_ms = (time.perf_counter() - started) * 1e3
    print(
        f"\ntrainer heap: {len(trainer):,} objects alive besides the series, no gc.freeze(); one full "
        f"collection of it takes {full_ms:.0f} ms"
    )
    for agents, telemetry, plain in cases:
        text = encode(telemetry.registry, "")[0].decode()
        ours_series = sum(len(f.samples) for f in text_string_to_metric_families(text))
        theirs_series = sum(len(f.samples) for f in plain.registry.collect())
        print(f"{ours_series:,} series (prometheus_client: {theirs_series:,} equivalent series)")

        def change(t: RolloutTelemetry = telemetry, agents: int = agents) -> None:
            for a in range(agents):  # every agent changed: no line is reused
                t.record(f"agent_{a}", MEASURED)

        scrapes = 200 if agents < 100 else 40
        ours_full, ours_cpu = alone(functools.partial(encode, telemetry.registry, ""), scrapes, change)
        theirs_full, theirs_cpu = alone(functools.partial(generate_latest, plain.registry), scrapes)
        print(
            f"  {scrapes} scrapes on one thread, every agent changed before each of ours: scrape CPU "
            f"{ours_cpu * 1e3:.1f} ms against prometheus_client's {theirs_cpu * 1e3:.1f} ms, "
            f"{ours_cpu / theirs_cpu:.2f}x (goal <= 0.5); full collections set off: ours {ours_full}, "
            f"prometheus_client {theirs_full}"
        )
        report(
            "ours: record(), no scrapes (the machine's noise)",
            record_for(telemetry.record, agents, seconds / 2),
            FULL,
        )
        cpu = {}
        for name, record, scrape in (
            (
                "ours: record(), endpoint's encoder",
                telemetry.record,
                lambda t=telemetry: encode(t.registry, ""),
            ),
            ("control: record(), a scraper that only spins", telemetry.record, spinning(ours_cpu)),
            (
                "prometheus_client: .labels().inc(), generate_latest",
                plain.record,
                lambda p=plain: generate_latest(p.registry),
            ),
        ):
            busy, cpu[name] = scraped(record, agents, scrape, seconds)
            met = report(f"{name}, {len(cpu[name])} scrapes", busy, FULL)
            print(
                f"    scrape CPU {sum(cpu[name]) / seconds * 100:.0f}% of the run, median "
                f"{statistics.median(cpu[name]) * 1e3:.1f} ms; goal (worst <= 15 ms, p99 < 1 ms): "
                f"{'met' if met else 'NOT met'}"
            )
    del trainer


SCRAPER = """
import http.client, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
headers = {"Accept": sys.argv[4], "Accept-Encoding": "gzip"}
connection = http.client.HTTPConnection(host, port, timeout=60)
def scrape():
    connection.request("GET", "/metrics", headers=headers)
    response = connection.getresponse()
    response.read()
    assert response.status == 200, response.status
scrape()
print("ready", flush=True)
scrapes, end = 0, time.monotonic() + seconds
while time.monotonic() < end:
    scrape()
    scrapes += 1
print(scrapes, flush=True)
"""
"""The scraper, in a process of its own as Prometheus is: one connection, kept open, scraping back to back."""

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
"""What Prometheus asks for; with ``Accept-Encoding: gzip``, as it does."""


def scraped_over_http(record: Record, agents: int, port: int, seconds: float) -> tuple[array[float], int]:
    """Record for ``seconds`` while a scraper in another process scrapes ``127.0.0.1:port`` back to back;
    the calls' latencies and the scrapes made meanwhile."""
    scraper = subprocess.Popen(
        [sys.executable, "-c", SCRAPER, "127.0.0.1", str(port), str(seconds), PROMETHEUS_ACCEPT],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert scraper.stdout is not None
        if scraper.stdout.readline().strip() != "ready":
            msg = "the scraper did not start"
            raise RuntimeError(msg)
        busy = record_for(record, agents, seconds)
        scrapes = int(scraper.stdout.readline())
    finally:
        scraper.kill()
        scraper.wait()
    return busy, scrapes


class Spin(Collector):
    """A collector that only holds the interpreter for ``seconds`` of CPU, allocating nothing and taking no
    lock, then yields nothing: served by the same endpoint, what a scrape costs the recorder apart from the
    telemetry's own work."""

    def __init__(self, seconds: float) -> None:
        self._spin = spinning(seconds)

    def collect(self) -> Iterator[Metric]:
        self._spin()
        return iter(())


def scrape_body(telemetry: RolloutTelemetry) -> bytes:
    """What the endpoint sends Prometheus (OpenMetrics, gzipped), made on this thread."""
    return gzip.compress(encode(telemetry.registry, PROMETHEUS_ACCEPT)[0], GZIP_LEVEL)


def served(
    name: str, record: Record, serving: Callable[[int], object], agents: int, seconds: float, *, run: int
) -> float:
    """One case of ``endpoint``: record while the server ``serving(port)`` starts is scraped; print the
    figures, return the worst call in milliseconds. Each case starts after a full collection."""
    server = serving(0)
    port = server.port if isinstance(server, MetricsServer) else server[0].server_port  # type: ignore[index]
    gc.collect()
    try:
        busy, scrapes = scraped_over_http(record, agents, port, seconds)
    finally:
        if isinstance(server, MetricsServer):
            server.stop()
        else:
            server[0].shutdown()  # type: ignore[index]
            server[0].server_close()  # type: ignore[index]
    if not report(f"run {run + 1}: {name}, {scrapes} scrapes", busy, FULL):
        print("    goal (worst <= 15 ms, p99 < 1 ms): NOT met")
    return summary(busy)[2]


def endpoint(seconds: float, heap: int, runs: int, agent_counts: list[int]) -> None:
    """The served endpoint scraped from another process: ours, the spinning control, our collector through
    prometheus_client's registry and server, and prometheus_client's own metrics; small heap and trainer's."""
    print(
        f"\nendpoint: a scraper in another process, back to back over one connection (gzip, {runs} runs "
        f"of {seconds:.0f} s each); interpreter switch interval {sys.getswitchinterval() * 1e3:.0f} ms"
    )
    for heap_objects in dict.fromkeys((0, heap)):  # --heap 0: the small heap alone
        trainer = [Parameter(i) for i in range(heap_objects)]
        gc.collect()
        print(
            f"{'trainer heap' if heap_objects else 'small heap'}: {heap_objects:,} objects alive besides the "
            "series, no gc.freeze()"
        )
        for agents in agent_counts:
            telemetry = populated(agents)
            body = encode(telemetry.registry, PROMETHEUS_ACCEPT)[0]
            series = sum(
                len(f.samples)
                for f in text_string_to_metric_families(encode(telemetry.registry, "")[0].decode())
            )

            def change(t: RolloutTelemetry = telemetry, agents: int = agents) -> None:
                for a in range(agents):
                    t.record(f"agent_{a}", MEASURED)

            _, cpu = alone(functools.partial(scrape_body, telemetry), 20, change)
            # The control holds the interpreter as long as our rendering does; zlib lets go of it while it
            # compresses, so gzip's time is not spun.
            _, held = alone(functools.partial(encode, telemetry.registry, PROMETHEUS_ACCEPT), 20, change)
            print(
                f"  {series:,} series, {len(body) / 1e6:.1f} MB a scrape "
                f"({len(gzip.compress(body, GZIP_LEVEL)) / 1e6:.2f} MB gzipped);"
                f" our scrape's CPU, every agent changed: {cpu * 1e3:.1f} ms,"
                f" {held * 1e3:.1f} ms of it rendering (the control spins that long)"
            )
            control = RolloutTelemetry(runtime_metrics=False)
            control.registry.register(Spin(held))
            for run in range(runs):
                worst = {
                    name: served(name, record, serving, agents, seconds, run=run)
                    for name, record, serving in (
                        ("ours: record(), telemetry.serve()", telemetry.record, telemetry.serve),
                        ("control: record(), an endpoint that only spins", telemetry.record, control.serve),
                        (
                            "ours through prometheus_client's registry and server",
                            telemetry.record,
                            functools.partial(
                                prometheus_client.start_http_server, registry=telemetry.registry
                            ),
                        ),
                    )
                }
                # prometheus_client's own metrics live only for their case: their objects would make the
                # other cases' heap larger than the case says.
                plain = Plain(telemetry)
                serving = functools.partial(prometheus_client.start_http_server, registry=plain.registry)
                served(
                    "prometheus_client: .labels().inc(), its server",
                    plain.record,
                    serving,
                    agents,
                    seconds,
                    run=run,
                )
                del plain, serving
                ours, floor = (
                    worst["ours: record(), telemetry.serve()"],
                    worst["control: record(), an endpoint that only spins"],
                )
                print(f"  run {run + 1}: ours worst / control worst = {ours / floor:.2f} (goal <= 1.5)")
        del trainer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--heap", type=int, default=3_000_000, help="objects on the trainer's heap")
    parser.add_argument("--case", choices=("small", "trainer", "endpoint", "all"), default="all")
    parser.add_argument("--runs", type=int, default=3, help="runs of the endpoint case")
    parser.add_argument(
        "--agents",
        type=int,
        nargs="+",
        default=[20, 250],
        help="agents of the endpoint case (20: 4,200 series, 250: 52,500)",
    )
    args = parser.parse_args()
    # Plain counters also expose a `_created` sample per series by default; the account does not. To
    # compare the same series, the baseline runs with those switched off (a process-wide switch).
    prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
    if args.case in ("small", "all"):
        small_heap(args.seconds)
    if args.case in ("trainer", "all"):
        trainer_heap(args.seconds, args.heap)
    if args.case in ("endpoint", "all"):
        endpoint(args.seconds, args.heap, args.runs, args.agents)


if __name__ == "__main__":
    main()
