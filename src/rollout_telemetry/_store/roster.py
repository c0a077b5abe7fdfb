"""The roster of an account: every agent's state, by label and by raw name, under the account's one lock.

The counts (``_store.account``) and the rollouts in flight (``_store.in_flight``) both resolve an agent here
and take this one lock, so one step can end a flight and count its outcome. A name past the cap is folded
into ``other`` and counted here as an overflow, whichever of them met it.
"""

from __future__ import annotations

import logging

from rollout_telemetry import _fork
from rollout_telemetry._store.agent import AgentState
from rollout_telemetry._store.names import Names, cacheable
from rollout_telemetry.failure_kinds import OTHER

__all__ = ["Roster"]

_log = logging.getLogger("rollout_telemetry.account")


class Roster:
    """The agents of one account and the one lock their states are touched under.

    Args:
        names: resolves agent names and failure kinds to labels (cut, capped); shared with every store.
    """

    def __init__(self, names: Names) -> None:
        self.lock = _fork.lock_for(self, "lock")
        self.names = names
        self.by_label: dict[str, AgentState] = {}
        # Raw agent name -> state, so the hot path does one dict lookup. Folded names are never entered,
        # so each of their records takes the slow path and is counted as an overflow.
        self.by_name: dict[str, AgentState] = {}
        self.overflow: dict[str, int] = {}
        self._overflow_warned: set[str] = set()

    def state(self, agent: str, *, overflow: bool = True) -> AgentState:
        """The state of an agent not in ``by_name`` yet (or folded), counting a folded name as an overflow
        unless told not to; raises ``OutcomeError`` if invalid."""
        label, folded = self.names.agent(agent)
        if type(agent) is not str:  # a str subclass: cached by its plain value, its own methods never run
            agent = str.__str__(agent)
        with self.lock:
            state = self.by_label.get(label)
            if state is None:
                state = self.by_label[label] = AgentState(label)
            if folded:
                if overflow:
                    self.overflowed("agent")
            elif len(self.by_name) < 4 * self.names.max_agents and cacheable(agent):
                self.by_name[agent] = state
        return state

    def known(self, agent: str) -> AgentState:
        """The state of an agent, by the one dict lookup of a name seen before (as in ``Account.count``)."""
        try:
            return self.by_name[agent]
        except Exception:  # a new agent, not a hashable one, or a str subclass whose hash raises
            return self.state(agent)

    def overflowed(self, what: str) -> None:
        """Count one name of ``what`` (agent, failure_kind, stage) folded past its cap; called under the
        lock."""
        self.overflow[what] = self.overflow.get(what, 0) + 1
        if what not in self._overflow_warned:
            self._overflow_warned.add(what)
            _log.warning(
                "more distinct %s values than the cap allows; further ones are counted as %r", what, OTHER
            )
