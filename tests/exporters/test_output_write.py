"""Output writes: timed by telemetry.output_write(), sizes and failures counted, nothing before the first."""

from __future__ import annotations

import pytest

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry.exporters._exposition import encode
from tests.exporters.test_exposition import ENCODERS
from tests.support import FakeClock, exposition, promtool_check_metrics, sample_names, value
from tests.virtual_loop import idle, run_virtual

SECONDS = "rollout_output_write_seconds"
BYTES = "rollout_output_write_bytes"
FAILED = "rollout_output_writes_failed_total"


def _telemetry(clock: FakeClock) -> RolloutTelemetry:
    return RolloutTelemetry(run="r", clock=clock, runtime_metrics=False)


def test_nothing_is_published_before_the_first_write() -> None:
    """A run that never times a write publishes none of the three families."""
    telemetry = _telemetry(FakeClock())
    with telemetry.rollout("a") as rollout:
        rollout.complete({"reward": 1.0})
    names = sample_names(exposition(telemetry.registry))
    assert not {n for n in names if n.startswith(("rollout_output_write", "rollout_output_writes"))}


def test_a_write_is_timed_and_its_pieces_summed() -> None:
    """Two writes: their durations in the right buckets, the bytes given in pieces summed per write; the
    failures counter at 0 from the first write on; a write without a size adds no size."""
    clock = FakeClock()
    telemetry = _telemetry(clock)
    with telemetry.output_write() as write:
        clock.advance(0.02)
        write.wrote(300)
        write.wrote(700)
    with telemetry.output_write():
        clock.advance(2.0)
    text = exposition(telemetry.registry)
    assert value(text, f"{SECONDS}_count", run="r") == 2
    assert value(text, f"{SECONDS}_sum", run="r") == pytest.approx(2.02)
    assert value(text, f"{SECONDS}_bucket", run="r", le="0.025") == 1
    assert value(text, f"{SECONDS}_bucket", run="r", le="2.5") == 2
    assert value(text, f"{BYTES}_count", run="r") == 1
    assert value(text, f"{BYTES}_sum", run="r") == 1000
    assert value(text, f"{BYTES}_bucket", run="r", le="256.0") == 0
    assert value(text, f"{BYTES}_bucket", run="r", le="1024.0") == 1
    assert value(text, FAILED, run="r") == 0
    assert promtool_check_metrics(text).returncode == 0


def test_a_write_that_raises_is_counted_failed_and_the_exception_goes_on() -> None:
    """The exception reaches the writer; the write is timed and counted failed."""
    clock = FakeClock()
    telemetry = _telemetry(clock)

    def write() -> None:
        with telemetry.output_write():
            clock.advance(0.5)
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write()
    text = exposition(telemetry.registry)
    assert value(text, FAILED, run="r") == 1
    assert value(text, f"{SECONDS}_sum", run="r") == pytest.approx(0.5)


def test_async_with_times_a_write_on_the_loop() -> None:
    """``async with`` is the same block: a write that awaits 0.25 s of the loop's time (the telemetry's
    clock) is one write of 0.25 s."""
    clock = FakeClock()
    telemetry = _telemetry(clock)

    async def main() -> None:
        async with telemetry.output_write() as write:
            await idle(0.25)
            write.wrote(10)

    run_virtual(main(), clock)
    text = exposition(telemetry.registry)
    assert value(text, f"{SECONDS}_count", run="r") == 1
    assert value(text, f"{SECONDS}_sum", run="r") == 0.25
    assert value(text, f"{BYTES}_sum", run="r") == 10


@pytest.mark.parametrize("size", [-1, 1.5, True, "10", None])
def test_a_bad_size_is_a_counted_rejection_and_the_write_still_timed(size: object) -> None:
    """wrote() with anything but an integer >= 0: rejected as invalid_size; the write is timed, sizeless."""
    telemetry = _telemetry(FakeClock())
    with telemetry.output_write() as write:
        write.wrote(size)  # type: ignore[arg-type]
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason="invalid_size") == 1
    assert value(text, f"{SECONDS}_count", run="r") == 1
    assert f"{BYTES}_count" not in sample_names(text)


def test_misuse_is_rejected_and_raised_under_strict() -> None:
    """wrote() outside the block and a block entered twice are counted rejections; strict=True raises."""
    telemetry = _telemetry(FakeClock())
    write = telemetry.output_write()
    write.wrote(5)
    with write:
        write.__enter__()
    text = exposition(telemetry.registry)
    assert value(text, "rollout_telemetry_rejected_total", reason="outcome_outside_block") == 1
    assert value(text, "rollout_telemetry_rejected_total", reason="output_write_reentered") == 1
    assert value(text, f"{SECONDS}_count", run="r") == 1
    strict = RolloutTelemetry(run="r", strict=True, runtime_metrics=False)
    with pytest.raises(Exception, match="outside its block"):
        strict.output_write().wrote(5)


def test_the_write_families_are_written_as_prometheus_client_writes_them() -> None:
    """The endpoint's own writer and prometheus_client's write the same bytes, in every format."""
    clock = FakeClock()
    telemetry = _telemetry(clock)
    for size in (100, 5_000, 70_000_000):
        with telemetry.output_write() as write:
            clock.advance(size / 1e9)
            write.wrote(size)
    with pytest.raises(RuntimeError), telemetry.output_write():
        raise RuntimeError
    for accept, encoder in ENCODERS.items():
        assert encode(telemetry.registry, accept)[0] == encoder(telemetry.registry), accept
