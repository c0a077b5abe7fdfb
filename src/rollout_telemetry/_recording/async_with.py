"""``async with`` as ``with``: the base of the blocks a user enters (rollout, cleanup, output write)."""

from __future__ import annotations

from types import TracebackType
from typing import Self

__all__ = ["AsyncWith"]


class AsyncWith:
    """``async with`` as ``with``: nothing these blocks do on entering or leaving awaits. Leaving the block
    is ``_leave(exc)``, with the exception escaping it or ``None``."""

    __slots__ = ()

    def __enter__(self) -> Self:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._leave(exc)

    def _leave(self, exc: BaseException | None) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
