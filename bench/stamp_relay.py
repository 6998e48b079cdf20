"""A relay between the proxy and the broker that stamps each Kafka exchange as it passes: when
a request's last byte arrived from the proxy, and when the response's last byte went back to
it. The span between the two is what the proxy's own ``total`` should be, seen from outside
the proxy's event loop; ``bench/accuracy_under_load.py`` compares the two.

A request's arrival is the kernel's receive stamp of its packet (``fetchlat.proxy.stamps``,
Linux), so the relay's own event-loop lag does not shorten the span when the machine is busy;
a response's departure is the clock read right after the relay wrote it (the write is that
moment). Where no kernel stamp can be had the relay reads the clock on arrival too.

    python bench/stamp_relay.py LISTEN_PORT TARGET_PORT LOG_FILE [API_KEY ...]

Logs one JSON line per exchange of the given API keys (default: Fetch), with the request's
client id and correlation id, and the relay's own event-loop lag (its stamps are late by at
most that). Loopback only; runs until killed (SIGTERM flushes the log).
"""

from __future__ import annotations

import asyncio
import json
import signal
import struct
import sys
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.proxy.stamps import StampCounts, StampedReader

from testkit.delay_relay import Leg as RelayLeg
from testkit.delay_relay import serve

now_ns = time.monotonic_ns


class Framer:
    """Whole frames out of a byte stream: (frame body bytes (first 64 at most), complete?)."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.left = 0
        self.head = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        done: list[bytes] = []
        pos, n = 0, len(data)
        while pos < n:
            if self.left == 0:
                take = min(4 - len(self.buf), n - pos)
                self.buf += data[pos : pos + take]
                pos += take
                if len(self.buf) == 4:
                    self.left = struct.unpack(">i", self.buf)[0]
                    self.buf = bytearray()
                    self.head = bytearray()
                    if self.left == 0:
                        done.append(b"")
                continue
            take = min(self.left, n - pos)
            if len(self.head) < 64:
                self.head += data[pos : pos + min(take, 64 - len(self.head))]
            pos += take
            self.left -= take
            if self.left == 0:
                done.append(bytes(self.head))
        return done


class Link:
    def __init__(self, log: IO[str], keys: set[int]) -> None:
        self.log, self.keys = log, keys
        self.pending: deque[tuple[int, int, str | None, int]] = deque()  # api key, corr, client id, t
        self.requests, self.responses = Framer(), Framer()

    def request_bytes(self, data: bytes, t: int) -> None:
        for head in self.requests.feed(data):
            if len(head) < 8:
                continue
            key, corr = struct.unpack_from(">hxxi", head)
            n = struct.unpack_from(">h", head, 8)[0] if len(head) >= 10 else -1
            client = head[10 : 10 + n].decode("utf-8", "replace") if n >= 0 else None
            self.pending.append((key, corr, client, t))

    def response_bytes(self, data: bytes, t_out: int) -> None:
        for head in self.responses.feed(data):
            if not self.pending:
                return
            key, corr, client, t_in = self.pending.popleft()
            if key in self.keys and len(head) >= 4 and struct.unpack_from(">i", head)[0] == corr:
                self.log.write(json.dumps({"api_key": key, "correlation_id": corr, "client_id": client,
                                           "t_request_in_ns": t_in, "t_response_out_ns": t_out,
                                           "span_ns": t_out - t_in}) + "\n")


class Leg(RelayLeg):
    """``testkit/delay_relay.py``'s leg with no delay, stamping what passes. The
    client-facing leg carries requests; ``serve`` calls ``linked()`` on the broker-facing one,
    which from then on shares its client leg's ``Link`` and carries responses."""

    def __init__(self, link: Link, counts: StampCounts, listen_port: int) -> None:
        super().__init__(0.0)
        self.link, self.to_broker, self.counts, self.listen_port = link, True, counts, listen_port
        self.reader: StampedReader | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if transport.get_extra_info("sockname")[1] == self.listen_port:  # the leg facing the proxy: read its
            # requests with their kernel stamps
            self.reader = StampedReader.open(asyncio.get_running_loop(), transport, self.counts, self.stamped,
                                             transport.close, lambda exc: transport.abort())  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.reader is not None:
            self.reader.stop()
        super().connection_lost(exc)

    def stamped(self, data: bytes, t: int) -> None:
        super().data_received(data)  # forwarded at once
        self.link.request_bytes(data, t)

    def linked(self) -> None:
        assert isinstance(self.peer, Leg)
        self.link, self.to_broker = self.peer.link, False

    def data_received(self, data: bytes) -> None:
        t = now_ns()
        super().data_received(data)  # forwarded at once (no delay)
        if self.to_broker:  # bytes from the proxy (no kernel stamp): a request's last byte arrived by t
            self.link.request_bytes(data, t)
        else:  # bytes from the broker: written back to the proxy now
            self.link.response_bytes(data, now_ns())


async def main(listen: int, target: int, log_path: str, keys: set[int]) -> None:
    loop = asyncio.get_running_loop()
    log = open(log_path, "w", buffering=1 << 16)  # noqa: SIM115 - closed at exit
    lags: list[int] = []
    counts = StampCounts()

    async def lag_probe() -> None:
        while True:
            t = now_ns()
            await asyncio.sleep(0.01)
            lags.append(now_ns() - t - 10_000_000)

    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    relay = loop.create_task(serve(listen, target, lambda: Leg(Link(log, keys), counts, listen)))  # prints "ready"
    probe = loop.create_task(lag_probe())
    await stop.wait()
    probe.cancel()
    relay.cancel()
    lags.sort()
    summary: dict[str, Any] = {"relay_loop_lag_p50_ns": lags[len(lags) // 2] if lags else None,
                               "relay_loop_lag_p99_ns": lags[int(len(lags) * 0.99)] if lags else None,
                               "relay_request_stamps": {"kernel": counts.kernel, "clock": counts.clock}}
    log.write(json.dumps(summary) + "\n")
    log.close()


if __name__ == "__main__":
    import uvloop

    keys = {int(k) for k in sys.argv[4:]} or {1}
    uvloop.run(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], keys))
