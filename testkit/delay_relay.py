"""A user-space TCP relay that delays every chunk by a fixed time in each direction: the
known network delay for ground-truth latency tests (no kernel netem on this machine).

    python delay_relay.py LISTEN_PORT TARGET_PORT DELAY_MS [HOLDS_JSON]

Runs until killed. Loopback only. Order is kept: equal delays fire in scheduling order.

A chunk is held from the time the kernel received its last packet (``SO_TIMESTAMPNS``, read as
the proxy reads its broker sockets: ``proxy/stamps.py``), not from the time this relay's event
loop got round to reading it: a relay woken late (an idle process on a busy machine: 0.2-1.0 ms
each round trip beyond its timers, measured against Kafka's request log on 2026-12-04) would
add that to the network unmeasured. Where no kernel stamp can be had it holds from its read.
A timer still fires late (the event loop sleeps in whole milliseconds, and a busy machine adds
its own), so the relay adds a little more than DELAY_MS each way. With HOLDS_JSON it measures
what it really added, from the kernel's receive time to its write: on SIGTERM (and on SIGUSR1,
going on) it writes, per direction ("to_broker", "to_client"), the number of chunks held and
the p50/p90/max of their hold in ms, and how many chunks carried a kernel stamp; and each chunk
held (HOLDS_JSON.chunks). A ground truth built on the relay uses these, not the nominal delay."""

from __future__ import annotations

import asyncio
import bisect
import json
import os
import signal
import statistics
import sys
from collections.abc import Callable
from typing import Any

HOLDS_KEPT = 200_000  # per direction: bounded memory however long the relay runs
HOLDS: dict[str, list[float]] = {"to_broker": [], "to_client": []}  # seconds each chunk was held
# each chunk held, for a ground truth that takes off the network each exchange met: (direction,
# received and written on the monotonic clock in ns, its length, its connection), the first
# HOLDS_KEPT of each direction
CHUNKS: list[tuple[str, int, int, int, int]] = []


def _stamps() -> Any:
    """``proxy/stamps.py`` and its counts, or None where fetchlat cannot be imported (the relay
    then holds each chunk from its read)."""
    try:
        from fetchlat.proxy import stamps
    except ImportError:
        return None
    return stamps if stamps.kernel_stamps_possible() else None


STAMPS = _stamps()
COUNTS = STAMPS.StampCounts() if STAMPS is not None else None


class Leg(asyncio.Protocol):
    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s
        self.peer: Leg | None = None
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.direction = "to_broker"  # what this leg receives goes to the broker, until linked()
        self.reader: Any = None  # a StampedReader of its socket once connected (delayed legs, Linux)

    def linked(self) -> None:  # called by serve() on the broker-facing leg
        self.direction = "to_client"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.delay_s > 0 and STAMPS is not None:  # read with the kernel's receive stamps
            self.reader = STAMPS.StampedReader.open(asyncio.get_running_loop(), transport, COUNTS, self._stamped,
                                                    transport.close, lambda _exc: transport.abort())  # type: ignore[attr-defined]

    def _stamped(self, data: bytes, t_ns: int) -> None:
        """A read whose last packet the kernel took in at ``t_ns`` (monotonic, the loop's clock)."""
        received = t_ns / 1e9
        asyncio.get_running_loop().call_at(received + self.delay_s, self._forward_held, data, received)

    def data_received(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        if self.delay_s > 0:
            loop.call_later(self.delay_s, self._forward_held, data, loop.time())
        else:
            self._forward(data)

    def _forward_held(self, data: bytes, received: float) -> None:
        held = HOLDS[self.direction]
        if len(held) < HOLDS_KEPT:
            now = asyncio.get_running_loop().time()
            held.append(now - received)
            client = self if self.direction == "to_broker" else self.peer  # the connection, named by its client leg
            CHUNKS.append((self.direction, int(received * 1e9), int(now * 1e9), len(data), id(client)))
        self._forward(data)

    def _forward(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader is not None:
            self.reader.stop()
        if self.peer is not None and self.peer.transport is not None:
            asyncio.get_running_loop().call_later(self.delay_s, self.peer.transport.close)


async def serve(listen_port: int, target_port: int, make_leg: Callable[[], Any]) -> None:
    """Relay every connection to ``target_port`` with legs made by ``make_leg`` (attributes
    ``peer``, ``transport``, ``early``, and an optional ``linked()`` hook); prints "ready"."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    def factory() -> Any:
        client = make_leg()

        async def connect() -> None:
            try:
                _, upstream = await loop.create_connection(make_leg, "127.0.0.1", target_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            client.peer, upstream.peer = upstream, client
            if hasattr(upstream, "linked"):
                upstream.linked()
            for chunk in client.early:
                upstream.transport.write(chunk)
            client.early.clear()

        task = loop.create_task(connect())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        return client

    server = await loop.create_server(factory, "127.0.0.1", listen_port)
    print("ready", flush=True)
    await server.serve_forever()


def hold_summary() -> dict[str, Any]:
    """Per direction: chunks held, and the p50/p90/max of their hold in ms; and the reads the
    kernel stamped (the rest were held from their read)."""
    out: dict[str, Any] = {}
    for direction, held in HOLDS.items():
        ms = sorted(h * 1000 for h in held)
        out[direction] = {"chunks": len(ms), "p50_ms": statistics.median(ms) if ms else 0.0,
                          "p90_ms": ms[int(0.9 * (len(ms) - 1))] if ms else 0.0, "max_ms": ms[-1] if ms else 0.0}
    out["reads_stamped"] = {"kernel": COUNTS.kernel if COUNTS else 0, "clock": COUNTS.clock if COUNTS else 0}
    return out


def exchange_holds(chunks: list[list[Any]], exchanges: list[tuple[Any, int, int, int, int]],
                   window_ns: int = 3_000_000) -> dict[Any, tuple[float, float, float]]:
    """What the relay held each exchange's request and the start of its answer, and the time
    between its writing the request and reading the answer back (the broker's), in ms, from its
    chunks (``write_holds``): ``exchanges`` are (key, the request's time on the monotonic clock,
    roughly, its frame's bytes, the answer's frame's bytes, the answer's first byte's time). The
    request is the chunk of its frame's size (length prefix included) read nearest its time
    (within ``window_ns``); the answer the first chunk back on the same connection read after the
    request was written, of its frame's size if one is, else the first. Exchanges not found are
    left out."""
    to_broker = sorted((c for c in chunks if c[0] == "to_broker"), key=lambda c: c[1])
    back: dict[int, list[list[Any]]] = {}
    for c in chunks:
        if c[0] == "to_client":
            back.setdefault(c[4], []).append(c)
    for cs in back.values():
        cs.sort(key=lambda c: c[1])
    starts = [c[1] for c in to_broker]
    out: dict[Any, tuple[float, float, float]] = {}
    for key, t_ns, req_bytes, resp_bytes, first_ns in exchanges:
        lo, hi = bisect.bisect_left(starts, t_ns - window_ns), bisect.bisect_right(starts, t_ns + window_ns)
        sized = [c for c in to_broker[lo:hi] if c[3] == req_bytes + 4]
        if not sized:
            continue
        req = min(sized, key=lambda c: abs(c[1] - t_ns))
        after = [c for c in back.get(req[4], []) if req[2] <= c[1] <= first_ns + window_ns]
        if not after:
            continue
        resp = next((c for c in after if c[3] == resp_bytes + 4), after[0])
        out[key] = ((req[2] - req[1]) / 1e6, (resp[2] - resp[1]) / 1e6, (resp[1] - req[2]) / 1e6)
    return out


def write_holds(holds_path: str) -> None:
    """The summary at ``holds_path``, and every chunk held at ``holds_path`` + ".chunks" (written
    first: a reader that sees the summary change finds the chunks of the same moment or later)."""
    for path, value in ((holds_path + ".chunks", CHUNKS), (holds_path, hold_summary())):
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(value, fh)
        os.replace(tmp, path)  # a reader never sees half a file


async def main(listen_port: int, target_port: int, delay_ms: float, holds_path: str | None) -> None:
    keeper = STAMPS.keep_stamping_on() if STAMPS is not None else None  # the kernel stamps from the first packet on
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGTERM, lambda: stop.done() or stop.set_result(None))
    if holds_path:  # the holds so far, on demand, the relay going on
        loop.add_signal_handler(signal.SIGUSR1, write_holds, holds_path)
    relay = loop.create_task(serve(listen_port, target_port, lambda: Leg(delay_ms / 1000)))
    await asyncio.wait([relay, stop], return_when=asyncio.FIRST_COMPLETED)
    relay.cancel()
    if holds_path:
        write_holds(holds_path)
    if keeper is not None:
        keeper.close()


if __name__ == "__main__":
    holds_json = sys.argv[4] if len(sys.argv) > 4 else None
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), holds_json))
