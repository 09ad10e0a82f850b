"""A round-trip-time lab: one user-space forwarder in front of every lab sshd on 127.0.0.1.

    python -m bench.delay --control SOCK LISTEN_PORT=TARGET_PORT ...

The kernel here has no netem, so the delay is made in user space: for each listening port, every
accepted connection is forwarded to its sshd (127.0.0.1:TARGET_PORT), each chunk of bytes held
for a fixed one-way delay in its direction before it is written on, in the order it came (one
queue per direction; a later chunk never overtakes an earlier one). The upstream connect itself
waits one delay too (the SYN's way there), so a connection costs what TCP's handshake costs.
OpenSSH, paramiko (pyinfra) and Ansible all connect through it, so they pay the same RTT.
Optional bandwidth: each direction's chunks leave no faster than `--mbit` allows (a queue,
not a window model: TCP's slow start is not modelled).

What it counts, per listening port (one host): connections, bytes each way, one-way `flights`
(maximal runs of chunks in one direction, as they arrive at the forwarder) and `round_trips`:
the answers the client waited for, i.e. server-to-client flights (the server's banner, after
the TCP handshake, is the first). A flight boundary is where the direction of arriving data
changes; both sides' chunks in flight at once count by their order of arrival here.

Control (a unix socket, one line in, one JSON line out): `stats` (the counters), `reset`
(counters to zero), `delay MS` (the one-way delay from now on, for new chunks), `trace on` (from
now on every chunk is logged: arrival time, port#connection, `->` or `<-` where a flight
begins, its size) and `trace` (the log so far: what a tool waited on, flight by flight), `quit`.
Never anything but 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

LOOPBACK = "127.0.0.1"
CHUNK = 1 << 16


@dataclass
class Counts:
    """One listener's (one host's) counters."""

    connections: int = 0
    bytes_up: int = 0  # client -> server
    bytes_down: int = 0
    flights: int = 0
    round_trips: int = 0


class Flights:
    """One connection's flight boundaries: a flight begins where the direction of arriving
    data changes; a server-to-client flight is a round trip the client waited for."""

    def __init__(self, counts: Counts, trace: list[str] | None = None, tag: str = "") -> None:
        self.counts = counts
        self.last: bool | None = None  # True: the last chunk went client -> server
        self.trace, self.tag = trace, tag

    def chunk(self, up: bool, size: int) -> None:
        if up:
            self.counts.bytes_up += size
        else:
            self.counts.bytes_down += size
        if up != self.last:
            self.counts.flights += 1
            if not up:
                self.counts.round_trips += 1
        if self.trace is not None:  # `trace on`: a flight's first chunk has its arrow
            mark = ("-> " if up else "<- ") if up != self.last else "   +"
            self.trace.append(f"{time.monotonic():.4f} {self.tag} {mark}{size}")
        self.last = up


class Forwarder:
    def __init__(self, routes: dict[int, int], delay_ms: float, mbit: float = 0.0) -> None:
        self.routes = routes
        self.delay = delay_ms / 1000.0
        self.bytes_per_s = mbit * 1e6 / 8 if mbit > 0 else 0.0
        self.counts = {port: Counts() for port in routes}
        self.servers: list[asyncio.Server] = []
        self.trace: list[str] | None = None  # `trace on`: every chunk, flight boundaries marked
        # Every connection's task, held: asyncio keeps only a weak reference to tasks, and one
        # whose both ends went quiet would otherwise be collected mid-wait (and logged).
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        for listen, target in self.routes.items():

            async def accept(
                r: asyncio.StreamReader,
                w: asyncio.StreamWriter,
                listen: int = listen,
                target: int = target,
            ) -> None:
                task = asyncio.current_task()
                if task is not None:
                    self.tasks.add(task)
                try:
                    await self.connection(r, w, listen, target)
                finally:
                    if task is not None:
                        self.tasks.discard(task)

            self.servers.append(await asyncio.start_server(accept, LOOPBACK, listen))

    async def connection(
        self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter, listen: int, target: int
    ) -> None:
        counts = self.counts[listen]
        counts.connections += 1
        flights = Flights(counts, self.trace, f"{listen}#{counts.connections}")
        await asyncio.sleep(self.delay)  # the SYN's way to the server
        try:
            sr, sw = await asyncio.open_connection(LOOPBACK, target)
        except OSError:
            cw.close()
            return
        await asyncio.gather(
            self.pipe(cr, sw, flights, up=True),
            self.pipe(sr, cw, flights, up=False),
            return_exceptions=True,
        )
        for w in (cw, sw):
            w.close()

    async def pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flights: Flights, up: bool
    ) -> None:
        """One direction: read, stamp with its due time, write in order when due."""
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(send())
        free_at = 0.0  # the bandwidth queue: when the link is free again
        try:
            while True:
                try:
                    data = await reader.read(CHUNK)
                except OSError:  # reset by the peer: an end like any other
                    data = b""
                now = time.monotonic()
                if data:
                    flights.chunk(up, len(data))
                if self.bytes_per_s and data:
                    free_at = max(free_at, now) + len(data) / self.bytes_per_s
                    due = free_at + self.delay
                else:
                    due = now + self.delay
                queue.put_nowait((due, data))
                if not data:
                    break
        finally:
            await sender

    def control(self, line: str) -> dict[str, object]:
        word, _, arg = line.strip().partition(" ")
        if word == "delay":
            self.delay = float(arg) / 1000.0
        elif word == "reset":  # in place: a live connection (a master) keeps counting here
            for c in self.counts.values():
                c.connections = c.bytes_up = c.bytes_down = c.flights = c.round_trips = 0
        elif word == "trace":  # `trace on` starts a fresh trace; `trace` returns it
            if arg == "on":
                self.trace = []
            return {"trace": self.trace or []}
        elif word != "stats":
            return {"error": f"unknown command {word!r}"}
        return {
            "delay_ms": self.delay * 1000.0,
            "ports": {str(p): asdict(c) for p, c in self.counts.items()},
        }


async def serve(forwarder: Forwarder, control: str) -> None:
    await forwarder.start()
    done = asyncio.Event()

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        line = (await r.readline()).decode()
        if line.strip() == "quit":
            done.set()
            answer: dict[str, object] = {"ok": True}
        else:
            answer = forwarder.control(line)
        w.write(json.dumps(answer).encode() + b"\n")
        await w.drain()
        w.close()

    server = await asyncio.start_unix_server(handle, control)
    print("ready", flush=True)
    await done.wait()
    server.close()
    for s in forwarder.servers:
        s.close()
    # Connections still open at `quit` (a shared connection's master, the last flights of a
    # session that just ended) are cancelled and awaited here, not logged as errors at exit.
    live = list(forwarder.tasks)
    for task in live:
        task.cancel()
    await asyncio.gather(*live, return_exceptions=True)


def _route(text: str) -> tuple[int, int]:
    listen, _, target = text.partition("=")
    return int(listen), int(target)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.delay", description=__doc__.split("\n")[0])
    p.add_argument("routes", nargs="+", type=_route, metavar="LISTEN=TARGET")
    p.add_argument("--control", required=True, help="unix socket for stats/reset/delay/quit")
    p.add_argument("--delay-ms", type=float, default=0.0, help="one-way delay (ms)")
    p.add_argument("--mbit", type=float, default=0.0, help="bandwidth per direction (0: none)")
    args = p.parse_args(argv)
    forwarder = Forwarder(dict(args.routes), args.delay_ms, args.mbit)
    asyncio.run(serve(forwarder, args.control))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
