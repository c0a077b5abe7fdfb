"""The dashboard's PromQL, written only through family names the catalogue has.

Every selector goes through ``series()``, which refuses a name ``rollout_telemetry.series.CATALOGUE`` does
not publish, so a renamed family fails the generator instead of leaving a panel on "No data". The rules the
queries keep: every counter under ``rate()``/``increase()`` with ``$__rate_interval`` (``$__range`` for
tables), every ratio a sum divided by a sum across exporter processes (never an average of ratios), and
every numerator that can be absent falling back to 0 while the agent completes rollouts.
"""

from __future__ import annotations

from rollout_telemetry.series import CATALOGUE, HISTOGRAMS

__all__ = [
    "NAMES",
    "agent_select",
    "failed_share",
    "increase",
    "masked_share",
    "mean_reward",
    "or_zero",
    "rate",
    "series",
    "unmasked_reward",
]

NAMES: frozenset[str] = frozenset(
    {family.name for family in CATALOGUE}
    | {f"{h.name}_{suffix}" for h in HISTOGRAMS for suffix in ("bucket", "sum", "count")}
)
"""Every series name a collector of this package publishes, histogram series included."""

COMPLETED = "rollout_completed_total"


def agent_select(agent: str | None = "$agent", *matchers: str) -> str:
    """The label matchers every query carries: the ``run`` variable, an agent variable (``None``: a family
    without an agent label), then any ``matchers``."""
    labels = ['run=~"$run"', *([] if agent is None else [f'agent=~"{agent}"']), *matchers]
    return "{" + ",".join(labels) + "}"


def series(name: str, *matchers: str, agent: str | None = "$agent") -> str:
    """A selector of the family ``name``, scoped to the run and agent variables and any ``matchers``.

    Raises:
        ValueError: the catalogue has no family of that name.
    """
    if name not in NAMES:
        msg = f"{name} is not in the catalogue (rollout_telemetry.series.CATALOGUE)"
        raise ValueError(msg)
    return name + agent_select(agent, *matchers)


def _sum(by: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(by)}) " if by else "sum "


def rate(name: str, by: tuple[str, ...] = ("agent",), *, agent: str | None = "$agent") -> str:
    """The per-second rate of a counter, summed over exporter processes ``by`` the given labels."""
    return f"{_sum(by)}(rate({series(name, agent=agent)}[$__rate_interval]))"


def increase(name: str, by: tuple[str, ...] = (), *, window: str = "$__range") -> str:
    """The increase of a counter over ``window`` (the dashboard's range for tables), summed ``by``."""
    return f"{_sum(by)}(increase({series(name)}[{window}]))"


def or_zero(expr: str, by: tuple[str, ...] = ("agent",), *, agent: str = "$agent") -> str:
    """``expr``, or 0 for every agent completing rollouts while ``expr`` has no series (nothing happened)."""
    return f"({expr} or {rate(COMPLETED, by, agent=agent)} * 0)"


def _rate0(name: str, by: tuple[str, ...]) -> str:
    return or_zero(rate(name, by), by)


def mean_reward(by: tuple[str, ...] = ("agent",)) -> str:
    """Mean reward over the rate window, masked rollouts included: reward sum over rewarded rollouts."""
    reward = f"{rate('rollout_reward_positive_total', by)} - {rate('rollout_reward_negative_total', by)}"
    return f"({reward}) / {rate('rollout_rewarded_total', by)}"


def unmasked_reward(by: tuple[str, ...] = ("agent",)) -> str:
    """Mean reward over unmasked rollouts: the masked reward sums and count taken out of each term."""

    def masked(name: str) -> str:
        return f"({rate(name, by)} or {rate('rollout_rewarded_total', by)} * 0)"

    reward = (
        f"{rate('rollout_reward_positive_total', by)} - {rate('rollout_reward_negative_total', by)}"
        f" - {masked('rollout_masked_reward_positive_total')}"
        f" + {masked('rollout_masked_reward_negative_total')}"
    )
    rewarded = f"{rate('rollout_rewarded_total', by)} - {masked('rollout_masked_rewarded_total')}"
    return f"({reward}) / ({rewarded})"


def masked_share(by: tuple[str, ...] = ("agent",)) -> str:
    """NeMo Gym's masked share: masked / (masked + unmasked rollouts that carry a reward).

    That is masked / (completed - unscored): an unscored rollout is in neither term.
    """
    scored = f"{rate(COMPLETED, by)} - {_rate0('rollout_unscored_total', by)}"
    return f"{_rate0('rollout_masked_total', by)} / ({scored})"


def failed_share(by: tuple[str, ...] = ("agent",)) -> str:
    """Failed among finished rollouts: failed / (completed + failed + omitted)."""
    failed = _rate0("rollout_failed_total", by)
    finished = f"{rate(COMPLETED, by)} + {failed} + {_rate0('rollout_omitted_total', by)}"
    return f"{failed} / ({finished})"
