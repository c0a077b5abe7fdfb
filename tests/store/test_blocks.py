"""The identity stores' layout: every member found where it was put, memory by identities seen."""

from __future__ import annotations

import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import RolloutTelemetry
from rollout_telemetry._contract.identity import MAX_ROLLOUT_INDEX
from rollout_telemetry._store.blocks import Blocks
from tests.support import coverage_of, examples

_TASKS = st.integers(0, 40) | st.integers(0, 2**40)
_ROLLOUTS = st.integers(0, 80) | st.integers(0, MAX_ROLLOUT_INDEX)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(st.tuples(_TASKS, _ROLLOUTS), max_size=120))
def test_every_member_is_found_where_it_was_put(members: list[tuple[int, int]]) -> None:
    """Members put in any order, dense or far apart, keep their values through every block's growth;
    each task's block lists exactly its members, in rollout-index order."""
    blocks = Blocks({"value": "Q"}, {})
    values = blocks.member["value"]
    written: dict[tuple[int, int], int] = {}
    for value, (task, rollout) in enumerate(members, start=1):
        values[blocks.slot(blocks.add_task(task), rollout)] = value
        written[task, rollout] = value
        for (known_task, known_rollout), known in written.items():
            slot = blocks.find(known_task, known_rollout)
            assert slot >= 0
            assert values[slot] == known
    for task in {task for task, _ in written}:
        listed = [values[slot] for slot in blocks.block(blocks.number(task)) if values[slot]]
        assert listed == [written[task, rollout] for rollout in sorted(r for t, r in written if t == task)]
    assert blocks.find(2**41, 0) == -1


def test_a_large_rollout_index_costs_no_more_than_a_small_one() -> None:
    """A rollout numbered 65,534 of each of 20 new tasks: the groups and the coverage account grow by a
    few kilobytes, not by the index (a block as large as the index was 42 MB here)."""
    telemetry = RolloutTelemetry()
    telemetry.expect(max_attempts=3)
    telemetry.expect("math", group_size=4)
    telemetry.record("math", {"reward": 1.0}, task_index=0, rollout_index=0)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for task in range(1, 21):
            telemetry.record("math", {"reward": 1.0}, task_index=task, rollout_index=MAX_ROLLOUT_INDEX)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 200_000
    agent = coverage_of(telemetry).agents[0]
    assert agent.measured_tasks == 21


def test_a_dense_run_stays_in_blocks() -> None:
    """Rollouts arriving last first still make one block per task: 64 tasks of 256 rollouts cost about
    what their slots do (12 bytes each in the coverage account, 16 in the groups), not a dict entry each."""
    telemetry = RolloutTelemetry()
    telemetry.expect(max_attempts=3)
    telemetry.expect("math", group_size=256)
    tracemalloc.start()
    try:
        for task in range(64):
            for rollout in reversed(range(256)):
                telemetry.record("math", {"reward": 1.0}, task_index=task, rollout_index=rollout)
        used = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert used < 3 * 64 * 256 * (12 + 16)
    assert coverage_of(telemetry).agents[0].measured_tasks == 64
