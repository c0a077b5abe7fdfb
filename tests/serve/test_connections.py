"""Which connection goes when a newcomer needs room: the answered first, then stalled writes, then the idle,
a few addresses never holding every slot, a client whose request is on its way never evicted by a flood from
many; and which write is cut when response bodies fill ``max_output``: a stalled one, never one in
progress."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from rollout_telemetry._serve.connections import Connection, Connections
from rollout_telemetry._serve.limits import Limits

LIMITS = Limits()
"""The bounds of a table made without any: the defaults."""
FIVE = [f"127.0.0.{2 + i}" for i in range(5)]


@pytest.fixture
def sockets() -> Iterator[list[socket.socket]]:
    """Sockets for the connections (never connected: what is tested is the bookkeeping), closed after."""
    made: list[socket.socket] = []
    yield made
    for sock in made:
        sock.close()


def _connection(sockets: list[socket.socket], source: str, opened: float = 0.0) -> Connection:
    sockets.append(socket.socket())
    return Connection(sockets[-1], source, source, opened)


def _fill(connections: Connections, sockets: list[socket.socket], sources: list[str]) -> list[Connection]:
    held = [_connection(sockets, sources[i % len(sources)]) for i in range(LIMITS.max_connections)]
    assert all(connections.admit(connection) for connection in held)
    return held


def _still_held(connections: Connections, held: list[Connection]) -> set[int]:
    """Indices of the ``held`` connections that were not evicted."""
    return {i for i, connection in enumerate(held) if connection in connections}


def test_answered_connections_go_first_whatever_their_age(sockets: list[socket.socket]) -> None:
    """Every slot taken by five addresses' answered connections, all just answered: a newcomer from another
    address takes the oldest answered one's slot (it was only draining)."""
    connections = Connections()
    held = _fill(connections, sockets, FIVE)
    for connection in held:
        connections.stop_waiting(connection)
        connections.answered(connection)
    newcomer = _connection(sockets, "127.0.0.1")
    assert connections.admit(newcomer)
    assert _still_held(connections, held) == set(range(1, LIMITS.max_connections))


def test_five_addresses_cannot_hold_every_slot_with_young_idle_connections(
    sockets: list[socket.socket],
) -> None:
    """Every slot taken by five addresses' idle connections, none past evict_after: a newcomer from a sixth
    address is admitted, for the oldest idle connection of the address holding the most."""
    connections = Connections()
    held = _fill(connections, sockets, FIVE)
    newcomer = _connection(sockets, "127.0.0.1", opened=LIMITS.evict_after / 2)
    assert connections.admit(newcomer)
    assert _still_held(connections, held) == set(range(1, LIMITS.max_connections))


def test_many_light_addresses_do_not_evict_a_young_connection(sockets: list[socket.socket]) -> None:
    """Every slot taken by young idle connections of addresses holding at most fair_share each: a newcomer
    is refused until the oldest is past evict_after (a request a round trip away is not cut by a flood)."""
    connections = Connections()
    sources = [
        f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(LIMITS.max_connections // LIMITS.fair_share)
    ]
    held = _fill(connections, sockets, sources)
    assert not connections.admit(_connection(sockets, "127.0.9.9", opened=LIMITS.evict_after / 2))
    assert connections.admit(_connection(sockets, "127.0.9.9", opened=LIMITS.evict_after))
    assert _still_held(connections, held) == set(range(1, LIMITS.max_connections))


def test_a_busy_connection_is_never_evicted(sockets: list[socket.socket]) -> None:
    """Connections with their request in hand (being answered) stay, whatever their age and source: a
    newcomer to a table full of them is refused; one at its source's cap too."""
    connections = Connections()
    held = _fill(connections, sockets, FIVE)
    for connection in held:
        connections.stop_waiting(connection)
    assert not connections.admit(_connection(sockets, "127.0.0.1", opened=60.0))
    mine = [_connection(sockets, "127.0.0.1") for _ in range(LIMITS.max_per_source)]
    fresh = Connections()
    for connection in mine:
        assert fresh.admit(connection)
        fresh.stop_waiting(connection)
    assert not fresh.admit(_connection(sockets, "127.0.0.1", opened=60.0))


def test_a_source_at_its_cap_gives_up_its_answered_then_its_stalled_write_then_its_idle(
    sockets: list[socket.socket],
) -> None:
    """A newcomer of a source holding max_per_source closes that source's answered connection first, then its
    write stalled for evict_after, then its oldest idle one, whatever their ages; another source's
    connections, older and idle, stay."""
    connections = Connections()
    other = _connection(sockets, "127.0.0.9")
    assert connections.admit(other)
    mine = [_connection(sockets, "127.0.0.1", opened=1.0) for _ in range(LIMITS.max_per_source)]
    assert all(connections.admit(connection) for connection in mine)
    idle, writer, answered = mine[0], mine[1], mine[2]
    for connection in mine[1:]:
        connections.stop_waiting(connection)
    assert connections.output.start(writer, b"body", now=1.0)
    connections.answered(answered)
    now = 1.0 + LIMITS.evict_after
    gone = []
    for _ in range(3):
        newcomer = _connection(sockets, "127.0.0.1", opened=now)
        assert connections.admit(newcomer)
        connections.stop_waiting(newcomer)
        gone.append(next(c for c in (answered, writer, idle) if c not in connections and c not in gone))
    assert gone == [answered, writer, idle]
    assert writer.cut
    assert other in connections
    assert not connections.admit(_connection(sockets, "127.0.0.1", opened=now))  # the rest are busy


def test_a_connection_waiting_for_a_password_checks_turn_may_be_evicted(sockets: list[socket.socket]) -> None:
    """A connection inside its ``evictable()`` (waiting for a password check's turn) is idle: on a full table
    it goes for a newcomer past evict_after; once out of the wait it is busy again."""
    connections = Connections()
    held = _fill(
        connections, sockets, [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(LIMITS.max_connections)]
    )
    for connection in held:
        connections.stop_waiting(connection)
    waiting = held[-1]
    admitted = []
    with connections.evictable(waiting):
        admitted.append(connections.admit(_connection(sockets, "127.0.9.9", opened=LIMITS.evict_after)))
    admitted.append(connections.admit(_connection(sockets, "127.0.9.8", opened=LIMITS.evict_after)))
    assert admitted == [True, False]
    assert _still_held(connections, held) == set(range(LIMITS.max_connections - 1))


def _writer(connections: Connections, sockets: list[socket.socket], source: str = "127.0.0.1") -> Connection:
    connection = _connection(sockets, source)
    assert connections.admit(connection)
    connections.stop_waiting(connection)
    return connection


def test_a_body_written_to_many_clients_counts_once(sockets: list[socket.socket]) -> None:
    """Two hundred clients given one rendering of a third of the cap hold it once: a second body of the
    same size still fits beside it; a third of just over the rest does not, and every write goes on."""
    connections = Connections()
    shared, other = bytes(LIMITS.max_output // 3), bytes(LIMITS.max_output // 3)
    writers = [_writer(connections, sockets, f"127.0.1.{1 + i}") for i in range(200)]
    assert all(connections.output.start(writer, shared, now=0.0) for writer in writers)
    second = _writer(connections, sockets)
    assert connections.output.start(second, other, now=0.0)
    third = _writer(connections, sockets)
    assert not connections.output.start(
        third, bytes(LIMITS.max_output - 2 * (LIMITS.max_output // 3) + 1), now=0.0
    )
    assert all(writer in connections for writer in [*writers, second])
    for writer in writers:  # the shared body is released by its last writer only
        connections.output.end(writer)
    assert connections.output.start(third, bytes(LIMITS.max_output // 3), now=0.0)


def test_a_new_body_cuts_a_stalled_write_never_one_in_progress(sockets: list[socket.socket]) -> None:
    """Bodies filling the cap: a new one cuts the write whose client has taken nothing for stalled_after
    (the stalled longest first), never a write whose client took a byte since; with none stalled, the
    newcomer is refused and every write in progress goes on."""
    connections = Connections()
    half = LIMITS.max_output // 2
    stalled, reading = _writer(connections, sockets), _writer(connections, sockets)
    assert connections.output.start(stalled, bytes(half), now=0.0)
    assert connections.output.start(reading, bytes(half), now=0.0)
    reading.progressed = 5.0  # its client took a byte at 5 s; the other's none since 0 s
    newcomer = _writer(connections, sockets)
    assert connections.output.start(newcomer, bytes(half), now=5.0)
    assert stalled not in connections
    assert stalled.cut
    assert reading in connections
    late = _writer(connections, sockets)
    assert not connections.output.start(late, bytes(half), now=5.0 + LIMITS.stalled_after / 2)
    assert reading in connections
    assert newcomer in connections


def _made_a_reader(connections: Connections, sockets: list[socket.socket], source: str) -> None:
    """A client of ``source`` takes a body of reader_body whole, and its connection ends."""
    before = _writer(connections, sockets, source)
    assert connections.output.start(before, bytes(LIMITS.reader_body), now=0.0)
    connections.output.end(before, taken=True)
    connections.release(before)


def test_a_readers_body_cuts_briefly_stalled_writes_of_others(sockets: list[socket.socket]) -> None:
    """Clients that never read, arriving faster than stalled_after, fill the cap with writes stalled for less:
    a newcomer whose source took a large body whole before (a scraper) cuts those stalled for stalled_briefly,
    stalled longest first, never another reader's; a source that never took one is refused, as before."""
    connections = Connections()
    _made_a_reader(connections, sockets, "127.0.0.1")
    _made_a_reader(connections, sockets, "10.0.0.9")
    quarter = LIMITS.max_output // 4
    floods = [_writer(connections, sockets, f"127.1.0.{1 + i}") for i in range(3)]
    reader = _writer(connections, sockets, "10.0.0.9")  # another reader, stalled as long as the floods
    for i, writer in enumerate([*floods, reader]):
        assert connections.output.start(writer, bytes(quarter), now=i * 0.01)
    now = 0.03 + LIMITS.stalled_briefly
    stranger = _writer(connections, sockets, "127.2.0.1")
    assert not connections.output.start(stranger, bytes(quarter), now=now)
    scraper = _writer(connections, sockets, "127.0.0.1")
    assert connections.output.start(scraper, bytes(quarter), now=now)
    assert _still_held(connections, floods) == {1, 2}  # the one stalled longest went
    assert floods[0].cut
    assert reader in connections
    second = _writer(connections, sockets, "127.0.0.1")
    assert connections.output.start(second, bytes(2 * quarter), now=now)  # two more go, not the reader
    assert _still_held(connections, floods) == set()
    assert reader in connections
    third = _writer(connections, sockets, "127.0.0.1")
    assert not connections.output.start(third, bytes(quarter), now=now)  # only readers left, none stalled


def test_a_large_body_taken_whole_makes_a_reader_and_a_cut_write_unmakes_it(
    sockets: list[socket.socket],
) -> None:
    """A reader is made by a body of reader_body or more taken whole, not by a small one (a health check) nor
    one abandoned; its write cut as stalled makes it a reader no more; the latest max_readers are kept."""
    connections = Connections()
    half = LIMITS.max_output // 2

    def is_reader(source: str, now: float) -> bool:
        """Whether a body from ``source`` cuts a write stalled for stalled_briefly (then ends both)."""
        flood = _writer(connections, sockets, "127.9.9.9")
        assert connections.output.start(flood, bytes(half + 1), now=now)
        newcomer = _writer(connections, sockets, source)
        fits = connections.output.start(newcomer, bytes(half), now=now + LIMITS.stalled_briefly)
        for connection in (flood, newcomer):
            connections.release(connection)
        return fits

    small = _writer(connections, sockets, "10.0.0.1")
    assert connections.output.start(small, bytes(LIMITS.reader_body - 1), now=0.0)
    connections.output.end(small, taken=True)
    abandoned = _writer(connections, sockets, "10.0.0.2")
    assert connections.output.start(abandoned, bytes(LIMITS.reader_body), now=0.0)
    connections.output.end(abandoned)
    _made_a_reader(connections, sockets, "10.0.0.3")
    assert [is_reader(f"10.0.0.{i}", 0.0) for i in (1, 2, 3)] == [False, False, True]

    reader = _writer(connections, sockets, "10.0.0.3")
    assert connections.output.start(reader, bytes(half + 1), now=1.0)
    newcomer = _writer(connections, sockets, "10.0.0.4")
    # It cuts the reader's.
    assert connections.output.start(newcomer, bytes(half), now=1.0 + LIMITS.stalled_after)
    assert reader.cut
    connections.release(newcomer)
    assert not is_reader("10.0.0.3", 2.0)

    for i in range(LIMITS.max_readers + 1):
        _made_a_reader(connections, sockets, f"10.1.{i // 250}.{i % 250}")
    assert not is_reader("10.1.0.0", 3.0)  # the first, forgotten
    assert is_reader("10.1.0.1", 3.0)


def test_a_source_that_is_not_a_reader_is_given_a_small_send_buffer(sockets: list[socket.socket]) -> None:
    """A connection of a source that is not a reader asks the kernel for non_reader_send_buffer of send
    buffer (Linux gives twice that); one of a reader keeps the size the kernel starts a socket with."""
    kernels = socket.socket()
    sockets.append(kernels)
    connections = Connections()
    _made_a_reader(connections, sockets, "10.0.0.1")
    reader, stranger = _writer(connections, sockets, "10.0.0.1"), _writer(connections, sockets, "10.0.0.2")

    def send_buffer(sock: socket.socket) -> int:
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)

    assert send_buffer(stranger.sock) in (LIMITS.non_reader_send_buffer, 2 * LIMITS.non_reader_send_buffer)
    assert send_buffer(reader.sock) == send_buffer(kernels) != send_buffer(stranger.sock)


def test_one_body_larger_than_the_cap_is_written_alone(sockets: list[socket.socket]) -> None:
    """A body over the cap is written when nothing else is, and refuses others meanwhile."""
    connections = Connections()
    big, small = _writer(connections, sockets), _writer(connections, sockets)
    assert connections.output.start(big, bytes(LIMITS.max_output + 1), now=0.0)
    assert not connections.output.start(small, b"x", now=0.0)
    connections.output.end(big)
    assert connections.output.start(small, b"x", now=0.0)


def test_a_stalled_write_goes_before_an_idle_connection(sockets: list[socket.socket]) -> None:
    """On a full table, a write stalled for evict_after goes for a newcomer before any idle connection."""
    connections = Connections()
    held = _fill(
        connections, sockets, [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(LIMITS.max_connections)]
    )
    writer = held[5]
    connections.stop_waiting(writer)
    assert connections.output.start(writer, b"body", now=0.0)
    assert connections.admit(_connection(sockets, "127.0.9.9", opened=LIMITS.evict_after))
    assert _still_held(connections, held) == set(range(LIMITS.max_connections)) - {5}
    assert writer.cut


def test_one_body_waits_for_room_at_a_time_and_is_shared_meanwhile() -> None:
    """A body waiting for room counts as being written (a scrape asking for the same exposition shares it);
    a second body may wait with it only if it is the same object; once none waits, another may."""
    connections = Connections()
    waiting, other = bytes(8), bytes(8)
    with connections.output.waiting_for_room(waiting) as first:
        assert first
        assert connections.output.writing(waiting)
        with (
            connections.output.waiting_for_room(waiting) as same,
            connections.output.waiting_for_room(other) as second,
        ):
            assert (same, second) == (True, False)
        assert connections.output.writing(waiting)
        assert not connections.output.writing(other)
    assert not connections.output.writing(waiting)
    with connections.output.waiting_for_room(other) as then:
        assert then


def test_a_reader_is_admitted_in_place_of_a_briefly_stalled_write_of_a_stranger(
    sockets: list[socket.socket],
) -> None:
    """Every slot taken by clients of many addresses that never read, their writes stalled for less than
    evict_after: a newcomer from an address that is a reader takes the slot of the write stalled longest once
    it has stalled for stalled_briefly; a newcomer from any other address is refused."""
    connections = Connections()
    _made_a_reader(connections, sockets, "127.0.0.1")
    floods = [_connection(sockets, f"127.1.{i // 250}.{1 + i % 250}") for i in range(LIMITS.max_connections)]
    for i, flood in enumerate(floods):
        assert connections.admit(flood)
        connections.stop_waiting(flood)
        assert connections.output.start(flood, bytes(8), now=i * 0.0001)
    now = LIMITS.stalled_briefly + LIMITS.max_connections * 0.0001
    assert not connections.admit(_connection(sockets, "127.2.0.1", opened=now))
    assert not connections.admit(_connection(sockets, "127.0.0.1", opened=LIMITS.stalled_briefly / 2))
    scraper = _connection(sockets, "127.0.0.1", opened=now)
    assert connections.admit(scraper)
    # The one stalled longest.
    assert _still_held(connections, floods) == set(range(1, LIMITS.max_connections))
    assert floods[0].cut
