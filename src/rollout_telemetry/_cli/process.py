"""What a long-running command does to its own process: how SIGTERM stops it, a heap frozen once loaded."""

from __future__ import annotations

import gc
import signal
from collections.abc import Callable
from types import FrameType

__all__ = ["freeze_the_heap", "install_sigterm", "interrupt_on_sigterm"]


def install_sigterm(handler: Callable[[], None]) -> None:
    """From now on, SIGTERM calls ``handler`` (in the main thread)."""

    def on_signal(signum: int, frame: FrameType | None) -> None:
        handler()

    signal.signal(signal.SIGTERM, on_signal)


def interrupt_on_sigterm() -> None:
    """From now on, SIGTERM stops the command as Ctrl-C does (a ``KeyboardInterrupt``): cleanly, status 0."""
    install_sigterm(_interrupt)


def _interrupt() -> None:
    raise KeyboardInterrupt


def freeze_the_heap() -> None:
    """Leave what is loaded by now out of the garbage collector's full collections."""
    # A long-running exporter: what is loaded by now stays, so the garbage collector's full collections (which
    # stop every thread) need not walk it again at every scrape (benchmarks/scrape_stall.py measures both).
    gc.collect()
    gc.freeze()
