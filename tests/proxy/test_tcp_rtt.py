"""The client's TCP round trip (``session.tcp_rtt_ns``) is read after a response is written; a
transport closing meanwhile must give None, never an exception in the broker's read callback
(uvloop's pseudo-socket of a closed transport raises ValueError for its descriptor of -1: seen
under a churn of short connections at a proxy's stop)."""

from __future__ import annotations

import asyncio
import socket

import uvloop
from fetchlat.proxy.session import tcp_rtt_ns


def test_a_live_tcp_socket_has_an_rtt_and_a_closed_transport_gives_none() -> None:
    async def run() -> tuple[int | None, int | None]:
        got: list[object] = []
        writers: list[asyncio.StreamWriter] = []

        async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            got.append(w.transport)
            writers.append(w)  # kept: since Python 3.13 a writer collected closes its transport

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        _r, w = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        await asyncio.sleep(0.05)
        transport = got[0]
        pseudo = transport.get_extra_info("socket")  # type: ignore[attr-defined]
        live = tcp_rtt_ns(pseudo)
        transport.abort()  # type: ignore[attr-defined]
        await asyncio.sleep(0.01)
        closed = tcp_rtt_ns(pseudo)
        w.close()
        server.close()
        return live, closed

    live, closed = uvloop.run(run())
    assert live is not None and live >= 0
    assert closed is None


def test_not_a_tcp_socket_gives_none() -> None:
    a, b = socket.socketpair()
    try:
        assert tcp_rtt_ns(a) is None
        assert tcp_rtt_ns(object()) is None
    finally:
        a.close()
        b.close()
