"""One precedence rule for the attempts of a rollout: the coverage account and the groups agree on which row
stands, whatever the sequence, and both agree with the rule as documented (checked against a model here)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rollout_telemetry import Disposition
from rollout_telemetry._contract.outcome import Classified, absent, classify
from rollout_telemetry._store.coverage import Coverage
from rollout_telemetry._store.groups import Groups
from rollout_telemetry._store.names import Names
from tests.support import examples

REACHED = (Disposition.MEASURED, Disposition.MASKED, Disposition.UNSCORED)

rows = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from(list(Disposition))),  # (attempt, disposition)
    min_size=1,
    max_size=8,
)


def _standing(sequence: list[tuple[int, Disposition]]) -> int:
    """The row that stands, by the documented rule: a higher attempt wins; at the same attempt a row that
    reached the output wins over one that did not; between equals the later one wins. Two rows that reached
    the output at one attempt are a duplicate: the later is refused, so the earlier stands."""
    best = 0
    for index in range(1, len(sequence)):
        attempt, disposition = sequence[index]
        kept_attempt, kept = sequence[best]
        rank, kept_rank = (attempt, disposition in REACHED), (kept_attempt, kept in REACHED)
        duplicate = any(a == attempt and d in REACHED for a, d in sequence[:index]) and disposition in REACHED
        if not duplicate and rank >= kept_rank:
            best = index
    return best


def _outcome(disposition: Disposition, reward: float) -> Classified:
    if disposition in (Disposition.FAILED, Disposition.OMITTED):
        return absent(disposition, "session_lost")
    if disposition is Disposition.UNSCORED:
        return classify({"reward": None})
    return classify({"reward": reward, "mask_sample": disposition is Disposition.MASKED})


@settings(max_examples=examples(300), deadline=None)
@given(rows)
def test_coverage_and_groups_keep_the_same_row(sequence: list[tuple[int, Disposition]]) -> None:
    """Rows of one rollout in any order: coverage's disposition is the model's standing row's, and the
    group (completed by a second member whose reward equals the standing row's) sees that same row."""
    rewards = [0.1 * (index + 1) for index in range(len(sequence))]  # every measured row told apart
    standing = _standing(sequence)
    coverage = Coverage()
    groups = Groups(Names())
    for member in (0, 1):
        coverage.expect("a", 0, member)
        groups.expect("a", 0, member)
    for (attempt, disposition), reward in zip(sequence, rewards, strict=True):
        outcome = _outcome(disposition, reward)
        duplicate = coverage.observe("a", (0, 0), attempt, outcome[0], succeeded=disposition in REACHED)[0]
        if duplicate is None:  # the follower's order: a refused duplicate reaches nothing else
            groups.observe("a", 0, 0, outcome, attempt)
    agent = coverage.snapshot().agent("a")
    assert agent is not None
    standing_disposition = sequence[standing][1]
    assert agent.rollouts[standing_disposition] == 1
    # The other member measured at the standing row's reward: uniform if the group kept that measured row,
    # valid if it kept another measured row, insufficient if it kept a row that is not measured.
    groups.observe("a", 0, 1, _outcome(Disposition.MEASURED, rewards[standing]), 0)
    group = groups.snapshot().agent("a")
    assert group is not None
    expected_state = "uniform" if standing_disposition is Disposition.MEASURED else "insufficient"
    assert {state for state, count in group.states.items() if count} == {expected_state}
