"""How a complete group (the rollouts of one task) is classified, as GRPO-style training compares them.

A member is *valid* when it completed unmasked with a reward (the ``measured`` disposition). Once every member
has an outcome the group is classified, once, by the first that holds:

- ``no_valid``: no valid member (every one masked, unscored, failed or omitted). Not NeMo Gym's "fully
  masked" task, whose rows in the main output are all masked: the coverage account counts that one;
- ``insufficient``: fewer than ``min_valid`` valid members: a noisy advantage estimate;
- ``uniform``: every valid member got the same reward: zero advantage, no learning signal;
- ``degraded``: some members are not valid, enough are, and their rewards differ;
- ``valid``: every member valid and their rewards differ.

So a group with one valid member is insufficient, not uniform. Two more things are counted of each completed
group, for the training signal:

- its *baseline is contaminated* (``contaminated``) when valid members sit beside members that are not
  valid (masked, unscored, failed or omitted): a trainer that keeps those as reward 0 computes the valid
  members' advantages against a baseline that includes infrastructure losses. Only a degraded, uniform or
  insufficient group can be; its members are counted by the disposition of their standing attempt;
- a uniform group's common reward is at the ``lowest`` or ``highest`` of its agent's declared reward range
  (``_contract.reward_range``, [0, 1] unless declared) or ``other``: too hard, too easy, or stuck between.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

__all__ = ["CONTAMINABLE", "DEFAULT_MIN_VALID", "GROUP_STATES", "GroupState", "contaminated", "group_state"]

GroupState = Literal["valid", "degraded", "uniform", "insufficient", "no_valid"]
GROUP_STATES: tuple[GroupState, ...] = ("valid", "degraded", "uniform", "insufficient", "no_valid")
NO_SIGNAL: tuple[GroupState, ...] = ("uniform", "insufficient", "no_valid")
"""The states of a group that gives the policy no (or only a noisy) learning signal."""
CONTAMINABLE: tuple[GroupState, ...] = ("degraded", "uniform", "insufficient")
"""The states of a group that can hold valid members beside members that are not valid."""

DEFAULT_MIN_VALID = 2


def group_state(rewards: Sequence[float | None], min_valid: int = DEFAULT_MIN_VALID) -> GroupState:
    """Classify a complete group from its members' rewards, ``None`` for a member that is not valid."""
    valid = [reward for reward in rewards if reward is not None]
    if not valid:
        return "no_valid"
    if len(valid) < min_valid:
        return "insufficient"
    if min(valid) == max(valid):
        return "uniform"
    if len(valid) < len(rewards):
        return "degraded"
    return "valid"


def contaminated(rewards: Sequence[float | None]) -> bool:
    """Whether a complete group's valid members sit beside members that are not valid (``None``)."""
    return None in rewards and any(reward is not None for reward in rewards)
