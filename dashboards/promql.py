"""The PromQL of the dashboard and of the Prometheus rules: each formula written once, rendered in a scope.

A formula (a family's rate, its fallback to 0, the mean reward, the masked share...) is a function of a
``Scope``, which says where it is evaluated: on the dashboard (Grafana's ``$run`` and ``$agent`` variables,
``$__rate_interval``, a series per agent) or in the rules (every run and agent, a fixed window, a series per
run and agent). The panels and the rules call the same function, so they cannot compute a number two ways.

Every selector goes through ``series()``, which refuses a name ``rollout_telemetry.series.CATALOGUE`` does
not publish, so a renamed family fails the generator instead of leaving a panel on "No data" or an alert
that never fires. The rules the formulas keep: every counter under ``rate()``/``increase()``, every ratio a
sum divided by a sum across exporter processes (never an average of ratios), and every numerator that can
be absent falling back to 0 while the agent completes rollouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from rollout_telemetry._contract.group_state import NO_SIGNAL
from rollout_telemetry._views.series import published

__all__ = [
    "COMPLETED",
    "Scope",
    "cleanups_unresolved_rise",
    "contaminated_share",
    "exhausted_share",
    "failed_share",
    "finished_rate",
    "hollow_share",
    "increase",
    "loop_lag_quantile",
    "lost_share",
    "masked_share",
    "mean_reward",
    "no_signal_share",
    "or_zero",
    "output_tokens_per_rollout",
    "rate",
    "rate0",
    "reward_lost",
    "series",
    "slow_share",
    "stalled_by_stage",
    "truncated_share",
    "uniform_share",
    "unmasked_reward",
]

COMPLETED = "rollout_completed_total"
"""Present for every agent from its first outcome: what a numerator that can be absent falls back on."""

OUTPUT = 'type="output"'
"""The token type of the model's output (reasoning tokens included)."""

NO_SIGNAL_STATES = NO_SIGNAL
"""The group states whose advantages are zero or noise (``_contract.group_state.NO_SIGNAL``)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Where a formula is evaluated: the labels its sums keep, its rate window and its selectors' matchers."""

    by: tuple[str, ...]
    """The labels every sum keeps: a panel's ``agent``, a rule's ``run`` and ``agent``; () sums everything."""
    window: str
    """The range of every rate and increase: ``$__rate_interval`` on the dashboard, a fixed one in rules."""
    run: str | None = None
    """The regex every selector's ``run`` matches (a Grafana variable); None: no matcher, every run."""
    agent: str | None = None
    """The regex every selector's ``agent`` matches; None: no matcher (every agent, or a family without)."""
    recorded: Mapping[str, str] = field(default_factory=dict)
    """Recorded series by the expression they record: a term equal to one reads the series instead."""

    def keeping(self, *by: str) -> Scope:
        """This scope with sums that keep ``by`` instead."""
        return replace(self, by=by)

    def reading(self, recorded: Mapping[str, str]) -> Scope:
        """This scope reading the series of ``recorded`` (expression to series name) where a term is one.

        A recording rule evaluates before the rules after it in its group, at the same time, so reading its
        series gives the same number as computing the expression again.
        """
        return replace(self, recorded=dict(recorded))


def _plain(scope: Scope) -> Scope:
    """The scope without recorded series: a term is looked up whole, so its parts are rendered plain."""
    return replace(scope, recorded={}) if scope.recorded else scope


def _term(scope: Scope, expr: str) -> str:
    """``expr`` (rendered without recorded series), or the series recorded for it."""
    return scope.recorded.get(expr, expr)


def series(name: str, scope: Scope, *matchers: str) -> str:
    """A selector of the family ``name`` with the scope's run and agent matchers, then ``matchers``.

    Raises:
        ValueError: the catalogue has no family of that name.
    """
    published(name)  # a family the catalogue does not publish fails here, not as a blank panel
    labels = [
        *([] if scope.run is None else [f'run=~"{scope.run}"']),
        *([] if scope.agent is None else [f'agent=~"{scope.agent}"']),
        *matchers,
    ]
    return name + ("{" + ",".join(labels) + "}" if labels else "")


def _sum(labels: tuple[str, ...]) -> str:
    return f"sum by ({', '.join(labels)}) " if labels else "sum "


def rate(name: str, scope: Scope, *matchers: str, by: tuple[str, ...] = ()) -> str:
    """The per-second rate of a counter, summed over exporter processes by the scope's labels and ``by``."""
    plain = f"{_sum(scope.by + by)}(rate({series(name, scope, *matchers)}[{scope.window}]))"
    return _term(scope, plain)


def increase(name: str, scope: Scope, *matchers: str, by: tuple[str, ...] = ()) -> str:
    """The increase of a counter over the scope's window, summed by the scope's labels and ``by``."""
    return f"{_sum(scope.by + by)}(increase({series(name, scope, *matchers)}[{scope.window}]))"


def or_zero(expr: str, scope: Scope) -> str:
    """``expr``, or 0 for every series of the scope completing rollouts while ``expr`` has none.

    A family that appears once something happens (the first masked rollout, say) has no series before: the
    fallback makes a healthy run read 0 rather than nothing.
    """
    return f"({expr} or {rate(COMPLETED, scope)} * 0)"


def rate0(name: str, scope: Scope) -> str:
    """The rate of a counter that can be absent, 0 while it is."""
    plain = _plain(scope)
    return _term(scope, or_zero(rate(name, plain), plain))


def finished_rate(scope: Scope) -> str:
    """Rollouts finished (completed, failed or omitted) per second: "rollouts per minute" everywhere (``top``,
    NeMo Gym's ``progress/total/rollouts_per_min``) are these, times 60 (``snapshot.finished``)."""
    absent = (rate0("rollout_failed_total", scope), rate0("rollout_omitted_total", scope))
    return f"{rate(COMPLETED, scope)} + {absent[0]} + {absent[1]}"


def mean_reward(scope: Scope) -> str:
    """Mean reward over the rate window, masked rollouts included: reward sum over rewarded rollouts."""
    reward = (
        f"{rate('rollout_reward_positive_total', scope)} - {rate('rollout_reward_negative_total', scope)}"
    )
    return f"({reward}) / {rate('rollout_rewarded_total', scope)}"


def unmasked_reward(scope: Scope) -> str:
    """Mean reward over unmasked rollouts: the masked reward sums and count taken out of each term."""

    # The masked families appear with the first masked rollout, and only rewarded rollouts are masked.
    def masked(name: str) -> str:
        return f"({rate(name, scope)} or {rate('rollout_rewarded_total', scope)} * 0)"

    reward = (
        f"{rate('rollout_reward_positive_total', scope)} - {rate('rollout_reward_negative_total', scope)}"
        f" - {masked('rollout_masked_reward_positive_total')}"
        f" + {masked('rollout_masked_reward_negative_total')}"
    )
    rewarded = f"{rate('rollout_rewarded_total', scope)} - {masked('rollout_masked_rewarded_total')}"
    return f"({reward}) / ({rewarded})"


def reward_lost(scope: Scope) -> str:
    """Unmasked minus mean reward: how much of the reported score the masked rollouts take off."""
    return f"({unmasked_reward(scope)}) - ({mean_reward(scope)})"


def masked_share(scope: Scope) -> str:
    """NeMo Gym's masked share: masked / (masked + unmasked rollouts that carry a reward).

    That is masked / (completed - unscored): an unscored rollout is in neither term.
    """
    scored = f"{rate(COMPLETED, scope)} - {rate0('rollout_unscored_total', scope)}"
    return f"{rate0('rollout_masked_total', scope)} / ({scored})"


def _completed_or_failed(scope: Scope) -> str:
    """The failure shares' denominator: omitted rollouts were left out on purpose and count in neither."""
    return f"({rate(COMPLETED, scope)} + {rate0('rollout_failed_total', scope)})"


def failed_share(scope: Scope) -> str:
    """Failed among completed and failed rollouts: failed / (completed + failed).

    Above 1/2 exactly when failed > completed.
    """
    return f"{rate0('rollout_failed_total', scope)} / {_completed_or_failed(scope)}"


def lost_share(scope: Scope) -> str:
    """The share lost to infrastructure: (masked + failed) / (completed + failed); omitted in neither term."""
    lost = f"({rate0('rollout_masked_total', scope)} + {rate0('rollout_failed_total', scope)})"
    return f"{lost} / {_completed_or_failed(scope)}"


def truncated_share(scope: Scope) -> str:
    """Truncated among completed rollouts (their model response was incomplete)."""
    return f"{rate0('rollout_truncated_total', scope)} / {rate(COMPLETED, scope)}"


def output_tokens_per_rollout(scope: Scope) -> str:
    """Output tokens per completed rollout; rollouts without usage count in the denominator too."""
    return f"{rate('rollout_tokens_total', scope, OUTPUT)} / {rate(COMPLETED, scope)}"


def no_signal_share(scope: Scope) -> str:
    """Groups that give no (or a noisy) learning signal among the groups completed."""
    states = f'state=~"{"|".join(NO_SIGNAL_STATES)}"'
    return f"{rate('rollout_groups_total', scope, states)} / {rate('rollout_groups_total', scope)}"


def _among(name: str, whole: str, scope: Scope, *matchers: str) -> str:
    """A counter that appears once it counts, among the ``whole`` it is part of: 0 while it is absent."""
    total = rate(whole, scope)
    return f"({rate(name, scope, *matchers)} or {total} * 0) / {total}"


def _among_groups(name: str, scope: Scope, *matchers: str) -> str:
    """A group counter that appears once it counts, among the groups completed: 0 while it is absent."""
    return _among(name, "rollout_groups_total", scope, *matchers)


def hollow_share(scope: Scope) -> str:
    """Rollouts with a hollow agent turn (no message, no tool call) among those with a checked trajectory."""
    return _among(
        "rollout_health_findings_total", "rollout_health_evaluated_total", scope, 'check="agent_turn_hollow"'
    )


def exhausted_share(scope: Scope) -> str:
    """Rollouts whose retries ran out (their last attempt failed, terminal or the last NeMo Gym allows) among
    the rollouts that reached a final outcome: what the run gave up on."""
    return _among("rollout_retries_exhausted_total", "rollout_attempts_count", scope)


def loop_lag_quantile(quantile: float, scope: Scope) -> str:
    """A quantile of how late the collecting processes' event loops woke, per process (``instance``): the
    family has no agent label, so the scope's other labels are kept."""
    by = (*(label for label in scope.by if label != "agent"), "instance", "le")
    lag = series("rollout_telemetry_event_loop_lag_seconds_bucket", replace(scope, agent=None))
    buckets = f"{_sum(by)}(rate({lag}[{scope.window}]))"
    return f"histogram_quantile({quantile:g}, {buckets})"


def slow_share(scope: Scope) -> str:
    """Rollouts in flight in state ``slow`` among those in flight (``terminal`` ones, their outcome counted,
    left out), summed over the samples of the scope's window: the share of in-flight rollout-samples that
    were slow, steadier than one scrape's. 0 while the agent has rollouts in flight and none was slow."""

    def in_flight(state: str) -> str:
        return f"{_sum(scope.by)}(sum_over_time({series('rollout_in_flight', scope, state)}[{scope.window}]))"

    slow, whole = in_flight('state="slow"'), in_flight('state!="terminal"')
    return f"({slow} or {whole} * 0) / {whole}"


def cleanups_unresolved_rise(scope: Scope) -> str:
    """How much the unresolved cleanups rose over the scope's window per cleanup finished in it: the share of
    cleanups that leave something behind (failed, or never finished: then the rise is over nothing, +Inf).
    Cleanups in progress come and go; over a window of many cleanups they add little to the rise."""
    rise = f"{_sum(scope.by)}(delta({series('rollout_cleanups_unresolved', scope)}[{scope.window}]))"
    return f"{rise} / {increase('rollout_cleanup_duration_seconds_count', scope)}"


def contaminated_share(scope: Scope) -> str:
    """Groups whose valid members sat beside masked, unscored, failed or omitted ones, among the groups
    completed: the share of baselines a trainer that keeps lost members as reward 0 computes wrongly."""
    return _among_groups("rollout_groups_contaminated_total", scope)


def uniform_share(scope: Scope, at: str) -> str:
    """Uniform groups whose common reward is ``at`` (lowest, highest) of the agent's range, among the groups
    completed: too hard at the lowest, too easy at the highest."""
    return _among_groups("rollout_groups_uniform_total", scope, f'reward="{at}"')


def stalled_by_stage(scope: Scope) -> str:
    """Rollouts in flight longer than stall_after, summed over processes, by the stage they are stuck at."""
    return f"{_sum((*scope.by, 'stage'))}({series('rollout_stalled', scope)})"
