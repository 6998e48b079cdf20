"""The TLS connections the native core holds from their first byte, before their hand-over:
a TLS client's (a *front*) and a TLS broker's (a *back*), each bridged to the event loop's road
as plaintext over a socketpair (``native/src/relay/front.rs``), so that the core can carry the
connection after its first exchange as it carries a plaintext one; and what the core says of
each until then (``FrontWatch``, ``BackWatch``: the relay's drain hands them its items).

A back: the event loop connects to the broker over TCP, hands the socket to the core with the
name the broker's certificate must carry (``backed``), and waits for the core's word: ``READY``
once the handshake completed (the broker is connected, as after the event loop's own
handshake), or ``CLOSED`` with why not (``broker tls handshake failed: ...``: a failed
connection, as an ``ssl.SSLError`` is on the event loop's road, so the same attempts, holds and
counters follow). From ``READY`` the event loop's road reads and writes the broker's plaintext
over the bridge; the hand-over (``session.ClientSide.hand_over``) fuses the two in the core.

Must never: send a byte to a broker before its certificate verified (the core holds Python's
bytes until the handshake completed), or leave a socket open when the wait ends early.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, Protocol, cast

from ..protocol.routed import Records
from .conversation import Conversation
from .policy import core_tls_failure


class BackRoad(Protocol):
    """What a back asks of the relay's road (``relayed.RelayRoad``)."""

    def back(self, watch: BackWatch, broker_fd: int, server_name: str) -> tuple[int, int]: ...

    def forget(self, conn: int) -> None: ...


class Bridged:
    """What the core says of a connection it bridges before the hand-over: never its plaintext
    (that goes through the bridge), nor timers (the bridge's connection has the event loop's)."""

    def relayed(self, from_broker: bool, data: bytes, t_ns: int, t_written_ns: int, records: Records | None,
                client_bytes: int, broker_bytes: int, handed: bytes | None = None,
                digest: tuple[bytes, bytes, bytes] | None = None) -> None:
        """(A bridged connection's plaintext goes through the bridge, never the queue.)"""

    def relayed_answer(self, frame: bytes, api: tuple[int, int], t_ns: int) -> tuple[bytes, bool, bool]:
        """(Nothing is held whole before the hand-over.)"""
        return frame, False, False

    def relayed_timers(self, now_ns: int, counts: tuple[int, int], client_read_ns: int, partial_since_ns: int,
                       stalled_since_ns: int, rtt_ns: int) -> None:
        """(A bridged connection has no timers of the core's.)"""

    def relayed_ready(self) -> None:
        """(Only a back's handshake is reported.)"""

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None:
        """The core ended it before its hand-over (``reason``, in its words)."""


class FrontWatch(Bridged):
    """A TLS client's connection the core fronts: only its end, when the core ended it (a failed
    handshake, a TLS error: counted and logged as on the event loop's road; the bridge's end of
    stream closes the connection there)."""

    def __init__(self, conv: Conversation, log_throttled: Callable[..., None]) -> None:
        self.conv = conv
        self.log_throttled = log_throttled

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None:
        tls = core_tls_failure(reason)
        if tls is not None:
            close = self.conv.refuse(tls)
            self.log_throttled(f"tls:{reason[:48]}", logging.WARNING, "%s", close.message)


class BackWatch(Bridged):
    """A TLS broker connection the core backs: its handshake's outcome (``READY``, or its end)."""

    def __init__(self, outcome: asyncio.Future[None]) -> None:
        self.outcome = outcome

    def relayed_ready(self) -> None:
        if not self.outcome.done():
            self.outcome.set_result(None)

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None:
        """The back ended: before ``READY``, the connection failed (the bridge's end of stream
        closes a connection made after it)."""
        if not self.outcome.done():
            self.outcome.set_exception(ConnectionError(reason))


def given_to_core(transport: asyncio.BaseTransport, take: Callable[[int], tuple[int, int]]
                  ) -> tuple[int, socket.socket]:
    """The socket under ``transport`` given to the core: ``take`` (``Relay.front`` or ``back``)
    gets a duplicate of it, which the core owns from there, and the transport is dropped (the
    duplicate keeps the connection open): the bridged connection's id and Python's end of its
    bridge. Raises what the duplicate or ``take`` raise, the transport left as it was."""
    fd = os.dup(transport.get_extra_info("socket").fileno())
    try:
        conn, python_fd = take(fd)
    except BaseException:
        os.close(fd)
        raise
    cast(asyncio.Transport, transport).abort()  # uvloop's transports are not asyncio's subclasses
    # the core's socketpair (relay/mod.rs): its type and protocol named here, not asked of the kernel
    # (two getsockopt fewer; CPython still checks the descriptor with one getsockname)
    return conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0, python_fd)


async def backed(loop: asyncio.AbstractEventLoop, road: BackRoad, host: str, port: int, server_name: str,
                 protocol: Callable[[], asyncio.Protocol]) -> tuple[int, asyncio.Protocol]:
    """A TLS connection to ``host:port``, its session the core's, once its handshake completed:
    the back's id (the hand-over fuses it) and ``protocol()``, reading and writing its plaintext
    over the core's bridge. Raises ``OSError`` (a ``ConnectionError`` with the core's words for a
    failed handshake) as ``create_connection`` does; cancelled, it leaves nothing open."""
    transport, _ = await loop.create_connection(asyncio.Protocol, host, port)
    outcome: asyncio.Future[None] = loop.create_future()
    try:
        back, bridge = given_to_core(transport, lambda fd: road.back(BackWatch(outcome), fd, server_name))
    except (RuntimeError, ValueError, OSError, AttributeError) as exc:
        transport.abort()
        raise ConnectionError(f"the native core did not take the broker connection: {exc}") from None
    try:
        await outcome
        proto: Any
        _, proto = await loop.connect_accepted_socket(protocol, sock=bridge)
    except BaseException:
        bridge.close()  # the back ends with it ("closed by the proxy")
        road.forget(back)
        raise
    return back, proto
