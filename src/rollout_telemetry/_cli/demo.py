"""``rollout-telemetry demo``: a simulated rollout collection, served on /metrics with a summary per agent."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rollout_telemetry._cli import options
from rollout_telemetry._cli.args import (
    OneLineParser,
    at_least,
    at_least_one,
    non_negative,
    positive,
    share,
)
from rollout_telemetry._cli.otlp import add_otlp_option, otlp_export
from rollout_telemetry._cli.scenarios import SCENARIOS

if TYPE_CHECKING:
    import asyncio

__all__ = ["NAME", "add_parser", "run"]

NAME = "demo"


def add_parser(commands: argparse._SubParsersAction[OneLineParser]) -> None:
    demo = commands.add_parser(
        NAME,
        help="run a simulated rollout collection and serve its /metrics",
        description=(
            "Simulate a rollout collection (several agents, a share of masked, failed and omitted "
            "rollouts, rewards in [-0.2, 1], token usage, truncated answers, groups of --group-size "
            "rollouts per task) through the lifecycle API, serve /metrics, and print one summary line per "
            "agent every few seconds. --scenario turns one cause of trouble on after --drop-after seconds. "
            "Stops after --duration seconds, or on Ctrl-C/SIGTERM."
        ),
    )
    options.add_serve_options(demo)
    options.add_logging_options(demo, argparse.SUPPRESS)
    demo.add_argument(
        "--agents", default="math_agent,code_agent,browser_agent", help="comma-separated agents"
    )
    demo.add_argument("--rate", type=positive, default=20.0, help="rollouts started per second (default: 20)")
    demo.add_argument("--duration", type=non_negative, default=0.0, help="seconds to run; 0 = until stopped")
    demo.add_argument("--masked", type=share, default=0.1, help="share of masked rollouts (default: 0.1)")
    demo.add_argument("--failed", type=share, default=0.05, help="share of failed rollouts (default: 0.05)")
    demo.add_argument("--omitted", type=share, default=0.02, help="share of omitted rollouts (default: 0.02)")
    demo.add_argument("--seed", type=int, default=None, help="random seed, for a repeatable run")
    demo.add_argument(
        "--no-negative-rewards", action="store_true", help="draw rewards from [0, 1] instead of [-0.2, 1]"
    )
    demo.add_argument(
        "--max-rollout-seconds",
        type=positive,
        default=2.0,
        metavar="SECONDS",
        help="longest simulated rollout (default: 2)",
    )
    demo.add_argument(
        "--summary-interval", type=at_least(0.5), default=5.0, help="seconds between summaries (default: 5)"
    )
    demo.add_argument(
        "--stalled",
        type=share,
        default=0.01,
        help="share of rollouts that hang at verification (default: 0.01)",
    )
    demo.add_argument(
        "--stall-after",
        type=positive,
        default=5.0,
        metavar="SECONDS",
        help="seconds in flight after which a rollout counts as stalled (default: 5, short for a demo)",
    )
    demo.add_argument(
        "--slow-after",
        type=positive,
        default=None,
        metavar="SECONDS",
        help="seconds in flight after which a rollout is in state slow (default: 0.8 x "
        "--max-rollout-seconds)",
    )
    add_otlp_option(demo, "spans and metrics")
    demo.add_argument(
        "--linger", type=non_negative, default=0.0, help="keep serving this many seconds after the run"
    )
    demo.add_argument(
        "--group-size", type=at_least_one, default=4, help="rollouts per task, one GRPO group (default: 4)"
    )
    demo.add_argument(
        "--uniform",
        type=share,
        default=0.1,
        help="share of easy tasks, all members scoring 1 (default: 0.1)",
    )
    demo.add_argument(
        "--truncated", type=share, default=0.03, help="share of truncated answers (default: 0.03)"
    )
    demo.add_argument(
        "--scenario",
        choices=SCENARIOS,
        default=None,
        help="make the reward fall after --drop-after seconds: healthy (it does not), infrastructure "
        "(failures rise and leak into scores), truncation (answers hit max_output_tokens) or policy; or "
        "the training signal go unsound: contaminated (terminal failures beside valid members), too_hard, "
        "too_easy (most tasks uniform at the lowest or highest reward), hollow (turns with no message) or "
        "length_drift (answers up to three times longer); or the collection stop recovering: "
        "retries_exhausted (15%% of the rollouts fail on every attempt), loop_lag (the event loop blocked "
        "0.3 s about every second), cleanup_leak (30%% of the session releases fail) or slow_rollouts "
        "(rollouts take three times longer, most past --slow-after)",
    )
    demo.add_argument(
        "--drop-after",
        type=non_negative,
        default=30.0,
        help="seconds before the scenario's cause starts (default: 30)",
    )
    demo.add_argument(
        "--warmup",
        type=non_negative,
        default=0.0,
        help="serve the agents at zero for this many seconds before the first rollout",
    )


def run(args: argparse.Namespace) -> int:
    """Run the simulation until ``--duration`` ends, or Ctrl-C/SIGTERM; then print the last summary."""
    import asyncio

    from rollout_telemetry._cli.process import freeze_the_heap, install_sigterm, interrupt_on_sigterm
    from rollout_telemetry._cli.scenario_clock import ScenarioLoop
    from rollout_telemetry._cli.simulation import DemoConfig, run_demo, summary_lines
    from rollout_telemetry._facade.telemetry import RolloutTelemetry

    config = DemoConfig(
        agents=tuple(a.strip() for a in args.agents.split(",") if a.strip()),
        rate=args.rate,
        duration=args.duration,
        masked=args.masked,
        failed=args.failed,
        omitted=args.omitted,
        seed=args.seed,
        negative_rewards=not args.no_negative_rewards,
        max_rollout_seconds=args.max_rollout_seconds,
        stalled=args.stalled,
        stall_after=args.stall_after,
        group_size=args.group_size,
        uniform=args.uniform,
        truncated=args.truncated,
        scenario=args.scenario,
        drop_after=args.drop_after,
        slow_after=args.slow_after,
    )
    security = options.endpoint_security(args)  # every input checked before anything starts
    otlp = otlp_export(args, NAME)
    # The run's time is its scenario's: a busy machine neither stretches a rollout nor makes one stall.
    loop = ScenarioLoop()
    telemetry = RolloutTelemetry(
        run=args.run,
        clock=loop.time,
        tracer_provider=None if otlp is None else otlp.tracer_provider,
        meter_provider=None if otlp is None else otlp.meter_provider,
        logger_provider=None if otlp is None else otlp.logger_provider,
        stall_after=config.stall_after,
        slow_after=config.slow_seconds,
    )
    if otlp is not None:
        otlp.attach(telemetry.registry, args.run)
    server = options.serve_endpoint(telemetry, args, security)
    interrupt_on_sigterm()
    freeze_the_heap()
    print(f"serving {server.url}", flush=True)

    def tick() -> None:
        for line in summary_lines(telemetry):
            print(line, flush=True)

    async def main_task() -> None:
        task = asyncio.current_task()
        assert task is not None
        install_sigterm(lambda: _cancel(loop, task))
        if args.warmup > 0:
            telemetry.expect(*config.agents)
            await asyncio.sleep(args.warmup)
        await run_demo(telemetry, config, on_tick=tick, tick_seconds=args.summary_interval, block=loop.block)
        if args.linger > 0:
            await asyncio.sleep(args.linger)

    try:
        with asyncio.Runner(loop_factory=lambda: loop) as runner:
            runner.run(main_task())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("stopping", flush=True)
    finally:
        tick()
        server.stop()
        if otlp is not None:
            otlp.shutdown()
    return 0


def _cancel(loop: asyncio.AbstractEventLoop, task: asyncio.Task[None]) -> None:
    loop.call_soon_threadsafe(task.cancel)
