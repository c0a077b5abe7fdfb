"""The run's order, for the pictures of the report (``report --format html``, ``gym --html``).

Gym's rows carry no timestamps, and the files are read one after the other: the failures sidecar after the
whole rollouts file. Drawn in the order read, every failure would sit at the end of the run. ``RunOrder``
keeps each counted outcome with its identity, then replays them by task index, then rollout index, then
attempt (a retry after the attempts it follows; ties in the order read), the rows without an identity after
all the others, in the order read, into an account of its own that a ``RunStory`` reads: every point is still
what an account says, from the same outcomes as the report's.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass

from rollout_telemetry._contract.outcome import Classified, Disposition
from rollout_telemetry._store.account import Account
from rollout_telemetry._store.names import Names
from rollout_telemetry._store.snapshot import AccountSnapshot
from rollout_telemetry._views.story import RunStory

__all__ = ["NO_TASK", "RunOrder", "run_position"]

_DISPOSITIONS = tuple(Disposition)
NO_TASK = -1
"""The task index of a row without an identity (task indices are 0 or more)."""


def run_position(task: int, rollout: int, attempt: int) -> tuple[bool, int, int, int]:
    """Where a row stands in the run's order: by task index, then rollout index, then attempt; a row without
    an identity (``task`` is ``NO_TASK``) after every row with one."""
    return task == NO_TASK, task, rollout, attempt


_NAN = float("nan")


@dataclass(frozen=True, slots=True)
class Ordered:
    """The story of a run replayed in its order, and the replay's final account (the points' last)."""

    story: RunStory
    account: AccountSnapshot
    unidentified: int
    """Outcomes without an identity: drawn after the others, in the order read."""

    def points(self, agent: str) -> list[tuple[float, ...]]:
        """The points of ``agent``'s charts, x its outcomes counted in the run's order."""
        return self.story.points(self.account, agent)


class RunOrder:
    """Each counted outcome of a run's files with its identity and attempt, in compact arrays (25 bytes an
    outcome); ``replay()`` draws the story in the run's order."""

    def __init__(self) -> None:
        self._agents: dict[str, int] = {}
        self._tasks = array("q")
        self._rollouts = array("H")  # at most MAX_ROLLOUT_INDEX and MAX_ATTEMPT: 16 bits
        self._attempts = array("H")
        self._agent_of = array("I")
        self._dispositions = array("B")
        self._rewards = array("d")

    def observe(
        self, agent: str, outcome: Classified, identity: tuple[int, int] | None, attempt: int
    ) -> None:
        """One outcome the account counted (a repeated row is not), by the agent's label."""
        number = self._agents.setdefault(agent, len(self._agents))
        task, rollout = identity if identity is not None else (NO_TASK, 0)
        self._tasks.append(task)
        self._rollouts.append(rollout)
        self._attempts.append(attempt)
        self._agent_of.append(number)
        self._dispositions.append(_DISPOSITIONS.index(outcome[0]))
        reward = outcome[1]
        self._rewards.append(_NAN if reward is None else reward)

    def replay(self) -> Ordered:
        """The story of the outcomes in the run's order (see the module), x each agent's outcomes so far."""
        tasks, rollouts, attempts = self._tasks, self._rollouts, self._attempts
        order = sorted(  # stable: ties, and every row without an identity, in the order read
            range(len(tasks)), key=lambda at: run_position(tasks[at], rollouts[at], attempts[at])
        )
        clock: Callable[[], float] = lambda: 0.0  # noqa: E731 - the replay has no time
        account = Account(names=Names(max_agents=max(len(self._agents), 1)), clock=clock)
        story = RunStory(account.snapshot, "rollouts")
        labels = list(self._agents)
        for at in order:
            reward: float | None = self._rewards[at]
            if reward is not None and math.isnan(reward):
                reward = None
            # The disposition and reward are all a point reads: the kind and the usage are left out.
            account.count(
                labels[self._agent_of[at]], (_DISPOSITIONS[self._dispositions[at]], reward, None, None, None)
            )
            story.tick()
        unidentified = sum(1 for task in tasks if task == NO_TASK)
        return Ordered(story, account.snapshot(), unidentified)
