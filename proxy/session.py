"""One proxied connection's I/O: the client-facing and broker-facing asyncio protocols.

Moves bytes, reads the clock, and carries out what the connection's ``Conversation``
(``conversation.py``) returns; it decides nothing itself. Requests are written upstream as the
very object received, then handed to the conversation; responses go through it and come back
as the segments to write. Backpressure both ways (pause_writing on one side pauses reading on
the other); a close on either side closes the other after its buffered writes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from ..protocol.events import BrokerAddress
from . import clock
from .bridges import BackWatch, FrontWatch, backed, given_to_core
from .carried import CarriedConversation
from .conversation import (
    Action,
    Close,
    Conversation,
    CoreContext,
    Learn,
    Log,
    PauseClient,
    WriteUpstream,
)
from .registry import HostPort
from .stamps import StampCounts, StampedReader
from .tls import TlsServerSide

if TYPE_CHECKING:
    from ..protocol.routed import Records


class Road(Protocol):
    """What a connection asks of the road that carries it once handed over (``relayed.RelayRoad``,
    which imports this module: named here by what it does, not imported)."""

    fronts_tls: bool  # a TLS client's session is the core's from its first byte (``front``)
    backs_tls: bool  # a TLS broker's session is the core's from its first byte (``back``, bridges.py)

    def add(self, client: CarriedSide, client_fd: int, broker_fd: int) -> int: ...

    def end(self, conn: int) -> None: ...

    def front(self, watch: FrontWatch, client_fd: int) -> tuple[int, int]: ...

    def forget(self, conn: int) -> None: ...

    def back(self, watch: BackWatch, broker_fd: int, server_name: str) -> tuple[int, int]: ...

log = logging.getLogger("fetchlat.proxy")

TCP_INFO_RTT_OFFSET: Final = 68  # struct tcp_info: 8 u8 fields, then u32s; tcpi_rtt (µs) is the 16th
TCP_INFO_LEN: Final = 104
COALESCE_BYTES: Final = 256 << 10  # pieces of a response up to this size are joined into one write


def tcp_rtt_ns(sock: object) -> int | None:
    """The kernel's smoothed RTT of a TCP socket (Linux TCP_INFO), or None (not TCP, not Linux,
    or a transport closing: uvloop's pseudo-socket of a closed transport raises ValueError for
    its descriptor of -1)."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)  # type: ignore[attr-defined]
    except (OSError, AttributeError, ValueError):
        return None
    if len(raw) < TCP_INFO_RTT_OFFSET + 4:
        return None
    return int(struct.unpack_from("I", raw, TCP_INFO_RTT_OFFSET)[0]) * 1000


def as_protocol(p: ClientSide | BrokerSide) -> asyncio.Protocol:
    """The two sides are asyncio protocols by their methods, not by inheritance: the compiled
    build makes them native classes, which cannot subclass a Python class."""
    return cast(asyncio.Protocol, p)


@dataclass
class ConnContext:
    """What a connection's I/O needs of the proxy (never the proxy itself)."""

    core: CoreContext
    sessions: set[ClientSide]
    next_conn_id: Callable[[], int]
    learn: Callable[[tuple[BrokerAddress, ...]], None]  # bind listeners for brokers before clients see them
    upstream_failed: Callable[[], None]  # a round of connection attempts failed (re-check metadata)
    upstream_lost: Callable[[ClientSide, Exception | None], None]
    log_throttled: Callable[..., None]
    waiting_upstream: list[int]  # one cell: connections holding requests for an unreachable broker
    server_tls: ssl.SSLContext | None = None
    upstream_tls: ssl.SSLContext | None = None
    upstream_server_hostname: str | None = None
    connect_timeout_s: float = 10.0
    kernel_stamps: bool = False  # read broker sockets here, for the kernel's receive stamps (stamps.py)
    stamp_counts: StampCounts = field(default_factory=StampCounts)
    relay: Road | None = None  # the native core carries plaintext connections after their first answer


class ClientSide:  # an asyncio protocol (duck-typed: a native class when compiled)
    def __init__(self, ctx: ConnContext, listener: str, upstreams: Callable[[], list[HostPort]],
                 broker_label: str) -> None:
        self.ctx = ctx
        self.listener = listener
        self.upstreams = upstreams  # asked again on every attempt: a restarted broker may have moved
        self.transport: asyncio.Transport | None = None
        self.broker: BrokerSide | None = None
        self.closed = False
        self.client_eof = False  # the client half-closed: the broker closing next is expected
        # TLS held here (made at connection_made, unless the core fronts it: an OpenSSL session
        # made for every connection the core took cost it for nothing)
        self.tls: TlsServerSide | None = None
        self.carried: CarriedSide | None = None  # the core carries this connection (relayed.py)
        # the core holds this client's TLS session from its first byte, and this side reads the
        # plaintext of the socketpair it bridges (relay/front.rs): the front's id
        self.fronted: int | None = None
        self.backed: int | None = None  # the core holds the broker's TLS session: the back's id (bridges.py)
        self._swapping = False  # the TCP transport given up for the bridge's: its loss is not the connection's
        self._bridging: asyncio.Task[None] | None = None
        self._active: Any = None  # this listener's fetchlat_connections_active, once counted in it
        self.conv = Conversation(ctx.core, conn_id=ctx.next_conn_id(), listener=listener, broker_label=broker_label,
                                 upstream=upstreams()[0], t_ns=clock.now_ns(), tls=ctx.server_tls is not None)

    @property
    def peer(self) -> str:
        return self.conv.peer

    @property
    def upstream_addr(self) -> HostPort:
        return self.conv.upstream

    # asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.fronted is None:
            peer = transport.get_extra_info("peername")
            self.conv.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
            server_tls = self.ctx.server_tls
            if server_tls is not None:
                relay = self.ctx.relay
                if relay is not None and relay.fronts_tls and self._front(relay, transport):
                    return  # the bridge's transport comes back here
                self.tls = TlsServerSide(server_tls)
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        m = self.ctx.core.observer.metrics
        m.connections.labels(self.listener).inc()
        self._active = m.connections_active.labels(self.listener)
        self._active.inc()
        self.ctx.sessions.add(self)
        asyncio.get_running_loop().create_task(connect_upstream(self))

    def _front(self, relay: Road, transport: asyncio.BaseTransport) -> bool:
        """Give the client's socket to the core, which holds its TLS session from the first byte
        (``relay/front.rs``), and read the plaintext it bridges instead: this side gets the
        bridge's transport next (``connection_made`` again). False: the core did not take it
        (the connection stays on this road, TLS here)."""
        watch = FrontWatch(self.conv, self.ctx.log_throttled)
        try:
            self.fronted, bridge = given_to_core(transport, lambda fd: relay.front(watch, fd))
        except (OSError, ValueError, AttributeError, RuntimeError):
            return False
        self._swapping = True  # the transport's loss, which comes next, is not the connection's
        loop = asyncio.get_running_loop()
        self._bridging = loop.create_task(self._take_bridge(loop, bridge))  # kept: a task held only by the loop may go
        return True

    async def _take_bridge(self, loop: asyncio.AbstractEventLoop, bridge: socket.socket) -> None:
        try:
            await loop.connect_accepted_socket(lambda: as_protocol(self), sock=bridge)
        except OSError as exc:
            log.warning("client %s via %s: the core's TLS bridge could not be read (%s); closing this connection",
                        self.peer, self.listener, exc)
            bridge.close()
            self.closed = True

    def data_received(self, data: bytes) -> None:
        t_ns = clock.now_ns()
        if self.fronted is not None and self.conv.policy.tls_pending:
            self.conv.tls_established()  # plaintext from the core: its handshake completed
        if self.tls is not None:
            data = self._tls_in(data)
            if not data:
                return
        conv = self.conv
        if conv.forwards_directly:
            self.broker.transport.write(data)  # type: ignore[union-attr]  # forward first: same object, no copy
        actions = conv.from_client(data, t_ns)
        if actions:
            self.apply(actions)

    def _tls_in(self, data: bytes) -> bytes:
        assert self.tls is not None and self.transport is not None
        was_handshaken = self.tls.handshaken
        try:
            plain, reply = self.tls.feed(data)
        except ssl.SSLError as exc:
            close = self.conv.tls_failed(self.tls.handshaken, str(exc.reason or exc))
            self.ctx.log_throttled(f"tls:{exc.reason}", logging.WARNING, "%s", close.message)
            self.transport.write(self.tls.encrypt([]))  # the alert, if any
            self.abort()
            return b""
        if reply:
            self.transport.write(reply)
        if self.tls.handshaken and not was_handshaken:
            self.conv.tls_established()
            log.debug("client %s via %s: TLS established (client certificate: %s)", self.peer, self.listener,
                      self.tls.peer_subject() or "none")
        if self.tls.closed_by_peer:
            self.close()
        return plain

    def eof_received(self) -> bool | None:
        # half-close: pass it on, keep reading responses (not over TLS: its close ends both ways)
        self.client_eof = True
        if self.tls is not None:
            return None
        if self.broker is not None and self.broker.transport is not None and self.broker.transport.can_write_eof():
            self.broker.transport.write_eof()
            return True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self._swapping:
            self._swapping = False
            return  # the TCP transport given up for the core's bridge (``_front``)
        if self.carried is not None:
            return  # the transport was dropped at the hand-over: the connection lives on in the core
        broker = self.broker
        self.forget()
        if broker is not None:
            broker.close()

    def pause_writing(self) -> None:
        self.conv.client_stalled(clock.now_ns())
        if self.broker is not None:
            self.broker.pause_reading()

    def resume_writing(self) -> None:
        self.conv.client_resumed()
        if self.broker is not None:
            self.broker.resume_reading()

    # -------------------------------------------------------------------------------
    def apply(self, actions: tuple[Action, ...]) -> None:
        """Carry out what the conversation decided."""
        for a in actions:
            if isinstance(a, WriteUpstream):
                if self.broker is not None and self.broker.transport is not None:
                    self.broker.transport.write(a.data)
            elif isinstance(a, Learn):
                self.ctx.learn(a.brokers)
            elif isinstance(a, Log):
                log.log(a.level, "%s", a.message)
            elif isinstance(a, Close):
                log.log(a.level, "%s", a.message)
                if a.abort:
                    self.abort()
                else:
                    self.close()
            elif self.transport is not None:
                if isinstance(a, PauseClient):
                    self.transport.pause_reading()
                else:
                    self.transport.resume_reading()

    def abort(self) -> None:
        if self.carried is not None:
            self.carried.end()
            return
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        if self.broker is not None:
            self.broker.abort()

    def close(self) -> None:
        if self.carried is not None:
            self.carried.end()
            return
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # the native core carries the connection (relayed.py) ----------------------------
    def may_hand_over(self) -> bool:
        """Plaintext both ways, nothing waiting in either transport, and the conversation at a
        moment the core can take it from (``Conversation.can_hand_over``)."""
        broker = self.broker
        if (self.closed or self.tls is not None or self.transport is None or broker is None
                or broker.transport is None or (self.ctx.upstream_tls is not None and self.backed is None)):
            return False
        return (not self.transport.get_write_buffer_size() and not broker.transport.get_write_buffer_size()
                and self.conv.can_hand_over)

    def hand_over(self, road: Road) -> None:
        """Give both sockets to the core: reading stops, each descriptor is duplicated for it,
        and the transports are dropped (the duplicates keep the connections open)."""
        broker = self.broker
        assert broker is not None and broker.transport is not None and self.transport is not None
        try:
            fds = [os.dup(t.get_extra_info("socket").fileno()) for t in (self.transport, broker.transport)]
        except (OSError, ValueError, AttributeError):  # a transport closing under us: stay on this road
            return
        self.transport.pause_reading()
        broker.pause_reading()
        if broker.reader is not None:
            broker.reader.stop()
        self.conv.handed_over()
        carried = CarriedSide(self)
        try:
            carried.relay_id = road.add(carried, fds[0], fds[1])
        except RuntimeError:  # the relay is closed (the proxy stopping): the connection ends here
            for fd in fds:
                os.close(fd)
            for t in (self.transport, broker.transport):
                t.abort()
            return
        self.carried = carried
        for bridged in (self.fronted, self.backed):
            if bridged is not None:
                road.forget(bridged)  # fused into the pair: the front or back has no more to say
        self.ctx.core.observer.metrics.handovers.inc()
        for t in (self.transport, broker.transport):
            t.abort()
        self.transport = broker.transport = None

    def forget(self) -> None:
        """The connection is gone, whichever road carried it: closed, and no longer counted or held.
        Its sides let go of each other (each holds the client side, which held them), so its
        objects are freed as it goes, by their counts, not by the collector's next full pass
        (``tests/integration/test_relayed.py``): a storm of connections otherwise leaves all of
        theirs until then, and the memory they held is what the next burst is given."""
        self.closed = True
        if self._active is not None:
            self._active.dec()
            self._active = None
        self.ctx.sessions.discard(self)
        self.broker = None
        self.carried = None

    def write_to_client(self, segments: list[bytes | memoryview]) -> None:
        if self.transport is None or self.closed or not segments:
            return
        n = self.conv.written(segments)
        if self.tls is not None:
            self.transport.write(self.tls.encrypt(segments))
        elif len(segments) == 1:
            self.transport.write(segments[0])
        elif n <= COALESCE_BYTES:  # one send: a client woken by a frame's first bytes reads twice
            self.transport.write(b"".join(segments))
        else:
            self.transport.writelines(segments)


async def connect_upstream(client: ClientSide) -> None:
    """Connect a client's broker. While it is unreachable (restarting, refusing) the client's
    requests are held (the conversation says how much, and how long: the principle of KIP-286,
    block a bounded time instead of failing at once); then the client connection is closed, so
    the client reconnects and retries as it does after any disconnect."""
    loop = asyncio.get_running_loop()
    ctx, conv = client.ctx, client.conv
    broker: BrokerSide | None = None
    last_error, waiting, addr = "timeout", False, conv.upstream
    while broker is None and not client.closed:
        for host, port in client.upstreams():  # the bootstrap listener may try several brokers
            timeout_ns = conv.policy.attempt_timeout_ns(clock.now_ns(), int(ctx.connect_timeout_s * 1e9))
            try:
                broker = await asyncio.wait_for(dial(client, loop, host, port), timeout=timeout_ns / 1e9)
            except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError: a failed TLS handshake
                reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else "timeout"
                last_error = f"{host}:{port}: {reason}"
                continue
            addr = (host, port)
            break
        if broker is not None or client.closed:
            break
        ctx.upstream_failed()
        delay_ns = conv.upstream_failed(clock.now_ns())
        if delay_ns is None:
            break
        if not waiting:
            waiting = True
            ctx.waiting_upstream[0] += 1
        await asyncio.sleep(delay_ns / 1e9)
    if waiting:
        ctx.waiting_upstream[0] -= 1
    if broker is None:
        if not client.closed:
            close = conv.upstream_unreachable(last_error)
            ctx.log_throttled("upstream_unreachable", logging.WARNING, "%s", close.message)
            client.close()
        return
    if client.closed:
        broker.close()
        return
    client.broker = broker
    pending, actions = conv.upstream_connected(clock.now_ns(), addr)
    if pending and broker.transport is not None:
        broker.transport.writelines(pending)
    client.apply(actions)


async def dial(client: ClientSide, loop: asyncio.AbstractEventLoop, host: str, port: int) -> BrokerSide:
    """One attempt at the client's broker: plaintext, TLS on this road, or TLS whose session the
    core holds from its ClientHello (``bridges.backed``: the core can carry it later)."""
    ctx = client.ctx
    tls, relay = ctx.upstream_tls, ctx.relay
    proto: asyncio.Protocol
    if tls is not None and relay is not None and relay.backs_tls:
        client.backed, proto = await backed(loop, relay, host, port, ctx.upstream_server_hostname or host,
                                            lambda: as_protocol(BrokerSide(client)))
    else:
        _, proto = await loop.create_connection(lambda: as_protocol(BrokerSide(client)), host, port, ssl=tls,
                                                server_hostname=(ctx.upstream_server_hostname or host) if tls
                                                else None)
    return cast(BrokerSide, proto)


class CarriedSide:
    """A client connection the native core carries (``relayed.py``), from its hand-over on: what
    the core reports of it goes to its ``CarriedConversation``, and the client side carries out
    what that returns (log lines; a close ends the connection in the core)."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.conv = CarriedConversation(client.conv)
        self.relay_id = -1  # its id in the core (set once the core took it)

    def end(self) -> None:
        relay = self.client.ctx.relay
        if relay is not None and self.relay_id >= 0 and not self.client.closed:
            relay.end(self.relay_id)

    def relayed(self, from_broker: bool, data: bytes, t_ns: int, t_written_ns: int, records: Records | None,
                client_bytes: int, broker_bytes: int, handed: bytes | None = None,
                digest: tuple[bytes, bytes, bytes] | None = None) -> None:
        actions = self.conv.read(from_broker, data, t_ns, t_written_ns, records, client_bytes, broker_bytes, handed,
                                 digest)
        if actions:
            self.client.apply(actions)

    def relayed_answer(self, frame: bytes, api: tuple[int, int], t_ns: int) -> tuple[bytes, bool, bool]:
        """An answer the core held whole: the frame it writes in its place, whether it was
        rewritten (the brokers it names learned first: their listeners open before a client sees
        them), and whether the core may repeat it (it was read)."""
        answer, changed, read, actions = self.conv.answer(frame, api, t_ns)
        if actions:
            self.client.apply(actions)
        return answer, changed, read

    def relayed_timers(self, now_ns: int, counts: tuple[int, int], client_read_ns: int, partial_since_ns: int,
                       stalled_since_ns: int, rtt_ns: int) -> None:
        self.conv.timers(now_ns, counts, client_read_ns, partial_since_ns, stalled_since_ns, rtt_ns)

    def relayed_ready(self) -> None:
        """(Only a back's handshake is reported.)"""

    def relayed_closed(self, reason: str, counts: tuple[int, int]) -> None:
        """The core closed the connection (``reason``, in its words): the broker's going reported
        as on the asyncio road, and the bookkeeping of ``connection_lost``."""
        client = self.client
        client.closed = True  # before the report: the connection must not be ended in the core again
        broker_went, refused = self.conv.ended(reason, counts)
        if refused is not None:
            log.log(refused.level, "%s", refused.message)
        elif broker_went:
            client.ctx.upstream_lost(client, None if reason == "broker closed the connection"
                                     else ConnectionError(reason))
        client.forget()


class BrokerSide:  # an asyncio protocol (duck-typed)
    """Reads responses: with kernel stamps through a ``StampedReader`` (the transport then only
    writes and closes), otherwise as the transport's protocol, stamped with the clock."""

    def __init__(self, client: ClientSide) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.reader: StampedReader | None = None
        self.read_error: OSError | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        ctx = self.client.ctx
        if ctx.kernel_stamps and ctx.upstream_tls is None:  # TLS: the transport decrypts, so it reads
            self.reader = StampedReader.open(asyncio.get_running_loop(), transport, ctx.stamp_counts,
                                             self.received, self._read_eof, self._read_failed)

    def data_received(self, data: bytes) -> None:
        self.client.ctx.stamp_counts.clock += 1
        self.received(data, clock.now_ns())

    def received(self, data: bytes, t_ns: int) -> None:
        """Response bytes whose last packet arrived at ``t_ns``."""
        client = self.client
        conv = client.conv
        segments, before = conv.from_broker(data, t_ns)
        if before:
            client.apply(before)  # learn brokers (bind listeners) before clients see them
            if client.closed:
                return
        t_out_ns: int | None = None
        if segments:
            client.write_to_client(segments)
            t_out_ns = clock.now_ns()
            # a client the core fronts is read here over a socketpair, which has no TCP RTT
            if client.fronted is None and conv.rtt_due(t_out_ns) and client.transport is not None:
                rtt = tcp_rtt_ns(client.transport.get_extra_info("socket"))
                if rtt is not None:
                    conv.client_rtt(rtt, t_out_ns)
        after = conv.after_write(t_ns, t_out_ns)  # the bookkeeping waits until the bytes are on their way
        if after:
            client.apply(after)
        relay = client.ctx.relay
        if relay is not None and client.may_hand_over():
            client.hand_over(relay)

    def _read_eof(self) -> None:
        if not self.eof_received() and self.transport is not None:
            self.transport.close()

    def _read_failed(self, exc: OSError) -> None:
        self.read_error = exc
        if self.transport is not None:
            self.transport.abort()

    def eof_received(self) -> bool | None:
        return None  # close fully; connection_lost closes the client after its writes

    def connection_lost(self, exc: Exception | None) -> None:
        reader, self.reader = self.reader, None  # it holds this side's methods: let go, not left to the collector
        if reader is not None:
            reader.stop()
        client = self.client
        if client.carried is not None:
            return  # dropped at the hand-over (session.ClientSide.hand_over)
        if not client.closed and not client.client_eof:  # the broker went first: restart, crash, or it closed on us
            client.ctx.upstream_lost(client, exc or self.read_error)
        client.close()

    def pause_reading(self) -> None:
        if self.reader is not None:
            self.reader.pause()
        elif self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.reader is not None:
            self.reader.resume()
        elif self.transport is not None:
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.client.transport is not None:
            self.client.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
