"""``rollout-telemetry top`` in a terminal: :class:`rich.live.Live` redraws the screen that
:func:`~rollout_telemetry._cli.top_screen.render` draws, and keys are read with termios and select.

Built on rich (already a dependency, for ``report``). Textual was the other candidate; it would add a
framework with its own app loop, CSS and widgets for a read-only screen that needs one key.
"""

from __future__ import annotations

import os
import select
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console, Group
from rich.live import Live

from rollout_telemetry._cli.top_model import TopView
from rollout_telemetry._cli.top_screen import render
from rollout_telemetry._cli.top_sources import Poller

__all__ = ["run_top"]


class _Keys:
    """Single key presses from a terminal's standard input, unechoed; none when it is not a terminal."""

    def __init__(self) -> None:
        self._fd = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None

    def wait(self, seconds: float) -> str | None:
        """The next key pressed within ``seconds``, or ``None``."""
        if self._fd is None:
            time.sleep(seconds)
            return None
        ready, _, _ = select.select([self._fd], [], [], seconds)
        if not ready:
            return None
        data = os.read(self._fd, 32)
        return data.decode("utf-8", errors="replace")[:1] if data else None

    @contextmanager
    def cbreak(self) -> Iterator[_Keys]:
        """Keys arrive one at a time, unechoed; Ctrl-C still interrupts; the terminal is restored after."""
        if self._fd is None:
            yield self
            return
        import termios
        import tty

        saved = termios.tcgetattr(self._fd)
        try:
            tty.setcbreak(self._fd)
            yield self
        finally:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, saved)


def view_of(pollers: Sequence[Poller], interval: float, now: float) -> TopView:
    """The current view over every poller, in the order given."""
    return TopView(tuple(p.view for p in pollers), interval, now)


def run_top(
    pollers: Sequence[Poller],
    interval: float,
    *,
    console: Console | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Show the pollers' views until ``q`` (or Ctrl-C); return the exit status: 0, or 2 without a terminal."""
    console = console or Console()
    if not console.is_terminal:
        print(
            "rollout-telemetry: top needs a terminal (for figures to keep: report, or /metrics)",
            file=sys.stderr,
        )
        return 2
    unicode = console.encoding.lower().startswith("utf")

    def screen() -> Group:
        size = console.size
        view = view_of(pollers, interval, clock())
        return render(view, width=size.width, height=size.height, unicode=unicode)

    for poller in pollers:
        poller.start()
    keys = _Keys()
    try:
        with keys.cbreak(), Live(screen(), console=console, screen=True, auto_refresh=False) as live:
            next_draw = clock() + min(interval, 0.25)  # the first readings land soon after the start
            while True:
                key = keys.wait(max(next_draw - clock(), 0.0))
                if key in ("q", "Q"):
                    break
                if clock() >= next_draw:
                    live.update(screen(), refresh=True)
                    next_draw = clock() + interval
    except KeyboardInterrupt:
        pass
    finally:
        for poller in pollers:
            poller.stop()
    return 0
