"""One resolution of names: the agent and failure-kind labels that every store and every span uses.

A name becomes a label once, here: it is checked (an agent must be a non-empty string), a kind is checked
against the vocabulary (an unregistered one is warned about once and passes through), the label is cut to
``MAX_LABEL_LENGTH`` characters, and the cardinality caps are applied: beyond ``max_agents`` agents, or
``max_kinds_per_agent`` kinds (or stages) for one agent, new names are folded into ``_other``. The account,
the coverage account and the spans all ask the same ``Names``, so a name is one label everywhere.

Resolution says whether a name was folded; counting the folded records is the caller's (the account's)
business, so asking twice never counts twice.
"""

from __future__ import annotations

from rollout_telemetry import _fork
from rollout_telemetry._contract.kinds import KindValidator
from rollout_telemetry._contract.labels import MAX_LABEL_LENGTH, label_value
from rollout_telemetry._contract.outcome import Disposition
from rollout_telemetry._contract.shown import shown
from rollout_telemetry.errors import ConfigError, OutcomeError
from rollout_telemetry.failure_kinds import OTHER, STAGES, UNSPECIFIED

__all__ = ["DEFAULT_MAX_AGENTS", "DEFAULT_MAX_KINDS_PER_AGENT", "Names", "cacheable"]

DEFAULT_MAX_AGENTS = 256
DEFAULT_MAX_KINDS_PER_AGENT = 64

_MAX_CACHED_KINDS = 4096
MAX_CACHED_NAME = 4 * MAX_LABEL_LENGTH
"""The longest raw name kept in a cache (512 characters): a longer one is resolved again each time (it is
cut to a label anyway), so the caches stay bounded in bytes whatever names arrive."""


def cacheable(name: str) -> bool:
    """Whether a raw name is short enough to be kept as a cache key (``MAX_CACHED_NAME``)."""
    return len(name) <= MAX_CACHED_NAME


class Names:
    """Resolves agent names and failure kinds to labels under the cardinality caps; thread-safe.

    Args:
        max_agents: distinct agent labels admitted; further agents are folded into ``_other``.
        max_kinds_per_agent: distinct failure-kind labels (and, apart, stage labels) admitted per agent;
            further ones become ``_other``.
    """

    def __init__(
        self,
        *,
        max_agents: int = DEFAULT_MAX_AGENTS,
        max_kinds_per_agent: int = DEFAULT_MAX_KINDS_PER_AGENT,
    ) -> None:
        if max_agents < 1 or max_kinds_per_agent < 1:
            msg = "max_agents and max_kinds_per_agent must be at least 1"
            raise ConfigError(msg)
        self.max_agents = max_agents
        self.max_kinds_per_agent = max_kinds_per_agent
        self._validator = KindValidator()  # warns once per unregistered kind
        self._lock = _fork.lock_for(self)
        # Raw name -> admitted label. Bounded: names that cut to the same label cannot grow it without end.
        self._agents: dict[str, str] = {}
        self._agent_labels: set[str] = set()
        self._kind_labels: dict[str, str] = {}  # raw kind -> checked, cut label (a cache)
        self._admitted_kinds: dict[str, set[str]] = {}  # agent label -> its admitted kind labels
        self._stage_validator = KindValidator(known=STAGES, noun="stage")
        self._stage_labels: dict[str, str] = {}
        self._admitted_stages: dict[str, set[str]] = {}

    def agent(self, name: object) -> tuple[str, bool]:
        """Return ``(label, folded)`` for an agent name; ``folded`` when the cap put it under ``_other``.

        Raises:
            OutcomeError: the name is not a non-empty string.
        """
        if type(name) is not str:
            if not isinstance(name, str):
                msg = f"must be a non-empty string, got {type(name).__name__} {shown(name, 60)}"
                raise OutcomeError("agent", msg)
            name = str.__str__(name)  # a str subclass (an enum member, say): its plain value
        if not name:
            raise OutcomeError("agent", "must be a non-empty string, got ''")
        label = self._agents.get(name)
        if label is not None:
            return label, False
        label = label_value(name)
        with self._lock:
            if label not in self._agent_labels:
                if len(self._agent_labels) >= self.max_agents and label != OTHER:
                    return OTHER, True  # not cached: every record of this name is folded, and counted so
                self._agent_labels.add(label)
            if len(self._agents) < 4 * self.max_agents and cacheable(name):
                self._agents[name] = label
        return label, False

    def kind(self, agent_label: str, kind: str | None) -> tuple[str, bool]:
        """Return ``(label, folded)`` for a failure kind of an agent (by its label); ``None`` is unspecified.

        The first time an unregistered kind is seen it is warned about, once; it is never rejected.
        """
        if kind is None:
            return self._admit(self._admitted_kinds, agent_label, UNSPECIFIED)
        return self._admit(
            self._admitted_kinds, agent_label, self._label(self._kind_labels, self._validator, kind)
        )

    def outcome_kind(self, agent_label: str, disposition: Disposition, kind: str | None) -> str | None:
        """The failure kind an outcome of an agent (by its label) carries where it is shown whole (its span,
        its log line): the label it is counted under, or, for a measured outcome (counted by no kind), the
        kind as given."""
        if kind is None or disposition is Disposition.MEASURED:
            return kind
        return self.kind(agent_label, kind)[0]

    def stage(self, agent_label: str, stage: str) -> tuple[str, bool]:
        """Return ``(label, folded)`` for the stage of a rollout in flight: NeMo Gym's stages or
        ``<server>:<stage>``, others warned about once; capped per agent like the kinds.

        Raises:
            OutcomeError: the stage is not a non-empty string.
        """
        if not isinstance(stage, str) or not stage:
            raise OutcomeError("stage", f"must be a non-empty string, got {type(stage).__name__}")
        label = self._label(self._stage_labels, self._stage_validator, str.__str__(stage))
        return self._admit(self._admitted_stages, agent_label, label)

    @staticmethod
    def _label(cache: dict[str, str], validator: KindValidator, name: str) -> str:
        label = cache.get(name)
        if label is None:
            label = label_value(validator.validate(name))
            if len(cache) < _MAX_CACHED_KINDS and cacheable(name):
                cache[name] = label
        return label

    def _admit(
        self, admitted_by_agent: dict[str, set[str]], agent_label: str, label: str
    ) -> tuple[str, bool]:
        with self._lock:
            admitted = admitted_by_agent.setdefault(agent_label, set())
            if label in admitted:
                return label, False
            if len(admitted) >= self.max_kinds_per_agent and label != OTHER:
                return OTHER, True
            admitted.add(label)
        return label, False
