"""HTTP basic authentication for the endpoint, built so that guessing costs the guesser more than us.

The configuration, ``credentials.BasicAuth``, is one user name and a scrypt hash (slow and 16 MiB per check
by design, which is what makes a stolen hash expensive to crack; its cost: docs/guides/security.md).
``Authenticator`` is what one running server holds in front of it (the bounds are ``limits.Limits``'):

- a credential checked before is decided without scrypt: the last ``max_verified`` verified and the last
  ``max_refused`` refused are remembered as HMACs under a key made at start (never the password itself), so
  an authorised scraper pays for scrypt once per server and a guess repeated costs nothing;
- a header that is not well-formed basic auth, of any kind, is refused before anything is computed;
- each source has a bucket of ``failure_burst`` attempts that refills at ``failure_refill`` per second (a
  success gives its attempt back); ``PasswordChecks`` serves sources with attempts left before those
  without. The table holds at most ``max_sources`` sources, the least recently seen forgotten first.

``PasswordChecks`` runs what is left on threads of its own (``auth_threads``), never those that render, in a
fair order: one source after another (a source is an IPv4 address or an IPv6 /64), oldest first within
one. An attempt that has not had its turn within ``auth_wait`` seconds is refused (429), having held a
connection but no thread, and that connection may be evicted for a newcomer, as an idle one may (so a
source's waiting attempts are bounded by its connections, ``max_per_source``). No shorter line per source:
a restarted scraper sharing its address with guessers must keep its place in that address's line. The
threads bound the guesses of every address together, however many there are.

Whether the user name exists does not change the work done: every attempt that reaches scrypt runs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from enum import StrEnum

from rollout_telemetry._serve.credentials import credentials
from rollout_telemetry._serve.limits import DEFAULT_LIMITS, Limits
from rollout_telemetry._serve.messages import Waiting
from rollout_telemetry._serve.workers import Workers

__all__ = ["Authenticator", "PasswordChecks", "Verdict"]


class Verdict(StrEnum):
    """What the authenticator decided about one request."""

    ALLOWED = "allowed"
    DENIED = "denied"
    LIMITED = "limited"  # no turn at a password check in time: answered without scrypt


class _Remembered:
    """A bounded set of HMACs, the least recently used forgotten first. Thread-safe."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._macs: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()

    def __contains__(self, mac: bytes) -> bool:
        # A dict lookup is not constant-time, but the key is an HMAC under a secret key: its timing tells
        # nothing about any password.
        with self._lock:
            if mac not in self._macs:
                return False
            self._macs.move_to_end(mac)
            return True

    def add(self, mac: bytes) -> None:
        with self._lock:
            self._macs[mac] = None
            self._macs.move_to_end(mac)
            while len(self._macs) > self._size:
                self._macs.popitem(last=False)


class Authenticator:
    """One server's gate in front of a password check: credentials checked before, attempts per source.

    ``screen()`` decides whatever can be decided without scrypt (on the event loop); what is left goes to
    ``verify()`` (``matches``: scrypt, on a worker thread), in the order ``PasswordChecks`` gives.
    Thread-safe.
    """

    def __init__(
        self,
        matches: Callable[[bytes, bytes], bool],
        *,
        limits: Limits = DEFAULT_LIMITS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._matches = matches
        self._clock = clock
        self._burst = limits.failure_burst
        self._refill = limits.failure_refill
        self._max_sources = limits.max_sources
        self._key = secrets.token_bytes(32)
        self._verified = _Remembered(limits.max_verified)
        self._refused = _Remembered(limits.max_refused)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # source -> (attempts, when)
        self._lock = threading.Lock()

    def _mac(self, username: bytes, password: bytes) -> bytes:
        credential = len(username).to_bytes(4, "big") + username + password  # unambiguous where ':' is
        return hmac.new(self._key, credential, hashlib.sha256).digest()

    def screen(self, header: str | None) -> Verdict | None:
        """Decide without scrypt if possible; None means the request needs ``verify()``.

        A malformed or missing header is DENIED, a credential verified before ALLOWED, one refused before
        DENIED.
        """
        parsed = credentials(header)
        if parsed is None:
            return Verdict.DENIED
        mac = self._mac(*parsed)
        if mac in self._verified:
            return Verdict.ALLOWED
        if mac in self._refused:
            return Verdict.DENIED
        return None

    def verify(self, header: str | None, source: str) -> Verdict:
        """Check the header with scrypt after ``screen()`` returned None; remember the outcome."""
        parsed = credentials(header)
        if parsed is None:
            return Verdict.DENIED
        if not self._matches(*parsed):
            self._refused.add(self._mac(*parsed))
            return Verdict.DENIED
        self._verified.add(self._mac(*parsed))
        self._give_back_attempt(source)
        return Verdict.ALLOWED

    def _attempts(self, source: str, now: float) -> float:
        attempts, when = self._buckets.get(source, (self._burst, now))
        return min(self._burst, attempts + (now - when) * self._refill)

    def take_attempt(self, source: str) -> bool:
        """Take one of ``source``'s attempts; False (nothing taken) if it has none left."""
        with self._lock:
            now = self._clock()
            attempts = self._attempts(source, now)
            if attempts < 1:
                return False
            self._buckets[source] = (attempts - 1, now)
            self._buckets.move_to_end(source)
            while len(self._buckets) > self._max_sources:
                self._buckets.popitem(last=False)
            return True

    def _give_back_attempt(self, source: str) -> None:
        with self._lock:
            if source in self._buckets:
                now = self._clock()
                self._buckets[source] = (min(self._burst, self._attempts(source, now) + 1), now)

    @property
    def sources(self) -> int:
        """Sources the attempt limiter currently remembers."""
        return len(self._buckets)


class PasswordChecks:
    """Run the checks ``Authenticator.screen()`` left undecided, in a fair order, on threads of their own.

    Lives on one event loop (not thread-safe): attempts wait in a queue per source; a free thread takes the
    oldest attempt of the next source in turn, preferring sources that still have attempts in their bucket
    (spent there), so a guesser that rotates through addresses or floods one address takes its share of
    the threads, not the others'. Waiting holds a connection, no thread.
    """

    def __init__(self, authenticator: Authenticator, limits: Limits = DEFAULT_LIMITS) -> None:
        self._authenticator = authenticator
        self._wait = limits.auth_wait
        self._workers = Workers(limits.auth_threads, max_queued=limits.auth_threads)
        self._free = limits.auth_threads
        self._queues: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()  # sources in turn order

    async def check(
        self, header: str | None, source: str, evictable: Waiting = contextlib.nullcontext
    ) -> Verdict:
        """The verdict of scrypt on ``header``, or LIMITED if its turn did not come within ``auth_wait``.

        While it waits for its turn it holds nothing: it is inside ``evictable()`` (its connection's), so its
        connection may go for a newcomer meanwhile.
        """
        if self._free and not self._queues:
            self._free -= 1
            self._authenticator.take_attempt(source)
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queues.setdefault(source, deque()).append(turn)
            try:
                with evictable():
                    async with asyncio.timeout(self._wait):
                        await asyncio.shield(turn)
            except BaseException as exc:  # no turn in time, or the server stops
                if turn.done():  # given its turn just as the wait ended: pass the turn on
                    self._done()
                else:
                    turn.cancel()
                    self._leave(source, turn)
                if isinstance(exc, TimeoutError):
                    return Verdict.LIMITED
                raise
        try:
            return await self._workers.run(lambda: self._authenticator.verify(header, source))
        finally:
            self._done()

    def _done(self) -> None:
        """A thread is free: give it to the next waiting attempt in turn."""
        self._free += 1
        while self._free and self._queues:
            source = next(
                (s for s in self._queues if self._authenticator.take_attempt(s)), next(iter(self._queues))
            )
            waiting = self._queues[source]
            turn = waiting.popleft()
            if waiting:
                self._queues.move_to_end(source)
            else:
                del self._queues[source]
            if not turn.done():  # not given up meanwhile
                self._free -= 1
                turn.set_result(None)

    def _leave(self, source: str, turn: asyncio.Future[None]) -> None:
        waiting = self._queues.get(source)
        if waiting is not None:
            waiting.remove(turn)
            if not waiting:
                del self._queues[source]

    def close(self) -> None:
        """Stop the threads."""
        self._workers.close()
