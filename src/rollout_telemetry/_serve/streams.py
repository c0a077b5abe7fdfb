"""Byte streams over one accepted, non-blocking socket, plain or TLS, for the endpoint's event loop.

Why not asyncio's transports: a transport copies what the socket does not take at once into a buffer of its
own (a slow reader of a large response then holds a copy of it), and asyncio's TLS transport keeps a
256 KiB receive buffer per connection and, on 3.11, never reports its written data drained when the
high-water mark is 0, so a response could not be followed by a prompt close. Here reads go straight from the
socket (``loop.sock_recv``) and writes are sent from the caller's buffer (``loop.sock_sendall`` keeps a view,
not a copy); TLS runs in an ``ssl.SSLObject`` over two memory BIOs, through which at most one TLS record's
worth of ciphertext waits at a time, so a connection holds a few tens of KiB whatever its client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Callable

RECV_SIZE = 16 * 1024
"""Bytes asked of the socket per read."""
_TLS_RECORD = 16 * 1024  # the largest TLS record's plaintext: one record is encrypted and sent at a time


class PlainStream:
    """A plain TCP stream; ``progressed`` is called each time the client takes some of what is sent."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, sock: socket.socket, progressed: Callable[[], None]
    ) -> None:
        self._loop = loop
        self._sock = sock
        self._progressed = progressed

    async def recv(self, size: int = RECV_SIZE) -> bytes:
        """Up to ``size`` bytes; empty when the client has closed."""
        return await self._loop.sock_recv(self._sock, size)

    async def send(self, data: bytes | memoryview) -> None:
        """Send all of ``data`` (a slow client makes this wait; nothing is copied meanwhile)."""
        await self._sendall(data)

    async def _sendall(self, data: bytes | memoryview) -> None:
        """``loop.sock_sendall``, saying each time the socket took some: as much as it takes per call, from
        a view of ``data``, waiting for the socket to be writable in between."""
        view = memoryview(data)
        while view:
            try:
                sent = self._sock.send(view)
            except (BlockingIOError, InterruptedError):
                sent = 0
            if sent:
                view = view[sent:]
                self._progressed()
                continue
            writable = self._loop.create_future()
            self._loop.add_writer(self._sock, writable.set_result, None)
            try:
                await writable
            finally:
                self._loop.remove_writer(self._sock)

    async def finish(self) -> None:
        """Nothing to say before the close on plain TCP."""


class TlsStream(PlainStream):
    """A TLS stream: an ``ssl.SSLObject`` between the socket and the caller."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        progressed: Callable[[], None],
        context: ssl.SSLContext,
        received: bytes,
    ) -> None:
        """A server's side of TLS on ``sock``, whose client has sent ``received`` so far."""
        super().__init__(loop, sock, progressed)
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._incoming.write(received)
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)

    async def handshake(self) -> None:
        """Run the server's side of the handshake.

        Raises:
            ssl.SSLError: the handshake failed (a plain-HTTP client, an untrusted client certificate).
            ConnectionResetError: the client closed during it.
        """
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                if not await self._fill():
                    raise ConnectionResetError("closed during the TLS handshake") from None
        await self._flush()

    async def recv(self, size: int = RECV_SIZE) -> bytes:
        """Up to ``size`` bytes of plaintext; empty when the client has closed (with close_notify or not)."""
        while True:
            try:
                return self._tls.read(size)
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
            if not await self._fill():
                return b""

    async def send(self, data: bytes | memoryview) -> None:
        """Encrypt and send ``data`` one record at a time, each sent before the next is made."""
        view = memoryview(data)
        for start in range(0, len(view), _TLS_RECORD):
            self._tls.write(view[start : start + _TLS_RECORD])
            await self._flush()

    async def finish(self) -> None:
        """Send close_notify; the client's own is not waited for (the socket is closed after a linger)."""
        with contextlib.suppress(ssl.SSLWantReadError):
            self._tls.unwrap()
        await self._flush()

    async def _fill(self) -> bool:
        """Send what TLS has to say, then read ciphertext into it; False when the client has closed."""
        await self._flush()
        data = await self._loop.sock_recv(self._sock, RECV_SIZE)
        if not data:
            self._incoming.write_eof()
            return False
        self._incoming.write(data)
        return True

    async def _flush(self) -> None:
        if ciphertext := self._outgoing.read():
            await self._sendall(ciphertext)
