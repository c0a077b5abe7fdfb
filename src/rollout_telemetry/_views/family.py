"""A published metric family: its name, type, labels, unit, when it appears, and how it is sampled.

The catalogue (``_views.series``) lists every family; the exporters format what a family's ``sample``
computes from a snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, Literal, Protocol, TypeVar

__all__ = ["Family", "FamilyType", "PerAgent", "Sample"]

S = TypeVar("S")

Sample = tuple[tuple[str, ...], float]
"""Label values (after any constant labels) and the value."""

FamilyType = Literal["counter", "gauge", "histogram"]


@dataclass(frozen=True, slots=True)
class Family(Generic[S]):
    """One published metric family, computed from a snapshot of type ``S``."""

    name: str
    """The Prometheus name; counters end in ``_total``."""
    type: FamilyType
    labels: tuple[str, ...]
    unit: str
    """The OpenTelemetry unit (UCUM): ``{rollout}``, ``1`` or ``s``."""
    appears: str
    """When the family has series, for the metric reference (docs/reference/metrics.md)."""
    help: str
    sample: Callable[[S], Iterator[Sample]]
    timely: bool = False
    """Whether its samples depend on when the snapshot was taken (``taken_at``), not on the counts alone: a
    view that reuses what it made from unchanged counts makes these afresh."""

    @property
    def otel_name(self) -> str:
        """The OpenTelemetry instrument name: the Prometheus name without ``_total``."""
        return self.name.removesuffix("_total")


class _Row(Protocol):
    @property
    def agent(self) -> str: ...


R = TypeVar("R", bound=_Row)
R_co = TypeVar("R_co", bound=_Row, covariant=True)


class _Snapshot(Protocol[R_co]):
    @property
    def agents(self) -> Iterable[R_co]: ...


class PerAgent(Generic[R]):
    """A sampler of one value per agent of a snapshot, ``(agent,), value``; an agent whose value is ``None``
    has no sample. ``PerAgent[AgentSnapshot](lambda agent: ...)`` for the rows of that snapshot."""

    __slots__ = ("_value",)

    def __init__(self, value: Callable[[R], float | None]) -> None:
        self._value = value

    def __call__(self, snap: _Snapshot[R]) -> Iterator[Sample]:
        value = self._value
        for agent in snap.agents:
            result = value(agent)
            if result is not None:
                yield (agent.agent,), result
