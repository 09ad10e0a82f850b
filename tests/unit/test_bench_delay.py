"""bench/delay.py, the RTT lab's forwarder: bytes arrive whole and in order, and a ping-pong
of k requests counts k round trips (plus the flights), on a local echo server; no timing
asserted."""

from __future__ import annotations

import asyncio
import socket

from bench.delay import Counts, Flights, Forwarder


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_flights_count_direction_changes_and_answers() -> None:
    counts = Counts()
    f = Flights(counts)
    for up, size in [(True, 3), (True, 4), (False, 5), (True, 1), (False, 2), (False, 2)]:
        f.chunk(up, size)
    assert (counts.flights, counts.round_trips) == (4, 2)
    assert (counts.bytes_up, counts.bytes_down) == (8, 9)


async def _ping_pong(k: int, blob: bytes) -> tuple[list[bytes], bytes, Counts, Counts, Counts]:
    async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"banner\n")  # as sshd: the server speaks first
        while line := await r.readline():
            w.write(line)
            await w.drain()
        w.close()

    upstream = await asyncio.start_server(echo, "127.0.0.1", 0)
    target = upstream.sockets[0].getsockname()[1]
    listen = _port()
    fwd = Forwarder({listen: target}, delay_ms=1.0)
    await fwd.start()
    r, w = await asyncio.open_connection("127.0.0.1", listen)
    got = [await r.readline()]
    for i in range(k):
        w.write(b"req %d\n" % i)
        await w.drain()
        got.append(await r.readline())
    pinged = Counts(**vars(fwd.counts[listen]))
    fwd.control("reset")  # a live connection (a shared master) counts on after a reset
    w.write(b"again\n")
    await w.drain()
    got.append(await r.readline())
    again = Counts(**vars(fwd.counts[listen]))
    w.write(blob)  # many chunks, one flight: the order of every byte kept
    await w.drain()
    echoed = await r.readexactly(len(blob))
    w.close()
    for s in [*fwd.servers, upstream]:
        s.close()
    return got, echoed, pinged, again, fwd.counts[listen]


def test_a_ping_pong_counts_its_round_trips_and_keeps_order() -> None:
    blob = b"".join(b"%07d\n" % i for i in range(40_000))  # 320 KB
    got, echoed, pinged, again, counts = asyncio.run(_ping_pong(5, blob))
    assert got == [b"banner\n"] + [b"req %d\n" % i for i in range(5)] + [b"again\n"]
    assert echoed == blob
    assert (again.connections, again.flights, again.round_trips) == (0, 2, 1)
    # the banner, then 5 requests each answered: 11 one-way flights, 6 answers waited for
    assert (pinged.flights, pinged.round_trips) == (11, 6)
    assert counts.bytes_up == len(b"again\n") + len(blob)


def test_trace_marks_where_each_flight_begins() -> None:
    trace: list[str] = []
    f = Flights(Counts(), trace, "2222#1")
    for up, size in [(True, 3), (True, 4), (False, 5)]:
        f.chunk(up, size)
    assert [line.split(" ", 1)[1] for line in trace] == [
        "2222#1 -> 3",
        "2222#1    +4",
        "2222#1 <- 5",
    ]
