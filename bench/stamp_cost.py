"""What reading a socket for its kernel stamps costs, alone: a bare relay on uvloop between a
client and an echo server (three processes), its broker-facing leg read either by uvloop's
transport (``plain``) or by ``fetchlat.proxy.stamps.StampedReader``, on its Python road
(``stamped``, ``FETCHLAT_NATIVE=0``) or through the native core (``native``), in rotation.
Prints the relay's CPU per round trip of a 100-byte message.

    python bench/stamp_cost.py --round-trips 40000 --pairs 3
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fetchlat.proxy.stamps import StampCounts, StampedReader, keep_stamping_on


def echo_server(ready: Any) -> None:
    import uvloop

    async def main() -> None:
        class Echo(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.t: Any = transport

            def data_received(self, data: bytes) -> None:
                self.t.write(data)

        srv = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        ready.send(srv.sockets[0].getsockname()[1])
        await asyncio.sleep(3600)

    uvloop.run(main())


def client(port: int, n: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(n):
        s.sendall(b"x" * 100)
        s.recv(1000)
    s.close()


async def relay(mode: str, echo_port: int, n: int) -> float:
    """The relay's CPU µs per round trip."""
    loop = asyncio.get_running_loop()
    keeper = keep_stamping_on()  # both modes: the kernel stamps packets either way, as in a proxy run

    class Up(asyncio.Protocol):
        def __init__(self, down: Down) -> None:
            self.down = down

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t: Any = transport
            if mode in ("stamped", "native"):
                self.reader = StampedReader.open(loop, transport, StampCounts(), self.got, transport.close,
                                                 lambda exc: None)

        def data_received(self, data: bytes) -> None:
            self.got(data, time.monotonic_ns())

        def got(self, data: bytes, t_ns: int) -> None:
            self.down.t.write(data)

    class Down(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.t: Any = transport
            self.up: Up | None = None
            self.early: list[bytes] = []
            self.task = loop.create_task(self.connect())

        async def connect(self) -> None:
            _, up = await loop.create_connection(lambda: Up(self), "127.0.0.1", echo_port)
            self.up = up
            for d in self.early:
                up.t.write(d)

        def data_received(self, data: bytes) -> None:
            if self.up is not None:
                self.up.t.write(data)
            else:
                self.early.append(data)

    srv = await loop.create_server(Down, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    c = mp.Process(target=client, args=(port, n))
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    c.start()
    while c.is_alive():
        await asyncio.sleep(0.02)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    srv.close()
    if keeper is not None:
        keeper.close()
    return (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) / n * 1e6


def one(mode: str, n: int) -> float:
    import uvloop

    parent, child = mp.Pipe()
    echo = mp.Process(target=echo_server, args=(child,), daemon=True)
    echo.start()
    try:
        return uvloop.run(relay(mode, parent.recv(), n))
    finally:
        echo.terminate()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--round-trips", type=int, default=40000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(f"{one(a.one, a.round_trips):.2f}")
        return 0
    from fetchlat import native

    modes = ["plain", "stamped"] + (["native"] if native.core() is not None else [])
    if len(modes) == 2:
        print(f"no native core: {native.reason()}")
    got: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(a.pairs):
        for mode in modes[i % len(modes):] + modes[:i % len(modes)]:  # each goes first in turn
            env = {**os.environ, **({"FETCHLAT_NATIVE": "0"} if mode == "stamped" else {})}
            r = subprocess.run([sys.executable, __file__, "--one", mode, "--round-trips", str(a.round_trips)],
                               capture_output=True, text=True, timeout=600, check=True, env=env)
            got[mode].append(float(r.stdout.strip().splitlines()[-1]))
    for mode, xs in got.items():
        print(f"{mode:8s} relay CPU per round trip: " + " / ".join(f"{x:.1f}" for x in xs) + " µs")
    med = {m: sorted(xs)[len(xs) // 2] for m, xs in got.items()}
    print(f"stamped - plain (medians): {med['stamped'] - med['plain']:+.1f} µs per round trip (the Python road)")
    if "native" in med:
        print(f"native - plain (medians): {med['native'] - med['plain']:+.1f} µs per round trip (the native core)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
