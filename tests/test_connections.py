"""Which connection goes when a newcomer needs room: the answered first, then the idle, a few addresses
never holding every slot, a client whose request is on its way never evicted by a flood from many."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from rollout_telemetry._serve.connections import (
    EVICT_AFTER,
    FAIR_SHARE,
    MAX_CONNECTIONS,
    MAX_PER_SOURCE,
    Connection,
    Connections,
    evictable,
    serving,
)

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
    held = [_connection(sockets, sources[i % len(sources)]) for i in range(MAX_CONNECTIONS)]
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
    assert _still_held(connections, held) == set(range(1, MAX_CONNECTIONS))


def test_five_addresses_cannot_hold_every_slot_with_young_idle_connections(
    sockets: list[socket.socket],
) -> None:
    """Every slot taken by five addresses' idle connections, none past EVICT_AFTER: a newcomer from a sixth
    address is admitted, for the oldest idle connection of the address holding the most."""
    connections = Connections()
    held = _fill(connections, sockets, FIVE)
    newcomer = _connection(sockets, "127.0.0.1", opened=EVICT_AFTER / 2)
    assert connections.admit(newcomer)
    assert _still_held(connections, held) == set(range(1, MAX_CONNECTIONS))


def test_many_light_addresses_do_not_evict_a_young_connection(sockets: list[socket.socket]) -> None:
    """Every slot taken by young idle connections of addresses holding at most FAIR_SHARE each: a newcomer
    is refused until the oldest is past EVICT_AFTER (a request a round trip away is not cut by a flood)."""
    connections = Connections()
    sources = [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(MAX_CONNECTIONS // FAIR_SHARE)]
    held = _fill(connections, sockets, sources)
    assert not connections.admit(_connection(sockets, "127.0.9.9", opened=EVICT_AFTER / 2))
    assert connections.admit(_connection(sockets, "127.0.9.9", opened=EVICT_AFTER))
    assert _still_held(connections, held) == set(range(1, MAX_CONNECTIONS))


def test_a_busy_connection_is_never_evicted(sockets: list[socket.socket]) -> None:
    """Connections with their request in hand (being answered) stay, whatever their age and source: a
    newcomer to a table full of them is refused; one at its source's cap too."""
    connections = Connections()
    held = _fill(connections, sockets, FIVE)
    for connection in held:
        connections.stop_waiting(connection)
    assert not connections.admit(_connection(sockets, "127.0.0.1", opened=60.0))
    mine = [_connection(sockets, "127.0.0.1") for _ in range(MAX_PER_SOURCE)]
    fresh = Connections()
    for connection in mine:
        assert fresh.admit(connection)
        fresh.stop_waiting(connection)
    assert not fresh.admit(_connection(sockets, "127.0.0.1", opened=60.0))


def test_a_connection_waiting_for_a_password_checks_turn_may_be_evicted(sockets: list[socket.socket]) -> None:
    """A connection whose task waits inside ``evictable()`` (a password check's turn) is idle: on a full
    table it goes for a newcomer past EVICT_AFTER; once out of the wait it is busy again."""
    connections = Connections()
    held = _fill(
        connections, sockets, [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(MAX_CONNECTIONS)]
    )
    for connection in held:
        connections.stop_waiting(connection)
    waiting = held[-1]

    async def wait_for_a_turn(newcomer_admitted: list[bool]) -> None:
        serving(connections, waiting)
        with evictable():
            newcomer_admitted.append(connections.admit(_connection(sockets, "127.0.9.9", opened=EVICT_AFTER)))
        newcomer_admitted.append(connections.admit(_connection(sockets, "127.0.9.8", opened=EVICT_AFTER)))

    admitted: list[bool] = []
    asyncio.run(wait_for_a_turn(admitted))
    assert admitted == [True, False]
    assert _still_held(connections, held) == set(range(MAX_CONNECTIONS - 1))
