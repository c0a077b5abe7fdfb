"""The bounds an endpoint holds to, whatever its clients do: one frozen value given to the server.

``DEFAULT_LIMITS`` holds the documented values (docs/guides/security.md's table, which tests/test_docs.py
checks against it); a test gives a server its own ``Limits(...)``. The ``/metrics`` endpoint and service
discovery's ``/targets`` read the same fields, but for ``max_reads_queued`` and ``read_interval`` (the
former's own reads).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_LIMITS", "Limits"]

_KIB, _MIB = 1 << 10, 1 << 20


@dataclass(frozen=True, slots=True)
class Limits:
    """Every bound of an endpoint: connections, deadlines, sizes, threads and queues, password attempts."""

    # The connections held, and who makes room for a newcomer (``admission``).
    max_connections: int = 512
    """Connections held at once; beyond, one makes room for the newcomer or the newcomer is closed."""
    max_per_source: int = 128
    """Connections one source (an IPv4 address, an IPv6 /64) may hold; beyond, one of its own makes room."""
    fair_share: int = 32
    """Connections a source may hold on a full server before its young idle ones may go for others."""
    evict_after: float = 1.0
    """Seconds a connection is safe from eviction by a newcomer to a full server: a remote client's request
    takes a round trip or a TLS handshake to arrive."""

    # Accepting, and reading a request.
    listen_backlog: int = 4096
    """Connections the kernel queues before they are accepted (Linux caps it at ``net.core.somaxconn``)."""
    accept_batch: int = 64
    """Connections taken from the kernel's queue at each turn of the event loop, after the held ones ran."""
    handshake_timeout: float = 2.0
    """Seconds a TLS handshake may take."""
    idle_timeout: float = 3.0
    """Seconds a connection may stay silent before its first byte; it holds no thread meanwhile."""
    head_timeout: float = 2.0
    """Seconds from the first byte of a request to the end of its headers."""
    max_head: int = 16 * _KIB
    """Bytes a request line and headers may take together, the blank line included (431 beyond)."""

    # The threads that do slow work, and the queues in front of them (503 beyond).
    render_threads: int = 2
    """Threads rendering the exposition (and ``/targets``); each keeps a heap of its own, so few are best."""
    max_queued: int = 32
    """Requests that may wait for a render thread."""
    read_interval: float = 1.0
    """Seconds one listing of ``/rollouts``, one collection for ``/metrics?name[]=`` and one read of the run
    for the page are shared for."""
    max_reads_queued: int = 64
    """Renders of ``/rollouts``, ``/metrics?name[]=`` and the page that may wait for their thread."""

    # The responses being written.
    max_output: int = 32 * _MIB
    """Bytes of response bodies being written at once, each body once however many clients it is written to;
    beyond, stalled writes are cut short, and failing that a newcomer waits for room."""
    stalled_after: float = 0.5
    """Seconds without a byte taken by its client after which a write counts as stalled (it may be cut)."""
    stalled_briefly: float = 0.1
    """Seconds without a byte taken after which a write of a source that is not a reader may be cut for a
    reader."""
    reader_body: int = 64 * _KIB
    """Bytes of a response body a client must take whole for its source to count as a reader: more than a
    health check or a refusal, so a reader has paid for what it asks room for."""
    max_readers: int = 4096
    """Reader sources remembered, the latest kept."""
    room_wait: float = 1.0
    """Seconds a body that does not fit ``max_output`` waits for writes to end or stall before its client is
    told to come back (503)."""
    non_reader_send_buffer: int = 128 * _KIB
    """Bytes of kernel send buffer asked for a connection of a source that is not a reader (Linux gives twice
    that): a client that never reads then stalls its write, instead of taking a whole exposition into the
    kernel. A reader's connections keep the kernel's tuning."""
    write_timeout: float = 10.0
    """Seconds to write a response; a client reading slower is disconnected."""
    linger: float = 1.0
    """Seconds to drain what a client still sends after its response, so the close does not reset it."""
    linger_bytes: int = 1 * _MIB
    """Bytes drained at most after a response."""

    # Password checks (``auth``).
    auth_threads: int = 2
    """Threads that check passwords with scrypt, apart from those that render: every guess shares them."""
    auth_wait: float = 4.0
    """Seconds an attempt may wait for its turn at a password check before it is answered 429."""
    failure_burst: int = 10
    """Attempts needing scrypt that one source may make at once."""
    failure_refill: float = 1.0
    """Attempts given back to each source per second."""
    max_sources: int = 4096
    """Sources whose attempts are remembered; the least recently seen is forgotten first."""
    max_verified: int = 16
    """Verified credentials remembered (as HMACs), the least recently used forgotten first."""
    max_refused: int = 4096
    """Refused credentials remembered (as HMACs), the least recently used forgotten first."""


DEFAULT_LIMITS = Limits()
"""The documented bounds, which ``RolloutTelemetry.serve()`` serves with."""
